"""File destinations: a plan executed into a mapped file lands every needed byte where the layout
says (the compact cut-out, or the object's own offsets for a frame) and touches nothing else."""
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.api.read import plan_read
from ingest.core.lattice import STRATEGIES
from ingest.engine.destination import compact_file, mirror_file, size_file
from ingest.engine.executor import execute
from ingest.transports import MemoryTransport
from tests.test_planner_properties import cube_and_region, cube_object

FILL = 0xA5  # what the file held before: bytes outside the needed runs must keep it


@settings(max_examples=120, deadline=None)
@given(cube_and_region(), st.sampled_from(STRATEGIES), st.integers(1, 600), st.integers(1, 3),
       st.integers(0, 5000))
def test_plan_into_files_equals_numpy(tmp_path_factory, case, strategy, chunk_bytes, threads, header_bytes):
    shape, bitpix, region = case
    blob, data, layout = cube_object(shape, bitpix)
    sel, plan = plan_read(layout, region, strategy=strategy, chunk_bytes=chunk_bytes)
    want = np.ascontiguousarray(np.asarray(data[region], dtype=data.dtype).reshape(sel.box_shape))
    directory = tmp_path_factory.mktemp("dest")

    # Compact cut-out after a header of any length (not page aligned).
    path = directory / "cut.bin"
    path.write_bytes(bytes([FILL]) * (header_bytes + want.nbytes + 7))
    fd = os.open(path, os.O_RDWR)
    try:
        execute(plan, MemoryTransport(blob), compact_file(fd, plan.lattice, header_bytes), threads=threads)
    finally:
        os.close(fd)
    got = path.read_bytes()
    assert got[header_bytes:header_bytes + want.nbytes] == want.tobytes()
    assert got[:header_bytes] == bytes([FILL]) * header_bytes
    assert got[header_bytes + want.nbytes:] == bytes([FILL]) * 7

    # Frame: the object's own offsets; every byte outside the selection keeps the fill.
    path = directory / "frame.bin"
    path.write_bytes(bytes([FILL]) * len(blob))
    fd = os.open(path, os.O_RDWR)
    try:
        execute(plan, MemoryTransport(blob), mirror_file(fd, plan.lattice), threads=threads)
    finally:
        os.close(fd)
    frame = np.frombuffer(path.read_bytes(), dtype=np.uint8)
    touched = np.zeros(shape, dtype=bool)
    touched[region] = True
    mask = np.zeros(len(blob), dtype=bool)
    mask[layout.data_offset:layout.data_offset + layout.data_bytes] = np.repeat(touched.reshape(-1), layout.itemsize)
    expected = np.where(mask, np.frombuffer(blob, dtype=np.uint8), FILL)
    assert np.array_equal(frame, expected)


def test_sparse_frame_holes_stay_holes(tmp_path):
    """A frame file sized with size_file and written with one thin box allocates about the box's
    pages, not the whole file."""
    shape = (64, 256, 256)  # 16 MiB of float32
    blob, data, layout = cube_object(shape, -32)
    sel, plan = plan_read(layout, (slice(0, 64), slice(0, 8), slice(0, 256)), strategy="small", chunk_bytes=1 << 20)
    path = tmp_path / "frame.fits"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size_file(fd, len(blob))
        execute(plan, MemoryTransport(blob), mirror_file(fd, plan.lattice), threads=2)
        os.fsync(fd)
    finally:
        os.close(fd)
    st_ = os.stat(path)
    assert st_.st_size == len(blob)
    allocated = st_.st_blocks * 512
    box_bytes = 64 * 8 * 256 * 4
    assert box_bytes <= allocated <= box_bytes + 64 * 2 * 4096  # at most one partial page at each end of a plane
    got = np.fromfile(path, dtype=">f4", offset=layout.data_offset, count=data.size).reshape(shape)
    assert np.array_equal(got[:, :8, :], data[:, :8, :])


@settings(max_examples=60, deadline=None)
@given(cube_and_region(), st.integers(1, 300))
def test_crc32_is_the_selections_bytes_in_either_layout(tmp_path_factory, case, slab_bytes):
    import zlib

    from ingest.engine.destination import crc32_of

    shape, bitpix, region = case
    blob, data, layout = cube_object(shape, bitpix)
    sel, plan = plan_read(layout, region, strategy="small", chunk_bytes=64)
    want = np.ascontiguousarray(np.asarray(data[region], dtype=data.dtype)).tobytes()
    path = tmp_path_factory.mktemp("crc") / "frame.bin"
    path.write_bytes(blob)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert crc32_of(mirror_file(fd, plan.lattice, writable=False), slab_bytes) == f"crc32:{zlib.crc32(want):08x}"
    finally:
        os.close(fd)
