"""The job every rank shares: what rank 0 decides once and broadcasts.

Rank 0 alone reads the header, signs a URL if needed, probes the link (strategy auto) and
decomposes the cube (`prepare_job`); the Job is broadcast, so 25 ranks make one header fetch
and one probe, not 25. `Settings` are the values every read uses: the config's where it fixes
them, the tuner's where it says auto.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.api import plan_read
from ingest.config import RunConfig
from ingest.core.decompose import grid_boxes, resolve_grid
from ingest.driver.source import ensure_lifetime, resolve_source
from ingest.errors import ConfigError
from ingest.formats.fits import Layout
from ingest.formats.reader import HeaderTiming, read_layout_timed
from ingest.core.planner import DEFAULT_CHUNK_BYTES, DEFAULT_THREADS, CostModel
from ingest.io.probe import LATENCY_THREADS, PROBE_MIN_DATA_BYTES
from ingest.core.region import box_to_region, normalize, parse_region
from ingest.io.retry import RetryPolicy
from ingest.io.transports import ObjectInfo, Transport, open_transport


@dataclass(frozen=True)
class Settings:
    """Resolved read settings: from the config, or tuned from a probe of the link."""

    strategy: str  # what "auto" resolved to, or the configured strategy
    threads: int
    chunk_bytes: int
    max_gap_bytes: int | None
    cost: CostModel
    tuning: dict | None = None  # probe measurements and the tuner's reasons, for the report


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
    settings: Settings
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


def retry_policy(cfg: RunConfig) -> RetryPolicy:
    return RetryPolicy(retries=cfg.retries, total_s=cfg.retry_total_s, backoff_s=cfg.retry_backoff_s)


def plan_box(cfg: RunConfig, settings: Settings, layout: Layout, box):
    """(selection, plan) for one rank's box with the configured strategy and resolved settings."""
    return plan_read(layout, box_to_region(box), strategy=settings.strategy, chunk_bytes=settings.chunk_bytes,
                     max_gap_bytes=settings.max_gap_bytes, cost=settings.cost)


def _job_box(cfg: RunConfig, layout: Layout) -> tuple:
    """The part of the cube the whole job covers (config `region`, default all of it)."""
    sel = normalize(parse_region(cfg.region) if cfg.region else (), layout.shape)
    if any(step != 1 for step in sel.steps):
        raise ConfigError(f"region: {cfg.region!r} has a step; a job region must be a plain box")
    return sel.box


def _configured(cfg: RunConfig) -> Settings:
    cost = CostModel(latency_s=cfg.latency_s, bandwidth_bytes_per_s=cfg.bandwidth_bytes_per_s)
    return Settings(cfg.strategy, cfg.threads or DEFAULT_THREADS, cfg.chunk_bytes or DEFAULT_CHUNK_BYTES,
                    cfg.max_gap_bytes, cost)


def _tuned(cfg: RunConfig, configured: Settings, transport: Transport, layout: Layout, box,
           ranks_per_node: int, header: HeaderTiming) -> Settings:
    """strategy auto: probe (the rounds that repay themselves) and pick the plan predicted fastest."""
    from ingest.io.autotune import tune_read

    sel = normalize(box_to_region(box), layout.shape)
    tuning, link = tune_read(transport, layout, sel, configured.cost, probe=cfg.probe, chunk_bytes=cfg.chunk_bytes,
                             threads=cfg.threads, gap_bytes=cfg.max_gap_bytes, ranks_sharing=ranks_per_node,
                             header=header)
    return Settings(tuning.strategy, tuning.threads, tuning.chunk_bytes, tuning.max_gap_bytes, tuning.cost,
                    {"probe": link.as_dict() if link else None, **tuning.as_dict()})


def _decompose(cfg: RunConfig, settings: Settings, layout: Layout, n_ranks: int):
    """(grid, reason, boxes) for the job region split among n_ranks."""
    job_box = _job_box(cfg, layout)
    job_shape = tuple(b - a for a, b in job_box)
    grid_fits, reason = resolve_grid(
        job_shape, cfg.grid, n_ranks, layout.itemsize, latency_s=settings.cost.latency_s,
        bandwidth_bytes_per_s=settings.cost.bandwidth_bytes_per_s, chunk_bytes=settings.chunk_bytes,
        threads=settings.threads,
    )
    boxes = tuple(
        tuple((a + s, b + s) for (a, b), (s, _) in zip(box, job_box))
        for box in grid_boxes(job_shape, grid_fits, cfg.halo, n_ranks=n_ranks)
    )
    return grid_fits, reason, boxes


def prepare_job(cfg: RunConfig, n_ranks: int, ranks_per_node: int = 1, staging: bool = False) -> Job:
    """Rank 0: resolve the source, read the header, check there is room to stage (before any
    data moves), probe and tune, decompose the cube, check the URL's lifetime against the
    estimate, check the output directory."""
    method, read_source, signer_args = resolve_source(cfg)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 60.0, cfg)  # enough for header and probe
    settings = _configured(cfg)
    # Sized for the probe's latency round, which reads on LATENCY_THREADS connections at once.
    with open_transport(read_source, method, threads=LATENCY_THREADS, **transport_options(cfg)) as transport:
        layout, header = read_layout_timed(transport, cfg.hdu, retry_policy(cfg))
        info = transport.info
        if staging:
            from ingest.io.stage import check_space

            check_space(cfg.stage_dir, info.object_bytes)
        if cfg.strategy == "auto" and layout.data_bytes >= PROBE_MIN_DATA_BYTES:
            # The grid depends on the link too, so tune for the largest box a first grid gives
            # (decompose puts a largest box at rank 0).
            _, _, boxes = _decompose(cfg, settings, layout, n_ranks)
            settings = _tuned(cfg, settings, transport, layout, boxes[0], ranks_per_node, header)
    grid_fits, reason, boxes = _decompose(cfg, settings, layout, n_ranks)
    estimate_s = max(plan_box(cfg, settings, layout, box)[1].predicted_s(settings.cost, settings.threads)
                     for box in boxes)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 2 * estimate_s + 60.0, cfg)
    if cfg.output_dir:
        from ingest.outputs.subcubes import check_output_dir, output_name

        check_output_dir(cfg.output_dir, [output_name(r, b) for r, b in enumerate(boxes)])
    return Job(read_source, method, layout, info, grid_fits, reason, boxes, settings, signer_args, estimate_s)
