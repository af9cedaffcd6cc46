"""Source catalogues in: SoFiA-2's catalogues as SoFiA-2 writes them, and any table astropy reads,
normalised into one picklable `Catalogue` of `CatalogueSource` rows.

Formats. SoFiA-2's plain-text catalogue (`output.writeCatASCII`, recognised by its first line)
is read by `ingest.sky.sofia_files`; SoFiA-2's VOTable (`output.writeCatXML`) and any VOTable
by astropy.io.votable; CSV, ECSV, FITS tables and the rest by astropy.table.Table.read with the
format guessed from the extension (`.csv`, `.ecsv`, `.fits`/`.fit`, `.xml`/`.vot`) or given.

Columns are recognised by their usual names, case-insensitively (the names SoFiA-2 writes, and
VizieR's and CDS's): `name` (else `id`); the sky position (`SKY_NAMES`, first pair found wins)
`ra`/`dec`, `RAdeg`/`DEdeg`, `ra_deg`/`dec_deg` (ICRS, or the frame= given), `RA_ICRS`/`DE_ICRS`
(ICRS), `RAJ2000`/`DEJ2000` and `_RAJ2000`/`_DEJ2000` (FK5 J2000), `l`/`b`, `glon`/`glat` and
`_Glon`/`_Glat` (Galactic), `lon`/`lat` (frame given by the caller); a frame a column's name states
wins over frame=, as a frame word in a POS does. The spectral value `freq`, `v_rad` (radio),
`v_opt` (optical), `v_app` (relativistic: FITS's VELO, the apparent radial velocity) or
`wavelength`; the pixel position `x`, `y`, `z` and the bounding box `x_min`..`z_max`.
`columns={"ra": "RA_deg_2", ...}` names any of them (roles: `OVERRIDE_KEYS`); `units={"freq": "MHz"}`
gives a unit, as does `columns={"freq": "FREQ[MHz]"}` (column and unit) or `{"freq": "[MHz]"}`
(the unit of the column found by its usual name): the command line's `--columns freq=FREQ[MHz]`.

Units come from the table (SoFiA-2's unit row; VOTable, ECSV and FITS column units) or are given;
a frequency, velocity or wavelength column with neither is a ConfigError naming it and how to give
its unit (4201.33 could be km/s or m/s, and the wrong guess puts every source off the cube). An
angle column without a unit is in degrees, as astronomers write ra/dec; pixel columns are in
pixels. SoFiA-2 always writes a unit: CUNIT1/2/3 of the cube, or deg, deg and Hz (FREQ) or m/s
(VRAD, VOPT, VELO) when the cube has none. A file that starts `# %ECSV` is read as ECSV, with its
units, whatever its extension. RA/Dec may be sexagesimal strings ("10:00:28.81",
"10h00m28.81s", "-30:15:00.4"): a sexagesimal RA without unit letters is in hours, any other in
degrees; a plain number in a string column is in the column's unit (deg by default). Values are
stored as degrees (longitude wrapped into [0, 360)), and Hz, m or m/s.

Pixels are 0-based, as SoFiA-2 counts them. A SoFiA-2 catalogue of one region has its pixel
columns relative to the region's `input.region` unless the run set `parameter.offset = true`;
`sofia_par=` reads both from the run's parameter file and places the pixels in the full cube
as SoFiA-X does (adding x_min, y_min, z_min of the region); `region_offset=(x, y, z)` gives
the shift directly. SoFiA-2's VOTable carries the run's parameters, so it is placed without
either (a `sofia_par` that disagrees with them is refused). World columns need no shift.

Errors: a file that cannot be read, is empty, or names columns it lacks is a ConfigError
naming the file, raised before any data moves. A row with a bad value (a NaN RA, a Dec outside
-90..90, a negative or inverted bounding box, no name) is kept with its problem recorded; the
size rule (`ingest.sky.sources`) skips it, with that reason, when it needs that value.

One module: recognising columns and normalising rows share the table, the chosen columns and the
per-row notes (_choose_columns -> _normalise -> _sky, _spectral, _bbox); the file formats' readers
are already ingest.sky.tables and ingest.sky.sofia_files.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from ingest.errors import ConfigError
from ingest.sky import tables
from ingest.sky.bands import readable
from ingest.sky.tables import ColumnOrigin
from ingest.sky.regions import normalize_frame
from ingest.sky.sofia_files import pixel_offset_of, read_par_settings, region_of

NAME_COLUMNS = ("name", "id")
# The sky columns by their usual names: (lon name, lat name, the roles they fill, the frame the
# names state or None when frame= decides). Searched in this order; the first pair a file has wins.
SKY_NAMES = (
    ("ra", "dec", "ra", "dec", None),
    ("ra_icrs", "de_icrs", "ra", "dec", "icrs"),  # VizieR: ICRS at the catalogue's epoch
    ("raj2000", "dej2000", "ra", "dec", "fk5"),  # VizieR and CDS: FK5, equinox J2000
    ("_raj2000", "_dej2000", "ra", "dec", "fk5"),  # VizieR's computed positions: FK5 J2000
    ("radeg", "dedeg", "ra", "dec", None),  # CDS ReadMe labels
    ("ra_deg", "dec_deg", "ra", "dec", None),
    ("l", "b", "l", "b", "galactic"),
    ("glon", "glat", "glon", "glat", "galactic"),
    ("_glon", "_glat", "glon", "glat", "galactic"),  # VizieR's computed Galactic positions
    ("lon", "lat", "lon", "lat", None),
)
SKY_ROLES = tuple(dict.fromkeys((row[2], row[3]) for row in SKY_NAMES))  # (ra, dec), (l, b), (glon, glat), (lon, lat)
_STATED_FRAMES = {name: row[4] for row in SKY_NAMES if row[4] for name in row[:2]}
_EQUATORIAL_ROLES = ("ra", "dec")
_GALACTIC_ROLES = ("l", "b", "glon", "glat")
# usual name -> (kind, convention); a spectral column has no default unit (see the module doc)
SPECTRAL_COLUMNS = {
    "freq": ("frequency", None),
    "v_rad": ("velocity", "radio"),
    "v_opt": ("velocity", "optical"),
    "v_app": ("velocity", "relativistic"),
    "wavelength": ("wavelength", None),
}
PIXEL_COLUMNS = ("x", "y", "z")
BBOX_COLUMNS = ("x_min", "x_max", "y_min", "y_max", "z_min", "z_max")
OVERRIDE_KEYS = ("name", *(c for pair in SKY_ROLES for c in pair), *SPECTRAL_COLUMNS, *PIXEL_COLUMNS, *BBOX_COLUMNS)
_SI_UNIT = {"frequency": "Hz", "velocity": "m/s", "wavelength": "m"}
_EXAMPLE_UNIT = {"frequency": "MHz", "velocity": "km/s", "wavelength": "m"}
# columns= value "COLUMN[UNIT]" or "[UNIT]"
_COLUMN_UNIT = re.compile(r"\s*([^\[\]]*?)\s*\[\s*([^\[\]]+?)\s*\]\s*\Z")


@dataclass(frozen=True)
class CatalogueSource:
    """One row: its values normalised (None when the catalogue lacks them or the row's value is
    bad) and, per group of values (name, sky, spectral, pixel, bbox), why it is bad."""
    row: int  # 0-based data row of the file
    name: str | None
    lon_deg: float | None = None
    lat_deg: float | None = None
    spectral: float | None = None  # in the Catalogue's spectral_unit (Hz, m or m/s)
    x: float | None = None  # pixel position in the full cube, 0-based
    y: float | None = None
    z: float | None = None
    bbox: tuple[int, int, int, int, int, int] | None = None  # x_min, x_max, .., z_max, inclusive
    problems: tuple[tuple[str, str], ...] = ()  # (group, reason)

    def problem(self, group: str) -> str | None:
        """Why this row's `group` of values is bad, or None."""
        return next((reason for g, reason in self.problems if g == group), None)


