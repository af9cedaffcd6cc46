"""`info` and `plan` over a collection of tile cubes (a glob, a prefix ending in '/', @FILE).

`info` lists the tiles' footprints (from the collection's index: a second look reads no header)
and, with --pos/--band, the tile the rule picks for that region. `plan --catalogue` adds how many
sources fall on each tile, in overlaps (held by two tiles or more) and off every tile, and the
cut-out job's predicted makespan on --ranks (default 1): the same split over ranks and the same
bands per tile the job makes (driver.cutouts.tiles.split_work, core.cutstripes.plan_stripe), priced
by the configured cost model before any data moves (no probe: the tiles' link is one store's).
"""
from __future__ import annotations

import json

from ingest.config.settings import configured_settings, retry_policy, transport_options


def _collection(cfg):
    from ingest.collection.open import open_collection

    return open_collection(cfg.source, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg),
                           **transport_options(cfg))


def _tile_row(tile) -> dict:
    fp = tile.footprint
    sky, spectral = fp.get("sky") or {}, fp.get("spectral") or {}
    axis = spectral.get("axis") or {}
    return {**tile.identity(), "kind": tile.kind, "shape": list(tile.shape),
            "centre_icrs_deg": (sky.get("centre") or {}).get("icrs_deg"),
            "radius_deg": fp["cone"][2] if fp.get("cone") else None,
            "spectral": {"ctype": spectral.get("ctype"), "unit": spectral.get("unit"), "range": axis.get("range"),
                         "channels": spectral.get("n_channels")} if spectral else None}


def _pick(cfg, collection) -> dict | None:
    """The tile the rule picks for the config's --pos/--band (or --channels), or None when none is given."""
    from ingest.collection.place import place_requests
    from ingest.sky.bands import parse_band, parse_channels
    from ingest.sky.regions import parse_pos

    if cfg.pos is None and cfg.band is None and cfg.channels is None:
        return None
    pos = parse_pos(cfg.pos, frame=cfg.frame) if cfg.pos is not None else None
    band = (parse_band(cfg.band, convention=cfg.velocity_convention, rest=cfg.rest_frequency) if cfg.band is not None
            else parse_channels(cfg.channels) if cfg.channels is not None else None)
    choice = place_requests(collection.tiles, [pos], [band])[0]
    if choice.tile is None:
        return {"tile": None, "reason": choice.reason}
    return {"tile": collection.tiles[choice.tile].source, "box": [list(p) for p in choice.placement.box],
            "clipped": list(choice.placement.clipped), "edge_px": choice.placement.edge_px,
            "tiles_holding": choice.tiles_holding}


def _print_tiles(summary: dict) -> None:
    print(f"collection {summary['describe']}")
    counted = "sources" in summary["tiles"][0] if summary["tiles"] else False
    print(f"  {'tile':<40} {'shape':<16} {'centre RA, Dec (deg)':<22} {'radius':>8}  spectral range"
          + ("  sources" if counted else ""))
    for row in summary["tiles"]:
        centre = row["centre_icrs_deg"]
        where = f"{centre[0]:.5f}, {centre[1]:.5f}" if centre else "-"
        radius = f"{row['radius_deg']:.4f}" if row["radius_deg"] is not None else "-"
        s = row["spectral"] or {}
        band = "-"
        if s.get("range"):
            lo, hi = s["range"]
            band = f"{lo / 1e6:.4f}..{hi / 1e6:.4f} MHz" if s["unit"] == "Hz" else f"{lo:.6g}..{hi:.6g} {s['unit']}"
        count = f"  {row['sources']:7d}" if counted else ""
        print(f"  {row['name']:<40} {'x'.join(map(str, row['shape'])):<16} {where:<22} {radius:>8}  {band}{count}")
    for source, why in summary["refused"]:
        print(f"  not a cube: {source}: {why}")
    pick = summary.get("pick")
    if pick is not None:
        if pick["tile"] is None:
            print(f"region: {pick['reason']}")
        else:
            how = f"clipped on {', '.join(pick['clipped'])}" if pick["clipped"] else f"whole, {pick['edge_px']} px from its edges"
            print(f"region: tile {pick['tile']} ({how}; {pick['tiles_holding']} tile(s) hold part of it), box {pick['box']}")


