"""Whole-object read: ingest (presigned HTTP and S3, parallel 16 MiB ranges) vs one `curl` stream.

Same object, same presigned URL, same run, interleaved; the finding is the per-round ratio
of throughputs ingest / curl (target >= 1.0: parallel ranges should beat one stream), plus
CPU seconds per GiB of each reader and of the server while it served that reader. A second
curl asks for the data bytes with a Range header (`curl_range`): versitygw serves a GET
without Range by sendfile but a ranged GET by pread + 32 KiB socket writes (strace -c), so
ingest / curl_range separates the client from the server's range path.

    python -m bench.whole_object [--size-mib 1024] [--threads 4] [--chunk-mib 16] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a file (python bench/whole_object.py): make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

import ingest
from bench import common
from ingest.presign import redact_url
from ingest.synth import voxel_values
from ingest.units import MiB

NAME = "whole_object"
TARGET_RATIO = 1.0  # ingest throughput / curl throughput (issue 5)
CURL_ARGS = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}"]
SPOT_VOXELS = 4096  # values checked at each end of every ingest read (outside the timing)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.whole_object", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--threads", type=int, default=4, help="ingest worker threads (default 4)")
    parser.add_argument("--chunk-mib", type=int, default=16, help="ingest request size in MiB (default 16)")
    return parser


def _check_cube(data: np.ndarray, cube: common.Cube) -> None:
    """Spot-check the first and last voxels against synth's formula: a fast read of wrong bytes is no result."""
    flat = data.reshape(-1)
    n = flat.size
    k = min(SPOT_VOXELS, n)
    for idx in (np.arange(k), np.arange(n - k, n)):
        if not np.array_equal(flat[idx], voxel_values(idx, cube.bitpix)):
            raise AssertionError(f"{cube.key}: ingest returned wrong voxel values near index {idx[0]}")


def ingest_candidate(name: str, source: str, cube: common.Cube, server_pid: int, *,
                     threads: int, chunk_bytes: int, method: str) -> common.Candidate:
    """ingest.read_subcube of the whole cube, timed in this process (CPU: RUSAGE_SELF, all threads)."""

    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        data = ingest.read_subcube(source, (), threads=threads, chunk_bytes=chunk_bytes, method=method)
        elapsed_s = time.perf_counter() - t0
        cpu_s, srv_s = common.cpu_self_s() - cpu0, common.cpu_pid_s(server_pid) - srv0
        nbytes = data.nbytes
        _check_cube(data, cube)
        del data
        return _sample(nbytes, elapsed_s, cpu_s, srv_s)

    info = {"reader": "ingest.read_subcube", "method": method, "region": "()", "threads": threads,
            "chunk_bytes": chunk_bytes, "source": redact_url(source) if method == "presigned" else source,
            "bytes_counted": "data bytes returned (the header is read too, with 2880-byte ranges)"}
    return common.Candidate(name, run, info)


def curl_candidate(name: str, url: str, cube: common.Cube, server_pid: int, *,
                   data_range: bool = False) -> common.Candidate:
    """`curl -s -o /dev/null URL`: one stream (CPU: RUSAGE_CHILDREN).

    data_range=False: the whole object, no Range header (the issue's baseline). True: the data
    bytes only, with a Range header, as ingest asks for them: the same server path as ingest.
    """
    first, last = cube.data_offset, cube.data_offset + cube.data_bytes - 1
    range_args = ["-r", f"{first}-{last}"] if data_range else []
    expect_status, expect_bytes = ("206", cube.data_bytes) if data_range else ("200", cube.object_bytes)

    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_children_s(), time.perf_counter()
        done = subprocess.run(CURL_ARGS + range_args + [url], capture_output=True, text=True)
        elapsed_s = time.perf_counter() - t0
        cpu_s, srv_s = common.cpu_children_s() - cpu0, common.cpu_pid_s(server_pid) - srv0
        status, _, size = done.stdout.partition(" ")
        if done.returncode != 0 or status != expect_status or int(size or 0) != expect_bytes:
            raise RuntimeError(f"{name} failed: exit {done.returncode}, HTTP {status}, {size} of "
                               f"{expect_bytes} bytes; {done.stderr.strip()[:300]}")
        return _sample(expect_bytes, elapsed_s, cpu_s, srv_s)

    shown = CURL_ARGS[:-1] + ["'%{http_code} %{size_download}'"] + range_args + [redact_url(url)]
    info = {"reader": "curl", "command": " ".join(shown),
            "bytes_counted": ("data bytes, one Range request" if data_range
                              else "whole object (header + data + padding), no Range header")}
    return common.Candidate(name, run, info)


def _sample(nbytes: int, elapsed_s: float, cpu_s: float, server_cpu_s: float) -> dict:
    gib = common.gib(nbytes)
    return {"bytes": nbytes, "elapsed_s": elapsed_s, "throughput_gib_s": gib / elapsed_s,
            "cpu_s": cpu_s, "cpu_s_per_gib": cpu_s / gib, "server_cpu_s_per_gib": server_cpu_s / gib}


