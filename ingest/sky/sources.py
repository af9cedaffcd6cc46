"""From catalogue rows to cut-out requests: one per source, sized by a rule, named for a file.

Size rules:
- `BoundingBox(margin_px=10)`: SoFiA-2's cubelets. The source's x_min..z_max grown by the
  margin on every side (SoFiA-2's `output.marginCubelets`, default 10), as an inclusive 0-based
  pixel box of the full cube; it is clipped to the cube later, where the cube's shape is known.
- `FixedSize(radius_deg, spectral_half_width, spectral_unit)`: a circle of that radius about the
  source's sky position and, when a half width is given, a band of +- that half width about the
  source's spectral value (no half width: every channel).
- `ColumnSize(radius_column, spectral_column)`: the same, with the radius and half width read per
  source from the catalogue's columns, in their units.
The default is BoundingBox(10) when the catalogue has x_min..z_max; otherwise a size is needed.

The band about a source (`spectral_band`, the one place spectral values change kind): the
source's spectral value is converted into the half width's kind and unit, and the band is that
centre +- the half width. Frequency <-> wavelength is exact (lambda = c / nu); to or from a
velocity uses the rest frequency (`rest_hz`, the cube's RESTFRQ/RESTFREQ) and the velocity's
convention: the catalogue column's own (v_rad radio, v_opt optical, v_app relativistic) or, for a
velocity half width about a frequency or wavelength, the size rule's `convention` (default
radio, as HI cubes are usually labelled). So a 300 km/s half width about a `freq` of 1.4170 GHz
with RESTFRQ 1.420405752 GHz gives the radio velocity band 718.8 +- 300 km/s. A velocity half
width about a velocity column needs no rest frequency.

File stems: the source's name with every character other than ASCII letters, digits and `+-._`
replaced by `_` (a leading `.` too, so no stem is hidden, `.` or `..`), at most 200 characters;
names that then coincide (ignoring case, as macOS and Windows file systems do) each get `_ROW`
appended, the 0-based row, so every stem is unique.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
from astropy import units as u

from ingest.errors import ConfigError
from ingest.sky.bands import readable
from ingest.sky.catalogue import BBOX_COLUMNS, SPECTRAL_COLUMNS, Catalogue
from ingest.sky.regions import CONVENTIONS, SkyCircle, SpectralRange
from ingest.sky.tables import parse_unit

DEFAULT_MARGIN_PX = 10  # SoFiA-2's output.marginCubelets default
MAX_STEM_CHARS = 200  # leaves room for a row suffix and an extension within 255-byte file names
_UNSAFE = re.compile(r"[^A-Za-z0-9+\-._]")
_KIND_OF = {"frequency": "frequency", "speed/velocity": "velocity", "length": "wavelength"}
_SI = {"frequency": u.Hz, "velocity": u.m / u.s, "wavelength": u.m}
_DOPPLER = {"radio": u.doppler_radio, "optical": u.doppler_optical, "relativistic": u.doppler_relativistic}


def _spectral_kind(unit_text: str | None, field: str) -> str:
    unit = parse_unit(unit_text)
    kind = _KIND_OF.get(str(unit.physical_type)) if unit is not None else None
    if kind is None:
        raise ConfigError(f"{field}: {unit_text!r} is not a spectral unit (a frequency such as MHz, a velocity "
                          "such as km/s, or a wavelength such as nm)")
    return kind


def _check_convention(convention, field: str) -> None:
    if convention not in CONVENTIONS:
        raise ConfigError(f"{field}: velocity convention {convention!r} is not one of {', '.join(CONVENTIONS)}")


@dataclass(frozen=True)
class BoundingBox:
    """SoFiA-2's cubelet box: x_min..z_max grown by `margin_px` pixels on every side."""
    margin_px: int = DEFAULT_MARGIN_PX

    def __post_init__(self):
        if not isinstance(self.margin_px, int) or isinstance(self.margin_px, bool) or self.margin_px < 0:
            raise ConfigError(f"BoundingBox.margin_px: {self.margin_px!r} must be a whole number of pixels >= 0")

    def describe(self) -> str:
        return f"bounding box + {self.margin_px} px"


