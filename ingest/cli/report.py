"""`python -m ingest report PATH.json`: print the table and summary drawn from a saved report."""
from __future__ import annotations

from ingest.outputs.report import load_report, render_summary

# ------------------------------------------------------------------ command


def _run(args) -> int:
    print(render_summary(load_report(args.path)), end="")
    return 0


def add_parser(subparsers) -> None:
    """Register `report PATH.json`: print the summary of a saved report."""
    p = subparsers.add_parser("report", help="print the per-rank table and summary of a saved JSON report",
                              description="Print the per-rank table and summary of a saved ingest report.")
    p.add_argument("path", metavar="PATH.json", help="report written by `run --report` or `stage --report`")
    p.set_defaults(func=_run)
