"""One rank's timed read of its regions, after a barrier: a record per region and one per rank.

A rank reads its regions one after another (the job's assignment puts the largest first), each
with one plan, into a fresh array or into a destination the caller supplies (a mapped output
file). An error stops the rank's remaining regions; it is returned, not raised, so the caller
can record what did complete (prestage's manifest) before every rank learns of it together.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import numpy as np

from ingest.api.read import execute_plan, plan_with, read_selection
from ingest.config import RunConfig
from ingest.config.settings import retry_policy
from ingest.driver.job import Job, box_bytes, open_tile, plan_box, rank_transport_options
from ingest.driver.mpi import all_agree_or_raise
from ingest.errors import ConfigError, ExpiredURLError
from ingest.formats.fits import BLOCK_BYTES
from ingest.engine.executor import ReadStats
from ingest.transports import open_transport
from ingest.transports.retry import RetryPolicy

_SUM_KEYS = ("bytes_needed", "bytes_wire", "requests", "retries", "resumed_bytes")


@dataclass
class RegionRead:
    """One region this rank read: its index, box, data (raw stored values, None when written to a
    file; `run` converts them as astropy would) and record."""

    index: int
    box: tuple
    data: np.ndarray | None
    record: dict


def _progress_bar(cfg: RunConfig, rank: int, size: int, total_bytes: int, label: str):
    """A tqdm bar on rank 0 (its own bytes stand in for the job's), or None."""
    if rank != 0 or not cfg.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=f"{label} rank 0/{size}",
                disable=None, leave=False)


def _region_record(rank: int, index: int, box, stats: ReadStats, start_s: float, stop_s: float) -> dict:
    return {
        "index": index, "rank": rank, "box": [list(b) for b in box], "status": "read",
        "bytes_needed": stats.bytes_needed, "bytes_wire": stats.bytes_wire, "requests": stats.requests,
        "retries": stats.retries, "resumed_bytes": stats.resumed_bytes, "faults": dict(stats.faults),
        "throttled": stats.throttled, "concurrency_ceiling": stats.concurrency_ceiling,
        "concurrency_settled": stats.concurrency_settled, "concurrency_min": stats.concurrency_min,
        "first_byte_s": stats.first_byte_s, "start_s": start_s, "stop_s": stop_s, "elapsed_s": stop_s - start_s,
    }


def rank_record(rank: int, regions: list[dict], elapsed_s: float, plan_s: float, plans: list[dict],
                cpu_s: float | None = None) -> dict:
    """The per-rank record of the report: its regions' sums, timed from the job's barrier; cpu_s
    the rank's process CPU seconds over the same time (all its threads)."""
    faults: dict = {}
    for r in regions:
        for kind, count in r["faults"].items():
            faults[kind] = faults.get(kind, 0) + count
    sums = {key: sum(r[key] for r in regions) for key in _SUM_KEYS}
    first = [r["first_byte_s"] + r["start_s"] for r in regions if r["first_byte_s"] is not None]
    return {
        "rank": rank,
        "host": socket.gethostname(),
        "box": regions[0]["box"] if len(regions) == 1 else None,  # one region: the box, as the table shows
        "regions": [r["index"] for r in regions],
        **sums,
        "faults": faults,
        **_throttling(regions),
        "first_byte_s": min(first) if first else None,
        "start_s": 0.0,
        "stop_s": elapsed_s,
        "elapsed_s": elapsed_s,
        "cpu_s": cpu_s,
        "throughput_bytes_per_s": sums["bytes_needed"] / elapsed_s if elapsed_s > 0 else 0.0,
        "output_path": None,
        "phase_s": {"plan": plan_s, "read": elapsed_s},
        "plan": plans[0] if len(plans) == 1 else None,
    }


def _throttling(regions: list[dict]) -> dict:
    """The rank's throttling over its regions: throttled replies summed; the requests in flight
    its limiter allowed (one limiter per transport, so the last region's level is where the rank
    settled; the fewest over all)."""
    levels = [r for r in regions if r.get("concurrency_settled") is not None]
    return {
        "throttled": sum(r.get("throttled", 0) for r in regions),
        "concurrency_ceiling": max((r["concurrency_ceiling"] for r in levels), default=None),
        "concurrency_settled": levels[-1]["concurrency_settled"] if levels else None,
        "concurrency_min": min((r["concurrency_min"] for r in levels), default=None),
    }


