"""`python -m ingest study-report DIR`: DIR/STUDY.md and DIR/figures/*.png from DIR/study.sqlite alone.

Never from live runs: a study can be re-rendered (or rendered half-way) from its database.
Numbers come from ingest.study.summary, figures from analysis/study_figures.py (loaded by path:
analysis/ is a folder of scripts, not a package); this module writes the words and tables.
"""
from __future__ import annotations

import importlib.util
import json
import os

from ingest.errors import IngestError
from ingest.study import db, summary as S
from ingest.units import format_bytes

FIGURES_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "analysis", "study_figures.py")
REPORT_NAME = "STUDY.md"
TABLE_EXPERIMENTS = ("processes", "threads", "strategies", "libraries", "order", "layout", "stability")


def load_figures_module():
    """analysis/study_figures.py of this checkout; a clear error when it or matplotlib is missing."""
    if not os.path.exists(FIGURES_PY):
        raise IngestError(f"study-report: the figures need {FIGURES_PY} (analysis/ of a source checkout, "
                          "installed with `pip install -e .`); use --no-figures for STUDY.md alone")
    spec = importlib.util.spec_from_file_location("ingest_analysis_study_figures", FIGURES_PY)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        raise IngestError(f"study-report: {FIGURES_PY} needs {exc.name} (pip install matplotlib); "
                          "use --no-figures for STUDY.md alone") from None
    return module


def s(x: float | None) -> str:
    """Seconds, precise enough for a 2 ms loopback run and a 9771 s staging copy alike."""
    if x is None:
        return "missing"
    return f"{x:.0f} s" if abs(x) >= 100 else f"{x:.2f} s" if abs(x) >= 1 else f"{x:#.3g} s"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b > 0 else "∞×"


def _label(method: str) -> str:
    return S.METHOD_LABELS.get(method, method)


# -- header -----------------------------------------------------------------------------------

def _tool_text(tool: dict) -> str:
    """A staging tool as the study's meta records it: {name, version, stage_with}."""
    return f"{tool.get('name')} {tool.get('version') or ''}".strip()


def header(rows: list[dict], meta: dict) -> list[str]:
    cube = meta.get("cube") or {}
    cube_text = ", ".join(f"{k} {cube[k]}" for k in ("shape", "dtype", "object_bytes", "source") if k in cube)
    hosts = sorted({r["host"] for r in rows if r.get("host")})
    statuses = {st: sum(r["status"] == st for r in rows) for st in db.STATUSES}
    cells = S.groups(rows, lambda r: r["cell"])
    all_ok = sum(all(r["status"] == "ok" for r in c) for c in cells.values())
    none_ok = sum(not any(r["status"] == "ok" for r in c) for c in cells.values())
    tools = ", ".join(_tool_text(t) for t in meta.get("staging_tools") or [])
    lines = [
        f"- cube: {cube_text or 'not recorded'}",
        f"- launcher: `{meta.get('launcher', 'not recorded')}`",
        *([f"- topology: {S.cluster_text(meta)}"] if S.cluster_text(meta) else []),
        f"- hosts: study on {meta.get('host', 'not recorded')}; runs on {', '.join(hosts) or 'none'}",
        f"- dates (UTC): started {meta.get('started_utc', 'not recorded')}, finished "
        f"{meta.get('finished_utc') or 'not finished (a partial study: missing points are said missing)'}",
        f"- boxes: {json.dumps(meta['boxes'])}" if "boxes" in meta else "- boxes: not recorded",
        f"- staging tools: {tools or 'none recorded'}",
        "- request engines (engine = auto where the study ran): " + (", ".join(
            f"{m} on {e}" for m, e in (meta.get("engines") or {}).items()) or "not recorded"),
        f"- link profiles: {', '.join(S.links(rows)) or 'none'}",
        f"- runs: {len(rows)} ({statuses['ok']} ok, {statuses['failed']} failed, {statuses['timeout']} timed out); "
        f"cells: {len(cells)} ({all_ok} all repeats ok, {len(cells) - all_ok - none_ok} with some failed, "
        f"{none_ok} with none ok)",
        "", "<details><summary>study config</summary>", "", "```json",
        json.dumps(meta.get("config"), indent=2, sort_keys=True), "```", "", "</details>"]
    return lines


# -- recommendation ---------------------------------------------------------------------------

