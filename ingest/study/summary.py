"""The study-report's numbers, pure: rows of DIR/study.sqlite -> medians, spreads, the series of
each figure and the recommendation's numbers. No I/O, no plotting, no markdown (report.py
renders, analysis/study_figures.py draws), so each number can be tested on rows built by hand.

Only status 'ok' rows enter a median; failed and timed-out rows are counted beside it, never
averaged in and never read as zero. A point with no ok row has no value (None), and whoever
shows it says it is missing.

One module: every number of the study report is computed from the same row helpers (of, groups,
point, spread, ranks_of), and report.py reads them as one namespace; split by figure, each part
would import all the helpers and the report every part.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

DIRECT_METHODS = ("presigned", "s3")
# What carried each method's requests (native libcurl, urllib3, boto3) is the study header's
# "request engines" line, from the runs' reports: a label must not claim one.
METHOD_LABELS = {"presigned": "presigned URL", "s3": "S3 API"}
# "Within 10%": repeats on a shared machine or store spread by about that much, so a smaller
# difference is not evidence (the thread knee, and whether tiling pays for its extra copy).
TOLERANCE = 0.10

# figure id -> (seed 001 figure number, what it shows); the report and the drawing share these
FIGURES = {
    "fig1": ("Fig. 1", "staging: read time from the staged copy vs processes"),
    "fig2": ("Fig. 2", "S3 API ingest time vs processes"),
    "fig3": ("Fig. 3", "staging (copy + read, fastest tool) vs S3 API"),
    "fig6": ("Fig. 6", "ingest time vs threads, one process"),
    "fig7": ("Fig. 7", "staging (copy + read, fastest tool) vs presigned URL"),
}


@dataclass(frozen=True)
class Spread:
    """Median and range of some ok repeats (in the unit of the column they came from)."""
    n: int
    median: float
    low: float
    high: float


def spread(values) -> Spread | None:
    """Median, min and max of the values that exist; None when none does (missing, not zero)."""
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return None
    return Spread(len(vals), statistics.median(vals), vals[0], vals[-1])


@dataclass(frozen=True)
class Point:
    """One cell's repeats: how many ended ok / failed / timed out, and the spread of the ok ones."""
    ok: int
    failed: int  # failed + timeout: both are runs that produced no measurement
    timeout: int
    value: Spread | None


def point(rows: list[dict], column: str = "elapsed_s") -> Point:
    good = [r for r in rows if r["status"] == "ok"]
    return Point(len(good), len(rows) - len(good), sum(r["status"] == "timeout" for r in rows),
                 spread(r.get(column) for r in good))


def median_of(rows: list[dict], column: str) -> float | None:
    s = spread(r.get(column) for r in rows if r["status"] == "ok")
    return s.median if s else None


def link_of(row: dict) -> str:
    return row.get("link") or row["params"].get("link") or "loopback"


def links(rows: list[dict]) -> list[str]:
    return sorted({link_of(r) for r in rows})


def of(rows: list[dict], experiment: str, **params) -> list[dict]:
    """Rows of one experiment whose params match every given key."""
    return [r for r in rows if r["experiment"] == experiment
            and all(r["params"].get(k) == v for k, v in params.items())]


def groups(rows: list[dict], key) -> dict:
    """key(row) -> rows, keys in first-seen order (schedule order)."""
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def ranks_of(row: dict) -> int:
    return int(row.get("ranks") or row["params"].get("ranks") or 1)


def threads_of(row: dict) -> int:
    return int(row.get("threads") or row["params"].get("threads") or 1)


def tool_label(rows: list[dict]) -> str:
    """A staging tool's name and version as the runs recorded it (`s5cmd v2.3.0`); a tool whose
    every run failed has no recorded version, so its configured name stands in."""
    for r in rows:
        if r.get("tool"):
            return r["tool"]
    return str(rows[0]["params"].get("stage_with", "staging"))


@dataclass
class Series:
    """One line of a figure: x (processes or threads) -> Point; notes name per-x details (which
    staging tool was the fastest there)."""
    label: str
    kind: str  # direct | staging: line style
    points: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)

    def has_data(self) -> bool:
        return any(p.value for p in self.points.values())


def _suffix(link: str, all_links: list[str]) -> str:
    return f" @ {link}" if len(all_links) > 1 else ""


