"""Sky regions to boxes on a cube's celestial plane, for many regions at once, without testing
every pixel of the plane per region.

The result is the rule of `ingest.sky.pixels` (the smallest box holding every pixel whose centre
is in the region); the work is kept near the region's edges:

1. Each region's boundary is sampled in its own frame, carried into the cube's frame and
   projected to pixels with the WCS. Samples are doubled until the polygon through them is
   within 0.25 px of the true curve on every edge (sagitta ~ segment length x turning angle / 8).
2. A side of the box is found by testing pixel lines from just outside the samples' extent
   inwards; the first line holding a member is the side. On a line, members lie between the
   places where the boundary crosses it, so only the pixels within 0.5 px of those crossings'
   span are candidates; the one nearest the middle is tested first, the rest only if it is out.
   Every candidate is tested exactly (pixel centre -> world -> the region's own test).
3. A side is clipped when the pixel line just beyond the cube's edge on that axis (corners
   included: the one-pixel ring round the plane) holds a member.

Where the projection is not one-to-one on the region the boundary does not bound it in pixel
space: a region holding a singular direction of the projection (the native south pole of a
zenithal projection such as SIN or TAN, either native pole of any other), or whose boundary
leaves the valid domain (SIN or TAN past the native equator: NaN), jumps (a seam), or does not
come back to the same direction through the WCS. Those regions are found by whole pixel lines
from the plane's edges inwards instead: exact, slower, rare. A region whose boundary lies
wholly outside the domain (a source on the far side of the sky from a SIN cube) holds all of
the domain or none of it; the reference point, always defined, tells which at once.
"""
from __future__ import annotations

import warnings

import numpy as np

from ingest.sky.sphere import FrameLink, astropy_frame, lon_lat, shape_groups, unit_vectors

SAGITTA_PX = 0.25  # how far the sampled polygon may stray from the true boundary, in pixels
TOLERANCE_PX = 0.5  # candidates: pixels this close to the sampled boundary's span are tested
FIRST_SAMPLES = 32  # boundary samples per edge to start with; doubled while needed
MAX_SAMPLES = 8192  # beyond this per edge, the boundary is taken as discontinuous (slow path)
ROUND_TRIP_RAD = 1e-8  # a boundary sample must map back to its own direction this closely
_SWEEP_PX = 1 << 20  # the most pixels the line-by-line path tests at once
_ZENITHAL = 1  # wcslib's projection category code


class SkyPlane:
    """A cube's celestial plane: its 2-D WCS (longitude axis first), size and frame."""

    def __init__(self, sky_wcs, nx: int, ny: int, cube_frame):
        self.wcs, self.nx, self.ny, self.frame = sky_wcs, nx, ny, cube_frame
        self._links: dict[str, FrameLink] = {}
        cel = sky_wcs.wcs.cel
        north = unit_vectors(cel.euler[0], 90.0 - cel.euler[1])  # the native north pole
        self.singular = np.array([-north] if cel.prj.category == _ZENITHAL else [north, -north])
        # SIN (unslanted) and TAN are defined on the native northern hemisphere only
        hemisphere = cel.prj.code in ("SIN", "TAN") and not np.any(np.nan_to_num(cel.prj.pv[1:3]))
        self.domain_pole = north if hemisphere else None
        self.reference = unit_vectors(*sky_wcs.wcs.crval)  # defined in every projection

    def link(self, frame: str) -> FrameLink:
        if frame not in self._links:
            self._links[frame] = FrameLink(astropy_frame(frame), self.frame)
        return self._links[frame]

    def world(self, x, y) -> tuple[np.ndarray, np.ndarray]:
        """Longitude, latitude (deg, cube frame) of 0-based pixel positions; NaN where undefined."""
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            warnings.simplefilter("ignore")
            lon, lat = self.wcs.all_pix2world(np.asarray(x, float), np.asarray(y, float), 0)
        return np.asarray(lon, float), np.asarray(lat, float)

    def pixels(self, lon, lat) -> tuple[np.ndarray, np.ndarray]:
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            warnings.simplefilter("ignore")
            try:
                x, y = self.wcs.all_world2pix(lon, lat, 0)
            except Exception:  # noqa: BLE001 - a distortion that does not converge: treat as undefined
                return np.full(np.shape(lon), np.nan), np.full(np.shape(lon), np.nan)
        return np.asarray(x, float), np.asarray(y, float)


class _Tester:
    """Exact membership of pixel centres for one group of regions (one shape, one frame)."""

    def __init__(self, plane: SkyPlane, group, link: FrameLink):
        self.plane, self.group, self.link = plane, group, link

    def test_world(self, lon, lat, gid) -> np.ndarray:
        vectors = self.link.to_region(unit_vectors(lon, lat))
        if self.link.identity:
            lon_r, lat_r = lon % 360.0, lat
        else:
            lon_r, lat_r = lon_lat(vectors)
        return self.group.contains(vectors, lon_r, lat_r, gid)

    def test(self, x, y, gid) -> np.ndarray:
        lon, lat = self.plane.world(x, y)
        return self.test_world(lon, lat, gid)


