"""Subcube read: ingest (self-tuned) vs astropy's `fits.open(url, use_fsspec=True).section[box]`.

Same cube, same box (a thin spatial window through every channel, like seed 001's subcube),
same presigned URL, interleaved, on each link profile. astropy runs with fsspec's HTTP defaults
(5 MiB blocks, read-ahead cache) and with the best block size of a small sweep made first in
the same run. Every result is checked against the local file, value for value. The finding is
the per-round ratio of times astropy / ingest (target: >= 10 against astropy's defaults).

    python -m bench.reads.subcube [--size-mib 1024] [--profiles loopback,acacia] [--blocks-kib 64,256,1024]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ingest
from bench import common, links
from bench.reads import shared as reads
from ingest.units import KiB, MiB

NAME = "subcube"
TARGET_SPEEDUP = 10.0  # astropy defaults time / ingest time (issue 5)
FSSPEC_DEFAULT_BLOCK = 5 * MiB  # fsspec.implementations.http.DEFAULT_BLOCK_SIZE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.subcube", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    common.add_store_argument(parser)
    parser.add_argument("--profiles", default="loopback,acacia", help="link profiles (default loopback,acacia)")
    parser.add_argument("--blocks-kib", default="64,256,1024",
                        help="astropy/fsspec block sizes to sweep, KiB (fsspec's 5 MiB default runs in every round)")
    return parser


def _fsspec_counts(hdul) -> dict:
    """Requests and bytes fsspec's cache fetched for this file, when it keeps count."""
    try:
        cache = hdul._file._file.cache
        return {"requests": int(cache.miss_count), "wire_bytes": int(cache.total_requested_bytes)}
    except (AttributeError, TypeError):
        return {}


def astropy_candidate(name: str, url: str, region: tuple, want, block_bytes: int | None, server_pid: int,
                      warm: bool = True) -> common.Candidate:
    """astropy.io.fits over fsspec's HTTP filesystem; block_bytes None = fsspec's default."""
    from astropy.io import fits

    fsspec_kwargs = {} if block_bytes is None else {"block_size": block_bytes}

    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        with fits.open(url, use_fsspec=True, fsspec_kwargs=fsspec_kwargs) as hdul:
            data = hdul[0].section[region]
            counts = _fsspec_counts(hdul)
        elapsed_s = time.perf_counter() - t0
        cpu_s, srv_s = common.cpu_self_s() - cpu0, common.cpu_pid_s(server_pid) - srv0
        reads.check_same(data, want, name)
        return {"elapsed_s": elapsed_s, "cpu_s": cpu_s, "server_cpu_s": srv_s, **counts}

    shown = "{}" if block_bytes is None else f"{{'block_size': {block_bytes}}}"
    info = {"reader": f"astropy.io.fits.open(url, use_fsspec=True, fsspec_kwargs={shown}).section[box]",
            "block_bytes": block_bytes or FSSPEC_DEFAULT_BLOCK, "fsspec_default": block_bytes is None}
    return common.Candidate(name, run, info, warm=warm)


def ingest_tuned_candidate(name: str, url: str, region: tuple, want, server_pid: int) -> common.Candidate:
    info = {"reader": "bench.reads.shared.tuned_read: open, header, probe, ingest.core.tuning.choose, read (strategy auto)"}

    def run() -> dict:
        srv0, cpu0 = common.cpu_pid_s(server_pid), common.cpu_self_s()
        got = reads.tuned_read(url, region, method="presigned")
        cpu_s, srv_s = common.cpu_self_s() - cpu0, common.cpu_pid_s(server_pid) - srv0
        reads.check_same(got.data, want, name)
        info["tuning"] = got.tuning
        return {**reads.tuned_sample(got), "cpu_s": cpu_s, "server_cpu_s": srv_s}

    return common.Candidate(name, run, info)


