"""The job every rank shares: what rank 0 decides once and broadcasts.

Rank 0 alone reads the header, signs a URL if needed, resolves the read settings (probing the
link with strategy auto: ingest.config.settings) and decomposes the cube (`prepare_job`); the Job
is broadcast, so 25 ranks make one header fetch and one probe, not 25.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

from ingest.api.read import plan_with
from ingest.config import RunConfig
from ingest.config.settings import (Settings, configured_settings, resolve_settings, retry_policy,
                                    settings_for_job, tunable, transport_options)
from ingest.core.decompose import format_grid, grid_boxes, resolve_grid
from ingest.core.history import JobShape, PastJob, with_floors, with_history
from ingest.core.layout import Layout
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.core.regions import assign_regions, parse_min_overlap, parse_region_shape, s2p_regions, take_first
from ingest.core.selection import box_to_region, normalize, parse_region
from ingest.core.sharing import JobPrediction, RankLoad, Topology, predict_job
from ingest.engine import linkcache
from ingest.engine.autotune import data_span, first_look_bytes
from ingest.driver.rootwork import Clock, note_measuring
from ingest.driver.run_tile import run_tile_config
from ingest.driver.source import ensure_lifetime, resolve_source
from ingest.errors import ConfigError
from ingest.formats.reader import read_any_layout_timed
from ingest.transports import ObjectInfo, Transport, open_transport
from ingest.transports.environment import Environment
from ingest.transports.retry import RetryPolicy
from ingest.transports.storefacts import learn_store_facts


@dataclass(frozen=True)
class RegionSource:
    """A region stored as its own object (a tile of a tiled source): read whole, checked against
    its index."""

    source: str  # path, s3:// URI or (presigned) URL of the tile
    size_bytes: int  # the object's size, from the index: no HEAD per tile
    crc32: int  # of its data bytes as stored
    signer_args: tuple | None = None  # (bucket, key, expires_s, endpoint) when ranks may re-sign its URL
    index_name: str = ""  # the index it came from, for messages


@dataclass(frozen=True)
class Job:
    """What rank 0 decides once and broadcasts to every rank."""

    read_source: str  # the source, or the URL rank 0 presigned for it
    method: str
    layout: Layout
    info: ObjectInfo
    grid_fits: tuple[int, ...]  # regions per axis, FITS order
    grid_reason: str
    regions: tuple  # every region's box: ((start, stop), ...) in numpy axis order
    assignment: tuple  # per rank: the indices of the regions it reads, in the order it reads them
    settings: Settings
    signer_args: tuple | None = None  # (bucket, key, expires_s, endpoint) when ranks may re-sign
    estimate_s: float = 0.0  # the cost model's prediction for the slowest rank
    region_sources: tuple | None = None  # per region its own object (a tiled source), else None: read_source
    prediction: JobPrediction | None = None  # the whole job's makespan and the term that binds it
    shared_rounds: tuple = ()  # the probe rounds in which several ranks read at once (SharedRound)
    endpoint: str | None = None  # the store's, as the link cache names it
    shape: JobShape | None = None  # what the endpoint's next job of the same shape learns from this one
    world_region: dict | None = None  # the sky/spectral region asked for, its box and what was clipped
    # The connection settings rank 0 resolved from the config and the AWS files and variables
    # (ingest.transports.environment); every rank opens its transport with them. None: a local file.
    environment: Environment | None = None
    # How each request retries (ingest.config.settings.retry_policy), as rank 0 resolved it: the
    # default number of retries may come from AWS_MAX_ATTEMPTS or a profile, read by botocore.
    retry: RetryPolicy | None = None
    # What the store answered (ingest.transports.storefacts: Server header, stored CRC32, a ranged
    # GET past the end), asked once by rank 0 for the report; None for a local file.
    store: dict | None = None
    # `run --output-dir` of one named region: the one file every rank writes into
    # (ingest.outputs.onefile.OneFile, planned by rank 0); None: a file per rank and region.
    one_file: object | None = None


def rank_transport_options(cfg: RunConfig, method: str, environment: Environment | None) -> dict:
    """open_transport's options on a rank other than 0: the config's, and for a URL the connection
    settings rank 0 resolved (CA, proxy), so the rank reads no AWS file and loads no botocore.
    A rank of the S3 method loads botocore anyway and resolves its own, as a user expects of
    boto3: a site may point each node at its nearest gateway (AWS_ENDPOINT_URL per node)."""
    options = transport_options(cfg)
    if environment is not None and method != "s3":
        options["environment"] = environment
    return options


def remember_job(job: Job, makespan_s: float) -> None:
    """Rank 0, after a direct read: keep its makespan under the endpoint, for the next job of its
    shape to predict with (core/history.py)."""
    if job.shape is not None and makespan_s > 0:
        linkcache.remember(job.endpoint, job=PastJob(job.shape, makespan_s, time.time()))


def plan_box(cfg: RunConfig, settings: Settings, layout: Layout, box):
    """(selection, plan) for one rank's box with the configured strategy and resolved settings."""
    return plan_with(layout, box_to_region(box), settings)


