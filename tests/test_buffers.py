"""ingest.buffers.empty: np.empty's contract, on pages that are never transparent huge pages."""
from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ingest import buffers

DTYPES = ["u1", ">i2", "<i4", ">f4", "<f8", "c8"]


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 64), min_size=0, max_size=3).map(tuple), dtype=st.sampled_from(DTYPES),
       big=st.booleans(), extra=st.integers(0, 3), empty_axis=st.booleans())
def test_empty_is_np_empty_shaped_writable_and_holds_what_is_written(shape, dtype, big, extra, empty_axis):
    # big: the last axis is stretched just over MAPPED_MIN_BYTES, so the mapped path is drawn as
    # often as np.empty's, at a few MiB each
    if big and shape:
        others = math.prod(shape[:-1]) * np.dtype(dtype).itemsize
        shape = shape[:-1] + (-(-buffers.MAPPED_MIN_BYTES // others) + extra,)
    if empty_axis and shape:
        shape = (0,) + shape[1:]
    a = buffers.empty(shape, dtype)
    assert a.shape == shape and a.dtype == np.dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable
    values = np.arange(math.prod(shape)).astype(dtype).reshape(shape)
    a[...] = values
    np.testing.assert_array_equal(a, values)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)), values)


def test_an_integer_shape_is_one_axis():
    assert buffers.empty(buffers.MAPPED_MIN_BYTES, np.uint8).shape == (buffers.MAPPED_MIN_BYTES,)
    assert buffers.empty(np.int64(5), np.uint8).shape == (5,)


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping in this process that holds `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                lo, hi = (int(x, 16) for x in first.split("-"))
                inside = lo <= address < hi
            elif inside and first == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and MADV_NOHUGEPAGE are Linux's")
def test_a_large_buffer_is_advised_never_to_use_huge_pages_and_a_small_one_is_np_empty():
    big = buffers.empty((3, buffers.MAPPED_MIN_BYTES // 4), ">f4")
    assert "nh" in _vm_flags(big.__array_interface__["data"][0])  # nh: MADV_NOHUGEPAGE is set
    small = buffers.empty(buffers.MAPPED_MIN_BYTES // 8 - 1, "<f8")
    assert small.flags.owndata  # np.empty's own allocation, no mapping of its own
    assert not big.flags.owndata
    # fresh: a small buffer gets pages of its own too (a probe's read costs what a job's output does)
    fresh = buffers.empty(4096, np.uint8, fresh=True)
    assert not fresh.flags.owndata and "nh" in _vm_flags(fresh.__array_interface__["data"][0])
    assert buffers.empty(0, np.uint8, fresh=True).shape == (0,)


def test_a_read_fills_an_output_that_never_uses_huge_pages(tmp_path):
    """The read path's output array comes from ingest.buffers (checked through the public API)."""
    from astropy.io import fits

    import ingest

    data = np.arange(8 * 256 * 1024, dtype=">f4").reshape(8, 256, 1024)  # 8 MiB: over the threshold
    path = tmp_path / "cube.fits"
    fits.PrimaryHDU(data).writeto(path)
    out = ingest.read_subcube(str(path))
    np.testing.assert_array_equal(out, data)
    if sys.platform.startswith("linux"):
        assert "nh" in _vm_flags(out.__array_interface__["data"][0])


def test_numpys_own_switch_gives_numpys_buffers_back():
    """NUMPY_MADVISE_HUGEPAGE=1 (numpy's documented switch) asks for huge pages: then np.empty serves."""
    code = ("import numpy as np; from ingest import buffers; "
            "a = buffers.empty(buffers.MAPPED_MIN_BYTES, np.uint8); print(buffers.HUGE_PAGES_ASKED, a.flags.owndata)")
    for value, expected in (("1", "True True"), ("0", "False False")):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "NUMPY_MADVISE_HUGEPAGE": value})
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == expected.split(), value


def _rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS from Linux's /proc")
def test_freed_heap_goes_back_to_the_os_before_a_big_buffer_comes():
    # Many small objects freed among a few kept (a catalogue's rows, each box's tuples): the heap's
    # free pages stay in RSS until they are trimmed. 1,000-byte objects come from the C heap.
    held = [bytes(1000) + bytes([i % 256]) for i in range(150_000)]  # about 150 MB
    kept = held[::64]
    del held
    before = _rss_bytes()
    if not buffers.return_freed_heap():
        pytest.skip("no glibc malloc_trim here")
    assert before - _rss_bytes() > 50 * 10**6
    del kept  # alive until measured: they keep the heap from shrinking at its top by itself
