"""Reports as data first: per-rank timing records -> a JSON report (schema ingest.report/1) ->
a human summary rendered from that JSON. Plots live in analysis/ and read the same JSON.

Per-rank record (made by the driver, taken as given): rank, host, box ([start, stop] pairs in
numpy order), bytes_needed, bytes_wire, requests, retries, first_byte_s (or None), start_s and
stop_s (MPI.Wtime offsets from a barrier every rank passed), elapsed_s, throughput_bytes_per_s,
output_path (or None), phase_s ({phase: seconds}), plan (the planner's describe()); and, from
reports that have them, throttled (replies that asked for fewer requests at once: neither faults
nor retries), concurrency_ceiling, concurrency_settled and concurrency_min (the requests in
flight the rank's limiter allowed: at most, where it settled, and its fewest).

Timings reduce as IOR's ReduceIterResults does: makespan = latest stop - earliest start, so a
slow rank or a late start counts, unlike a mean of per-rank times.

Nothing secret reaches a report: every string that is an http(s) URL is redacted (query string
and user:password removed) when the report is built, whatever the caller passed.

The human summary is rendered by ingest.outputs.summary (`render_summary`, re-exported here).
"""
from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone

from ingest.atomic import atomic_write
from ingest.errors import IngestError
from ingest.version import __version__
from ingest.redact import redact_urls
from ingest.outputs.summary import render_summary, stage_tool_text  # noqa: F401 (re-exported: callers import them from here)

SCHEMA = "ingest.report/1"
MODES = ("direct", "staging", "prestage")
CUBE_KEYS = ("source", "hdu", "shape", "dtype", "bitpix", "data_offset", "object_bytes")
GRID_KEYS = ("grid_fits", "reason", "halo")
BASELINE_KEYS = ("stage_s", "read_makespan_s", "total_s", "from", "read_ranks")
# stage_tool ({"name", "version"}: what made the staged copy) is absent from reports written
# before it existed, so it is kept only when known and every reader takes it as optional.
OPTIONAL_BASELINE_KEYS = ("stage_tool",)
_SUM_KEYS = ("bytes_needed", "bytes_wire", "requests", "retries", "throttled")


# ------------------------------------------------------------------ building


def _clean(value):
    """JSON-safe copy: numpy scalars/arrays to Python, non-finite floats to None, URLs redacted."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        return _clean(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def _stats(values: list[float]) -> dict:
    if not values:
        return {"min": None, "mean": None, "max": None}
    return {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}


def aggregate(ranks: list[dict]) -> dict:
    """Reduce per-rank records: makespan (earliest start to latest stop), sums, extremes."""
    if not ranks:
        raise IngestError("report: no rank records to aggregate")
    makespan_s = max(r["stop_s"] for r in ranks) - min(r["start_s"] for r in ranks)
    sums = {key: sum(int(r.get(key) or 0) for r in ranks) for key in _SUM_KEYS}
    slowest = max(ranks, key=lambda r: (r["elapsed_s"], -r["rank"]))
    fastest = min(ranks, key=lambda r: (r["elapsed_s"], r["rank"]))
    first_bytes = [r["first_byte_s"] for r in ranks if r.get("first_byte_s") is not None]
    return {
        "ranks": len(ranks),
        "makespan_s": makespan_s,
        **sums,
        "read_amplification": sums["bytes_wire"] / sums["bytes_needed"] if sums["bytes_needed"] else None,
        "throughput_bytes_per_s": sums["bytes_needed"] / makespan_s if makespan_s > 0 else None,
        "slowest_rank": {"rank": slowest["rank"], "elapsed_s": slowest["elapsed_s"]},
        "fastest_rank": {"rank": fastest["rank"], "elapsed_s": fastest["elapsed_s"]},
        "elapsed_s": _stats([r["elapsed_s"] for r in ranks]),
        "first_byte_s": _stats(first_bytes),
        "concurrency_settled": _stats([r["concurrency_settled"] for r in ranks
                                       if r.get("concurrency_settled") is not None]),
        "concurrency_min": min((r["concurrency_min"] for r in ranks if r.get("concurrency_min") is not None),
                               default=None),
        "concurrency_ceiling": max((r["concurrency_ceiling"] for r in ranks
                                    if r.get("concurrency_ceiling") is not None), default=None),
    }


def region_counts(regions: list[dict]) -> dict:
    """How many regions ended in each status (read, skipped, redone, failed, ...)."""
    counts: dict = {}
    for r in regions:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return dict(sorted(counts.items()))


def cube_from_layout(layout) -> dict:
    """The report's `cube` block for a FITS Layout or an HDF5 H5Layout (its format says which)."""
    cube = {
        "source": layout.source,
        "format": layout.kind,
        "hdu": layout.hdu,
        "shape": list(layout.shape),
        "dtype": layout.out_dtype.str,  # what readers get (astropy's rules for BSCALE/BZERO)
        "stored_dtype": layout.raw_dtype.str,  # as stored, with its byte order: '>f4'
        "bitpix": getattr(layout, "bitpix", None),
        "data_offset": layout.data_offset,
        "object_bytes": layout.object_bytes,
        "data_bytes": layout.data_bytes,
    }
    if layout.kind == "hdf5":
        index = layout.chunks
        cube.update(dataset=layout.dataset, storage=layout.storage,
                    chunk_shape=list(index.chunk_shape) if index is not None else None,
                    stored_bytes=int(index.sizes.sum()) if index is not None else None,
                    filters=[{"id": f.id, "name": f.name} for f in layout.filters],
                    open_requests=layout.open_requests, open_bytes=layout.open_bytes)
    return cube


