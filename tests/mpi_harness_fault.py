"""Run `python -m ingest` under mpiexec with ONE rank's S3 reads routed through a proxy
(test-only harness; production code has no hooks).

usage: python tests/mpi_harness_fault.py FAULT_RANK ENDPOINT_URL ingest-args...
The rank FAULT_RANK reads through ENDPOINT_URL (a Toxiproxy proxy in front of the S3 server,
carrying whatever toxics the test added); every other rank reads the server directly. Use it
with `--method s3` and no --endpoint-url, so the endpoint comes from AWS_ENDPOINT_URL.
"""
import os
import sys

from mpi4py import MPI

from ingest.cli.main import main

fault_rank, endpoint_url, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if MPI.COMM_WORLD.Get_rank() == fault_rank:
    os.environ["AWS_ENDPOINT_URL"] = endpoint_url  # boto3's chain: this rank's client only
sys.exit(main(args))
