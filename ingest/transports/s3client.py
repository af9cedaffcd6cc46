"""One way to make a boto3 S3 client, shared by presign, upload and the S3 transport.

Credentials, endpoint and region come from boto3's standard chain (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, ~/.aws/...) unless given.
"""
from __future__ import annotations

import os
import threading

import boto3
from botocore.config import Config


def s3_config(max_pool_connections: int = 10, **config_kw) -> Config:
    """botocore Config with SigV4 and path-style addressing; max_pool_connections default 10."""
    # SigV4: without it boto3 still presigns in the old SigV2 form, which versitygw (and
    # newer AWS regions) answer with 400. Path style: a loopback or on-site endpoint has no
    # wildcard DNS for bucket.host names.
    options = {"signature_version": "s3v4", "max_pool_connections": max_pool_connections, **config_kw}
    options["s3"] = {"addressing_style": "path", **(config_kw.get("s3") or {})}
    return Config(**options)


def s3_client(max_pool_connections: int = 10, *, config: Config | None = None,
              session: boto3.session.Session | None = None, **kw):
    """boto3 S3 client (SigV4, path style); kw: client args (endpoint_url, verify, ...) or Config options (read_timeout, ...)."""
    # One flat keyword list for callers: Config options (timeouts, retries) go to Config,
    # the rest (endpoint_url, keys, region_name, verify) to session.client.
    config_kw = {name: kw.pop(name) for name in list(kw) if name in Config.OPTION_DEFAULTS}
    merged = s3_config(max_pool_connections, **config_kw)
    if config is not None:
        merged = merged.merge(config)
    # A private Session: boto3's module-level default session is not thread-safe to create.
    session = session or boto3.session.Session()
    return session.client("s3", config=merged, **kw)


_CLIENTS: dict = {}
_CLIENTS_LOCK = threading.Lock()


def shared_s3_client(max_pool_connections: int = 10, **kw):
    """A process-wide cached s3_client for the same options and AWS_* environment.

    Making a boto3 client costs 0.1-0.2 s (measured here), more than a small read; clients are
    thread-safe, so repeated reads in one process share one. The environment is part of the
    key so a changed endpoint or key never reuses a stale client.
    """
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    key = (max_pool_connections, repr(sorted(kw.items())), env)  # repr: values may be dicts
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = s3_client(max_pool_connections, **kw)
    return client


def have_credentials() -> bool:
    """True when boto3's standard chain finds keys (environment, profile, instance role)."""
    return boto3.session.Session().get_credentials() is not None
