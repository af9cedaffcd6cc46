"""Every store of the matrix (conftest's `any_store`: versitygw and Ceph RGW, each over HTTP and
HTTPS with a private CA), the same exact data: the transport contract of the s3 and presigned
transports under both engines (native = libcurl, urllib3), and one end-to-end run of each command
that moves data, checked byte for byte against the local file it came from: `run` (s3 with the
native engine on 4 ranks, presigned with urllib3 on 2), `stage`, `prestage`, `publish` (s3 and
presigned uploads), `upload`, `ingest.open` and `read_subcube`. One RGW serves the whole session.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from astropy.io import fits

import ingest
from ingest import read_subcube
from ingest.testbed.synth import write_cube
from ingest.transports import open_transport
from ingest.transports.presign import presign_url
from tests.mpitools import child_env, cli, mpiexec, reassemble
from tests.test_open import CUBES, FIXED_KEYS, _write, assert_bits, local_array, oracle
from tests.test_read_subcube_e2e import REGIONS, astropy_section
# The transport contract of tests/test_transports.py, run here over every store through this
# module's `transport` fixture (pytest resolves a test's fixtures where it is collected).
from tests.test_transports import (OBJECT, test_concurrent_reads_share_one_transport,  # noqa: F401
                                   test_exact_ranges, test_range_past_the_end_is_an_error, test_size)

pytestmark = pytest.mark.timeout(240)

SHAPE = (48, 200, 160)  # float32: 6.1 MB, two 5 MiB parts for upload and publish
KEY = "survey/cube.fits"
OPEN_CUBES = ("fits_scaled_ext", "h5_chunked")  # of tests/test_open.py: scaled FITS in an extension, gzip HDF5


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The cube as a local file, its bytes and astropy's reading of its data."""
    path = tmp_path_factory.mktemp("matrix") / "cube.fits"
    write_cube(path, SHAPE, -32)
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        data = np.array(f[0].data)
    return {"path": str(path), "bytes": path.read_bytes(), "data": data}


def put_cube(store, local, key: str = KEY) -> dict:
    """The cube uploaded to the store's fresh bucket: its s3:// URI and a presigned URL."""
    store.client.put_object(Bucket=store.bucket, Key=key, Body=local["bytes"])
    return {"s3": f"s3://{store.bucket}/{key}", "presigned": presign_url(store.bucket, key, 3600, client=store.client)}


def stored_bytes(store, key: str) -> bytes:
    return store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read()


# ------------------------------------------------------------------ the transport contract

@pytest.fixture(scope="module")
def contract_objects():
    """Per store, the bucket holding OBJECT: uploaded by the first contract test on that store and
    read by the rest (one upload per store, not one per test); emptied and deleted at the end."""
    buckets: dict = {}
    yield buckets
    for client, bucket in buckets.values():
        client.delete_object(Bucket=bucket, Key="dir/object.bin")
        client.delete_bucket(Bucket=bucket)


@pytest.fixture(params=["s3", "presigned"])
def transport(request, any_store, engine, contract_objects):
    """tests/test_transports.py's OBJECT on this store, opened by the s3 or presigned transport
    with the engine under test (conftest's `engine`: native or urllib3)."""
    if any_store.name not in contract_objects:
        bucket = f"contract-{any_store.bucket}"[:63]
        any_store.client.create_bucket(Bucket=bucket)
        any_store.client.put_object(Bucket=bucket, Key="dir/object.bin", Body=OBJECT)
        contract_objects[any_store.name] = (any_store.client, bucket)
    bucket = contract_objects[any_store.name][1]
    source = (f"s3://{bucket}/dir/object.bin" if request.param == "s3"
              else presign_url(bucket, "dir/object.bin", 3600, client=any_store.client))
    opened = open_transport(source, request.param, threads=4)
    yield opened
    opened.close()


# ------------------------------------------------------------------ the commands, end to end

