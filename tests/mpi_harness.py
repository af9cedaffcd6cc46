"""Run `python -m ingest` under mpiexec with one rank sabotaged mid-read (test-only harness).

usage: python tests/mpi_harness.py FAIL_RANK MODE ingest-args...
MODE raise: that rank's reads raise after the first request; MODE exit: the rank dies with
os._exit(3) mid-read, as a crashed or OOM-killed process would. Production code has no hooks.
"""
import os
import sys

from mpi4py import MPI

import ingest.engine.executor as executor
from ingest.cli.main import main

fail_rank, mode, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if MPI.COMM_WORLD.Get_rank() == fail_rank:
    real = executor._run_one
    calls = [0]

    def sabotaged(*a, **kw):
        calls[0] += 1
        if calls[0] > 1:
            if mode == "exit":
                os._exit(3)
            raise OSError(f"injected read failure on rank {fail_rank}")
        return real(*a, **kw)

    executor._run_one = sabotaged
sys.exit(main(args))
