"""The markdown every bench prints: tables, ratios with their targets, median (min-max) spreads."""
from __future__ import annotations

from bench.common.timing import target_text, verdict
from ingest.units import GiB


def store_line(results: dict) -> str:
    """The store a run's results came from, as its tables' first line (results written before
    --store existed came from versitygw)."""
    store = results.get("store") or {"server": "versitygw posix on 127.0.0.1"}
    return f"Store: {store['server']}.\n"


def markdown_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ratios_table(ratios: dict, targets: dict, label: str = "ratio") -> str:
    """The markdown table of named ratios with their targets and verdicts ('-' where untargeted)."""
    rows = [[name, spread(r), target_text(targets.get(name)), verdict(r, targets.get(name))]
            for name, r in ratios.items()]
    return markdown_table([label, "median (min-max)", "target", "verdict"], rows)


def spread(st: dict, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    """'median (min-max)' of a stats dict, each divided by scale (e.g. MiB)."""
    if not st or st.get("median") is None:
        return "-"
    med, lo, hi = (fmt.format(st[k] / scale) for k in ("median", "min", "max"))
    return f"{med} ({lo}-{hi})"


def gib(n_bytes: float) -> float:
    return n_bytes / GiB
