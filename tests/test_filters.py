"""ingest.formats.filters: HDF5 chunks decoded outside HDF5 agree bit for bit with h5py's own read.

Files are written by h5py (hdf5plugin for zstd, blosc, lz4, bitshuffle) in memory; each chunk's
stored bytes come from `read_direct_chunk`, are decoded by `decode_chunk`, and are compared with
h5py's read of that chunk's region (edge chunks are stored full size: the decoded chunk is cropped).
"""
from __future__ import annotations

import itertools
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor

import h5py
import hdf5plugin
import imagecodecs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.core.chunks import Filter
from ingest.errors import IngestError
from ingest.formats.filters import SUPPORTED, FilterError, check_supported, decode_chunk, decode_chunk_part


def _file():
    return h5py.File(f"mem-{uuid.uuid4().hex}.h5", "w", driver="core", backing_store=False)


def _filters(dset) -> tuple[Filter, ...]:
    plist = dset.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        fid, flags, values, name = plist.get_filter(i)
        out.append(Filter(fid, name.decode(), flags, tuple(int(v) for v in values)))
    return tuple(out)


def _chunk_offsets(dset):
    return itertools.product(*(range(0, n, c) for n, c in zip(dset.shape, dset.chunks)))


def _decode(dset, offset, filters=None):
    mask, stored = dset.id.read_direct_chunk(offset)
    nbytes = int(np.prod(dset.chunks)) * dset.dtype.itemsize
    return decode_chunk(stored, _filters(dset) if filters is None else filters, mask, dset.dtype.itemsize,
                        nbytes, where=f"test:{dset.name} chunk {offset}")


def _assert_chunks_match(dset) -> int:
    """Every chunk decoded by decode_chunk equals h5py's read of its region; returns the count."""
    n = 0
    for offset in _chunk_offsets(dset):
        raw = _decode(dset, offset)
        assert len(raw) == int(np.prod(dset.chunks)) * dset.dtype.itemsize
        chunk = np.frombuffer(raw, dtype=dset.dtype).reshape(dset.chunks)
        region = tuple(slice(o, min(o + c, s)) for o, c, s in zip(offset, dset.chunks, dset.shape))
        crop = tuple(slice(0, r.stop - r.start) for r in region)
        expected = np.asarray(dset[region], dtype=dset.dtype)
        assert chunk[crop].tobytes() == expected.tobytes(), f"chunk {offset} differs"
        mask, stored = dset.id.read_direct_chunk(offset)
        part = decode_chunk_part(stored, _filters(dset), mask, dset.dtype, dset.chunks, crop)
        assert part.dtype == dset.dtype and part.tobytes() == expected.tobytes(), f"chunk {offset}: part differs"
        n += 1
    return n


def _data(rng, dtype, shape, kind):
    """Random (kind 0), small-range compressible (1) or smooth (2) values of dtype."""
    if dtype.kind == "f":
        v = rng.standard_normal(shape) if kind != 2 else np.cumsum(rng.standard_normal(shape), axis=-1)
        return (v if kind != 1 else np.round(v, 1)).astype(dtype)
    info = np.iinfo(dtype)
    hi = int(info.max) if kind == 0 else min(int(info.max), 50)
    return rng.integers(max(int(info.min), -50 if kind else int(info.min)), hi, size=shape,
                        endpoint=True, dtype=dtype.newbyteorder("="))


DTYPES = ["u1", "i1", "<i2", ">u2", "<i4", ">i4", "<f4", ">f4", "<f8", ">f8", "<i8", ">u8"]
COMPRESSORS = st.one_of(
    st.just({}),
    st.builds(lambda lv: dict(compression="gzip", compression_opts=lv), st.integers(0, 9)),
    st.builds(lambda lv: dict(hdf5plugin.Zstd(clevel=lv)), st.integers(-5, 19)),
    st.builds(lambda c, lv, s: dict(hdf5plugin.Blosc(cname=c, clevel=lv, shuffle=s)),
              st.sampled_from(["blosclz", "lz4", "lz4hc", "zlib", "zstd"]), st.integers(0, 9), st.integers(0, 2)),
    st.builds(lambda nb: dict(hdf5plugin.LZ4(nbytes=nb)), st.sampled_from([0, 64, 1000, 4096])),
    st.builds(lambda ne, c: dict(hdf5plugin.Bitshuffle(nelems=ne, cname=c)),
              st.sampled_from([0, 8, 16, 64, 256]), st.sampled_from(["none", "lz4", "zstd"])),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), ndim=st.integers(1, 3), data=st.data(), comp=COMPRESSORS,
       shuffle=st.booleans(), fletcher32=st.booleans(), kind=st.integers(0, 2), seed=st.integers(0, 2**32 - 1))
