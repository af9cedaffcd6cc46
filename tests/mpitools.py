"""Shared by the tests that run ingest as real processes: a clean child environment, `python -m
ingest` alone or under `mpiexec` of either MPI family (Open MPI, MPICH), and pasting the ranks'
FITS outputs back into one cube."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import uuid
import warnings

import numpy as np
import pytest
from astropy.io import fits

from ingest.testbed.mpilaunch import LOCAL_MPI_ENV
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


def upload_float_cube(s3_server, directory, prefix, shape) -> dict:
    """Write a float32 FITS cube into `directory`, upload it as in/cube.fits to a bucket of its own
    (`prefix` and a random suffix), return its bucket, path, URL, bytes and `directory`."""
    path = directory / "cube.fits"
    write_cube(path, shape, -32)
    bucket = s3_server.make_bucket(f"{prefix}-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, "in/cube.fits")
    return {"bucket": bucket, "path": path, "s3": f"s3://{bucket}/in/cube.fits", "bytes": path.read_bytes(),
            "work": directory}


# The transports honour a user's proxy (ingest.transports.environment): a developer's proxy
# without 127.0.0.1 in no_proxy must not carry the tests' loopback traffic.
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


# Variables that steer a child's MPI or store: a launcher's own (Open MPI, PMIx, MPICH's hydra
# and PMI, SLURM), mpi4py's MPI selection, the user's AWS settings.
_STEERING_PREFIXES = ("AWS_", "OMPI_", "PMIX_", "PMI_", "HYDRA_", "MPI4PY_", "SLURM_")


def child_env(s3_server=None, **extra) -> dict:
    """This environment minus AWS/MPI/SLURM variables that would steer the child, plus the test
    server's AWS_* variables, what root needs for mpiexec, and PYTHONPATH to this checkout."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_STEERING_PREFIXES) and k.lower() not in PROXY_VARS}
    if s3_server is not None:
        env.update(s3_server.env())
    env.update(LOCAL_MPI_ENV, PYTHONPATH=ROOT)
    env.update(extra)
    return env


