"""bench.cutouts.catalogue's candidates, each a function that cuts a catalogue's sources and returns a sample.

- `ingest_cutouts`: `python -m ingest cutouts` under mpiexec, or alone for one rank (each rank
  through bench/_rank_peak.py, so every rank's peak RSS is known), its JSON report, and its wall
  time from launch to exit.
- `staging_baseline`: bench/cutouts/_stage_cut.py in a process of its own: stage the whole cube,
  then cut every box locally with numpy and write it with astropy.
- `floor`: bench/cutouts/_floor.py in a process of its own: the imports and reads of an astropy
  cut-out job given a presigned URL, nothing else.
- `astropy_loop`: what cutout-fits does per source, for a sample of the sources: astropy opens
  the presigned URL through fsspec (its defaults), takes `section[box]`, writes the cut-out.
A child that outlives its time limit is stopped with its whole process group (it was started in
one of its own) and recorded as timed out, not as a crash of the benchmark.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from bench import common, mpirun
from bench._rank_record import read_rank_records
from bench.cutouts._setup import read_box, shifted_header
from ingest.study.children import stop_process_group
from ingest.testbed.signals import signals_held

STAGE_CUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_stage_cut.py")
FLOOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_floor.py")
SLACK_BYTES = 150 * 10**6  # the interpreter, numpy, astropy and boto3 a rank holds besides its buffers (bench.reads.memory)


def _run_child(cmd: list[str], env: dict, timeout_s: float) -> tuple[str, subprocess.CompletedProcess | None, float]:
    """('ok' | 'failed' | 'timeout', the finished process, wall seconds). On timeout the child's
    process group (mpiexec and its ranks) gets SIGTERM, then SIGKILL."""
    t0 = time.perf_counter()
    with signals_held():
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_process_group(proc)
        return "timeout", None, time.perf_counter() - t0
    except BaseException:  # the bench killed (a SystemExit from its signal): its job goes with it
        stop_process_group(proc)
        raise
    wall_s = time.perf_counter() - t0
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    return ("ok" if proc.returncode == 0 else "failed"), done, wall_s


def ingest_args(cube: common.Cube, catalogue: str, size: str, out_dir: str, report: str, endpoint_url: str | None,
                extra: list[str]) -> list[str]:
    """The `ingest cutouts` arguments of one cell."""
    args = ["cutouts", "--source", cube.s3_uri, "--method", "s3", "--catalogue", catalogue, "--size", size,
            "--output-dir", out_dir, "--report", report, "--no-progress", *extra]
    return args + (["--endpoint-url", endpoint_url] if endpoint_url else [])


def ingest_cutouts(env: common.BenchEnv, cube: common.Cube, profile: str, catalogue: str, size: str, ranks: int,
                   work_dir: str, timeout_s: float, extra: list[str], info: dict, n_boxes: int,
                   tree: str | None = None) -> dict:
    """One `ingest cutouts` job under mpiexec: the report's figures, wall time, per-rank peak RSS.
    A job stopped at its time limit keeps wall_s (the limit) and wall_per_source_s over its
    n_boxes sources: lower bounds on what it would have taken. `tree`: another copy of the
    repository whose `ingest` to run (its bench/_rank_peak.py puts it first on the path), e.g. the
    code before a change, run interleaved with this one on the same loaded machine."""
    out_dir, peak_dir = os.path.join(work_dir, "ingest_out"), os.path.join(work_dir, "peaks")
    report_path = os.path.join(work_dir, "ingest_report.json")
    for path in (out_dir, peak_dir):
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(peak_dir)
    if os.path.exists(report_path):
        os.unlink(report_path)
    endpoint = None if profile == "loopback" else env.link(profile).endpoint_url
    rank_peak = os.path.join(tree, "bench", "_rank_peak.py") if tree else mpirun.RANK_PEAK
    argv = [rank_peak, *ingest_args(cube, catalogue, size, out_dir, report_path, endpoint, extra)]
    # One rank is one process started alone, as a user runs it (and as the staging side runs).
    cmd = [sys.executable, *argv] if ranks == 1 else mpirun.python_command(ranks, argv)
    info["command"] = mpirun.shown(cmd)
    # Each tree keeps its own link cache, over the cells' rounds as a user's jobs keep theirs: one
    # version's records do not steer (or, written without a field, undo) the other's.
    links = os.path.join(env.cache_dir, "links-reference.json" if tree else "links.json")
    status, done, wall_s = _run_child(cmd, {**env.env(), **mpirun.MPI_ENV, "INGEST_BENCH_PEAK_DIR": peak_dir,
                                            "INGEST_LINK_CACHE": links}, timeout_s)
    if status == "timeout":
        return {"status": status, "wall_s": wall_s, "wall_per_source_s": wall_s / max(1, n_boxes),
                "error": f"stopped after {timeout_s:.0f} s (--timeout-s)"}
    if status != "ok":
        return {"status": status, "wall_s": wall_s, "error": (done.stderr or done.stdout)[-1500:]}
    with open(report_path) as fh:
        report = json.load(fh)
    peaks = [record["peak_rss_bytes"] for record in read_rank_records(peak_dir, ranks)]
    totals, settings = report["totals"], report["settings"]
    bound = settings["memory_bound_bytes"]
    info.update(plan_choice=report["plan"]["choice"], settings=settings, clipped=report.get("clipped"),
                per_rank=[{k: r.get(k) for k in ("rank", "elapsed_s", "sources", "requests", "bytes_wire", "read_s", "cut_s",
                                          "memory_bound_bytes", "band_budget_bytes", "plan_choice", "bands")}
                       for r in report["ranks"]])
    done_n = max(1, totals["done"])
    return {"status": "ok", "wall_s": wall_s, "makespan_s": report["makespan_s"],
            "rank0_prepare_s": report["rank0_prepare_s"], "rank0_gather_s": report.get("rank0_gather_s"),
            "rank0_measuring_s": (report.get("root") or {}).get("measuring_s"),
            "shared_source": settings.get("prediction", {}).get("shared_source"),
            "sources": totals["sources"], "done": totals["done"], "skipped": totals.get("skipped", 0),
            "requests": totals["requests"], "bytes_wire": totals["bytes_wire"], "bytes_needed": totals["bytes_needed"],
            "requests_per_source": totals["requests_per_source"],
            "bytes_wire_per_source": totals["bytes_wire_per_source"],
            "work_s": report["rank0_prepare_s"] + report["makespan_s"] + (report.get("rank0_gather_s") or 0.0),
            "wall_per_source_s": wall_s / done_n, "makespan_per_source_s": report["makespan_s"] / done_n,
            "cutouts_per_s": totals["done"] / wall_s,
            "bands": sum(len(r.get("bands", ())) for r in report["ranks"]), "plan_modes": report["plan"].get("modes"),
            "memory_bound_bytes": bound, "peak_rss_max_bytes": max(peaks), "peak_rss_bytes_per_rank": peaks,
            "peak_over_bound": max(peaks) / (bound + SLACK_BYTES), "out_dir": out_dir}


def staging_baseline(env: common.BenchEnv, cube: common.Cube, profile: str, boxes: list, work_dir: str,
                     timeout_s: float, info: dict) -> dict:
    """Stage the whole cube, cut every box locally (bench/cutouts/_stage_cut.py, a process of its own)."""
    out_dir, stage_dir = os.path.join(work_dir, "staging_out"), os.path.join(work_dir, "stage")
    for path in (out_dir, stage_dir):
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(stage_dir)
    boxes_path = os.path.join(work_dir, "boxes.json")
    with open(boxes_path, "w") as fh:
        json.dump([[stem, [list(p) for p in box]] for stem, box in boxes], fh)
    cmd = [sys.executable, STAGE_CUT, "--source", cube.s3_uri, "--boxes", boxes_path, "--stage-dir", stage_dir,
           "--output-dir", out_dir]
    got = _json_child(env, profile, cmd, timeout_s, info)
    if got["status"] == "ok":
        got.update(work_s=got["stage_s"] + got["cut_s"], wall_per_source_s=got["wall_s"] / max(1, len(boxes)),
                   cutouts_per_s=got["files"] / got["wall_s"], out_dir=out_dir)
    return got


def floor(env: common.BenchEnv, url: str, n_bytes: int, n_boxes: int, timeout_s: float, info: dict) -> dict:
    """The imports and reads any astropy cut-out job needs, and nothing else (bench/cutouts/_floor.py,
    a process of its own, reading the presigned `url`), timed from launch to exit."""
    got = _json_child(env, "loopback", [sys.executable, FLOOR, "--url", url, "--bytes", str(n_bytes)], timeout_s, info)
    if got["status"] == "ok":
        got["wall_per_source_s"] = got["wall_s"] / max(1, n_boxes)
    return got


def _json_child(env: common.BenchEnv, profile: str, cmd: list[str], timeout_s: float, info: dict) -> dict:
    """A bench script that prints one JSON line, run against the profile's endpoint: its status,
    wall seconds from launch to exit, and the line's fields."""
    if profile != "loopback":
        cmd = cmd + ["--endpoint-url", env.link(profile).endpoint_url]
    info["command"] = mpirun.shown(cmd)  # a presigned URL is a credential: recorded redacted
    status, done, wall_s = _run_child(cmd, env.env(), timeout_s)
    if status != "ok":
        tail = "" if done is None else (done.stderr or done.stdout)[-1500:]
        return {"status": status, "wall_s": wall_s, "error": tail or f"no result within {timeout_s:.0f} s"}
    return {"status": "ok", "wall_s": wall_s, **json.loads(done.stdout.strip().splitlines()[-1])}


