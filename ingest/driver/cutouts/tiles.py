"""A catalogue's cut-outs over a collection of tile cubes (ingest.collection): rank 0's part and each rank's.

Rank 0 opens the collection (through its index), reads the catalogue once and asks the tile rule
(ingest.collection.place) which tile each source is cut from and its box there; a source off
every tile is skipped with the rule's reason. Each source's request (sources.Requests)
carries its tile's identity (key, size, ETag or mtime), so a replaced tile re-cuts its sources
and only them. A catalogue's pixel boxes (`bbox` sizes) are refused: they name pixels of one cube.

The work of all tiles is one list of (tile, source) items, in the collection's tile order and,
within a tile, in object order along its band axis, split over the ranks in contiguous stretches
of about equal bytes (core.cutplan.split_by_bytes over each cut-out's bytes). A rank may so cut
from several tiles in turn, each through its own transport and layout, and a tile with one source
costs one source, not a tile's start-up on every rank. Each rank's stretch of one tile is cut by
the single-cube path (cutout_rank.cut_rank) with the rank's band budget, one tile after the other,
into one RankOutput per rank (one sink, journal, publish thread; a group's sync spans tiles and a
tile's last group is published while the next tile is read): memory stays within
cutout_batch_bytes.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mpi4py import MPI

from ingest.config import RunConfig
from ingest.config.settings import configured_settings, retry_policy, transport_options, tunable
from ingest.core.cutplan import box_bytes, box_selection, rank_share_box, source_order, split_by_bytes
from ingest.core.cutstripes import band_axis
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.driver.cutouts import sinks
from ingest.driver.cutouts.job import Catalogue, CutoutJob, gap_bytes
from ingest.driver.cutouts.rank import RankOutput, cut_rank
from ingest.driver.cutouts.sources import CutoutSource, Requests, _rest_hz, job_catalogue
from ingest.driver.mpi import Handout
from ingest.errors import ConfigError
from ingest.outputs import cutouts as outputs

HEADER_THREADS = 16  # tiles opened at once by rank 0 for their layouts


@dataclass(frozen=True)
class TileSource(CutoutSource):
    """A CutoutSource cut from one tile of a collection: its manifest and journal entries name the tile."""

    tile: dict | None = None  # Tile.identity() of the tile the rule picked; None when off every tile

    def entry(self, file, nbytes, crc32, **extra) -> dict:
        return {**super().entry(file, nbytes, crc32, **extra), "tile": self.tile}


@dataclass(frozen=True)
class TilesJob:
    """What rank 0 decides once for a collection and broadcasts: one CutoutJob per tile with
    cut-outs to make now (by the tile's index in the collection), and what the report and
    manifest say of the collection. Each rank's share is a list of (tile index, its sources)."""

    jobs: dict  # tile index -> driver.cutouts.job.CutoutJob
    collection: dict  # the manifest's `cube`: the collection's spec, with no identity of its own
    tiles: tuple  # per tile: {"name", "etag", "last_modified", "object_bytes", "sources", "todo"}
    settings: object
    max_gap_bytes: int
    n_todo: int
    plan_choice: str
    topology: object
    split_axis: int = 0
    notes: tuple = ()

    def report_cube(self) -> dict:
        return {"collection": self.collection["name"], "tiles": list(self.tiles), "notes": list(self.notes)}

    def manifest_cube(self) -> dict:
        return self.collection

    @property
    def data_bytes(self) -> int:
        return sum(t["object_bytes"] for t in self.tiles)


def tile_sources(cfg: RunConfig, collection) -> tuple[list[TileSource], list, dict]:
    """Every catalogue row as a TileSource (its box in the tile the rule picks, its request with
    that tile's identity), the rule's Choice of each (None: a row with no usable region), and the
    job's part of every request as the manifest's head records it."""
    from ingest.collection.place import place_requests
    from ingest.sky.sources import cutout_requests

    catalogue, size = job_catalogue(cfg)
    tiles = collection.tiles
    rest_hz = _rest_hz(cfg, tiles[0].header())  # the config's, else the first tile's (a survey's tiles share it)
    requests = cutout_requests(catalogue, size, rest_hz=rest_hz)
    if any(r.skip_reason is None and r.pos is None for r in requests):
        raise ConfigError(f"size: {size.describe()!r} names pixels of one cube (SoFiA-2's bounding box); over the "
                          f"collection {cfg.source!r} give a size on the sky and in the spectrum, e.g. "
                          f"--size '1arcmin 150kHz', or columns 'column:RADIUS,column:HALFWIDTH'")
    common = {"hdu": cfg.hdu, "dataset": cfg.dataset, "size": size.describe(), "frame": catalogue.frame,
              "spectral_convention": catalogue.spectral_convention, "rest_hz": rest_hz}
    made = [Requests({**common, "cube": t.identity(), "format": t.kind, "ext": _ext(t.kind)}) for t in tiles]
    world = [r for r in requests if r.skip_reason is None]
    choices = dict(zip((r.row for r in world), place_requests(tiles, [r.pos for r in world], [r.band for r in world])))
    out = []
    for r in requests:
        choice = choices.get(r.row)
        if choice is None or choice.tile is None:
            reason = r.skip_reason if choice is None else choice.reason
            out.append(TileSource(r.name, r.file_stem, r.row, None, skip_reason=reason,
                                  region_text=_region_text(r) if r.pos is not None else ""))
            continue
        tile, box, text = tiles[choice.tile], choice.placement.box, _region_text(r)
        out.append(TileSource(r.name, r.file_stem, r.row, box, choice.placement.clipped, None, text,
                              made[choice.tile].digest(r.name, box, text), tile.identity()))
    return out, [choices.get(r.row) for r in requests], {**common, "cube": {"collection": cfg.source}}


def _region_text(r) -> str:
    return r.pos.describe() + (f" {r.band.describe()}" if r.band is not None else "")


def _ext(kind: str) -> str:
    return ".h5" if kind == "hdf5" else ".fits"


def collection_cube(cfg: RunConfig) -> dict:
    """The manifest's `cube` for a collection: its spec, with no size or ETag of its own (each
    source's tile is in its request and entry), so a re-run over changed tiles is no other cube."""
    return {"name": cfg.source, "object_bytes": None, "etag": None, "last_modified": None}


def open_tiles(cfg: RunConfig, tiles, method: str) -> list[tuple]:
    """(layout, header, info) of each tile, HEADER_THREADS at a time."""
    from ingest.formats.reader import read_any_layout_timed
    from ingest.transports import open_transport

    def one(tile):
        with open_transport(tile.source, method, threads=LATENCY_THREADS, **transport_options(cfg)) as transport:
            layout, header = read_any_layout_timed(transport, hdu=cfg.hdu, dataset=cfg.dataset,
                                                   retry=retry_policy(cfg))
            return layout, header, transport.info

    with ThreadPoolExecutor(max(1, min(HEADER_THREADS, len(tiles)))) as pool:
        return list(pool.map(one, tiles))


def prepare_tiles(cfg: RunConfig, topology, crew=None) -> Handout:
    """Rank 0 for a collection (module docstring): the TilesJob for all, each rank's list of
    (tile index, sources in object order), and the driver.cutouts.job.Catalogue for rank 0."""
    from ingest.collection.open import open_collection
    sinks.check_outputs(cfg)
    method = cfg.resolved_method
    if method == "presigned":
        raise ConfigError(f"method: a collection ({cfg.source!r}) is read with s3 or posix, not presigned URLs")
    collection = open_collection(cfg.source, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg),
                                 **transport_options(cfg))
    sources, choices, request = tile_sources(cfg, collection)
    picked = [c.tile if c is not None else None for c in choices]
    found = sinks.kept(cfg, collection_cube(cfg))
    tiles = collection.tiles
    todo_by_tile: dict[int, list[int]] = {}
    kept, n_recut = [], 0
    for t, tile in enumerate(tiles):
        mine = [i for i, p in enumerate(picked) if p == t]
        todo, kept_t, recut_t = outputs.resume([sources[i] for i in mine], found, _ext(tile.kind))
        kept += [{**e, "tile": tile.identity()} for e in kept_t]
        n_recut += recut_t
        if todo:
            todo_by_tile[t] = [mine[k] for k in todo]
    busy = sorted(todo_by_tile)
    opened = dict(zip(busy, open_tiles(cfg, [tiles[t] for t in busy], method)))
    settings = configured_settings(cfg)
    if busy:  # tuned on the tile with the most bytes to cut: one link, one store for all tiles
        t_big = max(busy, key=lambda t: sum(box_bytes(sources[i].box, opened[t][0].itemsize) for i in todo_by_tile[t]))
        layout, header, _ = opened[t_big]
        if tunable(cfg, layout):
            from ingest.driver.job import tune_for_job
            from ingest.transports import open_transport

            share = rank_share_box([sources[i].box for i in todo_by_tile[t_big]], topology.n_ranks)
            with open_transport(tiles[t_big].source, method, threads=LATENCY_THREADS,
                                **transport_options(cfg)) as transport:
                settings, _ = tune_for_job(cfg, transport, layout, header, topology, crew, tiles[t_big].source,
                                           method, sel=box_selection(share, layout.shape))
    gap = gap_bytes(cfg, settings)
    layouts = {t: opened[t][0] for t in busy}
    groups = split_work(sources, todo_by_tile, layouts, topology.n_ranks)
    per_rank = [[(t, [sources[i] for i in mine]) for t, mine in rank] for rank in groups]
    jobs = {t: CutoutJob(tiles[t].source, method, layouts[t], opened[t][2], None, settings, len(todo_by_tile[t]),
                         gap, band_axis(layouts[t].shape), f"tile {tiles[t].source}", topology) for t in busy}
    n_items = sum(len(v) for v in todo_by_tile.values())
    spread = sum(len(g) for g in per_rank)
    choice = (f"{n_items} cut-outs from {len(busy)} of {len(tiles)} tiles over {topology.n_ranks} ranks in "
              f"contiguous stretches of the tiles' object order, balanced by the bytes each cuts "
              f"({spread} stretches of one tile in all)")
    counts = {t: 0 for t in range(len(tiles))}
    for p in picked:
        if p is not None:
            counts[p] += 1
    table = tuple({**tiles[t].identity(), "sources": counts[t], "todo": len(todo_by_tile.get(t, ()))}
                  for t in range(len(tiles)))
    notes = tuple(n for n in [collection.describe(), collection.index_note] if n) + tuple(
        f"{s}: not a readable cube ({why})" for s, why in collection.refused)
    job = TilesJob(jobs, collection_cube(cfg), table, settings, gap, n_items, choice, topology, notes=notes)
    catalogue = Catalogue(len(sources), sum(1 for s in sources if s.box is not None and s.clipped),
                          tuple(s.entry(None, 0, None) for s in sources if s.box is None), tuple(kept), n_recut,
                          request)
    return Handout(job, per_rank, catalogue)


