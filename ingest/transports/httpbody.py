"""Shared by the HTTP and S3 transports: check a ranged reply and stream its body in place."""
from __future__ import annotations

import re

import socket

from ingest.errors import RetryableError, TransportError

RESUME_GRAIN_BYTES = 256 << 10  # at most this much of a broken body is fetched twice
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def range_header(offset: int, nbytes: int) -> str:
    """Half-open [offset, offset+nbytes) -> the inclusive HTTP Range header value."""
    return f"bytes={offset}-{offset + nbytes - 1}"


def check_content_range(value: str | None, offset: int, nbytes: int, name: str) -> int | None:
    """Refuse a reply whose Content-Range is not the range asked for; return the total size."""
    m = _CONTENT_RANGE.match((value or "").strip())
    if not m:
        raise TransportError(f"{name}: reply to a range request has no valid Content-Range ({value!r})")
    first, last, total = int(m.group(1)), int(m.group(2)), m.group(3)
    if first != offset or last != offset + nbytes - 1:
        raise TransportError(
            f"{name}: asked for bytes {offset}-{offset + nbytes - 1} but the server sent {first}-{last}"
        )
    return None if total == "*" else int(total)


def read_body_into(raw, buffer: memoryview, name: str, offset: int) -> None:
    """Read exactly len(buffer) body bytes of urllib3 response `raw` into `buffer`.

    urllib3's own readinto reads into a temporary bytes and copies; the http.client response
    underneath it reads straight into our buffer, which is the zero-copy path the output
    array needs. Only used with decode_content off, so the bytes are the object's bytes.
    """
    n = len(buffer)
    fp = getattr(raw, "_fp", None)
    reader = fp.readinto if fp is not None and hasattr(fp, "readinto") else raw.readinto
    got = 0
    try:
        while got < n:
            # Bounded slices: a buffered reader fills the whole slice before returning, so on a
            # reset the bytes of an unbounded slice would arrive uncounted and be fetched again.
            k = reader(buffer[got : got + RESUME_GRAIN_BYTES])
            if not k:
                break
            got += k
    except Exception as exc:  # socket and protocol errors: the body broke, what arrived is good
        kind = "timeout" if _is_timeout(exc) else "reset"
        raise RetryableError(
            f"{name}: connection {'stalled' if kind == 'timeout' else 'broke'} after {got} of {n} bytes "
            f"at offset {offset}: {type(exc).__name__}",
            kind=kind,
            received=got,
        ) from exc
    if got != n:
        raise RetryableError(f"{name}: body ended after {got} of {n} bytes at offset {offset}",
                             kind="truncated", received=got)


def _is_timeout(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, (socket.timeout, TimeoutError)) or "timeout" in type(exc).__name__.lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# Statuses that say "not now" rather than "no": S3's 503 SlowDown, gateway hiccups, throttling.
RETRYABLE_STATUS = {429, 500, 502, 503, 504}


def s3_error_code(body: str) -> str:
    """The <Code> of an S3 XML error body, if any (e.g. AccessDenied, SlowDown)."""
    start, end = body.find("<Code>"), body.find("</Code>")
    return body[start + 6 : end] if 0 <= start < end else ""
