"""The job every rank shares, and one rank's timed read of its box.

Rank 0 alone reads the header, signs a URL if needed and decomposes the cube (`prepare_job`);
the Job is broadcast, so 25 ranks make one header fetch, not 25. Each rank times its read
with MPI.Wtime after a barrier (`read_rank_box`).
"""
from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timezone

from ingest.api import plan_read, read_selection
from ingest.config import RunConfig
from ingest.decompose import grid_boxes, resolve_grid
from ingest.errors import ConfigError, ExpiredURLError
from ingest.geometry import Layout
from ingest.layout import read_layout
from ingest.driver.mpi import all_agree_or_raise
from ingest.planner import CostModel
from ingest.region import box_to_region, normalize, parse_region
from ingest.retry import RetryPolicy
from ingest.transports import ObjectInfo, open_transport


@dataclass(frozen=True)
class Job:
    """What rank 0 decides once and broadcasts to every rank."""

    read_source: str  # the source, or the URL rank 0 presigned for it
    method: str
    layout: Layout
    info: ObjectInfo
    grid_fits: tuple[int, ...]
    grid_reason: str
    boxes: tuple  # per rank: ((start, stop), ...) in numpy axis order
    signer_args: tuple | None = None  # (bucket, key, expires_s, endpoint) when ranks may re-sign
    estimate_s: float = 0.0  # the cost model's prediction for the slowest rank


def transport_options(cfg: RunConfig) -> dict:
    """Transport keyword arguments from the config (timeouts, TLS, endpoint)."""
    opts = {
        "connect_timeout_s": cfg.connect_timeout_s,
        "read_timeout_s": cfg.read_timeout_s,
        "verify_tls": cfg.verify_tls,
        "ca_bundle": cfg.ca_bundle,
    }
    if cfg.endpoint_url:
        opts["endpoint_url"] = cfg.endpoint_url
    return opts


def cost_model(cfg: RunConfig) -> CostModel:
    return CostModel(latency_s=cfg.latency_s, bandwidth_bytes_per_s=cfg.bandwidth_bytes_per_s)


def plan_box(cfg: RunConfig, layout: Layout, box):
    """(selection, plan) for one rank's box with the configured strategy and cost model."""
    return plan_read(layout, box_to_region(box), strategy=cfg.strategy, chunk_bytes=cfg.chunk_bytes,
                     max_gap_bytes=cfg.max_gap_bytes, cost=cost_model(cfg))


def retry_policy(cfg: RunConfig) -> RetryPolicy:
    return RetryPolicy(retries=cfg.retries, total_s=cfg.retry_total_s, backoff_s=cfg.retry_backoff_s)


def _resolve_source(cfg: RunConfig) -> tuple[str, str, tuple | None]:
    """(method, source to read, signer args). An s3:// source read as 'presigned' is signed here;
    a user's presigned URL can be re-signed later only if it is path-style S3 and this process
    has credentials."""
    from ingest.presign import parse_s3_uri, url_object, url_signer

    method = cfg.resolved_method
    if method != "presigned":
        return method, cfg.source, None
    if cfg.source.startswith("s3://"):
        bucket, key = parse_s3_uri(cfg.source)
        args = (bucket, key, cfg.presign_expires_s, cfg.endpoint_url)
        from ingest.presign import presign_url
        from ingest.s3client import shared_s3_client

        client = shared_s3_client(**({"endpoint_url": cfg.endpoint_url} if cfg.endpoint_url else {}))
        return method, presign_url(bucket, key, expires_s=cfg.presign_expires_s, client=client), args
    target = url_object(cfg.source)
    if target is not None and url_signer(target[1], target[2], cfg.presign_expires_s, target[0]) is not None:
        return method, cfg.source, (target[1], target[2], cfg.presign_expires_s, target[0])
    return method, cfg.source, None


