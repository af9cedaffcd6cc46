"""One rank's share of a cut-out job: its stripe of the cube streamed once, band by band.

The rank plans its stripe (`core.cutstripes.plan_stripe`): bands of planes as large as the memory
budget (`cutout_batch_bytes`) allows, each read either whole in long requests or as its
cut-outs' merged spans, whichever the cost model predicts sooner. One buffer is allocated for the
largest band; each band's requests land in it (after the planes carried over from the band before
are moved to its front), then every cut-out whose last plane the band read is gathered from it
(or from its partial array, filled band by band) and written under a temporary name. Files are
made durable by one sync per group and renamed into place (`ingest.atomic.DurableBatch`), and
only then journalled. A group closes at PUBLISH_FILES cut-outs or PUBLISH_AFTER_S of work since its
first, whichever comes first: the count bounds its memory in the page cache, the time what a
signal or a kill can lose. A group is published on a thread of its own while the rank cuts the next
one (a band's last group too, while the next band or tile is read), so the disk writes while the
CPU cuts; at most one group is in flight, every group is published before the rank's work is
counted done (`RankOutput`, one per rank across all its runs), and a group that fails to publish
raises on the rank's thread and leaves no file. At SIGINT or SIGTERM (`progress.Stop`) the rank cuts no more:
the group in flight is published and journalled, the cut-outs not yet handed over are removed.
Chunked HDF5 data is read per cut-out through its chunks instead.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
from mpi4py import MPI

from ingest.atomic import DurableBatch
from ingest.buffers import return_freed_heap
from ingest.config import RunConfig
from ingest.config.settings import retry_policy, transport_options
from ingest.core.cutplan import box_bytes
from ingest.core.cutstripes import band_cutouts, carry_over, plan_stripe
from ingest.driver.cutouts import sinks
from ingest.driver.cutouts.progress import STOP
from ingest.engine.executor import run_requests
from ingest.outputs import cutouts as outputs
from ingest.transports import open_transport

PUBLISH_FILES = 512  # a group's most cut-outs, made durable together by one sync
PUBLISH_AFTER_S = 1.0  # a group's most work, in seconds from its first cut-out: what a stopped job loses


def _write(sink, job, source, raw, batch: DurableBatch, headers) -> str:
    path = sink.path(source.file_stem + job.ext)
    if job.layout.kind == "hdf5":
        from ingest.formats.h5_cutout import write_h5_subcube

        write_h5_subcube(path, job.layout, source.box, raw, source_label=job.layout.source)
    else:
        from ingest.outputs.subcubes import fits_text, write_cutout

        write_cutout(path, source.box, raw, job.layout, object_name=fits_text(source.name), batch=batch,
                     headers=headers)
    return path


class RankTally:
    """What one rank did, for its record in the report."""

    def __init__(self, rank: int, budget_bytes: int):
        self.rank, self.t0 = rank, MPI.Wtime()
        self.budget_bytes = budget_bytes  # its bands' memory budget (core.cutstripes.rank_budget_bytes)
        self.requests = self.bytes_wire = self.bytes_needed = self.retries = self.throttled = 0
        self.read_s = self.cut_s = 0.0
        self.plan = None
        self.memory_bound_bytes = 0

    def add(self, stats) -> None:
        self.requests += stats.requests
        self.bytes_wire += stats.bytes_wire
        self.bytes_needed += stats.bytes_needed
        self.retries += stats.retries
        self.throttled += stats.throttled  # replies asking to slow down: not faults

    def record(self, n_sources: int) -> dict:
        out = {"rank": self.rank, "elapsed_s": MPI.Wtime() - self.t0, "sources": n_sources, "requests": self.requests,
               "bytes_wire": self.bytes_wire, "bytes_needed": self.bytes_needed, "retries": self.retries,
               "throttled": self.throttled, "read_s": self.read_s, "cut_s": self.cut_s,
               "memory_bound_bytes": self.memory_bound_bytes, "band_budget_bytes": self.budget_bytes,
               "host": MPI.Get_processor_name()}
        plan = self.plan
        if plan is not None:
            out.update(plan_choice=plan.choice_text(), buffer_bytes_max=plan.buffer_bytes,
                       bands=[{"planes": [b.lo, b.hi], "kept_from": b.keep_from, "mode": b.mode,
                               "requests": b.n_requests, "bytes_wire": b.wire_bytes,
                               "partial_bytes": b.partial_bytes, **{k: (round(v, 4) if isinstance(v, float) else v)
                                                                    for k, v in b.choice.items()}}
                              for b in plan.bands])
        return out


class _Finisher:
    """Cut-outs written under temporary names, made durable and journalled in groups: a group is
    handed over at PUBLISH_FILES cut-outs or PUBLISH_AFTER_S (by `clock`, seconds) since its first,
    and published (synced, renamed, uploaded with --dest, journalled) on one worker thread while the
    rank writes the next; its entries and progress are taken back on the rank's own thread, the
    only one that uses MPI. Each change of hands is held against signals (`stop.held`), and after a
    signal no group is started: what is pending stays for `close` to remove."""

    def __init__(self, sink, durable: DurableBatch, entries: list, progress, clock=time.monotonic, stop=STOP):
        self.sink, self.durable, self.entries, self.progress = sink, durable, entries, progress
        self.clock, self.stop = clock, stop
        self.pending = []  # (source, path, requests, wire_bytes)
        self._first_s = 0.0  # clock() when the pending group's first cut-out came
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="publish")
        self._in_flight = None  # (future of the entries, the batch it publishes)

    def add(self, source, path: str, requests: float, wire_bytes: int) -> None:
        with self.stop.held():
            if not self.pending:
                self._first_s = self.clock()
            self.pending.append((source, path, requests, wire_bytes))
        if len(self.pending) >= PUBLISH_FILES or self.clock() - self._first_s >= PUBLISH_AFTER_S:
            self.hand_over()

    def flush(self) -> None:
        """Every file added so far published and journalled."""
        self.hand_over()
        self._take_back()

    def close(self) -> None:
        """On the way out, error, signal or not: wait for the group in flight and take its entries
        back if it was published, else remove what it wrote. Signals wait until this is done."""
        with self.stop.held():
            if self._in_flight is not None:
                future, batch = self._in_flight
                wait([future])  # its error, if any, is not raised over the one being handled
                self._in_flight = None
                if future.exception() is None:
                    self._count(future.result())
                batch.discard()
            self._worker.shutdown(wait=True)

    def hand_over(self) -> None:
        """The pending group to the worker (after taking back the one in flight): at most one in flight."""
        self._take_back()  # one group in flight at most: its files' memory is the page cache's
        with self.stop.held():
            if not self.pending or self.stop.requested:
                return
            group, self.pending = self.pending, []
            batch = self.durable.take()
            self._in_flight = (self._worker.submit(self._publish, group, batch), batch)

    def _publish(self, group, batch: DurableBatch) -> list[dict]:
        """The worker: files and the store only."""
        batch.publish()
        done = [self.sink.done(path, source.entry(os.path.basename(path), os.path.getsize(path),
                                                  self._crc32(batch, path), requests=requests, wire_bytes=wire))
                for source, path, requests, wire in group]
        self.sink.journal_many(done)
        return done

    @staticmethod
    def _crc32(batch: DurableBatch, path: str) -> int | None:
        """What the batch summed as it wrote the file, or (an HDF5 cut-out, written by h5py) read back."""
        crc = batch.crc32_of(path)
        return outputs.file_crc32(path) if crc is None else crc

    def _take_back(self) -> None:
        if self._in_flight is None:
            return
        future, _ = self._in_flight
        try:
            wait([future])  # a signal here ends the wait; close() waits again, held
            with self.stop.held():
                done = future.result()  # the worker's error raised here, on the rank's thread
                self._in_flight = None
                self._count(done)
        except BaseException:
            self.close()  # the worker ends before its files go
            raise

    def _count(self, done: list[dict]) -> None:
        self.entries += done
        if self.progress is not None:
            self.progress(len(done), sum(e["wire_bytes"] for e in done))


def _stream(transport, job, cfg: RunConfig, sources, write, finisher: _Finisher, tally: RankTally) -> None:
    """Contiguous data: the rank's stripe, band by band (see the module docstring)."""
    s, layout = job.settings, job.layout
    boxes = [src.box for src in sources]
    plan = plan_stripe(layout, boxes, split=job.split_axis, budget_bytes=tally.budget_bytes,
                       max_gap_bytes=job.max_gap_bytes, chunk_bytes=s.chunk_bytes, cost=s.cost, threads=s.threads)
    tally.plan, tally.memory_bound_bytes = plan, plan.memory_bytes
    return_freed_heap()  # the plan's per-source temporaries: freed, but in RSS under the buffer
    buffer = np.empty(plan.buffer_bytes, np.uint8)
    partials = {}
    for band in plan.bands:
        t0 = MPI.Wtime()
        carry_over(buffer, band)
        held = band.held
        at = held.request_buffer_offsets()

        def one(i, worker):
            n = int(held.request_stops[i] - held.request_starts[i])
            yield memoryview(buffer)[int(at[i]): int(at[i]) + n], int(held.request_starts[i])
            return n

        if band.n_requests:
            tally.add(run_requests(band.n_requests, one, transport, needed_bytes=held.needed_bytes,
                                   buffer_bytes=s.chunk_bytes, wire_bytes=band.wire_bytes, threads=s.threads,
                                   retry=retry_policy(cfg)))
        t1 = MPI.Wtime()
        for k, raw in band_cutouts(band, buffer, layout, boxes, partials):
            with finisher.stop.held():  # a signal lets the file be written and counted first
                path = write(sources[k], raw)
                raw = None  # one gathered cut-out at a time
                finisher.add(sources[k], path, round(float(plan.source_requests[k]), 3),
                             int(round(plan.source_wire_bytes[k])))
        finisher.hand_over()  # published while the next band (or tile) is read; the rank's end waits
        tally.read_s, tally.cut_s = tally.read_s + (t1 - t0), tally.cut_s + (MPI.Wtime() - t1)