def rec_method(m: dict, where: str = "") -> str:
    if not m["ranks"]:
        return f"**Method:** no direct (presigned or s3) `processes` run is recorded{where}; no method is named."
    med, p = m["medians_s"], m["largest_p"]
    if m["winner"] is None:
        gone = ", ".join(m["missing"].get(p, [])) or "one method"
        text = (f"**Method:** at the largest process count, p = {p}, {gone} has no ok run, so no method is named "
                "from it.")
    else:
        w, lose = m["winner"], [x for x in S.DIRECT_METHODS if x != m["winner"]][0]
        text = (f"**Method: {_label(w)}.** At p = {p} (the largest process count) its median ingest took "
                f"{s(med[w][p])} against {s(med[lose][p])} for {_label(lose)}, {m['ratio']:.2f}× faster.")
    wins = "; ".join(f"{_label(x)} at p = {', '.join(map(str, ps))}" for x, ps in m["wins"].items() if ps)
    if wins:
        text += f" Across counts the faster was {wins}."
    if m["missing"]:
        text += " Not compared (no ok run): " + "; ".join(
            f"p = {p}: {', '.join(ms)}" for p, ms in m["missing"].items()) + "."
    return text


def rec_threads(t: dict, where: str = "") -> str:
    if not t:
        return f"**Threads per rank:** no `threads` run is recorded{where}."
    parts = []
    for method, k in t.items():
        if "knee_t" not in k:
            parts.append(f"{_label(method)}: no ok run at any thread count")
            continue
        text = (f"**{_n_threads(k['knee_t'])} per rank** for {_label(method)}: the fewest within "
                f"{S.TOLERANCE:.0%} of the best median ({_n_threads(k['best_t'])}, {s(k['best_s'])})")
        if k["knee_t"] != k["best_t"]:
            text += f"; {_n_threads(k['knee_t'])} took {s(k['knee_s'])}"
        if k["missing"]:
            text += f" (no ok run at {', '.join(map(str, k['missing']))} threads)"
        parts.append(text)
    return "; ".join(parts) + "."


def _n_threads(n: int) -> str:
    return f"{n} thread{'' if n == 1 else 's'}"


def rec_strategy(st: dict | None, where: str = "") -> str:
    if st is None:
        return f"**Strategy:** no ok `strategies` run is recorded{where}."
    (method, name), best = st["best"], st["best_s"]
    others = ", ".join(f"{k[1]} ({_label(k[0])}) {s(v)} ({_ratio(v, best)})" for k, v in
                       sorted(st["medians_s"].items(), key=lambda kv: kv[1]) if k != st["best"])
    return (f"**Strategy: {name}** ({_label(method)}), fastest median {s(best)}"
            + (f"; the others: {others}." if others else "."))


def rec_crossover(c: dict) -> str:
    if not c["compared"]:
        why = "; ".join(f"p = {p}: {w}" for p, w in c["missing"].items()) or "no `processes` runs"
        return f"**Direct vs staging:** no process count has both a staging total and a direct run ({why})."
    per = c["per_p"]
    big = per[c["largest_p"]]
    at_big = (f"At the largest compared count, p = {c['largest_p']}, staging ({big['tool']}, copy + read) took "
              f"{s(big['staging_s'])} against {s(big['direct_s'])} for {_label(big['method'])}: staging takes "
              f"{c['ratio_at_largest']:.2f}× the direct time.")
    if c["from_p"] is None:
        text = f"**Staging still wins** at the largest compared count. {at_big}"
    elif c["from_p"] == c["compared"][0]:
        text = f"**Direct ingest beats staging at every process count compared** (from p = {c['from_p']}). {at_big}"
    else:
        last = per[c["last_staging_win_p"]]
        text = (f"**Direct ingest beats staging from p = {c['from_p']} processes** (and at every count above); at "
                f"p = {c['last_staging_win_p']} staging ({last['tool']}) still won, {s(last['staging_s'])} against "
                f"{s(last['direct_s'])} for {_label(last['method'])}. {at_big}")
        if c["gap_missing"]:
            text += (f" p = {', '.join(map(str, c['gap_missing']))} in between has no comparison, so the switch "
                     f"lies somewhere in {c['last_staging_win_p'] + 1}..{c['from_p']}.")
    if c["missing"]:
        text += " Not compared: " + "; ".join(f"p = {p} ({w})" for p, w in c["missing"].items()) + "."
    return text


