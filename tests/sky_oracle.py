"""Brute-force answers for the sky-region tests: every pixel centre of a small cube (and of the
one-pixel ring round it), its world coordinate from astropy's `pixel_to_world`, and the
membership computed independently of ingest.sky: `SkyCoord.separation` for circles, explicit
longitude/latitude tests for ranges, a winding number about the point for polygons (ingest
uses an even-odd count about the polygon's centre), and SpectralCoord for bands.

Each answer comes as (strict, loose): members by more than EPS and members within EPS. A pixel
centre that sits on a region's edge to ~1e-7 deg may go either way; the box must hold every
strict member and no pixel that is not a loose member.
"""
from __future__ import annotations

import warnings

import astropy.units as u
import numpy as np
from astropy.coordinates import FK4, FK5, ICRS, Galactic, SkyCoord
from astropy.io import fits
from astropy.wcs import WCS

from ingest.sky.regions import SkyCircle, SkyRange

EPS_DEG = 1e-7
FRAMES = {"icrs": ICRS(), "fk5": FK5(equinox="J2000"), "galactic": Galactic(), "fk4": FK4(equinox="B1950")}


def sky_header(proj: str, lon0: float, lat0: float, cdelt1: float, cdelt2: float, nx: int, ny: int,
               frame: str = "icrs", rotation_deg: float = 0.0) -> fits.Header:
    """A 2-D image header: projection, reference at the cube's centre, optional CROTA2."""
    lon_name, lat_name = ("GLON", "GLAT") if frame == "galactic" else ("RA", "DEC")
    header = fits.Header()
    header["NAXIS"], header["NAXIS1"], header["NAXIS2"] = 2, nx, ny
    header["CTYPE1"], header["CTYPE2"] = lon_name.ljust(5, "-") + proj, lat_name.ljust(5, "-") + proj
    header["CRVAL1"], header["CRVAL2"] = lon0, lat0
    header["CRPIX1"], header["CRPIX2"] = (nx + 1) / 2, (ny + 1) / 2
    header["CDELT1"], header["CDELT2"] = cdelt1, cdelt2
    header["CUNIT1"] = header["CUNIT2"] = "deg"
    if rotation_deg:
        header["CROTA2"] = rotation_deg
    if frame in ("icrs", "fk5", "fk4"):
        header["RADESYS"] = frame.upper()
        if frame != "icrs":
            header["EQUINOX"] = 2000.0 if frame == "fk5" else 1950.0
    return header


def _quiet_wcs(header) -> WCS:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return WCS(header)


def sky_members(header, nx: int, ny: int, region, window=None):
    """(strict, loose) booleans over pixel centres x in -1..nx, y in -1..ny (array [y+1, x+1]),
    or over window = (x_start, x_stop, y_start, y_stop) half-open (array [y-y_start, x-x_start])."""
    wcs = _quiet_wcs(header).celestial
    x_start, x_stop, y_start, y_stop = window or (-1, nx + 1, -1, ny + 1)
    yy, xx = np.mgrid[y_start:y_stop, x_start:x_stop]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        coords = wcs.pixel_to_world(xx.ravel(), yy.ravel())
        finite = np.isfinite(coords.spherical.lon.deg) & np.isfinite(coords.spherical.lat.deg)
        inframe = coords[finite].transform_to(FRAMES[region.frame])
    lon, lat = inframe.spherical.lon.deg % 360.0, inframe.spherical.lat.deg
    if isinstance(region, SkyCircle):
        centre = SkyCoord(region.lon_deg * u.deg, region.lat_deg * u.deg, frame=FRAMES[region.frame])
        separation = inframe.separation(centre).deg
        strict, loose = separation < region.radius_deg - EPS_DEG, separation <= region.radius_deg + EPS_DEG
    elif isinstance(region, SkyRange):
        strict, loose = _range_members(region, lon, lat)
    else:
        strict, loose = _polygon_members(region, lon, lat)
    out = []
    for values in (strict, loose):
        grid = np.zeros(xx.size, bool)
        grid[np.flatnonzero(finite)] = values
        out.append(grid.reshape(xx.shape))
    return out[0], out[1]


def _range_members(region, lon, lat):
    lat_strict = (lat > region.lat_min_deg + EPS_DEG) & (lat < region.lat_max_deg - EPS_DEG)
    lat_loose = (lat >= region.lat_min_deg - EPS_DEG) & (lat <= region.lat_max_deg + EPS_DEG)
    if region.full_lon:
        return lat_strict, lat_loose
    width = (region.lon_max_deg - region.lon_min_deg) % 360.0
    east = (lon - region.lon_min_deg) % 360.0  # how far east of lon_min
    lon_strict = (east > EPS_DEG) & (east < width - EPS_DEG)
    near = lambda d: np.minimum(np.abs(d), 360.0 - np.abs(d)) <= EPS_DEG  # noqa: E731
    lon_loose = (east <= width) | near(east) | near(east - width)
    pole = np.abs(lat) > 90.0 - 1e-6  # longitude means nothing at a pole
    return lat_strict & lon_strict & ~pole, lat_loose & (lon_loose | pole)


