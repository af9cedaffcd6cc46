"""The one transport interface: an object's size, and `read_into(buffer, offset)`.

Transports do I/O and nothing else: they never plan, retry policy lives in the executor, and
they fill the caller's buffer in place so a fully-needed request lands in the output array
with no intermediate copy (the IOR `xfer(buf, length, offset)` shape).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

from ingest.errors import TransportError

# Reads at least this large are bulk: bound by copying bytes, not by issuing requests. A
# concurrent transport (the native engine) takes many small reads in flight from one thread and
# leaves bulk reads to threads that receive straight into their buffers in parallel.
BULK_READ_BYTES = 4 << 20


@dataclass(frozen=True)
class ObjectInfo:
    """What a transport learns about its object on open: size and identity (for pinning)."""

    object_bytes: int
    etag: str | None = None
    last_modified: str | None = None
    # The Server header of the reply that gave size and identity (what the store calls itself,
    # for info and the report: ingest.transports.storefacts); "" when the store sent none, None
    # when no reply was seen here (a local file, or size and identity adopted from rank 0).
    server: str | None = None


class Transport(abc.ABC):
    """Reads byte ranges of one object. Thread-safe: executor threads share one instance.

    Every capability the engine uses is declared here, as IOR's backend table lists every call:
    a transport that lacks one leaves the default, and callers test the declared attribute,
    never the object's shape.
    - `read_into(buffer, offset)`: required; fill a buffer from an offset.
    - `concurrent` / `open_session(depth)`: many reads in flight from one thread (the native
      engine); the executor sends small requests there and bulk reads to threads.
    - `engine`: what carries the requests, for info and reports (native, urllib3, boto3, posix).
    - `adopt(info)`: take the size and identity rank 0 learned, saving a request per rank.
    - `environment`: the connection settings it was opened with (ingest.transports.environment),
      which rank 0 hands to the other ranks; None for a transport that makes no connection.
    """

    name = "abstract"
    # True when open_session(depth) works: many reads in flight from one thread
    # (ingest.engine.multi); the executor then takes small requests there.
    concurrent = False
    environment = None  # an Environment, set by the network transports

    def __init__(self, source: str, *, threads: int = 1):
        self.source = source
        self.threads = threads
        self._info: ObjectInfo | None = None

    @property
    def engine(self) -> str:
        """What issues this transport's requests (info, reports): native, urllib3, boto3, posix;
        a transport that names no engine of its own is its own engine."""
        return self.name

    @property
    def display_name(self) -> str:
        """The source as it may appear in messages and reports (no secrets)."""
        return self.source

    @property
    def endpoint(self) -> str | None:
        """Where the requests go (scheme://host:port): what a link measured earlier is kept
        under (ingest.engine.linkcache). None for a local file, which has no link."""
        return None

    @property
    def info(self) -> ObjectInfo:
        if self._info is None:
            self._info = self._stat()
        return self._info

    def adopt(self, info: ObjectInfo) -> None:
        """Take size and identity learned elsewhere (rank 0), saving this rank a request."""
        self._info = info

    @property
    def object_bytes(self) -> int:
        return self.info.object_bytes

    @abc.abstractmethod
    def _stat(self) -> ObjectInfo:
        """Find the object's size and identity (one request at most)."""

    @abc.abstractmethod
    def read_into(self, buffer: memoryview, offset: int) -> float:
        """Fill all of `buffer` with the object's bytes from `offset`; return seconds to first byte.

        Raises TransportError (with the object named) when the bytes cannot all be read.
        """

    def open_session(self, depth: int) -> "Session":
        """A session with up to `depth` reads in flight from the calling thread; only where
        `concurrent` is True."""
        raise NotImplementedError(f"{self.name} transport ({self.engine}) has no concurrent sessions")

    def close(self) -> None:
        """Release connections and files."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_range(self, offset: int, nbytes: int) -> None:
        end = offset + nbytes
        if offset < 0 or end > self.object_bytes:
            raise TransportError(
                f"{self.display_name}: range [{offset}, {end}) is outside the object ({self.object_bytes} bytes)"
            )


class Session(abc.ABC):
    """Reads in flight from one thread (a concurrent transport's `open_session(depth)`); the
    loop in ingest.engine.multi drives it."""

    @abc.abstractmethod
    def start(self, key, buffer: memoryview, offset: int) -> None:
        """Begin filling `buffer` from `offset`; `key` names the read in `wait`'s answers."""

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> list:
        """Reads finished within `timeout_s`: [(key, seconds to first byte, error or None)]."""

    @abc.abstractmethod
    def close(self) -> None:
        """Abandon reads still in flight and release the session's connections."""


class MemoryTransport(Transport):
    """An object held in memory: the do-nothing backend that lets the planner and executor be
    tested exhaustively without a server (IOR's DUMMY)."""

    name = "memory"

    def __init__(self, data, source: str = "memory", *, threads: int = 1):
        super().__init__(source, threads=threads)
        self._data = memoryview(data).cast("B")
        self.requests = 0

    def _stat(self) -> ObjectInfo:
        return ObjectInfo(len(self._data))

    def read_into(self, buffer: memoryview, offset: int) -> float:
        n = len(buffer)
        self._check_range(offset, n)
        buffer[:] = self._data[offset : offset + n]
        self.requests += 1
        return 0.0