def split_work(sources, todo_by_tile: dict, layouts: dict, n_ranks: int) -> list[list[tuple[int, list[int]]]]:
    """The split over ranks (module docstring): per rank, its runs of one tile each, as (tile index,
    [indices into `sources`]) in order. `todo_by_tile`: the indices each tile cuts; `layouts`: each
    such tile's layout. Pure: the same split for `plan` as for the job."""
    items, weights = [], []
    for t in sorted(todo_by_tile):
        layout, todo = layouts[t], todo_by_tile[t]
        order = source_order(layout, [sources[i].box for i in todo], band_axis(layout.shape))
        items += [(t, todo[k]) for k in order]
        weights += [box_bytes(sources[todo[k]].box, layout.itemsize) for k in order]
    out = []
    for lo, hi in split_by_bytes(weights, n_ranks):
        runs: list[tuple[int, list[int]]] = []
        for t, i in items[lo:hi]:
            if not runs or runs[-1][0] != t:
                runs.append((t, []))
            runs[-1][1].append(i)
        out.append(runs)
    return out


_SUMMED = ("elapsed_s", "sources", "requests", "bytes_wire", "bytes_needed", "retries", "throttled", "read_s", "cut_s")


def cut_tiles(comm, cfg: RunConfig, job: TilesJob, groups, progress=None,
              budget_bytes: int | None = None) -> tuple[list[dict], dict]:
    """Every rank: its runs of one tile each, cut one tile after the other by cut_rank (each tile
    its own transport and layout, the same band budget) into one RankOutput for all of them (one
    sink, publish thread and sync per group, whatever tile the group's files came from);
    (manifest entries, the rank's record: the tiles' records summed, their bands listed with the
    tile they read)."""
    records = []
    t0 = MPI.Wtime()
    if not groups:
        return [], cut_rank(comm, cfg, None, [], budget_bytes=budget_bytes)[1]
    with RankOutput(cfg, comm.Get_rank(), progress) as output:
        for t, sources in groups:
            _, record = cut_rank(comm, cfg, job.jobs[t], sources, budget_bytes=budget_bytes, output=output)
            records.append((job.jobs[t].read_source, record))
    out = dict(records[0][1])
    for key in _SUMMED:
        out[key] = sum(r.get(key, 0) for _, r in records)
    out["elapsed_s"], out["sources"] = MPI.Wtime() - t0, len(output.entries)  # with the last group's publish
    out["memory_bound_bytes"] = max(r.get("memory_bound_bytes", 0) for _, r in records)
    out["buffer_bytes_max"] = max(r.get("buffer_bytes_max", 0) for _, r in records)
    out["bands"] = [{**b, "tile": name} for name, r in records for b in r.get("bands", ())]
    out["plan_choice"] = "; ".join(f"{name}: {r['plan_choice']}" for name, r in records if r.get("plan_choice"))
    out["tiles"] = [name for name, _ in records]
    return output.entries, out