def test_decoded_chunks_match_h5py(dtype, ndim, data, comp, shuffle, fletcher32, kind, seed):
    shape = tuple(data.draw(st.lists(st.integers(1, 40), min_size=ndim, max_size=ndim), label="shape"))
    chunks = tuple(data.draw(st.integers(1, n + 3), label="chunk") for n in shape)
    dtype = np.dtype(dtype)
    values = _data(np.random.default_rng(seed), dtype, shape, kind)
    with _file() as f:
        maxshape = (None,) * ndim if any(c > n for c, n in zip(chunks, shape)) else None  # else h5py refuses
        dset = f.create_dataset("x", shape=shape, maxshape=maxshape, dtype=dtype, chunks=chunks, shuffle=shuffle,
                                fletcher32=fletcher32, **comp)
        dset[...] = values
        check_supported(_filters(dset), "test")
        assert _assert_chunks_match(dset) >= 1
        assert np.array_equal(dset[...], values)


@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from(DTYPES), shuffle=st.booleans(), fletcher32=st.booleans(), data=st.data())
def test_a_part_of_a_chunk_is_the_decoded_chunk_sliced(dtype, shuffle, fletcher32, data):
    """decode_chunk_part (which unshuffles only the part's elements) == decode_chunk(...)[part],
    for any part, with or without shuffle and checksum (masked-out filters: the mask test)."""
    dtype = np.dtype(dtype)
    chunks = tuple(data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3), label="chunks"))
    part = tuple(slice(*sorted(data.draw(st.tuples(st.integers(0, c), st.integers(0, c))))) for c in chunks)
    values = _data(np.random.default_rng(0), dtype, chunks, 0)
    with _file() as f:
        dset = f.create_dataset("x", data=values, chunks=chunks, compression="gzip", shuffle=shuffle,
                                fletcher32=fletcher32)
        mask, stored = dset.id.read_direct_chunk((0,) * len(chunks))
        whole = np.frombuffer(decode_chunk(stored, _filters(dset), mask, dtype.itemsize, values.nbytes),
                              dtype=dtype).reshape(chunks)
        got = decode_chunk_part(stored, _filters(dset), mask, dtype, chunks, part)
        assert got.dtype == dtype and got.shape == whole[part].shape
        assert got.tobytes() == whole[part].tobytes() == values[part].tobytes()


@pytest.mark.parametrize("comp", [dict(compression="gzip"), dict(hdf5plugin.Zstd()), dict(hdf5plugin.LZ4()),
                                  dict(hdf5plugin.Blosc(cname="zstd", shuffle=2)),
                                  dict(hdf5plugin.Bitshuffle(cname="lz4")),
                                  dict(hdf5plugin.Bitshuffle(cname="zstd", clevel=5))],
                         ids=["gzip", "zstd", "lz4", "blosc", "bitshuffle-lz4", "bitshuffle-zstd"])
def test_large_chunks_match(comp):
    """Chunks of many codec blocks (bitshuffle's 8 KiB blocks, a partial last block, a raw tail)."""
    rng = np.random.default_rng(7)
    values = np.cumsum(rng.standard_normal((3, 150, 203)), axis=2).astype(">f4")
    with _file() as f:
        dset = f.create_dataset("x", data=values, chunks=(2, 111, 203), shuffle="bitshuffle" not in str(comp), **comp)
        assert _assert_chunks_match(dset) == 4


def _fletcher32_reference(data: bytes) -> int:
    """H5_checksum_fletcher32 (HDF5 src/H5checksum.c), statement for statement."""
    sum1 = sum2 = 0
    words, i = len(data) // 2, 0
    while words:
        tlen = min(words, 360)
        words -= tlen
        for _ in range(tlen):
            sum1 += (data[i] << 8) | data[i + 1]
            i += 2
            sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if len(data) % 2:
        sum1 += data[i] << 8
        sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return (sum2 << 16) | sum1


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=2000) | st.builds(lambda n, b: bytes([b]) * n, st.integers(0, 3000),
                                                         st.sampled_from([0, 0xFF, 0x80])))
