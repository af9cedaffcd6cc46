"""SoFiA-2's own files, as SoFiA-2 (v2.5) writes and reads them: the plain-text catalogue
(`output.writeCatASCII`) and the parameter file's `input.region` and `parameter.offset`.

The plain-text catalogue (`Catalog_save`, CATALOG_FORMAT_ASCII) is `#` comment lines, then
three header rows written as comments -- column numbers 1..N, parameter names, units (`-` for
none) -- an empty line, and one fixed-width row per source: the name in double quotes
(`"SoFiA J100028.81-301500.4"`, spaces inside), then the other columns, integers as `%14ld`,
floats as `%14.6f` or `%14.5e`. Its precision is what those formats keep (SoFiA-2 itself says
to prefer the XML catalogue for analysis); the VOTable one is read by astropy.

Parameter files are read by SoFiA-2's Parameter_load rules (the same rules
`ingest.outputs.sofia` follows; that module sits above this layer, so the few lines needed are
here): a line is trimmed; empty lines and lines whose first character is not a letter or
digit are skipped; the key is the text before the first '=', the value the text after it up
to the next '#', both trimmed; a later setting replaces an earlier one; a boolean is true only
for the exact value `true`. Unset keys take SoFiA-2's defaults: `input.region` empty (the whole
cube), `parameter.offset = false`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ingest.errors import ConfigError

SOFIA_ASCII_TITLE = "# SoFiA source catalogue"
_WS = " \t\n\v\f\r"  # C isspace() in the C locale: what SoFiA-2's trim_string removes
_MAX_PAR_BYTES = 1 << 20  # SoFiA-2's full template is ~10 KB; bigger is not a parameter file
_QUOTED_NAME = re.compile(r'\s*"([^"]*)"(.*)\Z')


@dataclass(frozen=True)
class TextTable:
    """A table as read from text: column names, their units (None: none given) and, per row, the
    cells as strings (None: an empty cell)."""
    names: tuple[str, ...]
    units: tuple[str | None, ...]
    rows: tuple[tuple[str | None, ...], ...]
    creator: str | None = None  # the "# Creator:" line, e.g. "SoFiA 2.5.0 (24-Jun-2022)"


def looks_like_sofia_ascii(path: str) -> bool:
    """True when the file starts as SoFiA-2's plain-text catalogue does."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SOFIA_ASCII_TITLE))
    except OSError:
        return False
    return head == SOFIA_ASCII_TITLE.encode()


def read_sofia_ascii(path: str) -> TextTable:
    """The rows of a SoFiA-2 plain-text catalogue; ConfigError naming the file and line when the
    header rows are missing or a row has the wrong number of columns."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"catalogue {path}: cannot read it as SoFiA-2 text ({exc})") from None
    comments = [(i, line[1:].split()) for i, line in enumerate(lines) if line.startswith("#")]
    header_at = None
    for k, (i, tokens) in enumerate(comments):
        # The column-number row: the tokens are exactly 1..N, and two comment rows follow it.
        if tokens and tokens == [str(n) for n in range(1, len(tokens) + 1)] and k + 2 < len(comments):
            header_at = k
    if header_at is None:
        raise ConfigError(f"catalogue {path}: no SoFiA-2 header rows (a '#' row of column numbers "
                          "1..N, then names, then units); is it a SoFiA-2 plain-text catalogue?")
    n_columns = len(comments[header_at][1])
    names, units = comments[header_at + 1][1], comments[header_at + 2][1]
    if len(names) != n_columns or len(units) != n_columns:
        line = comments[header_at + 1][0] + 1
        raise ConfigError(f"catalogue {path} line {line}: {len(names)} names and {len(units)} units "
                          f"for {n_columns} numbered columns")
    rows = []
    for i, line in enumerate(lines):
        if line.startswith("#") or not line.strip():
            continue
        quoted = _QUOTED_NAME.match(line)
        cells = [quoted.group(1), *quoted.group(2).split()] if quoted else line.split()
        if len(cells) != n_columns:
            raise ConfigError(f"catalogue {path} line {i + 1}: {len(cells)} columns where the header "
                              f"names {n_columns}; the file is truncated or not SoFiA-2's")
        rows.append(tuple(c if c != "" else None for c in cells))
    unit_or_none = tuple(None if u == "-" else u for u in units)
    creator = next((line.split(":", 1)[1].strip() for line in lines[:4] if line.startswith("# Creator:")), None)
    return TextTable(tuple(names), unit_or_none, tuple(rows), creator)


def read_par_text(path, what: str = "SoFiA-2 parameter file", max_bytes: int = _MAX_PAR_BYTES) -> str:
    """A parameter file's text (ConfigError naming `what` and the path when it cannot be read, is
    a FITS file, binary, too large or not UTF-8)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if raw.startswith(b"SIMPLE  ="):
        raise ConfigError(f"{what} {path}: is a FITS file, not a parameter file")
    if len(raw) > max_bytes or b"\0" in raw:
        raise ConfigError(f"{what} {path}: binary or over {max_bytes} bytes; not a parameter file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte {exc.start}); not a parameter file") from None


def split_setting(stripped: str) -> tuple[str, str]:
    """`key = value # comment` -> (key, value), by Parameter_load's rules."""
    key, _, rest = stripped.partition("=")
    # strtok(NULL, "#") skips '#' right after the '=' and stops at the next one.
    return key.strip(_WS), rest.lstrip("#").split("#", 1)[0].strip(_WS)


def read_par_settings(path) -> dict[str, str]:
    """The settings of a SoFiA-2 parameter file, read by Parameter_load's rules (module doc)."""
    settings: dict[str, str] = {}
    for line in read_par_text(path).split("\n"):
        stripped = line.strip(_WS)
        if not stripped or not (stripped[0].isascii() and stripped[0].isalnum()):
            continue
        key, value = split_setting(stripped)
        settings[key] = value
    return settings


def region_of(settings: dict[str, str], where: str) -> tuple[int, ...] | None:
    """`input.region` as (x_min, x_max, y_min, y_max, z_min, z_max), 0-based and inclusive, or
    None when it is empty (SoFiA-2 then reads the whole cube)."""
    text = settings.get("input.region", "")
    if not text:
        return None
    parts = [p for p in re.split(r"[,\s]+", text) if p]
    if len(parts) != 6 or not all(p.isdigit() for p in parts):
        raise ConfigError(f"{where}: input.region = {text!r} is not six pixel numbers "
                          "x_min, x_max, y_min, y_max, z_min, z_max")
    bounds = tuple(int(p) for p in parts)
    if any(lo > hi for lo, hi in zip(bounds[::2], bounds[1::2])):
        raise ConfigError(f"{where}: input.region = {text!r} has a minimum above its maximum "
                          "(both ends are inclusive)")
    return bounds


def pixel_offset_of(settings: dict[str, str], where: str) -> tuple[int, int, int]:
    """What to add to a catalogue's x, y, z and x_min..z_max to place them in the full cube, as
    SoFiA-X does: the region's (x_min, y_min, z_min) when the run cut a region and did not set
    `parameter.offset = true` (then SoFiA-2 wrote them relative to the region), else zero."""
    region = region_of(settings, where)
    if region is None or settings.get("parameter.offset", "false") == "true":
        return (0, 0, 0)
    return (region[0], region[2], region[4])
