"""ingest.formats.hdf5: the layout read through a transport agrees with h5py's own view of the file.

Files are written by h5py into tmp_path and read back through MemoryTransport (which counts
requests) and PosixTransport. The oracle for every offset is the object's bytes: the data found at
the offsets the layout gives must be the data h5py reads.
"""
from __future__ import annotations

import itertools
import json
import uuid

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.core.chunks import ChunkIndex
from ingest.errors import IngestError, RetryableError, TransportError
from ingest.formats.hdf5 import (HDF5_SIGNATURE, H5Layout, Hdf5FormatError, TransportFile, is_hdf5, list_datasets,
                                 read_hdf5_layout)
from ingest.transports.retry import RetryPolicy
from ingest.transports.base import MemoryTransport
from ingest.transports.posix import PosixTransport

DTYPES = [">f4", "<f4", ">f8", "<f8", ">i2", "<i2", ">i4", "<u2", "u1", "i1", ">i8"]
FAST = RetryPolicy(retries=3, backoff_s=0.0)


def memory(path):
    return MemoryTransport(path.read_bytes(), path.name)


def posix(path):
    return PosixTransport(str(path))


TRANSPORTS = pytest.mark.parametrize("open_transport", [memory, posix], ids=["memory", "posix"])


def write(path, **datasets):
    """Write {name: kwargs for create_dataset} and return path."""
    with h5py.File(path, "w") as f:
        for name, kw in datasets.items():
            f.create_dataset(name, **kw)
    return path


def h5read(path, name):
    with h5py.File(path, "r") as f:
        return f[name][...]


# --- signature and the file object ------------------------------------------------------------

@pytest.mark.parametrize("userblock", [0, 512, 1024, 2048])
def test_is_hdf5_finds_the_superblock_after_a_user_block(tmp_path, userblock):
    path = tmp_path / "u.h5"
    with h5py.File(path, "w", userblock_size=userblock or None) as f:
        f.create_dataset("c", data=np.ones((2, 3, 4), ">f4"))
    t = memory(path)
    assert is_hdf5(t)
    assert t.requests == 1  # one read covers every offset we look at


@pytest.mark.parametrize("blob", [b"", b"\x89HDF", b"SIMPLE  = T" + b" " * 5000, b"\0" * 600 + HDF5_SIGNATURE])
def test_is_hdf5_refuses_other_objects(blob):
    assert not is_hdf5(MemoryTransport(blob))


@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=1, max_size=3000), block=st.integers(1, 700),
       reads=st.lists(st.tuples(st.integers(0, 3100), st.integers(0, 900)), max_size=12))