def run(env: common.BenchEnv, args) -> dict:
    """Run the comparison on env's server; returns the results dict (without machine info)."""
    log = common.logger(args)
    cube = env.cube(args.size_mib * MiB)
    url = env.presign(cube)
    chunk_bytes = args.chunk_mib * MiB
    pid = env.server_pid
    candidates = [
        ingest_candidate("ingest_presigned", url, cube, pid, threads=args.threads, chunk_bytes=chunk_bytes,
                         method="presigned"),
        ingest_candidate("ingest_s3", cube.s3_uri, cube, pid, threads=args.threads, chunk_bytes=chunk_bytes,
                         method="s3"),
        curl_candidate("curl", url, cube, pid),
        curl_candidate("curl_range", url, cube, pid, data_range=True),
    ]
    if log:
        log(f"{NAME}: {common.gib(cube.object_bytes):.2f} GiB object, {args.repeats} interleaved rounds "
            f"+ {args.warmup} warm-up")
    results = common.run_interleaved(candidates, args.repeats, args.warmup, log=log)
    pairs = [(a, b) for b in ("curl", "curl_range") for a in ("ingest_presigned", "ingest_s3")]
    ratios = {f"{a}/{b}": common.paired_ratio(results, a, b, "throughput_gib_s") for a, b in pairs}
    cpu_ratios = {f"{a}/{b}": common.paired_ratio(results, a, b, "cpu_s_per_gib") for a, b in pairs}
    return {
        "config": {"size_mib": args.size_mib, "threads": args.threads, "chunk_bytes": chunk_bytes,
                   "repeats": args.repeats, "warmup": args.warmup, "cube": cube.describe(),
                   "server": "versitygw posix on 127.0.0.1", "server_keep_alive": env.keep_alive},
        "candidates": results,
        "ratios": ratios,
        "cpu_ratios": cpu_ratios,
        # The target is against plain curl; the curl_range ratios are for diagnosis.
        "targets": {key: TARGET_RATIO for key in ratios if key.endswith("/curl")},
        "notes": [
            "versitygw keeps connections alive only with --keep-alive; "
            + ("it was passed (LocalS3Server default)." if env.keep_alive else "it was NOT passed: "
               "every ingest range pays a new connection."),
            "Client and server share the same cores; the object is served from the page cache.",
            "curl_range asks for the data bytes with one Range header: versitygw serves a GET without "
            "Range far more cheaply (see server_cpu_s_per_gib), so ingest/curl_range compares clients "
            "on the same server path, ingest/curl the user-visible alternative.",
            "ratios are per round (interleaved A, B, C), throughput ingest / throughput curl; "
            "curl writes to /dev/null while ingest fills a fresh numpy array (page faults included).",
            "cpu_s_per_gib: ingest = RUSAGE_SELF of this process (all threads); curl = RUSAGE_CHILDREN; "
            "server_cpu_s_per_gib = versitygw's /proc CPU during that read.",
        ],
    }


def to_markdown(results: dict) -> str:
    """Tables of one run's JSON: per-reader throughput and CPU, then ratios against their target."""
    cfg = results["config"]
    rows = []
    for name, res in results["candidates"].items():
        s = res["summary"]
        rows.append([name, common.spread(s["throughput_gib_s"]), common.spread(s["elapsed_s"], "{:.3f}"),
                     common.spread(s["cpu_s_per_gib"]), common.spread(s["server_cpu_s_per_gib"])])
    out = [f"### Whole-object read, {common.gib(cfg['cube']['object_bytes']):.2f} GiB, threads={cfg['threads']}, "
           f"chunk={cfg['chunk_bytes'] // MiB} MiB, {cfg['repeats']} interleaved rounds "
           f"(keep-alive {'on' if cfg['server_keep_alive'] else 'OFF'})",
           "",
           common.markdown_table(["reader", "GiB/s median (min-max)", "elapsed s", "client CPU s/GiB",
                                  "server CPU s/GiB"], rows),
           ""]
    ratio_rows = []
    for key, r in results["ratios"].items():
        cpu = results["cpu_ratios"][key]
        target = results["targets"].get(key)
        if target is None:
            verdict, shown = "(diagnostic)", "-"
        else:
            verdict, shown = ("meets" if r["median"] >= target else "BELOW"), f">= {target:g}"
        ratio_rows.append([key, common.spread(r), shown, verdict, common.spread(cpu)])
    out.append(common.markdown_table(["ratio", "throughput ratio median (min-max)", "target", "",
                                      "client CPU/GiB ratio"], ratio_rows))
    return "\n".join(out)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    with common.BenchEnv(cache_dir=args.cache_dir) as env:
        results = run(env, args)
    path = common.write_results(NAME, results, args.results_dir)
    print(to_markdown(results))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
