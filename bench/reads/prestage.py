"""Peak memory of `python -m ingest prestage` (streams to disk) vs `python -m ingest run --output-dir`
(whole region in memory), against the bound threads x chunk_bytes + 150 MB.

Each command reads the whole cube (`--grid 1x1x1`, strategy large, no probe) in a fresh process
(bench/_rank_peak.py wraps ingest's CLI and writes VmHWM at exit); while it runs, this process
samples the child's /proc/PID/status RssAnon and keeps the maximum. The bound has no output term:
prestage must not hold the region, so the region should be many times threads x chunk_bytes
(the table states region / (threads x chunk) and region / bound). Both outputs are compared with
the source's data (astropy + numpy) so the figures are for correct runs only.

    python -m bench.reads.prestage [--size-mib 256] [--threads 2] [--chunk-mib 4] [--methods posix,presigned]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

if __package__ in (None, ""):  # run as a file (python bench/reads/prestage.py): make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common, mpirun
from bench._rank_peak import PEAK_DIR_ENV
from bench.reads.memory import SLACK_BYTES, TARGET_RATIO
from ingest.units import MiB

NAME = "prestage"
MIN_REGION_OVER_VARIABLE = 8  # the region must be >= 8x threads x chunk_bytes for the bound to mean anything
SAMPLE_INTERVAL_S = 0.005
COMMANDS = ("prestage", "run")  # A, B


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.prestage", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, size_mib=256)
    parser.add_argument("--threads", type=int, default=2, help="--threads of both commands (default 2)")
    parser.add_argument("--chunk-mib", type=int, default=4, help="--chunk-bytes of both commands, MiB (default 4)")
    parser.add_argument("--methods", default="posix,presigned",
                        help="comma-separated sources: posix (the local file), presigned, s3 (default posix,presigned)")
    return parser


def _status_field(pid: int, field: str) -> int | None:
    """A '... kB' field of /proc/PID/status in bytes (None once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def run_sampled(cli_args: list[str], env: dict, timeout_s: float = 900.0) -> dict:
    """`python bench/_rank_peak.py CLI_ARGS` in a fresh process: max sampled RssAnon, VmHWM at exit, wall."""
    workdir = tempfile.mkdtemp(prefix="ingest-bench-prestage-")
    try:
        err_path = os.path.join(workdir, "stderr")
        with open(err_path, "w") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen([sys.executable, mpirun.RANK_PEAK] + cli_args, stdout=subprocess.DEVNULL,
                                    stderr=err, env={**env, PEAK_DIR_ENV: workdir})
            peak_anon, samples, stop = [0], [0], threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    value = _status_field(proc.pid, "RssAnon")
                    if value is not None:
                        peak_anon[0] = max(peak_anon[0], value)
                        samples[0] += 1
                    stop.wait(SAMPLE_INTERVAL_S)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                status = proc.wait(timeout=timeout_s)
            finally:
                stop.set()
                sampler.join()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            wall_s = time.perf_counter() - t0
        if status != 0:
            with open(err_path) as f:
                raise RuntimeError(f"ingest {cli_args[0]} failed ({status}): {f.read().strip()[-1500:]}")
        with open(os.path.join(workdir, "rank0.json")) as f:
            record = json.load(f)
        return {"peak_rss_anon_bytes": peak_anon[0], "rss_anon_samples": samples[0],
                "vm_hwm_bytes": record["peak_rss_bytes"], "wall_s": wall_s}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def verify(out_dir: str, cube: common.Cube) -> bool:
    """The one FITS file the command wrote under out_dir holds exactly the source's data."""
    import numpy as np
    from astropy.io import fits

    files = sorted(glob.glob(os.path.join(out_dir, "**", "*.fits"), recursive=True))
    if len(files) != 1:
        return False
    with fits.open(cube.path, memmap=True) as src, fits.open(files[0], memmap=True) as out:
        a, b = src[0].data, out[0].data
        return a.shape == b.shape and bool(np.array_equal(a, b))


def candidate(command: str, method: str, cube: common.Cube, args, env: common.BenchEnv) -> common.Candidate:
    source = cube.path if method == "posix" else cube.s3_uri  # presigned: ingest presigns (no URL in argv)
    flags = ["--grid", "1x1x1", "--threads", str(args.threads), "--chunk-bytes", f"{args.chunk_mib}MiB",
             "--no-probe", "--strategy", "large", "--no-progress", "--method", method]
    if command == "prestage":
        flags += ["--layout", "frame"]
    bound = args.threads * args.chunk_mib * MiB + SLACK_BYTES
    shown = ["python", "-m", "ingest", command, "--source", "CUBE", "--output-dir", "DIR"] + flags

    def run() -> dict:
        out_dir = tempfile.mkdtemp(prefix=f"out-{command}-", dir=env.cache_dir)
        try:
            got = run_sampled([command, "--source", source, "--output-dir", out_dir] + flags, env.env())
            got["verified"] = verify(out_dir, cube)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        got["bound_bytes"] = bound
        got["rss_anon_over_bound"] = got["peak_rss_anon_bytes"] / bound
        got["vm_hwm_over_bound"] = got["vm_hwm_bytes"] / bound
        return got

    info = {"command": " ".join(shown), "method": method, "source": "local file" if method == "posix" else cube.s3_uri}
    return common.Candidate(f"{method}_{command}", run, info)


def run(env: common.BenchEnv, args) -> dict:
    common.settle(args, size_mib=(256, 64))
    log = common.logger(args)
    cube = env.cube(args.size_mib * MiB)
    methods = [m for m in (p.strip() for p in args.methods.split(",")) if m]
    cands = [candidate(cmd, m, cube, args, env) for m in methods for cmd in COMMANDS]
    variable = args.threads * args.chunk_mib * MiB
    bound = variable + SLACK_BYTES
    region_over_variable = cube.data_bytes / variable
    if log:
        log(f"{NAME}: {cube.data_bytes / MiB:.0f} MiB region, bound {bound / MiB:.0f} MiB, "
            f"region/(threads x chunk) {region_over_variable:.1f}, {args.repeats} round(s)")
        if region_over_variable < MIN_REGION_OVER_VARIABLE:
            log(f"{NAME}: WARNING region is under {MIN_REGION_OVER_VARIABLE}x threads x chunk: the bound is not tested")
    results = common.run_interleaved(cands, args.repeats, warmup=args.warmup, log=log)
    ratios, targets = {}, {}
    for m in methods:
        a, b = f"{m}_prestage", f"{m}_run"
        for metric, short in (("peak_rss_anon_bytes", "rss_anon"), ("vm_hwm_bytes", "vm_hwm")):
            ratios[f"{m}_prestage_over_run_{short}"] = common.paired_ratio(results, a, b, metric)
        values = [s["rss_anon_over_bound"] for s in results[a]["samples"]]
        ratios[f"{a}_rss_anon_over_bound"] = {**common.stats(values), "samples": values,
                                              "metric": "peak_rss_anon_bytes / bound_bytes"}
        targets[f"{a}_rss_anon_over_bound"] = common.target("<=", TARGET_RATIO)
    return {
        "config": {"size_mib": args.size_mib, "repeats": args.repeats, "threads": args.threads,
                   "chunk_bytes": variable // args.threads, "methods": methods, "cube": cube.describe(),
                   "slack_bytes": SLACK_BYTES, "bound": "threads * chunk_bytes + 150e6", "bound_bytes": bound,
                   "region_bytes": cube.data_bytes, "region_over_variable": region_over_variable,
                   "region_over_bound": cube.data_bytes / bound},
        "candidates": results,
        "verified": all(s["verified"] for r in results.values() for s in r["samples"]),
        "ratios": ratios,
        "targets": targets,
        "notes": [
            "peak RssAnon: max of /proc/PID/status RssAnon sampled every 5 ms while the child ran; "
            "VmHWM: the child's own high-water mark at exit (bench/_rank_peak.py), which also counts "
            "file-backed pages (page cache of mapped files, shared libraries).",
            "presigned: the child gets s3://bucket/key with --method presigned and presigns itself, "
            "so no credential is in its argv or in these results.",
            "150 MB is taken as 150e6 bytes (bench/reads/memory.py's SLACK_BYTES).",
        ],
    }


def to_markdown(results: dict) -> str:
    cfg = results["config"]
    rows = []
    for name, res in results["candidates"].items():
        s, info = res["summary"], res["info"]
        method, command = info["method"], name[len(info["method"]) + 1:]
        ratio_anon = results["ratios"][f"{method}_prestage_over_run_rss_anon"]
        ratio_hwm = results["ratios"][f"{method}_prestage_over_run_vm_hwm"]
        ab = (f"{common.spread(ratio_anon, '{:.3f}')} / {common.spread(ratio_hwm, '{:.3f}')}"
              if command == "prestage" else "-")
        rows.append([f"`ingest {command}` ({method})", common.spread(s["peak_rss_anon_bytes"], "{:.0f}", MiB),
                     common.spread(s["vm_hwm_bytes"], "{:.0f}", MiB), f"{cfg['bound_bytes'] / MiB:.0f}",
                     common.spread(s["rss_anon_over_bound"], "{:.3f}"), ab,
                     common.spread(s["wall_s"], "{:.2f}"),
                     "yes" if all(x["verified"] for x in res["samples"]) else "NO"])
    head = (f"### Peak memory of `ingest prestage` vs `ingest run --output-dir` (whole cube, grid 1x1x1, "
            f"{cfg['threads']} threads x {cfg['chunk_bytes'] // MiB} MiB, strategy large, {cfg['repeats']} round(s))\n\n"
            f"region {cfg['region_bytes'] / MiB:.0f} MiB; bound = threads x chunk + 150 MB = "
            f"{cfg['bound_bytes'] / MiB:.1f} MiB; region / (threads x chunk) = {cfg['region_over_variable']:.1f}; "
            f"region / bound = {cfg['region_over_bound']:.2f}\n")
    table = common.markdown_table(["command (source)", "peak RssAnon MiB", "VmHWM MiB", "bound MiB", "RssAnon/bound",
                                   "A/B RssAnon / VmHWM", "wall s", "output == source"], rows)
    return head + "\n" + table


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, size_mib=(256, 64), repeats=(1, 1), warmup=(0, 0))


if __name__ == "__main__":
    sys.exit(main())
