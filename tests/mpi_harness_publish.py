"""Run `python -m ingest publish` under mpiexec with one rank killed mid-upload (test-only harness).

usage: python tests/mpi_harness_publish.py FAIL_RANK ingest-args...
FAIL_RANK uploads its first part and then dies with os._exit(3) before its next one, as a crashed or
OOM-killed process would: the launcher then ends the job. Production code has no hooks.
"""
import os
import sys

from mpi4py import MPI

import ingest.staging.multipart as multipart
from ingest.cli.main import main

fail_rank, args = int(sys.argv[1]), sys.argv[2:]
if MPI.COMM_WORLD.Get_rank() == fail_rank:
    real = multipart.PartUploader.put

    def put_then_die(self, *a, **kw):
        record = real(self, *a, **kw)  # this part is stored: a resume must find and verify it
        os._exit(3)
        return record

    multipart.PartUploader.put = put_then_die
sys.exit(main(args))
