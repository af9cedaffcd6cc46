"""bench/cluster/commands.py's targets and its markdown table: one row per cell, with the targets
each cell missed (issue 46 part 4, issue 44's cluster item)."""
from __future__ import annotations

from bench import common
from ingest.units import MiB

COMMANDS = ("run", "s2p", "prestage", "publish", "cutouts")  # the order they run in: publish needs prestage's
TARGETS = {"x_limit_max": 1.15, "root_cpu_of_makespan_max": 0.05, "measured_over_predicted": [0.8, 1.25]}
HEADERS = ["command", "nodes", "ranks", "status", "makespan s", "wall s", "wire MiB", "requests", "limit s (binds)",
           "x limit", "x carried limit", "predicted s (binds)", "measured / predicted",
           "rank 0 own s (of makespan); CPU s (of makespan)", "rank 0 waiting s", "steps + gathers; gathered KiB",
           "cutouts rank 0 prepare / gather s", "targets"]


def misses(row: dict, targets: dict = TARGETS) -> list[str]:
    """The targets a cell missed, in words; a failed or inexact cell misses them all: its status says so.
    Rank 0's share is of its CPU seconds: where ranks outnumber cores its wall time counts the wait
    for a core (docs/install-cluster.md, section 7)."""
    if row["status"] != "ok":
        return [row["status"]]
    out = []
    if row.get("x_limit") is not None and row["x_limit"] > targets["x_limit_max"]:
        out.append(f"x limit > {targets['x_limit_max']:g}")
    share = row.get("root_cpu_of_makespan")
    if share is not None and share > targets["root_cpu_of_makespan_max"]:
        out.append(f"rank 0 CPU > {targets['root_cpu_of_makespan_max']:.0%}")
    lo, hi = targets["measured_over_predicted"]
    ratio = row.get("measured_over_predicted")
    if ratio is not None and not lo <= ratio <= hi:
        out.append(f"measured/predicted outside {lo:g}-{hi:g}")
    return out


def _num(value, fmt: str = "{:.3f}", scale: float = 1.0) -> str:
    return "-" if value is None else fmt.format(value / scale)


def _root(r: dict) -> tuple[str, str, str]:
    """Rank 0's own time (wall and CPU, each of the makespan), its wait, and what grows with the ranks."""
    if not r.get("root_ledger"):
        return "no ledger", "-", "-"
    own = (f"{_num(r.get('root_own_s'))} ({_num(r.get('root_of_makespan'), '{:.1%}')}); "
           f"{_num(r.get('root_own_cpu_s'))} ({_num(r.get('root_cpu_of_makespan'), '{:.1%}')})")
    grows = f"{r.get('root_steps')} + {r.get('root_gathers')}; {_num(r.get('root_bytes_gathered'), '{:.1f}', 1024)}"
    return own, _num(r.get("root_waiting_s")), grows


def _x_limit(r: dict) -> str:
    """x limit; for publish also its uploads alone (first part up to last part done, the report's timeline)."""
    text = _num(r["x_limit"], "{:.2f}")
    if r.get("x_limit_uploads") is not None:
        text += f" (uploads {r['x_limit_uploads']:.2f} after {r['before_first_upload_s']:.1f} s)"
    return text


def _row(r: dict, targets: dict) -> list:
    missed = "; ".join(misses(r, targets)) or "met"
    if r["status"] == "failed":
        return [r["command"], r["nodes"], r["ranks"], "failed", "-", _num(r.get("wall_s"), "{:.1f}"),
                *["-"] * (len(HEADERS) - 7), missed]
    status = r["status"] if r.get("exact") else f"{r['status']}: {r.get('check')}"
    predicted = f"{r['predicted_s']:.3f} ({r.get('predicted_binding') or '-'})" if r.get("predicted_s") else "-"
    cut_root = (f"{_num(r.get('rank0_prepare_s'))} / {_num(r.get('rank0_gather_s'))}" if r["command"] == "cutouts"
                else "-")
    return [r["command"], r["nodes"], r["ranks"], status, _num(r["makespan_s"]), _num(r.get("wall_s"), "{:.1f}"),
            _num(r["wire_bytes"], "{:.2f}", MiB), _num(r["requests"], "{:.0f}"),
            f"{_num(r['limit_s'])} ({r['limit_binding']})", _x_limit(r),
            _num(r.get("x_carried_limit"), "{:.2f}"), predicted, _num(r.get("measured_over_predicted"), "{:.2f}"),
            *_root(r), cut_root, missed]


def to_markdown(results: dict) -> str:
    targets = results.get("targets", TARGETS)
    order = {c: i for i, c in enumerate(COMMANDS)}
    cells = sorted(results["cells"], key=lambda r: (r["nodes"], r["ranks"], order.get(r["command"], len(order))))
    s = results["spec"]
    head = common.cluster_heading(
        "Every command on the emulated cluster", results,
        f"{'x'.join(map(str, results['cube_shape']))}, {results.get('sources')} cut-out sources; node NIC "
        f"{s['nic_bytes_per_s'] / 1e6:g} MB/s, store {s['store_egress_bytes_per_s'] / 1e6:g} MB/s each way "
        f"+{s['store_latency_s'] * 1e3:g} ms")
    lo, hi = targets["measured_over_predicted"]
    foot = (f"Targets: x limit <= {targets['x_limit_max']:g}; rank 0's own CPU <= "
            f"{targets['root_cpu_of_makespan_max']:.0%} of the makespan; measured / predicted in {lo:g}-{hi:g}. "
            "Predicted: the report's settings.prediction (publish has none). \"no ledger\": the command's report "
            "carries no `root` (ingest/driver/rootwork.py).")
    return "\n".join([head, "", common.markdown_table(HEADERS, [_row(r, targets) for r in cells]), "", foot])
