"""A site file: what a site's engineers know of the pipes a job's ranks share, each figure with
where it came from (`configs/sites/*.toml`, read by `plan --site FILE`).

One rank's probe sees one rank's link. The pipes a thousand ranks share - each node's NIC, the
store's egress, the store's request ceiling - show only when many ranks read at once, which a
plan made before the job cannot do. A site file states them:

    [site]
    name = "Acacia from Pawsey's compute nodes"

    [node]
    nic_bytes_per_s = { value = "25 Gbit/s", source = "measured with iperf3 on 2026-11-20" }
    ranks_per_node = { value = 4, source = "our SLURM default, --ntasks-per-node=4" }

    [store]
    egress_bytes_per_s = { value = "600 MiB/s", source = "seed 001 s7.1" }
    requests_per_s = { value = "unknown", source = "never measured: no one ran enough clients" }
    latency_s = { value = 0.00195, source = "seed 001 s7.4: 7941 s for 4,071,843 requests" }

Every figure is a table of its value and a non-empty `source`; a value may be "unknown" (its
source then says why), so that a file names every term and says which are not known. Rates are
bytes/s of data a reader gets (a number, or "600 MB/s", "4.7 GiB/s", "25 Gbit/s"; "Mb/s" is
refused: megabits or megabytes?). A NIC's line rate overstates what a TCP reader gets by about
5 % at 1500-byte frames (see ingest/testbed/cluster/limits.py).

How a plan weighs the figures, term by term (site_pricing.py): a measurement of that term (a
probe, the link cache) beats the command line, which beats the site file, which beats an
assumption. A measurement of one term does not displace the site's figure for another.
"""
from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from dataclasses import dataclass, fields

from ingest.errors import ConfigError

UNKNOWN = "unknown"
# Byte units (ending in B) and bit units (ending in bit) of a rate; "/s" may follow. A unit ending
# in a lowercase b ("Mb/s", "Gb") or "bps" is refused as ambiguous: seed 001 writes "Gb" for
# gigabytes and "600Mb/s" for its link, which one reads as megabits and another as megabytes.
_BYTE_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
               "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40}
_BIT_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8}
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*(/\s*s)?\s*$")
RATE_HELP = 'bytes/s: a number, or e.g. "600 MB/s", "4.7 GiB/s", "25 Gbit/s"'
SOURCE_HELP = 'where the figure came from, e.g. "seed 001 Table 2" or "measured with iperf3 on 2026-11-20"'


@dataclass(frozen=True)
class Figure:
    """One of the site's figures: its value (None: the file says it is unknown) and its source."""

    value: float | None
    source: str

    @property
    def known(self) -> bool:
        return self.value is not None

    def as_dict(self) -> dict:
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class Site:
    """A validated site file. Rates in bytes/s of data, latency in seconds, counts whole."""

    path: str
    name: str
    nic_bytes_per_s: Figure  # one node's NIC toward the store, shared by the node's ranks
    ranks_per_node: Figure  # ranks a job places on each node, when --nodes is not given
    egress_bytes_per_s: Figure  # the store's egress (or the WAN path to it), shared by every node
    requests_per_s: Figure  # requests per second the store serves every client together
    latency_s: Figure  # a small request's time, request to last byte, from a compute node
    stream_bytes_per_s: Figure | None = None  # what one connection gets from the store (optional)
    cores_per_node: Figure | None = None  # each node's cores (optional: the shared-cores term)

    def as_dict(self) -> dict:
        return {"path": self.path, "name": self.name,
                **{f.name: getattr(self, f.name).as_dict() for f in fields(self)
                   if isinstance(getattr(self, f.name), Figure)}}


@dataclass(frozen=True)
class _Key:
    """How one figure is read: its table, whether it is required, its kind and what it means."""

    table: str
    name: str
    kind: str  # "rate", "seconds", "per_s", "count"
    meaning: str
    required: bool = True


_KEYS = (
    _Key("node", "nic_bytes_per_s", "rate", "one node's NIC toward the store, shared by its ranks"),
    _Key("node", "ranks_per_node", "count", "ranks a job places on each node"),
    _Key("node", "cores_per_node", "count", "each node's cores", required=False),
    _Key("store", "egress_bytes_per_s", "rate", "the store's egress, shared by every node"),
    _Key("store", "requests_per_s", "per_s", "requests per second the store serves all clients together"),
    _Key("store", "latency_s", "seconds", "a small request's time from a compute node"),
    _Key("store", "stream_bytes_per_s", "rate", "what one connection gets from the store", required=False),
)
_UNITS = {"rate": RATE_HELP, "seconds": "seconds, a number such as 0.00195",
          "per_s": "requests per second, a number such as 5500", "count": "a whole number >= 1"}
