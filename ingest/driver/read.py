"""One rank's timed read of its box, after a barrier, into a per-rank record for the report."""
from __future__ import annotations

import socket

from ingest.config import RunConfig
from ingest.driver.job import Job, plan_box, retry_policy, transport_options
from ingest.driver.mpi import all_agree_or_raise
from ingest.api import read_selection
from ingest.io.transports import open_transport


def _progress_bar(cfg: RunConfig, rank: int, size: int, total_bytes: int, label: str):
    """A tqdm bar on rank 0 (its own bytes stand in for the job's), or None."""
    if rank != 0 or not cfg.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=f"{label} rank 0/{size}",
                disable=None, leave=False)


def read_rank_box(comm, cfg: RunConfig, job: Job, source: str, method: str, label: str, **extra_options):
    """Every rank: plan and read its box from `source`, timed after a barrier. Returns
    (raw array, record). Errors on any rank are raised on all ranks together."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    box = job.boxes[rank]
    raw = record = error = None
    try:
        if method == "presigned" and job.signer_args is not None:
            from ingest.io.presign import url_signer

            extra_options["refresh_url"] = url_signer(*job.signer_args)
        transport = open_transport(source, method, threads=job.settings.threads, **transport_options(cfg), **extra_options)
        if source == job.read_source:
            transport.adopt(job.info)  # rank 0 already learned size and identity: no HEAD per rank
        t_plan = MPI.Wtime()
        sel, plan = plan_box(cfg, job.settings, job.layout, box)
        plan_s = MPI.Wtime() - t_plan
    except Exception as exc:  # noqa: BLE001 - shared with every rank below
        error = exc
    all_agree_or_raise(comm, error)
    bar = _progress_bar(cfg, rank, size, plan.wire_bytes, label)
    comm.Barrier()
    t0 = MPI.Wtime()
    try:
        raw, stats = read_selection(transport, job.layout, sel, plan, threads=job.settings.threads, convert=False,
                                    progress=bar.update if bar else None, retry=retry_policy(cfg))
        t_end = MPI.Wtime()
    except Exception as exc:  # noqa: BLE001
        error = exc
    finally:
        if bar:
            bar.close()
        transport.close()
    all_agree_or_raise(comm, error)
    elapsed_s = t_end - t0
    record = {
        "rank": rank,
        "host": socket.gethostname(),
        "box": [list(b) for b in box],
        "bytes_needed": stats.bytes_needed,
        "bytes_wire": stats.bytes_wire,
        "requests": stats.requests,
        "retries": stats.retries,
        "resumed_bytes": stats.resumed_bytes,
        "faults": stats.faults,
        "first_byte_s": stats.first_byte_s,
        "start_s": 0.0,
        "stop_s": elapsed_s,
        "elapsed_s": elapsed_s,
        "throughput_bytes_per_s": stats.bytes_needed / elapsed_s if elapsed_s > 0 else 0.0,
        "output_path": None,
        "phase_s": {"plan": plan_s, "read": elapsed_s},
        "plan": plan.describe(job.settings.cost, job.settings.threads),
    }
    return raw, record


