"""Files that are complete or absent: write to a temporary name beside the target, make the
bytes durable, then rename. A crash or an error never leaves a truncated file that looks valid."""
from __future__ import annotations

import ctypes
import os
import zlib
from contextlib import contextmanager

_LIBC = ctypes.CDLL(None, use_errno=True)
_SYNCFS = getattr(_LIBC, "syncfs", None)  # Linux: sync one filesystem, not every mount of the node


def remove_quietly(path: str) -> None:
    """Unlink `path` if it exists."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fsync_dir(directory: str) -> None:
    """Make a rename in `directory` durable; not every filesystem lets a directory be fsynced."""
    try:
        fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def sync_filesystems(directories) -> None:
    """Write out the dirty data of the filesystems holding `directories`, each once, and wait.
    syncfs where the C library has it: sync() would also wait on every other mount of the node
    (a shared filesystem's other jobs, a hung NFS server), which a job's own files do not need."""
    if _SYNCFS is None:
        os.sync()
        return
    seen = set()
    for directory in directories:
        fd = os.open(directory or ".", os.O_RDONLY)
        try:
            device = os.fstat(fd).st_dev
            if device in seen:
                continue
            seen.add(device)
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs of {directory}: {os.strerror(err)}")
        finally:
            os.close(fd)


def publish(tmp_path: str, final_path: str) -> None:
    """fsync `tmp_path`, rename it to `final_path` (atomically replacing any old file), fsync the
    directory. The data is durable before the name appears, and the name survives a crash."""
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp_path, final_path)
    fsync_dir(os.path.dirname(os.path.abspath(final_path)))


@contextmanager
def atomic_write(final_path: str, tmp_path: str, mode: str = "wb", **open_kw):
    """Yield a file open for writing on `tmp_path` (same directory as `final_path`, so the
    rename is atomic); publish it on a clean exit, remove it on any error."""
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # 0o666 & umask
    try:
        with os.fdopen(fd, mode, **open_kw) as fh:
            yield fh
        publish(tmp_path, final_path)
    except BaseException:
        remove_quietly(tmp_path)
        raise


class DurableBatch:
    """Many files made complete-or-absent together, at the cost of one sync: each is written under
    a temporary name (`write`), then `publish` makes every byte durable with one sync of the
    filesystem they are on (sync_filesystems), renames them all and fsyncs each directory once.
    A file fsynced and renamed one by one costs a journal commit each, which for thousands of
    small cut-outs is most of the job."""

    def __init__(self):
        self.pending: list[tuple[str, str]] = []  # (tmp_path, final_path)
        self.crc32s: dict[str, int] = {}  # final_path: CRC-32 of the bytes written (binary files)

    @contextmanager
    def write(self, final_path: str, tmp_path: str, mode: str = "wb", **open_kw):
        """Yield a file open on `tmp_path`; kept for `publish` on a clean exit, removed on an error.
        In a binary mode it is a writer that sums what passes through it (`crc32_of`), so nobody
        reads the file back to learn its checksum."""
        fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            if "b" in mode and not open_kw:
                out = _Summed(fd)
                try:
                    yield out
                finally:
                    os.close(fd)
            else:
                with os.fdopen(fd, mode, **open_kw) as out:
                    yield out
        except BaseException:
            remove_quietly(tmp_path)
            raise
        self.pending.append((tmp_path, final_path))
        if isinstance(out, _Summed):
            self.crc32s[final_path] = out.crc32

    def take(self) -> "DurableBatch":
        """A batch holding every file written so far (to publish elsewhere, e.g. on another thread);
        this one is left empty for the files that follow."""
        taken = DurableBatch()
        taken.pending, self.pending = self.pending, []
        taken.crc32s, self.crc32s = self.crc32s, {}
        return taken

    def crc32_of(self, final_path: str) -> int | None:
        """The CRC-32 of a binary file this batch wrote (and forgets it); None if it wrote none."""
        return self.crc32s.pop(final_path, None)

    def publish(self) -> list[str]:
        """Make the batch durable and give every file its final name; the final paths."""
        if not self.pending:
            return []
        directories = {os.path.dirname(os.path.abspath(final_path)) for _, final_path in self.pending}
        sync_filesystems(sorted(directories))
        for tmp_path, final_path in self.pending:
            os.replace(tmp_path, final_path)
        for directory in directories:
            fsync_dir(directory)
        done = [final for _, final in self.pending]
        self.pending = []
        return done

    def discard(self) -> None:
        """Remove every file not yet published."""
        for tmp_path, final_path in self.pending:
            remove_quietly(tmp_path)
            self.crc32s.pop(final_path, None)
        self.pending = []


class _Summed:
    """A binary file's writes, straight to its descriptor (no buffered file object: a cut-out is
    a few writes of whole parts), and the CRC-32 of every byte so far."""

    def __init__(self, fd: int):
        self.fd, self.crc32 = fd, 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.crc32 = zlib.crc32(view, self.crc32)
        done = 0
        while done < len(view):  # a write may take less than it was given (signals, 2 GiB caps)
            done += os.write(self.fd, view[done:])
        return done
