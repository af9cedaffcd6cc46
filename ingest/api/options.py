"""Strict keyword options for the Python entry points (`ingest.open`, `read_subcube`, `driver.run`).

A misspelt option (`chunk_byte=`, `thread=`) that is silently ignored reads with the defaults
and looks like a slow link, so every entry point refuses a name it does not know, as Python
does for a missing parameter, and says which valid name was probably meant, as the config
file does for its keys.
"""
from __future__ import annotations

import inspect
from typing import Iterable

from ingest.config import did_you_mean

# What the transports take besides the source, passed through unchanged (see ingest/transports/):
# TLS and timeouts (presigned, s3), an S3 endpoint or a ready boto3 client (s3), a callable that
# re-signs an expired URL (presigned), O_DIRECT reads (posix), and the HTTP engine choice.
TRANSPORT_OPTIONS = ("endpoint_url", "verify_tls", "ca_bundle", "connect_timeout_s", "read_timeout_s", "client",
                     "refresh_url", "engine", "direct", "direct_buffer_bytes")


def keyword_names(func) -> tuple[str, ...]:
    """The named parameters of `func` (what its own signature accepts, **kwargs aside)."""
    return tuple(name for name, p in inspect.signature(func).parameters.items()
                 if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))


def refuse_unknown(entry_point: str, options: dict, known: Iterable[str]) -> None:
    """Raise TypeError naming the first of `options` not in `known`, with the closest valid name."""
    known = tuple(known)
    for name in options:
        if name not in known:
            raise TypeError(f"{entry_point}() got an unexpected keyword argument {name!r}{did_you_mean(name, known)}")
