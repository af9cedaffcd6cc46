"""One MPI rank of `python -m ingest run ...`, timed from its launch to its first byte (bench/engine/startup.py).

    INGEST_BENCH_STARTUP_DIR=DIR INGEST_BENCH_LAUNCH_UNIX_S=$(date +%s.%N) \
        mpiexec -n 16 python bench/engine/_rank_startup.py run --source s3://b/k --method s3 --no-progress

Writes DIR/rank<N>.json: when (unix seconds) the process started, when Python handed over to this
file, when ingest's command-line modules were imported, when the rank opened its transport and
when its first byte arrived (the report's first_byte_s after the read's barrier), and which
modules it had loaded when it opened its transport and when its read was done. It imports
nothing of ingest's before it starts the clock, and only what `run` imports anyway, so the
modules counted are the command's own.
"""
from __future__ import annotations

import os
import sys
import time

T_MAIN_UNIX_S = time.time()  # before any import of ingest's

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench._rank_record import launcher_rank, write_rank_record  # noqa: E402 - after the path fix; stdlib only

STARTUP_DIR_ENV = "INGEST_BENCH_STARTUP_DIR"
LAUNCH_ENV = "INGEST_BENCH_LAUNCH_UNIX_S"


def process_start_unix_s() -> float | None:
    """When this process was started (fork-exec by the launcher), in unix seconds, to 10 ms:
    its start tick from /proc/self/stat against the uptime read together with the clock."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            now_unix_s, uptime_s = time.time(), float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return now_unix_s - (uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"))


def _modules() -> list[str]:
    return list(sys.modules)


def main(argv=None) -> int:
    marks: dict = {"process_start_unix_s": process_start_unix_s(), "main_unix_s": T_MAIN_UNIX_S}
    from importlib import import_module

    read_module = import_module("ingest.driver.read")  # the run command imports it anyway
    cli_main = import_module("ingest.cli.main")  # (ingest.cli's `main` is the function, not this module)

    marks["ingest_imported_unix_s"] = time.time()
    build_parser, open_transport = cli_main.build_parser, read_module.open_transport
    read_rank_regions = read_module.read_rank_regions

    def timed_build_parser(*args, **kwargs):
        parser = build_parser(*args, **kwargs)
        marks["parser_ready_unix_s"] = time.time()  # every command module the parser needs is imported
        return parser

    def timed_open_transport(*args, **kwargs):
        transport = open_transport(*args, **kwargs)
        if "transport_open_unix_s" not in marks:
            marks["transport_open_unix_s"] = time.time()
            marks["modules_at_open"] = _modules()
        return transport

    def timed_read(*args, **kwargs):
        regions, record, error = read_rank_regions(*args, **kwargs)
        done_unix_s = time.time()
        if "first_byte_unix_s" not in marks and record.get("first_byte_s") is not None:
            # record times count from the read's barrier; elapsed_s ends just before the return
            marks["first_byte_unix_s"] = done_unix_s - record["elapsed_s"] + record["first_byte_s"]
            marks["read_done_unix_s"] = done_unix_s
            marks["modules_at_read_done"] = _modules()
        return regions, record, error

    cli_main.build_parser = timed_build_parser
    read_module.open_transport = timed_open_transport
    read_module.read_rank_regions = timed_read
    commands = sys.modules.get("ingest.driver.commands")
    if commands is not None:  # already imported by ingest.cli.main: point its name at the wrapper too
        commands.read_rank_regions = timed_read
    status = cli_main.main(list(sys.argv[1:] if argv is None else argv))
    launch = os.environ.get(LAUNCH_ENV)
    record = {"rank": launcher_rank(), "status": status, "launch_unix_s": float(launch) if launch else None,
              **marks}
    write_rank_record(os.environ.get(STARTUP_DIR_ENV), record)
    return status


if __name__ == "__main__":
    sys.exit(main())
