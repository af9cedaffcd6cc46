"""A block-cached, read-only file object over a Transport, for `h5py.File(fileobj, "r")`, with
readahead of the chunk index.

HDF5 reads its metadata in many small pieces (8 bytes, a few hundred); each would be a round
trip, so reads go through an LRU cache of aligned blocks. h5py's reads are sequential (one at a
time under its lock), and a chunked dataset's index is a tree: a version-1 B-tree whose leaves
are scattered through the file as the chunks were written (every ~12 MB in a 1 GiB cube of
16x64x64 chunks). Walking it costs one round trip per node, one after another. But a node above
the leaves lists the addresses of all its children, so as soon as HDF5 reads one, the children
are fetched concurrently: the walk costs a round trip per tree level instead of one per node.
"""
from __future__ import annotations

import io
import struct
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from ingest.transports.retry import RetryPolicy, read_with_retries

BLOCK_BYTES = 64 << 10  # cache block: 64 KiB
MAX_BLOCKS = 256  # LRU: 256 blocks = 16 MiB
READAHEAD_THREADS = 16  # concurrent fetches of one node's children
BTREE_SIGNATURE = b"TREE"
BTREE_CHUNK_NODE = 1  # node type 1: raw data chunks (type 0 is a group's)
BTREE_MAX_ENTRIES = 64  # 2K with HDF5's default chunk-index K of 32
# A node's size at most: header with 8-byte siblings, then 64 (key, child) pairs and a last key;
# a key of a 4-axis dataset is 8 + 5 x 8 = 48 bytes. Fetching this much covers any node we expect.
MAX_NODE_BYTES = 8 + 2 * 8 + BTREE_MAX_ENTRIES * (48 + 8) + 48


def btree_children(node: bytes, offset_bytes: int, file_bytes: int) -> list[int]:
    """Child addresses listed by a version-1 chunk B-tree node above the leaves, else [].

    Layout (HDF5 spec III.A.1): "TREE", type (1 byte), level (1), entries used (2), left and
    right sibling addresses, then key 0, child 0, key 1, ..., key N. A chunk key is the chunk's
    stored size (4 bytes), its filter mask (4) and rank + 1 offsets of 8 bytes, the last always
    0. HDF5 walks the index before we know which dataset it belongs to (listing the file's
    objects reads their storage sizes), so the rank is found from the node: the one rank whose
    keys all end in a 0 offset and whose children all lie inside the file.
    """
    head = 8 + 2 * offset_bytes
    fmt = {4: "<I", 8: "<Q"}.get(offset_bytes)
    if fmt is None or len(node) < head or node[:4] != BTREE_SIGNATURE or node[4] != BTREE_CHUNK_NODE or node[5] == 0:
        return []
    entries = int.from_bytes(node[6:8], "little")
    for rank in range(1, 5):
        key_bytes = 8 + 8 * (rank + 1)
        step = key_bytes + offset_bytes
        if entries == 0 or len(node) < head + entries * step + key_bytes:
            continue
        keys_ok = all(struct.unpack_from("<I", node, head + i * step)[0] > 0
                      and struct.unpack_from("<Q", node, head + i * step + key_bytes - 8)[0] == 0
                      for i in range(entries))
        children = [struct.unpack_from(fmt, node, head + i * step + key_bytes)[0] for i in range(entries)]
        if keys_ok and all(0 < c < file_bytes for c in children):
            return children
    return []