def staging_baseline(stage_s: float, read_aggregate: dict, source: str, stage_tool: dict | None = None) -> dict:
    """Baseline block: time to stage the cube plus the ranks' read makespan from the staged copy.
    `source` says where the numbers come from (this job, or an earlier report's path);
    `stage_tool` what made the copy, {"name": "s5cmd", "version": "v2.3.0"} (None: not known)."""
    read_s = read_aggregate["makespan_s"]
    block = {"stage_s": stage_s, "read_makespan_s": read_s, "total_s": stage_s + read_s, "from": source,
             "read_ranks": read_aggregate.get("ranks")}  # a baseline from another rank count says so
    if stage_tool:
        block["stage_tool"] = dict(stage_tool)
    return block



def build_report(*, config, cube: dict, grid: dict, ranks: list, mode: str = "direct",
                 baseline: dict | None = None, settings: dict | None = None, extra: dict | None = None,
                 regions: list | None = None, store: dict | None = None) -> dict:
    """The whole report (schema ingest.report/1). `config` is RunConfig.to_report_dict() (a
    RunConfig is accepted too); `settings` the values the reads used (threads, chunk_bytes,
    max_gap_bytes, the probe and the tuner's reasons, predicted_makespan_s), to which the
    measured makespan is added; `speedup` = baseline total_s / this run's makespan_s. `regions`:
    one record per region (index, rank, box, bytes, time, status), beside the per-rank ones.
    `store`: what the store answered (ingest.transports.storefacts.StoreFacts.as_dict), when read
    from one."""
    if mode not in MODES:
        raise IngestError(f"report: mode {mode!r} is not one of {', '.join(MODES)}")
    if hasattr(config, "to_report_dict"):
        config = config.to_report_dict()
    seen = [r["rank"] for r in ranks]
    if len(set(seen)) != len(seen):
        raise IngestError(f"report: duplicate rank records {sorted(r for r in set(seen) if seen.count(r) > 1)}")
    ordered = sorted(ranks, key=lambda r: r["rank"])
    agg = aggregate(ordered)
    report = {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tool": {"name": "ingest", "version": __version__},
        "mode": mode,
        "config": dict(config),
        # Named keys first (None when the caller lacks one), then anything extra it gave.
        "cube": {**{k: cube.get(k) for k in CUBE_KEYS}, **cube},
        "grid": {**{k: grid.get(k) for k in GRID_KEYS}, **grid},
        "ranks": ordered,
        "aggregate": agg,
    }
    if regions is not None:
        report["regions"] = sorted(regions, key=lambda r: r["index"])
        report["region_counts"] = region_counts(report["regions"])
    if baseline is not None:
        report["baseline"] = {**{k: baseline.get(k) for k in BASELINE_KEYS},
                              **{k: baseline[k] for k in OPTIONAL_BASELINE_KEYS if baseline.get(k) is not None}}
        if mode in ("direct", "prestage"):
            total_s = baseline.get("total_s")
            report["speedup"] = total_s / agg["makespan_s"] if total_s and agg["makespan_s"] > 0 else None
    if settings is not None:
        report["settings"] = {**settings, "measured_makespan_s": agg["makespan_s"]}
    if store is not None:
        report["store"] = dict(store)
    if extra:
        report["extra"] = dict(extra)
    return _clean(report)


# ------------------------------------------------------------------ files


def write_report(path, report: dict) -> str:
    """Write `report` as JSON atomically (temp file, fsync, rename); parent dirs are created."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    text = json.dumps(_clean(report), indent=2, allow_nan=False) + "\n"
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise IngestError(f"report {path}: cannot create directory {directory} ({exc.strerror or exc})") from None
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with atomic_write(path, tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise IngestError(f"report {path}: cannot write it ({exc.strerror or exc})") from None
    return path


def load_report(path) -> dict:
    """Read a report written by write_report; IngestError naming the file if it is not one."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except OSError as exc:
        raise IngestError(f"report {path}: cannot read it ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IngestError(f"report {path}: not a JSON file ({exc})") from None
    schema = report.get("schema") if isinstance(report, dict) else None
    if schema != SCHEMA:
        raise IngestError(f"report {path}: schema is {schema!r}, expected {SCHEMA!r}; "
                          "not an ingest report, or one from an incompatible version")
    return report


def baseline_from_report(path) -> dict:
    """The staging baseline of an earlier `mode: staging` report, with `from` set to its path."""
    report = load_report(path)
    if report.get("mode") != "staging":
        raise IngestError(f"report {path}: is a {report.get('mode')!r} report, not a staging one; "
                          "make one with `python -m ingest stage` and pass that to --baseline")
    base = report.get("baseline")
    if not isinstance(base, dict) or base.get("total_s") is None:
        raise IngestError(f"report {path}: staging report has no baseline block with total_s")
    return {**base, "from": os.fspath(path)}
