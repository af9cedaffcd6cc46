"""`python -m ingest tile` to the local S3 server, then `mpiexec -n 2 python -m ingest run --source
.../index.json`: every tile is a valid FITS/HDF5 file equal to its box of the source, the run
reassembles the source bit for bit over s3 and presigned, and a broken index or tile is an
error naming the object."""
import json
import os
import warnings
import zlib

import h5py
import numpy as np
import pytest
from astropy.io import fits

from ingest.testbed.synth import write_cube
from ingest.testbed.synth_hdf5 import write_hdf5_cube
from tests.mpitools import child_env, cli, mpiexec

SHAPE = (12, 20, 18)  # numpy order (z, y, x)
GRIDS = {"fits": "2x2x1", "hdf5": "2x2x2"}


def _fits_data(path):
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        return np.array(f[0].data), f[0].header.copy()


@pytest.fixture(scope="module")
def tiled(s3_server, tmp_path_factory):
    """A pseudo-unsigned FITS cube (tiled from its s3:// copy) and a chunked, gzip'd HDF5 cube
    (tiled from a local path), each cut by `python -m ingest tile` to s3://BUCKET/FORMAT/."""
    root = tmp_path_factory.mktemp("tile")
    bucket = s3_server.make_bucket("tile-command")
    client = s3_server.client()
    fits_path, h5_path = root / "cube.fits", root / "cube.h5"
    write_cube(fits_path, SHAPE, 16, bzero=32768, bscale=1)
    client.upload_file(str(fits_path), bucket, "src/cube.fits")
    write_hdf5_cube(h5_path, SHAPE, chunks=(4, 8, 8), compression="gzip", shuffle=True)
    env = child_env(s3_server)
    cubes = {}
    for fmt, source in (("fits", f"s3://{bucket}/src/cube.fits"), ("hdf5", str(h5_path))):
        proc = cli(["tile", source, f"s3://{bucket}/{fmt}/", "--grid", GRIDS[fmt], "--parallel", "2"], env)
        assert proc.returncode == 0, proc.stderr
        assert f"index s3://{bucket}/{fmt}/index.json" in proc.stdout
        index = json.loads(client.get_object(Bucket=bucket, Key=f"{fmt}/index.json")["Body"].read())
        if fmt == "fits":
            data, header = _fits_data(fits_path)
        else:
            with h5py.File(h5_path, "r") as f:
                data, header = f["cube"][...], dict(f["cube"].attrs)
        cubes[fmt] = {"index": index, "data": data, "header": header, "prefix": f"{fmt}/",
                      "s3": f"s3://{bucket}/{fmt}/index.json"}
    return {"bucket": bucket, "root": root, **cubes}


@pytest.mark.parametrize("fmt", ["fits", "hdf5"])
def test_every_tile_is_a_valid_file_equal_to_its_box(tiled, s3_server, tmp_path, fmt):
    cube, bucket, client = tiled[fmt], tiled["bucket"], s3_server.client()
    index = cube["index"]
    assert index["schema"] == "ingest.tiles/1" and index["format"] == fmt and index["grid"] == GRIDS[fmt]
    assert index["shape"] == list(SHAPE) and index["dtype"] == (">i2" if fmt == "fits" else ">f4")
    ext = ".fits" if fmt == "fits" else ".h5"
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=cube["prefix"])["Contents"]}
    assert keys == {cube["prefix"] + "index.json"} | {cube["prefix"] + t["key"] for t in index["tiles"]}
    hits = np.zeros(SHAPE, np.int32)
    for n, tile in enumerate(index["tiles"]):
        assert tile["key"] == f"tile_{n:04d}{ext}"
        body = client.get_object(Bucket=bucket, Key=cube["prefix"] + tile["key"])["Body"].read()
        assert len(body) == tile["bytes"]
        path = tmp_path / tile["key"]
        path.write_bytes(body)
        box = tuple(slice(a, b) for a, b in tile["box"])
        hits[box] += 1
        if fmt == "fits":
            data, header = _fits_data(path)
            with fits.open(path, do_not_scale_image_data=True) as f:
                f.verify("exception")  # a standalone, valid FITS file
                raw = np.array(f[0].data)  # the stored values, which the CRC covers
                assert raw.dtype == np.dtype(">i2")
            for n_axis in (1, 2, 3):  # the WCS moves with the box: pixel 1 is the box's first pixel
                start = tile["box"][3 - n_axis][0]
                assert header[f"CRPIX{n_axis}"] == cube["header"][f"CRPIX{n_axis}"] - start
        else:
            with h5py.File(path, "r") as f:
                dset = f["/cube"]
                data, raw = dset[...], dset[...]
                assert list(dset.attrs["ingest_region_start"]) == [a for a, _ in tile["box"]]
        assert data.dtype == cube["data"].dtype and np.array_equal(data, cube["data"][box])
        assert zlib.crc32(np.ascontiguousarray(raw).tobytes()) == tile["crc32"]
    assert (hits == 1).all()


def _reassemble(report, shape, dtype, fmt):
    """Paste every region's output (one file per region, in the rank record's order) into a cube."""
    cube, hits = np.zeros(shape, dtype), np.zeros(shape, np.int32)
    for rank in report["ranks"]:
        paths = rank["output_path"] if isinstance(rank["output_path"], list) else [rank["output_path"]]
        assert len(paths) == len(rank["regions"])
        for index, path in zip(rank["regions"], paths):
            box = tuple(slice(a, b) for a, b in report["regions"][index]["box"])
            if fmt == "fits":
                cube[box] = _fits_data(path)[0]
            else:
                with h5py.File(path, "r") as f:
                    cube[box] = f["/cube"][...]
            hits[box] += 1
    return cube, hits


