"""Faults on ONE rank of a real `mpiexec -n 4` job: that rank's S3 reads go through a Toxiproxy
proxy (tests/mpi_harness_fault.py), the other ranks read the server directly.

Beyond its retry budget the faulted rank must end the whole job, non-zero, quickly, saying
which rank failed; within it, the job succeeds, only that rank's report counts retries, and
the reassembled outputs are bit-exact.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
import warnings

import numpy as np
import pytest
from astropy.io import fits

from ingest.testbed.synth import write_cube
from tests.mpitools import ROOT, child_env, reassemble

pytestmark = pytest.mark.timeout(150)

HARNESS = os.path.join(ROOT, "tests", "mpi_harness_fault.py")
N_RANKS = 4
FAULT_RANK = 2
SHAPE = (32, 128, 128)  # int16: 1 MiB, so each rank's box is 256 KiB in four 64 KiB requests
KEY = "survey/cube.fits"
LIMIT_BYTES = 24_000  # limit_data: < one 64 KiB request, so every request on that rank breaks
JOB_BOUND_S = 60.0


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("faults_mpi") / "cube.fits"
    write_cube(path, SHAPE, 16)
    bucket = s3_server.make_bucket(f"faults-mpi-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, KEY)
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        data = np.array(f[0].data)
    return {"s3": f"s3://{bucket}/{KEY}", "data": data}




@pytest.fixture
def proxy(toxiproxy, s3_server):
    """A fresh proxy in front of s3_server: (name, endpoint URL)."""
    name = f"mpi_{uuid.uuid4().hex[:10]}"
    listen = toxiproxy.create_proxy(name, f"127.0.0.1:{s3_server.port}")
    yield name, f"http://{listen}"
    toxiproxy.delete_proxy(name)


def run_job(s3_server, endpoint_url: str, args: list[str], timeout_s: float = 120):
    """mpiexec -n 4 the harness with FAULT_RANK reading through endpoint_url; (process, seconds)."""
    cmd = ["mpiexec", "-n", str(N_RANKS), "--oversubscribe", "--bind-to", "none", sys.executable, HARNESS,
           str(FAULT_RANK), endpoint_url, "run", "--method", "s3", "--no-probe", "--threads", "2",
           "--chunk-bytes", "64KiB", "--no-progress", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=child_env(s3_server), capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    return proc, time.monotonic() - t0


@pytest.fixture(scope="module", params=[("reset_peer", {"timeout": 0}), ("limit_data", {"bytes": LIMIT_BYTES})],
                ids=["reset_peer", "limit_data"])
def failed_job(request, toxiproxy, s3_server, cube, tmp_path_factory):
    """One job whose faulted rank runs out of retries (--retries 1), shared by the tests below."""
    name = f"mpi_fail_{uuid.uuid4().hex[:8]}"
    listen = toxiproxy.create_proxy(name, f"127.0.0.1:{s3_server.port}")
    toxic, attributes = request.param
    toxiproxy.add_toxic(name, toxic, attributes)
    out_dir = tmp_path_factory.mktemp("failed") / "out"
    try:
        proc, elapsed_s = run_job(s3_server, f"http://{listen}",
                                  ["--source", cube["s3"], "--retries", "1", "--retry-backoff-s", "0.05",
                                   "--output-dir", str(out_dir)])
    finally:
        toxiproxy.delete_proxy(name)
    return {"proc": proc, "elapsed_s": elapsed_s, "out_dir": out_dir}


def test_a_rank_beyond_its_retry_budget_ends_the_job_quickly(failed_job):
    proc = failed_job["proc"]
    assert proc.returncode != 0, proc.stdout
    assert failed_job["elapsed_s"] < JOB_BOUND_S
    assert "gave up" in proc.stderr and "after 1 retries" in proc.stderr, proc.stderr
    assert KEY in proc.stderr
    out_dir = failed_job["out_dir"]
    leftovers = os.listdir(out_dir) if out_dir.exists() else []
    assert not any(name.startswith(f"rank{FAULT_RANK:04d}") for name in leftovers)


def test_the_failed_job_names_the_failing_rank(failed_job):
    assert f"rank {FAULT_RANK}" in failed_job["proc"].stderr, failed_job["proc"].stderr


def test_recoverable_faults_on_one_rank_are_counted_there_only(toxiproxy, proxy, cube, s3_server, tmp_path):
    """limit_data cuts every connection of the faulted rank; resuming rides through it with the
    default retry budget."""
    name, endpoint_url = proxy
    report_path, out_dir = tmp_path / "report.json", tmp_path / "out"
    toxiproxy.add_toxic(name, "limit_data", {"bytes": LIMIT_BYTES})
    proc, elapsed_s = run_job(s3_server, endpoint_url, ["--source", cube["s3"], "--retry-backoff-s", "0.05",
                                                        "--output-dir", str(out_dir), "--report", str(report_path)])
    assert proc.returncode == 0, proc.stderr
    assert elapsed_s < JOB_BOUND_S
    report = json.loads(report_path.read_text())
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == list(range(N_RANKS))
    faulted = ranks[FAULT_RANK]
    assert faulted["retries"] > 0 and faulted["resumed_bytes"] > 0
    assert sum(faulted["faults"].values()) == faulted["retries"], "every fault was recovered"
    assert set(faulted["faults"]) <= {"truncated", "reset", "connect"}
    for rank, record in ranks.items():
        if rank != FAULT_RANK:
            assert record["retries"] == 0 and record["faults"] == {} and record["resumed_bytes"] == 0
    rebuilt, hits = reassemble(report, SHAPE, cube["data"].dtype)
    assert (hits == 1).all()
    assert rebuilt.dtype == cube["data"].dtype
    assert rebuilt.tobytes() == cube["data"].tobytes()
