"""Command-line front end: `python -m ingest COMMAND ...`.

Each command lives in its own module which provides `add_parser(subparsers)`; that function
adds one sub-parser and sets `func` (called with the parsed args, returns an exit status).
Modules are imported lazily so `--help` stays fast and one broken command cannot hide others;
a command line that names its command imports that command's module alone, so every rank of a
`run` loads the driver's read path and not the study, the soak or the cut-outs.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from ingest.errors import IngestError

# A command's process does no linear algebra, but numpy's BLAS starts a thread per core at its
# import: on a node of C cores running C ranks, C x C threads. A value the user set is kept.
BLAS_THREADS_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# command name -> module that implements it (in the order --help lists them)
COMMANDS = {
    "run": "ingest.cli.run",
    "stage": "ingest.cli.run",
    "prestage": "ingest.cli.prestage",
    "info": "ingest.cli.inspect",
    "plan": "ingest.cli.inspect",
    "report": "ingest.cli.report",
    "soak": "ingest.cli.soak",
    "study": "ingest.cli.study",
    "study-report": "ingest.cli.study",
    "synth": "ingest.cli.synth",
    "upload": "ingest.cli.upload",
    "tile": "ingest.cli.tile",
    "presign": "ingest.cli.presign",
    "publish": "ingest.cli.publish",
    "cutouts": "ingest.cli.cutouts",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command`'s module alone (the command line names it)."""
    parser = argparse.ArgumentParser(
        prog="python -m ingest",
        description="Read FITS or HDF5 subcubes straight out of an object store, one per MPI rank.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen = set()
    for module_name in ([COMMANDS[command]] if command in COMMANDS else COMMANDS.values()):
        if module_name in seen:
            continue
        seen.add(module_name)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # command not built yet in this checkout
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    for name, value in BLAS_THREADS_DEFAULTS.items():  # before a command's module imports numpy
        os.environ.setdefault(name, value)
    argv = list(sys.argv[1:] if argv is None else argv)
    # `python -m ingest --source ...` means `run`: the launcher line stays short under srun.
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv.insert(0, "run")
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except IngestError as exc:
        print(f"ingest {args.command}: error: {exc}", file=sys.stderr)
        return 1


def console_main() -> None:
    """The `ingest` console script: main(), then the process ends as `python -m ingest` ends it."""
    from ingest.cli.ending import end_process

    end_process(main())


if __name__ == "__main__":
    console_main()
