"""How the study's reports write numbers: seconds at a precision that suits 2 ms and 9771 s alike,
and markdown tables. Shared by report.py, tables.py and physics.py."""
from __future__ import annotations

from ingest.study.summary import METHOD_LABELS


def s(x: float | None) -> str:
    """Seconds, precise enough for a 2 ms loopback run and a 9771 s staging copy alike."""
    if x is None:
        return "missing"
    return f"{x:.0f} s" if abs(x) >= 100 else f"{x:.2f} s" if abs(x) >= 1 else f"{x:#.3g} s"


def md_table(headers: list[str], body: list[list[str]]) -> list[str]:
    """A markdown table's lines, and an empty line after it."""
    return (["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
            + ["| " + " | ".join(r) + " |" for r in body] + [""])


def time_range(sp) -> str:
    """A cell's spread (summary.Spread) as "median (low–high)", or that it has no ok run."""
    if sp is None:
        return "missing (no ok run)"
    return f"{s(sp.median)} ({s(sp.low)[:-2]}–{s(sp.high)})"


def label(method: str) -> str:
    """A method's name as the report writes it (presigned URL, S3 API)."""
    return METHOD_LABELS.get(method, method)
