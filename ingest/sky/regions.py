"""Regions in world coordinates: what an astronomer asks for, before any pixel is known.

Spatial regions (`SkyCircle`, `SkyRange`, `SkyPolygon`) carry degrees in one celestial frame,
named by a string (`normalize_frame`, in `ingest.sky.frames` and re-exported here): "icrs", "galactic", "fk5" (FK5 J2000), "fk4" (FK4 B1950),
or either of the last two at another equinox, "fk5 J2010", "fk4 B1900" (FK4's obstime is its
equinox, astropy's default); spectral ones carry a band in frequency, wavelength or velocity
(`SpectralRange`) or 0-based channels (`ChannelRange`; both defined in `ingest.sky.bands` and
re-exported here, with `parse_band` and `parse_channels`). They are frozen dataclasses of plain
floats and strings, so they pickle and broadcast over MPI unchanged; `ingest.sky.pixels`
turns them into pixel boxes with a cube's header.

The text forms (`parse_pos`, `parse_band`, `parse_channels`) accept IVOA SODA's syntax and a
readable one with units. The rule for bare numbers: in SODA's form every value is a bare number
and means degrees (POS) or vacuum wavelength in metres (BAND); a single unit word after the
numbers applies to all of them (BAND: `1417.0 1418.5 MHz`; POS: `deg` only, what `describe()`
writes, `CIRCLE icrs 150.12 -30.25 0.04 deg`, so a description parses back to the same region:
another unit there, `150.1 -30.2 2.4 arcmin`, could as well be the last value's own, and is
refused). Otherwise every value needs its own unit or sexagesimal form (`10h00m28.8s`,
`-30d15m00s`, `10:00:28.8` which is hours for an equatorial longitude and degrees elsewhere), a
unit word after a number being that number's own unit as astropy writes a quantity
(`150.1 deg -30.2 deg 2.4 arcmin`): a bare number beside values with units is refused, because
"10" next to "10h02m" could mean hours or degrees. A frame word may follow the shape, and an
equinox may follow fk5 or fk4 (`circle fk5 J2010 150.1deg -30.2deg 1arcmin`).
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import astropy.units as u
import numpy as np
from astropy.coordinates import Angle

from ingest.errors import ConfigError
from ingest.sky.bands import (CONVENTIONS, KINDS, ChannelRange, SpectralRange, bare_number, degrees_text, number_text,
                              parse_band, parse_channels, rest_frequency_hz)
from ingest.sky.frames import _EQUINOX, FRAMES, frame_equinox, frame_of, normalize_frame

__all__ = ["FRAMES", "KINDS", "CONVENTIONS", "SkyCircle", "SkyRange", "SkyPolygon", "SpectralRange",
           "ChannelRange", "SkyRegion", "SpectralRegion", "normalize_frame", "frame_equinox", "frame_of",
           "parse_pos", "parse_band", "parse_channels", "rest_frequency_hz"]

_COLON_SEXAGESIMAL = re.compile(r"^[+-]?\d+(\.\d*)?:\d+(\.\d*)?(:\d+(\.\d*)?)?$")


def _check_lat(lat_deg: float, what: str) -> None:
    if not -90.0 <= lat_deg <= 90.0:
        raise ConfigError(f"{what}: latitude {lat_deg} deg is outside -90..90")


@dataclass(frozen=True)
class SkyCircle:
    """Every direction within radius_deg (great-circle distance) of (lon_deg, lat_deg) in frame."""

    lon_deg: float
    lat_deg: float
    radius_deg: float
    frame: str = "icrs"

    def __post_init__(self):
        object.__setattr__(self, "frame", normalize_frame(self.frame))
        object.__setattr__(self, "lon_deg", float(self.lon_deg) % 360.0)
        what = f"circle at ({self.lon_deg}, {self.lat_deg})"
        _check_lat(float(self.lat_deg), what)
        object.__setattr__(self, "lat_deg", float(self.lat_deg))
        radius = float(self.radius_deg)
        if not 0.0 < radius <= 180.0:
            raise ConfigError(f"{what}: radius {self.radius_deg} deg must be > 0 and at most 180")
        object.__setattr__(self, "radius_deg", radius)

    @classmethod
    def around(cls, center, radius) -> SkyCircle:
        """From an astropy SkyCoord and an angle (Quantity or Angle). The centre keeps its own frame
        (ICRS, Galactic, FK5 or FK4 at its equinox); a frame no name says exactly (FK4 observed at
        another epoch, ecliptic, ...) is carried to ICRS with all its attributes (a point converts
        exactly; the radius is then measured in ICRS, which differs from that frame's own measure
        by under 2e-6 of it, FK4's E-terms, where the frame is not a rotation of ICRS)."""
        frame, lon, lat = _skycoord_deg(center)
        if not isinstance(radius, u.Quantity) or not radius.unit.is_equivalent(u.deg):
            raise ConfigError(f"circle radius {radius!r}: give an angle with a unit, e.g. 5 * u.arcmin")
        return cls(lon, lat, float(radius.to_value(u.deg)), frame)

    def describe(self, for_people: bool = False) -> str:
        """Text that parses back to this region; `for_people`: degrees to 1e-6 for a message."""
        num = degrees_text if for_people else number_text
        return f"CIRCLE {self.frame} {num(self.lon_deg)} {num(self.lat_deg)} {num(self.radius_deg)} deg"

    def as_dict(self) -> dict:
        return {"shape": "circle", **asdict(self), "text": self.describe()}


@dataclass(frozen=True)
class SkyRange:
    """lon_min_deg..lon_max_deg by lat_min_deg..lat_max_deg in frame, edges included.

    Longitudes are kept in [0, 360); lon_min > lon_max means the range wraps through 0
    (350..10). The full circle of longitude is (0, 360)."""

    lon_min_deg: float
    lon_max_deg: float
    lat_min_deg: float
    lat_max_deg: float
    frame: str = "icrs"

    def __post_init__(self):
        object.__setattr__(self, "frame", normalize_frame(self.frame))
        lon_min, lon_max = float(self.lon_min_deg), float(self.lon_max_deg)
        lat_min, lat_max = float(self.lat_min_deg), float(self.lat_max_deg)
        what = f"range {lon_min}..{lon_max} by {lat_min}..{lat_max} deg"
        if math.isnan(lon_min) or math.isnan(lon_max):
            raise ConfigError(f"{what}: a longitude is not a number")
        if math.isinf(lon_min) or math.isinf(lon_max) or (lon_min <= lon_max and lon_max - lon_min >= 360.0):
            lon_min, lon_max = 0.0, 360.0  # an open or full side: every longitude
        else:
            lon_min, lon_max = lon_min % 360.0, lon_max % 360.0
        lat_min = -90.0 if lat_min == -math.inf else lat_min
        lat_max = 90.0 if lat_max == math.inf else lat_max
        _check_lat(lat_min, what)
        _check_lat(lat_max, what)
        if lat_min > lat_max:
            raise ConfigError(f"{what}: the latitude range is reversed (give the lower latitude first)")
        for name, value in (("lon_min_deg", lon_min), ("lon_max_deg", lon_max),
                            ("lat_min_deg", lat_min), ("lat_max_deg", lat_max)):
            object.__setattr__(self, name, value)

    @property
    def full_lon(self) -> bool:
        """True when every longitude is in the range."""
        return self.lon_max_deg - self.lon_min_deg >= 360.0

    def describe(self, for_people: bool = False) -> str:
        """Text that parses back to this region; `for_people`: degrees to 1e-6 for a message."""
        num = degrees_text if for_people else number_text
        values = (self.lon_min_deg, self.lon_max_deg, self.lat_min_deg, self.lat_max_deg)
        return f"RANGE {self.frame} " + " ".join(num(v) for v in values) + " deg"

    def as_dict(self) -> dict:
        return {"shape": "range", **asdict(self), "text": self.describe()}


@dataclass(frozen=True)
class SkyPolygon:
    """The region inside great-circle edges joining vertices_deg ((lon, lat), ...) in frame.

    Winding is free: the polygon must lie within a hemisphere (every vertex less than 90 deg
    from the vertices' mean direction), so its inside is the smaller of the two parts of the
    sky its edges divide; and its edges must not cross one another (a crossed polygon has no
    single inside: even-odd and winding rules disagree on it)."""

    vertices_deg: tuple[tuple[float, float], ...]
    frame: str = "icrs"

    def __post_init__(self):
        object.__setattr__(self, "frame", normalize_frame(self.frame))
        vertices = tuple((float(lon) % 360.0, float(lat)) for lon, lat in self.vertices_deg)
        if len(vertices) >= 3 and vertices[0] == vertices[-1]:
            vertices = vertices[:-1]  # a closed ring written out: the last vertex repeats the first
        what = f"polygon {' '.join(f'({number_text(a)}, {number_text(b)})' for a, b in vertices)}"
        if len(vertices) < 3:
            raise ConfigError(f"{what}: a polygon needs at least 3 vertices, got {len(vertices)}")
        for _, lat in vertices:
            _check_lat(lat, what)
        problem = _polygon_problem(vertices)
        if problem:
            raise ConfigError(f"{what}: {problem}")
        object.__setattr__(self, "vertices_deg", vertices)

    def describe(self, for_people: bool = False) -> str:
        """Text that parses back to this region; `for_people`: degrees to 1e-6 for a message."""
        num = degrees_text if for_people else number_text
        values = " ".join(f"{num(lon)} {num(lat)}" for lon, lat in self.vertices_deg)
        return f"POLYGON {self.frame} {values} deg"

    def as_dict(self) -> dict:
        return {"shape": "polygon", "vertices_deg": [list(v) for v in self.vertices_deg],
                "frame": self.frame, "text": self.describe()}


def _polygon_problem(vertices) -> str | None:
    """Why these (lon, lat) vertices are no polygon ingest can cut, or None. In the gnomonic
    projection about the vertices' mean direction great-circle edges are straight segments,
    so crossing edges are crossing segments there."""
    lon, lat = np.radians(np.array(vertices, float).T)
    points = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    centre = points.sum(axis=0)
    norm = np.linalg.norm(centre)
    depth = points @ (centre / norm) if norm > 1e-9 else np.zeros(len(points))
    if depth.min() <= 1e-9:
        return ("spans a hemisphere or more (a vertex lies 90 deg or more from the vertices' mean "
                "direction); split it into smaller polygons")
    helper = np.array([0.0, 0.0, 1.0]) if abs(centre[2] / norm) < 0.9 else np.array([1.0, 0.0, 0.0])
    e1 = np.cross(helper, centre)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(centre / norm, e1)
    plane = np.stack([points @ e1, points @ e2], axis=1) / depth[:, None]
    a, b = plane, np.roll(plane, -1, axis=0)
    k = len(plane)

    def side(p, q, r):  # sign of the turn p -> q -> r, broadcast over edge pairs
        return np.sign((q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1]) - (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0]))

    ai, bi, aj, bj = a[:, None], b[:, None], a[None, :], b[None, :]
    crossing = (side(ai, bi, aj) * side(ai, bi, bj) <= 0) & (side(aj, bj, ai) * side(aj, bj, bi) <= 0)
    i, j = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    apart = (j > i + 1) & ~((i == 0) & (j == k - 1))  # edges that share no vertex
    hits = np.argwhere(crossing & apart)
    if len(hits):
        first, second = hits[0]
        return (f"edge {first + 1} (vertex {first + 1} to {(first + 1) % k + 1}) crosses edge {second + 1} "
                f"(vertex {second + 1} to {(second + 1) % k + 1}); give the vertices in order round the polygon")
    return None