def read_rank_regions(comm, cfg: RunConfig, job: Job, source: str, method: str, label: str, *,
                      destination=None, on_region=None, **extra_options):
    """Every rank: plan and read its regions (job.assignment[rank]) from `source`, timed after a
    barrier. `destination(index, plan)`, if given, is a context manager yielding where a
    region's bytes go (else a fresh array each); `on_region(RegionRead)` runs after each.
    Returns (list of RegionRead, rank record, error or None). Set-up errors on any rank are
    raised on all ranks together."""
    from mpi4py import MPI

    if job.region_sources is not None:
        if destination is not None:
            raise ConfigError("source: a tiled source is read into arrays by `run`; it cannot be written into "
                              "pre-staged files")
        return _read_rank_tiles(comm, cfg, job, label, on_region)
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = job.assignment[rank]
    error = transport = None
    plans = []
    try:
        if method == "presigned" and job.signer_args is not None:
            extra_options["refresh_url"] = _resigner(job.signer_args)
        transport = open_transport(source, method, threads=job.settings.threads,
                                   **job_transport_options(cfg, job, method),
                                   **extra_options)
        if source == job.read_source:
            transport.adopt(job.info)  # rank 0 already learned size and identity: no HEAD per rank
        t_plan = MPI.Wtime()
        plans = [plan_box(cfg, job.settings, job.layout, job.regions[i]) for i in mine]
        plan_s = MPI.Wtime() - t_plan
    except Exception as exc:  # noqa: BLE001 - shared with every rank below
        error = exc
    try:
        all_agree_or_raise(comm, error)
    except BaseException:
        if transport is not None:
            transport.close()
        raise
    bar = _progress_bar(cfg, rank, size, sum(plan.wire_bytes for _, plan in plans), label)
    done: list[RegionRead] = []
    comm.Barrier()
    t0, cpu0 = MPI.Wtime(), time.process_time()
    try:
        for index, (sel, plan) in zip(mine, plans):
            start_s = MPI.Wtime() - t0
            common = dict(threads=job.settings.threads, progress=bar.update if bar else None,
                          retry=job_retry(cfg, job), order=cfg.order)
            if destination is None:
                raw, stats = read_selection(transport, job.layout, sel, plan, convert=False, **common)
            else:
                raw = None
                with destination(index, plan) as dest:
                    stats = execute_plan(plan, job.layout, transport, dest, job.regions[index], **common)
            region = RegionRead(index, job.regions[index], raw,
                                _region_record(rank, index, job.regions[index], stats, start_s, MPI.Wtime() - t0))
            if on_region is not None:
                on_region(region)
            done.append(region)
    except Exception as exc:  # noqa: BLE001 - returned: the caller records progress, then raises on all ranks
        error = exc
    finally:
        if bar:
            bar.close()
        transport.close()
    elapsed_s = MPI.Wtime() - t0
    record = rank_record(rank, [r.record for r in done], elapsed_s, plan_s,
                         [plan.describe(job.settings.cost, job.settings.threads) for _, plan in plans],
                         time.process_time() - cpu0)
    return done, record, error