def world_job_box(cfg: RunConfig, layout: Layout):
    """The WorldBox of the config's pos/band/channels, or None when none is given (astropy is
    loaded only then)."""
    if cfg.pos is None and cfg.band is None and cfg.channels is None:
        return None
    from ingest.sky.world import config_world_box

    return config_world_box(cfg, layout)


def _job_box(cfg: RunConfig, layout: Layout) -> tuple:
    """The part of the cube the whole job covers (config `region`, or the box of its world region
    `pos`/`band`/`channels`; default all of it)."""
    world = world_job_box(cfg, layout)
    if world is not None:
        return world.box
    sel = normalize(parse_region(cfg.region) if cfg.region else (), layout.shape)
    if any(step != 1 for step in sel.steps):
        raise ConfigError(f"region: {cfg.region!r} has a step; a job region must be a plain box")
    return sel.box


def decompose_job(cfg: RunConfig, settings: Settings, layout: Layout, n_ranks: int):
    """(grid, reason, regions) for the job region: s2p_setup's regions of region_shape, the
    grid as given (any number of regions), or an automatic grid of one region per rank; with
    take_regions, only the first N of them (weak scaling)."""
    grid_fits, reason, regions = _split_job(cfg, settings, layout, n_ranks)
    if cfg.take_regions is None:
        return grid_fits, reason, regions
    return grid_fits, f"{reason}; the first {cfg.take_regions} of them", take_first(regions, cfg.take_regions)


def _split_job(cfg: RunConfig, settings: Settings, layout: Layout, n_ranks: int):
    job_box = _job_box(cfg, layout)
    if cfg.region_shape is not None:
        shape_fits = parse_region_shape(cfg.region_shape)
        overlap = parse_min_overlap(cfg.min_overlap or "0,0")
        regions = s2p_regions(layout.shape, shape_fits, overlap, job_box)
        grid_fits = tuple(len({box[axis] for box in regions}) for axis in reversed(range(len(layout.shape))))
        reason = (f"{len(regions)} regions of {format_grid(shape_fits)} px by s2p_setup's rule "
                  f"(min overlap {overlap[0]} px spatial, {overlap[1]} px spectral)")
        return grid_fits, reason, regions
    job_shape = tuple(b - a for a, b in job_box)
    grid_fits, reason = resolve_grid(
        job_shape, cfg.grid, n_ranks, layout.itemsize, latency_s=settings.cost.latency_s,
        bandwidth_bytes_per_s=settings.cost.bandwidth_bytes_per_s, chunk_bytes=settings.chunk_bytes,
        threads=settings.threads,
    )
    index = layout.chunks
    chunk_shape = index.chunk_shape if index is not None else None  # cut on chunk boundaries
    regions = tuple(
        tuple((a + s, b + s) for (a, b), (s, _) in zip(box, job_box))
        for box in grid_boxes(job_shape, grid_fits, cfg.halo, chunk_shape=chunk_shape,
                              origin=tuple(a for a, _ in job_box))
    )
    return grid_fits, reason, regions


def box_bytes(box, itemsize: int) -> int:
    """Bytes of one region's box."""
    n = itemsize
    for a, b in box:
        n *= b - a
    return n


