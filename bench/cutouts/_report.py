"""bench.cutouts.catalogue's tables, from its results JSON alone (medians over the rounds)."""
from __future__ import annotations

from bench import common

MB = 1e6


def _med(cell: dict, name: str, metric: str):
    """The median of a candidate's metric over the rounds (None where no round recorded it)."""
    st = cell[name]["summary"].get(metric)
    return None if not st else st.get("median")


def _fmt(value, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    return "-" if value is None else fmt.format(value / scale)


def _cells_table(results: dict) -> str:
    rows = []
    for cell in results["cells"].values():
        for which in ("ingest_before", "ingest") if "ingest_before" in cell else ("ingest",):
            rows.append(_cell_row(cell, which))
    return common.markdown_table(
        ["link", "sources (with a box)", "cut-out MiB (sum)", "ingest wall s", "prepare + makespan s",
         "requests / source", "wire MB / source", "wire MiB total", "staging wall s (stage + cut)",
         "astropy loop s / source", "astropy wire MB / source", "peak RSS / bound MiB", "bit-equal"], rows)


def _cell_row(cell: dict, which: str) -> list:
    """One cell's row for `which` ingest candidate (ingest, or ingest_before: another tree's code)."""
    ing, stg, loop = ({m: _med(cell, name, m) for m in cell[name]["summary"]}
                      for name in (which, "staging", "astropy_loop"))
    failed = [s["status"] for s in cell[which]["samples"] if s.get("status") != "ok"]
    wall = f"{failed[0]} ({_fmt(ing.get('wall_s'), '{:.0f}')} s)" if failed else _fmt(ing.get("wall_s"), "{:.1f}")
    verified = all(s.get("verified", True) for c in (which, "staging", "astropy_loop")
                   for s in cell[c]["samples"] if s.get("status") == "ok")
    mib = lambda v: _fmt(v, "{:.0f}", 2**20)  # noqa: E731
    link = cell["profile"] + (" (before)" if which == "ingest_before" else "")
    return [link, f"{cell['sources']} ({cell['with_box']})", mib(cell["needed_bytes"]), wall,
            f"{_fmt(ing.get('rank0_prepare_s'), '{:.1f}')} + {_fmt(ing.get('makespan_s'), '{:.1f}')}",
            _fmt(ing.get("requests_per_source")), _fmt(ing.get("bytes_wire_per_source"), "{:.2f}", MB),
            mib(ing.get("bytes_wire")),
            f"{_fmt(stg.get('wall_s'), '{:.1f}')} ({_fmt(stg.get('stage_s'), '{:.1f}')} + "
            f"{_fmt(stg.get('cut_s'), '{:.1f}')})",
            f"{_fmt(loop.get('per_source_s'), '{:.3f}')} (n={_fmt(loop.get('sampled'), '{:.0f}')})",
            _fmt(loop.get("bytes_wire_per_source"), "{:.1f}", MB),
            f"{mib(ing.get('peak_rss_max_bytes'))} / {mib(ing.get('memory_bound_bytes'))}",
            "yes" if verified else "NO"]


TARGET_CUTOUTS_PER_S = 1000.0  # issue 60: ingest's cut-outs a second, launch to exit, at 10,000 sources


def _rates_table(results: dict) -> str:
    """Cut-outs a second, each candidate from launch to exit in the same rounds: ingest (done /
    wall), staging (stage + cut every box locally, files / wall), the astropy loop (sampled
    sources / their seconds). The target applies to ingest at 10,000 sources or more."""
    rows = []
    for key, cell in results["cells"].items():
        for name in ("ingest_before", "ingest", "staging", "astropy_loop"):
            if name not in cell:
                continue
            st = cell[name]["summary"].get("cutouts_per_s")
            hit = name == "ingest" and cell["sources"] >= 10000 and st and st.get("median") is not None
            tgt = common.target(">=", TARGET_CUTOUTS_PER_S) if hit else None
            rows.append([key, name, common.spread(st, "{:.0f}") if st else "-", common.target_text(tgt),
                         common.verdict(st or {}, tgt)])
    return common.markdown_table(["cell", "candidate", "cut-outs / s, launch to exit: median (min-max)",
                                  "target", "verdict"], rows)


def _paper(results: dict) -> list[str]:
    p = results.get("paper") or {}
    if not p:
        return ["On paper: not run (--paper-sources 0)."]
    if p.get("status") != "ok":
        return [f"On paper: FAILED: {p.get('error', '')[-400:]}"]
    one, split = p["one_plan"], p["per_rank"]
    cm = p["cost_model"]
    rows = []
    for n, pred in one["by_ranks"].items():
        rows.append([f"one plan, {n} ranks (equal shares)", f"{one['requests']:,}", f"{one['bytes_wire'] / 1e9:,.0f}",
                     f"{one['requests_per_source']:.1f}", f"{one['bytes_wire_per_source'] / MB:.1f}",
                     f"{pred['makespan_s']:,.0f}"])
    for n, share in split["by_ranks"].items():
        rows.append([f"as `cutouts` reads: stripes along axis {share.get('split_axis', '?')}, {n} ranks",
                     f"{share['requests']:,}",
                     f"{share['bytes_wire'] / 1e9:,.0f}", f"{share['requests_per_source']:.1f}",
                     f"{share['bytes_wire_per_source'] / MB:.1f}", f"{share['makespan_s']:,.0f}"])
    box = " x ".join(map(str, reversed(p["box_extents_numpy"])))
    head = (f"On paper ({p['command']}): {p['sources']:,} sources of {box} voxels "
            f"({p['needed_bytes_per_source'] / MB:.2f} MB each) on a {' x '.join(map(str, p['cube_shape_fits']))} "
            f"float32 cube ({p['data_bytes'] / 1e9:,.0f} GB); cost model {cm['latency_s'] * 1e3:g} ms + "
            f"{cm['bandwidth_bytes_per_s_per_rank'] / MB:g} MB/s per rank, gap {cm['gap_bytes']:,} bytes, "
            f"{cm['threads']} threads x {cm['chunk_bytes'] >> 20} MiB. The one plan reads "
            f"{one['wire_share_of_cube']:.0%} of the cube (amplification {one['read_amplification']:.0f}x over the "
            f"needed bytes); planning it took {one['plan_s']:.0f} s, the whole computation {p['elapsed_s']:.0f} s and "
            f"{p['peak_rss_bytes'] / 2**30:.1f} GiB.")
    return [head, "", common.markdown_table(["reading", "requests", "wire GB", "requests / source",
                                             "wire MB / source", "predicted makespan s"], rows)]


def _ratios_table(results: dict) -> str:
    """The ratios with targets and verdicts; a ratio over a job stopped at its time limit is an
    upper bound (the job would have taken longer) and says so."""
    rows = []
    for name, ratio in results["ratios"].items():
        tgt = results["targets"].get(name)
        bound = " (upper bound: ingest timed out)" if ratio.get("upper_bound") else ""
        if ratio.get("upper_bound") and tgt is None:
            bound += "; says nothing of the target"
        rows.append([name + bound, common.spread(ratio), common.target_text(tgt), common.verdict(ratio, tgt)])
    return common.markdown_table(["ratio", "median (min-max)", "target", "verdict"], rows)


def markdown(results: dict) -> str:
    cfg, cube = results["config"], results["cube"]
    out = [f"### Cut-outs: `ingest cutouts` on {cfg['ranks']} ranks vs staging + local cut vs astropy/fsspec per "
           f"source; {cfg['shape_fits']} float32 cube ({cube['data_bytes'] / 2**20:.0f} MiB), size '{cfg['size']}', "
           f"{cfg['repeats']} round(s)", "", _cells_table(results), "", _rates_table(results), "",
           _ratios_table(results), ""]
    choices = []
    for key, cell in results["cells"].items():
        for which in ("ingest_before", "ingest"):
            choice = cell.get(which, {}).get("info", {}).get("plan_choice")
            if choice:
                choices.append(f"- `{key}`{' (before)' if which == 'ingest_before' else ''}: {choice}")
    if choices:
        out += ["What the plan read, in the report's words:", "", *choices, ""]
    out += _paper(results)
    if results.get("failures"):
        out += ["", "Did not finish:", "", *[f"- {f}" for f in results["failures"]]]
    return "\n".join(out).rstrip()