def rec_layout(lay: dict, where: str = "") -> str:
    if not lay:
        return f"**Per-box objects:** no `layout` run is recorded{where}."
    parts = []
    for access, g in lay.items():
        if g["ratio"] is None:
            gone = " and ".join(k for k in ("ranged", "tiled") if g[f"{k}_s"] is None)
            parts.append(f"{access}: {gone} has no ok run, not compared")
        elif g["pays"]:
            parts.append(f"{access}: tiled {s(g['tiled_s'])} vs ranged {s(g['ranged_s'])}, {g['ratio']:.2f}× "
                         f"faster: would pay, if the store can hold a tiled copy of the cube")
        else:
            verdict = (f"{1 / g['ratio']:.2f}× slower" if g["ratio"] < 1
                       else f"{g['ratio']:.2f}×, less than {S.TOLERANCE:.0%} faster")
            parts.append(f"{access}: tiled {s(g['tiled_s'])} vs ranged {s(g['ranged_s'])} (tiled {verdict}): "
                         "would not pay for the extra copy")
    return "**Per-box objects (tiled vs ranged):** " + "; ".join(parts) + "."


def recommendation(rows: list[dict]) -> list[str]:
    out = []
    all_links = S.links(rows)
    for link in all_links:
        mine = [r for r in rows if S.link_of(r) == link]
        if len(all_links) > 1:
            out += [f"### Link `{link}`", ""]
        r = S.recommendation(mine)
        # with several links an experiment may have run on one only: say "on this link", not "never"
        where = f" on link `{link}`" if len(all_links) > 1 else ""
        out += [f"- {rec_method(r['method'], where)}", f"- {rec_threads(r['threads'], where)}",
                f"- {rec_strategy(r['strategy'], where)}", f"- {rec_crossover(r['crossover'])}",
                f"- {rec_layout(r['layout'], where)}", ""]
    return out or ["No run is recorded yet; nothing to recommend.", ""]


# -- tables -----------------------------------------------------------------------------------

def _md(headers: list[str], body: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
            + ["| " + " | ".join(r) + " |" for r in body] + [""])


def _runs(pt: S.Point) -> str:
    return f"{pt.ok}/{pt.failed}" + (f" ({pt.timeout} timed out)" if pt.timeout else "")


def _time(sp: S.Spread | None) -> str:
    if sp is None:
        return "missing (no ok run)"
    return f"{s(sp.median)} ({s(sp.low)[:-2]}–{s(sp.high)})"


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
        name = f"staging: {S.tool_label(g)}" if key[1] == "staging" else _label(key[1])
        staged = key[1] == "staging"
        body.append(_link(rows, key) + [name, str(key[3]), str(S.threads_of(g[0])), _runs(S.point(g)),
                                        _time(S.point(g).value),
                                        _time(S.point(g, "stage_s").value) if staged else "–",
                                        _time(S.point(g, "total_s").value)])
    return _md(lk + ["series", "processes", "threads/rank", "ok/failed", "read (elapsed)", "stage copy",
                     "total"], body)


def _threads(rows: list[dict]) -> list[str]:
    lk = ["link"] if len(S.links(rows)) > 1 else []
    body = [_link(rows, k) + [_label(k[1]), str(k[2]), _runs(S.point(g)), _time(S.point(g).value)]
            for k, g in _keyed(rows, "method", "threads").items()]
    return _md(lk + ["method", "threads", "ok/failed", "time"], body)


