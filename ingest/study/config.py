"""The study's one configuration: a TOML file with a [study] table and one table per experiment.

Every experiment table is optional; a study runs the ones present. Each key is checked here,
once, and a bad one is refused naming `table.key`, the value and what was expected, before any
job starts (a typo should cost a second, not the first hour of a 25-node allocation).

    [study]            source, endpoint_url, repeats, launcher, run_timeout_s, threads, boxes,
                       grid, stage_dir, run_args, setting; or [study.embedded] for a local server + cube
    [study.cluster]    spec (a cluster TOML), nodes, ranks_per_node, and [study.cluster.store|node|fs]
                       overriding the spec's rates: with setting = "cluster"
    [processes]        ranks, methods (presigned, s3, staging), scaling (weak|strong), stage_with
    [threads]          threads, method
    [strategies]       strategies, method
    [libraries]        libraries, chunk_bytes, bytes, cache
    [order]            orders, method, strategy
    [layout]           access (sequential|parallel), parallel_ranks, method, prefix
    [stability]        runs, methods
    [links]            profiles, experiments
Any experiment table may set `repeats` (default: the study's).
"""
from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass, field

from ingest.errors import ConfigError
from ingest.units import parse_bytes

EXPERIMENTS = ("processes", "threads", "strategies", "libraries", "order", "layout", "stability")
METHODS = ("presigned", "s3")
LIBRARIES = ("urllib", "requests", "urllib3", "ingest")
STRATEGIES = ("large", "intermediate", "small", "auto")
STAGE_TOOLS = ("ingest", "s5cmd", "rclone")
LINK_PROFILES = ("loopback", "acacia", "wan")
SETTINGS = ("local", "cluster")

# table -> {key: (kind, default)}; kind drives the check. None default: required or derived.
_KEYS: dict[str, dict[str, tuple]] = {
    "study": {"source": ("str", None), "endpoint_url": ("str", None), "repeats": ("int", 3),
              "launcher": ("str", "auto"), "run_timeout_s": ("float", 1800.0), "threads": ("int", 4),
              "boxes": ("int", None), "grid": ("str", "auto"), "stage_dir": ("str", None),
              "run_args": ("strs", []), "embedded": ("table", None), "setting": ("str", "local"),
              "cluster": ("table", None)},
    "study.embedded": {"shape": ("str", "256x256x64"), "bitpix": ("bitpix", -32), "bucket": ("str", "study"),
                 "key": ("str", "cube.fits")},
    # the emulated cluster (ingest.testbed.cluster): its spec file, nodes and slots overridden here
    # and its rates overridden by tables of the spec's own (store, node, fs: ingest.testbed.cluster.spec)
    "study.cluster": {"spec": ("str", None), "nodes": ("int", None), "ranks_per_node": ("int", None),
                      "store": ("table", None), "node": ("table", None), "fs": ("table", None)},
    "processes": {"ranks": ("ints", None), "methods": ("strs", ["presigned", "s3", "staging"]),
                  "scaling": ("str", "weak"), "stage_with": ("strs", ["auto"]), "threads": ("int", None),
                  "repeats": ("int", None)},
    "threads": {"threads": ("ints", [1, 2, 4, 8, 16]), "method": ("str", "presigned"), "repeats": ("int", None)},
    "strategies": {"strategies": ("strs", list(STRATEGIES)), "method": ("str", "presigned"),
                   "repeats": ("int", None)},
    "libraries": {"libraries": ("strs", list(LIBRARIES)), "chunk_bytes": ("strs", ["1GiB", "1945MiB"]),
                  "bytes": ("str", None), "cache": ("strs", ["fresh", "cached"]), "repeats": ("int", None)},
    "order": {"orders": ("strs", ["sequential", "random"]), "method": ("str", "presigned"),
              "strategy": ("str", "small"), "repeats": ("int", None)},
    "layout": {"access": ("strs", ["sequential", "parallel"]), "parallel_ranks": ("int", 4),
               "method": ("str", "s3"), "prefix": ("str", "ingest-study-tiles/"), "repeats": ("int", None)},
    "stability": {"runs": ("int", 10), "methods": ("strs", ["presigned", "s3"])},
    "links": {"profiles": ("strs", ["loopback"]), "experiments": ("strs", ["processes"])},
}