class TransportFile(io.RawIOBase):
    """A read-only, seekable file object over a Transport. Blocks of block_bytes (64 KiB) are
    cached (LRU of max_blocks, 256); the blocks one read lacks come in one request, retried per
    `retry`. `requests` and `bytes_read` count what reached the transport. B-tree nodes HDF5
    reads have their children fetched concurrently (see the module docstring) once `offset_bytes` is set."""

    def __init__(self, transport, *, block_bytes: int = BLOCK_BYTES, max_blocks: int = MAX_BLOCKS,
                 retry: RetryPolicy = RetryPolicy()):
        super().__init__()
        if block_bytes < 1 or max_blocks < 1:
            raise ValueError(f"block_bytes ({block_bytes} bytes) and max_blocks ({max_blocks}) must be >= 1")
        self.transport = transport
        self.block_bytes = block_bytes
        self.max_blocks = max_blocks
        self.retry = retry
        self.size = transport.object_bytes
        self.requests = 0
        self.bytes_read = 0
        self.error: Exception | None = None  # the last transport failure: h5py would hide it in its own
        self._pos = 0
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()  # the cache
        self._count_lock = threading.Lock()  # requests, bytes_read
        self.offset_bytes: int | None = None  # the file's address size, once h5py has read the superblock


    def readable(self) -> bool:
        return True

    seekable = readable

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(f"{self.transport.display_name}: seek to {base + offset} is before the start")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        out = memoryview(buffer).cast("B")
        start, stop = self._pos, min(self._pos + len(out), self.size)
        if start >= stop:
            return 0
        bb = self.block_bytes
        with self._lock:
            blocks = range(start // bb, (stop - 1) // bb + 1)
            missing = [b for b in blocks if b not in self._blocks]
            if missing:  # one request from the first missing block to the last: a round trip costs more
                try:  # than re-reading a cached block between them
                    self._store(missing[0], self._download(missing[0], missing[-1] + 1))
                except Exception as exc:  # noqa: BLE001 - kept in self.error; the opener re-raises it
                    # Never raise through HDF5's C stack, and keep no traceback: its frames hold
                    # `buffer`, memory HDF5 frees, and releasing it at exit is a segfault. Zeros
                    # make HDF5 fail as on a damaged file; the opener then raises `error`.
                    self.error = exc.with_traceback(None)
                    out[: stop - start] = bytes(stop - start)
                    self._pos = stop
                    return stop - start
            for b in blocks:
                self._blocks.move_to_end(b)
                lo, hi = max(start, b * bb), min(stop, (b + 1) * bb)
                out[lo - start : hi - start] = self._blocks[b][lo - b * bb : hi - b * bb]
            self._evict(len(blocks))
        self._pos = stop
        if self.offset_bytes is not None and out[:4] == BTREE_SIGNATURE:
            self._read_ahead(btree_children(bytes(out[: stop - start]), self.offset_bytes, self.size))
        return stop - start

    def _download(self, first: int, stop: int) -> bytearray:
        """Blocks [first, stop) in one request (retried)."""
        lo, hi = first * self.block_bytes, min(self.size, stop * self.block_bytes)
        buf = bytearray(hi - lo)
        read_with_retries(self.transport, memoryview(buf), lo, self.retry, lambda *fault: None)
        with self._count_lock:  # readahead threads download too
            self.requests += 1
            self.bytes_read += hi - lo
        return buf

    def _store(self, first: int, buf: bytearray) -> None:
        """Put downloaded blocks into the cache (the caller holds the lock)."""
        bb = self.block_bytes
        for k in range(0, len(buf), bb):
            self._blocks[first + k // bb] = bytes(buf[k : k + bb])

    def _evict(self, keep: int) -> None:
        while len(self._blocks) > max(self.max_blocks, keep):
            self._blocks.popitem(last=False)

    def _read_ahead(self, addresses: list[int]) -> None:
        """Fetch the blocks of these B-tree nodes concurrently, before HDF5 asks for them one by one.
        Best effort: a failure here is left for HDF5's own read to meet (and report)."""
        bb = self.block_bytes
        with self._lock:
            wanted = sorted({(a // bb, (min(a + MAX_NODE_BYTES, self.size) - 1) // bb + 1) for a in addresses
                             if 0 <= a < self.size})
            wanted = [(lo, hi) for lo, hi in wanted if any(b not in self._blocks for b in range(lo, hi))]
        if not wanted or len(wanted) * 2 > self.max_blocks:
            return  # nothing to do, or more than the cache would keep until HDF5 gets there
        with ThreadPoolExecutor(min(READAHEAD_THREADS, len(wanted))) as pool:
            results = list(pool.map(self._try_download, wanted))
        with self._lock:
            for (lo, _), buf in zip(wanted, results):
                if buf is not None:
                    self._store(lo, buf)
            self._evict(0)

    def _try_download(self, span: tuple[int, int]) -> bytearray | None:
        try:
            return self._download(*span)
        except Exception:  # noqa: BLE001 - best effort, see _read_ahead
            return None

