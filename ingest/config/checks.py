"""Checks of one setting's value, by the kind its field declares (ingest.config.fields): a value
from Python, TOML or a command-line string becomes the field's type or a ConfigError that names
the field, the value and what is expected (unit and range).

Rules: "auto" spells the derived default of an optional number; a bool is never taken for a
number; a grid, region, sky region or band is parsed for its syntax only (its bounds against the
cube are checked once the header is read); a presigned URL's query never appears in a message.
Nothing here knows RunConfig: the field (a dataclass Field and its metadata) is passed in.
"""
from __future__ import annotations

import math
import re
from dataclasses import MISSING, Field

from ingest.core.decompose import parse_grid
from ingest.core.regions import parse_min_overlap, parse_region_shape
from ingest.core.selection import parse_region
from ingest.errors import ConfigError, RegionError
from ingest.redact import redact_url
from ingest.transports.presign import parse_s3_uri
from ingest.units import parse_bytes


def shown_source(source: str) -> str:
    """A source as it may appear in messages and reports: a presigned URL's query is removed."""
    return redact_url(source) if source_form(source) == "http" else source


def source_form(source: str) -> str:
    """'s3', 'http' or 'path'."""
    lowered = source.lower()
    if lowered.startswith("s3://"):
        return "s3"
    if lowered.startswith(("http://", "https://")):
        return "http"
    return "path"


def check_value(f: Field, value):
    """Convert `value` to field `f`'s type and check it; raise ConfigError naming the field, the
    value and the expected unit and range."""
    name, meta = f.name, f.metadata
    if isinstance(value, str) and value.strip().lower() == "auto" and f.default is None and meta["kind"] != "path":
        value = None  # "auto" spells the derived default of an optional number explicitly
    if value is None:
        if f.default is None:
            return None
        if f.default is MISSING:
            raise ConfigError(f"{name}: required ({meta['help']})")
        raise _bad(name, meta, value)
    converted = _convert(name, meta, value)
    if meta["kind"] in ("int", "float", "bytes", "rate"):
        low, high = meta["low"], meta["high"]
        too_low = low is not None and (converted <= low if meta["low_open"] else converted < low)
        if too_low or (high is not None and converted > high) or not math.isfinite(converted):
            raise _bad(name, meta, value)
    return converted



def _expected(meta) -> str:
    """Plain-words description of a field's accepted values, for error messages."""
    kind, unit = meta["kind"], meta["unit"]
    if kind == "choice":
        return "one of " + ", ".join(meta["choices"])
    if kind == "bool":
        return "true or false"
    if kind == "companions":
        return "NAME=SOURCE entries (a name such as weights, then the companion cube's path or URL)"
    if kind in ("str", "path", "grid", "region", "region_shape", "overlap", "pos", "band", "channels", "frame"):
        return f"a non-empty string ({unit})" if unit else "a non-empty string"
    noun = {"int": "an integer", "float": "a number", "bytes": "a byte count", "rate": "a number"}[kind]
    low, high = meta["low"], meta["high"]
    if low is not None and high is not None:
        bounds = f" in {low}..{high}" if not meta["low_open"] else f" > {low} and <= {high}"
    elif low is not None:
        bounds = f" {'>' if meta['low_open'] else '>='} {low}"
    else:
        bounds = ""
    example = {"bytes": "; e.g. 16MiB, 1GiB, 500kB", "rate": "; e.g. 75e6 or 75MB"}.get(kind, "")
    return f"{noun}{bounds} ({unit}{example})"


def _bad(name: str, meta, value) -> ConfigError:
    return ConfigError(f"{name}: expected {_expected(meta)}, got {value!r}")



