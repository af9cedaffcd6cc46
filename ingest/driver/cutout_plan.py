"""`plan --catalogue`: what a cut-out job would read, before any data moves.

The same decisions `cutouts` makes (the sources' boxes, the split over ranks along the axis the
boxes reach least, each rank's batches and the spans they merge into), priced by the cost model
and what the ranks share (core/sharing.py), without reading a data byte.
"""
from __future__ import annotations

import numpy as np

from ingest.config import RunConfig
from ingest.core.cutplan import batches, box_bytes, box_spans, merge_runs, source_order, split_axis, split_by_bytes
from ingest.core.sharing import RankLoad, predict_job
from ingest.driver.cutout_sources import cube_sources
from ingest.driver.cutouts import gap_bytes


def _rank_load(layout, boxes, cfg: RunConfig, gap: int, chunk_bytes: int, threads: int) -> RankLoad:
    """A rank's requests and wire bytes: its batches' merged spans, cut into requests."""
    requests = wire = 0
    for group in batches(layout, boxes, range(len(boxes)), cfg.cutout_batch_bytes, max_gap_bytes=gap):
        spans = [box_spans(layout, boxes[k], gap) for k in group]
        starts, stops, _ = merge_runs(np.concatenate([a for a, _ in spans]), np.concatenate([b for _, b in spans]), gap)
        sizes = stops - starts
        requests += int((-(-sizes // chunk_bytes)).sum())
        wire += int(sizes.sum())
    return RankLoad(requests, wire, threads)


def plan_catalogue(cfg: RunConfig, layout, settings, topology, shared) -> dict:
    """The cut-out job of cfg.catalogue on `topology`'s ranks: sources, requests, wire bytes and
    the predicted makespan (the binding term named), as `plan --json` shows it."""
    sources = cube_sources(cfg, layout)
    todo = [i for i, s in enumerate(sources) if s.box is not None]
    gap = gap_bytes(cfg, settings)
    boxes = [sources[i].box for i in todo]
    loads = []
    if todo:
        axis = split_axis(boxes, layout.shape)
        order = [todo[k] for k in source_order(layout, boxes, axis)]
        parts = split_by_bytes([box_bytes(sources[i].box, layout.itemsize) for i in order], topology.n_ranks)
        loads = [_rank_load(layout, [sources[i].box for i in order[a:b]], cfg, gap, settings.chunk_bytes,
                            settings.threads) for a, b in parts]
    prediction = predict_job(settings.alone, shared, topology, loads)
    requests, wire = sum(l.n_requests for l in loads), sum(l.wire_bytes for l in loads)
    n = max(1, len(todo))
    return {"sources": len(sources), "cut": len(todo), "skipped": len(sources) - len(todo),
            "requests": requests, "bytes_wire": wire,
            "bytes_needed": sum(box_bytes(sources[i].box, layout.itemsize) for i in todo),
            "requests_per_source": requests / n, "bytes_wire_per_source": wire / n,
            "read_share_of_data": wire / max(1, layout.data_bytes), "max_gap_bytes": gap,
            "prediction": prediction.as_dict()}
