"""A cut-out job stopped by SIGINT or SIGTERM keeps what it finished: groups close after about a
second of work (cutout_rank.PUBLISH_AFTER_S) even below their count, the group in flight is
published and journalled, nothing half-made is left, one line says what was kept, the exit status
is the signal's (130, 143), and the same command run again finishes the job."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

from ingest import atomic
from ingest.driver.cutouts import rank as cutout_rank
from ingest.driver.cutouts.progress import Interrupted, Stop
from ingest.testbed.synth import write_cube
from tests.mpitools import ROOT, child_env

N_SOURCES = 8000  # 4x4x4-pixel boxes: seconds of cutting, several groups, a few tens of MB
SHAPE = (32, 200, 200)  # numpy order: z, y, x
WAIT_S = 600.0  # generous: the machine may be loaded; every wait polls a condition


# ------------------------------------------------------------------ the time-bounded group

class _Source:
    def __init__(self, name):
        self.name = name

    def entry(self, file, nbytes, crc32, requests, wire_bytes):
        return {"name": self.name, "file": file, "bytes": nbytes, "crc32": crc32, "requests": requests,
                "wire_bytes": wire_bytes}


class _Sink:
    """Records each group the worker journalled, as a list of names."""

    def __init__(self):
        self.groups = []

    def done(self, path, entry):
        return entry

    def journal_many(self, entries):
        self.groups.append([e["name"] for e in entries])


class _Clock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _write(tmp_path, durable, name):
    path = str(tmp_path / f"{name}.fits")
    with durable.write(path, str(tmp_path / f".{name}.fits.tmp-1")) as fh:
        fh.write(name.encode())
    return path


def _add_at(tmp_path, finisher, durable, clock, timed_names):
    for at_s, name in timed_names:
        clock.now_s = at_s
        finisher.add(_Source(name), _write(tmp_path, durable, name), 1.0, 10)


def test_a_group_is_handed_over_after_a_second_of_work_below_its_count(tmp_path):
    clock, sink, durable, entries = _Clock(), _Sink(), atomic.DurableBatch(), []
    finisher = cutout_rank._Finisher(sink, durable, entries, None, clock=clock)
    assert cutout_rank.PUBLISH_AFTER_S == 1.0 and cutout_rank.PUBLISH_FILES > 5
    try:
        _add_at(tmp_path, finisher, durable, clock, [(10.0, "a"), (10.4, "b"), (10.9, "c")])
        assert finisher._in_flight is None and len(finisher.pending) == 3  # under a second: still open
        _add_at(tmp_path, finisher, durable, clock, [(11.0, "d")])  # a second since "a": handed over
        assert finisher.pending == [] and finisher._in_flight is not None
        # the next group's second counts from its own first cut-out, not from the last hand-over
        _add_at(tmp_path, finisher, durable, clock, [(30.0, "e"), (30.5, "f")])
        assert [s.name for s, *_ in finisher.pending] == ["e", "f"]
        finisher.flush()
    finally:
        finisher.close()
    assert sink.groups == [["a", "b", "c", "d"], ["e", "f"]]
    assert [e["name"] for e in entries] == ["a", "b", "c", "d", "e", "f"]


def test_a_signal_while_a_cutout_is_written_keeps_the_group_in_flight_and_removes_the_rest(tmp_path):
    """The rank's loop as cut_rank runs it: a signal inside a held write waits for it, starts no
    new group, and comes out as Interrupted once the group in flight is journalled."""
    clock, sink, durable, entries = _Clock(), _Sink(), atomic.DurableBatch(), []
    stop = Stop()
    finisher = cutout_rank._Finisher(sink, durable, entries, None, clock=clock, stop=stop)
    reached = []
    stop.install()
    try:
        with pytest.raises(Interrupted) as caught:
            try:
                _add_at(tmp_path, finisher, durable, clock, [(0.0, "a"), (1.5, "b")])  # a, b in flight
                with stop.held():
                    os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, and must not raise yet
                    time.sleep(0.05)
                    reached.append("after the signal")
                    # c and d: a group due by time, but after a signal no group starts
                    _add_at(tmp_path, finisher, durable, clock, [(3.0, "c"), (4.5, "d")])
                    assert stop.requested and len(finisher.pending) == 2
                    os.kill(os.getpid(), signal.SIGTERM)  # a second signal changes nothing
                    time.sleep(0.05)
                pytest.fail("the signal was not raised as the held block ended")
            finally:
                with stop.held():
                    finisher.close()
                    durable.discard()
    finally:
        stop.release()
    assert reached == ["after the signal"] and caught.value.exit_code == 128 + signal.SIGINT
    assert sink.groups == [["a", "b"]] and [e["name"] for e in entries] == ["a", "b"]
    assert sorted(os.listdir(tmp_path)) == ["a.fits", "b.fits"]  # c's and d's temporary files removed


# ------------------------------------------------------------------ a whole job, stopped and resumed

@pytest.fixture(scope="module")
def job_files(tmp_path_factory):
    """A local float32 cube and a CSV catalogue of N_SOURCES SoFiA-2 bounding boxes inside it."""
    directory = tmp_path_factory.mktemp("interrupt")
    write_cube(directory / "cube.fits", SHAPE, -32)
    rng = np.random.default_rng(59)
    lines = ["name,x_min,x_max,y_min,y_max,z_min,z_max"]
    for i in range(N_SOURCES):
        x, y, z = (int(v) for v in rng.integers(0, [SHAPE[2] - 4, SHAPE[1] - 4, SHAPE[0] - 4]))
        lines.append(f"src{i},{x},{x + 3},{y},{y + 3},{z},{z + 3}")
    (directory / "cat.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def _command(job_files, out) -> list[str]:
    return [sys.executable, "-m", "ingest", "cutouts", "--source", str(job_files / "cube.fits"),
            "--catalogue", str(job_files / "cat.csv"), "--output-dir", str(out), "--size", "bbox+0",
            "--no-probe", "--no-progress"]


def _finished_names(out) -> list[str]:
    try:
        return [n for n in os.listdir(out) if n.endswith(".fits") and not n.startswith(".")]
    except FileNotFoundError:
        return []


def _wait_for(condition, proc, what: str) -> None:
    deadline_s = time.monotonic() + WAIT_S
    while not condition():
        assert proc.poll() is None, f"the job ended (status {proc.returncode}) before {what}"
        assert time.monotonic() < deadline_s, f"no {what} after {WAIT_S} s"
        time.sleep(0.01)


def _crc32(path) -> int:
    with open(path, "rb") as fh:
        return zlib.crc32(fh.read())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signalled_job_keeps_whole_journalled_files_says_so_and_a_rerun_finishes(job_files, tmp_path, sig):
    out = tmp_path / "out"
    log = tmp_path / "log.txt"
    with open(log, "w") as fh:
        proc = subprocess.Popen(_command(job_files, out), env=child_env(), cwd=ROOT, stdout=fh,
                                stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: _finished_names(out), proc, "the first cut-out")
        proc.send_signal(sig)
        status = proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert status == 128 + sig, text
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if "interrupted:" in line]
    kept = sorted(_finished_names(out))
    assert lines == [f"interrupted: {len(kept)} of {N_SOURCES} cut-outs kept; run the same command again to "
                     "finish"], text
    assert 0 < len(kept) < N_SOURCES, "the signal came after the job's end: it proves nothing"
    # every file under its final name is whole and journalled; nothing temporary is left
    journalled = {}
    for name in os.listdir(out):
        if name.startswith(".cutouts-rank") and name.endswith(".jsonl"):
            with open(out / name, encoding="utf-8") as fh:
                journalled.update((e["file"], e["crc32"]) for e in map(json.loads, fh))
    assert sorted(journalled) == kept
    assert all(_crc32(out / name) == journalled[name] for name in kept)
    assert [n for n in os.listdir(out) if ".tmp-" in n] == []
    assert not (out / "manifest.json").exists()

    again = subprocess.run(_command(job_files, out), env=child_env(), cwd=ROOT, capture_output=True, text=True,
                           timeout=WAIT_S)
    assert again.returncode == 0, again.stderr
    assert f"{len(kept)} kept from an earlier run" in again.stdout, again.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    sources = manifest["sources"]
    assert len(sources) == N_SOURCES and all(e["status"] == "done" for e in sources)
    assert sorted(e["name"] for e in sources) == sorted(f"src{i}" for i in range(N_SOURCES))
    assert sorted(_finished_names(out)) == sorted(e["file"] for e in sources)
    assert all(_crc32(out / e["file"]) == e["crc32"] for e in sources[:: N_SOURCES // 200])
