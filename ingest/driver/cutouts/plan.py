"""`plan --catalogue`: what a cut-out job would read, before any data moves.

The same decisions `cutouts` makes (the sources' boxes, the split over ranks, each rank's stripe
and the bands it streams it in, each band read whole or as its cut-outs' spans), priced by the
cost model and what the ranks share (core/sharing.py), without reading a data byte.
"""
from __future__ import annotations

from ingest.config import RunConfig
from ingest.core.cutplan import box_bytes
from ingest.core.cutstripes import choose_split, plan_stripe
from ingest.core.sharing import RankLoad, predict_job
from ingest.driver.cutouts.sources import cube_sources
from ingest.driver.cutouts.job import gap_bytes


def plan_catalogue(cfg: RunConfig, layout, settings, topology, shared) -> dict:
    """The cut-out job of cfg.catalogue on `topology`'s ranks: sources, requests, wire bytes and
    the predicted makespan (the binding term named), as `plan --json` shows it."""
    sources = cube_sources(cfg, layout)
    todo = [i for i, s in enumerate(sources) if s.box is not None]
    gap = gap_bytes(cfg, settings)
    loads, choices, memory = [], [], 0
    if todo and layout.storage == "contiguous":
        boxes = [sources[i].box for i in todo]
        axis, order, parts, why = choose_split(layout, boxes, topology.n_ranks, max_gap_bytes=gap,
                                               chunk_bytes=settings.chunk_bytes, cost=settings.cost,
                                               threads=settings.threads)
        choices.append(why)
        for rank, (a, b) in enumerate(parts):
            if a == b:
                loads.append(RankLoad(0, 0, settings.threads))
                continue
            plan = plan_stripe(layout, [boxes[k] for k in order[a:b]], split=axis,
                               budget_bytes=cfg.cutout_batch_bytes, max_gap_bytes=gap,
                               chunk_bytes=settings.chunk_bytes, cost=settings.cost, threads=settings.threads)
            loads.append(RankLoad(plan.n_requests, plan.wire_bytes, settings.threads))
            choices.append(f"rank {rank}: {plan.choice_text()}")
            memory = max(memory, plan.memory_bytes)
    elif todo:  # chunked: each cut-out through its chunks, its bytes once
        per_rank = -(-len(todo) // topology.n_ranks)
        for r in range(topology.n_ranks):
            mine = todo[r * per_rank:(r + 1) * per_rank]
            wire = sum(box_bytes(sources[i].box, layout.itemsize) for i in mine)
            loads.append(RankLoad(len(mine), wire, settings.threads))
    prediction = predict_job(settings.alone, shared, topology, loads)
    requests, wire = sum(l.n_requests for l in loads), sum(l.wire_bytes for l in loads)
    n = max(1, len(todo))
    return {"sources": len(sources), "cut": len(todo), "skipped": len(sources) - len(todo),
            "requests": requests, "bytes_wire": wire,
            "bytes_needed": sum(box_bytes(sources[i].box, layout.itemsize) for i in todo),
            "requests_per_source": requests / n, "bytes_wire_per_source": wire / n,
            "read_share_of_data": wire / max(1, layout.data_bytes), "max_gap_bytes": gap,
            "memory_bound_bytes": memory, "choice": "; ".join(choices), "prediction": prediction.as_dict()}
