"""The record of a run: the machine, the checkout and the command that produced a benchmark's results."""
from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ingest.testbed.localserver import find_tool


REPO_ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("ingest", "numpy", "astropy", "boto3", "botocore", "urllib3", "fsspec", "aiohttp", "mpi4py", "h5py", "h5coro")


def _run_text(cmd: list[str], cwd=None) -> str | None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_info() -> dict:
    """Commit of the checkout and whether it has local changes (read-only git commands)."""
    commit = _run_text(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT)
    # --no-optional-locks: status must not even refresh the index of a tree others work in.
    status = _run_text(["git", "--no-optional-locks", "status", "--porcelain"], cwd=REPO_ROOT)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def ingest_sources_digest() -> str:
    """SHA-1 over ingest/**/*.py of this checkout (path + content): names the exact code measured,
    also when the tree has uncommitted changes (git_info says dirty)."""
    import hashlib

    digest = hashlib.sha1()
    for path in sorted((REPO_ROOT / "ingest").rglob("*.py")):
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def machine_info() -> dict:
    """What produced a result: cores, memory, load, Python, package and tool versions, commit."""
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    curl = _run_text(["curl", "--version"])
    try:
        versitygw = find_tool("versitygw")
    except Exception:  # noqa: BLE001 - recorded as missing
        versitygw = None
    return {
        "hostname": platform.node(),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "memory_bytes": mem_total,
        "loadavg": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "packages": versions,
        "curl": curl.splitlines()[0] if curl else None,
        "versitygw": versitygw,
        "git": git_info(),
        "ingest_sources_sha1": ingest_sources_digest(),
    }


def command_line() -> str:
    """The exact command that started this process, as typed (sys.orig_argv)."""
    return shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv))