def _strategies(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "method", "strategy").items():
        wire, need = S.median_of(g, "bytes_wire"), S.median_of(g, "bytes_needed")
        req = S.median_of(g, "requests")
        body.append(_link(rows, k) + [_label(k[1]), str(k[2]), _runs(S.point(g)), _count(req),
                                      _bytes(wire), _bytes(need), f"{wire / need:.3f}" if wire and need else "–",
                                      _time(S.point(g).value)])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return _md(lk + ["method", "strategy", "ok/failed", "requests", "wire bytes", "needed bytes",
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
                             f"those {len(cg) - len(usable)} runs read a warm cache: {_time(pt.value)}.")
            cells.append(f"{_time(S.point(usable).value)} [{_runs(S.point(usable))}]" if usable
                         else ("unavailable (see below)" if cg else "not run"))
        body.append(_link(rows, k) + [S.tool_label(g), format_bytes(k[2]), _bytes(S.median_of(g, "bytes_needed"))]
                    + cells)
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return _md(lk + ["library", "chunk size", "download size", "fresh [ok/failed]", "cached [ok/failed]"],
               body) + (notes + [""] if notes else [])


def _order(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "method", "strategy", "order").items():
        pt, req = S.point(g), S.median_of(g, "requests")
        ok = [r["elapsed_s"] for r in g if r["status"] == "ok" and r.get("elapsed_s") is not None]
        body.append(_link(rows, k) + [_label(k[1]), str(k[2]), str(k[3]), _runs(pt),
                                      _count(req), _time(pt.value),
                                      s(sum(ok) / len(ok)) if ok else "missing"])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return _md(lk + ["method", "strategy", "order", "ok/failed", "requests", "time", "mean"], body)


def _layout(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "layout", "access", "method").items():
        req = S.median_of(g, "requests")
        body.append(_link(rows, k) + [str(k[1]), str(k[2]), _label(k[3]), str(S.ranks_of(g[0])), _runs(S.point(g)),
                                      _count(req), _bytes(S.median_of(g, "bytes_wire")),
                                      _time(S.point(g).value)])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return _md(lk + ["layout", "access", "method", "processes", "ok/failed", "requests", "wire bytes", "time"], body)


def _stability(rows: list[dict]) -> list[str]:
    body = []
    for k, g in _keyed(rows, "method").items():
        bad = sum(r["status"] != "ok" for r in g)
        rt = [r["runtime_s"] for r in g if r["status"] == "ok"]
        faults: dict = {}
        for r in g:
            for kind, n in (r.get("faults") or {}).items():
                faults[kind] = faults.get(kind, 0) + n
        body.append(_link(rows, k) + [_label(k[1]), str(len(g)), str(bad), f"{100 * bad / len(g):.1f}",
                                      s(sum(rt) / len(rt)) if rt else "–", s(max(rt)) if rt else "–",
                                      s(min(rt)) if rt else "–", str(sum(r.get("retries") or 0 for r in g)),
                                      ", ".join(f"{k2} {n}" for k2, n in sorted(faults.items())) or "none"])
    lk = ["link"] if len(S.links(rows)) > 1 else []
    return _md(lk + ["method", "attempts", "failed", "%", "avg(runtime), ok", "max(runtime), ok",
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
    return out + _md(["cell", "repeat", "status", "exit status", "runtime", "error"], body) + more


# -- the document -----------------------------------------------------------------------------

def render(rows: list[dict], meta: dict, figures: dict | None) -> str:
    """STUDY.md's text. figures: id -> (paths, series) as study_figures.draw_all returns, or None."""
    config = meta.get("config")
    lines = ["# Object-store ingest study", "",
             f"Rendered by `python -m ingest study-report` from `{db.DB_NAME}` alone (every number below is a "
             "median of the ok repeats with min–max; failed and timed-out runs are counted, never averaged in).",
             "", "## Study", ""] + header(rows, meta) + [""]
    absent = [(e, why) for e in TABLE_EXPERIMENTS if (why := S.experiment_absence(e, rows, config))]
    lines += ["## Not measured", ""]
    lines += [f"- {why}." for _, why in absent] or ["- every experiment has ok runs."]
    lines += ["", "## Recommendation", ""] + recommendation(rows)
    lines += ["## Figures (seed 001)", ""]
    for fig_id, (number, what) in S.FIGURES.items():
        paths, series = (figures or {}).get(fig_id, ([], []))
        if paths:
            rel = os.path.join("figures", os.path.basename(paths[0]))
            lines += [f"**{number}**: {what}. Series: {', '.join(series)}.", "", f"![{number}: {what}]({rel})", ""]
        else:
            why = S.figure_absence(fig_id, rows, config) or ("figures not drawn (--no-figures)" if figures is None
                                                             else "no measured point")
            lines += [f"**{number}** ({what}) not drawn: {why}.", ""]
    lines += ["## Tables", ""] + tables_markdown(rows, config)
    return "\n".join(lines).rstrip() + "\n"


def render_study(study_dir: str, draw: bool = True) -> str:
    """Render DIR/STUDY.md (and DIR/figures/ unless draw is False); returns STUDY.md's path.
    `python -m ingest study` calls this when its matrix is done."""
    path = os.path.join(study_dir, db.DB_NAME)
    if not os.path.exists(path):  # db.load would create an empty database: refuse instead
        raise IngestError(f"study-report: {path}: no study database (run `python -m ingest study` first)")
    rows, meta = db.load(path)
    figures = load_figures_module().draw_all(rows, os.path.join(study_dir, "figures"), meta) if draw else None
    out = os.path.join(study_dir, REPORT_NAME)
    tmp = out + ".part"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(render(rows, meta, figures))
    os.replace(tmp, out)  # a reader never sees half a report
    return out
