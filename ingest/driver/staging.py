"""The staging baseline across ranks (seed 001 s2-4): copy the object to a shared directory,
then every rank reads its box from the copy, as the old workflow does.

The ranks split the download into equal shares of one temporary file; rank 0 renames it into
place only when every share arrived, so a staged file is complete or absent. Before the read
each rank drops the copy from its page cache so the baseline is read from the filesystem,
not from the memory the download just filled.
"""
from __future__ import annotations

import os

from ingest.io import stage as staging
from ingest.config import RunConfig
from ingest.driver.job import Job, transport_options
from ingest.driver.read import read_rank_regions
from ingest.driver.mpi import all_agree_or_raise, root_step
from ingest.io.transports import open_transport


def _prepare(cfg: RunConfig, job: Job) -> tuple[str, str]:
    """Rank 0: check room, then create the sized temporary file. Returns (tmp, final)."""
    # prepare_job checked this before any data moved; checked again because in `run --compare
    # staging` the direct read and its --output-dir files come first and may fill the same disk.
    staging.check_space(cfg.stage_dir, job.info.object_bytes)
    final_path = staging.staged_path(cfg.stage_dir, job.layout.source)
    return staging.prepare(cfg.stage_dir, final_path, job.info.object_bytes), final_path


def measure_staging(comm, cfg: RunConfig, job: Job) -> dict:
    """Stage, then read every box from the staged copy. Returns, on rank 0, {"baseline": the
    report's baseline block, "records": the read records} (on other ranks the same keys, None)."""
    from mpi4py import MPI

    from ingest.outputs import report as reports

    rank, size = comm.Get_rank(), comm.Get_size()
    tmp_path, final_path = root_step(comm, _prepare, cfg, job)
    error = None
    comm.Barrier()
    t0 = MPI.Wtime()
    try:
        with open_transport(job.read_source, job.method, threads=job.settings.threads,
                            **transport_options(cfg)) as source:
            source.adopt(job.info)
            staging.download_part(source, tmp_path, rank, size, chunk_bytes=job.settings.chunk_bytes,
                                   threads=job.settings.threads)
    except Exception as exc:  # noqa: BLE001 - every rank learns of it below
        error = exc
    try:
        all_agree_or_raise(comm, error)
    except Exception:
        if rank == 0:
            staging.abort(tmp_path)
        raise
    comm.Barrier()  # the copy is only done when the last share is
    stage_s = MPI.Wtime() - t0
    root_step(comm, staging.finalize, tmp_path, final_path)
    try:
        staging.drop_from_page_cache(final_path)
        error = None
    except OSError as exc:
        error = exc
    all_agree_or_raise(comm, error)
    regions, record, error = read_rank_regions(comm, cfg, job, os.path.abspath(final_path), "posix", "staged",
                                               direct=cfg.stage_direct_io)
    all_agree_or_raise(comm, error)
    records = comm.gather(record, root=0)
    if rank != 0:
        return {"baseline": None, "records": None}
    read = reports.aggregate(records)
    baseline = reports.staging_baseline(stage_s, read, final_path)
    return {"baseline": baseline, "records": records}
