"""`run --pos/--band/--channels` over a collection of tile cubes: the tile the rule picks, as the source.

One region is one source of a catalogue: the tile rule (ingest.collection.rule, answered through
each tile's own WCS by ingest.collection.place) picks the tile that holds it whole and farthest
from its edges, else the one holding its largest part. The job then reads that tile as if it had
been named: its own header, WCS, beams and file. Rank 0 says which tile and why on stdout; the
report's cube is that tile. A region off every tile is an error with the rule's reason.
"""
from __future__ import annotations

import dataclasses

from ingest.config import RunConfig
from ingest.config.settings import retry_policy, transport_options
from ingest.errors import ConfigError, RegionError


def run_tile_config(cfg: RunConfig) -> RunConfig:
    """`cfg` itself for one cube; for a collection (ingest.collection.spec), cfg with `source` the
    tile the rule picks for its pos and band (or channels)."""
    from ingest.collection.spec import is_collection

    if not is_collection(cfg.source):
        return cfg
    from ingest.collection.open import open_collection
    from ingest.collection.place import place_requests
    from ingest.sky.bands import parse_band, parse_channels
    from ingest.sky.regions import parse_pos

    if cfg.pos is None and cfg.band is None and cfg.channels is None:
        raise ConfigError(f"source: {cfg.source!r} is a collection of tiles; name the region to read with "
                          f"--pos and/or --band (or --channels): the tile is picked by where it is")
    collection = open_collection(cfg.source, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg),
                                 **transport_options(cfg))
    pos = parse_pos(cfg.pos, frame=cfg.frame) if cfg.pos is not None else None
    if cfg.band is not None:
        band = parse_band(cfg.band, convention=cfg.velocity_convention, rest=cfg.rest_frequency)
    else:
        band = parse_channels(cfg.channels) if cfg.channels is not None else None
    choice = place_requests(collection.tiles, [pos], [band])[0]
    asked = " ".join(r.describe(for_people=True) for r in (pos, band) if r is not None)
    if choice.tile is None:
        raise RegionError(f"{asked}: {choice.reason}")
    tile = collection.tiles[choice.tile]
    how = (f"whole, {choice.placement.edge_px} px from its sky plane's edges" if not choice.clipped else
           f"no tile holds it whole; this one holds its largest part (clipped on {', '.join(choice.placement.clipped)})")
    print(f"ingest: {collection.describe()}; {asked}: tile {tile.source} ({how})", flush=True)
    return dataclasses.replace(cfg, source=tile.source)
