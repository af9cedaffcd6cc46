"""Reports: aggregation as IOR reduces it, schema, atomic files, baseline loading, the rendered
summary, the analysis scripts drawing from JSON alone, and no secret in any of it."""
import argparse
import json
import os
import subprocess
import sys
from datetime import datetime

import pytest

from ingest.config import RunConfig
from ingest.errors import IngestError
from ingest.cli.report import add_parser
from ingest.outputs.report import (SCHEMA, aggregate, baseline_from_report, build_report, load_report, render_summary,
                                   staging_baseline, write_report)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1024 * 1024
SIGNED = "https://s3.example:9000/bucket/cube.fits?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=0123abcd"


def rank_record(rank, start_s, stop_s, *, needed=4 * MiB, wire=5 * MiB, requests=3, retries=0,
                first_byte_s=0.01):
    elapsed = stop_s - start_s
    return {
        "rank": rank, "host": f"node{rank % 2}", "box": [[rank, rank + 1], [0, 64], [0, 64]],
        "bytes_needed": needed, "bytes_wire": wire, "requests": requests, "retries": retries,
        "first_byte_s": first_byte_s, "start_s": start_s, "stop_s": stop_s, "elapsed_s": elapsed,
        "throughput_bytes_per_s": needed / elapsed, "output_path": None,
        "phase_s": {"plan": 0.001, "read": elapsed - 0.001}, "plan": {"strategy": "large", "requests": requests},
    }


def make_report(n_ranks=4, mode="direct", baseline=None, config=None, source="/data/cube.fits"):
    ranks = [rank_record(r, 0.01 * r, 1.0 + 0.1 * r) for r in range(n_ranks)]
    ranks.reverse()  # the gather order must not matter
    cube = {"source": source, "hdu": 0, "shape": [n_ranks, 64, 64], "dtype": ">f4", "bitpix": -32,
            "data_offset": 2880, "object_bytes": 2880 + n_ranks * 64 * 64 * 4}
    grid = {"grid_fits": [1, 1, n_ranks], "reason": "z split: one contiguous range per rank", "halo": 0}
    return build_report(config=config or {"source": source, "method": "posix", "resolved_method": "posix"},
                        cube=cube, grid=grid, ranks=ranks, mode=mode, baseline=baseline)


def test_aggregate_makespan_is_earliest_start_to_latest_stop():
    ranks = [rank_record(0, 0.10, 2.0, retries=1), rank_record(1, 0.0, 1.5, first_byte_s=None),
             rank_record(2, 0.30, 2.6, requests=5, wire=6 * MiB)]
    agg = aggregate(ranks)
    assert agg["makespan_s"] == pytest.approx(2.6)  # not the slowest rank's elapsed (2.3)
    assert agg["ranks"] == 3
    assert agg["bytes_needed"] == 12 * MiB and agg["bytes_wire"] == 16 * MiB
    assert agg["requests"] == 11 and agg["retries"] == 1
    assert agg["read_amplification"] == pytest.approx(16 / 12)
    assert agg["throughput_bytes_per_s"] == pytest.approx(12 * MiB / 2.6)
    assert agg["slowest_rank"] == {"rank": 2, "elapsed_s": pytest.approx(2.3)}
    assert agg["fastest_rank"] == {"rank": 1, "elapsed_s": pytest.approx(1.5)}
    assert agg["elapsed_s"]["min"] == pytest.approx(1.5) and agg["elapsed_s"]["max"] == pytest.approx(2.3)
    assert agg["elapsed_s"]["mean"] == pytest.approx((1.9 + 1.5 + 2.3) / 3)
    assert agg["first_byte_s"]["max"] == pytest.approx(0.01)  # the None is skipped
    with pytest.raises(IngestError, match="no rank records"):
        aggregate([])


def test_report_schema_order_and_speedup():
    baseline = staging_baseline(10.0, {"makespan_s": 2.0}, "this job")
    assert baseline == {"stage_s": 10.0, "read_makespan_s": 2.0, "total_s": 12.0, "from": "this job",
                        "read_ranks": None}
    report = make_report(4, baseline=baseline)
    assert report["schema"] == SCHEMA == "ingest.report/1"
    assert report["mode"] == "direct" and report["tool"]["name"] == "ingest" and report["tool"]["version"]
    assert datetime.fromisoformat(report["created"]).utcoffset().total_seconds() == 0
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    for key in ("source", "hdu", "shape", "dtype", "bitpix", "data_offset", "object_bytes"):
        assert key in report["cube"]
    assert set(report["grid"]) >= {"grid_fits", "reason", "halo"}
    assert report["baseline"] == baseline
    makespan = report["aggregate"]["makespan_s"]
    assert makespan == pytest.approx(1.3)  # rank 3 stops at 1.3, rank 0 starts at 0
    assert report["speedup"] == pytest.approx(12.0 / makespan)
    json.dumps(report, allow_nan=False)  # strict JSON as built


def test_build_report_refuses_bad_input():
    with pytest.raises(IngestError, match="mode"):
        make_report(2, mode="fast")
    ranks = [rank_record(0, 0, 1), rank_record(0, 0, 1)]
    with pytest.raises(IngestError, match="duplicate"):
        build_report(config={}, cube={}, grid={}, ranks=ranks)