def _ensure_lifetime(url: str, signer_args: tuple | None, needed_s: float, cfg: RunConfig) -> str:
    """Rank 0, before any rank reads: a URL that will not outlive the run is re-signed when we
    can, refused when already expired, and warned about otherwise (the estimate may be pessimistic)."""
    from ingest.presign import redact_url, url_expiry, url_signer

    expiry = url_expiry(url)
    if expiry is None:
        return url
    left_s = (expiry - datetime.now(timezone.utc)).total_seconds()
    if left_s >= needed_s:
        return url
    if signer_args is not None:
        if cfg.presign_expires_s < needed_s:
            raise ConfigError(f"presign_expires_s: {cfg.presign_expires_s} s is shorter than the run's "
                              f"estimated {needed_s:.0f} s (with margin); raise it (at most 604800)")
        return url_signer(*signer_args)()
    if left_s <= 0:
        raise ExpiredURLError(f"{redact_url(url)}: the presigned URL expired at {expiry:%Y-%m-%d %H:%M:%S} UTC, "
                              f"{-left_s:.0f} s ago; get a new URL (no credentials here to sign one)")
    print(f"ingest: warning: the presigned URL expires in {left_s:.0f} s but the run may take "
          f"{needed_s:.0f} s (estimate x 2 + 60 s); reads after expiry will fail", file=sys.stderr, flush=True)
    return url


def _job_box(cfg: RunConfig, layout: Layout) -> tuple:
    """The part of the cube the whole job covers (config `region`, default all of it)."""
    sel = normalize(parse_region(cfg.region) if cfg.region else (), layout.shape)
    if any(step != 1 for step in sel.steps):
        raise ConfigError(f"region: {cfg.region!r} has a step; a job region must be a plain box")
    return sel.box


def prepare_job(cfg: RunConfig, n_ranks: int) -> Job:
    """Rank 0: resolve the source, read the header, decompose the cube, check the URL's lifetime."""
    method, read_source, signer_args = _resolve_source(cfg)
    if method == "presigned":
        read_source = _ensure_lifetime(read_source, signer_args, 60.0, cfg)  # enough for the header
    with open_transport(read_source, method, threads=1, **transport_options(cfg)) as transport:
        layout = read_layout(transport, cfg.hdu)
        info = transport.info
    job_box = _job_box(cfg, layout)
    job_shape = tuple(b - a for a, b in job_box)
    grid_fits, reason = resolve_grid(
        job_shape,
        cfg.grid,
        n_ranks,
        layout.itemsize,
        latency_s=cfg.latency_s,
        bandwidth_bytes_per_s=cfg.bandwidth_bytes_per_s,
        chunk_bytes=cfg.chunk_bytes,
        threads=cfg.threads,
    )
    boxes = tuple(
        tuple((a + s, b + s) for (a, b), (s, _) in zip(box, job_box))
        for box in grid_boxes(job_shape, grid_fits, cfg.halo, n_ranks=n_ranks)
    )
    estimate_s = max(plan_box(cfg, layout, box)[1].predicted_s(cost_model(cfg), cfg.threads) for box in boxes)
    if method == "presigned":
        read_source = _ensure_lifetime(read_source, signer_args, 2 * estimate_s + 60.0, cfg)
    if cfg.output_dir:
        from ingest.output import check_output_dir, output_name

        check_output_dir(cfg.output_dir, [output_name(r, b) for r, b in enumerate(boxes)])
    return Job(read_source, method, layout, info, grid_fits, reason, boxes, signer_args, estimate_s)


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
            from ingest.presign import url_signer

            extra_options["refresh_url"] = url_signer(*job.signer_args)
        transport = open_transport(source, method, threads=cfg.threads, **transport_options(cfg), **extra_options)
        if source == job.read_source:
            transport.adopt(job.info)  # rank 0 already learned size and identity: no HEAD per rank
        t_plan = MPI.Wtime()
        sel, plan = plan_box(cfg, job.layout, box)
        plan_s = MPI.Wtime() - t_plan
    except Exception as exc:  # noqa: BLE001 - shared with every rank below
        error = exc
    all_agree_or_raise(comm, error)
    bar = _progress_bar(cfg, rank, size, plan.wire_bytes, label)
    comm.Barrier()
    t0 = MPI.Wtime()
    try:
        raw, stats = read_selection(transport, job.layout, sel, plan, threads=cfg.threads, convert=False,
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
        "plan": plan.describe(cost_model(cfg), cfg.threads),
    }
    return raw, record


