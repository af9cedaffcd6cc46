"""`python -m ingest prestage`: stage exactly each rank's regions for a pipeline (ingest.driver.prestage)."""
from __future__ import annotations

from ingest.config import add_run_arguments, config_from_args
from ingest.driver.mpi import root_step, run_or_abort, world
from ingest.driver.prestage import prestage


def _cli(args) -> int:
    def command(comm, parsed):
        prestage(comm, root_step(comm, config_from_args, parsed))
        return 0

    return run_or_abort(world(), command, args)


def add_parser(sub) -> None:
    p = sub.add_parser("prestage", help="stage exactly each rank's regions for a pipeline (SoFiA-2/SoFiA-X), "
                                        "resumable; frame files the pipeline reads unchanged")
    add_run_arguments(p, "prestage")
    p.set_defaults(func=_cli)