def direct_series(rows: list[dict], method: str, experiment: str = "processes", x=ranks_of) -> list[Series]:
    """One series per link: the method's time (elapsed_s) against x."""
    picked = of(rows, experiment, method=method)
    all_links = links(picked)
    out = []
    for link, lrows in groups(picked, link_of).items():
        s = Series(METHOD_LABELS.get(method, method) + _suffix(link, all_links), "direct")
        for xv, xrows in sorted(groups(lrows, x).items()):
            s.points[xv] = point(xrows, "elapsed_s")
        out.append(s)
    return out


def staging_read_series(rows: list[dict]) -> list[Series]:
    """Fig. 1: read time from the staged copy, one series per (tool, link)."""
    picked = of(rows, "processes", method="staging")
    all_links = links(picked)
    out = []
    for (tool, link), trows in groups(picked, lambda r: (r["params"].get("stage_with"), link_of(r))).items():
        s = Series(f"staging read: {tool_label(trows)}" + _suffix(link, all_links), "staging")
        for p, prows in sorted(groups(trows, ranks_of).items()):
            s.points[p] = point(prows, "elapsed_s")
        out.append(s)
    return out


def fastest_staging(rows: list[dict]) -> dict:
    """link -> p -> (tool label, Point of total_s): at each p the tool with the lowest median
    stage + read total. A p where no tool has an ok run keeps the counts with no value."""
    out: dict = {}
    for link, lrows in groups(of(rows, "processes", method="staging"), link_of).items():
        by_tool = groups(lrows, lambda r: r["params"].get("stage_with"))
        labels = {t: tool_label(trs) for t, trs in by_tool.items()}
        per_p: dict = {}
        for p in sorted({ranks_of(r) for r in lrows}):
            cands = [(labels[t], point([r for r in trs if ranks_of(r) == p], "total_s")) for t, trs in by_tool.items()]
            cands = [(t, pt) for t, pt in cands if pt.ok + pt.failed]
            measured = [(t, pt) for t, pt in cands if pt.value]
            if measured:
                per_p[p] = min(measured, key=lambda c: c[1].value.median)
            else:  # every tool failed here: counted, no value
                per_p[p] = ("no tool", Point(0, sum(pt.failed for _, pt in cands),
                                             sum(pt.timeout for _, pt in cands), None))
        out[link] = per_p
    return out


def staging_total_series(rows: list[dict]) -> list[Series]:
    """Figs. 3 and 7: the fastest tool's copy + read total at each p, one series per link."""
    fast = fastest_staging(rows)
    all_links = sorted(fast)
    out = []
    for link, per_p in fast.items():
        tools = {t for t, pt in per_p.values() if pt.value}
        name = next(iter(tools)) if len(tools) == 1 else "fastest tool"
        s = Series(f"staging total: {name} copy + read" + _suffix(link, all_links), "staging")
        for p, (tool, pt) in per_p.items():
            s.points[p] = pt
            if len(tools) > 1 and pt.value:
                s.notes[p] = tool
        out.append(s)
    return out


def figure_series(fig: str, rows: list[dict]) -> list[Series]:
    """The series a figure draws (possibly none with data: then it is not drawn)."""
    if fig == "fig1":
        return staging_read_series(rows)
    if fig == "fig2":
        return direct_series(rows, "s3")
    if fig in ("fig3", "fig7"):
        staging = staging_total_series(rows)
        direct = direct_series(rows, "s3" if fig == "fig3" else "presigned")
        # a comparison with one side unmeasured is no comparison: not drawn (figure_absence says why)
        if not (any(s.has_data() for s in staging) and any(s.has_data() for s in direct)):
            return []
        return staging + direct
    if fig == "fig6":
        return [s for m in DIRECT_METHODS for s in direct_series(rows, m, "threads", threads_of)]
    raise ValueError(f"unknown figure {fig!r}")


@dataclass
class LimitLine:
    """A figure's physical limit (ingest.testbed.cluster.limits): x -> seconds, x -> binding term."""
    label: str
    seconds: dict = field(default_factory=dict)
    binding: dict = field(default_factory=dict)


def row_limit(row: dict, spec, source: str):
    """One run's limit from what its links carried (its link_bytes, recorded on the cluster), or
    None when it has none: source "store" (a direct read), "fs" (the staged read), "copy" (the
    staging copy) or "staging" (copy + read)."""
    from ingest.testbed.cluster.limits import Limit, carried_limit

    carried = row.get("link_bytes") or {}
    if source in ("store", "fs"):
        return carried_limit(carried["read"], spec, "direct" if source == "store" else "staged") \
            if "read" in carried else None
    if "copy" not in carried or (source == "staging" and "read" not in carried):
        return None
    copy = carried_limit(carried["copy"], spec, "copy")
    if source == "copy":
        return copy
    read = carried_limit(carried["read"], spec, "staged")
    return Limit(copy.seconds + read.seconds, copy.binding if copy.seconds >= read.seconds else read.binding,
                 {"copy": copy.seconds, "read": read.seconds})