@dataclass(frozen=True)
class Catalogue:
    """A catalogue read and normalised: its sources, where each value came from, its frame and
    spectral axis, and the pixel shift applied to place a SoFiA-2 region's pixels in the cube."""
    path: str
    format: str
    sources: tuple[CatalogueSource, ...]
    columns: tuple[str, ...]  # the file's columns, in its order
    origins: tuple[ColumnOrigin, ...]
    frame: str | None = None  # icrs, fk5, galactic; None: no sky columns, or lon/lat without frame=
    spectral_kind: str | None = None  # frequency, velocity, wavelength
    spectral_convention: str | None = None  # radio, optical, relativistic (velocities only)
    spectral_unit: str | None = None  # Hz, m/s or m
    pixel_offset: tuple[int, int, int] = (0, 0, 0)
    pixel_offset_from: str = "none"
    creator: str | None = None  # e.g. "SoFiA 2.5.0 (24-Jun-2022)"
    numeric: dict = field(default_factory=dict, compare=False, repr=False)  # column -> (unit, values)

    def __len__(self) -> int:
        return len(self.sources)

    def __iter__(self):
        return iter(self.sources)

    def origin(self, role: str) -> ColumnOrigin | None:
        """Where a role's values (name, lon, lat, spectral, x, .., z_max; or a usual name such as
        ra or freq) came from, or None when the catalogue has no such column."""
        return next((o for o in self.origins if role in (o.role, o.usual)), None)

    def column(self, name: str) -> tuple[str | None, np.ndarray]:
        """(unit, float values with NaN where empty) of a numeric column, by case-insensitive name."""
        for column in self.columns:
            if column.casefold() == name.casefold() and column in self.numeric:
                return self.numeric[column]
        have = "present but not numeric" if any(c.casefold() == name.casefold() for c in self.columns) else "missing"
        raise ConfigError(f"catalogue {self.path}: column {name!r} is {have}; numeric columns: "
                          f"{', '.join(self.numeric) or 'none'}")

    def missing(self, needed: str, columns: list[str]) -> ConfigError:
        """The error for a catalogue that lacks `columns`, which `needed` requires."""
        return ConfigError(f"catalogue {self.path}: lacks column(s) {', '.join(columns)} needed by {needed}; "
                           f"it has columns: {', '.join(self.columns)}")