def test_transport_file_reads_what_the_object_holds(data, block, reads):
    t = MemoryTransport(data)
    fo = TransportFile(t, block_bytes=block, max_blocks=2)
    cached_max = 2  # a read keeps the blocks it spans, even past max_blocks, until a later read evicts
    for pos, n in reads:
        fo.seek(pos)
        assert fo.read(n) == data[pos : pos + n]
        assert fo.tell() == min(len(data), pos + n) if pos < len(data) else fo.tell() == pos
        if n and pos < len(data):  # an empty read, or one past the end, touches no block
            cached_max = max(2, -(-n // block) + 1)
        assert len(fo._blocks) <= cached_max
    assert fo.requests == t.requests
    fo.seek(-1, 2)
    assert fo.read() == data[-1:]


def test_transport_file_caches_blocks_and_joins_runs():
    t = MemoryTransport(bytes(range(256)) * 64)  # 16 KiB
    fo = TransportFile(t, block_bytes=1024)
    fo.seek(100)
    fo.read(8)
    fo.seek(2000)
    fo.read(8)
    assert (fo.requests, fo.bytes_read) == (2, 2048)
    fo.seek(0)
    fo.read(5000)  # blocks 0 and 1 cached; 2..4 missing: one request
    assert (fo.requests, fo.bytes_read) == (3, 5120)


class Flaky(MemoryTransport):
    """Fails every other read with a retryable reset, after delivering half the bytes."""

    def __init__(self, data, source="flaky"):
        super().__init__(data, source)
        self.calls = 0

    def read_into(self, buffer, offset):
        self.calls += 1
        if self.calls % 2:
            half = len(buffer) // 2
            super().read_into(buffer[:half], offset)
            raise RetryableError(f"{self.display_name}: reset", kind="reset", received=half)
        return super().read_into(buffer, offset)


class Broken(MemoryTransport):
    """Refuses every read after the first."""

    def read_into(self, buffer, offset):
        if self.requests:
            raise TransportError(f"{self.display_name}: 403 Forbidden at {offset}")
        return super().read_into(buffer, offset)


def test_reads_are_retried_and_failures_surface_as_transport_errors(tmp_path):
    path = write(tmp_path / "c.h5", c=dict(data=np.arange(60, dtype=">f4").reshape(3, 4, 5)))
    layout = read_hdf5_layout(Flaky(path.read_bytes()), retry=FAST)
    assert layout.data_offset is not None and layout.shape == (3, 4, 5)
    # A failed read never raises through HDF5's C stack (that leaves a half-open file which
    # crashes the interpreter at exit): h5py sees a short read and fails, the error is kept.
    fo = TransportFile(Broken(path.read_bytes()), block_bytes=512)
    with pytest.raises(OSError):
        with h5py.File(fo, "r"):
            pass
    assert isinstance(fo.error, TransportError) and "403" in str(fo.error)
    far = write(tmp_path / "far.h5", big=dict(data=np.zeros(40000, "f8")))
    with h5py.File(far, "a") as f:
        f.create_dataset("c", data=np.zeros((2, 2, 2)))  # its header lands after big's data
    assert read_hdf5_layout(memory(far), "c").open_requests == 2  # c's header is past the first block
    with pytest.raises(TransportError, match="403 Forbidden") as info:
        read_hdf5_layout(Broken(far.read_bytes(), "far.h5"), "c")
    assert not isinstance(info.value, Hdf5FormatError)  # the transport's own error, not buried in h5py's


# --- contiguous, compact, chunked ---------------------------------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(DTYPES), shape=st.lists(st.integers(1, 7), min_size=1, max_size=4).map(tuple),
       via=st.sampled_from([memory, posix]), libver=st.sampled_from([None, "latest"]))
def test_contiguous_offset_holds_the_data(tmp_path, dtype, shape, via, libver):
    values = (np.arange(np.prod(shape)) % 120 - 7 * (np.dtype(dtype).kind != "u")).reshape(shape).astype(dtype)
    path = tmp_path / f"{uuid.uuid4().hex}.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("x/cube", data=values)
    layout = read_hdf5_layout(via(path), "/x/cube")
    blob = path.read_bytes()
    assert (layout.storage, layout.dataset, layout.shape, layout.dtype.str) == ("contiguous", "/x/cube", shape,
                                                                                np.dtype(dtype).str)
    got = np.frombuffer(blob[layout.data_offset : layout.data_offset + layout.data_bytes], layout.dtype)
    assert np.array_equal(got.reshape(shape), h5read(path, "x/cube"))
    assert layout.strides_bytes == values.strides and layout.itemsize == values.itemsize
    assert (layout.raw_dtype, layout.out_dtype, layout.scaled, layout.hdu, layout.header_text, layout.kind) == (
        layout.dtype, layout.dtype, False, None, "", "hdf5")
    assert layout.chunks is None and layout.filters == () and layout.compact_data is None


def test_never_written_contiguous_data_is_all_fill(tmp_path):
    path = write(tmp_path / "e.h5", c=dict(shape=(4, 5, 6), dtype=">i2", fillvalue=-3))
    layout = read_hdf5_layout(memory(path))
    assert layout.data_offset is None
    assert layout.fill_value == -3 and np.array(layout.fill_value).dtype == np.dtype("i2")


@pytest.mark.parametrize("dtype", [">f4", "<i2", ">f8"])
def test_compact_data_is_read_at_open(tmp_path, dtype):
    values = np.arange(2 * 3 * 4).reshape(2, 3, 4).astype(dtype)
    path = tmp_path / "k.h5"
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"k", h5py.h5t.py_create(np.dtype(dtype)), h5py.h5s.create_simple(values.shape),
                        dcpl=dcpl)
        f["k"][...] = values
    layout = read_hdf5_layout(memory(path))
    assert layout.storage == "compact" and layout.data_offset is None and layout.dtype.str == np.dtype(dtype).str
    assert layout.compact_data == values.tobytes()
    assert np.array_equal(np.frombuffer(layout.compact_data, layout.dtype).reshape(layout.shape), values)


