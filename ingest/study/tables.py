"""STUDY.md's tables, one per experiment, and the list of failed runs: rendered from the rows alone
(report.py puts them in the document)."""
from __future__ import annotations

from ingest.study import db, summary as S
from ingest.study.text import label, md_table, s, time_range
from ingest.units import format_bytes

def _runs(pt: S.Point) -> str:
    return f"{pt.ok}/{pt.failed}" + (f" ({pt.timeout} timed out)" if pt.timeout else "")


def _count(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def _bytes(x: float | None) -> str:
    return "–" if x is None else format_bytes(x)


def _keyed(rows: list[dict], *keys: str) -> dict:
    """Rows grouped by (link, params[k] for k in keys), sorted, the link first when it varies."""
    return dict(sorted(S.groups(rows, lambda r: (S.link_of(r),) + tuple(r["params"].get(k) for k in keys)).items(),
                       key=lambda kv: tuple(str(v).zfill(8) if isinstance(v, int) else str(v) for v in kv[0])))


def _link(rows: list[dict], key: tuple) -> list[str]:
    return [key[0]] if len(S.links(rows)) > 1 else []


def _processes(rows: list[dict]) -> list[str]:
    lk = ["link"] if len(S.links(rows)) > 1 else []
    body = []
    for key, g in _keyed(rows, "method", "stage_with", "ranks").items():
        name = f"staging: {S.tool_label(g)}" if key[1] == "staging" else label(key[1])
        staged = key[1] == "staging"
        body.append(_link(rows, key) + [name, str(key[3]), str(S.threads_of(g[0])), _runs(S.point(g)),
                                        time_range(S.point(g).value),
                                        time_range(S.point(g, "stage_s").value) if staged else "–",
                                        time_range(S.point(g, "total_s").value)])
    return md_table(lk + ["series", "processes", "threads/rank", "ok/failed", "read (elapsed)", "stage copy",
                     "total"], body)


def _threads(rows: list[dict]) -> list[str]:
    lk = ["link"] if len(S.links(rows)) > 1 else []
    body = [_link(rows, k) + [label(k[1]), str(k[2]), _runs(S.point(g)), time_range(S.point(g).value)]
            for k, g in _keyed(rows, "method", "threads").items()]
    return md_table(lk + ["method", "threads", "ok/failed", "time"], body)


def _strategies(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "method", "strategy").items():
        wire, need = S.median_of(g, "bytes_wire"), S.median_of(g, "bytes_needed")
        req = S.median_of(g, "requests")
        body.append(_link(rows, k) + [label(k[1]), str(k[2]), _runs(S.point(g)), _count(req),
                                      _bytes(wire), _bytes(need), f"{wire / need:.3f}" if wire and need else "–",
                                      time_range(S.point(g).value)])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return md_table(lk + ["method", "strategy", "ok/failed", "requests", "wire bytes", "needed bytes",
                     "amplification (wire/needed)", "time"], body)


def _libraries(rows: list[dict]) -> list[str]:
    body, notes = [], []
    for k, g in _keyed(rows, "library", "chunk_bytes").items():
        cells = []
        for cache in ("fresh", "cached"):
            cg = [r for r in g if r["params"].get("cache") == cache]
            usable = [r for r in cg if r["params"].get("cache_result") != "fresh-unavailable"]
            if len(usable) < len(cg):  # the cache could not be dropped: those runs were not fresh
                why = next(r["params"].get("cache_reason") for r in cg if r not in usable) or "no reason recorded"
                pt = S.point([r for r in cg if r not in usable])
                notes.append(f"- {S.tool_label(g)}, {format_bytes(k[2])} chunks: fresh unavailable ({why}); "
                             f"those {len(cg) - len(usable)} runs read a warm cache: {time_range(pt.value)}.")
            cells.append(f"{time_range(S.point(usable).value)} [{_runs(S.point(usable))}]" if usable
                         else ("unavailable (see below)" if cg else "not run"))
        body.append(_link(rows, k) + [S.tool_label(g), format_bytes(k[2]), _bytes(S.median_of(g, "bytes_needed"))]
                    + cells)
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return md_table(lk + ["library", "chunk size", "download size", "fresh [ok/failed]", "cached [ok/failed]"],
               body) + (notes + [""] if notes else [])


def _order(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "method", "strategy", "order").items():
        pt, req = S.point(g), S.median_of(g, "requests")
        ok = [r["elapsed_s"] for r in g if r["status"] == "ok" and r.get("elapsed_s") is not None]
        body.append(_link(rows, k) + [label(k[1]), str(k[2]), str(k[3]), _runs(pt),
                                      _count(req), time_range(pt.value),
                                      s(sum(ok) / len(ok)) if ok else "missing"])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return md_table(lk + ["method", "strategy", "order", "ok/failed", "requests", "time", "mean"], body)


def _layout(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "layout", "access", "method").items():
        req = S.median_of(g, "requests")
        body.append(_link(rows, k) + [str(k[1]), str(k[2]), label(k[3]), str(S.ranks_of(g[0])), _runs(S.point(g)),
                                      _count(req), _bytes(S.median_of(g, "bytes_wire")),
                                      time_range(S.point(g).value)])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return md_table(lk + ["layout", "access", "method", "processes", "ok/failed", "requests", "wire bytes", "time"],
                    body)


def _stability(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "method").items():
        bad = sum(r["status"] != "ok" for r in g)
        rt = [r["runtime_s"] for r in g if r["status"] == "ok"]
        faults: dict = {}
        for r in g:
            for kind, n in (r.get("faults") or {}).items():
                faults[kind] = faults.get(kind, 0) + n
        body.append(_link(rows, k) + [label(k[1]), str(len(g)), str(bad), f"{100 * bad / len(g):.1f}",
                                      s(sum(rt) / len(rt)) if rt else "–", s(max(rt)) if rt else "–",
                                      s(min(rt)) if rt else "–", str(sum(r.get("retries") or 0 for r in g)),
                                      ", ".join(f"{k2} {n}" for k2, n in sorted(faults.items())) or "none"])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return md_table(lk + ["method", "attempts", "failed", "%", "avg(runtime), ok", "max(runtime), ok",
                     "min(runtime), ok", "retries", "faults"], body)


TABLES = {"processes": ("Processes (seed 001 Figs. 1, 2, 3, 7)", _processes),
          "threads": ("Threads (seed 001 Fig. 6)", _threads),
          "strategies": ("Strategies (seed 001 Table 7.4)", _strategies),
          "libraries": ("Libraries (seed 001 Table 7.2)", _libraries),
          "order": ("Order (seed 000 F–I)", _order),
          "layout": ("Layout (seed 000 E, J, K)", _layout),
          "stability": ("Stability (seed 000 A–D)", _stability)}
FAILED_LISTED = 20  # a long stability study can fail hundreds of times; the table above counts them


def failure_line(stderr_head: str) -> str:
    """The line of a failed run's stderr that says what went wrong: ingest's own error line if there
    is one (mpiexec appends its banner after it), else the last line that is not a rule."""
    lines = [ln.strip() for ln in stderr_head.splitlines() if ln.strip() and set(ln.strip()) != {"-"}]
    errors = [ln for ln in lines if ln.startswith(("ingest", "study:")) and "error" in ln.lower()]
    return (errors or lines or ["–"])[0 if errors else -1]


def tables_markdown(rows: list[dict], config: dict | None) -> list[str]:
    out = []
    for experiment, (title, make) in TABLES.items():
        mine = [r for r in rows if r["experiment"] == experiment]
        out += [f"### {title}", ""]
        if not mine:
            out += [f"Not measured: {S.experiment_absence(experiment, rows, config)}.", ""]
            continue
        out += make(mine)
    bad = [r for r in rows if r["status"] != "ok"]
    out += ["### Failed and timed-out runs", ""]
    if not bad:
        return out + ["None.", ""]
    body = [[r["cell"], str(r["repeat"]), r["status"], _count(r.get("exit_status")), s(r["runtime_s"]),
             failure_line(r.get("stderr_head") or "").replace("|", "\\|")[:160]] for r in bad[:FAILED_LISTED]]
    more = [f"... and {len(bad) - FAILED_LISTED} more (all in {db.DB_NAME}).", ""] if len(bad) > FAILED_LISTED else []
    return out + md_table(["cell", "repeat", "status", "exit status", "runtime", "error"], body) + more
