"""One rank's share of a cut-out job: its sources in batches, each read once and written whole.

A batch's cut-outs are one set of requests (`core.cutplan.plan_spans`: the bytes neighbouring or
overlapping cut-outs share are read once), landing in one buffer of at most `cutout_batch_bytes`.
Each cut-out is gathered from it and written under a temporary name; the whole batch is then
made durable by one sync and renamed into place (`ingest.atomic.DurableBatch`), and only then
journalled. Chunked HDF5 data is read per cut-out through its chunks instead.
"""
from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from ingest.atomic import DurableBatch
from ingest.config import RunConfig
from ingest.config.settings import retry_policy, transport_options
from ingest.core.cutplan import batches, box_bytes, gather_box, plan_spans, requests_touching
from ingest.driver import cutout_sinks as sinks
from ingest.engine.executor import run_requests
from ingest.outputs import cutouts as outputs
from ingest.transports import open_transport


def _read_spans(transport, job, cfg: RunConfig, boxes):
    """A batch of boxes of contiguous data as one span plan: (each box's raw array, gathered from
    the buffer only when asked for, so a rank holds one cut-out beside the buffer; plan; stats)."""
    s = job.settings
    plan = plan_spans(job.layout, boxes, max_gap_bytes=job.max_gap_bytes, chunk_bytes=s.chunk_bytes)
    buffer = np.empty(plan.buffer_bytes, np.uint8)
    at = plan.request_buffer_offsets()

    def one(i, worker):
        n = int(plan.request_stops[i] - plan.request_starts[i])
        yield memoryview(buffer)[int(at[i]): int(at[i]) + n], int(plan.request_starts[i])
        return n

    stats = run_requests(plan.n_requests, one, transport, needed_bytes=plan.needed_bytes, buffer_bytes=s.chunk_bytes,
                         wire_bytes=plan.wire_bytes, threads=s.threads, retry=retry_policy(cfg))
    return (gather_box(plan, buffer, job.layout, box) for box in boxes), plan, stats


def _read_chunked(transport, job, cfg: RunConfig, boxes):
    """Chunked (HDF5) data: each box through its chunks, one plan per box."""
    from ingest.api.read import plan_with, read_selection
    from ingest.core.selection import box_to_region

    arrays, total = [], None
    for box in boxes:
        sel, plan = plan_with(job.layout, box_to_region(box), job.settings)
        raw, stats = read_selection(transport, job.layout, sel, plan, convert=False, threads=job.settings.threads,
                                    retry=retry_policy(cfg))
        arrays.append(raw)
        if total is None:
            total = stats
        else:
            total.requests, total.bytes_wire = total.requests + stats.requests, total.bytes_wire + stats.bytes_wire
            total.bytes_needed += stats.bytes_needed
            total.retries += stats.retries
            total.throttled += stats.throttled
    return arrays, None, total


def _write(sink, job, source, raw, batch: DurableBatch, headers) -> str:
    path = sink.path(source.file_stem + job.ext)
    if job.layout.kind == "hdf5":
        from ingest.outputs.h5files import write_h5_subcube

        write_h5_subcube(path, job.layout, source.box, raw, source_label=job.layout.source)
    else:
        from ingest.outputs.subcubes import write_cutout

        write_cutout(path, source.box, raw, job.layout, object_name=source.name, batch=batch, headers=headers)
    return path


class RankTally:
    """What one rank did, for its record in the report."""

    def __init__(self, rank: int):
        self.rank, self.t0 = rank, MPI.Wtime()
        self.requests = self.bytes_wire = self.bytes_needed = self.batches = self.spans = 0
        self.retries = self.throttled = 0
        self.buffer_bytes_max = 0

    def add(self, stats, plan) -> None:
        self.batches += 1
        self.requests += stats.requests
        self.bytes_wire += stats.bytes_wire
        self.bytes_needed += stats.bytes_needed
        self.retries += stats.retries
        self.throttled += stats.throttled  # replies asking to slow down: not faults
        if plan is not None:
            self.spans += len(plan.span_starts)
            self.buffer_bytes_max = max(self.buffer_bytes_max, plan.buffer_bytes)

    def record(self, n_sources: int) -> dict:
        return {"rank": self.rank, "elapsed_s": MPI.Wtime() - self.t0, "sources": n_sources, "requests": self.requests,
                "bytes_wire": self.bytes_wire, "bytes_needed": self.bytes_needed, "batches": self.batches,
                "spans": self.spans, "buffer_bytes_max": self.buffer_bytes_max, "retries": self.retries,
                "throttled": self.throttled, "host": MPI.Get_processor_name()}


def cut_rank(comm, cfg: RunConfig, job, progress=None) -> tuple[list[dict], dict]:
    """Every rank: its sources in batches; (manifest entries, the rank's record)."""
    rank = comm.Get_rank()
    mine = list(job.assignment[rank])
    tally, entries = RankTally(rank), []
    if not mine:
        return entries, tally.record(0)
    options = {}
    if job.method == "presigned" and job.signer_args is not None:
        from ingest.transports.presign import url_signer

        options["refresh_url"] = url_signer(*job.signer_args)
    layout = job.layout
    contiguous = layout.storage == "contiguous"
    boxes = [job.sources[i].box for i in mine]
    groups = (batches(layout, boxes, range(len(mine)), cfg.cutout_batch_bytes, max_gap_bytes=job.max_gap_bytes)
              if contiguous else [[k] for k in range(len(mine))])
    read = _read_spans if contiguous else _read_chunked
    sink, durable = sinks.RankSink(cfg, rank), DurableBatch()
    headers = None
    if layout.kind == "fits":
        from ingest.outputs.cutout_headers import CutoutHeaders

        headers = CutoutHeaders(layout)
    try:
        with open_transport(job.read_source, job.method, threads=job.settings.threads, **transport_options(cfg),
                            **options) as transport:
            transport.adopt(job.info)
            for group in groups:
                chosen = [job.sources[mine[k]] for k in group]
                arrays, plan, stats = read(transport, job, cfg, [s.box for s in chosen])
                tally.add(stats, plan)
                paths = [_write(sink, job, source, raw, durable, headers) for source, raw in zip(chosen, arrays)]
                arrays = None  # the batch's buffer goes with its last reference
                durable.publish()
                batch_needed = sum(box_bytes(s.box, layout.itemsize) for s in chosen)
                done = []
                for source, path in zip(chosen, paths):
                    share = box_bytes(source.box, layout.itemsize) / max(1, batch_needed)
                    entry = source.entry(os.path.basename(path), os.path.getsize(path), outputs.file_crc32(path),
                                         requests=requests_touching(plan, layout, source.box) if plan else stats.requests,
                                         wire_bytes=round(stats.bytes_wire * share))
                    done.append(sink.done(path, entry))
                sink.journal_many(done)
                entries += done
                if progress is not None:
                    progress(len(chosen), stats.bytes_wire)
    finally:
        durable.discard()
        sink.close()
    return entries, tally.record(len(entries))
