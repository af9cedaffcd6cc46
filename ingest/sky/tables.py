"""A catalogue file as columns of values: read by astropy or by SoFiA-2's text reader, then one
column at a time turned into degrees, SI spectral values or pixels, with a reason per bad cell.

A cell that is empty, masked, NaN or not a number is bad, never an error: the row that holds it
is skipped later, with the reason, if the value is needed. A column whose unit cannot be what
its role needs (an RA in Hz) is an error: the whole column is wrong, not one row.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
from astropy import units as u
from astropy.coordinates import Angle

from ingest.errors import ConfigError
from ingest.sky.bands import readable
from ingest.sky.sofia_files import looks_like_sofia_ascii, read_sofia_ascii

# extension -> astropy format; ".txt" and others are left to astropy's guessing
_EXTENSION_FORMATS = {
    ".csv": "ascii.csv", ".ecsv": "ascii.ecsv", ".fits": "fits", ".fit": "fits", ".fts": "fits",
    ".fits.gz": "fits", ".xml": "votable", ".vot": "votable", ".votable": "votable",
}
_FORMAT_ALIASES = {"csv": "ascii.csv", "ecsv": "ascii.ecsv", "sofia": "sofia-ascii", "vot": "votable"}
# Units cubes write in CUNITn that astropy's parser does not take as written.
_UNIT_SPELLINGS = {"hz": "Hz", "khz": "kHz", "mhz": "MHz", "ghz": "GHz", "degree": "deg", "degrees": "deg",
                   "m/s": "m/s", "km/s": "km/s", "m.s-1": "m/s", "km.s-1": "km/s"}
_PIXEL_UNITS = (None, "pix", "pixel", "pixels")
_ECSV_TITLE = b"# %ECSV"


@dataclass(frozen=True)
class ColumnOrigin:
    """Where a normalised value came from: the file's column, the unit its values were read in."""
    role: str  # name, lon, lat, spectral, x, y, z, x_min .. z_max
    usual: str  # the usual name the column stands for: name, id, ra, dec, l, b, freq, v_rad, x_min, ...
    column: str
    unit: str | None
    matched_by: str  # "usual name" or "columns= override"
    unit_from: str  # "table", "default", "units= override" or "none" (names, pixels)


@dataclass(frozen=True)
class RawTable:
    """A table's columns: per column its unit (None: none given) and values, float with NaN
    where empty for numeric columns, else objects (str, or None where empty)."""
    path: str
    format: str
    names: tuple[str, ...]
    units: tuple[str | None, ...]
    data: tuple[np.ndarray, ...]
    params: dict  # a VOTable's PARAMs (SoFiA-2 writes its run's parameters there)
    creator: str | None

    @property
    def n_rows(self) -> int:
        return len(self.data[0]) if self.data else 0

    def index(self, column: str) -> int:
        return self.names.index(column)


def read_table(path: str, format: str | None) -> RawTable:
    """Read `path` as `format` (None: guessed); ConfigError naming the file when it cannot be."""
    if not os.path.isfile(path):
        raise ConfigError(f"catalogue {path}: no such file")
    fmt = _FORMAT_ALIASES.get(format, format) if format else None
    if fmt is None:
        lower = path.lower()
        fmt = next((f for ext, f in _EXTENSION_FORMATS.items() if lower.endswith(ext)), None)
        if looks_like_sofia_ascii(path):
            fmt = "sofia-ascii"
        elif _starts_with(path, _ECSV_TITLE):  # ECSV with its units, whatever the file is called
            fmt = "ascii.ecsv"
    if fmt == "sofia-ascii":
        text = read_sofia_ascii(path)
        data = tuple(_column_from_text([row[j] for row in text.rows]) for j in range(len(text.names)))
        return RawTable(path, "sofia-ascii", text.names, text.units, data, {}, text.creator)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unit and schema warnings: units are checked per role below
            if fmt == "votable":
                return _read_votable(path)
            from astropy.table import Table
            table = Table.read(path, format=fmt) if fmt else Table.read(path)
    except ConfigError:
        raise
    except Exception as exc:  # astropy raises many types for a file it cannot parse
        how = f"as {fmt}" if fmt else "as any table format astropy knows"
        raise ConfigError(f"catalogue {path}: cannot read it {how} ({type(exc).__name__}: {exc})") from None
    return _from_astropy(path, fmt or "astropy", table, {})


def _starts_with(path: str, title: bytes) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(title)) == title
    except OSError:
        return False


def _read_votable(path: str) -> RawTable:
    from astropy.io.votable import parse
    votable = parse(path, verify="ignore")
    params = {}
    for resource in votable.resources:
        for param in resource.params:
            value = param.value
            params[param.name] = "" if value is None or np.ma.is_masked(value) else str(value)
    table = votable.get_first_table().to_table(use_names_over_ids=True)
    creator = params.get("Creator")
    fmt = "sofia-votable" if creator and creator.startswith("SoFiA") else "votable"
    return _from_astropy(path, fmt, table, params, creator)


def _from_astropy(path, fmt, table, params, creator=None) -> RawTable:
    names, units, data = [], [], []
    for name in table.colnames:
        column = table[name]
        if column.ndim != 1:
            continue  # vector cells: no catalogue role takes them
        mask = np.ma.getmaskarray(column)
        raw = np.asarray(column.data if hasattr(column, "data") else column)
        if raw.dtype.kind in "iufb":
            values = raw.astype(float)
            values[mask] = np.nan
        else:
            values = np.empty(len(raw), dtype=object)
            for i, cell in enumerate(raw):
                text = cell.decode("utf-8", "replace") if isinstance(cell, bytes) else str(cell)
                values[i] = None if mask[i] or not text.strip() else text.strip()
        names.append(name)
        units.append(None if column.unit is None else column.unit.to_string())
        data.append(values)
    return RawTable(path, fmt, tuple(names), tuple(units), tuple(data), params, creator)


