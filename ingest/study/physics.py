"""A study on the emulated cluster against its physics: each phase's time over its limit from what
the links carried (summary.row_limit), Fig. 1's knee, and STUDY.md's section saying whether the
staging copy and the staged read came within LIMIT_RATIO_MAX of their limits, and if not which
tool was slower than its pipes and why."""
from __future__ import annotations

from ingest.study import links, summary as S
from ingest.study.text import md_table, s

# A phase that took more than this times its limit is slower than its pipes: STUDY.md says which
# tool and why (issue 46: the staging copy and the staged read within 1.15 of their limits).
LIMIT_RATIO_MAX = 1.15


def against_limits(rows: list[dict], meta: dict | None) -> list[dict]:
    """Each phase of the processes experiment against its limit from what the links carried, one
    record per (phase, p): phase "staging copy" (stage_s), "staged read" (elapsed_s) or a direct
    method's read; median measured, median limit, their ratio and the binding pipe. [] off a
    cluster, or where no run recorded its links."""
    if not (meta or {}).get("cluster"):
        return []
    from ingest.testbed.cluster.limits import spec_from_record

    spec = spec_from_record(meta["cluster"])
    phases = [("staging copy", "staging", "copy", "stage_s"), ("staged read", "staging", "fs", "elapsed_s")]
    phases += [(f"{S.METHOD_LABELS[m]} read", m, "store", "elapsed_s") for m in S.DIRECT_METHODS]
    out = []
    for name, method, source, column in phases:
        line = S.limit_line(name, S.of(rows, "processes", method=method), spec, source, S.ranks_of)
        for p, limit_s in line.seconds.items():
            prows = [r for r in S.of(rows, "processes", method=method) if S.ranks_of(r) == p]
            measured = S.median_of([r for r in prows if r.get("link_bytes")], column)
            if measured is not None and limit_s > 0:
                out.append({"phase": name, "method": method, "ranks": p, "measured_s": measured, "limit_s": limit_s,
                            "ratio": measured / limit_s, "binding": line.binding[p], "tool": S.tool_label(prows)})
    return out


def staged_read_knee(rows: list[dict]) -> dict | None:
    """Fig. 1's knee: the most readers whose staged read stays within TOLERANCE of one reader's
    (the fewest measured), and the first count beyond it; None without two measured counts."""
    med = S.medians_by_ranks(S.of(rows, "processes", method="staging"))
    if len(med) < 2:
        return None
    base_p = min(med)
    flat = [p for p in med if med[p] <= med[base_p] * (1 + S.TOLERANCE)]
    knee = max(p for p in flat if all(q in flat for q in med if q <= p))
    beyond = [p for p in med if p > knee]
    return {"knee_p": knee, "knee_s": med[knee], "base_p": base_p, "base_s": med[base_p],
            "next_p": beyond[0] if beyond else None, "next_s": med[beyond[0]] if beyond else None}


# Why a tool may be slower than its pipes, as measured on the emulated cluster (BENCHMARKS.md, "Study
# at the seed's counts"): said beside a phase that took more than LIMIT_RATIO_MAX times its limit.
SLOWER_BECAUSE = {
    "staging copy": "the copy is one tool on rank 0 downloading from the store and writing through node 0's "
                    "sshfs mount, then fsync and a rename over sftp; the time that goes to starting the tool, "
                    "flushing and renaming carries no bytes",
    "staged read": "sshfs serves each read from a chain of sftp requests, each reply a round trip (+ the "
                   "filesystem's added latency), so a rank's stream starts slowly and its node's pipe idles "
                   "between replies",
}


def limits_section(rows: list[dict], meta: dict) -> list[str]:
    """STUDY.md's table of each phase against its limit from what the links carried, Fig. 1's
    knee, and whether the staging copy and the staged read came within LIMIT_RATIO_MAX of their
    limits (which tool was slower than its pipes, and why, where not). [] off a cluster."""
    records = against_limits(rows, meta)
    if not records:
        return []
    out = ["## Against the physical limit", "",
           "Each phase's median time over its limit: the bytes every capped link carried during the phase "
           f"(tc's counters, read every {links.SAMPLE_INTERVAL_S:g} s: frames with their headers, read-ahead and "
           "retries included) over "
           "that link's rate, the largest of them plus one latency.", ""]
    out += md_table(["phase", "processes", "measured", "limit", "bound by", "measured / limit"],
               [[r["phase"], str(r["ranks"]), s(r["measured_s"]), s(r["limit_s"]), r["binding"], f"{r['ratio']:.2f}"]
                for r in records])
    knee = staged_read_knee(rows)
    if knee is not None:
        text = (f"- Fig. 1's knee: the staged read stays within {S.TOLERANCE:.0%} of {knee['base_p']} reader(s)' "
                f"{s(knee['base_s'])} up to p = {knee['knee_p']} ({s(knee['knee_s'])})")
        out.append(text + (f", then takes {s(knee['next_s'])} at p = {knee['next_p']}." if knee["next_p"] else "."))
    for phase in ("staging copy", "staged read"):
        mine = [r for r in records if r["phase"] == phase]
        if not mine:
            continue
        worst = max(mine, key=lambda r: r["ratio"])
        over = [r for r in mine if round(r["ratio"], 2) > LIMIT_RATIO_MAX]  # as the table shows it
        if not over:
            out.append(f"- The {phase} came within {LIMIT_RATIO_MAX:g}× of its limit at every count "
                       f"(at most {worst['ratio']:.2f}×, at p = {worst['ranks']}).")
            continue
        tool = worst["tool"] if phase == "staging copy" else "sshfs (FUSE over sftp)"
        counts = ", ".join(f"p = {r['ranks']} ({r['ratio']:.2f}×)" for r in over)
        out.append(f"- The {phase} took more than {LIMIT_RATIO_MAX:g}× its limit at {counts}: {tool} is slower "
                   f"than the pipes there (at p = {worst['ranks']} the binding pipe, {worst['binding']}, could have "
                   f"carried its bytes in {s(worst['limit_s'])}; the phase took {s(worst['measured_s'])}). Why: "
                   f"{SLOWER_BECAUSE[phase]}.")
    return out + [""]
