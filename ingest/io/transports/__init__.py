"""Transport registry: a method name -> the class that reads with it."""
from __future__ import annotations

from ingest.errors import ConfigError
from ingest.io.transports.base import MemoryTransport, ObjectInfo, Transport
from ingest.io.transports.http import HttpTransport
from ingest.io.transports.posix import PosixTransport
from ingest.io.transports.s3 import S3Transport

TRANSPORTS: dict[str, type[Transport]] = {
    "posix": PosixTransport,
    "presigned": HttpTransport,
    "s3": S3Transport,
}


def method_for(source: str) -> str:
    """The natural method for a source: s3:// -> s3, http(s):// -> presigned, else posix."""
    if source.startswith("s3://"):
        return "s3"
    if source.startswith(("http://", "https://")):
        return "presigned"
    return "posix"


def open_transport(source: str, method: str = "auto", *, threads: int = 1, **options) -> Transport:
    """Open `source` with `method` ("auto" picks from the source's form)."""
    if method == "auto":
        method = method_for(source)
    cls = TRANSPORTS.get(method)
    if cls is None:
        raise ConfigError(f"method: {method!r} is not one of auto, {', '.join(TRANSPORTS)}")
    natural = method_for(source)
    if natural != method:
        raise ConfigError(
            f"method: {method!r} cannot read {source if natural != 'presigned' else 'an http(s) URL'} "
            f"(that needs {natural!r}; for an s3:// source the driver presigns it for 'presigned')"
        )
    return cls(source, threads=threads, **options)


__all__ = ["MemoryTransport", "ObjectInfo", "Transport", "TRANSPORTS", "open_transport", "method_for"]
