"""The human summary of a report (schema ingest.report/1), rendered from its JSON alone: the
per-rank table, the aggregate and, with a baseline, staging against direct. Nothing here
computes a number the JSON lacks, so a summary re-rendered from a saved report is the same.
"""
from __future__ import annotations

from ingest.units import MiB, format_bytes
from ingest.transports.storefacts import summary_line

FULL_TABLE_MAX_RANKS = 64  # beyond this the table shows the first/last EDGE_ROWS and extremes
EDGE_ROWS = 10


def _box_text(box) -> str:
    """Numpy-order pairs -> 'x0-100 y50-100 z0-30' (FITS order, as in output file names)."""
    letters = ("x", "y", "z", "s")
    return " ".join(f"{letter}{a}-{b}" for letter, (a, b) in zip(letters, reversed(box)))


def _num(value, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


def _rank_row(r: dict, agg: dict) -> list[str]:
    marks = [name for name in ("slowest", "fastest") if agg["ranks"] > 1 and agg[f"{name}_rank"]["rank"] == r["rank"]]
    return [
        str(r["rank"]), _box_text(r["box"]) if r.get("box") else f"{len(r.get('regions') or [])} regions",
        _num(r.get("bytes_needed"), ".1f", 1 / MiB), _num(r.get("bytes_wire"), ".1f", 1 / MiB),
        str(r.get("requests", "-")), str(r.get("retries", "-")), str(r.get("throttled", "-")),
        _in_flight_text(r), _num(r.get("first_byte_s"), ".1f", 1000.0), _num(r.get("elapsed_s"), ".3f"),
        _num(r.get("throughput_bytes_per_s"), ".1f", 1 / MiB), ", ".join(marks),
    ]


_HEADINGS = ["rank", "box (FITS order)", "MiB needed", "MiB wire", "requests", "retries", "throttled",
             "in flight", "first byte ms", "elapsed s", "MiB/s", ""]


def _in_flight_text(r: dict) -> str:
    """Requests in flight the rank settled on, of its ceiling (e.g. 2.1/16), or '-'."""
    if r.get("concurrency_settled") is None:
        return "-"
    ceiling = r.get("concurrency_ceiling")
    return f"{r['concurrency_settled']:g}" + (f"/{ceiling}" if ceiling is not None else "")


def _throttle_line(agg: dict) -> list[str]:
    """One line when the store throttled: how often, and where the ranks' requests in flight settled."""
    if not agg.get("throttled"):
        return []
    settled = agg.get("concurrency_settled") or {}
    level = (f"; requests in flight per rank settled at {settled['min']:g}-{settled['max']:g} "
             f"(mean {settled['mean']:.2f}) of {agg.get('concurrency_ceiling')}, fewest {agg.get('concurrency_min')}"
             if settled.get("mean") is not None else "")
    return [f"throttled by the store {agg['throttled']} time(s) (503 SlowDown, 429 or refused; not faults, "
            f"not retries){level}"]


def _table(rows: list[list[str]]) -> list[str]:
    """Aligned text table; an empty row stands for ranks left out."""
    widths = [max(len(row[i]) for row in [_HEADINGS] + rows if row) for i in range(len(_HEADINGS))]
    def line(row):  # box and note left-aligned, numbers right-aligned
        cells = [c.ljust(w) if i in (1, len(row) - 1) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()
    out = [line(_HEADINGS), "  ".join("-" * w for w in widths)]
    out += [line(row) if row else "  ..." for row in rows]
    return out


def _shown_ranks(ranks: list[dict], agg: dict) -> list[dict | None]:
    """All ranks, or for long lists the first/last EDGE_ROWS plus slowest and fastest (None = gap)."""
    if len(ranks) <= FULL_TABLE_MAX_RANKS:
        return list(ranks)
    keep = {r["rank"] for r in ranks[:EDGE_ROWS] + ranks[-EDGE_ROWS:]}
    keep |= {agg["slowest_rank"]["rank"], agg["fastest_rank"]["rank"]}
    shown, last = [], None
    for i, r in enumerate(ranks):
        if r["rank"] in keep:
            if last is not None and i != last + 1:
                shown.append(None)
            shown.append(r)
            last = i
    return shown


def render_summary(report: dict) -> str:
    """Readable per-rank table, aggregate summary and, with a baseline, staging vs direct."""
    cube, grid, agg = report.get("cube", {}), report.get("grid", {}), report["aggregate"]
    config = report.get("config", {})
    mode = report.get("mode", "?")
    method = config.get("resolved_method") or config.get("method") or "?"
    if config.get("resolved_engine") not in (None, method):
        method += f" ({config['resolved_engine']} engine)"
    shape = cube.get("shape") or []
    lines = [
        f"ingest report ({report.get('schema')}), mode {mode}, method {method}, created {report.get('created')}",
        f"cube: {cube.get('source')} "
        f"{'dataset ' + str(cube.get('dataset')) if cube.get('format') == 'hdf5' else 'HDU ' + str(cube.get('hdu'))}, "
        f"{'x'.join(str(n) for n in reversed(shape))} (NAXIS1xNAXIS2...) {cube.get('dtype')}",
        f"grid: {_grid_text(grid.get('grid_fits'))} (FITS order), halo {grid.get('halo')} px"
        + (f"; {grid['reason']}" if grid.get("reason") else ""),
        "",
    ]
    rows = _shown_ranks(report["ranks"], agg)
    lines += _table([_rank_row(r, agg) if r is not None else [] for r in rows])
    if len(rows) < len(report["ranks"]):
        lines.append(f"  ({len(report['ranks']) - sum(r is not None for r in rows)} of "
                     f"{len(report['ranks'])} ranks not shown; the JSON has them all)")
    if report.get("region_counts"):
        counts = ", ".join(f"{n} {status}" for status, n in report["region_counts"].items())
        lines.append(f"  regions: {len(report['regions'])} ({counts}); the JSON has one record per region")
    elapsed = agg["elapsed_s"]
    amp = agg.get("read_amplification")
    lines += [
        "",
        f"ranks {agg['ranks']}, makespan {agg['makespan_s']:.3f} s (earliest start to latest stop)",
        f"bytes needed {format_bytes(agg['bytes_needed'])}, on the wire {format_bytes(agg['bytes_wire'])}"
        + (f" (amplification {amp:.3f}x)" if amp is not None else ""),
        f"requests {agg['requests']}, retries {agg['retries']}, "
        f"throughput {_num(agg.get('throughput_bytes_per_s'), '.1f', 1 / MiB)} MiB/s (needed bytes / makespan)",
        f"elapsed per rank: min {elapsed['min']:.3f} s, mean {elapsed['mean']:.3f} s, max {elapsed['max']:.3f} s; "
        f"slowest rank {agg['slowest_rank']['rank']}, fastest rank {agg['fastest_rank']['rank']}",
        *_throttle_line(agg),
    ]
    settings = report.get("settings")
    if settings:
        lines.append(_settings_line(settings))
    if report.get("store"):
        lines.append(summary_line(report["store"]))
    base = report.get("baseline")
    if base:
        lines += ["", *_baseline_block(base, agg, mode, report.get("speedup"))]
    return "\n".join(lines) + "\n"


def _settings_line(settings: dict) -> str:
    """What the reads used, and whether the model's prediction held."""
    text = (f"settings: {settings.get('threads')} threads, requests up to {format_bytes(settings.get('chunk_bytes') or 0)}, "
            f"gap {format_bytes(settings.get('max_gap_bytes') or 0)}; predicted makespan "
            f"{_num(settings.get('predicted_makespan_s'), '.3f')} s, measured {_num(settings.get('measured_makespan_s'), '.3f')} s")
    prediction = settings.get("prediction")
    if prediction:
        predicted, measured = prediction.get("makespan_s"), settings.get("measured_makespan_s")
        ratio = f" (measured / predicted {measured / predicted:.2f})" if predicted and measured else ""
        text += (f"\n  bound by {prediction['binding']}{ratio} for {prediction['ranks']} rank(s) on "
                 f"{prediction['nodes']} node(s); shared pipes {prediction.get('shared_source', '?')}")
        if prediction.get("history"):  # earlier jobs of this shape on the endpoint (core/history.py)
            model = prediction.get("model_makespan_s")
            used = "" if model is None or model == predicted else f"; the model alone said {model:.3f} s"
            text += f"\n  {prediction['history']}{used}"
    tuning = settings.get("tuning")
    return text + (f"\n  tuned by {tuning['reason']}" if tuning and tuning.get("reason") else "")


def _grid_text(grid_fits) -> str:
    return "x".join(str(p) for p in grid_fits) if grid_fits else "?"


def _baseline_block(base: dict, agg: dict, mode: str, speedup) -> list[str]:
    stage_s, read_s, total_s = (base.get(k) for k in ("stage_s", "read_makespan_s", "total_s"))
    tool = stage_tool_text(base.get("stage_tool"))
    lines = [f"staging baseline (from {base.get('from')}" + (f"; staged with {tool}):" if tool else "):")]
    if mode == "staging":
        return lines + [f"  stage {_num(stage_s, '.3f')} s + read {_num(read_s, '.3f')} s = total {_num(total_s, '.3f')} s"]
    rows = [("", "staging", mode),
            ("stage s", _num(stage_s, ".3f"), "-"),
            ("read makespan s", _num(read_s, ".3f"), f"{agg['makespan_s']:.3f}"),
            ("total s", _num(total_s, ".3f"), f"{agg['makespan_s']:.3f}")]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines += ["  " + "  ".join([r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2].rjust(widths[2])]) for r in rows]
    lines.append(f"speedup {_num(speedup, '.2f')}x (staging total / {mode} makespan)")
    return lines

def stage_tool_text(tool) -> str | None:
    """'s5cmd v2.3.0' for a baseline's stage_tool; None when the report does not say."""
    if not isinstance(tool, dict) or not tool.get("name"):
        return None
    version = tool.get("version")
    return f"{tool['name']} {version}" if version and version != "unknown" else f"{tool['name']} (version unknown)"