def limit_line(label: str, rows: list[dict], spec, source: str, x, object_bytes=None) -> LimitLine:
    """At each x the median of the ok runs' limits from what their links carried; where a run
    recorded none (a study before link_bytes), from the median wire bytes (the bytes asked)."""
    from ingest.testbed.cluster.limits import spec_limit

    line = LimitLine(label)
    for xv, xrows in sorted(groups(rows, x).items()):
        ok = [r for r in xrows if r["status"] == "ok"]
        carried = [lim for r in ok if (lim := row_limit(r, spec, source)) is not None]
        if ok and len(carried) == len(ok):
            carried.sort(key=lambda lim: lim.seconds)
            middle = carried[(len(carried) - 1) // 2]
            line.seconds[xv] = statistics.median(lim.seconds for lim in carried)
            line.binding[xv] = middle.binding
            continue
        wire = median_of(xrows, "bytes_wire") or median_of(xrows, "bytes_needed")
        if wire is None or source == "copy":
            continue
        lim = spec_limit(spec, wire, ranks_of(xrows[0]), source=source, object_bytes=object_bytes)
        line.seconds[xv], line.binding[xv] = lim.seconds, lim.binding
    return line


def limit_lines(fig: str, rows: list[dict], meta: dict | None) -> list[LimitLine]:
    """The physical limit of each of a figure's series, for a study run on the emulated cluster
    (meta "cluster": its spec); [] elsewhere. Bytes: what each link carried (row_limit)."""
    if not (meta or {}).get("cluster"):
        return []
    from ingest.testbed.cluster.limits import spec_from_record

    spec = spec_from_record(meta["cluster"])
    object_bytes = (meta.get("cube") or {}).get("object_bytes")
    staged = of(rows, "processes", method="staging")
    if fig == "fig1":
        return [limit_line("limit: staged read (fs or node NIC) + latency", staged, spec, "fs", ranks_of)]
    if fig == "fig2":
        return [limit_line("limit: S3 read (store egress or node NIC) + latency", of(rows, "processes", method="s3"),
                            spec, "store", ranks_of)]
    if fig in ("fig3", "fig7"):
        method = "s3" if fig == "fig3" else "presigned"
        out = [limit_line(f"limit: direct {METHOD_LABELS[method]}", of(rows, "processes", method=method), spec,
                           "store", ranks_of)]
        if object_bytes:
            out.append(limit_line("limit: staging copy via node 0 + read", staged, spec, "staging", ranks_of,
                                   object_bytes))
        return out
    if fig == "fig6":
        return [limit_line("limit: one process (node NIC) + latency",
                            [r for r in rows if r["experiment"] == "threads"], spec, "store", threads_of)]
    raise ValueError(f"unknown figure {fig!r}")


def cluster_text(meta: dict | None) -> str | None:
    """STUDY.md's line on the emulated cluster's topology and rates, or None."""
    c = (meta or {}).get("cluster")
    if not c:
        return None
    mb = 1e6
    return (f"emulated cluster (ingest.testbed.cluster): {c['nodes']} nodes x {c['ranks_per_node']} slots; "
            f"each node's NIC {c['node']['nic_rate_bytes_per_s'] / mb:g} MB/s each way (store and filesystem "
            f"traffic; MPI uncapped); the store's egress {c['store']['egress_rate_bytes_per_s'] / mb:g} MB/s shared "
            f"by every node, +{c['store']['latency_s'] * 1000:g} ms per reply (Toxiproxy); the shared filesystem "
            f"(sshfs) {c['fs']['rate_bytes_per_s'] / mb:g} MB/s each way, +{c['fs']['latency_s'] * 1000:g} ms per "
            "reply. Rates are of IP bytes (tc HTB). Limit lines: the bytes each capped link carried during the "
            "phase (its counter) over its rate, the largest + one latency (ingest/testbed/cluster/limits.py; "
            "runs recorded without counters: the wire bytes over the binding pipe); staging adds the copy "
            "through node 0 (store -> NIC -> filesystem)")


# figure -> (experiment, processes methods it needs)
_NEEDS = {"fig1": ("processes", ("staging",)), "fig2": ("processes", ("s3",)),
          "fig3": ("processes", ("staging", "s3")), "fig6": ("threads", ()),
          "fig7": ("processes", ("staging", "presigned"))}


def experiment_absence(experiment: str, rows: list[dict], config: dict | None) -> str | None:
    """Why an experiment has nothing to show, or None when it has ok rows."""
    mine = [r for r in rows if r["experiment"] == experiment]
    if any(r["status"] == "ok" for r in mine):
        return None
    if config is not None and experiment not in config:
        return f"experiment `{experiment}` was not in the study config"
    if not mine:
        return f"experiment `{experiment}` was in the config but no run of it is recorded (study stopped early?)"
    return f"experiment `{experiment}`: all {len(mine)} runs failed or timed out, none measured"


def figure_absence(fig: str, rows: list[dict], config: dict | None) -> str | None:
    """Why a figure is not drawn (None: it is)."""
    experiment, methods = _NEEDS[fig]
    why = experiment_absence(experiment, rows, config)
    if why:
        return why
    table = (config or {}).get(experiment) or {}
    for m in methods:
        mine = of(rows, experiment, method=m)
        if any(r["status"] == "ok" for r in mine):
            continue
        if "methods" in table and m not in table["methods"]:
            return f"`{experiment}.methods` did not include `{m}`"
        if not mine:
            return f"no `{experiment}` run with method `{m}` is recorded"
        return f"all {len(mine)} `{experiment}` runs with method `{m}` failed or timed out"
    return None


# -- the recommendation's numbers (on the rows of one link) --------------------------------

def medians_by_ranks(rows: list[dict], column: str = "elapsed_s") -> dict:
    """ranks -> median of the ok rows (ranks with no ok row left out)."""
    out = {}
    for p, prows in groups(rows, ranks_of).items():
        m = median_of(prows, column)
        if m is not None:
            out[p] = m
    return dict(sorted(out.items()))


def apart(a: Spread | None, b: Spread | None) -> bool:
    """Do two cells differ by more than their runs' spread? Their repeats' min-max ranges do not
    overlap, and their medians are more than TOLERANCE apart: two or three repeats in one study
    can agree more closely than studies repeated on a shared machine do (where S3 and presigned
    sat on the same pipe, their medians came 0.5 % apart with ranges that did not touch)."""
    if a is None or b is None:
        return False
    if abs(a.median - b.median) <= TOLERANCE * min(a.median, b.median):
        return False
    return a.n < 2 or b.n < 2 or a.high < b.low or b.high < a.low


def method_choice(rows: list[dict]) -> dict:
    """presigned vs s3 in `processes`: medians per p, the winner at the largest p and per p. No
    winner ("no_difference") where the two are within their runs' spread (not `apart`): a median
    lower by less than the repeats scatter would name one method one day and the other the next."""
    spreads = {m: {p: pt.value for p, prows in groups(of(rows, "processes", method=m), ranks_of).items()
                   if (pt := point(prows)).value} for m in DIRECT_METHODS}
    med = {m: {p: sp.median for p, sp in sorted(spreads[m].items())} for m in DIRECT_METHODS}
    all_p = sorted({ranks_of(r) for r in rows if r["experiment"] == "processes" and r["params"].get("method")
                    in DIRECT_METHODS})
    both = [p for p in all_p if all(p in med[m] for m in DIRECT_METHODS)]
    same = [p for p in both if not apart(*(spreads[m][p] for m in DIRECT_METHODS))]
    out = {"medians_s": med, "spreads": spreads, "ranks": all_p, "compared": both, "no_difference_p": same,
           "missing": {p: [m for m in DIRECT_METHODS if p not in med[m]] for p in all_p if p not in both},
           "largest_p": all_p[-1] if all_p else None, "winner": None, "ratio": None, "no_difference": False,
           "wins": {m: [p for p in both if p not in same and med[m][p] == min(med[n][p] for n in DIRECT_METHODS)]
                    for m in DIRECT_METHODS}}
    if all_p and all_p[-1] in both:
        p = all_p[-1]
        winner = min(DIRECT_METHODS, key=lambda m: med[m][p])
        loser = max(DIRECT_METHODS, key=lambda m: med[m][p])
        out["ratio"] = med[loser][p] / med[winner][p] if med[winner][p] > 0 else None
        if p in same:
            out["no_difference"] = True
        else:
            out["winner"] = winner
    return out


def thread_knee(rows: list[dict]) -> dict:
    """method -> the best thread count and the knee: fewest threads within TOLERANCE of the best."""
    out = {}
    for method, mrows in groups(of(rows, "threads"), lambda r: r["params"].get("method")).items():
        med = {t: m for t, trows in sorted(groups(mrows, threads_of).items())
               if (m := median_of(trows, "elapsed_s")) is not None}
        missing = sorted({threads_of(r) for r in mrows} - set(med))
        if not med:
            out[method] = {"medians_s": {}, "missing": missing}
            continue
        best_t = min(med, key=med.get)
        knee_t = min(t for t, m in med.items() if m <= med[best_t] * (1 + TOLERANCE))
        out[method] = {"medians_s": med, "missing": missing, "best_t": best_t, "best_s": med[best_t],
                       "knee_t": knee_t, "knee_s": med[knee_t]}
    return out


def fastest_strategy(rows: list[dict]) -> dict | None:
    """The (method, strategy) with the lowest median time, and every other's median."""
    med = {k: m for k, krows in groups(of(rows, "strategies"),
                                       lambda r: (r["params"].get("method"), r["params"].get("strategy"))).items()
           if (m := median_of(krows, "elapsed_s")) is not None}
    if not med:
        return None
    best = min(med, key=med.get)
    return {"best": best, "best_s": med[best], "medians_s": med}


def crossover(rows: list[dict]) -> dict:
    """From which p direct ingest (the faster of presigned and s3 there) beats staging (copy +
    read with the fastest tool there): the smallest measured p from which direct wins at every
    measured p above it; None if staging still wins at the largest compared p."""
    fast = {p: (tool, pt.value.median) for per_p in fastest_staging(rows).values()
            for p, (tool, pt) in per_p.items() if pt.value}
    direct: dict = {}
    for m in DIRECT_METHODS:
        for p, s in medians_by_ranks(of(rows, "processes", method=m)).items():
            if p not in direct or s < direct[p][1]:
                direct[p] = (m, s)
    all_p = sorted({ranks_of(r) for r in of(rows, "processes")})
    compared = [p for p in all_p if p in fast and p in direct]
    missing = {p: " and ".join(why for why, gone in (("no ok staging run", p not in fast),
                                                      ("no ok direct run", p not in direct)) if gone)
               for p in all_p if p not in compared}
    per_p = {p: {"staging_s": fast[p][1], "tool": fast[p][0], "direct_s": direct[p][1], "method": direct[p][0],
                 "direct_wins": direct[p][1] < fast[p][1]} for p in compared}
    from_p = None
    for p in reversed(compared):
        if not per_p[p]["direct_wins"]:
            break
        from_p = p
    below = [p for p in compared if from_p is not None and p < from_p]
    largest = compared[-1] if compared else None
    ratio = (per_p[largest]["staging_s"] / per_p[largest]["direct_s"]
             if largest is not None and per_p[largest]["direct_s"] > 0 else None)
    return {"per_p": per_p, "ranks": all_p, "compared": compared, "missing": missing, "from_p": from_p,
            "last_staging_win_p": below[-1] if below else None,
            # a p left out between the last staging win and from_p: the switch could lie there
            "gap_missing": [p for p in missing if below and below[-1] < p < from_p],
            "largest_p": largest, "ratio_at_largest": ratio}


def layout_gain(rows: list[dict]) -> dict:
    """access -> ranged and tiled medians and ranged/tiled (> 1: per-box objects are faster)."""
    out = {}
    for access, arows in groups(of(rows, "layout"), lambda r: r["params"].get("access")).items():
        med = {lay: median_of([r for r in arows if r["params"].get("layout") == lay], "elapsed_s")
               for lay in ("ranged", "tiled")}
        ratio = med["ranged"] / med["tiled"] if None not in med.values() and med["tiled"] > 0 else None
        out[access] = {"ranged_s": med["ranged"], "tiled_s": med["tiled"], "ratio": ratio,
                       "pays": ratio is not None and ratio >= 1 + TOLERANCE}
    return out


def recommendation(rows: list[dict]) -> dict:
    """Every number the Recommendation section states, for the rows of one link profile."""
    return {"method": method_choice(rows), "threads": thread_knee(rows), "strategy": fastest_strategy(rows),
            "crossover": crossover(rows), "layout": layout_gain(rows)}
