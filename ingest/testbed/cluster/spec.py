"""What an emulated cluster looks like: node count, link rates, latencies, the test cube.

Read from a TOML table (configs/cluster.toml) and validated once; every error names the field
and its unit. Rates are bytes per second of payload-carrying IP traffic (tc counts IP bytes,
so TCP/HTTP overhead comes out of the cap, as on a real NIC).
"""
from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import MISSING, dataclass, fields

from ingest.errors import ConfigError
from ingest.units import parse_bytes

MAX_NODES = 200  # node i gets 10.23.0.(10 + i) on the cluster's /24
MAX_RATE_BYTES_PER_S = 4 * 10**9  # HTB's 32-bit rate field; far above anything 2 cores can move
MAX_LATENCY_S = 10.0
QUEUES = ("fair", "fifo")  # how a server's pipe is shared among the nodes it serves (netns.shape)


@dataclass(frozen=True)
class StoreSpec:
    """The object store: versitygw behind Toxiproxy (latency) behind one egress pipe (HTB)."""

    egress_rate_bytes_per_s: int  # the store's whole egress, shared by every node; its ingress too (cluster.py)
    latency_s: float = 0.0  # added to every response by Toxiproxy (per request, not per byte)
    bucket: str = "survey"  # created at start


@dataclass(frozen=True)
class NodeSpec:
    """One compute node: its NIC, shared by its ranks, toward the store and the filesystem."""

    nic_rate_bytes_per_s: int  # each direction; MPI traffic between nodes is not capped


@dataclass(frozen=True)
class FsSpec:
    """The shared filesystem: sshd (sftp) behind Toxiproxy behind one pipe, mounted by sshfs."""

    rate_bytes_per_s: int  # the server's NIC, each direction, shared by every node
    latency_s: float = 0.0  # added to every reply by Toxiproxy


@dataclass(frozen=True)
class CubeSpec:
    """The synthetic cube `python -m ingest.testbed.cluster` uploads (ingest.testbed.synth)."""

    shape: tuple[int, ...]  # numpy order (channel, y, x)
    bitpix: int = -32
    key: str = "cube.fits"


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster; `load_spec` or `spec_from_dict` make one."""

    nodes: int
    ranks_per_node: int
    store: StoreSpec
    node: NodeSpec
    fs: FsSpec
    cube: CubeSpec | None = None
    # How the servers' pipes (the store's egress and ingress, the filesystem's) share their rate
    # among the nodes: "fair", an equal share each that borrows what the others leave (as
    # fq_codel, Linux's default queue, shares a NIC among flows); "fifo", one drop-tail queue,
    # where whichever flows win it go first and a node left last runs alone at its own NIC.
    queue: str = "fair"


def _check_keys(table: dict, cls, where: str) -> None:
    known = [f.name for f in fields(cls)]
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"
            raise ConfigError(f"{where}.{key}: unknown field{hint}")
    for f in fields(cls):
        if f.default is MISSING and f.name not in table:
            raise ConfigError(f"{where}.{f.name}: required")


def _table(doc: dict, name: str, required: bool = True) -> dict | None:
    value = doc.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}]: required table" if value is None else f"{name}: expected a table, got {value!r}")
    return value


def _rate(value, field: str) -> int:
    """A rate in bytes/s: an integer, a float such as 25e6, or a string such as "25MB"."""
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ConfigError(f"{field}: {value!r} is not a whole number of bytes/s")
        value = int(value)
    rate = parse_bytes(value, field)
    if not 1000 <= rate <= MAX_RATE_BYTES_PER_S:
        raise ConfigError(f"{field}: {rate} bytes/s is outside [1000, {MAX_RATE_BYTES_PER_S}] bytes/s")
    return rate


def _latency(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_LATENCY_S:
        raise ConfigError(f"{field}: expected seconds in [0, {MAX_LATENCY_S:g}] s, got {value!r}")
    if abs(value * 1000 - round(value * 1000)) > 1e-6:  # Toxiproxy's latency toxic takes whole ms
        raise ConfigError(f"{field}: {value!r} s is not a whole number of milliseconds (Toxiproxy's resolution)")
    return float(value)


def _count(value, field: str, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise ConfigError(f"{field}: expected a whole number in [1, {upper}], got {value!r}")
    return value


def _name(value, field: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("/") or " " in value:
        raise ConfigError(f"{field}: expected a non-empty name without spaces or leading '/', got {value!r}")
    return value


def spec_from_dict(doc: dict) -> ClusterSpec:
    """Validate a parsed document ({"cluster": .., "store": .., "node": .., "fs": .., "cube": ..})."""
    unknown = set(doc) - {"cluster", "store", "node", "fs", "cube"}
    if unknown:
        raise ConfigError(f"[{sorted(unknown)[0]}]: unknown table; known: cluster, store, node, fs, cube")
    top = _table(doc, "cluster")
    for key in top:
        if key not in ("nodes", "ranks_per_node", "queue"):
            raise ConfigError(f"cluster.{key}: unknown field; known: nodes, ranks_per_node, queue")
    queue = top.get("queue", "fair")
    if queue not in QUEUES:
        raise ConfigError(f"cluster.queue: expected one of {', '.join(QUEUES)}, got {queue!r}")
    store, node, fs = _table(doc, "store"), _table(doc, "node"), _table(doc, "fs")
    _check_keys(store, StoreSpec, "store")
    _check_keys(node, NodeSpec, "node")
    _check_keys(fs, FsSpec, "fs")
    cube = _table(doc, "cube", required=False)
    cube_spec = None
    if cube is not None:
        _check_keys(cube, CubeSpec, "cube")
        shape = cube["shape"]
        if (not isinstance(shape, list) or not 2 <= len(shape) <= 4
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape)):
            raise ConfigError(f"cube.shape: expected 2 to 4 positive pixel counts (numpy order), got {shape!r}")
        bitpix = cube.get("bitpix", -32)
        if bitpix not in (8, 16, 32, 64, -32, -64):
            raise ConfigError(f"cube.bitpix: expected one of 8, 16, 32, 64, -32, -64, got {bitpix!r}")
        cube_spec = CubeSpec(tuple(shape), bitpix, _name(cube.get("key", "cube.fits"), "cube.key"))
    return ClusterSpec(
        nodes=_count(top.get("nodes"), "cluster.nodes (count)", MAX_NODES),
        ranks_per_node=_count(top.get("ranks_per_node"), "cluster.ranks_per_node (count)", 64),
        store=StoreSpec(_rate(store["egress_rate_bytes_per_s"], "store.egress_rate_bytes_per_s"),
                        _latency(store.get("latency_s", 0.0), "store.latency_s"),
                        _name(store.get("bucket", "survey"), "store.bucket")),
        node=NodeSpec(_rate(node["nic_rate_bytes_per_s"], "node.nic_rate_bytes_per_s")),
        fs=FsSpec(_rate(fs["rate_bytes_per_s"], "fs.rate_bytes_per_s"),
                  _latency(fs.get("latency_s", 0.0), "fs.latency_s")),
        cube=cube_spec,
        queue=queue,
    )


def load_spec(path: str, overrides: dict | None = None) -> ClusterSpec:
    """Read and validate a cluster TOML file; overrides {"table": {"field": value}} win over it."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cluster spec {path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cluster spec {path}: {exc}") from exc
    for table, values in (overrides or {}).items():
        doc.setdefault(table, {}).update(values)
    try:
        return spec_from_dict(doc)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
