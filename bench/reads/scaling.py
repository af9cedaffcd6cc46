"""Scaling on the acacia profile: threads 1..16 in one process (seed 001 Fig. 6) and ranks 1, 2, 4
via mpiexec (Fig. 7), reading seed 001's subcube in proportion.

Threads: ingest.read_subcube(strategy large, 16 MiB requests, T threads), interleaved over T,
plus the self-tuned read as a reference point. Ranks: `python -m ingest run` under mpiexec
(4 threads per rank, as seed 001 s7.6 ran its processes), interleaved over N, makespan from
each run's report. Findings: speedup over 1 thread / 1 rank, paired by round. Toxiproxy's cap
is per connection, so on a real link the curve flattens where the shared pipe fills; here it
flattens where the two cores (client, proxy, server) run out.

    python -m bench.reads.scaling [--size-mib 1024] [--threads-list 1,2,4,8,16] [--ranks-list 1,2,4]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ingest
from bench import common, mpirun
from bench.reads import shared as reads
from ingest.units import MiB

NAME = "scaling"
CHUNK_BYTES = 16 * MiB
RANK_THREADS = 4


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.scaling", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--profile", default="acacia", help="link profile (default acacia)")
    parser.add_argument("--strategy", default="large", help="strategy of the fixed reads (default large, as Fig. 6)")
    parser.add_argument("--threads-list", default="1,2,4,8,16", help="thread counts (default 1,2,4,8,16)")
    parser.add_argument("--ranks-list", default="1,2,4", help="MPI rank counts, empty to skip (default 1,2,4)")
    return parser


def threads_candidate(threads: int, url: str, region, want, strategy: str) -> common.Candidate:
    def run() -> dict:
        cpu0, t0 = common.cpu_self_s(), time.perf_counter()
        data = ingest.read_subcube(url, region, threads=threads, chunk_bytes=CHUNK_BYTES, strategy=strategy)
        elapsed_s = time.perf_counter() - t0
        cpu_s = common.cpu_self_s() - cpu0
        reads.check_same(data, want, f"threads={threads}")
        return {"elapsed_s": elapsed_s, "cpu_s": cpu_s}

    return common.Candidate(f"threads_{threads}", run, {
        "threads": threads, "call": f"ingest.read_subcube(url, box, strategy={strategy!r}, threads={threads}, "
                                    f"chunk_bytes=16 MiB)"})


def tuned_candidate(url: str, region, want) -> common.Candidate:
    info = {"call": "bench.reads.shared.tuned_read (probe included)"}

    def run() -> dict:
        got = reads.tuned_read(url, region, method="presigned")
        reads.check_same(got.data, want, "tuned")
        info["tuning"] = got.tuning
        return reads.tuned_sample(got)

    return common.Candidate("tuned", run, info)


def ranks_candidate(n: int, run_args: list[str], env: dict) -> common.Candidate:
    info = {"ranks": n, "command": mpirun.shown(mpirun.command(n, run_args))}

    def run() -> dict:
        got = mpirun.run_ingest(n, run_args, env)
        agg, settings = got["report"]["aggregate"], got["report"].get("settings") or {}
        info["settings"] = settings
        return {"makespan_s": agg["makespan_s"], "launch_wall_s": got["wall_s"],
                "bytes_needed": agg.get("bytes_needed"), "threads": settings.get("threads"),
                "peak_rss_max_bytes": max(p["peak_rss_bytes"] for p in got["peaks"])}

    return common.Candidate(f"ranks_{n}", run, info)


def _speedups(results: dict, names: list[str], metric: str) -> dict:
    base = names[0]
    return {f"{base}/{n}": common.paired_ratio(results, base, n, metric) for n in names[1:]}


def run(env: common.BenchEnv, args) -> dict:
    common.settle(args)
    log = common.logger(args)
    cube = env.cube(args.size_mib * MiB)
    region = reads.seed001_box(cube.shape)
    want = reads.expected(cube, region)
    url = env.presign(cube, profile=args.profile)
    layout = reads.layout_of(url, "presigned")
    thread_list = common.counts("--threads-list", args.threads_list, empty_ok=True)
    plans = {t: reads.plan_summary(layout, region, strategy=args.strategy, chunk_bytes=CHUNK_BYTES, threads=t)
             for t in thread_list}
    cands = [threads_candidate(t, url, region, want, args.strategy) for t in thread_list]
    cands.append(tuned_candidate(url, region, want))
    if log:
        log(f"{NAME} [{args.profile}]: threads {thread_list} on box {reads.region_text(region)} of {cube.shape}")
    threads = common.run_interleaved(cands, args.repeats, args.warmup, log=log)
    names = [f"threads_{t}" for t in thread_list]
    ratios = _speedups(threads, names, "elapsed_s")
    if names:
        ratios[f"{names[0]}/tuned"] = common.paired_ratio(threads, names[0], "tuned", "elapsed_s")
    ranks = {}
    rank_list = common.counts("--ranks-list", args.ranks_list, empty_ok=True)
    if rank_list and mpirun.mpiexec_available():
        run_args = ["--source", cube.s3_uri, "--method", "presigned", "--region", reads.region_text(region),
                    "--strategy", args.strategy, "--threads", str(RANK_THREADS), "--chunk-bytes", str(CHUNK_BYTES),
                    "--no-progress"]
        if args.profile != "loopback":
            run_args += ["--endpoint-url", env.link(args.profile).endpoint_url]
        rcands = [ranks_candidate(n, run_args, env.env()) for n in rank_list]
        if log:
            log(f"{NAME} [{args.profile}]: ranks {rank_list} via mpiexec, {RANK_THREADS} threads each")
        ranks = common.run_interleaved(rcands, args.repeats, args.warmup, log=log)
        ratios.update(_speedups(ranks, [f"ranks_{n}" for n in rank_list], "makespan_s"))
    return {
        "config": {"profile": args.profile, "size_mib": args.size_mib, "strategy": args.strategy,
                   "chunk_bytes": CHUNK_BYTES, "rank_threads": RANK_THREADS, "threads_list": thread_list,
                   "ranks_list": rank_list, "repeats": args.repeats, "warmup": args.warmup,
                   "cube": cube.describe(), "region": reads.region_text(region), "box_bytes": int(want.nbytes),
                   "link": env.link(args.profile).describe()},
        "plans": {str(t): p for t, p in plans.items()},
        "threads": threads,
        "ranks": ranks,
        "ratios": ratios,
        "targets": {},
        "notes": [
            "ratios are speedups: time with 1 thread (1 rank) / time with N, paired by interleaved round.",
            "ranks: makespan from the report of `python -m ingest run` (after a barrier; start-up excluded).",
            "Client ranks, Toxiproxy and versitygw share two cores: the curve shows where this machine "
            "saturates, not where a real per-connection-capped link would.",
        ],
    }


def to_markdown(results: dict) -> str:
    cfg = results["config"]
    plan = next(iter(results["plans"].values()), None)
    out = [f"### Scaling on `{cfg['profile']}`: box {cfg['region']} ({cfg['box_bytes'] / MiB:.0f} MiB) of "
           f"{tuple(cfg['cube']['shape'])}, strategy {cfg['strategy']}, 16 MiB requests"
           + (f" ({plan['requests']} requests, {plan['bytes_wire'] / MiB:.0f} MiB on the wire)" if plan else "")
           + f", {cfg['repeats']} interleaved rounds", ""]
    rows = []
    base = None
    for name, res in results["threads"].items():
        s = res["summary"]
        key = f"{base}/{name}" if base else None
        base = base or name
        r = results["ratios"].get(key) if key else None
        what = name
        if name == "tuned":
            what = f"tuned: {reads.choices(res['samples'])}"
            r = results["ratios"].get(f"{base}/tuned")
        mib_s = cfg["box_bytes"] / MiB / s["elapsed_s"]["median"]
        rows.append([what, common.spread(s["elapsed_s"], "{:.3f}"), f"{mib_s:.0f}",
                     common.spread(r) if r else "1"])
    out += [common.markdown_table(["threads (1 process)", "elapsed s median (min-max)", "box MiB/s",
                                   "speedup vs 1 thread"], rows), ""]
    if results["ranks"]:
        rows = []
        first = None
        for name, res in results["ranks"].items():
            s = res["summary"]
            first = first or name
            r = results["ratios"].get(f"{first}/{name}")
            rows.append([res["info"]["ranks"], common.spread(s["makespan_s"], "{:.3f}"),
                         f"{cfg['box_bytes'] / MiB / s['makespan_s']['median']:.0f}",
                         common.spread(r) if r else "1", common.spread(s["launch_wall_s"], "{:.1f}")])
        out += [f"Ranks via mpiexec, {cfg['rank_threads']} threads each:", "",
                common.markdown_table(["ranks", "makespan s median (min-max)", "box MiB/s", "speedup vs 1 rank",
                                       "mpiexec wall s"], rows)]
    return "\n".join(out).rstrip()


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
