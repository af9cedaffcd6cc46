"""bench/cluster/commands.py without a cluster: its options, what it reads from each command's
report, its limits, its table and its exactness checks (each must fail on one value changed)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from astropy.io import fits

from bench.cluster import _commands_check as check
from bench.cluster import commands as cc
from bench.cluster._commands_table import misses, to_markdown
from ingest.testbed.cluster import load_spec
from ingest.testbed.synth import write_cube

SHAPE = (6, 10, 8)  # numpy order


@pytest.fixture()
def cube(tmp_path):
    path = tmp_path / "cube.fits"
    made = write_cube(path, SHAPE, -32)
    with fits.open(path) as hdul:
        data = np.array(hdul[0].data)
    return str(path), data, made["data_offset"]


def _write(path, values) -> str:
    fits.PrimaryHDU(values).writeto(path)
    return str(path)


def _halves(tmp_path, data):
    """Two files splitting the cube along its first axis, as a two-rank run writes them."""
    boxes = [[[0, 3], [0, 10], [0, 8]], [[3, 6], [0, 10], [0, 8]]]
    paths = [_write(tmp_path / f"rank{i}.fits", data[b[0][0]:b[0][1]]) for i, b in enumerate(boxes)]
    return boxes, paths


def test_options_commands_and_their_order():
    args = cc.build_parser().parse_args(["--nodes", "16", "--ranks", "64", "--commands", "cutouts,publish,prestage",
                                         "--shape", "256x512x512", "--sources", "200", "--run-timeout-s", "1200"])
    assert (args.nodes, args.ranks, args.sources, args.run_timeout_s) == ("16", "64", 200, 1200.0)
    assert cc.parse_commands(args.commands) == ["prestage", "publish", "cutouts"]  # publish after its pre-stage
    assert cc.parse_commands(cc.build_parser().parse_args([]).commands) == list(cc.COMMANDS)
    with pytest.raises(SystemExit, match="publish sends"):
        cc.parse_commands("run,publish")
    with pytest.raises(SystemExit, match="stage"):
        cc.parse_commands("run,stage")


def test_each_commands_arguments_write_a_report_to_a_host_directory():
    kw = dict(url="s3://survey/cube.fits", shape=(64, 512, 512), out_dir="/tmp/x/out", report="/tmp/x/r.json",
              catalogue="/tmp/x/cat.csv", size="15arcsec 150km/s", staged_dir="/tmp/x/staged",
              dest="s3://survey/published-n2-p4.fits")
    for command in cc.COMMANDS:
        argv = cc.command_argv(command, **kw)
        assert argv[-3:] == ["--report", "/tmp/x/r.json", "--no-progress"]
    assert cc.command_argv("s2p", **kw)[:5] == ["run", "--source", "s3://survey/cube.fits", "--method", "s3"]
    assert "--region-shape" in cc.command_argv("s2p", **kw) and "256x256x32" in cc.command_argv("s2p", **kw)
    publish = cc.command_argv("publish", **kw)
    assert publish[:5] == ["publish", "--source", "/tmp/x/staged", "--dest", "s3://survey/published-n2-p4.fits"]
    cutouts = cc.command_argv("cutouts", **kw)
    assert cutouts[cutouts.index("--catalogue") + 1] == "/tmp/x/cat.csv" and "/tmp/x/out" in cutouts


def test_measures_are_read_by_each_reports_own_names():
    root = {"own_s": 0.2, "own_cpu_s": 0.1, "of_makespan": 0.04, "cpu_of_makespan": 0.02, "waiting_s": 0.5,
            "gathers": 2, "bytes_gathered": 65536, "steps": 4}
    run = cc.report_measures("run", {"aggregate": {"makespan_s": 5.0, "bytes_wire": 100, "requests": 7}, "root": root,
                                     "settings": {"prediction": {"makespan_s": 4.0, "binding": "egress"}}})
    assert (run["predicted_s"], run["predicted_binding"]) == (4.0, "egress")
    assert run["root_bytes_gathered"] == 65536 and run["root_cpu_of_makespan"] == 0.02 and run["root_ledger"]
    cut = cc.report_measures("cutouts", {"makespan_s": 2.0, "rank0_prepare_s": 0.3, "rank0_gather_s": 0.01,
                                         "totals": {"bytes_wire": 50, "requests": 3, "done": 20, "skipped": 0},
                                         "settings": {"prediction": {"makespan_s": 1.5, "binding": "link"}}})
    assert (cut["makespan_field"], cut["wire_bytes"], cut["root_ledger"]) == ("makespan_s", 50, False)
    assert (cut["predicted_s"], cut["predicted_binding"]) == (1.5, "link")
    failures = {"failed_attempts": 1, "failed_bytes": 30, "kinds": {"upload_timeout": 1}, "throttled": 1}
    pub = cc.report_measures("publish", {"elapsed_s": 3.0, "object_bytes": 90, "parts": 3, "ranks": [
        {"bytes_uploaded": 60, "parts_uploaded": 2}, {"bytes_uploaded": 30, "parts_uploaded": 1}],
        "upload_failures": failures})
    assert (pub["makespan_s"], pub["wire_bytes"], pub["requests"]) == (3.0, 90, 3) and not pub["root_ledger"]
    assert pub["upload_failures"] == failures  # what the store's ingress carried beyond the object
    with_root = cc.report_measures("publish", {"elapsed_s": 3.0, "object_bytes": 90, "parts": 0, "ranks": [],
                                               "upload_failures": failures,
                                               "root": root})  # a report that carries rank 0's ledger: kept
    assert with_root["root_ledger"] and with_root["root_own_cpu_s"] == 0.1
    timeline = {"first_upload": {"first": 1.5, "median": 1.6, "last": 1.9, "last_rank": 2},
                "last_upload_end": {"first": 2.0, "median": 2.8, "last": 2.9, "last_rank": 1}}
    timed = cc.report_measures("publish", {"elapsed_s": 3.0, "object_bytes": 90, "parts": 0, "ranks": [],
                                           "upload_failures": failures, "timeline_s": timeline})
    # From rank 0's start to the first part up; from the first part up to the last one done.
    assert (timed["before_first_upload_s"], timed["upload_window_s"]) == (1.5, 2.9 - 1.5)
    assert "upload_window_s" not in pub  # a report without a timeline: not guessed


def test_extra_options_go_to_their_commands_cells():
    args = cc.build_parser().parse_args(["--publish-args", "--upload-method presigned --parts-in-flight 4"])
    assert (args.publish_args, args.run_args) == ("--upload-method presigned --parts-in-flight 4", "")
    assert cc.extra_args(args)["publish"] == ("--upload-method", "presigned", "--parts-in-flight", "4")
    with pytest.raises(SystemExit, match="--publish-args: .*does not split"):
        cc.extra_args(cc.build_parser().parse_args(["--publish-args", "--header-from 'cube.fits"]))
    argv = cc.command_argv("publish", url="s3://b/c.fits", shape=(4, 4, 4), out_dir="/o", report="/r.json",
                           staged_dir="/s", dest="s3://b/p.fits", extra=("--upload-method", "presigned"))
    assert argv[-5:] == ["--report", "/r.json", "--no-progress", "--upload-method", "presigned"]


def test_publishs_limit_is_the_stores_ingress_and_its_counters_read_as_a_reads():
    spec = load_spec(cc.cluster_bench.CONFIG, {"cluster": {"nodes": 4}})  # 4 NICs outrun the store
    read, upload = cc.cell_limit(spec, "run", 50e6, 4, 4), cc.cell_limit(spec, "publish", 50e6, 4, 4)
    assert read["limit_s"] == upload["limit_s"] > 50e6 / spec.store.egress_rate_bytes_per_s
    assert (read["limit_binding"], upload["limit_binding"]) == ("store egress", "store ingress")
    assert cc.upload_as_read({"store_in": 10, "n0>store": 6, "n1>store": 4, "store": 1}) == \
        {"store": 10, "store>n0": 6, "store>n1": 4}


def _results(cells):
    return {"cube_shape": [6, 10, 8], "object_bytes": 5760, "sources": 20, "complete": False, "cells": cells,
            "spec": {"nic_bytes_per_s": 10e6, "store_egress_bytes_per_s": 25e6, "store_latency_s": 0.001}}


def test_table_one_row_per_cell_with_the_targets_each_missed():
    ok = {"command": "run", "nodes": 2, "ranks": 4, "status": "ok", "exact": True, "makespan_s": 1.0, "wall_s": 9.0,
          "wire_bytes": 2 ** 20, "requests": 8, "limit_s": 0.8, "limit_binding": "store egress", "x_limit": 1.25,
          "predicted_s": 1.0, "measured_over_predicted": 1.0, "root_ledger": True, "root_own_s": 0.1,
          "root_of_makespan": 0.1, "root_own_cpu_s": 0.03, "root_cpu_of_makespan": 0.03, "root_waiting_s": 2.0,
          "root_steps": 3, "root_gathers": 2, "root_bytes_gathered": 4096}
    cut = {**ok, "command": "cutouts", "x_limit": 1.1, "root_ledger": False, "predicted_s": 2.0,
           "predicted_binding": "egress", "measured_over_predicted": 0.5, "rank0_prepare_s": 0.4,
           "rank0_gather_s": 0.02}
    bad = {**ok, "command": "s2p", "status": "inexact", "exact": False, "check": "voxel (1, 2, 3) differs"}
    failed = {"command": "publish", "nodes": 2, "ranks": 4, "status": "failed", "wall_s": 3.0, "stderr_tail": "boom"}
    assert misses(ok) == ["x limit > 1.15"]  # rank 0's wall share is 10 %, its CPU share 3 %: met
    assert misses(cut) == ["measured/predicted outside 0.8-1.25"] and misses(failed) == ["failed"]
    table = to_markdown(_results([cut, failed, bad, ok]))
    lines = [line for line in table.splitlines() if line.startswith("| ") and "command" not in line]
    assert [line.split(" | ")[0] for line in lines] == ["| run", "| s2p", "| publish", "| cutouts"]
    assert len({line.count(" | ") for line in lines}) == 1  # every row has every column
    assert "inexact: voxel (1, 2, 3) differs" in table and "2.000 (egress)" in table and "no ledger" in table
    assert "Partial" in table and "3 + 2; 4.0" in table
    uploads = {**ok, "command": "publish", "x_limit": 1.35, "x_limit_uploads": 1.01, "before_first_upload_s": 13.2}
    assert "1.35 (uploads 1.01 after 13.2 s)" in to_markdown(_results([uploads]))


def test_summarize_prints_a_written_results_file(tmp_path, capsys):
    path = tmp_path / "cluster_commands.json"
    path.write_text(json.dumps(_results([{"command": "prestage", "nodes": 2, "ranks": 4, "status": "failed"}])))
    assert cc.main(["--summarize", str(path)]) == 0
    assert "| prestage | 2 | 4 | failed |" in capsys.readouterr().out


def test_run_outputs_exact_and_one_value_changed_or_a_voxel_missed_is_found(tmp_path, cube):
    cube_path, data, _ = cube
    boxes, paths = _halves(tmp_path, data)
    report = {"ranks": [{"rank": 0, "regions": [0], "output_path": paths[0]},
                        {"rank": 1, "regions": [1], "output_path": [paths[1]]}],
              "regions": [{"index": i, "box": b} for i, b in enumerate(boxes)]}
    assert check.run_pieces(report) == [(boxes[0], paths[0]), (boxes[1], paths[1])]
    assert check.check_run(report, cube_path) is None
    changed = data[3:].copy()
    changed[1, 2, 3] = np.nextafter(changed[1, 2, 3], np.float32(np.inf))  # one value, one ulp
    _write(tmp_path / "changed.fits", changed)
    report["ranks"][1]["output_path"] = [str(tmp_path / "changed.fits")]
    assert "voxel (4, 2, 3)" in check.check_run(report, cube_path)
    assert "is in no output file" in check.check_boxes(cube_path, [(boxes[0], paths[0])], cover=True)
    report["ranks"][0]["output_path"] = [paths[0], paths[1]]  # two files, one region: not located
    assert "does not locate" in check.check_run(report, cube_path)


def test_prestage_frame_must_be_the_cube_byte_for_byte(tmp_path, cube):
    cube_path, _, data_offset = cube
    staged = tmp_path / "staged"
    staged.mkdir()
    frame = staged / "cube.fits"
    frame.write_bytes(open(cube_path, "rb").read())
    manifest = {"layout": "frame", "regions": [{"index": i, "box": [], "status": "done",
                                                "files": {"data": str(frame)}} for i in range(2)]}
    (staged / "manifest.json").write_text(json.dumps(manifest))
    assert check.check_prestage(str(staged / "manifest.json"), cube_path) is None
    raw = bytearray(frame.read_bytes())
    raw[data_offset + 5] ^= 1  # one bit of the second value
    frame.write_bytes(bytes(raw))
    assert "different bytes" in check.check_prestage(str(staged / "manifest.json"), cube_path)
    manifest["regions"][1]["status"] = "writing"
    (staged / "manifest.json").write_text(json.dumps(manifest))
    assert "not done" in check.check_prestage(str(staged / "manifest.json"), cube_path)


def test_cutouts_every_source_cut_and_each_file_exact(tmp_path, cube):
    cube_path, data, _ = cube
    out = tmp_path / "cut"
    out.mkdir()
    box = [[1, 4], [2, 7], [3, 8]]
    values = data[1:4, 2:7, 3:8].copy()
    _write(out / "a.fits", values)
    entries = [{"name": "a", "status": "done", "file": "a.fits", "box": box}]
    (out / "manifest.json").write_text(json.dumps({"sources": entries}))
    assert check.check_cutouts(str(out), cube_path, 1) is None
    assert "1 of 2 sources cut" in check.check_cutouts(str(out), cube_path, 2)
    values[0, 0, 0] = -values[0, 0, 0] if values[0, 0, 0] else np.float32(1)
    (out / "a.fits").unlink()
    _write(out / "a.fits", values)
    assert "voxel (1, 2, 3)" in check.check_cutouts(str(out), cube_path, 1)


def test_digests_of_files_and_streams_agree(tmp_path, cube):
    cube_path, _, _ = cube
    body = open(cube_path, "rb").read()
    chunks = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    assert check.stream_digest(chunks) == (check.file_digest(cube_path), len(body))
    assert check.stream_digest([body[:-1] + b"\1"])[0] != check.file_digest(cube_path)
