"""Geometry on the sphere, vectorised over many regions: unit vectors, frame links, membership
and boundary samples for circles, ranges and polygons.

Membership is always decided in the REGION's frame, with the pixel's direction carried into it:
a circle by chord length (|p - c| <= 2 sin(r/2), exact to ~1e-16 rad even for arcsecond radii,
where 1 - cos(r) would lose half the digits); a range by the pixel's longitude and latitude in
the region's frame (a RANGE in another frame is not a range); a polygon by a point-in-polygon
test in the gnomonic projection about its mean direction, where its great-circle edges are
straight lines (regions.SkyPolygon keeps polygons inside a hemisphere, so that projection is
one-to-one on them).
"""
from __future__ import annotations

import warnings

import numpy as np

from ingest.sky.regions import SkyCircle, SkyPolygon, SkyRange, frame_equinox


def unit_vectors(lon_deg, lat_deg) -> np.ndarray:
    """(..., 3) unit vectors of longitudes and latitudes in degrees (NaN in, NaN out)."""
    lon, lat = np.radians(lon_deg), np.radians(lat_deg)
    cos_lat = np.cos(lat)
    return np.stack([cos_lat * np.cos(lon), cos_lat * np.sin(lon), np.sin(lat)], axis=-1)


def lon_lat(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longitude in [0, 360) and latitude in degrees of (..., 3) vectors (need not be unit)."""
    x, y, z = vectors[..., 0], vectors[..., 1], vectors[..., 2]
    lon = np.degrees(np.arctan2(y, x)) % 360.0
    return lon, np.degrees(np.arctan2(z, np.hypot(x, y)))


def astropy_frame(name: str):
    """The astropy frame a region's frame name means (regions.normalize_frame), every attribute
    set: FK5 at its Julian equinox, FK4 at its Besselian one (obstime: that equinox, astropy's
    default), ICRS, Galactic. Its inverse is regions.frame_of."""
    from astropy.coordinates import FK4, FK5, ICRS, Galactic
    from astropy.time import Time

    base, year = frame_equinox(name)
    if base == "fk5":
        return FK5(equinox=Time(year, format="jyear"))
    if base == "fk4":
        return FK4(equinox=Time(year, format="byear"))
    return {"icrs": ICRS(), "galactic": Galactic()}[base]


class FrameLink:
    """Directions between a region's frame and the cube's (astropy_frame; the cube's from
    wcs_to_celestial_frame), carried frame to frame, never SkyCoord to a default-made frame, so
    neither side borrows the other's equinox or obstime. ICRS, FK5 at any equinox and
    Galactic differ by a fixed rotation, found once from the basis vectors and checked on
    sample directions; any other pair (FK4's E-terms, say) goes through SkyCoord point by point,
    slower but exact."""

    def __init__(self, region_frame, cube_frame):
        self.region_frame, self.cube_frame = region_frame, cube_frame
        self.identity = region_frame.is_equivalent_frame(cube_frame)
        self.matrix = None if self.identity else self._rotation()

    def _transform(self, vectors, source, target) -> np.ndarray:
        from astropy.coordinates import CartesianRepresentation

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ERFA's notes on dubious years do not apply to fixed frames
            points = CartesianRepresentation(vectors[:, 0], vectors[:, 1], vectors[:, 2])
            coords = source.realize_frame(points).transform_to(target)
        xyz = coords.cartesian.xyz.value.T
        return xyz / np.linalg.norm(xyz, axis=1, keepdims=True)

    def _rotation(self):
        matrix = self._transform(np.eye(3), self.region_frame, self.cube_frame).T  # columns: images of x, y, z
        probe = unit_vectors(np.linspace(0.0, 330.0, 12), np.linspace(-80.0, 80.0, 12))
        exact = self._transform(probe, self.region_frame, self.cube_frame)
        orthogonal = np.allclose(matrix @ matrix.T, np.eye(3), atol=1e-13)
        return matrix if orthogonal and np.abs(probe @ matrix.T - exact).max() < 1e-12 else None

    def to_cube(self, vectors: np.ndarray) -> np.ndarray:
        """(..., 3) region-frame directions in the cube's frame."""
        if self.identity:
            return vectors
        if self.matrix is not None:
            return vectors @ self.matrix.T
        flat = vectors.reshape(-1, 3)
        return self._transform(flat, self.region_frame, self.cube_frame).reshape(vectors.shape)

    def to_region(self, vectors: np.ndarray) -> np.ndarray:
        """(..., 3) cube-frame directions in the region's frame (NaN rows stay NaN)."""
        if self.identity:
            return vectors
        if self.matrix is not None:
            return vectors @ self.matrix
        flat = vectors.reshape(-1, 3)
        out = np.full_like(flat, np.nan)
        good = np.isfinite(flat).all(axis=1)
        if good.any():
            out[good] = self._transform(flat[good], self.cube_frame, self.region_frame)
        return out.reshape(vectors.shape)


def _tangent_basis(centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors perpendicular to each centre and to each other."""
    helper = np.where(np.abs(centres[:, 2:3]) < 0.9, [[0.0, 0.0, 1.0]], [[1.0, 0.0, 0.0]])
    e1 = np.cross(helper, centres)
    e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
    return e1, np.cross(centres, e1)


def _great_circle_samples(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """n points from a to b (both (..., 3)) along the shorter great-circle arc, ends included."""
    t = np.linspace(0.0, 1.0, n)
    points = a[..., None, :] * (1.0 - t)[:, None] + b[..., None, :] * t[:, None]
    return points / np.linalg.norm(points, axis=-1, keepdims=True)


class ShapeGroup:
    """Regions of one shape in one frame, as arrays: `contains` tests directions, `edges`
    samples the boundary (edge by edge: a polygon's corners are real, so curvature is measured
    within an edge only)."""

    def __init__(self, regions):
        self.regions = list(regions)

    def contains(self, vectors: np.ndarray, lon: np.ndarray, lat: np.ndarray, gid: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def edges(self, gid: np.ndarray, n: int) -> np.ndarray:
        """(len(gid), n_edges, n, 3) region-frame boundary samples."""
        raise NotImplementedError


class CircleGroup(ShapeGroup):
    def __init__(self, regions: list[SkyCircle]):
        super().__init__(regions)
        self.centres = unit_vectors([r.lon_deg for r in regions], [r.lat_deg for r in regions])
        radius = np.radians([r.radius_deg for r in regions])
        self.radius_rad = radius
        self.chord2 = (2.0 * np.sin(radius / 2.0)) ** 2
        self.e1, self.e2 = _tangent_basis(self.centres)

    def contains(self, vectors, lon, lat, gid):
        diff = vectors - self.centres[gid]
        with np.errstate(invalid="ignore"):
            return np.einsum("ij,ij->i", diff, diff) <= self.chord2[gid]

    def edges(self, gid, n):
        angle = np.linspace(0.0, 2.0 * np.pi, n)  # closed: the last sample repeats the first
        r = self.radius_rad[gid][:, None, None]
        ring = np.cos(angle)[None, :, None] * self.e1[gid][:, None, :] + np.sin(angle)[None, :, None] * self.e2[gid][:, None, :]
        points = np.cos(r) * self.centres[gid][:, None, :] + np.sin(r) * ring
        return points[:, None, :, :]


class RangeGroup(ShapeGroup):
    def __init__(self, regions: list[SkyRange]):
        super().__init__(regions)
        self.lon_min = np.array([r.lon_min_deg for r in regions])
        self.lon_max = np.array([r.lon_max_deg for r in regions])
        self.lat_min = np.array([r.lat_min_deg for r in regions])
        self.lat_max = np.array([r.lat_max_deg for r in regions])
        self.full = self.lon_max - self.lon_min >= 360.0
        self.span = np.where(self.full, 360.0, (self.lon_max - self.lon_min) % 360.0)

    def contains(self, vectors, lon, lat, gid):
        lo, hi = self.lon_min[gid], self.lon_max[gid]
        with np.errstate(invalid="ignore"):
            in_lon = np.where(lo <= hi, (lon >= lo) & (lon <= hi), (lon >= lo) | (lon <= hi)) | self.full[gid]
            return in_lon & (lat >= self.lat_min[gid]) & (lat <= self.lat_max[gid])

    def edges(self, gid, n):
        t = np.linspace(0.0, 1.0, n)[None, :]
        lon_a = self.lon_min[gid][:, None] + self.span[gid][:, None] * t
        lat_a = self.lat_min[gid][:, None] + (self.lat_max[gid] - self.lat_min[gid])[:, None] * t
        ones = np.ones_like(t)
        sides = [(lon_a, self.lat_min[gid][:, None] * ones), (lon_a, self.lat_max[gid][:, None] * ones),
                 (self.lon_min[gid][:, None] * ones, lat_a),
                 ((self.lon_min[gid] + self.span[gid])[:, None] * ones, lat_a)]
        return np.stack([unit_vectors(lon, lat) for lon, lat in sides], axis=1)


class PolygonGroup(ShapeGroup):
    """Polygons with the same number of vertices."""

    def __init__(self, regions: list[SkyPolygon]):
        super().__init__(regions)
        vertices = np.array([r.vertices_deg for r in regions])  # (g, k, 2)
        self.vertices = unit_vectors(vertices[..., 0], vertices[..., 1])  # (g, k, 3)
        centres = self.vertices.sum(axis=1)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        self.e1, self.e2 = _tangent_basis(self.centres)
        self.plane = self._project(self.vertices, np.arange(len(regions))[:, None])  # (g, k, 2)

    def _project(self, vectors, gid):
        """Gnomonic projection about each polygon's centre; directions 90 deg or more away -> NaN."""
        depth = np.einsum("...j,...j->...", vectors, self.centres[gid])
        with np.errstate(invalid="ignore", divide="ignore"):
            depth = np.where(depth > 0.0, depth, np.nan)
            return np.stack([np.einsum("...j,...j->...", vectors, self.e1[gid]) / depth,
                             np.einsum("...j,...j->...", vectors, self.e2[gid]) / depth], axis=-1)

    def contains(self, vectors, lon, lat, gid):
        point = self._project(vectors, gid)  # (p, 2)
        px, py = point[:, 0:1], point[:, 1:2]
        ax, ay = self.plane[gid, :, 0], self.plane[gid, :, 1]  # (p, k)
        bx, by = np.roll(ax, -1, axis=1), np.roll(ay, -1, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            straddles = (ay > py) != (by > py)
            x_cross = ax + (py - ay) * (bx - ax) / (by - ay)
            crossings = (straddles & (px < x_cross)).sum(axis=1)
        return (crossings % 2 == 1) & np.isfinite(point).all(axis=1)

    def edges(self, gid, n):
        vertices = self.vertices[gid]
        return _great_circle_samples(vertices, np.roll(vertices, -1, axis=1), n)


def shape_groups(regions) -> list[tuple[str, ShapeGroup, list[int]]]:
    """Split regions (indexed by position) into (frame, group, positions) of one shape each."""
    buckets: dict[tuple, list[int]] = {}
    for i, region in enumerate(regions):
        size = len(region.vertices_deg) if isinstance(region, SkyPolygon) else 0
        buckets.setdefault((type(region).__name__, region.frame, size), []).append(i)
    kinds = {"SkyCircle": CircleGroup, "SkyRange": RangeGroup, "SkyPolygon": PolygonGroup}
    return [(frame, kinds[name]([regions[i] for i in positions]), positions)
            for (name, frame, _), positions in buckets.items()]