def _read_rank_tiles(comm, cfg: RunConfig, job: Job, label: str, on_region):
    """Every rank: its tiles one after another, each read WHOLE from its own object (the tile's
    header gives its layout, one plan reads all its data on `threads` connections), its CRC-32
    checked against the index. Each region's time covers the tile's header and data reads.
    Returns what read_rank_regions returns."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    mine = job.assignment[rank]
    bar = _progress_bar(cfg, rank, size, sum(box_bytes(job.regions[i], job.layout.itemsize) for i in mine), label)
    done: list[RegionRead] = []
    plans = []
    error = None
    comm.Barrier()
    t0, cpu0 = MPI.Wtime(), time.process_time()
    try:
        for index in mine:
            start_s = MPI.Wtime() - t0
            raw, stats, plan, facts = _read_tile(cfg, job, index, bar.update if bar else None)
            record = _region_record(rank, index, job.regions[index], stats, start_s, MPI.Wtime() - t0)
            # The tile's header is a request of this layout's own: counted with the data's.
            record.update(requests=record["requests"] + facts["header_requests"],
                          bytes_wire=record["bytes_wire"] + facts["header_bytes"], object=facts)
            region = RegionRead(index, job.regions[index], raw, record)
            plans.append(plan)
            if on_region is not None:
                on_region(region)
            done.append(region)
    except Exception as exc:  # noqa: BLE001 - returned, as read_rank_regions does
        error = exc
    finally:
        if bar:
            bar.close()
    elapsed_s = MPI.Wtime() - t0
    record = rank_record(rank, [r.record for r in done], elapsed_s, 0.0,
                         [plan.describe(job.settings.cost, job.settings.threads) for plan in plans],
                         time.process_time() - cpu0)
    return done, record, error


def _read_tile(cfg: RunConfig, job: Job, index: int, progress):
    """One tile whole: (raw stored values, ReadStats, plan, facts about the object)."""
    from ingest.core.tiles import check_crc, expected_tile
    from ingest.formats.reader import read_any_layout

    tile_source = job.region_sources[index]
    options = job_transport_options(cfg, job)
    if tile_source.signer_args is not None:
        options["refresh_url"] = _resigner(tile_source.signer_args)
    s = job.settings
    with open_tile(tile_source.source, job.method, tile_source.size_bytes, tile_source.index_name,
                   threads=s.threads, **options) as transport:
        name = transport.display_name
        layout = read_any_layout(transport, dataset=job.layout.dataset, retry=job_retry(cfg, job))
        expected_tile(job.regions[index], name, layout.shape, layout.raw_dtype, job.layout.raw_dtype.str)
        sel, plan = plan_with(layout, (), s)
        raw, stats = read_selection(transport, layout, sel, plan, convert=False, threads=s.threads, progress=progress,
                                    retry=job_retry(cfg, job), order=cfg.order)
    check_crc(tile_source.crc32, name, raw, tile_source.index_name)
    if layout.kind == "hdf5":
        header_requests, header_bytes = layout.open_requests, layout.open_bytes
    else:  # a tile holds its cube in HDU 0: its header is read block by block up to the data
        header_requests, header_bytes = layout.data_offset // BLOCK_BYTES, layout.data_offset
    facts = {"source": name, "object_bytes": tile_source.size_bytes, "header_requests": header_requests,
             "header_bytes": header_bytes}
    return raw, stats, plan, facts


def job_transport_options(cfg: RunConfig, job: Job, method: str | None = None) -> dict:
    """open_transport's options for this job's reads by `method` (the job's by default) on any
    rank (ingest.driver.job.rank_transport_options)."""
    return rank_transport_options(cfg, method or job.method, job.environment)


def job_retry(cfg: RunConfig, job: Job) -> RetryPolicy:
    """How this job's requests retry. A URL's ranks take rank 0's policy (Job.retry), so they read
    no AWS file for its default; an S3 rank resolves its own from its own environment, as it does
    its connection settings (rank_transport_options)."""
    return job.retry if job.retry is not None and job.method != "s3" else retry_policy(cfg)


def _resigner(signer_args: tuple):
    """A presigned URL's refresh (the job's, or a tile's): the signer is made the first time the
    URL expires, not when the rank opens it. Finding credentials imports boto3 and may ask the
    instance's metadata service, which a thousand ranks should not all do at start-up for a URL
    that outlives the run (rank 0 checked its lifetime against the prediction)."""
    signers: list = []

    def refresh() -> str:
        if not signers:
            from ingest.transports.presign import url_signer

            signers.append(url_signer(*signer_args))
        if signers[0] is None:
            raise ExpiredURLError(f"s3://{signer_args[0]}/{signer_args[1]}: the presigned URL expired and this "
                                  f"rank has no credentials to sign a new one")
        return signers[0]()

    return refresh
