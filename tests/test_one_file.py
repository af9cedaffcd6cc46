"""`run --output-dir` of one named region writes ONE file whatever the rank count: the ranks write
their parts at their offsets into it (ingest.outputs.onefile). The oracle is the one-rank writer
(`--per-rank-files` on one rank: ingest.outputs.subcubes.write_cutout) and astropy's section of
the cube; `--per-rank-files` keeps the pieces; a failure on one rank leaves no file at all."""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
from astropy.io import fits

from ingest.config import load_config
from ingest.errors import ConfigError
from ingest.outputs.subcubes import parse_output_name
from ingest.testbed.synth import write_cube
from tests.mpitools import child_env, cli, mpiexec

SHAPE = (32, 48, 40)  # z, y, x; 1 arcsec pixels about (150, -30), 18.5 kHz channels about 1.4 GHz
REGION = "3:29,5:40,2:37"
BOX = ((3, 29), (5, 40), (2, 37))
SKY = ["--pos", "CIRCLE 150.001 -29.999 0.003", "--band", "1.39995GHz 1.40025GHz"]
QUIET = ["--no-progress", "--no-probe"]


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    path = tmp_path_factory.mktemp("onefile") / "cube.fits"
    write_cube(path, SHAPE, -32, restfrq_hz=1.420405752e9, beams=True)  # a BEAMS table after the data too
    return path


def _section(path, box):
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        return np.array(f[0].section[tuple(slice(a, b) for a, b in box)])


def _only_file(directory) -> str:
    names = os.listdir(directory)
    assert len(names) == 1, names  # no second file, no temporary left
    return os.path.join(directory, names[0])


def _run_alone(args, out, *extra):
    proc = cli(["run", *args, "--output-dir", out, *QUIET, *extra], child_env())
    assert proc.returncode == 0, proc.stderr
    return _only_file(out)


def _run_ranks(n, args, out, report, *extra):
    proc, _ = mpiexec(n, ["run", *args, "--output-dir", out, "--report", report, *QUIET, *extra], child_env())
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text())


def test_a_sky_cutout_under_four_ranks_is_the_lone_file_byte_for_byte(cube, tmp_path):
    args = ["--source", cube, *SKY]
    oracle = _run_alone(args, tmp_path / "old", "--per-rank-files")  # the one-rank writer, unchanged
    lone = _run_alone(args, tmp_path / "lone")
    report = _run_ranks(4, args, tmp_path / "four", tmp_path / "r.json")
    assert report["grid"]["regions"] == 4 and len({tuple(map(tuple, r["box"])) for r in report["ranks"]}) == 4
    four = _only_file(tmp_path / "four")
    assert os.path.basename(four) == os.path.basename(lone) == os.path.basename(oracle)
    with open(oracle, "rb") as a, open(lone, "rb") as b, open(four, "rb") as c:
        want = a.read()
        assert b.read() == want and c.read() == want
    box = tuple(tuple(b) for b in report["grid"]["world_region"]["box"])
    assert report["output_file"] == {"path": four, "box": [list(b) for b in box], "bytes": len(want)}
    with fits.open(four) as f:
        np.testing.assert_array_equal(np.array(f[0].data), _section(cube, box))
        assert len(f["BEAMS"].data) == box[0][1] - box[0][0]


def test_a_box_region_split_along_rows_is_one_file_byte_for_byte(cube, tmp_path):
    # 2 x 3 parts in x and y: each rank's part is many rows apart in the file, not one run.
    args = ["--source", cube, "--region", REGION]
    oracle = _run_alone(args, tmp_path / "old", "--per-rank-files")
    report = _run_ranks(3, args, tmp_path / "three", tmp_path / "r.json", "--grid", "2x3x1")
    assert report["grid"]["regions"] == 6
    got = _only_file(tmp_path / "three")
    assert os.path.basename(got) == os.path.basename(oracle)
    with open(oracle, "rb") as a, open(got, "rb") as b:
        assert a.read() == b.read()