SkyRegion = SkyCircle | SkyRange | SkyPolygon
SpectralRegion = SpectralRange | ChannelRange


def _skycoord_deg(center) -> tuple[str, float, float]:
    """(frame name, lon_deg, lat_deg) of a SkyCoord: in its own frame when a frame name says that
    frame exactly (frame_of), else carried to ICRS by astropy with every attribute the SkyCoord
    carries (a point converts exactly).

    Never transform to a default-made frame here: SkyCoord.transform_to(FK5()) keeps the
    SkyCoord's own equinox (its attributes fill the target's unset ones), so an FK5 J2010
    position would stay J2010 while being read as J2000."""
    from astropy.coordinates import ICRS, SkyCoord

    if not isinstance(center, SkyCoord):
        raise ConfigError(f"sky position {center!r}: expected an astropy SkyCoord")
    if not center.isscalar:
        raise ConfigError(f"sky position {center!r}: expected one position, got {center.shape} of them")
    name = frame_of(center.frame)
    if name is None:
        center, name = center.transform_to(ICRS()), "icrs"
    spherical = center.spherical
    return name, float(spherical.lon.deg), float(spherical.lat.deg)


# ---------------------------------------------------------------------------------- positions

_SHAPES = {"circle": 3, "range": 4, "polygon": None}