_TABLES = {"site": ("name", "description"), **{t: tuple(k.name for k in _KEYS if k.table == t)
                                                for t in ("node", "store")}}


def parse_rate(value, key: str) -> float:
    """A rate in bytes/s from a number or a string with a byte or bit unit (see RATE_HELP)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{key}: expected {RATE_HELP}, got {value!r}")
    if isinstance(value, str):
        match = _RATE.match(value)
        if match is None:
            raise ConfigError(f"{key}: cannot read {value!r} as a rate; expected {RATE_HELP}")
        unit = match.group(2)
        if unit.endswith("b") or unit.lower().endswith("bps"):  # Mb, Gb, Mbps: bits or bytes?
            raise ConfigError(f"{key}: {value!r} is ambiguous (bits or bytes?); write e.g. \"600 Mbit/s\" for "
                              f"megabits or \"600 MB/s\" for megabytes per second")
        scale = _BYTE_UNITS.get(unit.lower()) or _BIT_UNITS.get(unit.lower())
        if scale is None:
            raise ConfigError(f"{key}: unknown unit {unit!r} in {value!r}; expected {RATE_HELP}")
        value = float(match.group(1)) * scale
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{key}: expected a rate > 0 in {RATE_HELP}, got {value!r}")
    return float(value)


def _value(kind: str, value, key: str) -> float:
    if kind == "rate":
        return parse_rate(value, key)
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key}: expected {_UNITS[kind]}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{key}: expected {_UNITS[kind]} (> 0), got {value!r}")
    return float(value)


def _figure(spec: _Key, entry) -> Figure:
    key = f"{spec.table}.{spec.name}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{key}: expected a table {{ value = ..., source = \"...\" }}: {spec.meaning}, in "
                          f"{_UNITS[spec.kind]}, and {SOURCE_HELP}; got {entry!r}")
    _refuse_unknown(entry, ("value", "source"), key)
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{key}.source: required, a non-empty string: {SOURCE_HELP}")
    if "value" not in entry:
        raise ConfigError(f"{key}.value: required: {spec.meaning}, in {_UNITS[spec.kind]}, or \"{UNKNOWN}\" "
                          f"(the source then says why)")
    value = entry["value"]
    if isinstance(value, str) and value.strip().lower() == UNKNOWN:
        return Figure(None, source.strip())
    return Figure(_value(spec.kind, value, f"{key}.value"), source.strip())


def _refuse_unknown(table: dict, known, where: str) -> None:
    for name in table:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.4)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
            raise ConfigError(f"{where}.{name}: unknown field; {hint}" if where else f"[{name}]: unknown table; {hint}")


def site_from_dict(doc: dict, path: str = "<site>") -> Site:
    """Validate a parsed site file; every error names the key and the unit expected (not the path:
    load_site adds it)."""
    _refuse_unknown(doc, tuple(_TABLES), "")
    for table, known in _TABLES.items():
        if table in doc and not isinstance(doc[table], dict):
            raise ConfigError(f"[{table}]: expected a table, got {doc[table]!r}")
        _refuse_unknown(doc.get(table, {}), known, table)
    site = doc.get("site", {})
    name = site.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"site.name: expected a non-empty string, got {name!r}")
    figures = {}
    for spec in _KEYS:
        entry = doc.get(spec.table, {}).get(spec.name)
        if entry is None:
            if spec.required:
                raise ConfigError(f"{spec.table}.{spec.name}: required: {spec.meaning}, in {_UNITS[spec.kind]}, "
                                  f"with its source; value = \"{UNKNOWN}\" if no one knows it")
            continue
        figures[spec.name] = _figure(spec, entry)
    return Site(path, name.strip(), **figures)


def load_site(path: str) -> Site:
    """Read and validate a site file; errors name the file, the key and the unit expected."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"site file {path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"site file {path}: not valid TOML: {exc}") from exc
    try:
        return site_from_dict(doc, path)
    except ConfigError as exc:
        raise ConfigError(f"site file {path}: {exc}") from None


def rate_text(bytes_per_s: float) -> str:
    """A rate as a person reads it: 9.56 MB/s, 629 MB/s, 75 GB/s (decimal, 3 figures)."""
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s:.3g} B/s"
