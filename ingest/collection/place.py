"""Many requests over a collection's tiles: each request's box in every tile that can hold part of
it (ingest.sky.pixels' rule, through that tile's own WCS), and the tile the rule picks
(ingest.collection.rule).

A tile's footprint (`tile_footprint`) carries a cone on the sky that holds the centre of every
pixel of its plane: the great circle distance from the plane's centre pixel to the farthest of
its edge pixels and of a grid through it, plus 1 arcsec (more than FK4's E-terms, the one frame
change here that is not a rotation). A circle whose centre is farther from a tile's cone centre
than the cone's radius plus its own radius can hold no pixel centre of that tile, so the tile
is not asked: a catalogue over hundreds of tiles asks each tile about its neighbourhood only.
Ranges and polygons are asked of every tile. Pure computation on headers: no I/O.
"""
from __future__ import annotations

import warnings

import numpy as np

from ingest.collection.rule import Choice, pick_tile, placement
from ingest.errors import ConfigError, RegionError

CONE_MARGIN_DEG = 1.0 / 3600
_GRID_STEPS = 16  # interior lines sampled each way besides the edges
MAX_REASONS = 3  # tiles' own reasons quoted for a source off every tile


def tile_footprint(header, shape, beams=None) -> dict:
    """A tile's footprint, JSON-able: where it is as `info` shows it (ingest.sky.footprint.cube_footprint:
    centre and corners, spectral range, beam; `beams`: its BEAMS table, if any) and `cone`, [ra, dec,
    radius] in deg (ICRS) holding every pixel centre of its plane; `cone` is None when the tile has
    no sky plane or its WCS is undefined at some pixel centre: every request is then asked of it."""
    from ingest.sky.footprint import cube_footprint
    from ingest.sky.pixels import CubeAxes

    out = cube_footprint(header, shape, beams)
    out["cone"] = None
    try:
        plane = CubeAxes(header, shape).plane
    except RegionError:
        return out
    if plane is not None:
        out["cone"] = _cone(plane)
    return out


def _cone(plane) -> list[float] | None:
    from astropy.coordinates import SkyCoord

    nx, ny = plane.nx, plane.ny
    xs, ys = np.arange(nx, dtype=float), np.arange(ny, dtype=float)
    edge_x = np.r_[xs, xs, np.zeros(len(ys)), np.full(len(ys), nx - 1)]
    edge_y = np.r_[np.zeros(len(xs)), np.full(len(xs), ny - 1), ys, ys]
    grid_x, grid_y = np.meshgrid(np.linspace(0, nx - 1, _GRID_STEPS + 2), np.linspace(0, ny - 1, _GRID_STEPS + 2))
    px = np.r_[(nx - 1) / 2, edge_x, grid_x.ravel()]
    py = np.r_[(ny - 1) / 2, edge_y, grid_y.ravel()]
    lon, lat = plane.world(px, py)
    if not (np.isfinite(lon).all() and np.isfinite(lat).all()):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ERFA's notes on dubious years
        icrs = SkyCoord(lon, lat, unit="deg", frame=plane.frame).icrs
    v = _vectors(icrs.ra.deg, icrs.dec.deg)
    radius = np.degrees(np.arccos(np.clip(v[1:] @ v[0], -1.0, 1.0))).max()
    return [float(icrs.ra.deg[0]), float(icrs.dec.deg[0]), float(radius + CONE_MARGIN_DEG)]


def _vectors(ra_deg, dec_deg) -> np.ndarray:
    ra, dec = np.radians(ra_deg), np.radians(dec_deg)
    return np.stack([np.cos(dec) * np.cos(ra), np.cos(dec) * np.sin(ra), np.sin(dec)], axis=-1)


