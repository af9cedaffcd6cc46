"""`python -m ingest study` end to end under mpiexec: real jobs against a real S3 server, rows in
SQLite matching the matrix, STUDY.md with its figures, and a killed study that resumes."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from ingest.study import db
from ingest.study.config import parse_config
from ingest.study.matrix import build_cells, default_boxes, schedule
from ingest.study.setting import staging_tools
from ingest.testbed.synth import write_cube
from tests.mpitools import ROOT, child_env

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STUDY = """
[study]
source = "{source}"
repeats = 1  # interleaved repeats are test_study_matrix's; here every experiment's rows, once
threads = 2
run_timeout_s = 120
grid = "2x1x1"  # split x (FITS order): each box is strided, so "small" makes many requests and "large" one
run_args = ["--latency-s", "0.001", "--bandwidth-bytes-per-s", "1GB"]
[processes]
ranks = [1, 2]
methods = ["presigned", "s3", "staging"]
[threads]
threads = [1, 2]
[strategies]
strategies = ["large", "small", "auto"]
[libraries]
libraries = ["urllib", "requests", "urllib3", "ingest"]
chunk_bytes = ["256KiB"]
cache = ["cached"]
[order]
[layout]
parallel_ranks = 2
[stability]
runs = 2
methods = ["s3"]
"""


@pytest.fixture(scope="module")
def study_source(s3_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "cube.fits"
    write_cube(path, (32, 64, 64), -32)  # 512 KiB: the jobs' start-up, not their bytes, sets the pace
    bucket = s3_server.make_bucket("study-cubes")
    s3_server.client().upload_file(str(path), bucket, "cube.fits")
    return f"s3://{bucket}/cube.fits"


def _study(config, out, env, timeout_s=900):
    return subprocess.run([sys.executable, "-m", "ingest", "study", "--config", str(config), "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)


def _expected_runs(text):
    cfg = parse_config(text)
    cells = build_cells(cfg, grid="x", boxes=default_boxes(cfg), stage_tools=staging_tools(["auto"]))
    return {(c.name, r) for _, c, r in schedule(cells)}


def test_study_under_mpiexec_rows_figures_answer(study_source, s3_server, tmp_path):
    text = STUDY.format(source=study_source)
    config = tmp_path / "study.toml"
    config.write_text(text)
    out = tmp_path / "out"
    proc = _study(config, out, child_env(s3_server))
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows, meta = db.load(str(out / db.DB_NAME))
    assert {(r["cell"], r["repeat"]) for r in rows} == _expected_runs(text)
    assert all(r["status"] == "ok" for r in rows), [(r["cell"], r["stderr_head"]) for r in rows if r["status"] != "ok"]
    assert {"s5cmd", "ingest"} <= {t["name"] for t in meta["staging_tools"]}
    for r in rows:
        assert r["elapsed_s"] > 0 and r["runtime_s"] >= r["elapsed_s"]
        assert os.path.exists(out / r["report_path"])
        if r["experiment"] != "libraries":
            assert r["command"].split()[0] == "mpiexec"
    staging = [r for r in rows if r["method"] == "staging"]
    assert staging and all(r["stage_s"] > 0 and r["total_s"] == pytest.approx(r["stage_s"] + r["elapsed_s"])
                           for r in staging)
    assert {r["tool"].split()[0] for r in staging} == {"ingest", "s5cmd"}
    weak = {r["ranks"]: r["bytes_needed"] for r in rows if r["cell"].startswith("processes/s3/")}
    assert weak[2] == 2 * weak[1], "weak scaling: p processes read p equal boxes"
    libs = [r for r in rows if r["experiment"] == "libraries"]
    assert len({r["params"]["crc32"] for r in libs}) == 1, "every library downloaded the same bytes"
    strategies = {r["params"]["strategy"]: r for r in rows if r["experiment"] == "strategies" and r["repeat"] == 1}
    assert strategies["small"]["requests"] > strategies["large"]["requests"]
    study_md = (out / "STUDY.md").read_text()
    assert "## Recommendation" in study_md
    recommendation = study_md.split("## Recommendation", 1)[1]
    assert "presigned" in recommendation or "S3 API" in recommendation
    figures = sorted((out / "figures").glob("*.png"))
    assert len(figures) >= 5
    for fig in figures:
        assert fig.read_bytes()[:8] == PNG_MAGIC and fig.name in study_md


def test_killed_study_resumes_at_the_first_missing_run(study_source, s3_server, tmp_path):
    text = STUDY.format(source=study_source)
    text = text.split("[strategies]")[0]  # processes and threads: 8 runs
    config = tmp_path / "study.toml"
    config.write_text(text)
    out = tmp_path / "out"
    env = child_env(s3_server)
    proc = subprocess.Popen([sys.executable, "-m", "ingest", "study", "--config", str(config), "--out", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    dbfile = out / db.DB_NAME
    deadline = time.monotonic() + 240
    recorded = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if dbfile.exists():
            try:
                with sqlite3.connect(dbfile) as conn:
                    recorded = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            except sqlite3.OperationalError:  # the file is there, its table not yet: the study is starting
                recorded = 0
            if recorded >= 2:
                break
        time.sleep(0.2)
    assert proc.poll() is None and recorded >= 2, "the study should still be running with some rows written"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "resume" in err
    first_rows, _ = db.load(str(dbfile))
    expected = _expected_runs(text)
    assert 2 <= len(first_rows) < len(expected)
    again = _study(config, out, env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{len(first_rows)} already recorded" in again.stderr
    rows, _ = db.load(str(dbfile))
    assert {(r["cell"], r["repeat"]) for r in rows} == expected
    before = {(r["cell"], r["repeat"]): r["started_utc"] for r in first_rows}
    assert all(r["started_utc"] == before[(r["cell"], r["repeat"])] for r in rows if (r["cell"], r["repeat"]) in before)


def test_a_failed_cell_is_recorded_and_the_study_goes_on(study_source, s3_server, tmp_path):
    # 5000 threads is beyond what `run` accepts: that cell fails in the job, the others run
    text = STUDY.format(source=study_source).split("[processes]")[0] + "[threads]\nthreads = [5000, 1]\n"
    config = tmp_path / "study.toml"
    config.write_text(text)
    proc = _study(config, tmp_path / "out", child_env(s3_server))
    assert proc.returncode == 1, proc.stderr[-3000:]
    rows, _ = db.load(str(tmp_path / "out" / db.DB_NAME))
    assert {(r["cell"], r["repeat"]) for r in rows} == _expected_runs(text)
    status = {(r["cell"], r["repeat"]): r for r in rows}
    bad, good = status[("threads/presigned/t5000", 1)], status[("threads/presigned/t1", 1)]
    assert bad["status"] == "failed" and "threads" in bad["stderr_head"] and bad["elapsed_s"] is None
    assert good["status"] == "ok" and good["elapsed_s"] > 0
    study_md = (tmp_path / "out" / "STUDY.md").read_text()
    assert "runs: 2 (1 ok, 1 failed, 0 timed out)" in study_md
    assert "threads: expected an integer in 1..1024 (threads), got '5000'" in study_md  # the job's own error
    # the progress log says why at once, not only in STUDY.md at the end
    failed_lines = [line for line in proc.stderr.splitlines() if "t5000 r" in line]
    assert len(failed_lines) == 1 and all("failed in" in line and "(exit status" in line
                                          and "got '5000'" in line for line in failed_lines), failed_lines


def test_changed_config_in_the_same_directory_is_refused(study_source, s3_server, tmp_path):
    text = STUDY.format(source=study_source).split("[processes]")[0] + "[threads]\nthreads = [1]\n"
    config = tmp_path / "study.toml"
    config.write_text(text)
    env = child_env(s3_server)
    assert _study(config, tmp_path / "out", env).returncode == 0
    config.write_text(text.replace("threads = [1]", "threads = [2]"))
    again = _study(config, tmp_path / "out", env)
    assert again.returncode == 1 and "started with a different config" in again.stderr
