"""Whole-object read: ingest (presigned HTTP and S3; self-tuned, and fixed 4 x 16 MiB) vs one `curl` stream.

Same object, same presigned URL, same run, interleaved, on each link profile (loopback: the
server directly; acacia: Toxiproxy with ~600 Mbit/s PER CONNECTION and ~1 ms latency, where
parallel ranges should beat one stream). The finding is the per-round ratio of throughputs
ingest / curl (target >= 1.0), with the tuned read's probe included in its time (and, for
diagnosis, without it), plus CPU seconds per GiB of each reader and of the server while it
served that reader (the issue's "CPU s/GB vs curl's"). A second
curl asks for the data bytes with a Range header (`curl_range`): versitygw serves a GET
without Range by sendfile but a ranged GET by pread + 32 KiB socket writes (strace -c), so
ingest / curl_range separates the client from the server's range path.

    python -m bench.reads.whole_object [--size-mib 1024] [--acacia-size-mib 256] [--profiles loopback,acacia]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a file (python bench/reads/whole_object.py): make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np

import ingest
from bench import common, links
from bench.reads import shared as reads
from ingest import buffers
from ingest.redact import redact_url
from ingest.testbed.synth import voxel_values
from ingest.units import MiB

NAME = "whole_object"
TARGET_RATIO = 1.0  # ingest throughput / curl throughput (issue 5)
CURL_ARGS = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}"]
SPOT_VOXELS = 4096  # values checked at each end of every ingest read (outside the timing)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.whole_object", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    common.add_store_argument(parser)
    parser.add_argument("--threads", type=int, default=4, help="fixed-settings ingest: worker threads (default 4)")
    parser.add_argument("--chunk-mib", type=int, default=16, help="fixed-settings ingest: request size in MiB (default 16)")
    parser.add_argument("--profiles", default="loopback,acacia",
                        help="link profiles to run on (default loopback,acacia; also wan)")
    parser.add_argument("--acacia-size-mib", type=int, default=None,
                        help="object size on the shaped profiles (acacia, wan), MiB (default 256, --quick 32): "
                             "one curl stream there runs at ~70 MiB/s")
    return parser


SIZES = {"acacia_size_mib": (256, 32)}


def _check_cube(data: np.ndarray, cube: common.Cube) -> None:
    """Spot-check the first and last voxels against synth's formula: a fast read of wrong bytes is no result."""
    flat = data.reshape(-1)
    n = flat.size
    k = min(SPOT_VOXELS, n)
    for idx in (np.arange(k), np.arange(n - k, n)):
        if not np.array_equal(flat[idx], voxel_values(idx, cube.bitpix)):
            raise AssertionError(f"{cube.key}: ingest returned wrong voxel values near index {idx[0]}")


def ingest_candidate(name: str, source: str, cube: common.Cube, server_pid: int, *,
                     threads: int, chunk_bytes: int, method: str, **transport_options) -> common.Candidate:
    """ingest.read_subcube of the whole cube, timed in this process (CPU: RUSAGE_SELF, all threads)."""

    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        data = ingest.read_subcube(source, (), threads=threads, chunk_bytes=chunk_bytes, method=method,
                                   **transport_options)
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


def tuned_candidate(name: str, source: str, cube: common.Cube, server_pid: int, *, method: str,
                    **transport_options) -> common.Candidate:
    """The self-tuned read (header, probe, choose, read: bench.reads.shared.tuned_read), probe included;
    the sample also carries the time and throughput without the probe, and what was chosen."""
    info = {"reader": "bench.reads.shared.tuned_read (strategy auto, probe, ingest.core.tuning.choose)", "method": method,
            "region": "()", "source": redact_url(source) if method == "presigned" else source,
            "bytes_counted": "data bytes returned; elapsed_s includes open, header and probe"}

    def run() -> dict:
        srv0, cpu0 = common.cpu_pid_s(server_pid), common.cpu_self_s()
        got = reads.tuned_read(source, (), method=method, **transport_options)
        cpu_s, srv_s = common.cpu_self_s() - cpu0, common.cpu_pid_s(server_pid) - srv0
        nbytes = got.data.nbytes
        _check_cube(got.data, cube)
        info["tuning"] = got.tuning  # the last round's choice, for the record
        sample = {**reads.tuned_sample(got), **_sample(nbytes, got.elapsed_s, cpu_s, srv_s)}
        sample["throughput_noprobe_gib_s"] = common.gib(nbytes) / got.elapsed_without_probe_s
        return sample

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