class _Circles:
    """The SkyCircles among the requests: their indices, ICRS unit vectors and radii, and per circle
    the tile whose cone comes nearest (for the reason of one off every tile)."""

    def __init__(self, regions):
        from astropy.coordinates import SkyCoord

        from ingest.sky.regions import SkyCircle
        from ingest.sky.sphere import astropy_frame

        self.n = len(regions)
        self.index = np.array([i for i, r in enumerate(regions) if isinstance(r, SkyCircle)], dtype=np.int64)
        self.vectors = np.zeros((len(self.index), 3))
        self.radius_deg = np.array([regions[i].radius_deg for i in self.index], float)
        for frame in {regions[i].frame for i in self.index}:
            rows = np.array([k for k, i in enumerate(self.index) if regions[i].frame == frame])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # Arrays, not lists: SkyCoord parses a list of floats one element at a time.
                icrs = SkyCoord(np.array([regions[self.index[k]].lon_deg for k in rows], float),
                                np.array([regions[self.index[k]].lat_deg for k in rows], float), unit="deg",
                                frame=astropy_frame(frame)).icrs
            self.vectors[rows] = _vectors(icrs.ra.deg, icrs.dec.deg)
        self.others = np.setdiff1d(np.arange(self.n), self.index)
        self.near_deg = np.full(self.n, np.inf)  # distance from each circle's centre to the nearest cone's edge
        self.near_tile = np.full(self.n, -1)

    def distance_deg(self, i: int, cone) -> float:
        """From request i's centre to a tile's cone centre (0 for a request that is not a circle)."""
        k = np.searchsorted(self.index, i)
        if cone is None or k >= len(self.index) or self.index[k] != i:
            return 0.0
        return float(np.degrees(np.arccos(np.clip(self.vectors[k] @ _vectors(cone[0], cone[1]), -1.0, 1.0))))

    def asked(self, cone, t: int) -> list[int]:
        """The requests tile t may hold part of: every non-circle, and each circle its cone reaches."""
        if cone is None:
            return list(range(self.n))
        away_deg = np.degrees(np.arccos(np.clip(self.vectors @ _vectors(cone[0], cone[1]), -1.0, 1.0))) - cone[2]
        closer = away_deg < self.near_deg[self.index]
        self.near_deg[self.index[closer]] = away_deg[closer]
        self.near_tile[self.index[closer]] = t
        reached = self.index[away_deg <= self.radius_deg]
        return sorted(np.r_[self.others, reached].astype(int).tolist())


def place_requests(tiles, regions, bands) -> list[Choice]:
    """One Choice per entry of the parallel sequences `regions` (a sky region or None) and `bands`
    (SpectralRange, ChannelRange or None; text is parsed as ingest.sky.pixels.world_boxes does):
    the tile of `tiles` (in the collection's order) the rule picks and the box there, or why
    the request is off every tile."""
    from ingest.sky.pixels import CubeAxes, world_boxes
    from ingest.sky.regions import parse_band, parse_pos

    regions = [parse_pos(r) if isinstance(r, str) else r for r in regions]
    bands = [parse_band(b) if isinstance(b, str) else b for b in bands]
    if len(regions) != len(bands):
        raise ConfigError(f"place_requests: {len(regions)} sky regions but {len(bands)} bands; give one of each "
                          f"per request (None where there is none)")
    circles = _Circles(regions)
    candidates: list[dict[int, object]] = [{} for _ in regions]  # request -> {tile: Placement}
    reasons: list[list[tuple[int, str]]] = [[] for _ in regions]  # request -> [(tile, why it is off that tile)]
    for t, tile in enumerate(tiles):
        asked = circles.asked(tile.footprint.get("cone"), t)
        if not asked:
            continue
        header = tile.header()
        try:
            axes = CubeAxes(header, tile.shape)
        except RegionError as exc:
            for i in asked:
                reasons[i].append((t, str(exc)))
            continue
        x_axis, y_axis = (axes.numpy_axis(axes.lng), axes.numpy_axis(axes.lat)) if axes.lng >= 0 else (None, None)
        answers = world_boxes(header, tile.shape, [regions[i] for i in asked], [bands[i] for i in asked])
        for i, answer in zip(asked, answers):
            if isinstance(answer, str):
                reasons[i].append((t, answer))
            else:
                candidates[i][t] = placement(answer.box, answer.clipped, tile.shape, x_axis, y_axis)
    return [_choose(candidates[i], reasons[i], circles, i, tiles) for i in range(len(regions))]


def _choose(placed: dict, reasons: list[tuple[int, str]], circles: _Circles, i: int, tiles) -> Choice:
    order = sorted(placed)
    pick = pick_tile([placed[t] for t in order])
    if pick is not None:
        return Choice(order[pick], placed[order[pick]], tiles_holding=len(order))
    if reasons:
        reasons = sorted(reasons, key=lambda tr: circles.distance_deg(i, tiles[tr[0]].footprint.get("cone")))
        more = f" (and {len(reasons) - MAX_REASONS} more tiles)" if len(reasons) > MAX_REASONS else ""
        said = "; ".join(f"{tiles[t].source}: {why}" for t, why in reasons[:MAX_REASONS])
        return Choice(None, reason=f"off every tile of the collection, nearest first: {said}{more}")
    where = ""
    if circles.near_tile[i] >= 0:
        where = (f"; the nearest is {tiles[circles.near_tile[i]].source}, whose footprint ends "
                 f"{circles.near_deg[i]:.4g} deg from the region's centre")
    return Choice(None, reason=f"off every tile of the collection: no tile's footprint reaches it ({len(tiles)} "
                               f"tiles){where}")
