"""POSIX files: pread into the caller's buffer. Also the staging baseline's reader."""
from __future__ import annotations

import os
import time

from ingest.errors import TransportError
from ingest.transports.base import ObjectInfo, Transport


class PosixTransport(Transport):
    """A local or shared-filesystem file read with pread (no seek state shared by threads)."""

    name = "posix"

    def __init__(self, source: str, *, threads: int = 1, direct: bool = False, **_ignored):
        super().__init__(source, threads=threads)
        try:
            self._fd = os.open(source, os.O_RDONLY)
        except OSError as exc:
            raise TransportError(f"{source}: cannot open for reading: {exc.strerror}") from None

    def _stat(self) -> ObjectInfo:
        st = os.fstat(self._fd)
        return ObjectInfo(st.st_size, etag=None, last_modified=str(st.st_mtime_ns))

    def read_into(self, buffer: memoryview, offset: int) -> float:
        n = len(buffer)
        self._check_range(offset, n)
        t0 = time.perf_counter()
        first = None
        got = 0
        while got < n:
            k = os.preadv(self._fd, [buffer[got:]], offset + got)
            if first is None:
                first = time.perf_counter() - t0
            if k == 0:
                raise TransportError(f"{self.source}: file ended at byte {offset + got}, expected {offset + n}")
            got += k
        return first or 0.0

    def drop_cache(self) -> None:
        """Ask the kernel to forget this file's cached pages, so a timed read hits the disk."""
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