@dataclass(frozen=True)
class FixedSize:
    """A circle of `radius_deg` about each source and, with a half width, a band of
    +- `spectral_half_width` (in `spectral_unit`) about its spectral value."""
    radius_deg: float
    spectral_half_width: float | None = None
    spectral_unit: str | None = None
    convention: str = "radio"  # of a velocity half width about a frequency or wavelength column

    def __post_init__(self):
        if not isinstance(self.radius_deg, (int, float)) or not 0 < self.radius_deg <= 180:
            raise ConfigError(f"FixedSize.radius_deg: {self.radius_deg!r} must be an angle in (0, 180] deg")
        if self.spectral_half_width is not None:
            width = self.spectral_half_width
            if not isinstance(width, (int, float)) or not math.isfinite(width) or width <= 0:
                raise ConfigError(f"FixedSize.spectral_half_width: {width!r} must be a number > 0")
            _spectral_kind(self.spectral_unit, "FixedSize.spectral_unit")
        _check_convention(self.convention, "FixedSize.convention")

    def describe(self) -> str:
        band = f" +- {readable(self.spectral_half_width, self.spectral_unit)}" if self.spectral_half_width else ""
        return f"radius {readable(self.radius_deg * 60, 'arcmin')}{band}"


@dataclass(frozen=True)
class ColumnSize:
    """Per source: the radius from `radius_column`, the spectral half width from
    `spectral_column` (None: every channel), in the columns' units unless given here."""
    radius_column: str
    spectral_column: str | None = None
    radius_unit: str | None = None  # overrides the column's unit (default when it has none: deg)
    spectral_unit: str | None = None  # overrides it (default when none: the spectral column's unit)
    convention: str = "radio"  # of a velocity half width about a frequency or wavelength column

    def __post_init__(self):
        for field in ("radius_column", "spectral_column"):
            value = getattr(self, field)
            if not (value is None and field == "spectral_column") and (not isinstance(value, str) or not value):
                raise ConfigError(f"ColumnSize.{field}: {value!r} must be a column name")
        if self.radius_unit is not None and (parse_unit(self.radius_unit) is None
                                             or not parse_unit(self.radius_unit).is_equivalent(u.deg)):
            raise ConfigError(f"ColumnSize.radius_unit: {self.radius_unit!r} is not an angle unit (deg, arcmin, arcsec)")
        if self.spectral_unit is not None:
            _spectral_kind(self.spectral_unit, "ColumnSize.spectral_unit")
        _check_convention(self.convention, "ColumnSize.convention")

    def describe(self) -> str:
        band = f", half width from column {self.spectral_column}" if self.spectral_column else ""
        return f"radius from column {self.radius_column}{band}"


@dataclass(frozen=True)
class CutoutRequest:
    """One source's cut-out: a pixel box (inclusive, 0-based, FITS order x, y, z, margin applied,
    not yet clipped to the cube), or a sky circle and an optional band, or why it is skipped."""
    name: str
    file_stem: str
    row: int
    pixel_box_fits: tuple[int, int, int, int, int, int] | None = None
    pos: SkyCircle | None = None
    band: SpectralRange | None = None
    skip_reason: str | None = None

    def __post_init__(self):
        kinds = [self.pixel_box_fits is not None, self.pos is not None, self.skip_reason is not None]
        if sum(kinds) != 1 or (self.band is not None and self.pos is None):
            raise ValueError(f"CutoutRequest for row {self.row}: exactly one of pixel_box_fits, pos (with an "
                             "optional band) or skip_reason")


def default_size(catalogue: Catalogue):
    """BoundingBox(10) when the catalogue has x_min..z_max; else ConfigError asking for a size."""
    if all(catalogue.origin(c) for c in BBOX_COLUMNS):
        return BoundingBox(DEFAULT_MARGIN_PX)
    raise ConfigError(f"catalogue {catalogue.path}: has no bounding box (x_min..z_max), so a size is needed: "
                      "a radius and a spectral half width (e.g. '5arcmin 300km/s') or per-source columns "
                      f"('column:RADIUS,column:HALFWIDTH'); it has columns: {', '.join(catalogue.columns)}")