def test_write_report_is_atomic_and_round_trips(tmp_path, monkeypatch):
    path = tmp_path / "runs" / "n4" / "report.json"
    report = make_report(4)
    write_report(path, report)  # parent dirs created
    assert load_report(path) == report
    assert os.listdir(path.parent) == ["report.json"]

    monkeypatch.setattr("ingest.outputs.report.os.replace", lambda *a: (_ for _ in ()).throw(OSError(28, "disk full")))
    with pytest.raises(IngestError, match="report.json"):
        write_report(path, make_report(2))
    assert load_report(path) == report  # the earlier report is intact
    assert os.listdir(path.parent) == ["report.json"]  # and no temp file


def test_load_report_and_baseline_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(IngestError, match="missing.json"):
        baseline_from_report(missing)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(IngestError, match="garbage.json.*not a JSON"):
        baseline_from_report(garbage)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/2"}))
    with pytest.raises(IngestError, match="other.json.*schema"):
        load_report(other)
    direct = tmp_path / "direct.json"
    write_report(direct, make_report(2))
    with pytest.raises(IngestError, match="direct.json.*not a staging"):
        baseline_from_report(direct)


def test_baseline_from_staging_report(tmp_path):
    staging_ranks = make_report(4, mode="staging")["aggregate"]
    staged = make_report(4, mode="staging", baseline=staging_baseline(20.0, staging_ranks, "this job"))
    assert "speedup" not in staged  # a staging run is not compared with itself
    path = tmp_path / "staging.json"
    write_report(path, staged)
    base = baseline_from_report(path)
    assert base["total_s"] == pytest.approx(20.0 + staging_ranks["makespan_s"])
    assert base["from"] == str(path)
    direct = make_report(4, baseline=base)
    assert direct["speedup"] == pytest.approx(base["total_s"] / direct["aggregate"]["makespan_s"])


def test_summary_has_every_rank_and_the_speedup():
    report = make_report(25, baseline=staging_baseline(30.0, {"makespan_s": 5.0}, "staging.json"))
    text = render_summary(report)
    for r in range(25):
        assert f"x0-64 y0-64 z{r}-{r + 1}" in text
    assert f"speedup {report['speedup']:.2f}x" in text
    assert "staging" in text and "direct" in text and "35.000" in text  # 30 + 5 side by side
    assert "makespan 3.400 s" in text


def test_long_rank_lists_stay_readable():
    report = make_report(100)
    lines = render_summary(report).splitlines()
    rows = [line for line in lines if "x0-64 y0-64 z" in line]
    assert len(rows) == 20  # first 10 and last 10; slowest (99) and fastest (0) among them
    assert any("80 of 100 ranks not shown" in line for line in lines)

    ranks = [rank_record(r, 0.0, 1.0 + (r == 50) - 0.5 * (r == 40)) for r in range(100)]
    middle = build_report(config={}, cube={"shape": [100, 64, 64]}, grid={}, ranks=ranks)
    text = render_summary(middle)
    assert text.count("x0-64 y0-64 z") == 22  # the slowest and the fastest join the edges
    assert [line for line in text.splitlines() if "z50-51" in line][0].endswith("slowest")
    assert [line for line in text.splitlines() if "z40-41" in line][0].endswith("fastest")


def test_report_command_prints_summary(tmp_path, capsys):
    path = tmp_path / "r.json"
    write_report(path, make_report(3))
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(path)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "makespan" in out and "z2-3" in out

    from ingest.cli.main import main  # `python -m ingest report PATH.json`, errors name the file
    assert main(["report", str(path)]) == 0 and "z2-3" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "nope.json")]) == 1
    assert "nope.json" in capsys.readouterr().err


def test_no_secrets_in_json_or_summary(tmp_path):
    config = RunConfig(source=SIGNED).to_report_dict()
    report = make_report(2, config=config, source=SIGNED)  # the cube block gets the raw URL
    report_raw = make_report(2, config={"source": SIGNED, "note": f"read {SIGNED} ok"}, source=SIGNED)
    for rep in (report, report_raw):
        path = tmp_path / "r.json"
        write_report(path, rep)
        for text in (path.read_text(), render_summary(rep)):
            assert "X-Amz-Signature" not in text and "0123abcd" not in text and "AKIAEXAMPLE" not in text
        assert "s3.example:9000/bucket/cube.fits" in path.read_text()  # still says which object


def _run_script(*argv):
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_analysis_scripts_draw_from_report_json(tmp_path):
    base = staging_baseline(6.0, {"makespan_s": 1.0}, "this job")
    paths = []
    for n in (1, 2, 4):
        for method in ("presigned", "s3"):
            config = {"source": "s3://b/cube.fits", "method": method, "resolved_method": method}
            paths.append(str(write_report(tmp_path / f"{method}-n{n}.json", make_report(n, baseline=base, config=config))))
    paths.append(str(write_report(tmp_path / "sub" / "presigned-n4.json", make_report(4))))  # stem collides
    out = tmp_path / "figs"
    done = _run_script("analysis/plot_report.py", *paths, "--out", str(out))
    assert done.returncode == 0, done.stderr
    pngs = sorted(os.listdir(out))
    assert "makespan_vs_ranks.png" in pngs and "presigned-n4-2_elapsed.png" in pngs
    assert len(pngs) == 2 * len(paths) + 1
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    table = _run_script("analysis/table.py", *paths)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.strip().splitlines()
    assert lines[0].startswith("| report |") and len(lines) == 2 + len(paths)

    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    failed = _run_script("analysis/plot_report.py", str(bad), "--out", str(out))
    assert failed.returncode == 1 and "bad.json" in failed.stderr
