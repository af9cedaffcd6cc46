"""Figures drawn from ingest report JSON files only (never from live runs).

    python analysis/plot_report.py runs/*.json --out figures/ [--log-y]

Per report (file stem NAME):
  NAME_elapsed.png     elapsed seconds per rank, makespan as a line (staging total and
                       speedup in the title when the report carries a baseline)
  NAME_throughput.png  MiB/s per rank, with the mean
For all reports together:
  makespan_vs_ranks.png  makespan against rank count, one line per method (direct presigned,
                       direct s3, staging read) plus the staging total (stage + read), the
                       comparison of seed 001 Figs 3 and 7. Repeated runs of one method and rank
                       count are drawn as their mean with a min..max bar.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # table.py beside us
from table import IngestError, load_reports, series_label  # noqa: E402

MiB = 1024 * 1024
STAGING_TOTAL = "staging: stage + read"


def _unique_stems(paths: list[str]) -> list[str]:
    """File stems, made unique (runs/n4/report.json and runs/n8/report.json both say 'report')."""
    stems, seen = [], defaultdict(int)
    for path in paths:
        stem = os.path.splitext(os.path.basename(path))[0]
        seen[stem] += 1
        stems.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return stems


def _title(report: dict) -> str:
    agg = report["aggregate"]
    title = f"{series_label(report)}, {agg['ranks']} ranks, makespan {agg['makespan_s']:.2f} s"
    base = report.get("baseline") or {}
    if report.get("mode") == "direct" and base.get("total_s") is not None:
        title += f"\nstaging total {base['total_s']:.2f} s, speedup {report.get('speedup') or 0:.2f}x"
    return title


def plot_elapsed(report: dict, path: str) -> str:
    ranks = report["ranks"]
    agg = report["aggregate"]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.25 * len(ranks)), 4.0))
    slowest = agg["slowest_rank"]["rank"]
    colours = ["tab:red" if r["rank"] == slowest else "tab:blue" for r in ranks]
    ax.bar([r["rank"] for r in ranks], [r["elapsed_s"] for r in ranks], color=colours)
    ax.axhline(agg["makespan_s"], color="black", linestyle="--",
               label=f"makespan {agg['makespan_s']:.2f} s (earliest start to latest stop)")
    # The staging total is left to makespan_vs_ranks.png: at seed 001's scale it would flatten
    # these bars to nothing; the title carries it instead.
    ax.set_ylim(0, agg["makespan_s"] * 1.25 or 1.0)  # room above the line for the legend
    ax.set_xlabel("rank (red: slowest)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # ranks are whole numbers
    ax.set_ylabel("elapsed (s)")
    ax.set_title(_title(report))
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_throughput(report: dict, path: str) -> str:
    ranks = report["ranks"]
    rates = [(r.get("throughput_bytes_per_s") or 0.0) / MiB for r in ranks]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.25 * len(ranks)), 4.0))
    ax.bar([r["rank"] for r in ranks], rates, color="tab:green")
    if rates:
        mean = sum(rates) / len(rates)
        ax.axhline(mean, color="black", linestyle="--", label=f"mean {mean:.1f} MiB/s per rank")
        ax.set_ylim(0, max(rates) * 1.25 or 1.0)
        ax.legend(loc="upper left", fontsize="small")
    ax.set_xlabel("rank")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("throughput (MiB/s of needed bytes)")
    ax.set_title(_title(report))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def makespan_points(reports: list[dict]) -> dict[str, dict[int, list[float]]]:
    """series label -> rank count -> makespans (s); staging totals become their own series."""
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for report in reports:
        agg = report["aggregate"]
        points[series_label(report)][agg["ranks"]].append(agg["makespan_s"])
        base = report.get("baseline")
        if base and base.get("total_s") is not None:
            # Plotted at the rank count that read the staged copy (a --baseline report may
            # come from another rank count than the direct run carrying it).
            points[STAGING_TOTAL][base.get("read_ranks") or agg["ranks"]].append(base["total_s"])
    return points


def plot_makespan_vs_ranks(reports: list[dict], path: str, log_y: bool = False) -> str:
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    for label, by_ranks in sorted(makespan_points(reports).items()):
        xs = sorted(by_ranks)
        means = [sum(by_ranks[x]) / len(by_ranks[x]) for x in xs]
        low = [m - min(by_ranks[x]) for m, x in zip(means, xs)]
        high = [max(by_ranks[x]) - m for m, x in zip(means, xs)]
        style = {"linestyle": "--"} if label.startswith("staging") else {}
        ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=label, **style)
    ax.set_xlabel("ranks (concurrent readers)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("makespan (s)")
    if log_y:
        ax.set_yscale("log")
    ax.set_title("ingest time vs ranks: direct object store vs staging")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_all(paths: list[str], out_dir: str, log_y: bool = False) -> list[str]:
    """Every figure for the given report files; returns the PNG paths written."""
    loaded = load_reports(paths)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for stem, (_, report) in zip(_unique_stems(paths), loaded):
        written.append(plot_elapsed(report, os.path.join(out_dir, f"{stem}_elapsed.png")))
        written.append(plot_throughput(report, os.path.join(out_dir, f"{stem}_throughput.png")))
    reports = [report for _, report in loaded]
    written.append(plot_makespan_vs_ranks(reports, os.path.join(out_dir, "makespan_vs_ranks.png"), log_y))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="PNG figures from ingest report JSON files.")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files")
    parser.add_argument("--log-y", action="store_true",
                        help="log time axis (staging totals can dwarf read times, seed 001 s4)")
    args = parser.parse_args(argv)
    try:
        written = plot_all(args.reports, args.out, args.log_y)
    except IngestError as exc:  # names the file; a traceback would hide that
        print(f"plot_report.py: error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