def check_chunks(path, name, layout: H5Layout):
    """Every chunk h5py stores is in the index with its bytes, and no other."""
    blob = path.read_bytes()
    index = layout.chunks
    assert isinstance(index, ChunkIndex)
    with h5py.File(path, "r") as f:
        dset = f[name]
        assert index.chunk_shape == dset.chunks and index.shape == dset.shape
        stored = []
        dset.id.chunk_iter(lambda s: stored.append(s.chunk_offset))  # a non-None return would stop it
        got = {tuple(int(g) * c for g, c in zip(row, index.chunk_shape)): i for i, row in enumerate(index.grid)}
        assert set(got) == set(stored)
        for origin, i in got.items():
            mask, raw = dset.id.read_direct_chunk(origin)
            assert blob[index.offsets[i] : index.offsets[i] + index.sizes[i]] == raw
            assert index.filter_masks[i] == mask
    return got


@TRANSPORTS
@pytest.mark.parametrize("libver", [None, "latest"])
@pytest.mark.parametrize("dtype", [">f4", "<i2"])
def test_chunk_index_has_exactly_the_written_chunks(tmp_path, open_transport, libver, dtype):
    path = tmp_path / "c.h5"
    with h5py.File(path, "w", libver=libver) as f:
        d = f.create_dataset("c", shape=(9, 10, 11), dtype=dtype, chunks=(4, 4, 4), compression="gzip",
                             shuffle=True, fletcher32=True, fillvalue=5)
        d[0:4, 4:8, 8:11] = 1  # an edge chunk
        d[8, 9, 0] = 2
        d[0:4, 0:4, 0:4] = 3
    layout = read_hdf5_layout(open_transport(path))
    got = check_chunks(path, "c", layout)
    assert set(got) == {(0, 4, 8), (8, 8, 0), (0, 0, 0)}  # the other 24 were never written
    assert layout.chunks.chunks_per_axis == (3, 3, 3)
    assert [(f.id, f.name) for f in layout.filters] == [(2, "shuffle"), (1, "deflate"), (3, "fletcher32")]
    assert layout.filters[1].values == (4,) and layout.filters[0].values == (np.dtype(dtype).itemsize,)
    assert layout.fill_value == 5 and layout.dtype.str == np.dtype(dtype).str and layout.data_offset is None


@pytest.mark.parametrize("maxshape", [None, (None, 8, 8)])  # v1 B-tree / fixed array, extensible array
def test_filter_masks_and_extendible_indexes(tmp_path, maxshape):
    path = tmp_path / "m.h5"
    with h5py.File(path, "w", libver="latest") as f:
        d = f.create_dataset("m", shape=(4, 8, 8), maxshape=maxshape, dtype="<f4", chunks=(2, 4, 4),
                             compression="gzip")
        d[0:2, 0:4, 0:4] = 1.5
        raw = np.full((2, 4, 4), 7, "<f4").tobytes()
        d.id.write_direct_chunk((2, 4, 4), raw, filter_mask=1)  # stored without deflate
    layout = read_hdf5_layout(memory(path))
    got = check_chunks(path, "m", layout)
    assert layout.chunks.filter_masks[got[(2, 4, 4)]] == 1 and layout.chunks.filter_masks[got[(0, 0, 0)]] == 0
    assert layout.chunks.grid.dtype == np.int64 and layout.chunks.filter_masks.dtype == np.uint32