def assign(regions, itemsize: int, n_ranks: int, todo=None) -> tuple:
    """Which of `todo` (default all) regions each rank reads: the largest first, balanced by bytes."""
    todo = list(range(len(regions))) if todo is None else list(todo)
    per_rank = assign_regions([box_bytes(regions[i], itemsize) for i in todo], n_ranks)
    return tuple(tuple(todo[k] for k in mine) for mine in per_rank)


def predict(cfg: RunConfig, settings: Settings, layout: Layout, regions, assignment, topology: Topology,
            endpoint: str | None = None, method: str = "") -> tuple[JobPrediction, JobShape]:
    """The whole job's makespan, and the job's shape: every rank reading its regions (one after
    another) at once, on one rank's link as measured alone and the pipes the ranks share
    (core/sharing.py); where `endpoint` ran jobs before, what they moved through a rank and a node
    (floors on its link and pipe) and, of this shape, what they took (core/history.py)."""
    loads = []
    for mine in assignment:
        plans = [plan_box(cfg, settings, layout, regions[i])[1] for i in mine]
        loads.append(RankLoad(sum(p.n_requests for p in plans), sum(p.wire_bytes for p in plans), settings.threads))
    shape = JobShape.of(method, topology, loads, settings.chunk_bytes)
    if not endpoint:
        return predict_job(settings.alone, settings.shared, topology, loads), shape
    past, now_s = linkcache.recall_jobs(endpoint), time.time()
    alone, shared = with_floors(settings.alone, settings.shared, shape, past, now_s)
    prediction = predict_job(alone, shared, topology, loads)
    return with_history(prediction, shape, past, now_s, endpoint, probed=settings.probe is not None), shape


def largest_selection(cfg: RunConfig, settings: Settings, layout: Layout, n_ranks: int):
    """The largest region a first split on `settings` gives: what the job is tuned for (the
    grid depends on the link too, so the split is made again with the tuned settings)."""
    _, _, regions = decompose_job(cfg, settings, layout, n_ranks)
    largest = max(regions, key=lambda box: box_bytes(box, layout.itemsize))
    return normalize(box_to_region(largest), layout.shape)


def tune_for_job(cfg: RunConfig, transport: Transport, layout: Layout, header, topology: Topology, crew,
                 read_source: str, method: str, sel=None) -> tuple[Settings, tuple]:
    """Rank 0: probe its link and tune for `sel`, by default the largest region a first split
    gives (the grid depends on the link too); then, with other ranks at hand, measure what they
    share when they read at once and tune again for that. (settings, the shared rounds)."""
    if sel is None:
        sel = largest_selection(cfg, configured_settings(cfg), layout, topology.n_ranks)
    settings = resolve_settings(cfg, transport, layout, sel, header=header, topology=topology)
    if settings.probe is not None:  # measuring the link, not rank 0's own work (ingest.driver.rootwork)
        # Its CPU is not known apart from the tuning around it, so stays charged to rank 0's own.
        note_measuring(settings.probe.probe_s, 0.0)
    # --no-probe means no read before the job's own: not a look across nodes either.
    look_bytes = across_nodes_bytes(settings, layout, sel, topology) if cfg.probe else 0
    # No ranks at hand, or a read too small to repay a probe, and no nodes to look across.
    if crew is None or (settings.probe is None and not look_bytes):
        return settings, ()
    from ingest.driver.probe_rounds import SHARED_BUDGET_FRACTION, measure_shared

    # What the ranks share was measured on this endpoint before, and measuring it again costs
    # more than its budget of this job (the rounds' start-up and barriers, which sizing their
    # bytes does not count): the job is priced with what was measured (tune_read took it from the cache).
    # (Only rounds set rounds_s, and only the cache brings one back before this job's own rounds.)
    budget_s = SHARED_BUDGET_FRACTION * settings.tuning.predicted_s
    if not look_bytes and settings.shared is not None and settings.shared.rounds_s > budget_s:
        return settings, ()
    options = rank_transport_options(cfg, method, transport.environment)
    clock = Clock()
    measured = measure_shared(crew, topology, settings, source=read_source, method=method,
                              options=options, info=transport.info, span=data_span(layout),
                              predicted_s=settings.tuning.predicted_s, look_bytes=look_bytes)
    wall_s, cpu_s = clock.elapsed()
    note_measuring(wall_s, cpu_s)
    if measured is None:
        return settings, ()
    shared, alone, rounds = measured
    shared = replace(shared, rounds_s=wall_s)
    linkcache.remember(transport.endpoint, shared=shared)
    return settings_for_job(cfg, settings, layout, sel, shared, topology, alone=alone), rounds


