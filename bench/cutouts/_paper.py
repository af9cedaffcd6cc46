"""bench.cutouts.catalogue "on paper": a WALLABY-sized catalogue on an ASKAP-sized cube, no data moved.

    python -m bench.cutouts._paper [--sources 30000] [--ranks 25,100] [--seed 1]

This does what `python -m ingest plan --catalogue` does, with the project's pure pieces and no
header file: boxes of WALLABY's size (31 x 31 pixels of 6 arcsec, 77 channels of
18.5 kHz: 3 arcmin and 300 km/s, worst case of the pixel-centre rule) at uniform random places in
a 5851 x 5851 x 6668 float32 cube (`FitsLayout`, a 5-block header); the requests and wire bytes
of reading them all (`core.cutplan.plan_spans`, the gap and chunk of the cost model: seed 001's
Acacia, 2 ms and 75 MB/s per rank); and the predicted makespan per rank count
(`CostModel.predict_s` on each rank's share, ranks balanced by bytes).

Twice: once as ONE plan over all the boxes, each rank an equal share (a lower bound: no rank
reads a byte another reads); and as `ingest cutouts` reads them, each rank streaming its stripe
band by band (bytes two ranks' stripes share are read twice). Prints one JSON line (the seconds it took, and this process's peak RSS:
the one-plan pass holds every box's runs at once).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np

ASKAP_SHAPE = (6668, 5851, 5851)  # numpy order (channels, y, x): WALLABY's full-resolution cube
HEADER_BLOCKS = 5
BOX_EXTENTS = (77, 31, 31)  # channels, y, x: 300 km/s of 18.5 kHz channels, 3 arcmin of 6 arcsec pixels
THREADS = 4  # per rank: configured_settings' default without a probe
CHUNK_BYTES = 16 << 20
BAND_BUDGET_BYTES = 256 << 20  # `--cutout-batch-bytes`' default


def askap_layout():
    """A FitsLayout of the ASKAP-sized float32 cube, from its shape alone."""
    from ingest.formats.fits import FitsLayout

    data_offset = HEADER_BLOCKS * 2880
    data_bytes = int(np.prod(ASKAP_SHAPE, dtype=np.int64)) * 4
    return FitsLayout(source="askap-sized.fits", hdu=0, shape=ASKAP_SHAPE, bitpix=-32, header_offset=0,
                      data_offset=data_offset, object_bytes=data_offset + data_bytes + (-data_bytes % 2880))


def random_boxes(n_sources: int, seed: int) -> list[tuple]:
    """n_sources boxes of BOX_EXTENTS at uniform random places wholly inside the cube."""
    rng = np.random.default_rng(seed)
    lows = [rng.integers(0, n - e + 1, n_sources) for n, e in zip(ASKAP_SHAPE, BOX_EXTENTS)]
    return [tuple((int(lo[i]), int(lo[i]) + e) for lo, e in zip(lows, BOX_EXTENTS)) for i in range(n_sources)]


def _prediction(cost, per_rank: list[tuple[int, int]]) -> dict:
    """Makespan = the slowest rank's predicted read; per_rank: (requests, wire bytes) of each rank."""
    times = [cost.predict_s(r, w, THREADS) for r, w in per_rank]
    return {"makespan_s": max(times), "fastest_rank_s": min(times),
            "requests_per_rank_max": max(r for r, _ in per_rank),
            "wire_bytes_per_rank_max": max(w for _, w in per_rank)}


def one_plan(layout, boxes, cost, ranks_list) -> dict:
    """Every box in one span plan; each rank reads an equal share of its bytes and requests."""
    from ingest.core.cutplan import plan_spans

    t0 = time.perf_counter()
    plan = plan_spans(layout, boxes, max_gap_bytes=cost.gap_bytes, chunk_bytes=CHUNK_BYTES)
    out = {**plan.describe(), "plan_s": time.perf_counter() - t0, "data_bytes": layout.data_bytes,
           "wire_share_of_cube": plan.wire_bytes / layout.data_bytes}
    out["by_ranks"] = {str(n): _prediction(cost, [(plan.n_requests / n, plan.wire_bytes / n)] * n) for n in ranks_list}
    return out


