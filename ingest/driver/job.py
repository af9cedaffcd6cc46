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
from ingest.config.settings import ReadOptions, Settings, read_options, tunable, transport_options
from ingest.core.decompose import format_grid, grid_boxes, resolve_grid
from ingest.core.history import JobShape, PastJob, with_floors, with_history
from ingest.core.layout import Layout
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.core.regions import assign_regions, parse_min_overlap, parse_region_shape, s2p_regions, take_first
from ingest.core.selection import box_to_region, normalize, parse_region
from ingest.core.sharing import JobPrediction, RankLoad, Topology, predict_job
from ingest.engine import linkcache
from ingest.driver.run_tile import run_tile_config
from ingest.driver.source import ensure_lifetime, job_source
from ingest.driver.tune import tune, with_environment
from ingest.errors import ConfigError
from ingest.formats.reader import HeaderTiming, read_any_layout_timed
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


@dataclass(frozen=True)
class Cube:
    """What rank 0 learns of the source by opening it and reading its header (`read_cube`)."""

    layout: Layout
    header: HeaderTiming  # the header request's timing: the tuner's free first look at the link
    info: ObjectInfo
    endpoint: str | None  # the store's, as the link cache names it
    environment: Environment | None  # the connection settings rank 0 resolved; None: a local file
    display_name: str  # the source as messages show it

    @property
    def tiled(self) -> bool:
        return self.layout.kind == "tiles"


@dataclass(frozen=True)
class JobRegion:
    """The part of the cube a job covers (`resolve_region`)."""

    box: tuple  # ((start, stop), ...) in numpy axis order
    world: object | None = None  # its WorldBox (ingest.sky.pixels) when pos/band/channels gave it, else None