def test_fletcher32_library_matches_hdf5_algorithm(data):
    assert imagecodecs.h5checksum_fletcher32(data) == _fletcher32_reference(data)


@pytest.mark.parametrize("n", [1, 2, 721, 722, 4097])
def test_fletcher32_as_h5py_stores_it(n):
    """The last 4 stored bytes are the little-endian checksum of the bytes before them (odd lengths too)."""
    with _file() as f:
        dset = f.create_dataset("x", data=(np.arange(n) * 37 % 256).astype("u1"), chunks=(n,), fletcher32=True)
        _, stored = dset.id.read_direct_chunk((0,))
        assert len(stored) == n + 4
        assert stored[-4:] == _fletcher32_reference(stored[:-4]).to_bytes(4, "little")
        assert bytes(_decode(dset, (0,))) == dset[...].tobytes()


def _fletcher_dataset(f, **comp):
    values = np.arange(3000, dtype="<i4").reshape(30, 100) % 97
    return f.create_dataset("x", data=values, chunks=(10, 100), fletcher32=True, **comp)


@pytest.mark.parametrize("comp", [{}, dict(compression="gzip", shuffle=True), dict(hdf5plugin.Zstd())],
                         ids=["plain", "gzip+shuffle", "zstd"])
def test_flipped_byte_fails_the_checksum(comp):
    with _file() as f:
        dset = _fletcher_dataset(f, **comp)
        mask, stored = dset.id.read_direct_chunk((10, 0))
        filters, nbytes = _filters(dset), 1000 * 4
        assert bytes(decode_chunk(stored, filters, mask, 4, nbytes)) == dset[10:20].tobytes()
        for pos in (0, len(stored) // 2, len(stored) - 5, len(stored) - 1):
            bad = bytearray(stored)
            bad[pos] ^= 0x10
            with pytest.raises(FilterError, match="checksum mismatch"):
                decode_chunk(bytes(bad), filters, mask, 4, nbytes, where="cube.h5:/x")


def test_pre_1_6_3_checksum_is_accepted():
    """HDF5 also accepts the checksum with the bytes of each 16-bit half swapped (files before 1.6.3)."""
    with _file() as f:
        dset = _fletcher_dataset(f)
        mask, stored = dset.id.read_direct_chunk((0, 0))
        c = int.from_bytes(stored[-4:], "little")
        swapped = ((c & 0x00FF00FF) << 8) | ((c >> 8) & 0x00FF00FF)
        assert swapped != c
        old = stored[:-4] + swapped.to_bytes(4, "little")
        assert bytes(decode_chunk(old, _filters(dset), mask, 4, 4000)) == dset[0:10].tobytes()


@pytest.mark.parametrize("comp", [dict(compression="gzip"), dict(hdf5plugin.Zstd()), dict(hdf5plugin.LZ4()),
                                  dict(hdf5plugin.Blosc()), dict(hdf5plugin.Bitshuffle(cname="lz4")),
                                  dict(hdf5plugin.Bitshuffle(cname="zstd"))],
                         ids=["gzip", "zstd", "lz4", "blosc", "bitshuffle-lz4", "bitshuffle-zstd"])
def test_truncated_chunk_raises(comp):
    values = np.cumsum(np.random.default_rng(1).standard_normal(5000)).astype("<f8")
    with _file() as f:
        dset = f.create_dataset("x", data=values, chunks=(5000,), **comp)
        mask, stored = dset.id.read_direct_chunk((0,))
        for cut in (1, len(stored) // 2, len(stored) - 12):
            with pytest.raises(FilterError, match="cube.h5"):
                decode_chunk(stored[:-cut], _filters(dset), mask, 8, 40000, where="cube.h5:/x chunk (0,)")


def test_wrong_size_raises():
    with _file() as f:
        dset = f.create_dataset("x", data=np.arange(100, dtype="<i2"), chunks=(100,), compression="gzip")
        mask, stored = dset.id.read_direct_chunk((0,))
        with pytest.raises(FilterError, match="expected 300"):
            decode_chunk(stored, _filters(dset), mask, 2, 300)
        with pytest.raises(FilterError, match=r"filter 1 \(deflate\) could not decode"):
            decode_chunk(stored, _filters(dset), mask, 2, 199)  # more data than the chunk holds
        with pytest.raises(FilterError, match="decoded to 4 bytes, expected 8"):
            decode_chunk(b"abcd", (), 0, 2, 8)  # no filters: the stored chunk is the raw chunk


@pytest.mark.parametrize("comp,fid,name", [(dict(hdf5plugin.BZip2()), 307, "bzip2"),
                                           (dict(compression="lzf"), 32000, "lzf"),
                                           (dict(scaleoffset=2), 6, "scaleoffset")])
def test_unsupported_filter_is_refused(comp, fid, name):
    with _file() as f:
        dset = f.create_dataset("x", data=np.linspace(0, 1, 64), chunks=(16,), shuffle=True, **comp)
        filters = _filters(dset)
        assert fid in [flt.id for flt in filters] and fid not in SUPPORTED
        with pytest.raises(FilterError, match=rf"cube\.h5:/x: filter {fid} \({name}\) is not supported") as exc:
            check_supported(filters, "cube.h5:/x")
        assert isinstance(exc.value, IngestError) and "filter 2 " not in str(exc.value)
        with pytest.raises(FilterError, match=f"filter {fid}"):
            _decode(dset, (0,))


def test_unsupported_names_each_filter():
    filters = (Filter(2, "shuffle", 0, (4,)), Filter(307, "", 0, ()), Filter(40000, "mystery; see x", 1, ()),
               Filter(32008, "bitshuffle", 0, (0, 4, 4, 0, 9)))
    with pytest.raises(FilterError) as exc:
        check_supported(filters, "a.h5:/cube")
    msg = str(exc.value)
    for part in ("a.h5:/cube", "filter 307 (bzip2)", "filter 40000 (mystery)", "compression 9"):
        assert part in msg
    check_supported(filters[:1], "a.h5:/cube")


def test_filter_mask_skips_filters():
    """Chunks written with write_direct_chunk and a filter_mask: bit i set = filter i not applied."""
    values = (np.arange(4 * 50, dtype="<u4") * 2654435761 % 1000).reshape(4, 50)
    with _file() as f:
        gz = f.create_dataset("gz", shape=(8, 50), dtype="<u4", chunks=(4, 50), compression="gzip")
        gz.id.write_direct_chunk((0, 0), values.tobytes(), filter_mask=0b1)  # stored unfiltered
        gz[4:8] = values[::-1]  # through the pipeline
        both = f.create_dataset("both", shape=(8, 50), dtype="<u4", chunks=(4, 50), compression="gzip",
                                shuffle=True, fletcher32=True)  # pipeline: shuffle, deflate, fletcher32
        both.id.write_direct_chunk((0, 0), zlib.compress(values.tobytes()), filter_mask=0b101)
        both[4:8] = values
        for dset in (gz, both):
            masks = [dset.id.read_direct_chunk(o)[0] for o in _chunk_offsets(dset)]
            assert masks[0] != 0 and masks[1] == 0
            assert _assert_chunks_match(dset) == 2
        assert np.array_equal(gz[0:4], values) and np.array_equal(both[0:4], values)


def test_concurrent_decodes_agree():
    rng = np.random.default_rng(3)
    values = np.cumsum(rng.standard_normal((64, 64, 64)), axis=2).astype("<f4")
    with _file() as f:
        dsets = [f.create_dataset("gz", data=values, chunks=(8, 32, 64), compression="gzip", shuffle=True,
                                  fletcher32=True),
                 f.create_dataset("bs", data=values, chunks=(8, 32, 64), **hdf5plugin.Bitshuffle(cname="lz4")),
                 f.create_dataset("bl", data=values, chunks=(8, 32, 64), **hdf5plugin.Blosc(cname="zstd"))]
        jobs = [(d.id.read_direct_chunk(o), _filters(d)) for d in dsets for o in _chunk_offsets(d)]
        nbytes = 8 * 32 * 64 * 4

        def run(job):
            (mask, stored), filters = job
            return bytes(decode_chunk(stored, filters, mask, 4, nbytes))

        serial = [run(j) for j in jobs]
        with ThreadPoolExecutor(8) as ex:
            for _ in range(3):
                assert list(ex.map(run, jobs)) == serial
