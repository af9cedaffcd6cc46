"""The block-cached HDF5 file object: chunk-index nodes parsed as HDF5's spec lays them out, and
their children fetched concurrently when HDF5 reads the parent (the same bytes, fewer waits)."""
import struct
import threading
import time

import h5py
import numpy as np
from hypothesis import given, strategies as st

from ingest.formats.h5file import BTREE_SIGNATURE, TransportFile, btree_children
from ingest.formats.hdf5 import read_hdf5_layout
from ingest.transports import open_transport


def _node(rank, children, level=1, node_type=1, sizes=None):
    """A version-1 chunk B-tree node as HDF5 writes it (8-byte addresses)."""
    head = BTREE_SIGNATURE + bytes([node_type, level]) + struct.pack("<H", len(children)) + struct.pack("<qq", -1, -1)
    body = b""
    for i, child in enumerate(children + [None]):
        size = (sizes or [100] * (len(children) + 1))[i]
        body += struct.pack("<II", size, 0) + struct.pack(f"<{rank + 1}Q", *([i * 16] * rank + [0]))
        if child is not None:
            body += struct.pack("<Q", child)
    return head + body


@given(st.integers(1, 4), st.lists(st.integers(1, 2**40), min_size=1, max_size=64))
def test_children_of_an_inner_node_whatever_the_rank(rank, children):
    assert btree_children(_node(rank, children), 8, 2**41) == children


@given(st.integers(1, 4), st.lists(st.integers(1, 2**40), min_size=1, max_size=8))
def test_leaves_group_nodes_and_addresses_outside_the_file_give_nothing(rank, children):
    assert btree_children(_node(rank, children, level=0), 8, 2**41) == []  # leaves point at chunk data
    assert btree_children(_node(rank, children, node_type=0), 8, 2**41) == []  # a group's B-tree
    assert btree_children(_node(rank, children), 8, min(children)) == []  # not this file's node
    assert btree_children(b"TREE\x01\x01", 8, 2**41) == []  # cut short


class SlowTransport:
    """A posix transport whose reads each wait `delay_s`, recording how many overlap."""

    def __init__(self, inner, delay_s):
        self.inner, self.delay_s = inner, delay_s
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read_into(self, buffer, offset):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
            return self.inner.read_into(buffer, offset)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_chunk_index_children_come_concurrently_and_the_index_is_exact(tmp_path):
    path = tmp_path / "many_chunks.h5"
    data = np.arange(64 * 64 * 256, dtype="<f4").reshape(64, 64, 256)
    with h5py.File(path, "w") as f:  # 4096 chunks: an index of 64+ leaves under inner nodes
        f.create_dataset("cube", data=data, chunks=(4, 8, 8))
    with open_transport(str(path), "posix") as transport:
        slow = SlowTransport(transport, 0.002)
        layout = read_hdf5_layout(slow)
    assert slow.most_in_flight > 4, "the leaves should have been fetched side by side"
    got = {tuple(int(g) * c for g, c in zip(pos, (4, 8, 8))): int(off)
           for pos, off in zip(layout.chunks.grid, layout.chunks.offsets)}
    assert len(got) == 4096 and got == _offsets(path)  # as h5py on the local file lists them


def _chunk_infos(dset):
    out = []
    dset.id.chunk_iter(out.append)
    return out


def _offsets(path):
    with h5py.File(path) as f:
        return {tuple(int(v) for v in info.chunk_offset): int(info.byte_offset) for info in _chunk_infos(f["cube"])}


def test_file_object_reads_what_the_file_holds(tmp_path):
    path = tmp_path / "bytes.bin"
    blob = np.random.default_rng(1).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    path.write_bytes(blob)
    with open_transport(str(path), "posix") as transport:
        f = TransportFile(transport, block_bytes=4096, max_blocks=8)
        for start, n in ((0, 10), (4090, 20), (123_456, 70_000), (299_990, 100)):
            f.seek(start)
            assert f.read(n) == blob[start:start + n]