def check_columns(catalogue: Catalogue, size) -> None:
    """ConfigError, naming the file, the missing columns and the columns it has, when `catalogue`
    lacks what `size` needs."""
    missing = [] if catalogue.origin("name") else ["name (or id)"]
    if isinstance(size, BoundingBox):
        missing += [c for c in BBOX_COLUMNS if not catalogue.origin(c)]
    else:
        if not catalogue.origin("lon"):
            missing.append("ra/dec (or l/b, lon/lat)")
        if _wants_band(size) and not catalogue.origin("spectral"):
            missing.append(f"a spectral column ({'/'.join(SPECTRAL_COLUMNS)})")
        if isinstance(size, ColumnSize):
            for column in filter(None, (size.radius_column, size.spectral_column)):
                if not any(c.casefold() == column.casefold() for c in catalogue.columns):
                    missing.append(column)
    if missing:
        raise catalogue.missing(size.describe(), missing)
    if not isinstance(size, BoundingBox) and catalogue.frame is None:
        lon, lat = catalogue.origin("lon").column, catalogue.origin("lat").column
        raise ConfigError(f"catalogue {catalogue.path}: columns {lon}/{lat} do not say their frame; "
                          "read it with frame='icrs', 'fk5' or 'galactic'")


def cutout_requests(catalogue: Catalogue, size=None, *, rest_hz: float | None = None) -> list[CutoutRequest]:
    """One CutoutRequest per catalogue row, in row order. `size`: BoundingBox, FixedSize or
    ColumnSize (None: the default, see `default_size`). `rest_hz`: the rest frequency for bands
    that change between velocity and frequency or wavelength (the cube's RESTFRQ)."""
    if size is None:
        size = default_size(catalogue)
    if not isinstance(size, (BoundingBox, FixedSize, ColumnSize)):
        raise ConfigError(f"size: {size!r} is not a BoundingBox, FixedSize or ColumnSize")
    if rest_hz is not None and not (isinstance(rest_hz, (int, float)) and math.isfinite(rest_hz) and rest_hz > 0):
        raise ConfigError(f"rest_hz: {rest_hz!r} must be a rest frequency in Hz > 0")
    check_columns(catalogue, size)
    sources = catalogue.sources
    stems = file_stems([s.name for s in sources], [s.row for s in sources])
    if isinstance(size, BoundingBox):
        needs, shapes = ("name", "bbox"), [_grown(s.bbox, size.margin_px) if s.bbox else None for s in sources]
    else:
        radii, radius_problems = _radii(catalogue, size)
        bands, band_problems = _bands(catalogue, size, rest_hz)
        needs = ("name", "sky") + (("spectral",) if _wants_band(size) else ())
    out = []
    for i, (source, stem) in enumerate(zip(sources, stems)):
        name, row = source.name or "", source.row
        reason = next(filter(None, (source.problem(group) for group in needs)), None)
        if reason is None and not isinstance(size, BoundingBox):
            reason = radius_problems[i] or band_problems[i]
        if reason is not None:
            out.append(CutoutRequest(name, stem, row, skip_reason=reason))
        elif isinstance(size, BoundingBox):
            out.append(CutoutRequest(name, stem, row, pixel_box_fits=shapes[i]))
        else:
            pos = SkyCircle(source.lon_deg, source.lat_deg, float(radii[i]), catalogue.frame)
            out.append(CutoutRequest(name, stem, row, pos=pos, band=bands[i]))
    return out


def _wants_band(size) -> bool:
    return size.spectral_half_width is not None if isinstance(size, FixedSize) else size.spectral_column is not None


def _grown(bbox, margin: int) -> tuple[int, ...]:
    return tuple(v - margin if k % 2 == 0 else v + margin for k, v in enumerate(bbox))