def _convert(name: str, meta, value):
    kind = meta["kind"]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        if isinstance(value, str) and value.strip().lower() in words:
            return words[value.strip().lower()]
        raise _bad(name, meta, value)
    if isinstance(value, bool):  # bool is an int subclass: `threads = true` is a mistake
        raise _bad(name, meta, value)
    if kind in ("bytes", "rate"):
        if isinstance(value, float) and kind == "rate":
            return value
        if isinstance(value, str) and kind == "rate" and re.fullmatch(r"\s*[0-9.]+[eE][+-]?[0-9]+\s*", value):
            return float(value)  # 75e6 on the command line
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return float(parse_bytes(value, name)) if kind == "rate" else parse_bytes(value, name)
    if kind in ("int", "float"):
        number_type = int if kind == "int" else float
        if isinstance(value, (int, float)) and (kind == "float" or isinstance(value, int)):
            return number_type(value)
        if isinstance(value, str):
            try:
                return number_type(value.strip())
            except ValueError:
                pass
        raise _bad(name, meta, value)
    if kind == "companions":
        return _companions(name, meta, value)
    if not isinstance(value, str) or not value.strip():
        raise _bad(name, meta, value)
    if kind == "choice":
        if value.strip().lower() not in meta["choices"]:
            raise _bad(name, meta, value)
        return value.strip().lower()
    _check_syntax(name, kind, value)
    if kind == "frame":
        from ingest.sky.regions import normalize_frame

        return normalize_frame(value)
    return {"grid": value.strip().lower(), "region": value.strip(), "region_shape": value.strip().lower(),
            "overlap": value.strip()}.get(kind, value)


def _companions(name: str, meta, value) -> tuple[tuple[str, str], ...]:
    """NAME=SOURCE strings (or (name, source) pairs) -> ((name, source), ...), names unique."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise _bad(name, meta, value)
    pairs = []
    for item in items:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            label, source = item
        elif isinstance(item, str) and "=" in item:
            label, source = item.split("=", 1)
        else:
            raise ConfigError(f"{name}: expected NAME=SOURCE (e.g. weights=s3://bucket/weights.fits), "
                              f"got {redact_url(str(item))!r}")
        label, source = str(label).strip(), str(source).strip()
        if not re.fullmatch(r"[a-z][a-z0-9_]*", label):
            raise ConfigError(f"{name}: companion name {label!r} must be lower-case letters, digits or _ "
                              f"(e.g. weights, noise, mask)")
        if label in ("data", "cube") or label in dict(pairs):
            raise ConfigError(f"{name}: companion name {label!r} is used twice or names the cube itself")
        if not source:
            raise ConfigError(f"{name}: companion {label!r} has no source")
        try:
            _check_syntax("source", "path", source)
        except ConfigError as exc:
            raise ConfigError(f"{name}: companion {label!r}: {exc}") from None
        pairs.append((label, source))
    return tuple(pairs)


def _check_url(name: str, url: str) -> None:
    """An http(s) URL must have a host and a numeric port, or no request could be made; the
    error never repeats the query string (a presigned URL's credential)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
        ok = bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{name}: not a valid URL: {redact_url(url)}")


def _check_syntax(name: str, kind: str, value: str) -> None:
    """Shape-independent checks; bounds against the cube happen once the header is read."""
    if kind == "grid" and value.strip().lower() != "auto":
        parse_grid(value, ndim=len(value.lower().split("x")))
    elif kind == "region":
        try:
            parse_region(value)
        except RegionError as exc:
            raise ConfigError(str(exc)) from None
    elif kind == "region_shape":
        parse_region_shape(value)
    elif kind == "overlap":
        parse_min_overlap(value)
    elif kind in ("pos", "band", "channels"):
        from ingest.sky.regions import parse_band, parse_channels, parse_pos

        {"pos": parse_pos, "band": parse_band, "channels": parse_channels}[kind](value)
    elif kind == "frame":
        from ingest.sky.regions import normalize_frame

        try:
            normalize_frame(value)
        except ConfigError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    elif name == "endpoint_url" and source_form(value) != "http":
        raise ConfigError(f"endpoint_url: expected an http(s):// URL, got {redact_url(value)!r}")
    elif name == "dest":
        try:
            parse_s3_uri(value)
        except ConfigError as exc:
            raise ConfigError(f"dest: {exc}") from None
    elif name in ("source", "endpoint_url") and source_form(value) == "http":
        _check_url(name, value)
    elif name == "source" and source_form(value) == "s3":
        try:
            parse_s3_uri(value)
        except ConfigError as exc:
            raise ConfigError(f"source: {exc}") from None