def test_per_rank_files_keeps_a_file_per_rank(cube, tmp_path):
    out = tmp_path / "pieces"
    report = _run_ranks(4, ["--source", cube, "--region", REGION], out, tmp_path / "r.json", "--per-rank-files")
    names = sorted(os.listdir(out))
    assert len(names) == 4 and "output_file" not in report
    assert sorted(os.path.basename(r["output_path"]) for r in report["ranks"]) == names
    voxels = 0
    for name in names:
        rank, box = parse_output_name(name)
        with fits.open(out / name) as f:
            np.testing.assert_array_equal(np.array(f[0].data), _section(cube, box))
        voxels += np.prod([b - a for a, b in box])
    assert voxels == np.prod([b - a for a, b in BOX])


def test_an_hdf5_region_is_one_file_with_the_lone_files_data_and_attributes(cube, tmp_path):
    import h5py

    source = tmp_path / "cube.h5"
    data = _section(cube, tuple((0, n) for n in SHAPE)).astype(">f4")
    with h5py.File(source, "w") as f:
        dset = f.create_dataset("/0/DATA", data=data)
        dset.attrs.update({"CTYPE1": "RA---SIN", "CRPIX1": 20.0, "CRPIX3": 16.0})
    args = ["--source", source, "--region", REGION]
    oracle = _run_alone(args, tmp_path / "old", "--per-rank-files")
    _run_ranks(4, args, tmp_path / "four", tmp_path / "r.json")
    got = _only_file(tmp_path / "four")
    assert os.path.basename(got) == os.path.basename(oracle) and os.path.getsize(got) == os.path.getsize(oracle)
    # The same bytes: the headers carry no modification time (test below), so nothing differs.
    with open(oracle, "rb") as a, open(got, "rb") as b:
        assert a.read() == b.read()
    with h5py.File(oracle) as a, h5py.File(got) as b:
        np.testing.assert_array_equal(b["/0/DATA"][...], data[tuple(slice(lo, hi) for lo, hi in BOX)])
        assert b["/0/DATA"].dtype == a["/0/DATA"].dtype
        assert {k: str(v) for k, v in a["/0/DATA"].attrs.items()} == {k: str(v) for k, v in b["/0/DATA"].attrs.items()}


def test_an_hdf5_region_file_is_the_same_bytes_whenever_it_is_written(tmp_path):
    """HDF5 stamps an object's header with the second it was made unless told not to; a region's
    file is the same bytes a second later (a re-run, another rank's write of the same file)."""
    import time

    import h5py

    from ingest.formats.hdf5 import read_hdf5_layout
    from ingest.formats.h5_cutout import subcube_image
    from ingest.transports.base import MemoryTransport

    source = tmp_path / "cube.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("/0/DATA", data=np.arange(4 * 5 * 6, dtype=">f4").reshape(4, 5, 6))
    layout = read_hdf5_layout(MemoryTransport(source.read_bytes(), "cube.h5"))
    box = ((0, 2), (1, 4), (0, 6))
    first = subcube_image(layout, box, source_label="cube.h5")
    time.sleep(1.1)  # into another second: HDF5's times are whole seconds
    again = subcube_image(layout, box, source_label="cube.h5")
    assert again.pieces == first.pieces and again.size_bytes == first.size_bytes


FAILING_FSYNC = """
import os, sys
from mpi4py import MPI
from ingest.cli.main import main
if MPI.COMM_WORLD.Get_rank() == 2:
    def broken(fd):
        raise OSError(5, "injected: Input/output error")
    os.fsync = broken  # rank 2's write into the one file fails after its bytes went in
sys.exit(main(sys.argv[1:]))
"""


def test_a_rank_that_fails_to_write_leaves_no_file_and_no_temporary(cube, tmp_path):
    out = tmp_path / "out"
    proc, _ = mpiexec(4, ["run", "--source", cube, "--region", REGION, "--output-dir", out, *QUIET], child_env(),
                      python_args=("-c", FAILING_FSYNC))
    assert proc.returncode == 1, proc.stderr
    assert "injected: Input/output error" in proc.stderr and "rank 2" in proc.stderr
    assert os.listdir(out) == []


def test_per_rank_files_needs_an_output_dir():
    with pytest.raises(ConfigError, match="per_rank_files"):
        load_config({"source": "cube.fits", "per_rank_files": True})
    assert load_config({"source": "cube.fits", "per_rank_files": True, "output_dir": "o"}).per_rank_files