def cli(args, env, timeout_s=60) -> subprocess.CompletedProcess:
    """`python -m ingest ARGS` in one process (a one-rank MPI world for run and stage)."""
    return subprocess.run([sys.executable, "-m", "ingest", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout_s, cwd=ROOT)


# ---------------------------------------------------------------------------- MPI families
# Sites run one of two MPI families, and ingest must work under both launchers. The PyPI mpi4py
# wheel (4.1+) carries one extension per family's ABI and picks one at import: MPI4PY_MPIABI
# names it. Its MPICH build links libmpi.so.12 (MPICH's upstream name); Debian ships that
# library as libmpich.so.12, so MPICH ranks get a directory holding the upstream name first on
# LD_LIBRARY_PATH (mpich_libdir). Open MPI ranks use mpi4py's own detection, as users' do.
MPI_FAMILIES = ("openmpi", "mpich")
# Open MPI: more ranks than the 2 cores needs --oversubscribe, and no binding (ranks would pile
# onto the same cores). MPICH's hydra oversubscribes and leaves ranks unbound by default.
LAUNCHERS = {"openmpi": ("mpiexec", "--oversubscribe", "--bind-to", "none"), "mpich": ("mpiexec.mpich",)}
MPICH_SONAME = "libmpi.so.12"  # what mpi4py's MPICH extension asks the loader for
_DEBIAN_LIBMPICH = "libmpich.so.12"


def launcher(n, family="openmpi") -> list[str]:
    """The command that starts N ranks under `family`'s launcher (the program comes after it)."""
    return [*LAUNCHERS[family][:1], "-n", str(n), *LAUNCHERS[family][1:]]


def family_env(env: dict, family="openmpi") -> dict:
    """`env` plus what ranks of `family` need: root's permission for Open MPI's mpiexec; for MPICH,
    mpi4py's ABI choice and the library directory (mpich_libdir)."""
    env = {**env, **LOCAL_MPI_ENV, "PYTHONPATH": ROOT}
    if family == "mpich":
        path = [mpich_libdir(), *filter(None, env.get("LD_LIBRARY_PATH", "").split(os.pathsep))]
        env.update(MPI4PY_MPIABI="mpich", LD_LIBRARY_PATH=os.pathsep.join(path))
    elif family != "openmpi":
        raise ValueError(f"MPI family {family!r} is not one of {', '.join(MPI_FAMILIES)}")
    return env


def mpich_problem() -> str | None:
    """Why ranks cannot run under MPICH here, with the fix; None when they can."""
    import mpi4py  # the package only: importing mpi4py.MPI would start MPI in the test process

    if shutil.which(LAUNCHERS["mpich"][0]) is None:
        return f"{LAUNCHERS['mpich'][0]} not found: scripts/setup.sh installs Debian's mpich"
    if _libmpich() is None:
        return f"{_DEBIAN_LIBMPICH} not found by ldconfig: scripts/setup.sh installs Debian's mpich"
    if not any(name.startswith("MPI.mpich.") for name in os.listdir(os.path.dirname(mpi4py.__file__))):
        return (f"mpi4py {mpi4py.__version__} has no MPICH ABI build (a source build for one MPI): "
                "scripts/setup.sh installs the PyPI wheel (mpi4py>=4.1), which carries both")
    return None


def mpich_libdir() -> str:
    """A directory of the user's own cache holding libmpi.so.12 -> Debian's libmpich.so.12; made
    (or repaired) on first use. Never under a shared /tmp: a directory on LD_LIBRARY_PATH that
    another user could write would run their code in the ranks."""
    target = _libmpich()
    if target is None:
        raise RuntimeError(mpich_problem() or f"{_DEBIAN_LIBMPICH} not found")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(cache, "ingest", "mpich-abi")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    link = os.path.join(directory, MPICH_SONAME)
    if not (os.path.islink(link) and os.readlink(link) == target):
        staging = f"{link}.{os.getpid()}"
        os.symlink(target, staging)
        os.replace(staging, link)  # atomic: concurrent test processes never see a half-made link
    return directory


def _libmpich() -> str | None:
    """Debian's libmpich.so.12 as the dynamic loader finds it (ldconfig's cache), this
    architecture's first."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return None
    found = re.findall(rf"^\s*{re.escape(_DEBIAN_LIBMPICH)} \(.*\) => (\S+)$", listing, re.MULTILINE)
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    found.sort(key=lambda path: arch not in path)
    return next((path for path in found if os.path.exists(path)), None)


def mpiexec(n, args, env, timeout_s=120, python_args=("-m", "ingest"), family="openmpi"):
    """`mpiexec -n N python PYTHON_ARGS ARGS` under `family`'s launcher (openmpi or mpich);
    returns (CompletedProcess, wall seconds)."""
    cmd = [*launcher(n, family), sys.executable, *python_args, *map(str, args)]
    env = family_env(env, family)
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


def check_root_ledger(root: dict, makespan_s: float, gathers: int) -> dict:
    """A report's `root` (ingest.driver.rootwork): rank 0's steps, `gathers` gathers of some bytes,
    its own work the sum of its parts in wall and CPU seconds, each over `makespan_s`."""
    assert root["steps"] >= 1 and root["gathers"] == gathers and root["bytes_gathered"] > 0
    assert root["own_s"] == pytest.approx(root["steps_s"] - root["measuring_s"] + root["gather_s"] + root["report_s"])
    assert root["own_cpu_s"] == pytest.approx(root["steps_cpu_s"] - root["measuring_cpu_s"] + root["gather_cpu_s"]
                                              + root["report_cpu_s"])
    assert root["waiting_s"] >= 0.0 and root["own_cpu_s"] > 0.0
    by_step = root["by_step"].values()  # the steps one by one, by their functions' names
    assert sum(s["calls"] for s in by_step) == root["steps"]
    assert sum(s["s"] for s in by_step) == pytest.approx(root["steps_s"])
    assert sum(s["cpu_s"] for s in by_step) == pytest.approx(root["steps_cpu_s"])
    assert root["of_makespan"] == pytest.approx(root["own_s"] / makespan_s)
    assert root["cpu_of_makespan"] == pytest.approx(root["own_cpu_s"] / makespan_s)
    return root
