"""Shared by the tests that run ingest as real processes: a clean child environment, `python -m
ingest` alone or under `mpiexec`, and pasting the ranks' FITS outputs back into one cube."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import numpy as np
from astropy.io import fits

from ingest.testbed.synth import write_cube

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def upload_fits_cube(s3_server, directory, bucket, shape, bitpix=16) -> dict:
    """Write a pseudo-unsigned FITS cube, upload it to its own bucket, return its path, URL and data.

    Each test module passes its own bucket name: module-scoped fixtures of two modules share one
    server in a session, and a bucket cannot be created twice."""
    path = directory / "cube.fits"
    write_cube(path, shape, bitpix, bzero=32768, bscale=1)  # pseudo-unsigned: scaling must survive
    s3_server.make_bucket(bucket)
    s3_server.client().upload_file(str(path), bucket, "survey/cube.fits")
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        data = np.array(f[0].data)
    return {"path": str(path), "s3": f"s3://{bucket}/survey/cube.fits", "data": data}


# The transports honour a user's proxy (ingest.transports.environment): a developer's proxy
# without 127.0.0.1 in no_proxy must not carry the tests' loopback traffic.
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def child_env(s3_server=None, **extra) -> dict:
    """This environment minus AWS/MPI/SLURM variables that would steer the child, plus the test
    server's AWS_* variables, what root needs for mpiexec, and PYTHONPATH to this checkout."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "OMPI_", "PMIX_", "SLURM_")) and k.lower() not in PROXY_VARS}
    if s3_server is not None:
        env.update(s3_server.env())
    env.update(PYTHONPATH=ROOT, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra)
    return env


def cli(args, env, timeout_s=60) -> subprocess.CompletedProcess:
    """`python -m ingest ARGS` in one process (a one-rank MPI world for run and stage)."""
    return subprocess.run([sys.executable, "-m", "ingest", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout_s, cwd=ROOT)


def mpiexec(n, args, env, timeout_s=120, python_args=("-m", "ingest")):
    """`mpiexec -n N python PYTHON_ARGS ARGS`; returns (CompletedProcess, wall seconds)."""
    cmd = ["mpiexec", "-n", str(n), "--oversubscribe", "--bind-to", "none", sys.executable, *python_args,
           *map(str, args)]
    env = {**env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "PYTHONPATH": ROOT}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    return proc, time.monotonic() - t0


def reassemble(report, shape, dtype):
    """Paste every rank's FITS output (located by the report) back into one cube; also count how
    often each voxel was written."""
    cube = np.zeros(shape, dtype=dtype)
    hits = np.zeros(shape, dtype=np.int32)
    for rank in report["ranks"]:
        region = tuple(slice(a, b) for a, b in rank["box"])
        with fits.open(rank["output_path"]) as f:
            cube[region] = f[0].data
        hits[region] += 1
    return cube, hits
