"""The staging baseline across ranks (seed 001 s2-4): copy the object to a shared directory,
then every rank reads its box from the copy, as the old workflow does.

The ranks split the download into equal shares of one temporary file; rank 0 renames it into
place only when every share arrived, so a staged file is complete or absent. Before the read
each rank drops the copy from its page cache so the baseline is read from the filesystem,
not from the memory the download just filled.

With `stage_with` naming another tool (s5cmd, rclone, a command template) rank 0 alone runs
it into the same temporary name, between the same barriers, so the two baselines are timed
alike; the other ranks wait without spinning a core the tool may need.
"""
from __future__ import annotations

import os

from ingest.staging import stage as staging
from ingest.staging import tools as stage_tools
from ingest.config import RunConfig
from ingest.config.settings import transport_options
from ingest.driver.job import Job
from ingest.driver.read import read_rank_regions
from ingest.driver.mpi import all_agree_or_raise, root_step
from ingest.driver.quiet import quiet_barrier
from ingest.driver.rootwork import gather_to_root
from ingest.transports import open_transport


def _prepare(cfg: RunConfig, job: Job) -> tuple[str, str]:
    """Rank 0: check room, then create the sized temporary file. Returns (tmp, final)."""
    # prepare_job checked this before any data moved; checked again because in `run --compare
    # staging` the direct read and its --output-dir files come first and may fill the same disk.
    staging.check_space(cfg.stage_dir, job.info.object_bytes)
    final_path = staging.staged_path(cfg.stage_dir, job.layout.source)
    return staging.prepare(cfg.stage_dir, final_path, job.info.object_bytes), final_path


def _prepare_tool(cfg: RunConfig, job: Job) -> tuple:
    """Rank 0: check room, pick the temporary name, build the tool's command and ask its
    version (outside the timed copy). Returns (tmp, final, command, {"name", "version"})."""
    kind = stage_tools.check_stage_with(cfg.stage_with, cfg.source)  # again: a Python caller skips commands.py
    staging.check_space(cfg.stage_dir, job.info.object_bytes)
    final_path = staging.staged_path(cfg.stage_dir, job.layout.source)
    tmp_path = staging.new_temp_path(cfg.stage_dir, final_path)
    # s5cmd and rclone read the s3:// object themselves; a template gets what ingest reads
    # (the s3:// URI, the presigned URL, possibly the one rank 0 made, or the local path).
    source = cfg.source if kind in ("s5cmd", "rclone") else job.read_source
    command = stage_tools.build_command(cfg.stage_with, source, tmp_path, endpoint_url=cfg.endpoint_url,
                                        verify_tls=cfg.verify_tls, ca_bundle=cfg.ca_bundle)
    return tmp_path, final_path, command, stage_tools.tool_version(cfg.stage_with)


def _root_copies(comm, command, tmp_path: str, job: Job) -> Exception | None:
    """Rank 0 runs the tool; the others wait in a polled barrier. A blocking MPI wait spins a
    core (Open MPI busy-polls), which on a small node would slow the very tool being timed."""
    error = None
    if comm.Get_rank() == 0:
        try:
            staging.download_with_tool(command, tmp_path, job.info.object_bytes, job.layout.source)
        except Exception as exc:  # noqa: BLE001 - every rank learns of it below
            error = exc
    quiet_barrier(comm)
    return error


def measure_staging(comm, cfg: RunConfig, job: Job) -> dict:
    """Stage, then read every box from the staged copy. Returns, on rank 0, {"baseline": the
    report's baseline block, "records": the read records} (on other ranks the same keys, None)."""
    from mpi4py import MPI

    from ingest.outputs import report as reports

    rank, size = comm.Get_rank(), comm.Get_size()
    with_tool = stage_tools.tool_kind(cfg.stage_with) != "ingest"
    if with_tool:
        tmp_path, final_path, command, tool = root_step(comm, _prepare_tool, cfg, job)
        command = command if rank == 0 else None  # only rank 0 runs it
    else:
        tmp_path, final_path = root_step(comm, _prepare, cfg, job)
        tool = stage_tools.tool_version("ingest")
    error = None
    comm.Barrier()
    t0 = MPI.Wtime()
    if with_tool:
        error = _root_copies(comm, command, tmp_path, job)  # removes its files itself on failure
    else:
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
    quiet_barrier(comm)  # the copy is only done when the last share is (waited for asleep)
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
    records = gather_to_root(comm, record)
    if rank != 0:
        return {"baseline": None, "records": None}
    read = reports.aggregate(records)
    baseline = reports.staging_baseline(stage_s, read, final_path, stage_tool=tool)
    return {"baseline": baseline, "records": records}