def _radii(catalogue: Catalogue, size) -> tuple[np.ndarray, list[str | None]]:
    """Per source: the radius in degrees, and why it cannot be used (or None)."""
    n = len(catalogue.sources)
    if isinstance(size, FixedSize):
        return np.full(n, float(size.radius_deg)), [None] * n
    unit_text, values = catalogue.column(size.radius_column)
    unit_text = size.radius_unit or unit_text or "deg"
    unit = parse_unit(unit_text)
    if unit is None or not unit.is_equivalent(u.deg):
        raise ConfigError(f"catalogue {catalogue.path}: radius column {size.radius_column} is in {unit_text!r}, "
                          "not an angle; give its unit with ColumnSize(radius_unit='arcsec')")
    degrees = values * unit.to(u.deg)
    problems = [None if math.isfinite(r) and 0 < r <= 180 else
                f"radius column {size.radius_column} = {readable(v, unit_text)} is not an angle in (0, 180] deg"
                for r, v in zip(degrees, values)]
    return degrees, problems


def _bands(catalogue: Catalogue, size, rest_hz) -> tuple[list | None, list[str | None]]:
    """Per source: its SpectralRange (None: every channel) and why it has none (or None)."""
    n = len(catalogue.sources)
    if isinstance(size, FixedSize):
        if size.spectral_half_width is None:
            return [None] * n, [None] * n
        widths, width_unit, where = np.full(n, float(size.spectral_half_width)), size.spectral_unit, "FixedSize"
    else:
        if size.spectral_column is None:
            return [None] * n, [None] * n
        column_unit, widths = catalogue.column(size.spectral_column)
        width_unit = size.spectral_unit or column_unit or catalogue.origin("spectral").unit
        where = f"catalogue {catalogue.path} column {size.spectral_column}"
    centres = np.array([np.nan if s.spectral is None else s.spectral for s in catalogue.sources])
    lo, hi, band = spectral_band(centres, catalogue.spectral_kind, catalogue.spectral_convention, widths,
                                 width_unit, size.convention, rest_hz, where)
    bands, problems = [], []
    for k in range(n):
        if not (math.isfinite(widths[k]) and widths[k] > 0):
            bands.append(None)
            problems.append(f"half width {readable(widths[k], width_unit)} is not a number > 0")
        elif not (math.isfinite(lo[k]) and math.isfinite(hi[k])) or (band["kind"] != "velocity" and lo[k] <= 0):
            bands.append(None)
            problems.append(f"band {readable([lo[k], hi[k]], width_unit)} about the source is not a spectral range")
        else:
            try:
                bands.append(SpectralRange(float(lo[k]), float(hi[k]), **band))
                problems.append(None)
            except ConfigError as exc:  # e.g. a velocity band reaching the speed of light
                bands.append(None)
                problems.append(str(exc))
    return bands, problems


def spectral_band(centres_si, centre_kind: str, centre_convention: str | None, half_widths, width_unit: str,
                  convention: str, rest_hz: float | None, where: str):
    """(lo, hi, SpectralRange fields but lo/hi) of the bands centre +- half width, in the half
    width's kind and unit; centres in SI (Hz, m/s, m) of `centre_kind`. The rule: module doc."""
    kind = _spectral_kind(width_unit, where)
    unit = parse_unit(width_unit)
    band_convention = centre_convention if centre_kind == "velocity" else convention
    if kind != "velocity":
        band_convention = None
    centres = np.asarray(centres_si, dtype=float) * _SI[centre_kind]
    if kind == centre_kind:
        converted = centres.to(unit)
    else:
        equivalencies = u.spectral()
        if "velocity" in (kind, centre_kind):
            if rest_hz is None:
                raise ConfigError(f"{where}: a {kind} half width about the catalogue's {centre_kind} values needs "
                                  "the rest frequency (the cube's RESTFRQ): pass rest_hz")
            doppler_convention = centre_convention if centre_kind == "velocity" else convention
            equivalencies = equivalencies + _DOPPLER[doppler_convention](float(rest_hz) * u.Hz)
        converted = centres.to(unit, equivalencies=equivalencies)
    widths = np.asarray(half_widths, dtype=float)
    fields = {"unit": width_unit, "kind": kind, "convention": band_convention,
              "rest_hz": float(rest_hz) if kind == "velocity" and rest_hz is not None else None}
    return converted.value - widths, converted.value + widths, fields


