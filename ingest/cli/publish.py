"""`python -m ingest publish`: every rank's regions written back as one object (ingest.driver.publish)."""
from __future__ import annotations

from ingest.config import add_run_arguments, config_from_args
from ingest.driver.mpi import root_step, run_or_abort, world
from ingest.driver.publish import publish


def _cli(args) -> int:
    def command(comm, parsed):
        publish(comm, config=root_step(comm, config_from_args, parsed))
        return 0

    return run_or_abort(world(), command, args)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "publish", help="write the ranks' regions back to the store as one object (multipart, two-phase "
                        "aggregation, resumable)",
        description="Publish regions as one FITS object (or one contiguous HDF5 dataset) at --dest s3://bucket/key, "
                    "under mpiexec, srun or alone. --source is a directory: a pre-stage (manifest.json; with "
                    "--region-files, a pipeline's per-region outputs such as SoFiA-2 masks), or `run --output-dir` "
                    "cut-outs. Every voxel is written once, by the region that owns it (overlaps are cut at their "
                    "middle). Parts within S3's limits, each gathered by one rank over MPI and uploaded with a "
                    "checksum the store verifies; on failure the upload is aborted (kept with --resume).")
    add_run_arguments(p, "publish")
    p.set_defaults(func=_cli)