def rank_transport_options(cfg: RunConfig, method: str, environment: Environment | None) -> dict:
    """open_transport's options on a rank other than 0 (`with_environment` of the config's)."""
    return with_environment(transport_options(cfg), method, environment)


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
    loaded only then). The sky is handed the values, not the config."""
    if cfg.pos is None and cfg.band is None and cfg.channels is None:
        return None
    from ingest.sky.world import world_region_box

    return world_region_box(layout, pos=cfg.pos, band=cfg.band, channels=cfg.channels, frame=cfg.frame,
                            convention=cfg.velocity_convention, rest=cfg.rest_frequency)


def resolve_region(cfg: RunConfig, layout: Layout) -> JobRegion:
    """Phase: the part of the cube the whole job covers: the box of the world region
    `pos`/`band`/`channels`, else the pixel `region` (a plain box: no step), else all of it.
    Resolved once; every later phase takes the box."""
    world = world_job_box(cfg, layout)
    if world is not None:
        return JobRegion(world.box, world)
    sel = normalize(parse_region(cfg.region) if cfg.region else (), layout.shape)
    if any(step != 1 for step in sel.steps):
        raise ConfigError(f"region: {cfg.region!r} has a step; a job region must be a plain box")
    return JobRegion(sel.box)


def decompose_job(cfg: RunConfig, settings: Settings, layout: Layout, n_ranks: int, job_box: tuple | None = None):
    """Phase: (grid, reason, regions) for the job's box (default: `resolve_region`'s):
    s2p_setup's regions of region_shape, the grid as given (any number of regions), or an
    automatic grid of one region per rank; with take_regions, only the first N of them (weak
    scaling)."""
    if job_box is None:
        job_box = resolve_region(cfg, layout).box
    grid_fits, reason, regions = _split_job(cfg, settings, layout, n_ranks, job_box)
    if cfg.take_regions is None:
        return grid_fits, reason, regions
    return grid_fits, f"{reason}; the first {cfg.take_regions} of them", take_first(regions, cfg.take_regions)


def _split_job(cfg: RunConfig, settings: Settings, layout: Layout, n_ranks: int, job_box: tuple):
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


def largest_selection(cfg: RunConfig, settings: Settings, layout: Layout, n_ranks: int, job_box: tuple | None = None):
    """The largest region a first split on `settings` gives: what the job is tuned for (the
    grid depends on the link too, so the split is made again with the tuned settings)."""
    _, _, regions = decompose_job(cfg, settings, layout, n_ranks, job_box)
    largest = max(regions, key=lambda box: box_bytes(box, layout.itemsize))
    return normalize(box_to_region(largest), layout.shape)


def tune_for_job(cfg: RunConfig, transport: Transport, layout: Layout, header, topology: Topology, crew,
                 read_source: str, method: str, sel=None) -> tuple[Settings, tuple]:
    """`tune` for a caller holding the config (the cut-outs): its options read here, and `sel`
    by default the largest region a first split gives."""
    options = read_options(cfg)
    if sel is None:
        sel = largest_selection(cfg, options.configured, layout, topology.n_ranks)
    return tune(options, transport, layout, header, topology, crew, read_source, method, sel)


def prepare_job(cfg: RunConfig, topology: Topology, staging: bool = False, rank_outputs: bool = True,
                crew=None, room=None) -> Job:
    """Rank 0: the job, one named phase after another. The config's read options are resolved
    once (ingest.config.settings.read_options) and passed whole; each phase takes what it needs
    and returns a value. Every check that can refuse the job runs before any data moves.

    `staging`: the source is copied to stage_dir (room checked); `rank_outputs`: each rank writes
    its regions (`run --output-dir`); `crew`: the other ranks, waiting in
    ingest.driver.probe_rounds to measure what they share; `room(job_bytes)`: the caller's own
    check of its output for the job box's bytes."""
    cfg = run_tile_config(cfg)  # a collection of tiles: the tile the rule picks for the region
    options = read_options(cfg)
    method, read_source, signer_args = job_source(cfg)
    # Sized for the probe's latency round, which reads on LATENCY_THREADS connections at once.
    with open_transport(read_source, method, threads=LATENCY_THREADS, **options.transport) as transport:
        cube = read_cube(transport, cfg.hdu, cfg.dataset, options.retry)
        if cube.tiled:
            check_tiled(cube, staging, rank_outputs)
            store = learn_store(transport, options.probe)
            return replace(tiled_job(cfg, options, cube, read_source, method, signer_args, topology.n_ranks),
                           environment=cube.environment, retry=options.retry, store=store)
        region = resolve_region(cfg, cube.layout)
        check_room(cube, region, staging, cfg.stage_dir, room)
        store = learn_store(transport, options.probe)
        settings, rounds = options.configured, ()
        if tunable(options, cube.layout):
            sel = largest_selection(cfg, settings, cube.layout, topology.n_ranks, region.box)
            settings, rounds = tune(options, transport, cube.layout, cube.header, topology, crew, read_source, method,
                                    sel)
    layout, n_ranks = cube.layout, topology.n_ranks
    grid_fits, reason, regions = decompose_job(cfg, settings, layout, n_ranks, region.box)
    assignment = assign(regions, layout.itemsize, n_ranks)
    prediction, shape = predict(cfg, settings, layout, regions, assignment, topology, cube.endpoint, method)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, run_lifetime_s(prediction.makespan_s))
    one_file = plan_outputs(cfg, layout, region.box, regions, assignment) if cfg.output_dir and rank_outputs else None
    return Job(read_source, method, layout, cube.info, grid_fits, reason, regions, assignment, settings, signer_args,
               prediction.makespan_s, prediction=prediction, shared_rounds=rounds, endpoint=cube.endpoint, shape=shape,
               world_region=region.world.as_dict() if region.world is not None else None,
               environment=cube.environment, retry=options.retry, store=store, one_file=one_file)


def read_cube(transport: Transport, hdu: int, dataset: str | None, retry: RetryPolicy) -> Cube:
    """Phase: the source's layout and header, read once on rank 0 (a tile index too), with what
    the open transport knows of the object and the store."""
    layout, header = read_any_layout_timed(transport, hdu=hdu, dataset=dataset, retry=retry, tiles=True)
    return Cube(layout, header, transport.info, transport.endpoint, transport.environment, transport.display_name)