def sky_boxes(plane: SkyPlane, regions: list) -> list:
    """Per region: (x0, x1, y0, y1, clipped_x, clipped_y) half-open on the plane, None when no
    pixel centre of the plane is in it, or a str when its frame cannot be converted."""
    results: list = [None] * len(regions)
    for frame, group, positions in shape_groups(regions):
        try:
            link = plane.link(frame)
        except Exception as exc:  # noqa: BLE001 - astropy's reasons vary; the message carries it
            for i in positions:
                results[i] = f"cannot convert {frame} to the cube's frame {plane.frame.name}: {exc}"
            continue
        tester = _Tester(plane, group, link)
        gids = np.arange(len(positions))
        levels, slow, beyond = _sample(plane, group, link, gids)
        # A boundary wholly beyond the projection's domain (a hemisphere) leaves that domain all in
        # the region or all out of it: the reference point tells which.
        reference = np.broadcast_to(plane.reference, (len(beyond), 3))
        slow += [int(g) for g in beyond[tester.test_world(*lon_lat(reference), beyond)]] if len(beyond) else []
        singular = np.zeros(len(gids), bool)
        for direction in plane.singular:
            lon, lat = lon_lat(np.broadcast_to(direction, (len(gids), 3)))
            singular |= tester.test_world(lon, lat, gids)
        boxes: dict[int, tuple | None] = {int(g): None for g in beyond}
        for level_gids, x, y in levels:
            fast = ~singular[level_gids]
            slow += [int(g) for g in level_gids[~fast]]
            if fast.any():
                boxes.update(_scan(tester, level_gids[fast], x[fast], y[fast]))
        boxes.update(_sweep(tester, np.array(sorted(set(slow)), int)))
        for gid, i in enumerate(positions):
            results[i] = boxes[gid]
    return results


def _beyond_domain(plane: SkyPlane, cube: np.ndarray) -> np.ndarray:
    """Per region, whether its whole boundary (samples (g, edges, n, 3) in the cube's frame, and
    the arcs between them) lies outside the projection's hemisphere: every sample more than
    90 deg from the native pole by more than half the widest gap between samples (a point of an
    arc is within half its length of an end; 0.55 allows for a small-circle arc being a little
    longer than the chord's angle)."""
    if plane.domain_pole is None:
        return np.zeros(len(cube), bool)
    flat = cube.reshape(len(cube), -1, 3)
    distance = np.arccos(np.clip(flat @ plane.domain_pole, -1.0, 1.0))
    gap = 2.0 * np.arcsin(np.clip(np.linalg.norm(np.diff(cube, axis=-2), axis=-1) / 2.0, 0.0, 1.0))
    return distance.min(axis=1) - 0.55 * gap.reshape(len(cube), -1).max(axis=1, initial=0.0) > np.pi / 2.0


def _sample(plane: SkyPlane, group, link: FrameLink, gids: np.ndarray):
    """Boundary samples in pixels, refined per region: [(gids, x, y)] with x, y (g, edges, n), the
    regions whose boundary cannot be trusted in pixel space, and those whose boundary lies wholly
    beyond the projection's domain."""
    levels, slow, beyond, n = [], [], [], FIRST_SAMPLES
    while len(gids):
        cube = link.to_cube(group.edges(gids, n))
        far = _beyond_domain(plane, cube)
        beyond.extend(gids[far])
        gids, cube = gids[~far], cube[~far]
        if not len(gids):
            break
        lon, lat = lon_lat(cube)
        x, y = plane.pixels(lon.ravel(), lat.ravel())
        x, y = x.reshape(lon.shape), y.reshape(lon.shape)
        back = unit_vectors(*plane.world(x.ravel(), y.ravel())).reshape(cube.shape)
        with np.errstate(invalid="ignore"):
            miss = np.linalg.norm(back - cube, axis=-1)
            bad = ~(miss <= ROUND_TRIP_RAD).reshape(len(gids), -1).all(axis=1)
        dx, dy = np.diff(x, axis=-1), np.diff(y, axis=-1)
        length = np.hypot(dx, dy)
        heading = np.arctan2(dy, dx)
        turn = np.abs((np.diff(heading, axis=-1) + np.pi) % (2.0 * np.pi) - np.pi)
        sagitta = np.maximum(length[..., 1:], length[..., :-1]) * turn / 8.0
        with np.errstate(invalid="ignore"):
            smooth = np.nan_to_num(sagitta, nan=np.inf).reshape(len(gids), -1).max(axis=1, initial=0.0) <= SAGITTA_PX
        done = ~bad & smooth
        if done.any():
            levels.append((gids[done], x[done], y[done]))
        slow.extend(gids[bad])
        gids = gids[~bad & ~smooth]
        n *= 2
        if n > MAX_SAMPLES:
            slow.extend(gids)
            break
    return levels, [int(g) for g in slow], np.array(beyond, int)


