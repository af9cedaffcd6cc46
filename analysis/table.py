"""Markdown table comparing ingest reports (JSON files only, never live runs).

    python analysis/table.py runs/*.json [--sort ranks|makespan|none]

One row per report: mode, method, ranks, grid, bytes, makespan, throughput, amplification,
requests, retries, slowest rank, and the staging baseline and speedup when the report has one.
`load_reports` and `series_label` are shared with plot_report.py.
"""
from __future__ import annotations

import argparse
import os
import sys

try:
    from ingest.errors import IngestError
    from ingest.outputs.report import load_report
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from ingest.errors import IngestError
    from ingest.outputs.report import load_report

MiB = 1024 * 1024


def load_reports(paths: list[str]) -> list[tuple[str, dict]]:
    """(path, report) for each file; load_report refuses non-reports with the file's name."""
    return [(path, load_report(path)) for path in paths]


def method_of(report: dict) -> str:
    config = report.get("config", {})
    return str(config.get("resolved_method") or config.get("method") or "?")


def series_label(report: dict) -> str:
    """What a run measured: 'direct presigned', 'direct s3', 'staging read (posix)'."""
    if report.get("mode") == "staging":
        return "staging: read staged file"
    return f"direct {method_of(report)}"


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


COLUMNS = ["report", "mode", "method", "ranks", "grid", "halo", "GiB needed", "amplification",
           "requests", "retries", "makespan s", "MiB/s", "slowest rank (s)", "staging total s",
           "speedup"]


def row(path: str, report: dict) -> list[str]:
    agg = report["aggregate"]
    grid = report.get("grid", {})
    base = report.get("baseline") or {}
    slowest = agg.get("slowest_rank") or {}
    return [
        os.path.basename(path), str(report.get("mode")), method_of(report), str(agg["ranks"]),
        "x".join(str(p) for p in grid.get("grid_fits") or []) or "?", str(grid.get("halo", "?")),
        _fmt(agg.get("bytes_needed"), ".3f", 1 / 1024**3), _fmt(agg.get("read_amplification"), ".3f"),
        str(agg.get("requests")), str(agg.get("retries")), _fmt(agg.get("makespan_s"), ".3f"),
        _fmt(agg.get("throughput_bytes_per_s"), ".1f", 1 / MiB),
        f"{slowest.get('rank')} ({_fmt(slowest.get('elapsed_s'), '.3f')})",
        _fmt(base.get("total_s"), ".3f"), _fmt(report.get("speedup"), ".2f"),
    ]


def markdown_table(loaded: list[tuple[str, dict]]) -> str:
    rows = [row(path, report) for path, report in loaded]
    numeric = set(range(3, len(COLUMNS))) - {4}  # right-align numbers, keep grid left
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---:" if i in numeric else "---" for i in range(len(COLUMNS))) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Markdown table comparing ingest report JSON files.")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json")
    parser.add_argument("--sort", choices=("ranks", "makespan", "none"), default="ranks",
                        help="row order: by series then rank count (default), by makespan, or as given")
    args = parser.parse_args(argv)
    try:
        loaded = load_reports(args.reports)
    except IngestError as exc:  # names the file; a traceback would hide that
        print(f"table.py: error: {exc}", file=sys.stderr)
        return 1
    if args.sort == "ranks":
        loaded.sort(key=lambda pr: (series_label(pr[1]), pr[1]["aggregate"]["ranks"]))
    elif args.sort == "makespan":
        loaded.sort(key=lambda pr: pr[1]["aggregate"]["makespan_s"])
    print(markdown_table(loaded), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