@pytest.mark.parametrize("fmt,method,threads", [("fits", "s3", "2"), ("fits", "presigned", "1"),
                                                ("hdf5", "s3", "1"), ("hdf5", "presigned", "2")])
def test_two_ranks_reassemble_the_source_bit_for_bit(tiled, s3_server, tmp_path, fmt, method, threads):
    cube = tiled[fmt]
    out_dir, report_path = tmp_path / "out", tmp_path / "report.json"
    proc, _ = mpiexec(2, ["run", "--source", cube["s3"], "--method", method, "--threads", threads, "--output-dir",
                          out_dir, "--report", report_path, "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    n_tiles = len(cube["index"]["tiles"])
    assert len(report["regions"]) == n_tiles and len(os.listdir(out_dir)) == n_tiles
    rebuilt, hits = _reassemble(report, SHAPE, cube["data"].dtype, fmt)
    assert (hits == 1).all() and rebuilt.dtype == cube["data"].dtype
    assert np.array_equal(rebuilt, cube["data"])
    assert report["grid"]["grid_fits"] == [int(p) for p in GRIDS[fmt].split("x")]
    assert report["cube"]["format"] == fmt and report["cube"]["shape"] == list(SHAPE)
    for region, tile in zip(report["regions"], cube["index"]["tiles"]):
        assert region["box"] == tile["box"] and f"/{fmt}/{tile['key']}" in region["object"]["source"]
        assert region["bytes_needed"] == np.prod([b - a for a, b in tile["box"]]) * cube["data"].itemsize
    assert report["aggregate"]["bytes_needed"] == cube["data"].nbytes
    assert "X-Amz-Signature" not in report_path.read_text() + proc.stdout + proc.stderr


def test_a_local_tiled_directory_runs_and_take_regions_keeps_the_first_tiles(tiled, tmp_path):
    env = child_env()
    proc = cli(["tile", tiled["root"] / "cube.fits", tmp_path / "tiles", "--grid", "1x2x3", "--quiet"], env)
    assert proc.returncode == 0, proc.stderr
    index = json.loads((tmp_path / "tiles" / "index.json").read_text())
    report_path = tmp_path / "r.json"
    proc = cli(["run", "--source", tmp_path / "tiles" / "index.json", "--take-regions", "2", "--output-dir",
                tmp_path / "out", "--report", report_path, "--no-progress"], env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert [r["box"] for r in report["regions"]] == [t["box"] for t in index["tiles"][:2]]
    data = tiled["fits"]["data"]
    rebuilt, hits = _reassemble(report, SHAPE, data.dtype, "fits")
    assert np.array_equal(rebuilt[hits == 1], data[hits == 1]) and hits.sum() == data.size // 3
    proc = cli(["run", "--source", tmp_path / "tiles" / "index.json", "--grid", "2x2x1", "--no-progress"], env)
    assert proc.returncode == 1
    assert "grid: '2x2x1' does not match" in proc.stderr and "tiled as 1x2x3" in proc.stderr
    proc = cli(["info", tmp_path / "tiles" / "index.json"], env)
    assert proc.returncode == 1 and "is a tile index (ingest.tiles/1: 6 tiles" in proc.stderr


def _break(client, bucket, src_prefix, dst_prefix, how):
    """Copy a tiled cube to dst_prefix, then break it: a missing tile, a wrong CRC or a bad schema."""
    for obj in client.list_objects_v2(Bucket=bucket, Prefix=src_prefix)["Contents"]:
        key = dst_prefix + obj["Key"][len(src_prefix):]
        client.copy_object(Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": obj["Key"]})
    index = json.loads(client.get_object(Bucket=bucket, Key=dst_prefix + "index.json")["Body"].read())
    if how == "missing":
        client.delete_object(Bucket=bucket, Key=dst_prefix + index["tiles"][2]["key"])
    elif how == "crc":
        index["tiles"][1]["crc32"] ^= 0x5A5A
    else:
        index["schema"] = "ingest.tiles/0"
    client.put_object(Bucket=bucket, Key=dst_prefix + "index.json", Body=json.dumps(index).encode())


@pytest.mark.parametrize("how,method,expected", [
    ("missing", "s3", ["tile_0002.fits", "404"]),
    ("missing", "presigned", ["tile_0002.fits", "404"]),
    ("crc", "s3", ["tile_0001.fits: CRC-32 of its data is", "broken-crc-s3/index.json says"]),
    ("schema", "s3", ["broken-schema-s3/index.json: schema: 'ingest.tiles/0' is not 'ingest.tiles/1'"]),
])
def test_a_broken_tiled_source_is_an_error_naming_the_object(tiled, s3_server, tmp_path, how, method, expected):
    bucket, client = tiled["bucket"], s3_server.client()
    prefix = f"broken-{how}-{method}/"
    _break(client, bucket, "fits/", prefix, how)
    proc, _ = mpiexec(2, ["run", "--source", f"s3://{bucket}/{prefix}index.json", "--method", method,
                          "--output-dir", tmp_path / "out", "--no-progress"], child_env(s3_server))
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stderr, proc.stderr
    assert "X-Amz-Signature" not in proc.stderr