def _ragged(starts: np.ndarray, counts: np.ndarray):
    """Flatten integer runs: (owner index, value) for every integer of every run."""
    counts = np.maximum(counts, 0)
    owner = np.repeat(np.arange(len(starts)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, starts[owner] + offsets


class _Lines:
    """Tests whole pixel lines (u = c, w over a range) against the sampled boundaries of a level."""

    def __init__(self, tester: _Tester, gids, x, y):
        self.tester, self.gids = tester, gids
        flat = lambda a: a.reshape(len(gids), -1)  # noqa: E731
        # segments of every edge, as (g, segments) arrays of their two ends
        self.seg = {"x": (flat(x[..., :-1]), flat(x[..., 1:])), "y": (flat(y[..., :-1]), flat(y[..., 1:]))}

    def span(self, which: np.ndarray, axis: str, c: np.ndarray):
        """For lines u = c (u is axis), the span of w within TOLERANCE_PX of the sampled boundary."""
        other = "y" if axis == "x" else "x"
        (ua, ub), (wa, wb) = self.seg[axis], self.seg[other]
        ua, ub, wa, wb = ua[which], ub[which], wa[which], wb[which]
        lo, hi = (c - TOLERANCE_PX)[:, None], (c + TOLERANCE_PX)[:, None]
        du = ub - ua
        with np.errstate(divide="ignore", invalid="ignore"):
            t1, t2 = (lo - ua) / du, (hi - ua) / du
            flat_seg = du == 0
            inside = (ua >= lo) & (ua <= hi)
            t_lo = np.where(flat_seg, np.where(inside, 0.0, 1.0), np.maximum(np.minimum(t1, t2), 0.0))
            t_hi = np.where(flat_seg, np.where(inside, 1.0, 0.0), np.minimum(np.maximum(t1, t2), 1.0))
            valid = t_lo <= t_hi
            w1, w2 = wa + t_lo * (wb - wa), wa + t_hi * (wb - wa)
        w_lo = np.where(valid, np.minimum(w1, w2), np.inf).min(axis=1) - TOLERANCE_PX
        w_hi = np.where(valid, np.maximum(w1, w2), -np.inf).max(axis=1) + TOLERANCE_PX
        return w_lo, w_hi

    def occupied(self, which, axis: str, c, w_min, w_max) -> np.ndarray:
        """Whether line u = c holds a member with w in [w_min, w_max] (integers), per row."""
        w_lo, w_hi = self.span(which, axis, c.astype(float))
        first = np.maximum(np.ceil(w_lo), w_min)
        last = np.minimum(np.floor(w_hi), w_max)
        counts = np.where(last >= first, last - first + 1, 0).astype(np.int64)
        found = np.zeros(len(which), bool)
        with np.errstate(invalid="ignore"):
            middle = np.clip(np.round((w_lo + w_hi) / 2.0), first, last)
        probe = counts > 0
        found[probe] = self._test(which[probe], axis, c[probe], middle[probe])
        rest = probe & ~found & (counts > 1)
        if rest.any():
            owner, w = _ragged(first[rest].astype(np.int64), counts[rest])
            hits = self._test(which[rest][owner], axis, c[rest][owner], w)
            found[np.flatnonzero(rest)] = np.bincount(owner, weights=hits, minlength=int(rest.sum())) > 0
        return found

    def _test(self, which, axis, c, w):
        x, y = (c, w) if axis == "x" else (w, c)
        return self.tester.test(x, y, self.gids[which])

    def first_occupied(self, which, axis: str, start, stop, step: int, w_min, w_max) -> np.ndarray:
        """For each region of `which`, the first line from start towards stop (inclusive) that
        holds a member; -1 where none does."""
        line, answer = start.copy(), np.full(len(which), -1, np.int64)
        active = (line - stop) * step <= 0
        while active.any():
            idx = np.flatnonzero(active)
            hit = self.occupied(which[idx], axis, line[idx], w_min[idx], w_max[idx])
            answer[idx[hit]] = line[idx[hit]]
            line[idx] += step
            active[idx[hit]] = False
            active &= (line - stop) * step <= 0
        return answer


def _scan(tester: _Tester, gids, x, y) -> dict[int, tuple | None]:
    """The box of every region of one sample level, by the line tests (module docstring)."""
    lines = _Lines(tester, gids, x, y)
    nx, ny = tester.plane.nx, tester.plane.ny
    regions = np.arange(len(gids))
    ext = {a: (np.nanmin(v.reshape(len(gids), -1), axis=1), np.nanmax(v.reshape(len(gids), -1), axis=1))
           for a, v in (("x", x), ("y", y))}
    box = {}
    clipped = {}
    keep = np.ones(len(gids), bool)
    for axis, n_u, n_w in (("x", nx, ny), ("y", ny, nx)):
        lo_s, hi_s = ext[axis]
        outer_lo = np.ceil(lo_s - TOLERANCE_PX).astype(np.int64) - 1  # no member on this line or before
        outer_hi = np.floor(hi_s + TOLERANCE_PX).astype(np.int64) + 1
        if axis == "x":
            w_min, w_max = np.zeros(len(gids), np.int64), np.full(len(gids), ny - 1, np.int64)
        else:
            w_min, w_max = box["x"]
            w_min, w_max = w_min.copy(), w_max.copy()
        ring_min, ring_max = np.full(len(gids), -1, np.int64), np.full(len(gids), n_w, np.int64)
        clip = np.zeros(len(gids), bool)
        for edge, outer in ((-1, outer_lo), (n_u, outer_hi)):
            reaches = (outer <= -1) if edge == -1 else (outer >= n_u)
            r = regions[reaches & keep]
            if len(r):
                clip[r] |= lines.occupied(r, axis, np.full(len(r), edge, np.int64), ring_min[r], ring_max[r])
        start = np.maximum(outer_lo + 1, 0)
        stop = np.minimum(outer_hi - 1, n_u - 1)
        live = keep & (start <= stop)
        low = np.full(len(gids), -1, np.int64)
        high = np.full(len(gids), -1, np.int64)
        r = regions[live]
        if len(r):
            low[r] = lines.first_occupied(r, axis, start[r], stop[r], 1, w_min[r], w_max[r])
            found = r[low[r] >= 0]
            high[found] = lines.first_occupied(found, axis, stop[found], low[found], -1, w_min[found], w_max[found])
        keep &= low >= 0
        box[axis] = (low, high)
        clipped[axis] = clip
    out: dict[int, tuple | None] = {}
    for i, gid in enumerate(gids):
        if not keep[i]:
            out[int(gid)] = None
        else:
            out[int(gid)] = (int(box["x"][0][i]), int(box["x"][1][i]) + 1, int(box["y"][0][i]),
                             int(box["y"][1][i]) + 1, bool(clipped["x"][i]), bool(clipped["y"][i]))
    return out


def _sweep(tester: _Tester, gids: np.ndarray) -> dict[int, tuple | None]:
    """The path that trusts no boundary: each side is the first whole pixel line, from the
    plane's edge inwards, that holds a member (lines tested in blocks that double, so a region
    reaching the edge costs a line and one deep inside at most the plane); the ring is tested
    whole. Exact by construction; slow only for a small region far from every edge."""
    nx, ny = tester.plane.nx, tester.plane.ny
    out: dict[int, tuple | None] = {}
    for gid in gids.tolist():
        x0 = _first_line(tester, gid, "x", 0, nx - 1, 0, ny - 1)
        if x0 is None:
            out[gid] = None
            continue
        x1 = _first_line(tester, gid, "x", nx - 1, x0, 0, ny - 1)
        y0 = _first_line(tester, gid, "y", 0, ny - 1, x0, x1)
        y1 = _first_line(tester, gid, "y", ny - 1, y0, x0, x1)
        ring = []
        for axis, n_u, n_w in (("x", nx, ny), ("y", ny, nx)):
            hit = any(_first_line(tester, gid, axis, edge, edge, -1, n_w) is not None for edge in (-1, n_u))
            ring.append(hit)
        out[gid] = (x0, x1 + 1, y0, y1 + 1, ring[0], ring[1])
    return out


def _first_line(tester: _Tester, gid: int, axis: str, start: int, stop: int, w_first: int, w_last: int):
    """The first line u = start, start +- 1, ... stop (inclusive) with a member among w in
    [w_first, w_last], or None."""
    step = 1 if stop >= start else -1
    w = np.arange(w_first, w_last + 1)
    block, line = 1, start
    while (stop - line) * step >= 0:
        lines = np.arange(line, stop + step, step)[:block]
        uu, ww = np.repeat(lines, len(w)), np.tile(w, len(lines))
        x, y = (uu, ww) if axis == "x" else (ww, uu)
        hits = tester.test(x, y, np.full(len(uu), gid)).reshape(len(lines), len(w)).any(axis=1)
        if hits.any():
            return int(lines[np.argmax(hits)])
        line += step * len(lines)
        block = min(block * 2, max(1, _SWEEP_PX // len(w)))
    return None