def _vectors(lon_deg, lat_deg):
    lon, lat = np.radians(lon_deg), np.radians(lat_deg)
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=-1)


def _polygon_members(region, lon, lat):
    """Winding number of the vertices round each point, seen in the point's own tangent plane
    (gnomonic about the point: great-circle edges stay straight)."""
    points = _vectors(lon, lat)
    vertices = _vectors(*np.array(region.vertices_deg).T)
    depth = points @ vertices.T
    helper = np.where(np.abs(points[:, 2:3]) < 0.9, [[0.0, 0.0, 1.0]], [[1.0, 0.0, 0.0]])
    e1 = np.cross(helper, points)
    e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
    e2 = np.cross(points, e1)
    with np.errstate(divide="ignore", invalid="ignore"):
        angle = np.arctan2((vertices[None] * e2[:, None]).sum(-1) / depth, (vertices[None] * e1[:, None]).sum(-1) / depth)
    turns = np.diff(np.concatenate([angle, angle[:, :1]], axis=1), axis=1)
    winding = np.round(((turns + np.pi) % (2 * np.pi) - np.pi).sum(axis=1) / (2 * np.pi))
    inside = (depth > 1e-3).all(axis=1) & (winding != 0)
    normals = np.cross(vertices, np.roll(vertices, -1, axis=0))
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    on_edge_line = (np.abs(points @ normals.T) < np.radians(EPS_DEG)).any(axis=1)
    return inside & ~on_edge_line, inside | on_edge_line


def bbox(members) -> tuple[int, int, int, int] | None:
    """(x0, x1, y0, y1) half-open of the members inside the cube (the ring dropped), or None."""
    inner = members[1:-1, 1:-1]
    if not inner.any():
        return None
    ys, xs = np.nonzero(inner)
    return int(xs.min()), int(xs.max()) + 1, int(ys.min()), int(ys.max()) + 1


def ring(members) -> tuple[bool, bool]:
    """Whether the ring's columns beyond x's edges, and its rows beyond y's, hold members."""
    return bool(members[:, 0].any() or members[:, -1].any()), bool(members[0, :].any() or members[-1, :].any())


def spectral_values(header, n: int, unit, convention=None, rest_hz=None) -> np.ndarray:
    """Channel centres -1..n by astropy's SpectralCoord, in unit (velocities by its doppler_*)."""
    coords = _quiet_wcs(header).spectral.pixel_to_world(np.arange(-1, n + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if convention is None:
            return coords.to_value(unit, equivalencies=u.spectral())
        return coords.to_value(unit, doppler_convention=convention, doppler_rest=rest_hz * u.Hz)


def channel_members(values: np.ndarray, lo: float, hi: float):
    """(strict, loose) channels -1..n in [lo, hi], with a relative tolerance on the edges."""
    tolerance = 1e-9 * np.nanmax(np.abs(values))
    return (values > lo + tolerance) & (values < hi - tolerance), (values >= lo - tolerance) & (values <= hi + tolerance)


def check_members_box(header, nx: int, ny: int, region, strict, loose):
    """ingest's world_box for `region` against the oracle's (strict, loose) members: every strict
    member in the box, nothing but loose members bounding it, clipping as the ring says; a refusal
    only when no pixel centre is a member, naming the region. The WorldBox, or None if refused."""
    from ingest.errors import RegionError
    from ingest.sky.pixels import world_box

    must, may = bbox(strict), bbox(loose)
    try:
        got = world_box(header, (ny, nx), pos=region)
    except RegionError as exc:
        assert must is None, f"{region.describe()}: refused ({exc}) but pixels {must} are in it"
        assert region.describe(for_people=True) in str(exc)
        return None
    assert may is not None, f"{region.describe()}: box {got.box} but no pixel centre is in it"
    (y0, y1), (x0, x1) = got.box
    if must is not None:
        assert x0 <= must[0] and x1 >= must[1] and y0 <= must[2] and y1 >= must[3], (region.describe(), got.box, must)
    assert x0 >= may[0] and x1 <= may[1] and y0 >= may[2] and y1 <= may[3], (region.describe(), got.box, may)
    names = (header["CTYPE1"].split("-")[0].lower(), header["CTYPE2"].split("-")[0].lower())
    for name, must_clip, may_clip in zip(names, ring(strict), ring(loose)):
        assert must_clip <= (name in got.clipped) <= may_clip, (region.describe(), name, got.clipped, must_clip, may_clip)
    return got
