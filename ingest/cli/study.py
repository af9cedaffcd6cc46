"""`python -m ingest study` and `study-report`: run the objectstore study, and render its report."""
from __future__ import annotations

from ingest.study.report import render_study
from ingest.study.runner import run_study


def _cli(args) -> int:
    return run_study(args.config, args.out, fresh=args.fresh, report=not args.no_report)


def _add_study(subparsers) -> None:
    p = subparsers.add_parser("study", help="run the objectstore study (a matrix of real jobs) into DIR",
                              description="Run the objectstore study (seed 001's design) as a matrix of real jobs.")
    p.add_argument("--config", required=True, help="study TOML (see configs/study-local.toml)")
    p.add_argument("--out", required=True, help="study directory: study.sqlite, reports/, STUDY.md, figures/")
    p.add_argument("--fresh", action="store_true", help="forget the rows already recorded in --out")
    p.add_argument("--no-report", action="store_true", help="skip STUDY.md at the end (study-report DIR later)")
    p.set_defaults(func=_cli)


def _run(args) -> int:
    print(render_study(args.dir, draw=not args.no_figures))
    return 0


def _add_study_report(subparsers) -> None:
    p = subparsers.add_parser("study-report", help="render DIR/STUDY.md and its figures from DIR/study.sqlite",
                              description="Render DIR/STUDY.md (tables, recommendation) and DIR/figures/*.png "
                                          "(seed 001 Figs. 1, 2, 3, 6, 7) from DIR/study.sqlite alone.")
    p.add_argument("dir", metavar="DIR", help="the study directory (`python -m ingest study --out DIR`)")
    p.add_argument("--no-figures", action="store_true", help="write STUDY.md only (no matplotlib needed)")
    p.set_defaults(func=_run)


def add_parser(subparsers) -> None:
    """Register `study --config TOML --out DIR` and `study-report DIR`."""
    _add_study(subparsers)
    _add_study_report(subparsers)