@dataclass(frozen=True)
class StudyConfig:
    """A validated study: the [study] settings and each present experiment's table (defaults filled)."""

    study: dict
    embedded: dict | None
    experiments: dict = field(default_factory=dict)  # name -> its table, only those present
    links: dict | None = None
    cluster: object | None = None  # the ClusterSpec (ingest.testbed.cluster) with setting = "cluster"
    raw: dict = field(default_factory=dict)  # the file as read, for the record (meta "config")

    def repeats(self, experiment: str) -> int:
        if experiment == "stability":
            return self.experiments["stability"]["runs"]
        own = self.experiments[experiment].get("repeats")
        return own if own is not None else self.study["repeats"]

    def links_for(self, experiment: str) -> list[str]:
        """The link profiles an experiment runs over (loopback alone without a [links] table)."""
        if self.links and experiment in self.links["experiments"]:
            return list(self.links["profiles"])
        return ["loopback"]


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check(table: str, key: str, kind: str, value):
    where = f"{table}.{key}"
    if kind == "int" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ConfigError(f"{where}: expected a whole number >= 1, got {value!r}")
    if kind == "bitpix" and value not in (8, 16, 32, 64, -32, -64):
        raise ConfigError(f"{where}: expected a FITS BITPIX (8, 16, 32, 64, -32 or -64), got {value!r}")
    if kind == "float" and not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
        raise ConfigError(f"{where}: expected a number of seconds > 0, got {value!r}")
    if kind == "str" and not (isinstance(value, str) and value.strip()):
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    if kind == "ints" and not (isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
        raise ConfigError(f"{where}: expected a non-empty list of whole numbers >= 1, got {value!r}")
    if kind == "strs" and not (isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)):
        raise ConfigError(f"{where}: expected a list of non-empty strings, got {value!r}")
    if kind == "table" and not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table ([{table}.{key}]), got {value!r}")
    return value


def _table(name: str, given: dict) -> dict:
    known = _KEYS[name]
    for key in given:
        if key not in known:
            raise ConfigError(f"{name}.{key}: not a setting of [{name}]{_suggest(key, known)}; "
                              f"settings: {', '.join(known)}")
    return {key: _check(name, key, kind, given[key]) if key in given else default
            for key, (kind, default) in known.items()}


def _one_of(where: str, values, allowed) -> None:
    for v in values if isinstance(values, list) else [values]:
        if v not in allowed:
            raise ConfigError(f"{where}: {v!r} is not one of {', '.join(allowed)}{_suggest(str(v), allowed)}")


def _check_experiments(tables: dict) -> None:
    """Value checks beyond the type: names from the known sets, sizes that parse."""
    if "processes" in tables:
        t = tables["processes"]
        if t["ranks"] is None:
            raise ConfigError("processes.ranks: required, e.g. [1, 4, 8, 16, 25]")
        _one_of("processes.methods", t["methods"], METHODS + ("staging",))
        _one_of("processes.scaling", t["scaling"], ("weak", "strong"))
    for name, key in (("threads", "method"), ("strategies", "method"), ("order", "method"), ("layout", "method")):
        if name in tables:
            _one_of(f"{name}.{key}", tables[name][key], METHODS)
    if "stability" in tables:
        _one_of("stability.methods", tables["stability"]["methods"], METHODS)
    if "strategies" in tables:
        _one_of("strategies.strategies", tables["strategies"]["strategies"], STRATEGIES)
    if "order" in tables:
        _one_of("order.orders", tables["order"]["orders"], ("sequential", "random"))
        _one_of("order.strategy", tables["order"]["strategy"], STRATEGIES)
    if "layout" in tables:
        _one_of("layout.access", tables["layout"]["access"], ("sequential", "parallel"))
    if "libraries" in tables:
        t = tables["libraries"]
        _one_of("libraries.libraries", t["libraries"], LIBRARIES)
        _one_of("libraries.cache", t["cache"], ("fresh", "cached"))
        for text in t["chunk_bytes"]:
            if parse_bytes(text, "libraries.chunk_bytes") < 1:
                raise ConfigError(f"libraries.chunk_bytes: {text!r} is not a positive byte count")
        if t["bytes"] is not None and parse_bytes(t["bytes"], "libraries.bytes") < 1:
            raise ConfigError(f"libraries.bytes: {t['bytes']!r} is not a positive byte count")


