"""Read settings, resolved once: a config, a transport, a layout and a selection -> `Settings`.

The config is read here once, into `ReadOptions` (`read_options(cfg)`): what opening, retrying
and tuning a read need of it. Everything below the command that holds the config takes that
object whole, as s3transfer's tasks take one TransferConfig, so no lower layer is handed the
RunConfig to pick fields from.

The driver (rank 0, then broadcast), `ingest.open` (per box shape, reusing what the first probe
measured), `plan` and `info` all resolve here, so a setting means the same thing everywhere:
what the config fixes is kept, and with strategy auto the tuner chooses the rest, probing the
link when the read is large enough to repay it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ingest.config.run import RunConfig
from ingest.core.cost import CostModel
from ingest.core.lattice import DEFAULT_CHUNK_BYTES, DEFAULT_THREADS
from ingest.core.layout import Layout
from ingest.core.linkprobe import LinkProbe
from ingest.core.selection import Selection
from ingest.core.sharing import SharedCapacity, Topology, share_cost
from ingest.core.tuning import THREADS_MAX, Tuning, choose, describe_probe, said_first_look
from ingest.engine.autotune import tune_read, worth_probing
from ingest.formats.reader import HeaderTiming
from ingest.transports.base import Transport
from ingest.transports.retry import RetryPolicy

# Where a cost model reused for a later box came from, as the tuner's reason names it.
MEASURED_ONCE = "the link as measured once for this cube"


@dataclass(frozen=True)
class Settings:
    """The values one read uses: the config's where it fixes them, the tuner's where it says auto."""

    strategy: str  # what "auto" resolved to, or the configured strategy
    threads: int  # requests in flight
    chunk_bytes: int  # largest single request
    max_gap_bytes: int | None  # None: the cost model's break-even gap
    cost: CostModel
    tuning: Tuning | None = None  # the tuner's choice and reasons; None when configured
    probe: LinkProbe | None = None  # what a probe measured, when one ran

    @property
    def alone(self) -> CostModel:
        """One rank's link as it reads alone; `cost` is its share of what the job's ranks share."""
        return self.tuning.alone if self.tuning is not None and self.tuning.alone is not None else self.cost

    @property
    def shared(self) -> SharedCapacity:
        """What the job's ranks share, as far as it is known."""
        return self.tuning.shared if self.tuning is not None and self.tuning.shared is not None else SharedCapacity()

    def report_dict(self) -> dict | None:
        """The tuner's account for the report (probe measurements and reasons), None if configured."""
        if self.tuning is None:
            return None
        return {"probe": self.probe.as_dict() if self.probe else None, **self.tuning.as_dict()}


@dataclass(frozen=True)
class ReadOptions:
    """What a read needs of the config, resolved once (`read_options`)."""

    transport: dict  # open_transport's keyword arguments: timeouts, TLS, endpoint, engine
    retry: RetryPolicy  # how each request retries
    configured: Settings  # the settings with nothing tuned: the config's, the planner's defaults for auto
    strategy: str  # the configured strategy; "auto" lets the tuner choose
    probe: bool  # may the tuner probe the link (and rank 0 ask the store its facts)
    fixed: dict  # what the config fixes of a tuned read: chunk_bytes, threads, gap_bytes (None: tuned)
    max_in_flight: int | None  # most requests the tuner may keep in flight; None: its own ceiling


def read_options(cfg: RunConfig) -> ReadOptions:
    """The config's read options, resolved once for everything below the command."""
    return ReadOptions(transport_options(cfg), retry_policy(cfg), configured_settings(cfg), cfg.strategy, cfg.probe,
                       _fixed_by_config(cfg), cfg.max_in_flight)


def configured_cost(cfg: RunConfig) -> CostModel:
    """The cost model the config states (seed 001's Acacia figures by default)."""
    return CostModel(latency_s=cfg.latency_s, bandwidth_bytes_per_s=cfg.bandwidth_bytes_per_s,
                     cpu_per_request_s=cfg.cpu_per_request_s)


