"""Ranks that start fast: a rank imports only what its job uses (issue 46).

Rank 0 parses the header (astropy) and broadcasts the job; the other ranks unpickle it and read.
So in a fresh process: importing ingest and the read path loads none of the heavy packages; the
job rank 0 made (a FitsLayout with its BEAMS table, the Settings, the resolved environment) is
unpickled without them; reading it loads only the client its method needs (urllib3 for a
presigned URL, boto3 for s3://, nothing for a local file), with the data exact. And in a real
`mpiexec -n 2 python -m ingest run`, rank 1 never loads astropy while rank 0 does. No timings are
asserted: bench/engine/startup.py measures them.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
import zlib

import numpy as np
import pytest

from ingest.config import load_config
from ingest.core.sharing import Topology
from ingest.driver.job import prepare_job
from ingest.errors import ConfigError
from ingest.testbed.synth import write_cube
from ingest.testbed.synth_hdf5 import write_hdf5_cube
from ingest.transports.retry import RetryPolicy
from tests.mpitools import ROOT, child_env, mpiexec

# Never needed by a rank that reads (astropy: rank 0 parses headers; h5py: rank 0 reads HDF5
# metadata; matplotlib and tqdm: drawing, rank 0's progress bar), nor boto3 but for s3://.
HEAVY = ("astropy", "boto3", "botocore", "h5py", "matplotlib", "tqdm")
CLIENTS = ("urllib3", "pycurl", "boto3", "botocore")
SHAPE = (6, 20, 24)  # numpy order: channels, y, x
LOADED = "sorted({name.split('.')[0] for name in sys.modules})"  # top-level packages loaded, in a child


def _python(code: str, env: dict, payload: bytes = b"") -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", code], input=payload, env=env, capture_output=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done


def test_importing_ingest_and_the_read_path_loads_no_heavy_package():
    """`import ingest`, the `run` command's parser and every module a reading rank runs: none of
    the heavy packages, and no HTTP or S3 client before a method asks for one."""
    code = f"""
import json, sys
from importlib import import_module
import ingest
after_ingest = {LOADED}
import_module("ingest.cli.main").build_parser("run")
for name in ("ingest.cli.run", "ingest.driver.read", "ingest.driver.job", "ingest.transports",
             "ingest.transports.environment", "ingest.formats.reader", "ingest.formats.fits",
             "ingest.formats.beams", "ingest.formats.hdf5", "ingest.config.settings", "ingest.engine.executor"):
    import_module(name)
print(json.dumps([after_ingest, {LOADED}]))
"""
    after_ingest, after_read_path = json.loads(_python(code, child_env()).stdout)
    assert not set(after_ingest) & {*HEAVY, *CLIENTS, "numpy", "mpi4py"}, after_ingest
    assert not set(after_read_path) & {*HEAVY, *CLIENTS}, after_read_path


def test_the_package_names_resolve_on_first_use():
    """The lazy names are the objects they always were: ingest.open, ingest.read_subcube, the
    driver's run and publish (the function, also once its module of the same name is imported)."""
    import ingest
    import ingest.api
    import ingest.driver
    from ingest.api.cube import RemoteCube, open as open_cube
    from ingest.api.read import read_subcube
    from ingest.driver.commands import run
    from ingest.driver.publish import publish as publish_regions

    assert ingest.open is open_cube and ingest.RemoteCube is RemoteCube and ingest.read_subcube is read_subcube
    assert ingest.api.open is open_cube and {"open", "RemoteCube", "read_subcube"} <= set(dir(ingest))
    assert ingest.driver.run is run
    from ingest.driver import publish

    assert publish is publish_regions and ingest.driver.publish is publish_regions
    with pytest.raises(AttributeError, match="no attribute 'opne'"):
        ingest.opne  # noqa: B018 - the lookup is the test