def touch_candidate(name: str, cube: common.Cube, server_pid: int) -> common.Candidate:
    """No I/O: allocate and fill a fresh array of the data's size as ingest allocates its outputs
    (ingest.buffers), the floor of any reader that returns a new array (the kernel zeroes every
    page it hands out)."""

    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        data = buffers.empty(cube.data_bytes, np.uint8)
        data.fill(1)
        elapsed_s = time.perf_counter() - t0
        cpu_s, srv_s = common.cpu_self_s() - cpu0, common.cpu_pid_s(server_pid) - srv0
        del data
        return _sample(cube.data_bytes, elapsed_s, cpu_s, srv_s)

    return common.Candidate(name, run, {"reader": "ingest.buffers.empty(data_bytes).fill(1), no I/O (diagnostic)"})


def _sample(nbytes: int, elapsed_s: float, cpu_s: float, server_cpu_s: float) -> dict:
    gib = common.gib(nbytes)
    return {"bytes": nbytes, "elapsed_s": elapsed_s, "throughput_gib_s": gib / elapsed_s,
            "cpu_s": cpu_s, "cpu_s_per_gib": cpu_s / gib, "server_cpu_s_per_gib": server_cpu_s / gib}


INGESTS = ("ingest_presigned_tuned", "ingest_s3_tuned", "ingest_presigned", "ingest_s3")
TARGETED = ("ingest_presigned_tuned", "ingest_s3_tuned")  # the issue: "http and s3 transports, tuned"


def run_profile(env: common.BenchEnv, args, profile: str, log) -> dict:
    """All readers of one cube over one link profile, interleaved; ratios keyed 'PROFILE:a/b'."""
    size_mib = args.size_mib if profile == "loopback" else min(args.size_mib, args.acacia_size_mib)
    cube = env.cube(size_mib * MiB)
    url, _ = env.source(cube, "presigned", profile)
    s3_uri, s3_options = env.source(cube, "s3", profile)
    chunk_bytes = args.chunk_mib * MiB
    pid = env.server_pid
    fixed = dict(threads=args.threads, chunk_bytes=chunk_bytes)
    candidates = [
        tuned_candidate("ingest_presigned_tuned", url, cube, pid, method="presigned"),
        tuned_candidate("ingest_s3_tuned", s3_uri, cube, pid, method="s3", **s3_options),
        ingest_candidate("ingest_presigned", url, cube, pid, method="presigned", **fixed),
        ingest_candidate("ingest_s3", s3_uri, cube, pid, method="s3", **fixed, **s3_options),
        curl_candidate("curl", url, cube, pid),
    ]
    curls = ["curl"]
    if profile == "loopback":  # on a shaped link the server's range path is not what limits
        candidates.append(curl_candidate("curl_range", url, cube, pid, data_range=True))
        candidates.append(touch_candidate("numpy_touch", cube, pid))
        curls.append("curl_range")
    if log:
        log(f"{NAME} [{profile}]: {common.gib(cube.object_bytes):.2f} GiB object, {args.repeats} interleaved "
            f"rounds + {args.warmup} warm-up")
    results = common.run_interleaved(candidates, args.repeats, args.warmup, log=log)
    ratios, cpu_ratios, targets = {}, {}, {}
    for b in curls:
        for a in INGESTS:
            key = f"{profile}:{a}/{b}"
            ratios[key] = common.paired_ratio(results, a, b, "throughput_gib_s")
            cpu_ratios[key] = common.paired_ratio(results, a, b, "cpu_s_per_gib")
            if b == "curl" and a in TARGETED:
                targets[key] = common.target(">=", TARGET_RATIO)
        for a in TARGETED:  # diagnosis: what the probe costs
            ratios[f"{profile}:{a}(no probe)/{b}"] = common.ratio_of(
                [s["throughput_noprobe_gib_s"] for s in results[a]["samples"]],
                [s["throughput_gib_s"] for s in results[b]["samples"]],
                numerator=f"{a} without its probe", denominator=b, metric="throughput_gib_s")
    return {"cube": cube.describe(), "link": env.link(profile).describe(), "candidates": results,
            "ratios": ratios, "cpu_ratios": cpu_ratios, "targets": targets}


