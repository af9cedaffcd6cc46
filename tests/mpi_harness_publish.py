"""Run `python -m ingest publish` under mpiexec with one rank killed mid-upload, or on a machine
taken as crowded (test-only harness).

usage: python tests/mpi_harness_publish.py FAIL_RANK|crowded ingest-args...
FAIL_RANK uploads its first part and then dies with os._exit(3) before its next one, as a crashed or
OOM-killed process would: the launcher then ends the job. `crowded`: every machine counts as
running more ranks per core than CROWDED_RANKS_PER_CORE, so the ranks make their upload clients in
turn after the plan, as on a machine with tens of ranks a core. Production code has no hooks.
"""
import os
import sys

from mpi4py import MPI

import ingest.driver.publish.job  # noqa: F401 - patched by name below (the module whose crowded() reads it)
import ingest.staging.multipart as multipart
from ingest.cli.main import main

mode, args = sys.argv[1], sys.argv[2:]
if mode == "crowded":
    sys.modules["ingest.driver.publish.job"].CROWDED_RANKS_PER_CORE = 0
elif MPI.COMM_WORLD.Get_rank() == int(mode):
    real = multipart.PartUploader.put

    def put_then_die(self, *a, **kw):
        record = real(self, *a, **kw)  # this part is stored: a resume must find and verify it
        os._exit(3)
        return record

    multipart.PartUploader.put = put_then_die
sys.exit(main(args))
