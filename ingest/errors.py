"""Exceptions raised by ingest. Every message names the object, field or file at fault."""


class IngestError(Exception):
    """Base class: a problem the user can act on (bad input, bad object, refused request)."""


class ConfigError(IngestError):
    """A configuration value is invalid; the message names the field and its unit."""


class FitsFormatError(IngestError):
    """The object is not a FITS file ingest can read (not FITS, table, compressed, truncated)."""


class RegionError(IngestError):
    """The requested region is empty, malformed or outside the cube."""


class TransportError(IngestError):
    """A read failed or a server answered something other than what was asked."""


class RangeNotSupportedError(TransportError):
    """The server answered a Range request with the whole object (status 200)."""


class RetryableError(TransportError):
    """A transient failure (reset, timeout, truncated body, 5xx, SlowDown). `received` bytes of
    the request had arrived intact before it, so a retry resumes after them."""

    def __init__(self, message: str, *, kind: str, received: int = 0):
        super().__init__(message)
        self.kind = kind  # short fault name for the report: reset, timeout, truncated, http_503...
        self.received = received


class ObjectChangedError(TransportError):
    """The object is no longer the version the run started with (ETag/mtime changed)."""


class ExpiredURLError(TransportError):
    """A presigned URL's lifetime ran out."""
