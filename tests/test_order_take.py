"""`--order random` issues the same requests in another order; `--take-regions p` (weak scaling)
reads the first p regions of a split, each rank one of the same size."""
import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

from ingest.core.regions import take_first
from ingest.errors import ConfigError
from ingest.engine.executor import request_order
from tests.mpitools import child_env, mpiexec, reassemble, upload_fits_cube
from tests.test_mpi_run import SHAPE


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    return upload_fits_cube(s3_server, tmp_path_factory.mktemp("order"), "order-cubes", SHAPE)


@given(st.integers(0, 500), st.sampled_from(["sequential", "random"]))
def test_request_order_is_a_permutation(n, order):
    seq = np.asarray(list(request_order(n, order)), dtype=np.int64)
    assert sorted(seq.tolist()) == list(range(n))
    if order == "sequential":
        assert seq.tolist() == list(range(n))


def test_random_order_differs_from_file_order():
    assert any(list(request_order(200, "random")) != list(range(200)) for _ in range(3))


@given(st.integers(1, 40), st.data())
def test_take_first_keeps_the_split_order(n_regions, data):
    regions = tuple(((i, i + 1),) for i in range(n_regions))
    take = data.draw(st.integers(1, n_regions))
    assert take_first(regions, take) == regions[:take]


def test_take_more_than_the_split_names_the_field():
    with pytest.raises(ConfigError, match=r"take_regions: 5 is not in 1..4"):
        take_first(((0, 1),) * 4, 5)


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_weak_scaling_run_reads_first_p_of_b_boxes_in_either_order(cube, s3_server, tmp_path, order):
    out_dir, report_path = tmp_path / "out", tmp_path / "report.json"
    proc, _ = mpiexec(2, ["run", "--source", cube["s3"], "--grid", "1x2x2", "--take-regions", "2", "--order", order,
                          "--strategy", "small", "--threads", "2", "--output-dir", str(out_dir),
                          "--report", str(report_path), "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert report["config"]["order"] == order and report["config"]["take_regions"] == 2
    boxes = sorted(r["box"] for r in report["ranks"])
    half_z, half_y = SHAPE[0] // 2, SHAPE[1] // 2
    # grid 1x2x2 splits z and y in two; regions go x fastest, so the first two share z's first half
    assert boxes == [[[0, half_z], [0, half_y], [0, SHAPE[2]]], [[0, half_z], [half_y, SHAPE[1]], [0, SHAPE[2]]]]
    rebuilt, hits = reassemble(report, SHAPE, cube["data"].dtype)
    assert np.array_equal(rebuilt[:half_z], cube["data"][:half_z]) and (hits[half_z:] == 0).all()
    assert report["aggregate"]["requests"] > 2


def test_take_regions_beyond_the_split_is_refused(cube, s3_server, tmp_path):
    proc, _ = mpiexec(2, ["run", "--source", cube["s3"], "--grid", "1x2x1", "--take-regions", "3",
                          "--report", str(tmp_path / "r.json"), "--no-progress"], child_env(s3_server))
    assert proc.returncode != 0 and "take_regions: 3 is not in 1..2" in proc.stderr
    assert not (tmp_path / "r.json").exists()
