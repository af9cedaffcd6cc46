"""Read a box of a chunked dataset: fetch the chunk blobs a ChunkPlan merged into requests,
decode each on the worker thread that fetched it, and copy its part of the box into the output.

Chunks are the unit of storage (compressed whole), so a request brings whole chunks; the edge
of the box crops them. Chunks never written read as the dataset's fill value. Decoding runs on
the same threads as the reads (the codecs release the GIL), so a box's chunks are fetched and
decoded concurrently, not one after another.
"""
from __future__ import annotations


import numpy as np

from ingest.core.chunkplan import ChunkPlan
from ingest.core.chunks import ChunkIndex
from ingest.engine.executor import ReadStats, run_requests
from ingest.formats.filters import check_supported, decode_chunk_part
from ingest.transports.retry import RetryPolicy
from ingest.transports.base import Transport


def _overlap(position, chunk_shape, box):
    """(slices into the chunk, slices into the box-shaped output) where chunk `position` meets `box`."""
    src, dst = [], []
    for p, c, (a, b) in zip(position, chunk_shape, box):
        lo, hi = max(int(p) * c, a), min((int(p) + 1) * c, b)
        src.append(slice(lo - int(p) * c, hi - int(p) * c))
        dst.append(slice(lo - a, hi - a))
    return tuple(src), tuple(dst)


def fill_missing(out: np.ndarray, plan: ChunkPlan, chunk_shape, box, fill_value) -> None:
    """Chunks the file never wrote read as the fill value."""
    for position in plan.missing:
        _, dst = _overlap(position, chunk_shape, box)
        out[dst] = fill_value


def execute_chunks(plan: ChunkPlan, index: ChunkIndex, filters, dtype: np.dtype, transport: Transport,
                   out: np.ndarray, box, *, fill_value=0, threads: int = 1, progress=None,
                   retry: RetryPolicy = RetryPolicy(), name: str = "dataset", order: str = "sequential") -> ReadStats:
    """Fill `out` (box-shaped, the stored dtype) with the box of a chunked dataset. `name` (file
    and dataset) prefixes every decoding error, with the chunk's offset and grid position."""
    check_supported(filters, name)  # before any request: an unknown filter moves no data
    if out.shape != tuple(b - a for a, b in box):
        raise ValueError(f"output shape {out.shape} is not the box's {box}")
    chunk_shape = index.chunk_shape
    fill_missing(out, plan, chunk_shape, box, fill_value)

    def do_one(r: int, worker):
        offset, nbytes = int(plan.req_offsets[r]), int(plan.req_nbytes[r])
        buf = memoryview(worker.buffer(nbytes))[:nbytes]
        yield buf, offset
        for cid in plan.chunk_ids[plan.req_start[r]:plan.req_start[r + 1]]:
            start = int(index.offsets[cid]) - offset
            stored = buf[start:start + int(index.sizes[cid])]
            where = f"{name}: chunk {tuple(int(g) for g in index.grid[cid])} at byte {int(index.offsets[cid])}"
            src, dst = _overlap(index.grid[cid], chunk_shape, box)
            out[dst] = decode_chunk_part(stored, filters, int(index.filter_masks[cid]), dtype, chunk_shape, src,
                                         where=where)
        return nbytes

    largest = int(plan.req_nbytes.max()) if plan.n_requests else 0
    return run_requests(plan.n_requests, do_one, transport, needed_bytes=out.nbytes, buffer_bytes=largest,
                        wire_bytes=int(plan.req_nbytes.sum()),
                        threads=threads, progress=progress, retry=retry, order=order)