def read_catalogue(path, *, format: str | None = None, columns: dict | None = None, units: dict | None = None,
                   frame: str | None = None, sofia_par=None, region_offset=None) -> Catalogue:
    """Read a catalogue file into a Catalogue (module docstring: formats, columns, units, errors).

    `format`: "sofia-ascii", "votable", "csv", "ecsv", "fits" or any astropy format (default:
    guessed). `columns`/`units`: usual name -> the file's column ("COLUMN[UNIT]" or "[UNIT]" give
    its unit too) / its unit. `frame`: "icrs", "fk5" (J2000) or "galactic", for sky columns whose
    names do not state one (default: ICRS for ra/dec; lon/lat need it). `sofia_par` (a SoFiA-2 parameter file) or
    `region_offset` (x, y, z pixels): where a SoFiA-2 region's pixel columns start in the cube.
    """
    path = os.fspath(path)
    table = tables.read_table(path, format)
    if not table.n_rows:
        raise ConfigError(f"catalogue {path}: has no sources (0 rows); columns: {', '.join(table.names) or 'none'}")
    frame = None if frame is None else normalize_frame(frame)
    chosen = _choose_columns(path, table, dict(columns or {}), dict(units or {}), frame)
    offset, offset_from = _pixel_offset(path, table.params, sofia_par, region_offset)
    if offset_from == "none" and table.format == "sofia-ascii":
        offset_from = ("none: SoFiA-2's text catalogue does not record input.region; if the run cut a region, "
                       "pass sofia_par= (its parameter file) to place the pixel columns in the cube")
    return _normalise(path, table, chosen, offset, offset_from)