@pytest.fixture(scope="module")
def cubes(s3_server, tmp_path_factory):
    """A FITS cube whose beam varies per channel (a BEAMS table rides in its layout) and an HDF5
    cube, on disk and in a bucket of their own."""
    directory = tmp_path_factory.mktemp("startup")
    fits_path, h5_path = directory / "cube.fits", directory / "cube.h5"
    write_cube(fits_path, SHAPE, -32, beams=True)
    write_hdf5_cube(h5_path, SHAPE, -32, chunks=(2, 10, 12))
    bucket = s3_server.make_bucket(f"startup-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(fits_path), bucket, "cube.fits")
    return {"posix": str(fits_path), "presigned": f"s3://{bucket}/cube.fits", "s3": f"s3://{bucket}/cube.fits",
            "hdf5": str(h5_path)}


# A rank other than 0: the job arrives pickled, the rank reads its regions (ingest.driver.read).
_RANK = f"""
import json, pickle, sys, zlib
from mpi4py import MPI
from ingest.driver.read import read_rank_regions
cfg, job = pickle.loads(sys.stdin.buffer.read())
unpickled = {LOADED}
regions, record, error = read_rank_regions(MPI.COMM_SELF, cfg, job, job.read_source, job.method, "direct")
assert error is None, error
crcs = [[r.box, zlib.crc32(r.data.astype(job.layout.raw_dtype).tobytes())] for r in regions]
beams = job.layout.kind == "fits" and job.layout.beams is not None
print(json.dumps({{"unpickled": unpickled, "read": {LOADED}, "crcs": crcs, "beams": beams}}))
"""


@pytest.mark.parametrize("method", ["posix", "presigned", "s3", "hdf5"])
def test_a_rank_reads_rank_0s_job_with_only_its_methods_client(method, cubes, s3_server, s3_env, monkeypatch):
    """Rank 0 prepares the job (parses the header with astropy or h5py, presigns, resolves the
    environment); a fresh process, as a rank other than 0, unpickles it and reads every region:
    no heavy package on unpickling, after reading only the client its method needs, data exact."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")  # rank 0's alone: child_env gives the rank the server's AWS_* only
    cfg = load_config({"source": cubes[method], "method": "posix" if method == "hdf5" else method, "progress": False})
    job = prepare_job(cfg, Topology.of_hosts(["here"]))
    assert job.layout.kind == ("hdf5" if method == "hdf5" else "fits")
    # What rank 0 resolved travels with the job: the retries a local file never asks AWS about.
    assert job.retry.retries == (3 if method in ("presigned", "s3") else RetryPolicy().retries)
    assert (job.environment is None) is (method in ("posix", "hdf5"))
    out = json.loads(_python(_RANK, child_env(s3_server), pickle.dumps((cfg, job))).stdout)

    assert not set(out["unpickled"]) & {*HEAVY, *CLIENTS}, out["unpickled"]
    needs = {"posix": set(), "hdf5": set(), "presigned": {"urllib3"}, "s3": {"boto3", "botocore"}}[method]
    assert needs <= set(out["read"])
    assert not set(out["read"]) & (set(HEAVY) - needs), out["read"]
    assert out["beams"] is (method != "hdf5")  # the BEAMS table travelled with the FITS layout
    expected = _expected_cube(cubes["hdf5" if method == "hdf5" else "posix"])
    assert sorted(box for box, _ in out["crcs"]) == sorted([list(pair) for pair in box] for box in job.regions)
    for box, crc in out["crcs"]:
        region = tuple(slice(a, b) for a, b in box)
        assert crc == zlib.crc32(np.ascontiguousarray(expected[region]).tobytes()), box


def test_a_transport_opened_with_rank_0s_environment_resolves_none_of_its_own(monkeypatch, tmp_path):
    """open_transport(..., environment=E) takes E as it is: a rank opening rank 0's URL reads no
    AWS variable or file (here a CA bundle that would be refused if it were read)."""
    from ingest.transports import open_transport
    from ingest.transports.environment import resolve

    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    rank_0s = resolve({})
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "no-such-ca.pem"))
    url = "https://store.example.org/bucket/cube.fits?X-Amz-Signature=0"
    with open_transport(url, "presigned", environment=rank_0s) as transport:
        assert transport.environment is rank_0s and "no-such-ca" not in str(transport.environment.ca_bundle)
    with pytest.raises(ConfigError, match="no-such-ca.pem"):
        open_transport(url, "presigned")  # resolved here, the variable is read and its file refused


def _expected_cube(path: str) -> np.ndarray:
    """The cube's stored values (big-endian float32), read by the format's own library."""
    if path.endswith(".h5"):
        import h5py

        with h5py.File(path, "r") as f:
            (name,) = list(f)
            return np.asarray(f[name][()], dtype=">f4")
    from astropy.io import fits

    with fits.open(path) as f:
        return np.asarray(f[0].data, dtype=">f4")


def test_rank_1_of_a_run_never_loads_astropy(cubes, s3_server, tmp_path):
    """`mpiexec -n 2 python -m ingest run --method presigned` (bench/engine/_rank_startup.py records each
    rank's modules): rank 0 parsed the header with astropy and signed the URL with boto3; rank 1
    read its region with neither, and the job read the whole cube."""
    env = child_env(s3_server, INGEST_BENCH_STARTUP_DIR=str(tmp_path))
    report = tmp_path / "report.json"
    proc, _ = mpiexec(2, ["run", "--source", cubes["presigned"], "--method", "presigned", "--no-progress",
                          "--report", report], env, python_args=(os.path.join(ROOT, "bench", "engine", "_rank_startup.py"),))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    loaded = [{name.split(".")[0] for name in rank["modules_at_read_done"]} for rank in ranks]
    assert {"astropy", "boto3"} <= loaded[0]
    assert "urllib3" in loaded[1] and not loaded[1] & set(HEAVY), sorted(loaded[1] & set(HEAVY))
    assert json.loads(report.read_text())["aggregate"]["bytes_needed"] == int(np.prod(SHAPE)) * 4


@pytest.mark.parametrize("method, engine, client", [("s3", "urllib3", "boto3"), ("s3", "auto", "boto3"),
                                                    ("presigned", "urllib3", "urllib3"), ("posix", "auto", None)])
def test_what_a_waiting_rank_readies_is_its_methods_client_and_no_other(method, engine, client):
    """What a rank readies while rank 0 prepares (ingest.transports.warm_up) loads the client its
    method reads with, and none of the others: a presigned rank never loads boto3. An S3 rank makes
    its boto3 client then, and the job's own open later makes none."""
    source = {"s3": "s3://bucket/cube.fits", "presigned": "http://127.0.0.1:9/cube.fits", "posix": "/tmp/cube.fits"}
    code = f"""
import json, sys
from ingest.transports import open_transport, warm_up
options = dict(engine={engine!r}, endpoint_url="http://127.0.0.1:9")
warm_up({source[method]!r}, {method!r}, **options)
loaded = {LOADED}
clients = sys.modules.get("ingest.transports.s3client")
made = len(clients._CLIENTS) if clients else 0
if {method!r} == "s3":
    with open_transport({source[method]!r}, "s3", threads=8, **options):
        pass
print(json.dumps([loaded, made, len(clients._CLIENTS) if clients else 0]))
"""
    env = child_env(AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_DEFAULT_REGION="us-east-1")
    loaded, made, after_open = json.loads(_python(code, env).stdout)
    loaded = set(loaded)
    assert not loaded & set(HEAVY) - {"boto3", "botocore"}, loaded
    if client is not None:
        assert client in loaded, loaded
    if method != "s3":
        assert not loaded & {"boto3", "botocore"}, loaded
    else:
        assert made == after_open == 1


@pytest.mark.parametrize("given", [None, "2"])
def test_a_commands_numpy_starts_one_blas_thread_unless_the_user_says(given):
    """numpy's BLAS starts a thread per core at import; a command's process (every rank) does no
    linear algebra, so `main` sets one before a command imports numpy, keeping a value the user set."""
    code = """
import json, os, sys
from ingest.cli.main import main
before = "numpy" in sys.modules
try:
    main(["info", "--help"])
except SystemExit:
    pass
import numpy
status = open("/proc/self/status").read()
threads = int(status.split("Threads:")[1].split()[0])
print(json.dumps([before, os.environ.get("OPENBLAS_NUM_THREADS"), threads]))
"""
    env = child_env()
    env.pop("OPENBLAS_NUM_THREADS", None)
    env.pop("MKL_NUM_THREADS", None)
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    before, value, threads = json.loads(_python(code, env).stdout.splitlines()[-1])
    assert not before
    assert value == (given or "1")
    if not given:
        assert threads == 1
