"""Collectives on the emulated cluster: MPI's own (busy-polled) vs driver.quiet's (asleep between looks).

N ranks over M emulated nodes of one machine (configs/cluster.toml's links, as bench/cluster/makespan.py),
one `mpiexec` running bench/cluster/_collectives_rank.py: an allgather, a bcast and a gather of the small
objects a command's ranks send round (placement, plan, record), each as a sleeping barrier
followed by mpi4py's blocking collective ("mpi", what the driver did before) and as driver.quiet's
nonblocking one ("quiet"), interleaved, the first of each pair alternating. A step's time is the
slowest rank's. The first pair is recorded apart: it opens the ranks' connections.
Ratio per collective: mpi / quiet (target: none; the figure is why driver.quiet exists).

    python -m bench.cluster.collectives [--nodes 16] [--ranks 64] [--repeats 5]
Needs root (network namespaces) and scripts/setup.sh's tools, as bench/cluster/makespan.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.cluster import makespan as cluster_bench
from bench import common
from ingest.testbed.cluster.cluster import Cluster, unavailable_reason

NAME = "collectives"
RANK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_collectives_rank.py")
COLLECTIVES = ("allgather", "bcast", "gather")
VARIANTS = ("mpi", "quiet")


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m bench.cluster.collectives", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=cluster_bench.CONFIG, help="cluster TOML (default configs/cluster.toml)")
    parser.add_argument("--nodes", type=int, default=16, help="emulated nodes (default 16)")
    parser.add_argument("--ranks", type=int, default=64, help="ranks, round-robin over the nodes (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved pairs per collective (default 5)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="bound on the mpiexec (default 600)")
    parser.add_argument("--queue", default=None, choices=("fair", "fifo"), help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", default=None, help=f"where {NAME}.json goes (default bench/results)")
    parser.add_argument("--summarize", metavar="JSON", default=None, help=f"print the table of a {NAME}.json")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def step_order(repeats: int) -> list[str]:
    """A first pair of each collective, then `repeats` pairs, the variant that goes first alternating."""
    order = []
    for i in range(repeats + 1):
        pair = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
        order += [f"{c}:{v}" for c in COLLECTIVES for v in pair]
    return order


def tabulate(order: list[str], seconds: list[list[float]]) -> dict:
    """Per collective and variant: the first step and the later ones, each the slowest rank's
    seconds; and the mpi / quiet ratio of the later pairs, pair by pair."""
    slowest = [max(rank[i] for rank in seconds) for i in range(len(order))]
    cells = {}
    for collective in COLLECTIVES:
        for variant in VARIANTS:
            times = [s for step, s in zip(order, slowest) if step == f"{collective}:{variant}"]
            cells[f"{collective}:{variant}"] = {"first_s": times[0], "later_s": times[1:], **common.stats(times[1:])}
    ratios = {f"{c} mpi/quiet": common.ratio_of(cells[f"{c}:mpi"]["later_s"], cells[f"{c}:quiet"]["later_s"])
              for c in COLLECTIVES}
    return {"cells": cells, "ratios": ratios}


def run(args) -> dict:
    reason = unavailable_reason()
    if reason:
        raise SystemExit(reason)
    log = common.logger(args)
    order = step_order(args.repeats)
    with Cluster(cluster_bench._spec(args, args.nodes, args.ranks)) as cluster:
        cmd = cluster.mpiexec_command([sys.executable, RANK, ",".join(order)], args.ranks, map_by="node")
        if log:
            log(f"{NAME}: {args.ranks} ranks on {args.nodes} nodes, {len(order)} steps")
        proc = subprocess.run(cmd, env=cluster.launch_env(), capture_output=True, text=True,
                              timeout=args.timeout_s, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"{NAME}: mpiexec failed ({proc.returncode}): {proc.stderr[-1500:]}")
    line = [text for text in proc.stdout.splitlines() if text.startswith("{")][-1]
    got = json.loads(line)
    return {"nodes": args.nodes, "ranks": args.ranks, "repeats": args.repeats, "order": got["order"],
            "seconds_per_rank": got["seconds"], **tabulate(got["order"], got["seconds"])}


def to_markdown(results: dict) -> str:
    head = (f"### Collectives: {results['ranks']} ranks on {results['nodes']} emulated nodes, "
            f"{results['repeats']} pairs (the slowest rank's seconds)\n\n")
    rows = [[key.replace(":", " "), f"{cell['first_s']:.3f}", common.spread(cell, "{:.3f}")]
            for key, cell in results["cells"].items()]
    table = common.markdown_table(["collective", "first s", "later s, median (min-max)"], rows)
    return head + table + "\n\n" + common.ratios_table(results["ratios"], {})


def main(argv=None) -> int:
    return common.summarize_or_run(build_parser().parse_args(argv), NAME, run, to_markdown)


if __name__ == "__main__":
    sys.exit(main())