def per_rank(layout, boxes, cost, ranks_list) -> dict:
    """Ranks as `ingest cutouts` splits the sources and reads them (core.cutstripes: `choose_split`,
    then each rank's stripe streamed band by band by `plan_stripe`, 256 MiB a band as the default
    `--cutout-batch-bytes`): requests, wire bytes, the slowest rank's predicted read, the largest
    rank's stated memory. Bytes that two ranks' stripes share are read by both."""
    from ingest.core.cutstripes import choose_split, plan_stripe

    t0 = time.perf_counter()
    out = {"by_ranks": {}, "band_budget_bytes": BAND_BUDGET_BYTES}
    for n_ranks in ranks_list:
        axis, order, parts, why = choose_split(layout, boxes, n_ranks, max_gap_bytes=cost.gap_bytes,
                                               chunk_bytes=CHUNK_BYTES, cost=cost, threads=THREADS)
        shares, memory, modes = [], 0, {"stream": 0, "spans": 0}
        for lo, hi in parts:
            if hi == lo:
                shares.append((0, 0))
                continue
            plan = plan_stripe(layout, [boxes[i] for i in order[lo:hi]], split=axis, budget_bytes=BAND_BUDGET_BYTES,
                               max_gap_bytes=cost.gap_bytes, chunk_bytes=CHUNK_BYTES, cost=cost, threads=THREADS)
            shares.append((plan.n_requests, plan.wire_bytes))
            memory = max(memory, plan.memory_bytes)
            for band in plan.bands:
                modes[band.mode] += 1
        out["by_ranks"][str(n_ranks)] = {"requests": sum(r for r, _ in shares), "bytes_wire": sum(w for _, w in shares),
                                         "split_axis": axis, "split_choice": why, "memory_bytes_max": memory,
                                         "band_modes": modes, **_prediction(cost, shares)}
    out["plan_s"] = time.perf_counter() - t0
    return out


def on_paper(n_sources: int, ranks_list: list[int], seed: int = 1) -> dict:
    """Both readings of the WALLABY-sized catalogue, with the figures per source."""
    from ingest.core.cost import CostModel

    cost = CostModel(latency_s=0.002, bandwidth_bytes_per_s=75e6)
    layout = askap_layout()
    boxes = random_boxes(n_sources, seed)
    needed_per_source = int(np.prod(BOX_EXTENTS)) * 4
    result = {"cube_shape_fits": list(reversed(ASKAP_SHAPE)), "data_bytes": layout.data_bytes, "sources": n_sources,
              "box_extents_numpy": list(BOX_EXTENTS), "needed_bytes_per_source": needed_per_source,
              "cost_model": {"latency_s": cost.latency_s, "bandwidth_bytes_per_s_per_rank": cost.bandwidth_bytes_per_s,
                             "gap_bytes": cost.gap_bytes, "threads": THREADS, "chunk_bytes": CHUNK_BYTES},
              "per_rank": per_rank(layout, boxes, cost, ranks_list)}
    result["one_plan"] = one_plan(layout, boxes, cost, ranks_list)  # last: the largest arrays
    one = result["one_plan"]
    one.update(requests_per_source=one["requests"] / n_sources, bytes_wire_per_source=one["bytes_wire"] / n_sources)
    for share in result["per_rank"]["by_ranks"].values():
        share.update(requests_per_source=share["requests"] / n_sources,
                     bytes_wire_per_source=share["bytes_wire"] / n_sources)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cutouts._paper", description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=30000, help="catalogue size (default 30000)")
    parser.add_argument("--ranks", default="25,100", help="rank counts (default 25,100)")
    parser.add_argument("--seed", type=int, default=1, help="where the boxes fall (default 1)")
    args = parser.parse_args(argv)
    from bench._rank_record import status_bytes as _status_bytes
    from bench.common import counts

    t0 = time.perf_counter()
    result = on_paper(args.sources, counts("--ranks", args.ranks), args.seed)
    result.update(elapsed_s=time.perf_counter() - t0, peak_rss_bytes=_status_bytes("VmHWM"))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
