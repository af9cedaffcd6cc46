"""Run ingest as a child process and make a row of it: shared by `soak` and `study`, which both
launch `python -m ingest ...` (under mpiexec or srun) many times and log each attempt.

A child runs in its own session, so a terminal's Ctrl-C reaches the parent only and one
killpg takes the launcher and its ranks down together. Nothing secret leaves here: commands
and stderr excerpts are redacted (URL queries, NAME=secret arguments, credential values).
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from ingest.redact import redact_text

KILL_GRACE_S = 5.0  # after SIGTERM, mpiexec needs a moment to take its ranks down
POLL_S = 0.2  # how often waits look at the stop flag
STDERR_HEAD_LINES = 20
STDERR_TAIL_LINES = 5  # a traceback's last line is its message: keep it too
STDERR_MAX_CHARS = 4000
# Launcher task counts: set when the parent itself was started by mpiexec/srun (see driver.mpi).
_LAUNCHED_AS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")


def refuse_if_launched(command: str, environ=os.environ) -> None:
    """soak and study launch their own jobs: started as N tasks, each task would run them all."""
    from ingest.errors import ConfigError

    for name in _LAUNCHED_AS:
        value = environ.get(name, "1")
        if value.isdigit() and int(value) > 1:
            raise ConfigError(f"{command}: started by a launcher ({name}={value}); start {command} alone "
                              "and give it the launcher (soak: --launcher \"mpiexec -n N\"; study: study.launcher)")


class StopFlag:
    """SIGINT/SIGTERM set a flag that the waits poll, so the row for the current run is still
    written; a second signal raises KeyboardInterrupt as usual."""

    def __init__(self):
        self.requested = False
        self._saved = {}

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early when a stop is requested."""
        end = time.monotonic() + seconds
        while not self.requested and (left := end - time.monotonic()) > 0:
            time.sleep(min(POLL_S, left))


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the run's process group (mpiexec forwards it to its ranks), SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def stderr_excerpt(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    keep = lines if len(lines) <= STDERR_HEAD_LINES + STDERR_TAIL_LINES else (
        lines[:STDERR_HEAD_LINES] + [f"... ({len(lines) - STDERR_HEAD_LINES - STDERR_TAIL_LINES} lines)"]
        + lines[-STDERR_TAIL_LINES:])
    return redact_text("\n".join(keep))[:STDERR_MAX_CHARS]


def report_facts(path: str) -> dict:
    """Row columns from a run's JSON report: aggregate sums plus per-rank resume/fault counts, and
    each rank's host (on a cluster, its node's name)."""
    from ingest.outputs.report import load_report

    report = load_report(path)
    agg, ranks = report["aggregate"], report.get("ranks") or []
    faults: dict[str, int] = {}
    for r in ranks:
        for kind, count in (r.get("faults") or {}).items():
            faults[kind] = faults.get(kind, 0) + int(count)
    resumed = agg.get("resumed_bytes")
    return {"ranks": len(ranks), "nodes": [r.get("host") for r in ranks],
            "makespan_s": agg.get("makespan_s"), "bytes_needed": agg.get("bytes_needed"),
            "bytes_wire": agg.get("bytes_wire"), "requests": agg.get("requests"), "retries": agg.get("retries"),
            "resumed_bytes": resumed if resumed is not None else sum(int(r.get("resumed_bytes") or 0) for r in ranks),
            "faults": faults}


def run_child(argv: list[str], *, timeout_s: float, stop: StopFlag, stderr_path: str, env=None,
              cwd=None) -> tuple[str | None, int | None, float]:
    """Run argv in its own process group with stdout discarded and stderr to stderr_path.
    Returns (outcome, exit status, runtime_s): outcome "timeout" or "interrupted" when it was
    stopped, else None (the caller judges the exit status and the child's report)."""
    t0 = time.monotonic()
    outcome = None
    # The child gets os.environ, never the C-level environment inherited when env is None: an
    # in-process MPI singleton (mpi4py used as a library) sets PMIX_* and OMPI_MCA_ess there, and
    # an mpiexec launched under them exits 1 at once, with nothing on stderr.
    env = dict(os.environ) if env is None else env
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True, env=env, cwd=cwd)
        try:
            while proc.poll() is None:
                if stop.requested:
                    outcome = "interrupted"
                elif time.monotonic() - t0 > timeout_s:
                    outcome = "timeout"
                if outcome:
                    stop_process_group(proc)
                    break
                try:
                    proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
        except BaseException:  # a second Ctrl-C: leave, but not with a child still going
            stop_process_group(proc)
            raise
    return outcome, proc.returncode, time.monotonic() - t0