def ingest_default_candidate(name: str, url: str, region: tuple, want, wire_bytes: int, requests: int,
                             server_pid: int) -> common.Candidate:
    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        data = ingest.read_subcube(url, region)
        elapsed_s = time.perf_counter() - t0
        cpu_s, srv_s = common.cpu_self_s() - cpu0, common.cpu_pid_s(server_pid) - srv0
        reads.check_same(data, want, name)
        return {"elapsed_s": elapsed_s, "cpu_s": cpu_s, "server_cpu_s": srv_s, "requests": requests,
                "wire_bytes": wire_bytes}

    return common.Candidate(name, run, {"reader": "ingest.read_subcube(url, box) with its defaults "
                                                  "(4 threads, 16 MiB, auto with the default cost model, no probe)"})


def run_profile(env: common.BenchEnv, args, profile: str, cube: common.Cube, log) -> dict:
    region = reads.thin_box(cube.shape)
    want = reads.expected(cube, region)
    url = env.presign(cube, profile=profile)
    layout = reads.layout_of(url, "presigned")
    default_plan = reads.plan_summary(layout, region, strategy="auto", chunk_bytes=16 * MiB, threads=4)
    pid = env.server_pid
    shaped = profile != "loopback"
    # The sweep: one round per non-default block size; the fastest becomes astropy_best.
    blocks = [int(b) * KiB for b in args.blocks_kib.split(",") if b.strip()]
    sweep_cands = [astropy_candidate(f"astropy_block_{b // KiB}KiB", url, region, want, b, pid) for b in blocks]
    if log:
        log(f"{NAME} [{profile}]: sweep of astropy block sizes {[c.name for c in sweep_cands]}")
    sweep = common.run_interleaved(sweep_cands, 1, 0, log=log) if sweep_cands else {}
    candidates = [
        ingest_tuned_candidate("ingest_tuned", url, region, want, pid),
        ingest_default_candidate("ingest_default", url, region, want, default_plan["bytes_wire"],
                                 default_plan["requests"], pid),
        # On a shaped link astropy's defaults take ~20 s a read: the sweep has warmed fsspec and
        # the server already, so it skips the warm-up round.
        astropy_candidate("astropy_default", url, region, want, None, pid, warm=not shaped),
    ]
    if sweep:
        best_name = min(sweep, key=lambda n: sweep[n]["summary"]["elapsed_s"]["median"])
        candidates.append(astropy_candidate("astropy_best", url, region, want, sweep[best_name]["info"]["block_bytes"],
                                            pid, warm=not shaped))
    if log:
        log(f"{NAME} [{profile}]: box {reads.region_text(region)} of {cube.shape}; {args.repeats} rounds "
            f"+ {args.warmup} warm-up")
    results = common.run_interleaved(candidates, args.repeats, args.warmup, log=log)
    # The best astropy: the sweep's winner or the default, whichever was faster in the rounds.
    astropys = [n for n in ("astropy_default", "astropy_best") if n in results]
    best = min(astropys, key=lambda n: results[n]["summary"]["elapsed_s"]["median"])
    best_block = results[best]["info"]["block_bytes"]
    ratios = {
        f"{profile}:astropy_default/ingest_tuned": common.paired_ratio(results, "astropy_default", "ingest_tuned", "elapsed_s"),
        f"{profile}:astropy_best/ingest_tuned": common.paired_ratio(results, best, "ingest_tuned", "elapsed_s"),
        f"{profile}:astropy_default/ingest_default": common.paired_ratio(results, "astropy_default", "ingest_default", "elapsed_s"),
        f"{profile}:ingest_default/ingest_tuned": common.paired_ratio(results, "ingest_default", "ingest_tuned", "elapsed_s"),
    }
    ratios[f"{profile}:astropy_default/ingest_tuned(no probe)"] = common.ratio_of(
        [s["elapsed_s"] for s in results["astropy_default"]["samples"]],
        [s["elapsed_noprobe_s"] for s in results["ingest_tuned"]["samples"]],
        numerator="astropy_default", denominator="ingest_tuned without its probe", metric="elapsed_s")
    targets = {f"{profile}:astropy_default/ingest_tuned": common.target(">=", TARGET_SPEEDUP)}
    return {"cube": cube.describe(), "link": env.link(profile).describe(), "region": reads.region_text(region),
            "box_bytes": int(want.nbytes), "sweep": sweep, "best_block_bytes": best_block,
            "candidates": results, "ratios": ratios, "targets": targets}