def _column_from_text(cells: list[str | None]) -> np.ndarray:
    """Floats (NaN where empty) when every non-empty cell is a number, else the strings."""
    try:
        return np.array([np.nan if c is None else float(c) for c in cells], dtype=float)
    except ValueError:
        return np.array(cells, dtype=object)


def numeric_columns(table: RawTable) -> dict:
    """column -> (unit, float values), for the numeric columns (what a per-source size reads)."""
    return {name: (unit, values) for name, unit, values in zip(table.names, table.units, table.data)
            if values.dtype.kind == "f"}


def text_values(table: RawTable, column: str) -> list[str | None]:
    """A column as text (a name or id): whole numbers without '.0'; None where empty."""
    values = table.data[table.index(column)]
    if values.dtype.kind != "f":
        return list(values)
    return [None if not np.isfinite(v) else (str(int(v)) if v == int(v) else repr(float(v))) for v in values]


def parse_unit(text: str | None):
    """An astropy unit for a unit string as tables and FITS headers write it, or None."""
    if text is None or not str(text).strip():
        return None
    text = str(text).strip()
    unit = u.Unit(text, parse_strict="silent")
    if isinstance(unit, u.UnrecognizedUnit) and text.casefold() in _UNIT_SPELLINGS:
        unit = u.Unit(_UNIT_SPELLINGS[text.casefold()])
    return None if isinstance(unit, u.UnrecognizedUnit) else unit


def _unit_for(table, column, key, unit_overrides, default: str | None):
    """(unit string, where it came from) for a role's column."""
    if key in unit_overrides:
        return str(unit_overrides[key]), "units= override"
    unit = table.units[table.index(column)]
    if unit is not None:
        return unit, "table"
    return default, "default" if default else "none"


def _checked_unit(path, column, key, unit_text, target: str, what: str):
    unit = parse_unit(unit_text)
    if unit is None or not unit.is_equivalent(u.Unit(target)):
        raise ConfigError(f"catalogue {path}: column {column} ({key}) has unit {unit_text!r}, which is not "
                          f"{what}; give its unit with --columns {key}={column}[UNIT] (or units={{{key!r}: ...}} "
                          "from Python)")
    return unit


def angle_values(path, table, column, matched_by, key, unit_overrides, *, role: str, hours: bool):
    """(degrees with NaN where bad, origin, per-row reason or None) for an angle column; strings
    may be sexagesimal (in hours for an RA without unit letters, as is the convention)."""
    unit_text, unit_from = _unit_for(table, column, key, unit_overrides, "deg")
    unit = _checked_unit(path, column, key, unit_text, "deg", "an angle")
    values = table.data[table.index(column)]
    origin = ColumnOrigin(role, key, column, unit_text, matched_by, unit_from)
    if values.dtype.kind == "f":
        degrees = values * unit.to(u.deg)
        return degrees, origin, [None if np.isfinite(v) else f"{column} is not a number" for v in degrees]
    sexagesimal_unit = u.hourangle if hours and unit_from == "default" else unit
    degrees = np.full(len(values), np.nan)
    bad = []
    for i, text in enumerate(values):
        if text is None:
            bad.append(f"{column} is empty")
            continue
        try:
            degrees[i] = float(text) * unit.to(u.deg)
        except ValueError:
            try:
                degrees[i] = Angle(text, unit=sexagesimal_unit).deg
            except Exception:  # astropy's angle parser raises several types
                bad.append(f"{column} = {text!r} is not an angle")
                continue
        bad.append(None if np.isfinite(degrees[i]) else f"{column} is not a number")
    return degrees, origin, bad


def quantity_values(path, table, column, matched_by, key, unit_overrides, si_unit: str, what: str):
    """(values in `si_unit` with NaN where bad, origin, per-row reason or None); `what` names
    the quantity for the error when the column's unit (the table's or given: no default) cannot
    be converted to `si_unit`."""
    unit_text, unit_from = _unit_for(table, column, key, unit_overrides, None)
    unit = _checked_unit(path, column, key, unit_text, si_unit, what)
    raw = table.data[table.index(column)]
    origin = ColumnOrigin("spectral", key, column, unit_text, matched_by, unit_from)
    values, bad = _floats(column, raw)
    return values * unit.to(u.Unit(si_unit)), origin, bad


def pixel_values(path, table, column, matched_by, key, *, whole: bool = False):
    """(pixels with NaN where bad, origin, per-row reason or None); `whole`: must be integers."""
    unit_text = table.units[table.index(column)]
    if unit_text is not None and unit_text.casefold() not in _PIXEL_UNITS:
        raise ConfigError(f"catalogue {path}: column {column} ({key}) has unit {unit_text!r}; pixel columns "
                          "are in pixels")
    values, bad = _floats(column, table.data[table.index(column)])
    if whole:
        bad = [b or (f"{column} = {readable(v)} is not a whole pixel" if v != int(v) else None)
               for v, b in zip(values, bad)]
    return values, ColumnOrigin(key, key, column, unit_text, matched_by, "none"), bad


def _floats(column, raw: np.ndarray):
    if raw.dtype.kind == "f":
        return raw, [None if np.isfinite(v) else f"{column} is not a number" for v in raw]
    values = np.full(len(raw), np.nan)
    bad = []
    for i, text in enumerate(raw):
        try:
            values[i] = float(text) if text is not None else np.nan
        except ValueError:
            pass
        bad.append(None if np.isfinite(values[i]) else f"{column} = {text!r} is not a number")
    return values, bad