def across_nodes_bytes(settings: Settings, layout: Layout, sel, topology: Topology) -> int:
    """What one rank on each node reads in a look across nodes (ingest.driver.probe_rounds.
    measure_shared): as much as a first look at the endpoint would; 0 for a job on one node, one
    whose nodes a round has already had reading at once, or one the config planned."""
    if topology.n_nodes < 2 or settings.tuning is None or settings.shared.nodes_seen >= topology.n_nodes:
        return 0
    return first_look_bytes(settings.tuning, settings.cost, layout, sel, topology.n_ranks)


def prepare_job(cfg: RunConfig, topology: Topology, staging: bool = False, rank_outputs: bool = True,
                crew=None, room=None) -> Job:
    """Rank 0: resolve the source, read the header, check there is room to stage (before any
    data moves; `room(job_bytes)`, if given, checks the caller's own output for the job box's
    bytes), probe and tune (with `crew`, the other ranks waiting in ingest.driver.probe_rounds,
    also what they share), decompose the cube, predict the job, check the URL's lifetime
    against the prediction, check the output directory."""
    cfg = run_tile_config(cfg)  # a collection of tiles: the tile the rule picks for the region
    n_ranks = topology.n_ranks
    method, read_source, signer_args = resolve_source(cfg)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 60.0, cfg)  # enough for header and probe
    settings = configured_settings(cfg)
    # Sized for the probe's latency round, which reads on LATENCY_THREADS connections at once.
    with open_transport(read_source, method, threads=LATENCY_THREADS, **transport_options(cfg)) as transport:
        layout, header = read_any_layout_timed(transport, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg),
                                               tiles=True)
        info, endpoint, environment = transport.info, transport.endpoint, transport.environment
        tiled = layout.kind == "tiles"
        if staging and not tiled:
            from ingest.staging.stage import check_space

            check_space(cfg.stage_dir, info.object_bytes)
        if room is not None and not tiled:
            room(box_bytes(_job_box(cfg, layout), layout.itemsize))
        # 1-2 small read-only requests, once rather than on every rank (--no-probe skips the GET),
        # and only for a job that goes ahead: a refused one reads nothing but its header.
        store = learn_store_facts(transport, past_end=cfg.probe).as_dict() if transport.name != "posix" else None
        rounds = ()
        if not tiled and tunable(cfg, layout):
            settings, rounds = tune_for_job(cfg, transport, layout, header, topology, crew, read_source, method)
    if tiled:
        if staging or not rank_outputs:
            raise ConfigError(f"source: {transport.display_name} is a tile index ({len(layout.tiles)} objects); "
                              f"`run` reads it, while staging and prestage copy one object: give them the cube "
                              f"it was tiled from ({layout.source})")
        return replace(_tiled_job(cfg, layout, transport.display_name, read_source, method, info, signer_args,
                                  settings, n_ranks), environment=environment, retry=retry_policy(cfg), store=store)
    grid_fits, reason, regions = decompose_job(cfg, settings, layout, n_ranks)
    assignment = assign(regions, layout.itemsize, n_ranks)
    prediction, shape = predict(cfg, settings, layout, regions, assignment, topology, endpoint, method)
    estimate_s = prediction.makespan_s
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 2 * estimate_s + 60.0, cfg)
    world = world_job_box(cfg, layout)
    one_file = None
    if cfg.output_dir and rank_outputs:  # `run --output-dir`
        one_file = plan_outputs(cfg, layout, world.box if world is not None else _job_box(cfg, layout), regions,
                                assignment)
    return Job(read_source, method, layout, info, grid_fits, reason, regions, assignment, settings, signer_args,
               estimate_s, prediction=prediction, shared_rounds=rounds, endpoint=endpoint, shape=shape,
               world_region=world.as_dict() if world is not None else None, environment=environment,
               retry=retry_policy(cfg), store=store, one_file=one_file)


