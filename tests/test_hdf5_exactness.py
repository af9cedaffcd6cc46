"""Exactness is the oracle: `read_subcube` on an HDF5 dataset equals h5py's own `dset[region]` of
the same file, bit for bit (values, dtype, byte order), for random shapes, dtypes, byte orders,
chunk shapes, filter pipelines, missing chunks, fill values and storage layouts; over posix with
hypothesis's full breadth, and over presigned URLs and the S3 API on a real server."""
from __future__ import annotations

import math
import os
import uuid

import h5py
import hdf5plugin
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ingest
from ingest.transports.presign import presign_url

# Compact data live in the layout header message, which HDF5 caps near 64 KiB (65531 bytes took,
# here; 66528 were refused): a larger compact case is drawn as contiguous instead.
COMPACT_MAX_BYTES = 65_000
DTYPES = ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "f4", "f8")
# (name, h5py create_dataset keywords): the pipelines HDF5.md lists, alone and combined
FILTERS = (
    ("none", {}),
    ("gzip", {"compression": "gzip", "compression_opts": 4}),
    ("gzip+shuffle", {"compression": "gzip", "shuffle": True}),
    ("gzip+shuffle+fletcher32", {"compression": "gzip", "shuffle": True, "fletcher32": True}),
    ("fletcher32", {"fletcher32": True}),
    ("shuffle", {"shuffle": True}),
    ("zstd", dict(hdf5plugin.Zstd(clevel=3))),
    ("zstd+fletcher32", {**hdf5plugin.Zstd(), "fletcher32": True}),
    ("blosc-lz4-shuffle", dict(hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE))),
    ("blosc-zstd-bitshuffle", dict(hdf5plugin.Blosc(cname="zstd", shuffle=hdf5plugin.Blosc.BITSHUFFLE))),
    ("lz4", dict(hdf5plugin.LZ4())),
    ("bitshuffle", dict(hdf5plugin.Bitshuffle(cname="none"))),
    ("bitshuffle-lz4", dict(hdf5plugin.Bitshuffle(cname="lz4"))),
)


