"""`python -m ingest run` and `stage`: the MPI driver's commands (ingest.driver) on the command line."""
from __future__ import annotations

from ingest.config import add_run_arguments, config_from_args
from ingest.driver.commands import run, stage
from ingest.driver.mpi import root_step, run_or_abort, world


def _cli(comm, args, command) -> int:
    cfg = root_step(comm, config_from_args, args)
    command(comm, cfg)
    return 0


def _run_cli(args) -> int:
    return run_or_abort(world(), _cli, args, run)


def _stage_cli(args) -> int:
    return run_or_abort(world(), _cli, args, stage)


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="every MPI rank reads its own subcube; rank 0 reports (the default)")
    add_run_arguments(p)
    p.set_defaults(func=_run_cli)
    p = sub.add_parser("stage", help="staging baseline: copy the object to --stage-dir, ranks read from the copy")
    add_run_arguments(p)
    p.set_defaults(func=_stage_cli)
