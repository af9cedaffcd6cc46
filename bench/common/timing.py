"""Side-by-side timing of candidates, and the statistics every bench reports.

The machine is shared and noisy, so no benchmark reports a bare time as its finding: each
runs its candidates interleaved (A, B, A, B, ...) in one process, on the same object, and
reports per-repetition ratios with their median and spread.
"""
from __future__ import annotations

import math
import os
import resource
import statistics
from dataclasses import dataclass, field
from typing import Callable


def cpu_self_s() -> float:
    """User + system CPU seconds of this process, all threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def cpu_children_s() -> float:
    """User + system CPU seconds of this process's waited-for children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cpu_pid_s(pid: int | tuple[int, ...] | None) -> float:
    """User + system CPU seconds of another process so far (from /proc), or the sum over a tuple
    of pids (a store of several daemons); nan if unreadable."""
    if pid is None:
        return float("nan")
    if isinstance(pid, tuple):
        return sum(cpu_pid_s(one) for one in pid) if pid else float("nan")
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    # After the ")" ending the command name, utime and stime are fields 12 and 13 (0-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Candidate:
    """One thing to time: `run()` does one repetition and returns its measurements (numbers)."""

    name: str
    run: Callable[[], dict]
    info: dict = field(default_factory=dict)  # how it was run (settings, command), for the record
    warm: bool = True  # False: skip its warm-up rounds (a slow reader already warmed by a sweep)


def run_interleaved(candidates: list[Candidate], repeats: int, warmup: int = 1, log=None) -> dict:
    """Run candidates A, B, C, A, B, C, ... for `repeats` rounds after `warmup` unrecorded rounds.

    Returns {name: {"info", "samples": [one dict per round], "summary": {metric: stats}}}.
    Sample i of every candidate comes from round i, so ratios can be paired by round.
    """
    if repeats < 1:
        raise ValueError(f"repeats: {repeats} must be >= 1")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"candidate names must be unique: {names}")
    samples: dict[str, list[dict]] = {c.name: [] for c in candidates}
    for round_i in range(-warmup, repeats):
        for cand in candidates:
            if round_i < 0 and not cand.warm:
                continue
            sample = cand.run()
            if round_i >= 0:
                samples[cand.name].append(sample)
            if log is not None:
                what = "warm-up" if round_i < 0 else f"round {round_i + 1}/{repeats}"
                log(f"  {what} {cand.name}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in sample.items()
                                                          if isinstance(v, (int, float, str))))
    return {c.name: {"info": c.info, "samples": samples[c.name], "summary": summarize(samples[c.name])}
            for c in candidates}


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def stats(values) -> dict:
    """median, min, max and n of a list of numbers (nan values are dropped)."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(samples: list[dict]) -> dict:
    """Per numeric metric of the samples: median, min, max, n."""
    metrics = [k for k, v in samples[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {k: stats([s.get(k) for s in samples]) for k in metrics}


def ratio_of(numerators: list[float], denominators: list[float], **record) -> dict:
    """Per-round ratios a/b of two paired lists, with median/min/max (rounds with b == 0 dropped)."""
    ratios = [a / b for a, b in zip(numerators, denominators) if b]
    return {**record, "samples": ratios, **stats(ratios)}


def target(op: str, value: float) -> dict:
    """A ratio's target: op '>=' (at least value) or '<=' (at most value)."""
    if op not in (">=", "<="):
        raise ValueError(f"target op: {op!r} is not '>=' or '<='")
    return {"op": op, "value": value}


def verdict(ratio: dict, tgt: dict | None) -> str:
    """PASS when the median ratio meets the target, BELOW when it does not, '-' without a target."""
    if not tgt or ratio.get("median") is None:
        return "-"
    med = ratio["median"]
    ok = med >= tgt["value"] if tgt["op"] == ">=" else med <= tgt["value"]
    return "PASS" if ok else "BELOW"


def target_text(tgt: dict | None) -> str:
    return "-" if not tgt else f"{'≥' if tgt['op'] == '>=' else '≤'} {tgt['value']:g}"


def paired_ratio(results: dict, numerator: str, denominator: str, metric: str) -> dict:
    """numerator's metric / denominator's metric, round by round, with median/min/max."""
    pairs = zip(results[numerator]["samples"], results[denominator]["samples"])
    ratios = [a[metric] / b[metric] for a, b in pairs if b[metric]]
    return {"numerator": numerator, "denominator": denominator, "metric": metric,
            "samples": ratios, **stats(ratios)}