@pytest.mark.parametrize("userblock", [512, 4096])
def test_user_block_offsets_are_object_offsets(tmp_path, userblock):
    values = np.arange(3 * 4 * 5, dtype=">i4").reshape(3, 4, 5)
    path = tmp_path / "u.h5"
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f.create_dataset("a", data=values)
        f.create_dataset("c", data=values.astype("<f8"), chunks=(1, 2, 5))
    blob = path.read_bytes()
    a = read_hdf5_layout(posix(path), "a")
    assert a.data_offset > userblock
    assert np.array_equal(np.frombuffer(blob[a.data_offset : a.data_offset + a.data_bytes], ">i4"), values.ravel())
    check_chunks(path, "c", read_hdf5_layout(memory(path), "/c"))
    # is_hdf5 looks only up to byte 2048 (one request): a 4 KiB user block is for read_hdf5_layout only
    assert is_hdf5(memory(path)) == (userblock <= 2048)


# --- choosing the dataset, and the errors -------------------------------------------------------

def test_default_is_the_only_cube_and_idia_prefers_0_data(tmp_path):
    cube = np.zeros((2, 3, 4), ">f4")
    path = write(tmp_path / "one.h5", freq=dict(data=np.arange(3.0)), img=dict(data=np.zeros((3, 4))),
                 name=dict(data="x"), **{"g/cube": dict(data=cube)})
    assert read_hdf5_layout(memory(path)).dataset == "/g/cube"
    idia = write(tmp_path / "idia.h5", **{"0/DATA": dict(data=cube[None]), "0/SwizzledData/ZYX": dict(data=cube.T),
                                          "0/MipMaps/DATA/DATA_XY_2": dict(data=cube[None, :, :1, :2])})
    assert read_hdf5_layout(memory(idia)).dataset == "/0/DATA"


def error(path, dataset=None, transport=memory):
    with pytest.raises(Hdf5FormatError) as info:
        read_hdf5_layout(transport(path), dataset)
    assert isinstance(info.value, IngestError)
    message = str(info.value)
    assert path.name in message
    return message


def test_choice_errors_name_the_file_and_list_the_datasets(tmp_path):
    cube = np.zeros((2, 3, 4), "<f4")
    two = write(tmp_path / "two.h5", a=dict(data=cube), b=dict(data=cube.astype(">i2")), **{"g/v": dict(data=[1])})
    msg = error(two)
    assert "2 3-D/4-D numeric datasets" in msg and "/a (2, 3, 4) <f4" in msg and "/b (2, 3, 4) >i2" in msg
    msg = error(two, "/nope")
    assert "'/nope' is not in the file" in msg and "/g/v (1,)" in msg
    assert "'g' is a group, not a dataset" in error(two, "g")
    none = write(tmp_path / "none.h5", v=dict(data=np.arange(4)))
    assert "no 3-D or 4-D numeric dataset" in error(none) and "/v (4,)" in error(none)
    fits = tmp_path / "cube.fits"
    fits.write_bytes(b"SIMPLE  =                    T".ljust(2880 * 2))
    assert "not an HDF5 file" in error(fits)
    assert "not an HDF5 file" in error(fits, transport=posix)
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    assert "not an HDF5 file" in error(empty)


def test_truncated_file_is_a_format_error(tmp_path):
    path = write(tmp_path / "t.h5", c=dict(data=np.zeros((40, 40, 40), "<f4")))
    cut = tmp_path / "cut.h5"
    cut.write_bytes(path.read_bytes()[:-1000])
    assert "cut.h5" in error(cut)


@pytest.mark.parametrize("kw,words", [
    (dict(data=np.zeros((2, 2, 2), [("a", "<i4"), ("b", "<f4")])), "compound"),
    (dict(shape=(2, 2, 2), dtype=h5py.vlen_dtype(np.dtype("i4"))), "variable-length"),
    (dict(data=np.array([[["ab"]]], dtype=object), dtype=h5py.string_dtype()), "string"),
    (dict(data=np.zeros((2, 2, 2), "S4")), "string"),
    (dict(data=np.zeros((2, 2, 2), bool)), "is not integer or float"),
    (dict(data=np.zeros((2, 2, 2), "c8")), "is not integer or float"),
    (dict(shape=(0, 4, 4), dtype="f4"), "empty dataset"),
    (dict(data=h5py.Empty("f4")), "empty dataset"),
    (dict(data=np.zeros((1, 1, 2, 2, 2), "f4")), "5 axes"),
    (dict(data=np.float32(1)), "0 axes"),
])
def test_unreadable_datasets_are_refused_by_name(tmp_path, kw, words):
    path = write(tmp_path / "bad.h5", bad=kw)
    msg = error(path, "/bad")
    assert words in msg and "dataset /bad" in msg