def _is_word(token: str) -> bool:
    """A frame or unit word: not a number, an angle with a unit, nor sexagesimal."""
    return re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", token) is not None and bare_number(token) is None


def _angle_unit_word(token: str):
    try:
        unit = u.Unit(token)
    except ValueError:
        return None
    return unit if unit.is_equivalent(u.deg) else None


def _quantities(values: list[str], text: str) -> list[str]:
    """The values with each unit word joined to the bare number before it ('2.4', 'arcmin' ->
    '2.4 arcmin'), a quantity as astropy writes one; a unit word after anything else is refused."""
    joined: list[str] = []
    for token in values:
        if not _is_word(token):
            joined.append(token)
        elif _angle_unit_word(token) is None:
            raise ConfigError(f"position {text!r}: {token!r} is not an angle unit (deg, arcmin, arcsec)")
        elif not joined or bare_number(joined[-1]) is None:
            after = f"follows {joined[-1]!r}, which is not a bare number" if joined else "comes before any number"
            raise ConfigError(f"position {text!r}: the unit word {token!r} {after}; write each angle once, "
                              f"e.g. 2.4arcmin or 2.4 arcmin")
        else:
            joined[-1] = f"{joined[-1]} {token}"
    return joined


def _readable_angle(token: str, role: str, equatorial: bool, text: str) -> float:
    """One angle with a unit or in sexagesimal, in degrees; role is longitude, latitude or radius."""
    if " " in token:  # a number and its unit word (_quantities)
        number, word = token.split()
        value, unit = float(number), _angle_unit_word(word)
        if not math.isfinite(value):
            raise ConfigError(f"position {text!r}: {token!r} is infinite; an open RANGE side is a bare -Inf or +Inf")
        if unit == u.hourangle and role != "longitude":
            raise ConfigError(f"position {text!r}: {token!r} is in hours, which only a longitude may be")
        return value * float(unit.to(u.deg))
    if _COLON_SEXAGESIMAL.match(token):
        hours = role == "longitude" and equatorial
        return Angle(token, unit=u.hourangle if hours else u.deg).to_value(u.deg)
    try:
        angle = Angle(token)
    except (ValueError, u.UnitsError):
        raise ConfigError(f"position {text!r}: {token!r} is not an angle (give a unit, e.g. 150.12deg or "
                          f"5arcmin, or sexagesimal, e.g. 10h00m28.8s -30d15m00s)") from None
    if angle.unit == u.hourangle:
        if role != "longitude":
            raise ConfigError(f"position {text!r}: {token!r} is in hours, which only a longitude may be")
        return float(angle.to_value(u.hourangle)) * 15.0
    return float(angle.to_value(u.deg))