def _chunked(transport, job, cfg: RunConfig, sources, write, finisher: _Finisher, tally: RankTally) -> None:
    """Chunked (HDF5) data: each cut-out through its chunks, one plan each."""
    from ingest.api.read import plan_with, read_selection
    from ingest.core.selection import box_to_region

    tally.memory_bound_bytes = max(2 * box_bytes(src.box, job.layout.itemsize) for src in sources)
    for source in sources:
        sel, plan = plan_with(job.layout, box_to_region(source.box), job.settings)
        raw, stats = read_selection(transport, job.layout, sel, plan, convert=False, threads=job.settings.threads,
                                    retry=retry_policy(cfg))
        tally.add(stats)
        with finisher.stop.held():
            finisher.add(source, write(source, raw), stats.requests, stats.bytes_wire)
    finisher.hand_over()


class RankOutput:
    """Where one rank's cut-outs go across all its runs (one cube's, or one per tile of a
    collection): one sink and journal, one DurableBatch and one publish thread, so a run of one
    tile costs its cut-outs, not a sink, a thread and a sync of its own. `entries` fills as groups
    are published; `close` publishes what is pending and leaves the sink."""

    def __init__(self, cfg: RunConfig, rank: int, progress=None):
        self.entries: list[dict] = []
        self.sink, self.durable = sinks.RankSink(cfg, rank), DurableBatch()
        self.finisher = _Finisher(self.sink, self.durable, self.entries, progress)

    def __enter__(self) -> "RankOutput":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is None:
                self.finisher.flush()  # the last group, published and journalled
        finally:
            with STOP.held():  # what was published is journalled, the rest removed, before a signal ends the rank
                self.finisher.close()
                self.durable.discard()
                self.sink.close()


