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
from ingest.study import db, physics, summary as S
from ingest.study.tables import tables_markdown
from ingest.study.text import label, s, time_range

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


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b > 0 else "∞×"


# -- header -----------------------------------------------------------------------------------

def _tool_text(tool: dict) -> str:
    """A staging tool as the study's meta records it: {name, version, stage_with}."""
    return f"{tool.get('name')} {tool.get('version') or ''}".strip()


def header(rows: list[dict], meta: dict) -> list[str]:
    cube = meta.get("cube") or {}
    cube_text = ", ".join(f"{k} {cube[k]}" for k in ("shape", "dtype", "object_bytes", "source") if k in cube)
    # Where the ranks ran: their nodes as the reports name them (a cluster's), else the study's host.
    hosts = sorted({h for r in rows for h in (r.get("nodes") or [r.get("host")]) if h}, key=_natural)
    statuses = {st: sum(r["status"] == st for r in rows) for st in db.STATUSES}
    cells = S.groups(rows, lambda r: r["cell"])
    all_ok = sum(all(r["status"] == "ok" for r in c) for c in cells.values())
    none_ok = sum(not any(r["status"] == "ok" for r in c) for c in cells.values())
    tools = ", ".join(_tool_text(t) for t in meta.get("staging_tools") or [])
    lines = [
        f"- cube: {cube_text or 'not recorded'}",
        f"- launcher: `{meta.get('launcher', 'not recorded')}`",
        *([f"- topology: {S.cluster_text(meta)}"] if S.cluster_text(meta) else []),
        f"- hosts: study on {meta.get('host', 'not recorded')}; runs on "
        f"{f'{len(hosts)} nodes: ' if len(hosts) > 1 else ''}{', '.join(hosts) or 'none'}",
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


def _natural(name: str) -> tuple:
    """n2 before n10: digit runs compared as numbers."""
    import re

    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


# -- recommendation ---------------------------------------------------------------------------

def rec_method(m: dict, where: str = "") -> str:
    if not m["ranks"]:
        return f"**Method:** no direct (presigned or s3) `processes` run is recorded{where}; no method is named."
    med, p = m["medians_s"], m["largest_p"]
    if m.get("no_difference"):
        a, b = (m["spreads"][x][p] for x in S.DIRECT_METHODS)
        text = (f"**Method: no difference.** At p = {p} (the largest process count) {label(S.DIRECT_METHODS[0])} "
                f"took {time_range(a)} and {label(S.DIRECT_METHODS[1])} {time_range(b)} over their repeats: within "
                f"{S.TOLERANCE:.0%} of each other or overlapping, neither is faster by more than runs scatter; use "
                "either.")
    elif m["winner"] is None:
        gone = ", ".join(m["missing"].get(p, [])) or "one method"
        text = (f"**Method:** at the largest process count, p = {p}, {gone} has no ok run, so no method is named "
                "from it.")
    else:
        w, lose = m["winner"], [x for x in S.DIRECT_METHODS if x != m["winner"]][0]
        text = (f"**Method: {label(w)}.** At p = {p} (the largest process count) its median ingest took "
                f"{s(med[w][p])} against {s(med[lose][p])} for {label(lose)}, {m['ratio']:.2f}× faster.")
    wins = "; ".join(f"{label(x)} at p = {', '.join(map(str, ps))}" for x, ps in m["wins"].items() if ps)
    if wins:
        text += f" Across counts the faster was {wins}."
    if m.get("no_difference_p"):
        text += f" No difference (within the runs' spread) at p = {', '.join(map(str, m['no_difference_p']))}."
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
            parts.append(f"{label(method)}: no ok run at any thread count")
            continue
        text = (f"**{_n_threads(k['knee_t'])} per rank** for {label(method)}: the fewest within "
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
    others = ", ".join(f"{k[1]} ({label(k[0])}) {s(v)} ({_ratio(v, best)})" for k, v in
                       sorted(st["medians_s"].items(), key=lambda kv: kv[1]) if k != st["best"])
    return (f"**Strategy: {name}** ({label(method)}), fastest median {s(best)}"
            + (f"; the others: {others}." if others else "."))


def rec_crossover(c: dict) -> str:
    if not c["compared"]:
        why = "; ".join(f"p = {p}: {w}" for p, w in c["missing"].items()) or "no `processes` runs"
        return f"**Direct vs staging:** no process count has both a staging total and a direct run ({why})."
    per = c["per_p"]
    big = per[c["largest_p"]]
    at_big = (f"At the largest compared count, p = {c['largest_p']}, staging ({big['tool']}, copy + read) took "
              f"{s(big['staging_s'])} against {s(big['direct_s'])} for {label(big['method'])}: staging takes "
              f"{c['ratio_at_largest']:.2f}× the direct time.")
    if c["from_p"] is None:
        text = f"**Staging still wins** at the largest compared count. {at_big}"
    elif c["from_p"] == c["compared"][0]:
        text = f"**Direct ingest beats staging at every process count compared** (from p = {c['from_p']}). {at_big}"
    else:
        last = per[c["last_staging_win_p"]]
        text = (f"**Direct ingest beats staging from p = {c['from_p']} processes** (and at every count above); at "
                f"p = {c['last_staging_win_p']} staging ({last['tool']}) still won, {s(last['staging_s'])} against "
                f"{s(last['direct_s'])} for {label(last['method'])}. {at_big}")
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
    lines += physics.limits_section(rows, meta)
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
