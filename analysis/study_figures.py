"""Seed 001's figures from a study's rows (DIR/study.sqlite, never live runs).

    python analysis/study_figures.py DIR [--out DIR/figures]

`python -m ingest study-report DIR` loads this file and calls draw_all. Each fig* function takes
the rows (ingest.study.db.load) and an output directory and returns (paths written, series
labels drawn); a figure with no measured point writes nothing and returns ([], []). Which rows
make which series, and their medians, come from ingest.study.summary: this file only draws.

  fig1_staging_read.png          Fig. 1: read from the staged copy vs processes, per staging tool
  fig2_s3_api.png                Fig. 2: S3 API ingest vs processes
  fig3_staging_vs_s3.png         Fig. 3: staging total (fastest tool: copy + read) vs S3 API
  fig6_threads.png               Fig. 6: ingest time vs threads, one process
  fig7_staging_vs_presigned.png  Fig. 7: staging total (fastest tool) vs presigned URL
Every point is the median of the ok repeats with a min..max bar. A study on the emulated cluster
(meta "cluster") also draws each series' physical limit as a dotted line, each point labelled with
its binding pipe (summary.limit_lines, from ingest/testbed/cluster/limits.py).
"""
from __future__ import annotations

import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes
import matplotlib.pyplot as plt  # noqa: E402

try:
    from ingest.study import db, summary
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from ingest.study import db, summary

FILES = {"fig1": "fig1_staging_read.png", "fig2": "fig2_s3_api.png", "fig3": "fig3_staging_vs_s3.png",
         "fig6": "fig6_threads.png", "fig7": "fig7_staging_vs_presigned.png"}
XLABELS = {"fig6": "threads per rank (one process)"}
# Seed 001's staging total (9771 s) dwarfs every read time; past this max/min ratio of the
# drawn medians a linear axis flattens the read series to a line on zero.
LOG_Y_RATIO = 30.0


def _draw(fig_id: str, series: list, out_dir: str, limits: list | None = None) -> tuple[list[str], list[str]]:
    drawn = [s for s in series if s.has_data()]
    path = os.path.join(out_dir, FILES[fig_id])
    if not drawn:
        if os.path.exists(path):  # from an earlier render: STUDY.md now says why it is absent
            os.remove(path)
        return [], []
    number, what = summary.FIGURES[fig_id]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    medians, xticks = [], set()
    for s in drawn:
        xs = [x for x, p in sorted(s.points.items()) if p.value]
        mids = [s.points[x].value.median for x in xs]
        low = [m - s.points[x].value.low for m, x in zip(mids, xs)]
        high = [s.points[x].value.high - m for m, x in zip(mids, xs)]
        style = {"linestyle": "--"} if s.kind == "staging" else {}
        ax.errorbar(xs, mids, yerr=[low, high], marker="o", capsize=3, label=s.label, **style)
        for x, note in s.notes.items():  # which tool was fastest at this p, when it changes with p
            ax.annotate(note, (x, s.points[x].value.median), textcoords="offset points", xytext=(4, 6),
                        fontsize="x-small")
        medians += mids
        xticks.update(xs)
    for line, dash in zip(limits or [], (":", "-.", (0, (1, 4)))):
        xs = sorted(line.seconds)
        if not xs:
            continue
        ys = [line.seconds[x] for x in xs]
        ax.plot(xs, ys, linestyle=dash, color="black", alpha=0.7, label=line.label)
        for x, y in zip(xs, ys):
            ax.annotate(line.binding[x], (x, y), textcoords="offset points", xytext=(3, -10), fontsize="xx-small")
        medians += ys
    ax.set_xticks(sorted(xticks))  # the measured counts only: 3 threads means nothing here
    ax.set_xlabel(XLABELS.get(fig_id, "processes (MPI ranks)"))
    ax.set_ylabel("time (s), median of repeats, bar: min..max")
    if min(medians) > 0 and max(medians) / min(medians) > LOG_Y_RATIO:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_title(f"seed 001 {number}: {what}", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path], [s.label for s in drawn]


def fig1_staging_read(rows: list[dict], out_dir: str, meta: dict | None = None) -> tuple[list[str], list[str]]:
    return _draw("fig1", summary.figure_series("fig1", rows), out_dir, summary.limit_lines("fig1", rows, meta))


def fig2_s3_api(rows: list[dict], out_dir: str, meta: dict | None = None) -> tuple[list[str], list[str]]:
    return _draw("fig2", summary.figure_series("fig2", rows), out_dir, summary.limit_lines("fig2", rows, meta))


def fig3_staging_vs_s3(rows: list[dict], out_dir: str, meta: dict | None = None) -> tuple[list[str], list[str]]:
    return _draw("fig3", summary.figure_series("fig3", rows), out_dir, summary.limit_lines("fig3", rows, meta))


def fig6_threads(rows: list[dict], out_dir: str, meta: dict | None = None) -> tuple[list[str], list[str]]:
    return _draw("fig6", summary.figure_series("fig6", rows), out_dir, summary.limit_lines("fig6", rows, meta))


def fig7_staging_vs_presigned(rows: list[dict], out_dir: str, meta: dict | None = None) -> tuple[list[str], list[str]]:
    return _draw("fig7", summary.figure_series("fig7", rows), out_dir, summary.limit_lines("fig7", rows, meta))


DRAW = {"fig1": fig1_staging_read, "fig2": fig2_s3_api, "fig3": fig3_staging_vs_s3, "fig6": fig6_threads,
        "fig7": fig7_staging_vs_presigned}


def draw_all(rows: list[dict], out_dir: str, meta: dict | None = None) -> dict[str, tuple[list[str], list[str]]]:
    """figure id -> (paths, series) for every figure; absent ones map to ([], []). meta: the
    study's (db.load), for the limit lines of a cluster study."""
    return {fig_id: draw(rows, out_dir, meta) for fig_id, draw in DRAW.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Seed 001's figures from DIR/study.sqlite.")
    parser.add_argument("dir", metavar="DIR", help="study directory holding study.sqlite")
    parser.add_argument("--out", metavar="DIR", help="directory for the PNG files (default DIR/figures)")
    args = parser.parse_args(argv)
    path = os.path.join(args.dir, db.DB_NAME)
    if not os.path.exists(path):
        print(f"study_figures.py: error: {path}: no study database", file=sys.stderr)
        return 1
    rows, meta = db.load(path)
    for fig_id, (paths, _series) in draw_all(rows, args.out or os.path.join(args.dir, "figures"), meta).items():
        print(paths[0] if paths else f"{fig_id}: no data, not drawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