def split_column_units(path, columns: dict, units: dict, names) -> tuple[dict, dict]:
    """columns= values of the form "COLUMN[UNIT]" (the column and its unit) or "[UNIT]" (the unit
    of the column found by its usual name) split into (columns, units). A value that is itself
    one of the file's column names (`names`) is that column, brackets and all."""
    columns, units = dict(columns), dict(units)
    have = {n.casefold() for n in names}
    for key, value in list(columns.items()):
        match = _COLUMN_UNIT.match(value) if isinstance(value, str) and value.casefold() not in have else None
        if match is None:
            continue
        column, unit = match.groups()
        if key in units and str(units[key]).strip() != unit:
            raise ConfigError(f"catalogue {path}: the unit of {key} is given twice, {unit!r} in columns= and "
                              f"{units[key]!r} in units=; give it once")
        units[key] = unit
        if column:
            columns[key] = column
        else:
            del columns[key]
    return columns, units


def _choose_columns(path, table, overrides: dict, unit_overrides: dict, frame):
    """role -> (column, matched_by, sky pair or spectral key); checks overrides against the file."""
    for what, mapping in (("columns", overrides), ("units", unit_overrides)):
        unknown = sorted(set(mapping) - set(OVERRIDE_KEYS))
        if unknown:
            raise ConfigError(f"catalogue {path}: {what}= names unknown key(s) {', '.join(map(repr, unknown))}; "
                              f"known: {', '.join(OVERRIDE_KEYS)}")
    overrides, unit_overrides = split_column_units(path, overrides, unit_overrides, table.names)
    by_fold = {}
    for name in table.names:
        by_fold.setdefault(name.casefold(), name)
    for key, column in overrides.items():
        if not isinstance(column, str) or column.casefold() not in by_fold:
            raise ConfigError(f"catalogue {path}: columns={{{key!r}: {column!r}}} names a column the file lacks; "
                              f"it has columns: {', '.join(table.names)}")

    def pick(key, usual=None):
        if key in overrides:
            return by_fold[overrides[key].casefold()], "columns= override"
        usual = usual or key
        return (by_fold[usual], "usual name") if usual in by_fold else None

    chosen = {"units": unit_overrides}
    for key in NAME_COLUMNS:  # "id" only by its usual name: columns={"name": ...} names any column
        if pick(key):
            chosen["name"], chosen["name_key"] = pick(key), key
            break
    rows = sorted(SKY_NAMES, key=lambda row: not (row[2] in overrides or row[3] in overrides))
    for lon_name, lat_name, lon_key, lat_key, _ in rows:
        lon, lat = pick(lon_key, lon_name), pick(lat_key, lat_name)
        if lon and lat:
            chosen["sky"] = (lon_key, lat_key, _sky_frame(path, lon[0], lat[0], lon_key, frame))
            chosen["lon"], chosen["lat"] = lon, lat
            break
    spectral_keys = sorted(SPECTRAL_COLUMNS, key=lambda k: k not in overrides)
    for key in spectral_keys:
        if pick(key):
            chosen["spectral"], chosen["spectral_key"] = pick(key), key
            break
    for key in PIXEL_COLUMNS + BBOX_COLUMNS:
        if pick(key):
            chosen[key] = pick(key)
    return chosen


def _sky_frame(path, lon_column: str, lat_column: str, lon_key: str, frame) -> str | None:
    """The frame of the sky columns: the one their names state (RAJ2000: FK5 J2000, RA_ICRS: ICRS,
    l/b, GLON/GLAT: Galactic), which wins over frame= as a frame word in a POS does; else frame=;
    else ICRS for ra/dec; lon/lat without frame= have none."""
    stated = {_STATED_FRAMES.get(c.casefold()) for c in (lon_column, lat_column)} - {None}
    columns = f"columns {lon_column}/{lat_column}"
    if len(stated) > 1:
        raise ConfigError(f"catalogue {path}: {columns} name different frames ({', '.join(sorted(stated))}); "
                          "name a matching pair with --columns ra=...,dec=...")
    galactic = lon_key in _GALACTIC_ROLES
    if stated:
        (named,) = stated
        if galactic != (named == "galactic"):
            raise ConfigError(f"catalogue {path}: {columns} are {named} positions but stand for "
                              f"{'l/b' if galactic else 'ra/dec'}; name the right roles with --columns")
        return named
    if galactic:
        return "galactic"
    if lon_key in _EQUATORIAL_ROLES and frame == "galactic":
        raise ConfigError(f"catalogue {path}: {columns} are equatorial but frame='galactic'")
    if lon_key in _EQUATORIAL_ROLES:
        return frame or "icrs"
    return frame


