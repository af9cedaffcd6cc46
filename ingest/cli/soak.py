"""`python -m ingest soak`: repeat a run and log each in SQLite (ingest.study.soak), or summarize the log."""
from __future__ import annotations

import argparse

from ingest.errors import ConfigError
from ingest.study.soak import (DEFAULT_DB, DEFAULT_LABEL, DEFAULT_RUN_TIMEOUT_S, config_from_args, number_option,
                               render_summary, soak, summarize)


def _cli(args) -> int:
    slow_s = number_option("--slow-s", args.slow_s, low=0, low_open=True) if args.slow_s is not None else None
    if args.summary:
        if args.runs is not None or args.duration_s is not None or [a for a in args.run_args if a != "--"]:
            raise ConfigError("--summary: reads --db only; drop --runs/--duration-s and the run arguments")
        print(render_summary(summarize(args.db, args.label_filter, args.group, slow_s)))
        return 0
    return soak(config_from_args(args), group=args.group, slow_s=slow_s)


def add_parser(subparsers) -> None:
    """Register `soak (--runs N | --duration-s S) [...] -- RUN-ARGS` and `soak --summary`."""
    p = subparsers.add_parser(
        "soak", help="repeat a run N times or for a duration, log each in SQLite (seed 000's stability test)",
        description="Repeat `ingest run RUN-ARGS` as a subprocess and record each run in an SQLite "
        "database; then print failure % and runtime min/avg/max. With --summary, only print.",
        usage="%(prog)s (--runs N | --duration-s S) [options] -- RUN-ARGS...\n"
              "       %(prog)s --summary [--db F] [--label L] [--group {label,soak}] [--slow-s S]")
    p.add_argument("--runs", default=None, metavar="N", help="number of runs (>= 1)")
    p.add_argument("--duration-s", default=None, metavar="S",
                   help="time budget in s: no run starts after it (the last may end later)")
    p.add_argument("--pause-s", default="0", metavar="S", help="pause between runs in s (default 0; seed 000: 20)")
    p.add_argument("--run-timeout-s", default=str(DEFAULT_RUN_TIMEOUT_S), metavar="S",
                   help=f"kill a run after S s and record it as timeout (default {DEFAULT_RUN_TIMEOUT_S:g})")
    p.add_argument("--db", default=DEFAULT_DB, metavar="PATH",
                   help=f"SQLite file, created if missing, appended to otherwise (default {DEFAULT_DB})")
    p.add_argument("--launcher", default=None, metavar="CMD",
                   help='prefix for each run, e.g. "mpiexec -n 4 --oversubscribe" or "srun -n 25" (default: one rank)')
    p.add_argument("--label", default=None, metavar="TEXT",
                   help=f"name of this configuration in the db (default {DEFAULT_LABEL!r}); "
                        "with --summary: show only this label")
    p.add_argument("--reports-dir", default=None, metavar="DIR", help="keep every run's JSON report here")
    p.add_argument("--summary", action="store_true", help="print the summary of --db and exit")
    p.add_argument("--group", choices=("label", "soak"), default="label", help="summary rows per label or per soak")
    p.add_argument("--slow-s", default=None, metavar="S",
                   help="summary: also count runs longer than S s as failed (seed 000 used 100 s)")
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="`ingest run` options, after --")
    p.set_defaults(func=_dispatch)


def _dispatch(args) -> int:
    # --label means "name this soak" when running and "filter" with --summary.
    args.label_filter = args.label
    if args.label is None:
        args.label = DEFAULT_LABEL
    return _cli(args)