def astropy_loop(url: str, sample: list, work_dir: str, cube_path: str, info: dict) -> dict:
    """cutout-fits' way, one source after another: fits.open(url, use_fsspec=True) (fsspec's defaults:
    5 MiB blocks, read-ahead), section[box], then the cut-out written; each checked against the cube
    (outside its time). One untimed open first, so no source pays the libraries' imports."""
    from astropy.io import fits

    from bench.reads.subcube import _fsspec_counts

    out_dir = os.path.join(work_dir, "astropy_out")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    info["reader"] = "astropy.io.fits.open(presigned url, use_fsspec=True, fsspec_kwargs={}).section[box], then writeto"
    times, requests, wire, same = [], 0, 0, True
    with fits.open(url, use_fsspec=True, fsspec_kwargs={}) as hdul:  # untimed: fsspec's and aiohttp's imports
        hdul[0].header
    for stem, box in sample:
        t0 = time.perf_counter()
        with fits.open(url, use_fsspec=True, fsspec_kwargs={}) as hdul:
            cut = np.asarray(hdul[0].section[tuple(slice(a, b) for a, b in box)])
            header = shifted_header(hdul[0].header, box)
            counts = _fsspec_counts(hdul)
        fits.PrimaryHDU(cut, header=header).writeto(os.path.join(out_dir, stem + ".fits"), overwrite=True)
        times.append(time.perf_counter() - t0)
        requests, wire = requests + counts.get("requests", 0), wire + counts.get("wire_bytes", 0)
        same = same and same_values(cut, read_box(cube_path, box))
    shutil.rmtree(out_dir, ignore_errors=True)
    n = max(1, len(times))
    return {"status": "ok", "sampled": len(times), "per_source_s": sum(times) / n,
            "per_source_min_s": min(times, default=0.0), "per_source_max_s": max(times, default=0.0),
            "cutouts_per_s": len(times) / sum(times) if times else None,
            "requests_per_source": requests / n, "bytes_wire_per_source": wire / n, "verified": same,
            "per_source_times_s": times}


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and equal bits (big-endian, whatever each array's byte order)."""
    big = lambda x: np.ascontiguousarray(x, dtype=x.dtype.newbyteorder(">")).view(np.uint8)  # noqa: E731
    return a.shape == b.shape and a.dtype.kind == b.dtype.kind and bool(np.array_equal(big(a), big(b)))


def verify_outputs(out_dir: str, sample: list, cube_path: str) -> bool:
    """Every sampled cut-out in out_dir holds its box of the cube, bit for bit."""
    from astropy.io import fits

    for stem, box in sample:
        path = os.path.join(out_dir, stem + ".fits")
        if not os.path.exists(path):
            return False
        with fits.open(path) as hdul:
            if not same_values(np.asarray(hdul[0].data), read_box(cube_path, box)):
                return False
    return True