def _pixel_offset(path, params: dict, sofia_par, region_offset) -> tuple[tuple[int, int, int], str]:
    if sofia_par is not None and region_offset is not None:
        raise ConfigError(f"catalogue {path}: give sofia_par or region_offset, not both")
    if region_offset is not None:
        values = tuple(region_offset) if isinstance(region_offset, (tuple, list)) else ()
        if len(values) != 3 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
                                       for v in values):
            raise ConfigError(f"catalogue {path}: region_offset {region_offset!r} must be three pixel "
                              "counts (x, y, z) >= 0")
        return tuple(int(v) for v in values), f"region_offset={tuple(int(v) for v in values)}"
    own = None
    if "input.region" in params:  # a SoFiA-2 VOTable records the run's parameters
        own = pixel_offset_of(params, f"catalogue {path}")
    if sofia_par is not None:
        par = os.fspath(sofia_par)
        settings = read_par_settings(par)
        offset = pixel_offset_of(settings, f"SoFiA-2 parameter file {par}")
        if own is not None and own != offset:
            raise ConfigError(f"catalogue {path}: its own SoFiA-2 parameters place its pixels at {own} "
                              f"but {par} places them at {offset}; is {par} the run that wrote it?")
        return offset, f"SoFiA-2 parameter file {par} ({_describe(settings, par)})"
    if own is not None:
        return own, f"the catalogue's own SoFiA-2 parameters ({_describe(params, path)})"
    return (0, 0, 0), "none"


def _describe(settings: dict, where: str) -> str:
    region = region_of(settings, where)
    region_text = "empty" if region is None else ", ".join(map(str, region))
    return f"input.region = {region_text}, parameter.offset = {settings.get('parameter.offset', 'false')}"


def _normalise(path, table, chosen, offset, offset_from) -> Catalogue:
    """Each group of columns read in turn; a row's bad value is recorded against its group."""
    n = table.n_rows
    problems = [[] for _ in range(n)]
    origins = []

    def note(group, reasons):
        for i, reason in enumerate(reasons):
            if reason:
                problems[i].append((group, reason))

    names = [None] * n
    if "name" in chosen:
        column, how = chosen["name"]
        origins.append(ColumnOrigin("name", chosen["name_key"], column, None, how, "none"))
        names = tables.text_values(table, column)
        note("name", [None if s else f"no name in column {column}" for s in names])
    lon, lat = _sky(path, table, chosen, origins, note)
    spectral = _spectral(path, table, chosen, origins, note)
    pixels = {}
    for axis, key in enumerate(PIXEL_COLUMNS):
        if key in chosen:
            values, origin, bad = tables.pixel_values(path, table, *chosen[key], key)
            origins.append(origin)
            pixels[key] = values + offset[axis]
            note("pixel", bad)
    bbox = _bbox(path, table, chosen, offset, origins, note)

    sources = []
    for i in range(n):
        bad_groups = {g for g, _ in problems[i]}

        def good(group, values):
            return None if values is None or group in bad_groups else float(values[i])
        box = tuple(int(b[i]) for b in bbox) if bbox is not None and "bbox" not in bad_groups else None
        sources.append(CatalogueSource(
            row=i, name=names[i], lon_deg=good("sky", lon), lat_deg=good("sky", lat),
            spectral=good("spectral", spectral), x=good("pixel", pixels.get("x")), y=good("pixel", pixels.get("y")),
            z=good("pixel", pixels.get("z")), bbox=box, problems=tuple(problems[i])))
    kind, convention = SPECTRAL_COLUMNS.get(chosen.get("spectral_key"), (None, None))
    return Catalogue(
        path=path, format=table.format, sources=tuple(sources), columns=table.names, origins=tuple(origins),
        frame=chosen["sky"][2] if "sky" in chosen else None, spectral_kind=kind, spectral_convention=convention,
        spectral_unit=_SI_UNIT.get(kind), pixel_offset=offset, pixel_offset_from=offset_from,
        creator=table.creator, numeric=tables.numeric_columns(table))