def parse_pos(text: str, frame: str = "icrs") -> SkyCircle | SkyRange | SkyPolygon:
    """'CIRCLE 150.12 -30.25 0.04', 'RANGE 150 150.3 -30.4 -30.1', 'POLYGON lon lat ...' (SODA,
    degrees, -Inf/+Inf for an open RANGE side) or the readable form with units, e.g.
    'circle galactic 263.5deg 20.1deg 3arcmin' or 'circle 150.1 deg -30.2 deg 2.4 arcmin'; a frame
    word after the shape, with an equinox for fk5 or fk4 ('circle fk5 J2010 ...'), overrides frame."""
    tokens = str(text).replace(",", " ").split()
    if not tokens or tokens[0].lower() not in _SHAPES:
        raise ConfigError(f"position {text!r}: expected CIRCLE, RANGE or POLYGON followed by numbers, "
                          f"e.g. 'CIRCLE 150.12 -30.25 0.04'")
    shape, values = tokens[0].lower(), tokens[1:]
    frame_words = []  # a frame word, and an equinox after it (fk5 J2010)
    while (values and len(frame_words) < 2 and (_is_word(values[0]) or _EQUINOX.fullmatch(values[0]))
           and _angle_unit_word(values[0]) is None):
        frame_words.append(values.pop(0))
    try:
        frame = normalize_frame(" ".join(frame_words) if frame_words else frame)
    except ConfigError as exc:
        raise ConfigError(f"position {text!r}: {exc}") from None
    if values and _is_word(values[-1]) and all(bare_number(v) is not None for v in values[:-1]):
        unit_word, values = values[-1], values[:-1]  # SODA's numbers and one unit word for them all
        unit = _angle_unit_word(unit_word)
        if unit is None:
            raise ConfigError(f"position {text!r}: {unit_word!r} is not an angle unit (deg, arcmin, arcsec)")
        if unit != u.deg:  # '150.1 -30.2 2.4 arcmin': the unit of all three, or 2.4's own?
            raise ConfigError(f"position {text!r}: {unit_word!r} after bare numbers could be the unit of them all "
                              f"or of the last one only; give each angle its unit (150.1deg -30.2deg 2.4arcmin, "
                              f"or 150.1 deg -30.2 deg 2.4 arcmin), or all in degrees (SODA)")
    else:
        values = _quantities(values, text)
    count = _SHAPES[shape]
    if count is not None and len(values) != count:
        names = "lon lat radius" if shape == "circle" else "lon_min lon_max lat_min lat_max"
        raise ConfigError(f"position {text!r}: {shape.upper()} takes {count} values ({names}), got {len(values)}")
    if shape == "polygon" and (len(values) < 6 or len(values) % 2):
        raise ConfigError(f"position {text!r}: POLYGON takes lon lat pairs, at least 3 of them; "
                          f"got {len(values)} values")
    roles = {"circle": ["longitude", "latitude", "radius"],
             "range": ["longitude", "longitude", "latitude", "latitude"],
             "polygon": ["longitude", "latitude"] * (len(values) // 2)}[shape]
    bare = [bare_number(v) for v in values]
    soda = all(b is not None for b in bare)
    degrees = []
    for token, number, role in zip(values, bare, roles):
        if number is not None and (math.isinf(number) and shape != "range"):
            raise ConfigError(f"position {text!r}: {token!r} is infinite; only a RANGE side may be open")
        if number is not None and (soda or math.isinf(number)):
            degrees.append(number)  # SODA's bare degrees: the one unit word after them can only be deg
        elif number is not None:
            raise ConfigError(f"position {text!r}: {token!r} has no unit; beside values with units every "
                              f"angle needs one (e.g. {token}deg), or give all as bare degrees (SODA)")
        else:
            degrees.append(_readable_angle(token, role, frame != "galactic", text))
    try:
        if shape == "circle":
            return SkyCircle(degrees[0], degrees[1], degrees[2], frame)
        if shape == "range":
            return SkyRange(degrees[0], degrees[1], degrees[2], degrees[3], frame)
        return SkyPolygon(tuple(zip(degrees[0::2], degrees[1::2])), frame)
    except ConfigError as exc:
        raise ConfigError(f"position {text!r}: {exc}") from None
