"""`python -m ingest run` under mpiexec from a benchmark: its JSON report and every rank's peak RSS.

Each launch is a fresh set of processes (bench/_rank_peak.py wraps ingest's CLI), so a rank's
VmHWM is that rank's alone. The makespan comes from the report (earliest start to latest stop
after a barrier), so process start-up and MPI initialisation are not in it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench._rank_record import read_rank_records
from ingest.testbed.mpilaunch import LOCAL_MPI_ENV

RANK_PEAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank_peak.py")
MPI_ENV = {**LOCAL_MPI_ENV, "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def mpiexec_available() -> bool:
    return shutil.which("mpiexec") is not None


def python_command(n_ranks: int, argv: list[str]) -> list[str]:
    """The mpiexec command line for n_ranks ranks of `python ARGV` (this interpreter), on as
    many ranks as asked and bound to no core: the benchmarks' ranks share the machine's cores."""
    return ["mpiexec", "-n", str(n_ranks), "--oversubscribe", "--bind-to", "none", sys.executable, *argv]


def command(n_ranks: int, run_args: list[str]) -> list[str]:
    """The mpiexec command line for n_ranks ranks of `python -m ingest run RUN_ARGS`."""
    return python_command(n_ranks, [RANK_PEAK, "run", *run_args])


def run_ingest(n_ranks: int, run_args: list[str], env: dict, timeout_s: float = 600.0) -> dict:
    """Launch, wait, and return {"report", "peaks" (per rank, in rank order), "wall_s", "command"}.
    run_args must not contain --report (a temp file is used) and should carry --no-progress."""
    workdir = tempfile.mkdtemp(prefix="ingest-bench-mpi-")
    try:
        report_path = os.path.join(workdir, "report.json")
        cmd = command(n_ranks, run_args + ["--report", report_path])
        child_env = {**env, **MPI_ENV, "INGEST_BENCH_PEAK_DIR": workdir}
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=timeout_s)
        wall_s = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"mpiexec -n {n_ranks} ingest run failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-1500:]}")
        with open(report_path) as f:
            report = json.load(f)
        return {"report": report, "peaks": read_rank_records(workdir, n_ranks), "wall_s": wall_s, "command": cmd}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def shown(cmd: list[str]) -> str:
    """A command for the record, with any presigned URL's query removed."""
    from ingest.redact import redact_url

    return " ".join(redact_url(c) if c.startswith(("http://", "https://")) else c for c in cmd)