def _summary(cfg, collection) -> dict:
    return {"collection": cfg.source, "describe": collection.describe(), "index": collection.index_path,
            "headers_read": collection.headers_read, "tiles": [_tile_row(t) for t in collection.tiles],
            "refused": [list(r) for r in collection.refused], "pick": _pick(cfg, collection)}


def collection_info(cfg, args) -> int:
    """`info` of a collection: its tiles' footprints (and the picked tile for --pos/--band)."""
    summary = _summary(cfg, _collection(cfg))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_tiles(summary)
    return 0


def collection_plan(cfg, args, topology) -> int:
    """`plan` of a collection: `info`'s table, and with --catalogue the sources per tile, in overlaps,
    off every tile, and the cut-out job's predicted makespan on `topology`."""
    collection = _collection(cfg)
    summary = _summary(cfg, collection)
    if cfg.catalogue:
        summary["catalogue"] = _plan_catalogue(cfg, collection, topology)
        for row, n in zip(summary["tiles"], summary["catalogue"].pop("per_tile")):
            row["sources"] = n
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    _print_tiles(summary)
    c = summary.get("catalogue")
    if c is not None:
        p = c["prediction"]
        print(f"catalogue: {c['sources']} sources: {c['cut']} on a tile ({c['in_overlaps']} in overlaps of two tiles "
              f"or more), {c['off_every_tile']} off every tile, {c['not_placed']} with no usable region; "
              f"{c['requests']} requests, {c['bytes_wire']} bytes on the wire; predicted makespan "
              f"{p['makespan_s']:.3g} s on {p['ranks']} rank(s), bound by {p['binding']}")
    return 0


def _plan_catalogue(cfg, collection, topology) -> dict:
    from ingest.core.cutstripes import band_axis, plan_stripe
    from ingest.core.sharing import RankLoad, predict_job
    from ingest.driver.cutouts.job import gap_bytes
    from ingest.driver.cutouts.tiles import open_tiles, split_work, tile_sources

    sources, choices, _ = tile_sources(cfg, collection)
    tiles = collection.tiles
    per_tile = [sum(1 for c in choices if c is not None and c.tile == t) for t in range(len(tiles))]
    todo_by_tile = {t: [i for i, c in enumerate(choices) if c is not None and c.tile == t]
                    for t in range(len(tiles)) if per_tile[t]}
    busy = sorted(todo_by_tile)
    layouts = dict(zip(busy, (o[0] for o in open_tiles(cfg, [tiles[t] for t in busy], cfg.resolved_method))))
    settings = configured_settings(cfg)
    gap = gap_bytes(cfg, settings)
    loads = []
    for runs in split_work(sources, todo_by_tile, layouts, topology.n_ranks):
        n_requests = wire = 0
        for t, mine in runs:
            plan = plan_stripe(layouts[t], [sources[i].box for i in mine], split=band_axis(layouts[t].shape),
                               budget_bytes=cfg.cutout_batch_bytes, max_gap_bytes=gap,
                               chunk_bytes=settings.chunk_bytes, cost=settings.cost, threads=settings.threads)
            n_requests, wire = n_requests + plan.n_requests, wire + plan.wire_bytes
        loads.append(RankLoad(n_requests, wire, settings.threads))
    prediction = predict_job(settings.alone, settings.shared, topology, loads)
    placed = [c for c in choices if c is not None]
    return {"sources": len(sources), "cut": sum(per_tile), "per_tile": per_tile,
            "in_overlaps": sum(1 for c in placed if c.tiles_holding >= 2),
            "off_every_tile": sum(1 for c in placed if c.tile is None),
            "not_placed": sum(1 for c in choices if c is None),
            "requests": sum(l.n_requests for l in loads), "bytes_wire": sum(l.wire_bytes for l in loads),
            "prediction": prediction.as_dict()}