def run(env: common.BenchEnv, args) -> dict:
    """Run the comparison on every profile; returns the results dict (without machine info)."""
    common.settle(args, **SIZES)
    log = common.logger(args)
    profiles = links.parse_profiles(args.profiles)
    per_profile = {p: run_profile(env, args, p, log) for p in profiles}
    flat = {k: {} for k in ("ratios", "cpu_ratios", "targets")}
    for res in per_profile.values():
        for k in flat:
            flat[k].update(res[k])
    return {
        "config": {"size_mib": args.size_mib, "acacia_size_mib": args.acacia_size_mib, "profiles": profiles,
                   "threads": args.threads, "chunk_bytes": args.chunk_mib * MiB,
                   "repeats": args.repeats, "warmup": args.warmup,
                   "server": env.describe_store()["server"], "server_keep_alive": env.keep_alive},
        "profiles": per_profile,
        **flat,
        "notes": [
            "Targets (>= 1.0) are on the self-tuned reads (probe included in their time); the fixed "
            "4 threads x 16 MiB reads and the '(no probe)' ratios are for diagnosis.",
            "Toxiproxy's bandwidth cap applies per connection: on acacia N parallel ranges get N x "
            "~75 MB/s until the two cores (client, proxy and server share them) run out.",
            ("radosgw keeps connections alive." if env.store == "ceph" else
             "versitygw keeps connections alive only with --keep-alive; "
             + ("it was passed (LocalS3Server default)." if env.keep_alive else "it was NOT passed: "
                "every ingest range pays a new connection.")),
            "Client and server share the same cores; the object is served from the page cache.",
            "curl_range asks for the data bytes with one Range header: versitygw serves a GET without "
            "Range far more cheaply (see server_cpu_s_per_gib), so ingest/curl_range compares clients "
            "on the same server path, ingest/curl the user-visible alternative.",
            "ratios are per round (interleaved A, B, C), throughput ingest / throughput curl; "
            "curl writes to /dev/null while ingest fills a fresh numpy array (page faults included).",
            "cpu_s_per_gib: ingest = RUSAGE_SELF of this process (all threads); curl = RUSAGE_CHILDREN; "
            f"server_cpu_s_per_gib = {env.describe_store()['server_cpu']}'s /proc CPU during that read.",
            "numpy_touch (loopback, diagnostic): allocating and filling a fresh array of the data's size, "
            "no I/O: the part of ingest's client CPU that any reader returning a new array pays.",
        ],
    }


def _chosen(res: dict) -> str:
    if "tuning" in res["info"]:
        return "tuned: " + reads.choices(res["samples"])
    if "threads" in res["info"]:
        return f"{res['info']['threads']} thr x {res['info']['chunk_bytes'] // MiB} MiB"
    return "-"


def to_markdown(results: dict) -> str:
    """Tables of one run's JSON: per profile, per-reader throughput and CPU, then ratios against targets."""
    cfg = results["config"]
    out = [common.store_line(results)]
    for profile, pres in results["profiles"].items():
        rows = []
        for name, res in pres["candidates"].items():
            s = res["summary"]
            rows.append([name, _chosen(res), common.spread(s["throughput_gib_s"]),
                         common.spread(s["elapsed_s"], "{:.3f}"), common.spread(s["cpu_s_per_gib"]),
                         common.spread(s["server_cpu_s_per_gib"])])
        out += [f"### Whole-object read on `{profile}`, {common.gib(pres['cube']['object_bytes']):.2f} GiB object, "
                f"{cfg['repeats']} interleaved rounds (keep-alive {'on' if cfg['server_keep_alive'] else 'OFF'})",
                "",
                common.markdown_table(["reader", "settings", "GiB/s median (min-max)", "elapsed s",
                                       "client CPU s/GiB", "server CPU s/GiB"], rows),
                ""]
        ratio_rows = []
        for key, r in pres["ratios"].items():
            cpu = pres["cpu_ratios"].get(key)
            tgt = pres["targets"].get(key)
            ratio_rows.append([key.split(":", 1)[1], common.spread(r), common.target_text(tgt),
                               common.verdict(r, tgt) if tgt else "(diagnostic)", common.spread(cpu) if cpu else "-"])
        out += [common.markdown_table(["ratio", "throughput ratio median (min-max)", "target", "verdict",
                                       "client CPU/GiB ratio (ingest/curl)"], ratio_rows), ""]
    out += [cpu_table(results)]
    return "\n".join(out).rstrip()


def cpu_table(results: dict) -> str:
    """CPU seconds per GiB of each ingest reader vs curl's, per profile (client; server CPU beside it)."""
    rows = []
    for profile, pres in results["profiles"].items():
        cands = pres["candidates"]
        curl = cands["curl"]["summary"]
        for name in INGESTS:
            s = cands[name]["summary"]
            rows.append([profile, name, f"{s['cpu_s_per_gib']['median']:.2f}", f"{curl['cpu_s_per_gib']['median']:.2f}",
                         common.spread(pres["cpu_ratios"][f"{profile}:{name}/curl"]),
                         f"{s['server_cpu_s_per_gib']['median']:.2f} / {curl['server_cpu_s_per_gib']['median']:.2f}"])
    return ("#### CPU seconds per GiB: ingest vs curl (same object, same rounds)\n\n"
            + common.markdown_table(["profile", "reader", "ingest client CPU s/GiB", "curl client CPU s/GiB",
                                     "ratio ingest/curl median (min-max)", "server CPU s/GiB ingest / curl"], rows))


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, **SIZES)


if __name__ == "__main__":
    sys.exit(main())
