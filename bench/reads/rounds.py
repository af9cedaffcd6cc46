"""What a probe round measures against what the job's read gets, by the round's size (issue 24).

Rank 0 measures what the ranks on a node share in a round (ingest.driver.probe_rounds): every
rank reads its own range at once, on the job's streams, within a few per cent of the job's
predicted time. On loopback that is tens of ms, and the rate such a round gets depends on how many
bytes each stream moves. Each launch here is one `mpiexec -n RANKS` of bench/reads/_rounds_once.py:
rounds of 2, 4 and 8 MiB a stream, and of the job's whole share (the cube's data over the
ranks), interleaved over the repeats.

    python -m bench.reads.rounds [--ranks 2,4] [--streams 2,4] [--stream-mib 2,4,8] [--repeats 5]

Printed, per ranks x streams: each size's rate together over its steady window (core.rounds),
as measured and less its requests' time (the requests that fell inside the window at the rate
the round's own small requests got: SharedRound.bytes_per_s, which the model uses), each as a
median over the whole share's; and how long every stream flowed at once. No target: it is the
measurement behind how the model reads a round (BENCHMARKS.md, "Rounds").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common, mpirun
from ingest.units import MiB

NAME = "rounds"
SIZES = {"size_mib": (512, 64), "repeats": (5, 1)}  # full, --quick
ROUNDS_ONCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rounds_once.py")
WHOLE_SHARE = 0  # a size of 0 MiB a stream: the job's whole share


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.rounds", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, size_mib=SIZES["size_mib"][0])
    parser.add_argument("--ranks", default="2,4", help="ranks per launch, comma-separated (default 2,4)")
    parser.add_argument("--streams", default="2,4", help="streams per rank (default 2,4)")
    parser.add_argument("--stream-mib", default="2,4,8", help="MiB a stream moves in a round (default 2,4,8)")
    return parser


def _launch(env, cube, n_ranks: int, args) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="ingest-bench-rounds-") as workdir:
        out = os.path.join(workdir, "rounds.json")
        cmd = mpirun.python_command(n_ranks, [
            ROUNDS_ONCE, "--source", cube.s3_uri, "--data-offset", str(cube.data_offset),
            "--data-bytes", str(cube.data_bytes), "--streams", args.streams,
            "--stream-mib", f"{WHOLE_SHARE},{args.stream_mib}", "--repeats", str(args.repeats), "--out", out])
        done = subprocess.run(cmd, env={**env.env(), **mpirun.MPI_ENV}, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
        with open(out) as f:
            return json.load(f)


def _rate(rounds: list[dict]) -> dict:
    rates = [r["bytes_per_s"] for r in rounds]
    return {"median_bytes_per_s": statistics.median(rates), "min_bytes_per_s": min(rates),
            "max_bytes_per_s": max(rates), "n": len(rates),
            "median_window_bytes_per_s": statistics.median(r["window_bytes_per_s"] for r in rounds)}


def summarize(rounds: list[dict]) -> list[dict]:
    """Per (ranks, streams, size): the rounds' rate, and its median over the whole share's."""
    rows = []
    for key in sorted({(r["ranks"], r["streams"]) for r in rounds}):
        mine = [r for r in rounds if (r["ranks"], r["streams"]) == key]
        by_size = {size: [r for r in mine if r["stream_mib"] == size] for size in {r["stream_mib"] for r in mine}}
        whole = _rate(by_size[WHOLE_SHARE])
        for size in sorted(by_size, key=lambda m: (m == WHOLE_SHARE, m)):
            rate = _rate(by_size[size])
            rows.append({"ranks": key[0], "streams": key[1], "stream_mib": size, **rate,
                         "over_whole_share": rate["median_bytes_per_s"] / whole["median_bytes_per_s"],
                         "window_over_whole_share": rate["median_window_bytes_per_s"] / whole["median_bytes_per_s"],
                         "overlap_s": statistics.median(r["overlap_s"] for r in by_size[size]),
                         "steady_s": statistics.median(r["steady_s"] for r in by_size[size])})
    return rows


def run(env, args) -> dict:
    cube = env.cube(args.size_mib * MiB)
    rounds = []
    for n_ranks in common.counts("--ranks", args.ranks):
        rounds += _launch(env, cube, n_ranks, args)
    return {"cube": cube.describe(),
            "config": {"ranks": args.ranks, "streams": args.streams, "stream_mib": args.stream_mib,
                       "repeats": args.repeats, "method": "s3"},
            "rounds": rounds, "summary": summarize(rounds)}


def to_markdown(results: dict) -> str:
    c = results["config"]
    lines = [f"### Probe rounds by size, {c['method']} on loopback, {c['repeats']} interleaved repeats", "",
             "Every rank of the launch reads at once on its streams; the rate is the ranks' together over the "
             "round's steady window (core.rounds), less the time of the requests inside it at the rate the round's "
             "small requests got, as the model reads it. The whole share is the cube's data over the ranks, as the "
             "job reads it.", ""]
    rows = [[r["ranks"], r["streams"], "whole share" if r["stream_mib"] == WHOLE_SHARE else r["stream_mib"],
             common.spread({"median": r["median_bytes_per_s"], "min": r["min_bytes_per_s"],
                            "max": r["max_bytes_per_s"]}, "{:.0f}", 1e6),
             f"{r.get('window_over_whole_share', r['over_whole_share']):.2f}", f"{r['over_whole_share']:.2f}",
             f"{r['steady_s'] * 1e3:.0f}", f"{r['overlap_s'] * 1e3:.0f}"]
            for r in results["summary"]]
    lines.append(common.markdown_table(["ranks", "streams", "MiB a stream", "MB/s together, less its requests (min-max)",
                                        "window over the whole share's", "less its requests, over the whole share's",
                                        "steady ms", "all flowing at once, ms"], rows))
    lines += ["", "Window: the round's bytes over its steady window as measured. Less its requests: the same, the "
                  "window's requests taken out (SharedRound.bytes_per_s). All flowing at once: the first stream's "
                  "last byte less the last stream's first body byte (core.rounds.overlap_s), median; negative where "
                  "streams ran one after another."]
    return "\n".join(lines)


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, **SIZES)


if __name__ == "__main__":
    raise SystemExit(main())