def plan_outputs(cfg: RunConfig, layout: Layout, job_box, regions, assignment):
    """Rank 0, `run --output-dir`: the one file of the job's region when the config names one
    region (ingest.outputs.onefile.one_file_wanted), else None and a cut-out per rank and region;
    the directory made ready for this run's names either way."""
    from ingest.outputs.onefile import one_file_wanted, plan_one_file
    from ingest.outputs.subcubes import check_output_dir, output_ext, output_name

    if one_file_wanted(cfg):
        one = plan_one_file(cfg.output_dir, layout, job_box)
        check_output_dir(cfg.output_dir, [os.path.basename(one.path)])
        return one
    check_output_dir(cfg.output_dir, [output_name(r, regions[i], output_ext(layout))
                                      for r, mine in enumerate(assignment) for i in mine])
    return None


def _tiled_job(cfg: RunConfig, index, index_name: str, read_source: str, method: str, info: ObjectInfo,
               signer_args, settings: Settings, n_ranks: int) -> Job:
    """Rank 0, for a tile index: the regions ARE the tiles (the first take_regions of them), each
    read whole from its own object. Tile 0's header stands for the cube's (report, scaling,
    cut-outs). No probe: a tile is read whole, so there is no gap or strategy to tune."""
    from ingest.core.tiles import check_run_config, expected_tile, tile_estimate_s
    from ingest.driver.source import resolve_tile_sources
    from ingest.formats.reader import read_any_layout, whole_cube_layout

    check_run_config(index, index_name, grid=cfg.grid, halo=cfg.halo, region=cfg.region,
                     region_shape=cfg.region_shape, hdu=cfg.hdu, dataset=cfg.dataset)
    tiles = index.tiles if cfg.take_regions is None else take_first(index.tiles, cfg.take_regions)
    located = resolve_tile_sources(cfg, [t.key for t in tiles])
    with open_tile(located[0][0], method, tiles[0].size_bytes, index_name, threads=1,
                   **transport_options(cfg)) as transport:
        first = read_any_layout(transport, dataset=index.dataset, retry=retry_policy(cfg))
        expected_tile(tiles[0].box, transport.display_name, first.shape, first.raw_dtype, index.dtype)
    layout = whole_cube_layout(first, index, index_name)
    regions = tuple(t.box for t in tiles)
    assignment = assign(regions, layout.itemsize, n_ranks)
    estimate_s = max((sum(tile_estimate_s(tiles[i], settings.cost, settings.threads, settings.chunk_bytes)
                          for i in mine) for mine in assignment), default=0.0)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 2 * estimate_s + 60.0, cfg)
        located = tuple((ensure_lifetime(url, args, 2 * estimate_s + 60.0, cfg), args) for url, args in located)
    sources = tuple(RegionSource(src, t.size_bytes, t.crc32, args, index_name)
                    for (src, args), t in zip(located, tiles))
    reason = (f"{len(index.tiles)} tiles of grid {format_grid(index.grid_fits)} as tiled, each read whole as its "
              f"own object" + (f"; the first {len(tiles)} of them" if cfg.take_regions is not None else ""))
    if cfg.output_dir:
        from ingest.outputs.subcubes import check_output_dir, output_ext, output_name

        check_output_dir(cfg.output_dir, [output_name(r, regions[i], output_ext(layout))
                                          for r, mine in enumerate(assignment) for i in mine])
    return Job(read_source, method, layout, info, index.grid_fits, reason, regions, assignment, settings, signer_args,
               estimate_s, sources)


def open_tile(source: str, method: str, size_bytes: int, index_name: str, **options) -> Transport:
    """A tile's transport. Over a network the index's size stands for a HEAD (one request less
    per tile; a wrong size shows as a short read, and changed data by its CRC); a local file is
    stat'ed, which is free, and checked against the index."""
    from ingest.core.tiles import TileIndexError

    transport = open_transport(source, method, **options)
    if method != "posix":
        transport.adopt(ObjectInfo(size_bytes))
    elif transport.object_bytes != size_bytes:
        transport.close()
        raise TileIndexError(f"{transport.display_name}: is {transport.object_bytes:,} bytes but {index_name} "
                             f"says {size_bytes:,}; the tile or the index is stale")
    return transport
