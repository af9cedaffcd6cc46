"""Bad HDF5 input through `read_subcube`: each gets a clear error naming the file or dataset, a
corrupt or truncated chunk is never returned as data, and an unknown filter moves no data."""
from __future__ import annotations

import h5py
import hdf5plugin
import numpy as np
import pytest

import ingest
import ingest.engine.chunked as chunked
from ingest.errors import IngestError, RegionError
from ingest.formats.filters import FilterError
from ingest.testbed.synth import write_cube

DATA = np.arange(6 * 8 * 10, dtype=">f4").reshape(6, 8, 10)


def _file(path, **datasets) -> str:
    with h5py.File(path, "w") as f:
        for name, (data, kw) in datasets.items():
            f.create_dataset(name, data=data, **kw)
    return str(path)


def _error(source, region=(), **kw) -> str:
    with pytest.raises(IngestError) as info:
        ingest.read_subcube(source, region, **kw)
    return str(info.value)


def test_not_hdf5(tmp_path):
    fits_path = tmp_path / "cube.fits"
    write_cube(fits_path, (4, 5, 6), -32)
    msg = _error(str(fits_path), dataset="/cube")
    assert "cube.fits" in msg and "not an HDF5 file" in msg
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x00" * 5000)
    msg = _error(str(junk))
    assert "junk.h5" in msg


def test_missing_dataset_and_ambiguous_default_list_the_datasets(tmp_path):
    path = _file(tmp_path / "two.h5", a=(DATA, {}), b=(DATA, {"chunks": (2, 4, 5)}), flat=(DATA[0, 0], {}))
    msg = _error(path, dataset="/nope")
    assert "'/nope' is not in the file" in msg and "/a" in msg and "/b" in msg and "/flat" in msg
    msg = _error(path)
    assert "2 3-D/4-D numeric datasets" in msg and "dataset=" in msg and "/a" in msg and "/b" in msg
    assert np.array_equal(ingest.read_subcube(path, (1,), dataset="/b"), DATA[1])


@pytest.mark.parametrize("name,data", [
    ("compound", np.zeros((2, 3, 4), dtype=[("x", "<f4"), ("y", "<i2")])),
    ("strings", np.array([[["ab"] * 4] * 3] * 2, dtype="S2")),
])
def test_non_numeric_datasets_are_refused(tmp_path, name, data):
    path = _file(tmp_path / f"{name}.h5", d=(data, {}))
    msg = _error(path, dataset="/d")
    assert f"{name}.h5" in msg and "/d" in msg and "not integer or float" in msg


def test_variable_length_dataset_is_refused(tmp_path):
    path = tmp_path / "vlen.h5"
    with h5py.File(path, "w") as f:
        dset = f.create_dataset("v", shape=(2, 2, 2), dtype=h5py.vlen_dtype(np.float32))
        dset[0, 0, 0] = np.arange(3, dtype=np.float32)
    msg = _error(str(path), dataset="/v")
    assert "/v" in msg and "variable-length" in msg


def test_virtual_and_external_datasets_are_refused(tmp_path):
    src = _file(tmp_path / "src.h5", data=(DATA, {}))
    path = tmp_path / "vds.h5"
    layout = h5py.VirtualLayout(shape=DATA.shape, dtype=DATA.dtype)
    layout[...] = h5py.VirtualSource(src, "data", shape=DATA.shape)
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("virt", layout)
        raw = tmp_path / "raw.bin"
        raw.write_bytes(DATA.tobytes())
        f.create_dataset("ext", shape=DATA.shape, dtype=DATA.dtype, external=[(str(raw), 0, DATA.nbytes)])
    assert "virtual dataset" in _error(str(path), dataset="/virt")
    assert "external raw files" in _error(str(path), dataset="/ext")


def _chunk_offset(path, dataset, index=0) -> tuple[int, int]:
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
        return info.byte_offset, info.size


def _flip(path, offset) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x5A]))


@pytest.mark.parametrize("method", ["posix", "s3"])
def test_corrupt_chunks_are_errors_never_data(tmp_path, s3_server, s3_bucket, s3_env, method):
    gz = _file(tmp_path / "gz.h5", d=(DATA, {"chunks": (2, 4, 5), "compression": "gzip"}))
    fl = _file(tmp_path / "fl.h5", d=(DATA, {"chunks": (2, 4, 5), "fletcher32": True}))
    off, size = _chunk_offset(gz, "d", 3)
    _flip(gz, off + size // 2)  # inside the deflate stream
    off, size = _chunk_offset(fl, "d", 1)
    _flip(fl, off + 5)  # data bytes: the stored checksum no longer matches
    sources = {}
    for path in (gz, fl):
        key = path.rsplit("/", 1)[1]
        s3_server.client().upload_file(path, s3_bucket, key)
        sources[path] = path if method == "posix" else f"s3://{s3_bucket}/{key}"
    with pytest.raises(FilterError) as info:
        ingest.read_subcube(sources[gz], dataset="/d")
    assert "/d" in str(info.value) and "deflate" in str(info.value) and "gz.h5" in str(info.value)
    with pytest.raises(FilterError) as info:
        ingest.read_subcube(sources[fl], dataset="/d")
    assert "fletcher32 checksum mismatch" in str(info.value) and "chunk" in str(info.value)
    # The chunks that are intact still read exactly.
    assert np.array_equal(ingest.read_subcube(sources[fl], (slice(2, 6),), dataset="/d"), DATA[2:6])


def test_truncated_object_is_refused(tmp_path):
    path = _file(tmp_path / "cut.h5", d=(DATA, {"chunks": (2, 4, 5), "compression": "gzip"}))
    off, size = _chunk_offset(path, "d", 5)
    with open(path, "r+b") as fh:
        fh.truncate(off + size // 2)
    msg = _error(path, dataset="/d")
    assert "cut.h5" in msg and ("truncated" in msg or "cannot read it as HDF5" in msg)


def test_region_outside_the_dataset(tmp_path):
    path = _file(tmp_path / "r.h5", d=(DATA, {"chunks": (2, 4, 5)}))
    with pytest.raises(RegionError):
        ingest.read_subcube(path, (slice(0, 7),), dataset="/d")
    with pytest.raises(RegionError):
        ingest.read_subcube(path, (0, 0, 10), dataset="/d")


def test_an_unsupported_filter_is_refused_before_any_data_moves(tmp_path, monkeypatch):
    path = _file(tmp_path / "bz.h5", d=(DATA, {"chunks": (2, 4, 5), **hdf5plugin.BZip2()}))

    def no_requests(*args, **kwargs):
        raise AssertionError("a request was made for data ingest cannot decode")

    monkeypatch.setattr(chunked, "run_requests", no_requests)
    with pytest.raises(FilterError) as info:
        ingest.read_subcube(path, dataset="/d")
    assert "307" in str(info.value) and "bzip2" in str(info.value) and "bz.h5" in str(info.value)