def parse_config(text: str, name: str = "study config") -> StudyConfig:
    """Parse and check a study TOML document; ConfigError naming the table and key at fault."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{name}: not valid TOML ({exc})") from None
    allowed = ("study",) + EXPERIMENTS + ("links",)
    for key in doc:
        if key not in allowed:
            raise ConfigError(f"{name}: [{key}] is not a study table{_suggest(key, allowed)}; tables: "
                              f"{', '.join(allowed)}")
    if "study" not in doc:
        raise ConfigError(f"{name}: no [study] table (it names the source cube)")
    study = _table("study", doc["study"])
    embedded = _table("study.embedded", study.pop("embedded")) if study.get("embedded") is not None else None
    cluster_table = _table("study.cluster", study.pop("cluster")) if study.get("cluster") is not None else None
    if (study["source"] is None) == (embedded is None):
        raise ConfigError("study.source: give the cube (s3://bucket/key) or a [study.embedded] table, exactly one")
    if study["source"] is not None and not study["source"].startswith("s3://"):
        raise ConfigError(f"study.source: {study['source']!r} is not s3://bucket/key (the study reads it by "
                          "presigned URL and by the S3 API, so it needs the object's name)")
    tables = {name: _table(name, doc[name]) for name in EXPERIMENTS if name in doc}
    if not tables:
        raise ConfigError(f"{name}: no experiment table; add at least one of {', '.join(EXPERIMENTS)}")
    _check_experiments(tables)
    links = _table("links", doc["links"]) if "links" in doc else None
    if links:
        _one_of("links.profiles", links["profiles"], LINK_PROFILES)
        _one_of("links.experiments", links["experiments"], EXPERIMENTS)
    cluster = _cluster(study, embedded, cluster_table, tables, links, name)
    return StudyConfig(study, embedded, tables, links, cluster, doc)


def _cluster(study: dict, embedded, table: dict | None, tables: dict, links, name: str):
    """study.setting: "local" (the store given or embedded, the study's launcher) or "cluster"
    (ingest.testbed.cluster built from [study.cluster].spec: every job through its mpiexec,
    staging into its shared filesystem). Returns the validated ClusterSpec, or None."""
    _one_of("study.setting", study["setting"], SETTINGS)
    if study["setting"] != "cluster":
        if table is not None:
            raise ConfigError("study.cluster: a [study.cluster] table needs study.setting = \"cluster\"")
        return None
    if table is None or table["spec"] is None:
        raise ConfigError("study.cluster.spec: required with study.setting = \"cluster\" "
                          "(a cluster TOML, e.g. configs/cluster.toml)")
    if embedded is None:
        raise ConfigError("study.embedded: required with study.setting = \"cluster\" (the synthetic cube "
                          "the study uploads into the cluster's store)")
    for key, why in (("launcher", "every job goes through the cluster's mpiexec"),
                     ("stage_dir", "staging goes into the cluster's shared filesystem")):
        if study[key] not in (None, "auto"):
            raise ConfigError(f"study.{key}: not with study.setting = \"cluster\" ({why})")
    # these run one plain process on the study's own host, which has no route into the cluster
    for experiment in ("libraries", "layout"):
        if experiment in tables:
            raise ConfigError(f"[{experiment}]: not with study.setting = \"cluster\" (it runs a process "
                              "outside the cluster's nodes, which cannot reach its store)")
    if links:
        raise ConfigError("[links]: not with study.setting = \"cluster\" (the cluster's spec sets its links)")
    from ingest.testbed.cluster.spec import load_spec

    path = table["spec"]
    if not os.path.isabs(path) and not os.path.exists(path) and os.path.exists(
            os.path.join(os.path.dirname(name), path)):
        path = os.path.join(os.path.dirname(name), path)  # relative to the study config
    over = {k: table[k] for k in ("nodes", "ranks_per_node") if table[k] is not None}
    overrides = {"cluster": over} if over else {}
    overrides.update({k: table[k] for k in ("store", "node", "fs") if table[k] is not None})
    try:
        return load_spec(path, overrides or None)
    except ConfigError as exc:
        rates = [k for k in ("store", "node", "fs") if table[k] is not None]
        where = f" (with [study.cluster.{'], [study.cluster.'.join(rates)}] over it)" if rates else ""
        raise ConfigError(f"study.cluster.spec: {exc}{where}") from None


def load_config(path: str) -> StudyConfig:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    return parse_config(text, path)
