"""Plan any layout's read (pure): the one place that knows which planner a layout needs.

- FITS images and contiguous HDF5 datasets are a strided lattice in the object: the lattice
  planner (lattice.py) merges its runs.
- Chunked HDF5 datasets are stored chunk by chunk, each compressed whole: the chunk planner
  (chunkplan.py) merges the blobs a box touches.
- A compact HDF5 dataset lives in its object header, and one never written reads as its fill
  value: no request at all (LocalPlan).

Every plan answers the same questions (n_requests, wire_bytes, needed_bytes, predicted_s,
describe), so the tuner, `plan`, the driver and the report need not ask which kind it is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ingest.core.chunkplan import ChunkPlan, plan_chunks
from ingest.core.lattice import STRATEGIES, UNLIMITED_GAP, Lattice, Plan, make_plan
from ingest.core.cost import CostModel
from ingest.core.selection import Selection
from ingest.errors import ConfigError


@dataclass(frozen=True)
class LocalPlan:
    """A read that needs no request: data in the object header (compact) or never written."""

    needed_bytes: int
    strategy: str = "none"
    n_requests: int = 0
    wire_bytes: int = 0

    def predicted_s(self, cost, threads) -> float:
        return 0.0

    def describe(self, cost, threads) -> dict:
        return {"strategy": self.strategy, "requests": 0, "bytes_needed": self.needed_bytes, "bytes_wire": 0,
                "read_amplification": 0.0, "predicted_s": 0.0}


def storage_of(layout) -> str:
    """"contiguous" (FITS, contiguous HDF5), "chunked", "compact" or "unwritten"."""
    storage = layout.storage
    if storage == "contiguous" and layout.data_offset is None:
        return "unwritten"
    return storage


def chunk_gap(strategy: str, max_gap_bytes: int | None, cost: CostModel) -> int:
    """The strategies in chunk terms: small merges nothing, large/intermediate everything up to
    chunk_bytes (there are no channel planes to follow in a chunked layout), auto the break-even."""
    if strategy == "small":
        return 0
    if strategy in ("large", "intermediate"):
        return UNLIMITED_GAP
    return cost.gap_bytes if max_gap_bytes is None else max_gap_bytes


def plan_selection(layout, sel: Selection, *, strategy: str = "auto", chunk_bytes: int = 16 << 20,
                   max_gap_bytes: int | None = None, cost: CostModel = CostModel()) -> Plan | ChunkPlan | LocalPlan:
    """The requests that read `sel`'s bounding box from `layout` with a named strategy."""
    storage = storage_of(layout)
    if storage == "contiguous":
        return make_plan(layout, sel, strategy=strategy, chunk_bytes=chunk_bytes, max_gap_bytes=max_gap_bytes,
                         cost=cost)
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if storage == "chunked":
        return plan_chunks(layout.chunks, sel.box, gap_bytes=chunk_gap(strategy, max_gap_bytes, cost),
                           chunk_bytes=chunk_bytes, itemsize=layout.itemsize)
    return LocalPlan(math.prod(b - a for a, b in sel.box) * layout.itemsize)


def box_lattice(box, itemsize: int) -> Lattice:
    """A box's bytes laid out compactly in C order, as one run (its place in an output file,
    for plans whose bytes are not a lattice in the object: chunked, compact, unwritten)."""
    return Lattice(base=0, counts=(), strides=(), axes=(), run_bytes=itemsize * math.prod(b - a for a, b in box))