def configured_settings(cfg: RunConfig, cost: CostModel | None = None) -> Settings:
    """The settings with nothing tuned: the config's values, the planner's defaults for auto."""
    return Settings(cfg.strategy, cfg.threads or DEFAULT_THREADS, cfg.chunk_bytes or DEFAULT_CHUNK_BYTES,
                    cfg.max_gap_bytes, cost or configured_cost(cfg))


def tunable(options: ReadOptions, layout: Layout) -> bool:
    """Does the tuner choose anything here? Only with strategy auto, and only for data that a
    request reads at all (compact or never-written HDF5 data needs none)."""
    return options.strategy == "auto" and worth_probing(layout)


def resolve_settings(options: ReadOptions, transport: Transport, layout: Layout, sel: Selection, *,
                     cost: CostModel | None = None, header: HeaderTiming | None = None,
                     topology: Topology | None = None, measured: CostModel | None = None) -> Settings:
    """The settings for reading `sel` of `layout` through `transport`, as `options` allow.

    cost: the model to start from (default: the config's); header: the header request's timing,
    the tuner's free first look at the link (None when the caller's model must stand as given);
    topology: the job's ranks on their nodes (default one rank); measured: a model an earlier probe of
    this link measured, reused without probing again."""
    configured = options.configured if cost is None else replace(options.configured, cost=cost)
    if not tunable(options, layout):
        return configured
    if measured is not None:
        return _from_tuning(choose(measured, layout, sel, model=MEASURED_ONCE, **options.fixed))
    tuning, link = tune_read(transport, layout, sel, configured.cost, probe=options.probe, topology=topology,
                             header=header, in_flight_max=options.max_in_flight, **options.fixed)
    return _from_tuning(tuning, link)


def settings_for_job(options: ReadOptions, settings: Settings, layout: Layout, sel: Selection, shared: SharedCapacity,
                     topology: Topology, alone: CostModel | None = None) -> Settings:
    """`settings` chosen again for what the job's ranks were measured to share (the probe of one
    rank's link kept, or `alone`, that link as the ranks' rounds showed it): each rank's share
    of the shared pipes prices the plans."""
    if settings.tuning is None:
        return settings
    alone = alone or settings.alone
    shared_text = f"{topology.describe()}, shared pipes {shared.source}"
    looked_bytes = settings.tuning.first_look_bytes
    model = (said_first_look(describe_probe(settings.probe, alone, shared_text), looked_bytes > 0) if settings.probe
             else f"{settings.tuning.model}; {shared_text}")
    tuning = choose(share_cost(alone, shared, topology), layout, sel, model=model, **options.fixed,
                    threads_max=options.max_in_flight or max(settings.threads, THREADS_MAX))
    return _from_tuning(replace(tuning, alone=alone, shared=shared, first_look_bytes=looked_bytes), settings.probe)


def _fixed_by_config(cfg: RunConfig) -> dict:
    """What the config fixes of a tuned read (None: the tuner chooses)."""
    return {"chunk_bytes": cfg.chunk_bytes, "threads": cfg.threads, "gap_bytes": cfg.max_gap_bytes}


def _from_tuning(tuning: Tuning, link: LinkProbe | None = None) -> Settings:
    return Settings(tuning.strategy, tuning.threads, tuning.chunk_bytes, tuning.max_gap_bytes, tuning.cost, tuning,
                    link)


def transport_options(cfg: RunConfig) -> dict:
    """Transport keyword arguments from the config (timeouts, TLS, endpoint, engine)."""
    opts = {
        "connect_timeout_s": cfg.connect_timeout_s,
        "read_timeout_s": cfg.read_timeout_s,
        "verify_tls": cfg.verify_tls,
        "ca_bundle": cfg.ca_bundle,
        "engine": cfg.engine,
    }
    if cfg.endpoint_url:
        opts["endpoint_url"] = cfg.endpoint_url
    return opts


def retry_policy(cfg: RunConfig) -> RetryPolicy:
    """How each request retries transient faults, from the config (retries: RunConfig.resolved_retries)."""
    return RetryPolicy(retries=cfg.resolved_retries[0], total_s=cfg.retry_total_s, backoff_s=cfg.retry_backoff_s)