@pytest.mark.parametrize("method, engine_name, n_ranks", [("s3", "native", 4), ("presigned", "urllib3", 2)])
def test_run_reassembles_the_cube_exactly(any_store, local, tmp_path, method, engine_name, n_ranks):
    source = put_cube(any_store, local)["s3"]
    out_dir, report_path = tmp_path / "out", tmp_path / "report.json"
    proc, _ = mpiexec(n_ranks, ["run", "--source", source, "--method", method, "--engine", engine_name,
                                "--threads", "2", "--chunk-bytes", "64KiB", "--no-probe", "--output-dir", out_dir,
                                "--report", report_path, "--no-progress"], child_env(**any_store.env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["config"]["resolved_engine"] == engine_name and len(report["ranks"]) == n_ranks
    rebuilt, hits = reassemble(report, SHAPE, local["data"].dtype)
    assert (hits == 1).all() and np.array_equal(rebuilt, local["data"])


def test_stage_copies_the_object_exactly(any_store, local, tmp_path):
    source = put_cube(any_store, local)["s3"]
    proc, _ = mpiexec(2, ["stage", "--source", source, "--stage-dir", tmp_path / "st", "--chunk-bytes", "1MiB",
                          "--no-progress"], child_env(**any_store.env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "st" / "cube.fits").read_bytes() == local["bytes"]


def test_prestage_frame_equals_the_source(any_store, local, tmp_path):
    source = put_cube(any_store, local)["s3"]
    out_dir = tmp_path / "pre"
    proc, _ = mpiexec(2, ["prestage", "--source", source, "--method", "presigned", "--output-dir", out_dir,
                          "--grid", "1x2x1", "--halo", "2", "--no-probe", "--chunk-bytes", "256KiB", "--no-progress"],
                      child_env(**any_store.env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert len(manifest["regions"]) == 2 and all(r["status"] == "done" for r in manifest["regions"])
    assert (out_dir / "cube.fits").read_bytes() == local["bytes"]


@pytest.fixture(scope="module")
def prestaged(local, tmp_path_factory):
    """The local cube pre-staged from its file by 2 ranks: what `publish` writes back."""
    out_dir = tmp_path_factory.mktemp("matrix-prestage") / "staged"
    proc, _ = mpiexec(2, ["prestage", "--source", local["path"], "--output-dir", out_dir, "--grid", "1x2x1",
                          "--no-probe", "--no-progress"], child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(out_dir)


@pytest.mark.parametrize("upload_method", ["s3", "presigned"])
def test_publish_writes_the_cube_exactly(any_store, local, prestaged, tmp_path, upload_method):
    report_path = tmp_path / "publish.json"
    proc, _ = mpiexec(2, ["publish", "--source", prestaged, "--dest", f"s3://{any_store.bucket}/out/cube.fits",
                          "--upload-method", upload_method, "--part-bytes", "5MiB", "--report", report_path,
                          "--no-progress"], child_env(**any_store.env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["method"] == upload_method and report["parts"] == 2
    assert stored_bytes(any_store, "out/cube.fits") == local["bytes"]


def test_upload_stores_the_file_exactly(any_store, local):
    proc = cli(["upload", local["path"], f"s3://{any_store.bucket}/up/cube.fits", "--part-bytes", "5MiB",
                "--no-progress"], child_env(**any_store.env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "in 2 part(s)" in proc.stdout
    assert stored_bytes(any_store, "up/cube.fits") == local["bytes"]


@pytest.fixture(scope="module")
def open_cubes(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix-open")
    return {name: (_write(root, name, CUBES[name]), CUBES[name]) for name in OPEN_CUBES}


@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_open_equals_astropy_and_h5py(any_store, open_cubes, method):
    for name, (path, spec) in open_cubes.items():
        key = f"c/{path.rsplit('/', 1)[1]}"
        with open(path, "rb") as fh:
            source = put_cube(any_store, {"bytes": fh.read()}, key)[method]
        where = {"hdu": spec["hdu"]} if spec["kind"] == "fits" else {}
        whole = local_array(path, spec)
        with ingest.open(source, threads=3, **where) as cube:
            assert cube.shape == whole.shape, name
            for index in FIXED_KEYS:
                assert_bits(cube[index], oracle(path, spec, index), f"{any_store.name} {method} {name} {index}")


@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_read_subcube_matches_astropy(any_store, local, method):
    source = put_cube(any_store, local)[method]
    for region in REGIONS:
        got = read_subcube(source, region, threads=3, chunk_bytes=256 * 1024)
        want, want_dtype = astropy_section(local["path"], 0, region)
        assert got.shape == want.shape and got.dtype.itemsize == want_dtype.itemsize, region
        assert np.array_equal(got, want), f"{any_store.name} {method} {region}"
