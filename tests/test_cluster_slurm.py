"""SLURM on the emulated cluster (ingest.testbed.cluster, launcher="slurm"): srun --mpi=pmix puts
4 ranks on 2 nodes, each rank inside its node's namespace: the data is exact, each rank's `host`
is its node, no node beats its NIC cap, and no namespace or SLURM daemon outlives the cluster,
whether it ends normally, fails to build, or is interrupted.

The checks of a run are tests/test_cluster.py's, shared. Skipped, with the reason, only where
network namespaces cannot be made (not root, no iproute2); missing SLURM or munge packages
(scripts/setup.sh installs them) fail instead."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from ingest.testbed.cluster import Cluster, load_spec, missing_tools, unavailable_reason
from ingest.testbed.cluster import slurm as cluster_slurm
from ingest.testbed.cluster.netns import namespace_problem
from tests.mpitools import ROOT
from tests.test_cluster import CONFIG, cube, run_exact_capped_and_gone  # noqa: F401 - cube: a fixture

DAEMONS = {"munged", "slurmctld", "slurmd"}
SMALL = ["--set", "cluster.nodes=2", "--set", "cluster.ranks_per_node=2", "--set", "cube.shape=[4,64,64]"]


@pytest.fixture(scope="module")
def machine():
    problem = namespace_problem()
    if problem is not None:
        pytest.skip(f"emulated cluster with SLURM: {problem}")
    if missing_tools("slurm"):
        pytest.fail(unavailable_reason("slurm"), pytrace=False)


def _processes(prefix: str) -> list[tuple[int, str]]:
    """(pid, name) of every process whose command line names the cluster (its run directory or
    a node): its daemons, sshfs, servers and ranks all do."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/comm") as fh:
                name = fh.read().strip()
        except OSError:
            continue  # not a process, or it exited
        if entry.isdigit() and f"{prefix}-".encode() in cmdline:
            found.append((int(entry), name))
    return found


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _assert_gone(prefix: str) -> None:
    assert f"{prefix}-" not in _namespaces()
    assert _processes(prefix) == []


def test_srun_four_ranks_on_two_nodes_exact_capped_and_gone(machine, cube, tmp_path):
    def daemons_up(cluster):
        names = [name for _, name in _processes(cluster.prefix)]
        assert DAEMONS <= set(names) and names.count("slurmd") == 2, names

    t0 = time.monotonic()
    cluster = run_exact_capped_and_gone(cube, tmp_path, "nic", launcher="slurm", while_up=daemons_up)
    print(f"srun test {time.monotonic() - t0:.1f} s")
    _assert_gone(cluster.prefix)


def test_cli_run_with_srun(machine, tmp_path):
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "ingest.testbed.cluster", "run", "--launcher", "slurm", "--config", CONFIG, *SMALL,
           "-n", "4", "--timeout-s", "60", "--", "run", "--source", "{source}", "--output-dir", str(tmp_path / "out"),
           "--report", str(report), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    prefix = re.search(r"^cluster (\S+):", proc.stdout, re.MULTILINE).group(1)
    assert "during srun" in proc.stdout
    hosts = sorted(r["host"] for r in json.loads(report.read_text())["ranks"])
    assert hosts == [f"{prefix}-n0"] * 2 + [f"{prefix}-n1"] * 2
    _assert_gone(prefix)


def _up(proc: subprocess.Popen) -> tuple[str, list[str]]:
    """Wait for `up` to say the cluster is ready; its prefix and what it printed."""
    deadline, lines = time.monotonic() + 60, []
    while time.monotonic() < deadline and proc.poll() is None:
        lines.append(proc.stdout.readline())
        if "Ctrl-C" in lines[-1]:
            break
    text = "".join(lines)
    found = re.search(r"^cluster (\S+):", text, re.MULTILINE)
    assert found and "Ctrl-C" in lines[-1], text
    assert DAEMONS <= {name for _, name in _processes(found.group(1))}
    return found.group(1), lines


UP = [sys.executable, "-m", "ingest.testbed.cluster", "up", "--launcher", "slurm", "--config", CONFIG, *SMALL]


def test_up_prints_a_working_srun_and_ctrl_c_tears_slurm_down(machine, tmp_path):
    proc = subprocess.Popen(UP, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    prefix = None
    try:
        prefix, lines = _up(proc)
        # What `up` printed, as a user would paste it: VAR=value ... srun ... python -m ingest run --source URL
        printed = shlex.split(lines[lines.index("run ranks on it with:\n") + 1])
        assert "srun" in map(os.path.basename, printed) and any(t.startswith("SLURM_CONF=") for t in printed)
        report = tmp_path / "report.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLURM_", "OMPI_"))}
        job = subprocess.run(["env", *printed, "--report", str(report), "--output-dir", str(tmp_path / "out"),
                              "--no-progress"], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert job.returncode == 0, job.stderr[-3000:]
        assert {r["host"] for r in json.loads(report.read_text())["ranks"]} == {f"{prefix}-n0", f"{prefix}-n1"}
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if prefix:
        _assert_gone(prefix)


def test_a_failed_slurm_start_leaves_nothing(machine, monkeypatch):
    def never_idle(self):
        raise RuntimeError("injected: the nodes never registered")

    monkeypatch.setattr(cluster_slurm.Slurm, "_all_idle", never_idle)
    cluster = Cluster(load_spec(CONFIG, {"cluster": {"nodes": 2, "ranks_per_node": 1}}), launcher="slurm")
    with pytest.raises(RuntimeError, match="injected"):
        cluster.start()
    _assert_gone(cluster.prefix)
    assert not os.path.exists(cluster.run_dir)


def test_down_removes_the_slurm_of_a_killed_up(machine, monkeypatch):
    from ingest.testbed.cluster import __main__ as cli
    from ingest.testbed.cluster import netns

    proc = subprocess.Popen(UP, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        prefix, _ = _up(proc)
    finally:
        proc.kill()  # no teardown: its daemons are orphans now
        proc.wait()
    try:
        assert DAEMONS <= {name for _, name in _processes(prefix)}
    finally:
        # `down` as a user runs it, but blind to other clusters on this machine: not ours to remove.
        every = netns.list_namespaces
        monkeypatch.setattr(netns, "list_namespaces", lambda: [ns for ns in every() if ns.startswith(f"{prefix}-")])
        assert cli.main(["down"]) == 0
    _assert_gone(prefix)
    assert not [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(f"{prefix}-")]