def cut_rank(comm, cfg: RunConfig, job, sources, progress=None, budget_bytes: int | None = None,
             output: RankOutput | None = None) -> tuple[list[dict], dict]:
    """Every rank: its `sources` (CutoutSource, in object order); (manifest entries, the rank's
    record). `budget_bytes`: its bands' budget (default the config's cutout_batch_bytes). With
    `output` (a run of one tile among the rank's others) the cut-outs go to it and are published
    by its close: the entries returned are those published so far."""
    rank = comm.Get_rank()
    tally = RankTally(rank, cfg.cutout_batch_bytes if budget_bytes is None else budget_bytes)
    if not sources:
        return [], tally.record(0)
    if output is None:
        with RankOutput(cfg, rank, progress) as own:
            _cut(cfg, job, sources, own, tally)
        return own.entries, tally.record(len(own.entries))
    _cut(cfg, job, sources, output, tally)
    return output.entries, tally.record(len(sources))


def _cut(cfg: RunConfig, job, sources, output: RankOutput, tally: RankTally) -> None:
    """`sources` of one cube (`job`) read through a transport of their own, written to `output`."""
    options = {}
    if job.method == "presigned" and job.signer_args is not None:
        from ingest.transports.presign import url_signer

        options["refresh_url"] = url_signer(*job.signer_args)
    headers = None
    if job.layout.kind == "fits":
        from ingest.outputs.cutout_headers import CutoutHeaders

        headers = CutoutHeaders(job.layout)
    sink, durable = output.sink, output.durable
    read = _stream if job.layout.storage == "contiguous" else _chunked
    with open_transport(job.read_source, job.method, threads=job.settings.threads, **transport_options(cfg),
                        **options) as transport:
        transport.adopt(job.info)
        read(transport, job, cfg, sources, lambda src, raw: _write(sink, job, src, raw, durable, headers),
             output.finisher, tally)