def check_tiled(cube: Cube, staging: bool, rank_outputs: bool) -> None:
    """Phase, a tile index: only `run` reads one; staging and prestage copy one object and are
    pointed at the cube it was tiled from."""
    if staging or not rank_outputs:
        raise ConfigError(f"source: {cube.display_name} is a tile index ({len(cube.layout.tiles)} objects); "
                          f"`run` reads it, while staging and prestage copy one object: give them the cube "
                          f"it was tiled from ({cube.layout.source})")


def check_room(cube: Cube, region: JobRegion, staging: bool, stage_dir: str | None, room=None) -> None:
    """Phase, before any data moves: room in stage_dir for the whole object when staging, and
    `room(job_bytes)`, the caller's check of its own output for the job box's bytes."""
    if staging:
        from ingest.staging.stage import check_space

        check_space(stage_dir, cube.info.object_bytes)
    if room is not None:
        room(box_bytes(region.box, cube.layout.itemsize))


def learn_store(transport: Transport, probe: bool) -> dict | None:
    """Phase: what the store answers (ingest.transports.storefacts): 1-2 small read-only requests,
    once rather than on every rank (no probe: no GET), and only for a job that goes ahead, so a
    refused one reads nothing but its header. None for a local file."""
    return learn_store_facts(transport, past_end=probe).as_dict() if transport.name != "posix" else None


def run_lifetime_s(estimate_s: float) -> float:
    """How long a presigned URL must live for a job predicted to take `estimate_s`: twice the
    prediction and a minute (the prediction may be optimistic)."""
    return 2 * estimate_s + 60.0


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


def tiled_job(cfg: RunConfig, options: ReadOptions, cube: Cube, read_source: str, method: str, signer_args,
              n_ranks: int) -> Job:
    """Phase, rank 0, for a tile index: the regions ARE the tiles (the first take_regions of them), each
    read whole from its own object. Tile 0's header stands for the cube's (report, scaling,
    cut-outs). No probe: a tile is read whole, so there is no gap or strategy to tune."""
    from ingest.core.tiles import check_run_config, expected_tile, tile_estimate_s
    from ingest.driver.source import resolve_tile_sources
    from ingest.formats.reader import read_any_layout, whole_cube_layout

    index, index_name, settings = cube.layout, cube.display_name, options.configured
    check_run_config(index, index_name, grid=cfg.grid, halo=cfg.halo, region=cfg.region,
                     region_shape=cfg.region_shape, hdu=cfg.hdu, dataset=cfg.dataset)
    tiles = index.tiles if cfg.take_regions is None else take_first(index.tiles, cfg.take_regions)
    located = resolve_tile_sources(cfg, [t.key for t in tiles])
    with open_tile(located[0][0], method, tiles[0].size_bytes, index_name, threads=1,
                   **options.transport) as transport:
        first = read_any_layout(transport, dataset=index.dataset, retry=options.retry)
        expected_tile(tiles[0].box, transport.display_name, first.shape, first.raw_dtype, index.dtype)
    layout = whole_cube_layout(first, index, index_name)
    regions = tuple(t.box for t in tiles)
    assignment = assign(regions, layout.itemsize, n_ranks)
    estimate_s = max((sum(tile_estimate_s(tiles[i], settings.cost, settings.threads, settings.chunk_bytes)
                          for i in mine) for mine in assignment), default=0.0)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, run_lifetime_s(estimate_s))
        located = tuple((ensure_lifetime(url, args, run_lifetime_s(estimate_s)), args) for url, args in located)
    sources = tuple(RegionSource(src, t.size_bytes, t.crc32, args, index_name)
                    for (src, args), t in zip(located, tiles))
    reason = (f"{len(index.tiles)} tiles of grid {format_grid(index.grid_fits)} as tiled, each read whole as its "
              f"own object" + (f"; the first {len(tiles)} of them" if cfg.take_regions is not None else ""))
    if cfg.output_dir:
        from ingest.outputs.subcubes import check_output_dir, output_ext, output_name

        check_output_dir(cfg.output_dir, [output_name(r, regions[i], output_ext(layout))
                                          for r, mine in enumerate(assignment) for i in mine])
    return Job(read_source, method, layout, cube.info, index.grid_fits, reason, regions, assignment, settings, signer_args,
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