def _sky(path, table, chosen, origins, note):
    """(longitudes in [0, 360), latitudes) in degrees, NaN where bad; (None, None) without them."""
    if "sky" not in chosen:
        return None, None
    lon_key, lat_key, _ = chosen["sky"]
    units = chosen["units"]
    lon, lon_origin, lon_bad = tables.angle_values(path, table, *chosen["lon"], lon_key, units, role="lon",
                                                   hours=lon_key in _EQUATORIAL_ROLES)
    lat, lat_origin, lat_bad = tables.angle_values(path, table, *chosen["lat"], lat_key, units, role="lat",
                                                   hours=False)
    origins += [lon_origin, lat_origin]
    outside = [f"{lat_origin.column} = {readable(v, 'deg')} is outside -90..90" if not bad and abs(v) > 90 else None
               for v, bad in zip(lat, lat_bad)]
    note("sky", [a or b or c for a, b, c in zip(lon_bad, lat_bad, outside)])
    return np.mod(lon, 360.0), lat


def _spectral(path, table, chosen, origins, note):
    """Spectral values in SI (Hz, m/s, m), NaN where bad; None without a spectral column."""
    if "spectral" not in chosen:
        return None
    key = chosen["spectral_key"]
    kind, _ = SPECTRAL_COLUMNS[key]
    si_unit = _SI_UNIT[kind]
    column = chosen["spectral"][0]
    if key not in chosen["units"] and not (table.units[table.index(column)] or "").strip():
        example = _EXAMPLE_UNIT[kind]
        raise ConfigError(f"catalogue {path}: column {column} (a {kind}) has no unit; say which, e.g. with "
                          f"--columns {key}={column}[{example}] (or units={{{key!r}: {example!r}}} from Python)")
    values, origin, bad = tables.quantity_values(path, table, *chosen["spectral"], key, chosen["units"],
                                                 si_unit, f"a {kind}")
    origins.append(origin)
    if kind != "velocity":
        bad = [b or (f"{origin.column} = {readable(v, si_unit)} is not positive" if v <= 0 else None)
               for v, b in zip(values, bad)]
    note("spectral", bad)
    return values


def _bbox(path, table, chosen, offset, origins, note):
    """The six bounding-box columns placed in the cube, or None unless all six are present (the
    present ones are still recorded, so an error can name the missing ones)."""
    present = [key for key in BBOX_COLUMNS if key in chosen]
    columns = []
    for key in present:
        values, origin, bad = tables.pixel_values(path, table, *chosen[key], key, whole=True)
        origins.append(origin)
        columns.append(values + offset[BBOX_COLUMNS.index(key) // 2])
        note("bbox", bad)
    if len(present) < len(BBOX_COLUMNS):
        return None
    note("bbox", _bbox_problems(columns))
    return columns


def _bbox_problems(bbox) -> list[str | None]:
    """Per row: why its box (already shifted into the cube) cannot be a box."""
    out = []
    for i in range(len(bbox[0])):
        values = [b[i] for b in bbox]
        reason = None
        if not any(math.isnan(v) for v in values):
            for j, axis in enumerate("xyz"):
                lo, hi = values[2 * j], values[2 * j + 1]
                if lo < 0:
                    reason = f"negative bounding box: {axis}_min = {readable(lo)} in the cube"
                elif hi < lo:
                    reason = f"inverted bounding box: {axis}_min = {readable(lo)} > {axis}_max = {readable(hi)}"
                if reason:
                    break
        out.append(reason)
    return out
