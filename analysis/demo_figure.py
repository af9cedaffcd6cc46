"""The demo's figure, drawn from its report JSON files only (never from live runs).

    python analysis/demo_figure.py demo-out/*.json --out demo-out/demo.png

Makespan against ranks for direct ingest (one series per method: presigned, s3) and for the
staging baseline (stage + read, from the reports' `baseline` blocks). Each point is the median
of the repeats at that rank count with a min..max bar. The dotted line is staging's floor, the
copy alone (the median of the reports' `baseline.stage_s`, with the rate it implies): however
many ranks read the staged copy, staging cannot finish before its copy has. Reports of any
rank counts and repeats can be given; a report without a baseline adds no staging point.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # table.py beside us
from table import IngestError, load_reports, method_of  # noqa: E402

MiB = 1024 * 1024
STAGING = "staging: copy + read"
STYLE = {  # series -> (colour, marker, linestyle, x offset in ranks so the bars do not overlap)
    "direct presigned": ("tab:blue", "o", "-", -0.06),
    "direct s3": ("tab:green", "s", "-", 0.0),
    STAGING: ("tab:red", "^", "--", 0.06),
}


def demo_points(reports: list[dict]) -> tuple[dict[str, dict[int, list[float]]], list[float], int | None]:
    """(series -> ranks -> makespans, every stage_s seen, the cube's object size in bytes)."""
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    copies, size = [], None
    for report in reports:
        agg = report["aggregate"]
        if report.get("mode") == "staging":  # a `stage` report: its makespan is the read
            base = report.get("baseline") or {}
        else:
            points[f"direct {method_of(report)}"][agg["ranks"]].append(agg["makespan_s"])
            base = report.get("baseline") or {}
        if base.get("total_s") is not None:
            points[STAGING][base.get("read_ranks") or agg["ranks"]].append(base["total_s"])
        if base.get("stage_s") is not None:
            copies.append(base["stage_s"])
        size = size or (report.get("cube") or {}).get("object_bytes")
    return points, copies, size


def summary(points: dict[str, dict[int, list[float]]]) -> dict[str, dict[int, tuple[float, float, float]]]:
    """series -> ranks -> (median, min, max)."""
    return {label: {n: (statistics.median(v), min(v), max(v)) for n, v in sorted(by_n.items())}
            for label, by_n in points.items()}


def _headline(stats: dict) -> str:
    """'4 ranks: direct 0.45 s (presigned), staging 1.55 s: 3.4x' at the largest shared rank count."""
    staging = stats.get(STAGING, {})
    direct = {label: by_n for label, by_n in stats.items() if label != STAGING}
    shared = [n for n in staging if any(n in by_n for by_n in direct.values())]
    if not shared:
        return ""
    n = max(shared)
    label, best = min(((lab, by_n[n][0]) for lab, by_n in direct.items() if n in by_n), key=lambda x: x[1])
    return (f"{n} ranks: {label} {best:.2f} s vs staging {staging[n][0]:.2f} s "
            f"({staging[n][0] / best:.1f}x faster)")


def plot_demo(reports: list[dict], path: str, repeats_note: bool = True) -> str:
    points, copies, size = demo_points(reports)
    if not points:
        raise IngestError("no report has a makespan to draw")
    stats = summary(points)
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    ranks = sorted({n for by_n in stats.values() for n in by_n})
    for label in sorted(stats, key=lambda lab: list(STYLE).index(lab) if lab in STYLE else 99):
        colour, marker, line, shift = STYLE.get(label, (None, "o", "-", 0.0))
        xs = list(stats[label])
        med = [stats[label][n][0] for n in xs]
        low = [m - stats[label][n][1] for m, n in zip(med, xs)]
        high = [stats[label][n][2] - m for m, n in zip(med, xs)]
        counts = sorted({len(points[label][n]) for n in xs})
        shown = f"{label} (n={'/'.join(map(str, counts))})" if repeats_note else label
        ax.errorbar([x * 2 ** shift for x in xs], med, yerr=[low, high], color=colour, marker=marker,
                    linestyle=line, capsize=3, label=shown)
    if copies:
        floor = statistics.median(copies)
        rate = f", {size / floor / MiB:.0f} MiB/s" if size else ""
        ax.axhline(floor, color="tab:red", linestyle=":", linewidth=1.2,
                   label=f"staging's floor: the copy alone ({floor:.2f} s{rate})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(n) for n in ranks])
    ax.minorticks_off()
    ax.set_xlabel("ranks (concurrent readers)")
    ax.set_ylabel("makespan (s): first start to last stop")
    ax.set_ylim(bottom=0)
    cube = f"{size / MiB:.0f} MiB cube, " if size else ""
    title = f"{cube}local S3 on loopback: median of repeats, bars min..max"
    headline = _headline(stats)
    ax.set_title(f"{headline}\n{title}" if headline else title, fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The demo's makespan-vs-ranks figure from report JSON files.")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json")
    parser.add_argument("--out", required=True, metavar="PNG", help="the figure to write")
    args = parser.parse_args(argv)
    try:
        reports = [report for _, report in load_reports(args.reports)]
        print(plot_demo(reports, args.out))
        for label, by_n in summary(demo_points(reports)[0]).items():
            cells = ", ".join(f"{n}: {m:.3f} s [{lo:.3f}-{hi:.3f}]" for n, (m, lo, hi) in by_n.items())
            print(f"  {label:<22} {cells}")
    except IngestError as exc:  # names the file; a traceback would hide that
        print(f"demo_figure.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