def run(env: common.BenchEnv, args) -> dict:
    common.settle(args)
    log = common.logger(args)
    profiles = links.parse_profiles(args.profiles)
    cube = env.cube(args.size_mib * MiB)
    per_profile = {p: run_profile(env, args, p, cube, log) for p in profiles}
    flat = {"ratios": {}, "targets": {}}
    for res in per_profile.values():
        for k in flat:
            flat[k].update(res[k])
    return {
        "config": {"size_mib": args.size_mib, "profiles": profiles, "repeats": args.repeats, "warmup": args.warmup,
                   "blocks_kib": args.blocks_kib, "geometry": "thin: all channels, centred window 1/16 of the side"},
        "profiles": per_profile,
        **flat,
        "notes": [
            "ratios are times astropy / ingest per interleaved round (> 1: ingest faster); the target is on "
            "astropy's defaults vs ingest self-tuned with its probe included.",
            "astropy's Section reads one contiguous run (a row of the window) at a time through fsspec's "
            "file cache; with the default 5 MiB read-ahead block each plane's window costs a fresh 5 MiB "
            "request, so astropy reads about the whole cube.",
            "astropy requests/wire bytes are fsspec's cache counters (misses, bytes requested).",
            "Every result (ingest and astropy) is compared with numpy on the local file: identical values.",
        ],
    }


def _row(name: str, res: dict) -> list:
    s = res["summary"]
    req = f"{s['requests']['median']:.0f}" if "requests" in s else "-"
    wire = f"{s['wire_bytes']['median'] / MiB:.1f}" if "wire_bytes" in s else "-"
    how = res["info"].get("reader", "")
    if "tuning" in res["info"]:
        how = "tuned: " + reads.choices(res["samples"])
    elif "block_bytes" in res["info"]:
        how = f"block {res['info']['block_bytes'] // KiB} KiB" + (" (fsspec default)" if res["info"]["fsspec_default"] else "")
    elif name == "ingest_default":
        how = "read_subcube defaults: 4 threads x 16 MiB, no probe"
    return [name, how, common.spread(s["elapsed_s"], "{:.3f}"), req, wire, common.spread(s["cpu_s"]),
            common.spread(s["server_cpu_s"]) if "server_cpu_s" in s else "-"]


def to_markdown(results: dict) -> str:
    out = [common.store_line(results)]
    cfg = results["config"]
    for profile, pres in results["profiles"].items():
        out += [f"### Subcube on `{profile}`: box {pres['region']} ({pres['box_bytes'] / MiB:.1f} MiB) of a "
                f"{common.gib(pres['cube']['object_bytes']):.2f} GiB cube {tuple(pres['cube']['shape'])}, "
                f"{cfg['repeats']} interleaved rounds", ""]
        rows = [_row(n, r) for n, r in pres["candidates"].items()]
        out += [common.markdown_table(["reader", "settings", "elapsed s median (min-max)", "requests", "wire MiB",
                                       "client CPU s", "server CPU s"], rows), ""]
        sweep = ", ".join(f"{r['info']['block_bytes'] // KiB} KiB: {r['summary']['elapsed_s']['median']:.2f} s"
                          for r in pres["sweep"].values())
        out += [f"astropy block-size sweep (1 round each): {sweep}; best in the rounds: "
                f"{pres['best_block_bytes'] // KiB} KiB", ""]
        rows = []
        for key, r in pres["ratios"].items():
            tgt = pres["targets"].get(key)
            rows.append([key.split(":", 1)[1], common.spread(r), common.target_text(tgt),
                         common.verdict(r, tgt) if tgt else "(diagnostic)"])
        out += [common.markdown_table(["time ratio", "median (min-max)", "target", "verdict"], rows), ""]
    return "\n".join(out).rstrip()


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