def test_virtual_and_external_datasets_are_refused(tmp_path):
    src = write(tmp_path / "src.h5", data=dict(data=np.zeros((2, 3, 4), "f4")))
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.zeros((2, 3, 4), "<f4").tobytes())
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        vl = h5py.VirtualLayout(shape=(2, 3, 4), dtype="f4")
        vl[...] = h5py.VirtualSource(str(src), "data", shape=(2, 3, 4))
        f.create_virtual_dataset("virt", vl)
        f.create_dataset("ext", shape=(2, 3, 4), dtype="<f4", external=[(str(raw), 0, h5py.h5f.UNLIMITED)])
    assert "virtual dataset" in error(path, "virt") and "dataset /virt" in error(path, "virt")
    assert "external raw files" in error(path, "/ext")


# --- what open costs, attributes, listing ------------------------------------------------------

@pytest.mark.parametrize("libver", [None, "latest"])
def test_open_costs_few_requests(tmp_path, libver):
    path = tmp_path / "three.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("cube", data=np.ones((32, 64, 64), ">f4"), chunks=(8, 32, 32), compression="gzip")
        f.create_dataset("freq", data=np.arange(32.0))
        f.create_dataset("mask", data=np.zeros((32, 64, 64), "u1"))
    t = memory(path)
    layout = read_hdf5_layout(t, "cube")
    assert layout.open_requests == t.requests <= 3
    assert layout.open_bytes <= 3 * (64 << 10)
    assert layout.chunks.n_chunks == 4 * 2 * 2


def test_attributes_become_json(tmp_path):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("c", data=np.zeros((2, 2, 2), ">f4"))
        d.attrs.update({"BUNIT": "Jy/beam", "CDELT3": np.float64(1e5), "NAXIS": np.int32(3), "flag": np.bool_(True),
                        "bytes": np.bytes_(b"abc"), "vec": np.arange(3, dtype=">i2"), "strs": ["a", "bc"]})
    attrs = read_hdf5_layout(memory(path)).attrs
    assert json.loads(json.dumps(attrs)) == {"BUNIT": "Jy/beam", "CDELT3": 1e5, "NAXIS": 3, "flag": True,
                                             "bytes": "abc", "vec": [0, 1, 2], "strs": ["a", "bc"]}


def test_list_datasets_describes_every_dataset(tmp_path):
    path = write(tmp_path / "l.h5", **{
        "0/DATA": dict(data=np.zeros((1, 4, 8, 8), ">f4"), chunks=(1, 1, 8, 8), compression="gzip", shuffle=True),
        "freq": dict(data=np.arange(4.0)), "name": dict(data="x")})
    rows = {row["path"]: row for row in list_datasets(posix(path))}
    assert json.loads(json.dumps(rows)) == rows
    assert rows["/0/DATA"] == {"path": "/0/DATA", "shape": [1, 4, 8, 8], "dtype": ">f4", "storage": "chunked",
                               "chunks": [1, 1, 8, 8], "filters": [{"id": 2, "name": "shuffle"},
                                                                    {"id": 1, "name": "deflate"}], "candidate": True}
    assert rows["/freq"]["storage"] == "contiguous" and rows["/freq"]["candidate"] is False
    assert rows["/name"]["dtype"] == "string"


def test_layout_plans_and_reads_through_the_engine(tmp_path):
    """The duck-typed layout drives ingest's planner and executor like a FITS one."""
    from ingest.api.read import read_subcube

    values = np.random.default_rng(1).random((10, 20, 30)).astype(">f4")
    for i, kw in enumerate([{}, dict(chunks=(3, 8, 7), compression="gzip", shuffle=True)]):
        path = write(tmp_path / f"e{i}.h5", c=dict(data=values, **kw))
        for box in itertools.islice(itertools.product([slice(2, 9)], [slice(0, 20), slice(5, 6)],
                                                      [slice(1, 29)]), 4):
            assert np.array_equal(read_subcube(str(path), box, dataset="/c"), values[box])