def _values(rng, shape, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f":  # include NaN, inf and signed zero: compared as bits
        data = rng.standard_normal(shape).astype(dtype)
        flat = data.reshape(-1)
        flat[:: 7] = np.nan
        flat[3:: 11] = -0.0
        flat[5:: 13] = np.inf
        return data
    info = np.iinfo(dtype)
    # Mostly small values (compressible, as real data), with the extremes in.
    data = rng.integers(-5 if info.min < 0 else 0, 6, size=shape, dtype=dtype.newbyteorder("="))
    data.reshape(-1)[:: 17] = info.max
    data.reshape(-1)[1:: 19] = info.min
    return data.astype(dtype)


@st.composite
def cases(draw):
    """A dataset spec and a region, numpy order."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 12 if ndim > 2 else 40), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES))).newbyteorder(draw(st.sampled_from("<>")))
    storage = draw(st.sampled_from(("chunked", "chunked", "chunked", "contiguous", "compact", "unwritten")))
    if storage == "compact" and math.prod(shape) * dtype.itemsize > COMPACT_MAX_BYTES:
        storage = "contiguous"  # HDF5 refuses it: compact data live in a header message
    spec = {"shape": shape, "dtype": dtype, "storage": storage, "seed": draw(st.integers(0, 2**32 - 1))}
    if storage == "chunked":
        spec["chunks"] = tuple(draw(st.integers(1, n)) for n in shape)  # some divide the shape, some do not
        spec["filters"] = draw(st.sampled_from(range(len(FILTERS))))
        spec["written"] = draw(st.sampled_from(("all", "some", "none")))
    fill = draw(st.integers(-3, 100)) if dtype.kind != "u" else draw(st.integers(0, 100))
    spec["fill"] = draw(st.sampled_from((None, fill)))
    region = []
    for n in shape:
        kind = draw(st.sampled_from(("slice", "slice", "step", "int", "all")))
        if kind == "int":
            region.append(draw(st.integers(-n, n - 1)))
        elif kind == "all":
            region.append(slice(None))
        else:
            a = draw(st.integers(0, n - 1))
            b = draw(st.integers(a + 1, n))
            step = draw(st.integers(1, 4)) if kind == "step" else None
            region.append(slice(a, b, step))
    if draw(st.booleans()) and len(region) > 1:
        region = [Ellipsis] + region[1:]
    return spec, tuple(region)


def write_case(path, spec) -> str:
    """Write the dataset `spec` describes at /g/data; returns its path."""
    rng = np.random.default_rng(spec["seed"])
    shape, dtype = spec["shape"], spec["dtype"]
    data = _values(rng, shape, dtype)
    kw = {} if spec["fill"] is None else {"fillvalue": spec["fill"]}
    with h5py.File(path, "w") as f:
        if spec["storage"] == "compact":
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
            lcpl.set_create_intermediate_group(True)
            dsid = h5py.h5d.create(f.id, b"/g/data", h5py.h5t.py_create(dtype, logical=True),
                                   h5py.h5s.create_simple(shape), dcpl=dcpl, lcpl=lcpl)
            h5py.Dataset(dsid)[...] = data
        elif spec["storage"] in ("contiguous", "unwritten"):
            dset = f.create_dataset("/g/data", shape=shape, dtype=dtype, **kw)
            if spec["storage"] == "contiguous":
                dset[...] = data
        else:
            dset = f.create_dataset("/g/data", shape=shape, dtype=dtype, chunks=spec["chunks"],
                                    **FILTERS[spec["filters"]][1], **kw)
            if spec["written"] == "all":
                dset[...] = data
            elif spec["written"] == "some":  # every other chunk along the first axis, the rest never written
                c0 = spec["chunks"][0]
                for start in range(0, shape[0], 2 * c0):
                    dset[start:start + c0] = data[start:start + c0]
    return "/g/data"


def h5py_read(path, dataset, region) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return np.asarray(f[dataset][region])


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit: dtype (byte order included), shape, and the bytes. (h5py hands back a numpy
    scalar, always native-endian, when every axis is indexed by an integer: compared natively.)"""
    if want.ndim == 0:
        got = got.astype(got.dtype.newbyteorder("="))
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_posix_equals_h5py(tmp_path, case):
    spec, region = case
    path = str(tmp_path / f"{uuid.uuid4().hex}.h5")
    dataset = write_case(path, spec)
    want = h5py_read(path, dataset, region)
    got = ingest.read_subcube(path, region, dataset=dataset, threads=3, chunk_bytes=1024)
    assert_same(got, want)
    os.unlink(path)


# Fixed cases for the network transports: every filter, a few storage layouts, awkward regions.
REMOTE_CASES = [
    ({"shape": (9, 13, 11), "dtype": np.dtype(">f4"), "storage": "chunked", "chunks": (4, 5, 3), "filters": k,
      "written": "some" if k % 3 == 0 else "all", "fill": 7 if k % 2 else None, "seed": k},
     (slice(1, 9, 2), slice(None), slice(2, 10)))
    for k in range(len(FILTERS))
] + [
    ({"shape": (5, 7, 6), "dtype": np.dtype("<i2"), "storage": "contiguous", "fill": None, "seed": 1},
     (slice(1, 4), 3, slice(None, None, 2))),
    ({"shape": (3, 4, 5), "dtype": np.dtype(">u4"), "storage": "compact", "fill": None, "seed": 2},
     (Ellipsis, slice(1, 4))),
    ({"shape": (4, 6, 6), "dtype": np.dtype("<f8"), "storage": "unwritten", "fill": 5, "seed": 3},
     (slice(0, 2), slice(1, 5), -1)),
]


@pytest.fixture(scope="module")
def remote_cases(s3_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("h5exact")
    bucket = s3_server.make_bucket(f"h5exact-{uuid.uuid4().hex[:8]}")
    client = s3_server.client()
    out = []
    for k, (spec, region) in enumerate(REMOTE_CASES):
        path = str(root / f"case{k}.h5")
        dataset = write_case(path, spec)
        client.upload_file(path, bucket, f"c/case{k}.h5")
        sources = {"s3": f"s3://{bucket}/c/case{k}.h5",
                   "presigned": presign_url(bucket, f"c/case{k}.h5", expires_s=3600, client=client)}
        out.append((path, dataset, region, sources))
    return out


@pytest.mark.parametrize("method", ["presigned", "s3"])
def test_remote_equals_h5py_for_every_filter_and_layout(remote_cases, s3_env, method):
    for path, dataset, region, sources in remote_cases:
        want = h5py_read(path, dataset, region)
        got = ingest.read_subcube(sources[method], region, dataset=dataset, threads=4, chunk_bytes=2048)
        assert_same(got, want)
