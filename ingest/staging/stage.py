"""The staging baseline (seed 001 s2-4): copy the whole object to a filesystem, then read it there.

This is the workflow direct ingest has to beat, so it is done well, not as a straw man: a
parallel ranged download (the same planner, executor and transports as direct ingest),
optionally split across ranks, written zero-copy into a memory map of the destination file.
No MPI here: the driver decides who calls what, in this order:

    rank 0:     check_space -> prepare                      (then broadcast tmp_path)
    every rank: download_part(part=rank, n_parts=size)      (then barrier)
    rank 0:     finalize   (or abort, if any rank failed)

With another tool (`stage_with`: s5cmd, rclone, a command template) rank 0 alone runs it:

    rank 0:     check_space -> new_temp_path -> download_with_tool -> finalize

A staged file is complete or absent: bytes land in a temporary file next to the final one,
which becomes the final name only after an fsync, by an atomic rename.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import math
import os
import time
import uuid
from urllib.parse import unquote, urlsplit

from ingest.atomic import publish
from ingest.errors import ConfigError, IngestError
from ingest.engine.destination import mirror_file
from ingest.engine.executor import ReadStats, execute
from ingest.core.lattice import Lattice, Plan
from ingest.transports.presign import parse_s3_uri
from ingest.transports.base import Transport
from ingest.transports.posix import PosixTransport
from ingest.units import format_bytes

PAGE_BYTES = 4096  # parts are written through mmap, which dirties whole pages
TMP_SUFFIX = ".part"


def contiguous_plan(offset: int, nbytes: int, chunk_bytes: int) -> Plan:
    """A plan reading bytes [offset, offset+nbytes) as one run in requests of <= chunk_bytes."""
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes: {chunk_bytes} must be at least 1 byte")
    if nbytes < 1 or offset < 0:
        raise ConfigError(f"staging range: [{offset}, {offset + nbytes}) must be a non-empty range of bytes")
    # No outer axes: the whole range is one run, and byte mode cuts it into chunk-sized pieces.
    lattice = Lattice(base=offset, counts=(), strides=(), axes=(), run_bytes=nbytes)
    return Plan(lattice, level=0, group=chunk_bytes, byte_mode=True, strategy="contiguous",
                chunk_bytes=chunk_bytes, max_gap_bytes=0)


def part_range(object_bytes: int, part: int, n_parts: int, chunk_bytes: int) -> tuple[int, int]:
    """Bytes [start, stop) of part `part` of `n_parts`: equal shares of whole chunks (may be empty).

    With several parts the boundaries are also page multiples: ranks on different nodes then
    never dirty the same page of the shared file through their memory maps (NFS, for one,
    writes back whole pages and would lose the other rank's bytes).
    """
    if not 0 <= part < n_parts:
        raise ConfigError(f"part: {part} is not in 0..{n_parts - 1}")
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes: {chunk_bytes} must be at least 1 byte")
    unit = chunk_bytes if n_parts == 1 else math.lcm(chunk_bytes, PAGE_BYTES)
    n_units = -(-object_bytes // unit)
    start = min(object_bytes, part * n_units // n_parts * unit)
    stop = min(object_bytes, (part + 1) * n_units // n_parts * unit)
    return start, stop


def check_space(stage_dir: str, object_bytes: int, *, field: str = "stage_dir",
                purpose: str = "staging the object") -> None:
    """Refuse (IngestError, naming `field`) when stage_dir's filesystem has fewer than object_bytes free.

    A stage_dir that does not exist yet is judged by its nearest existing parent, the
    filesystem it will be created on (prepare creates it).
    """
    probe = os.path.abspath(stage_dir)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise IngestError(f"{field}: {stage_dir} is not a directory ({probe} is a file)")
    try:
        st = os.statvfs(probe)
    except OSError as exc:
        raise IngestError(f"{field}: cannot inspect {stage_dir}: {exc.strerror}") from None
    # f_bavail, not f_bfree: the blocks reserved for root are not ours to fill, even as root.
    free_bytes = st.f_bavail * st.f_frsize
    if free_bytes < object_bytes:
        raise IngestError(
            f"{field}: {stage_dir} has {format_bytes(free_bytes)} ({free_bytes} bytes) free, but {purpose} "
            f"needs {format_bytes(object_bytes)} ({object_bytes} bytes); nothing was downloaded"
        )


def staged_path(stage_dir: str, source_name: str) -> str:
    """Where `source_name` (path, URL or s3:// URI) is staged: stage_dir/<object's basename>."""
    if source_name.startswith("s3://"):
        key = parse_s3_uri(source_name)[1]  # an S3 key may hold a literal '?': not a query
    elif source_name.startswith(("http://", "https://")):
        key = unquote(urlsplit(source_name).path)  # drop the presigned query string
    else:
        key = source_name
    name = key.rsplit("/", 1)[-1]  # a key ending in "/" names a prefix, not an object
    if name in ("", ".", ".."):
        raise ConfigError(f"source: cannot derive a file name to stage to from {source_name!r}")
    return os.path.join(stage_dir, name)


def prepare(stage_dir: str, final_path: str, object_bytes: int) -> str:
    """Create the temporary file next to final_path, object_bytes long; return its path.

    Creates the directory if needed.
    """
    tmp_path = new_temp_path(stage_dir, final_path)
    fd = os.open(tmp_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.ftruncate(fd, object_bytes)
        _reserve_blocks(fd, object_bytes, tmp_path)
    except BaseException:
        os.close(fd)
        abort(tmp_path)
        raise
    os.close(fd)
    return tmp_path


def new_temp_path(stage_dir: str, final_path: str) -> str:
    """A fresh temporary name next to final_path (the file is not created); creates the directory.

    A copy tool gets a name rather than a pre-sized file: s5cmd (and rclone) write their own
    temporary in the destination's directory and rename it onto the destination, and an empty
    pre-sized file would pass the size check even if a tool exited 0 without writing anything.
    """
    directory = os.path.dirname(final_path) or stage_dir
    os.makedirs(directory, exist_ok=True)
    # Unique, hidden, and in the same directory: the final rename must not cross filesystems.
    return os.path.join(directory, f".{os.path.basename(final_path)}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}")


def download_with_tool(command, tmp_path: str, object_bytes: int, source_shown: str) -> None:
    """Run a copy tool (a stage_tools.StageCommand) that writes tmp_path, check that it wrote the
    whole object, and make the bytes durable. On any failure nothing is left behind.

    The fsync is part of the copy, as in download_part: ingest's own download is timed up to
    its fsync, so a tool that leaves dirty pages behind must not look faster for it.
    """
    from ingest.staging.tools import run_tool

    try:
        run_tool(command, source_shown)
        try:
            size_bytes = os.stat(tmp_path).st_size
        except FileNotFoundError:
            raise IngestError(f"stage_with: {command.name} exited 0 but wrote no file at {tmp_path} "
                              f"(command: {command.shown()})") from None
        if size_bytes != object_bytes:
            raise IngestError(f"stage_with: {command.name} wrote {size_bytes} bytes to {tmp_path}, but "
                              f"{source_shown} has {object_bytes} bytes; the copy was removed")
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        abort_tool(tmp_path)
        raise


def abort_tool(tmp_path: str) -> None:
    """Remove tmp_path and any temporary a tool made beside it: s5cmd names its own temporary
    after the destination plus a random suffix, rclone adds .partial; the destination's name is
    unique (new_temp_path), so its prefix matches nothing else."""
    directory = os.path.dirname(tmp_path) or "."
    prefix = os.path.basename(tmp_path)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(prefix):
            abort(os.path.join(directory, name))


def _reserve_blocks(fd: int, nbytes: int, path: str) -> None:
    """Allocate the file's blocks now where the filesystem can do so cheaply (Linux fallocate).

    A memory-mapped write into a sparse file on a full filesystem kills the process with
    SIGBUS, with no message; reserving turns that into ENOSPC here. glibc's posix_fallocate is
    avoided on purpose: where the filesystem lacks fallocate it writes every block, which on a
    cube of hundreds of GB would be a second download's worth of I/O.
    """
    fallocate = getattr(_libc(), "fallocate", None)
    if fallocate is None or nbytes == 0:
        return
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    if fallocate(fd, 0, 0, nbytes) == 0:
        return
    err = ctypes.get_errno()
    if err == errno.ENOSPC:
        raise IngestError(f"stage_dir: no space for {format_bytes(nbytes)} at {path}")
    # EOPNOTSUPP and friends: the filesystem cannot reserve; check_space is then the guard.


@functools.lru_cache(maxsize=1)
def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


def download_part(transport: Transport, tmp_path: str, part: int, n_parts: int, *,
                  chunk_bytes: int, threads: int, progress=None, object_bytes: int | None = None) -> ReadStats:
    """Download part `part` of `n_parts` (see part_range) into its slice of tmp_path; flushed on return.

    object_bytes: the object's size if already known (e.g. broadcast from rank 0), which saves
    each rank the size request; default None asks the transport.
    """
    if object_bytes is None:
        object_bytes = transport.object_bytes
    start, stop = part_range(object_bytes, part, n_parts, chunk_bytes)
    if stop == start:
        return ReadStats()  # more parts than chunks: this one has nothing to do
    plan = contiguous_plan(start, stop - start, chunk_bytes)
    # Requests land straight in the file's pages, one mapped window per request (zero-copy), so
    # the process holds at most threads x chunk_bytes of them; the kernel writes them back.
    fd = os.open(tmp_path, os.O_RDWR)
    try:
        stats = execute(plan, transport, mirror_file(fd, plan.lattice), threads=threads, progress=progress)
        os.fsync(fd)
    finally:
        os.close(fd)
    return stats


def finalize(tmp_path: str, final_path: str) -> None:
    """Make the staged file durable, then give it its final name atomically (replacing any old one)."""
    publish(tmp_path, final_path)  # the fsync also leaves pages clean, so drop_from_page_cache can evict them


def abort(tmp_path: str) -> None:
    """Remove a temporary file (no error if it is already gone)."""
    try:
        os.unlink(tmp_path)
    except FileNotFoundError:
        pass


def stage_object(transport: Transport, stage_dir: str, *, chunk_bytes: int, threads: int,
                 progress=None) -> tuple[str, float, ReadStats]:
    """Stage the whole object in one process: (final_path, stage_s, stats). Leaves no file on error.

    stage_s runs from creating the temporary file to the durable rename, fsync included: a
    staged cube is only usable once it is on the filesystem.
    """
    object_bytes = transport.object_bytes
    check_space(stage_dir, object_bytes)
    final_path = staged_path(stage_dir, transport.display_name)
    t0 = time.perf_counter()
    tmp_path = prepare(stage_dir, final_path, object_bytes)
    try:
        stats = download_part(transport, tmp_path, 0, 1, chunk_bytes=chunk_bytes, threads=threads,
                              progress=progress, object_bytes=object_bytes)
        finalize(tmp_path, final_path)
    except BaseException:
        abort(tmp_path)
        raise
    return final_path, time.perf_counter() - t0, stats


def drop_from_page_cache(path: str) -> None:
    """Evict path's (clean) pages from this node's page cache, so the next read hits storage."""
    with PosixTransport(path) as reader:
        reader.drop_cache()