def safe_stem(name: str | None) -> str:
    """`name` made safe for a file name (module doc); "unnamed" for no name."""
    stem = _UNSAFE.sub("_", name or "unnamed")[:MAX_STEM_CHARS]
    return "_" + stem[1:] if stem.startswith(".") else stem


def file_stems(names, rows) -> list[str]:
    """A unique safe stem per source: names that coincide (ignoring case) each get `_ROW`."""
    base = [safe_stem(n) for n in names]
    counts = Counter(b.casefold() for b in base)
    used = {b.casefold() for b in base if counts[b.casefold()] == 1}
    out = []
    for stem, row in zip(base, rows):
        if counts[stem.casefold()] > 1:
            stem = f"{stem}_{row}"
            # Suffix again while the stem is another source's name or an earlier duplicate's stem.
            while stem.casefold() in used or counts[stem.casefold()]:
                stem = f"{stem}_{row}"
            used.add(stem.casefold())
        out.append(stem)
    return out


_QUANTITY = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z\"'°µ][A-Za-z/\"'°µ]*)"
_FIXED = re.compile(rf"\s*{_QUANTITY}(?:\s*[,\s]\s*{_QUANTITY})?\s*\Z")
_BBOX = re.compile(r"\s*bbox\s*(?:\+\s*(\d+))?\s*\Z", re.IGNORECASE)
_COLUMNS = re.compile(r"\s*column:\s*([^,\s]+)\s*(?:,\s*column:\s*([^,\s]+)\s*)?\Z", re.IGNORECASE)
_ANGLE_SPELLINGS = {"'": "arcmin", '"': "arcsec", "°": "deg", "''": "arcsec"}


def parse_size(text: str):
    """The command line's size option, one of:

    - ``bbox`` or ``bbox+N``: SoFiA-2's bounding box grown by N pixels on every side (default 10,
      SoFiA-2's `output.marginCubelets`), e.g. ``bbox+0``, ``bbox+25``.
    - ``RADIUS [HALFWIDTH]``: a fixed size, each a number with its unit. RADIUS is an angle
      (``5arcmin``, ``0.1deg``, ``30arcsec``, ``5'``); HALFWIDTH, the band's half width about
      each source's spectral value, is a velocity (``300km/s``), a frequency (``1.5MHz``) or a
      wavelength (``0.2nm``); without it, every channel. E.g. ``5arcmin 300km/s``, ``0.1deg,2MHz``.
    - ``column:RCOL[,column:WCOL]``: per source, the radius from column RCOL and the half width
      from column WCOL, in those columns' units. E.g. ``column:r_arcmin,column:dv``.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"size: {text!r} is empty; write e.g. 'bbox+10', '5arcmin 300km/s' or 'column:r,column:dv'")
    match = _BBOX.match(text)
    if match:
        return BoundingBox(int(match.group(1)) if match.group(1) else DEFAULT_MARGIN_PX)
    match = _COLUMNS.match(text)
    if match:
        return ColumnSize(match.group(1), match.group(2))
    match = _FIXED.match(text)
    if not match:
        raise ConfigError(f"size: cannot read {text!r}; write 'bbox' or 'bbox+N' (pixels), 'RADIUS [HALFWIDTH]' "
                          "with units (e.g. '5arcmin 300km/s') or 'column:RADIUS_COLUMN[,column:HALFWIDTH_COLUMN]'")
    radius, radius_unit, width, width_unit = match.groups()
    unit = parse_unit(_ANGLE_SPELLINGS.get(radius_unit, radius_unit))
    if unit is None or not unit.is_equivalent(u.deg):
        raise ConfigError(f"size: {radius}{radius_unit} in {text!r} is not an angle; the radius comes first, "
                          "e.g. '5arcmin 300km/s'")
    radius_deg = float(radius) * unit.to(u.deg)
    if width is None:
        return FixedSize(radius_deg)
    if parse_unit(width_unit) is None:
        raise ConfigError(f"size: unknown unit {width_unit!r} in {text!r}; use e.g. km/s, MHz or nm")
    return FixedSize(radius_deg, float(width), width_unit)
