"""POSIX files: pread into the caller's buffer. Also the staging baseline's reader.

`direct=True` opens with O_DIRECT so a timed read of a staged cube comes from the disk (or the
shared filesystem's servers), not from this node's page cache. O_DIRECT wants the file offset,
the length and the buffer address aligned to the device's logical block, so each range is
widened to ALIGN_BYTES boundaries, read into a page-aligned per-thread buffer (an anonymous
mmap: page-aligned by construction, which a bytearray or numpy array is not) and the wanted
bytes are copied out. One memcpy costs far less than the disk read it follows.
"""
from __future__ import annotations

import errno
import mmap
import os
import threading
import time

from ingest.errors import ObjectChangedError, TransportError
from ingest.transports.base import ObjectInfo, Transport

ALIGN_BYTES = 4096  # >= every logical block size in use (512 B disks, 4 KiB "4Kn" disks)
DIRECT_BUFFER_BYTES = 16 << 20  # per-thread bounce buffer for O_DIRECT; larger ranges loop


class DirectIOUnsupportedError(TransportError):
    """The filesystem refused O_DIRECT (EINVAL): the caller may retry without direct=True."""


class PosixTransport(Transport):
    """A local or shared-filesystem file read with pread (no seek state shared by threads).

    direct: bypass the page cache with O_DIRECT (default False). Raises
    DirectIOUnsupportedError where the filesystem refuses it, rather than silently reading
    through the cache: a baseline served from memory would be a wrong measurement.
    """

    name = "posix"

    def __init__(self, source: str, *, threads: int = 1, direct: bool = False,
                 direct_buffer_bytes: int = DIRECT_BUFFER_BYTES, **_ignored):
        super().__init__(source, threads=threads)
        self.direct = bool(direct)
        self._fd = None
        flags = os.O_RDONLY
        if self.direct:
            if not hasattr(os, "O_DIRECT"):
                raise DirectIOUnsupportedError(f"{source}: O_DIRECT is not available on this platform; read without direct")
            if direct_buffer_bytes < ALIGN_BYTES or direct_buffer_bytes % ALIGN_BYTES:
                raise TransportError(
                    f"direct_buffer_bytes: {direct_buffer_bytes} must be a positive multiple of {ALIGN_BYTES} bytes"
                )
            flags |= os.O_DIRECT
        self._direct_buffer_bytes = direct_buffer_bytes
        self._local = threading.local()  # each executor thread gets its own bounce buffer
        try:
            self._fd = os.open(source, flags)
        except OSError as exc:
            if self.direct and exc.errno == errno.EINVAL:
                raise _refused(source) from None
            raise TransportError(f"{source}: cannot open for reading: {exc.strerror}") from None

    def _stat(self) -> ObjectInfo:
        st = os.fstat(self._fd)
        return ObjectInfo(st.st_size, etag=None, last_modified=str(st.st_mtime_ns))

    def read_into(self, buffer: memoryview, offset: int) -> float:
        n = len(buffer)
        self._check_range(offset, n)
        if self.direct:
            ttfb_s = self._read_direct(buffer, offset)
        else:
            ttfb_s = self._read_buffered(buffer, offset)
        self._check_unchanged()
        return ttfb_s

    def _check_unchanged(self) -> None:
        """A file rewritten under a running job (size or mtime changed) must not be mixed in."""
        if self._info is None:
            return
        st = os.fstat(self._fd)
        if st.st_size != self._info.object_bytes or str(st.st_mtime_ns) != self._info.last_modified:
            raise ObjectChangedError(f"{self.source}: file changed since the run started (size or mtime); "
                                     "stopping rather than mixing two versions")

    def _read_buffered(self, buffer: memoryview, offset: int) -> float:
        n = len(buffer)
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

    def _bounce(self) -> memoryview:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            # Anonymous mappings are page-aligned and only touched pages cost memory.
            buf = self._local.buf = memoryview(mmap.mmap(-1, self._direct_buffer_bytes))
        return buf

    def _read_direct(self, buffer: memoryview, offset: int) -> float:
        """Read [offset, offset+len) through aligned O_DIRECT preads and copy the wanted bytes out."""
        n = len(buffer)
        bounce = self._bounce()
        t0 = time.perf_counter()
        first = None
        got = 0
        while got < n:
            pos = offset + got
            start = pos - pos % ALIGN_BYTES
            lead = pos - start
            want = min(n - got, self._direct_buffer_bytes - lead)
            span = -(-(lead + want) // ALIGN_BYTES) * ALIGN_BYTES  # <= buffer size: both aligned
            try:
                # At end of file O_DIRECT returns a short, unaligned count: that is fine here.
                k = os.preadv(self._fd, [bounce[:span]], start)
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # some filesystems accept the open, refuse the read
                    raise _refused(self.source) from None
                raise TransportError(f"{self.source}: O_DIRECT read at byte {start} failed: {exc.strerror}") from None
            if first is None:
                first = time.perf_counter() - t0
            usable = min(k - lead, want)
            if usable <= 0:
                raise TransportError(f"{self.source}: file ended at byte {start + k}, expected {offset + n}")
            buffer[got : got + usable] = bounce[lead : lead + usable]
            got += usable
        return first or 0.0

    def drop_cache(self) -> None:
        """Ask the kernel to forget this file's cached pages, so a timed read hits the disk.

        Only clean pages are dropped: a file just written must be fsynced first (stage.finalize does).
        """
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _refused(source: str) -> DirectIOUnsupportedError:
    return DirectIOUnsupportedError(
        f"{source}: this filesystem refuses O_DIRECT (EINVAL); read without direct=True and drop the "
        "file from the page cache instead (posix_fadvise DONTNEED), or stage to a disk-backed filesystem"
    )
