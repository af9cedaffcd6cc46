"""One MPI rank of `python -m ingest ...`, then this rank's peak RSS (VmHWM) as JSON.

    mpiexec -n 4 python bench/_rank_peak.py run --source s3://b/k --report r.json --no-progress

After ingest's own main returns, writes $INGEST_BENCH_PEAK_DIR/rank<N>.json with VmHWM and
VmRSS (bytes): the rank's peak includes its output array, its scatter buffers and the HTTP
buffers of every thread, which is what the memory bound is about. Not ru_maxrss: see
bench/reads/_read_once.py for why a child's ru_maxrss can start at its parent's peak. The wrapper
itself imports the standard library only: a module it loaded (boto3, the prestage driver) would
be in every rank's peak without the job's needing it.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._rank_record import launcher_rank, status_bytes, write_rank_record  # noqa: E402 - after the path fix

PEAK_DIR_ENV = "INGEST_BENCH_PEAK_DIR"


def main(argv=None) -> int:
    from ingest.cli.main import main as ingest_main

    status = ingest_main(list(sys.argv[1:] if argv is None else argv))
    record = {"rank": launcher_rank(), "status": status, "peak_rss_bytes": status_bytes("VmHWM"),
              "rss_at_exit_bytes": status_bytes("VmRSS")}
    write_rank_record(os.environ.get(PEAK_DIR_ENV), record)
    return status


if __name__ == "__main__":
    from ingest.cli.ending import end_process

    end_process(main())  # as `python -m ingest` ends
