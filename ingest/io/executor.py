"""Executor: carry out a Plan over a Transport with worker threads, straight into the output.

A request whose bytes are all needed is read directly into its place in the output array; one
with gaps is read into its thread's reusable buffer (at most chunk_bytes) and scattered by one
strided numpy copy. So one read holds at most output + threads x chunk_bytes.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ingest.core.planner import Plan
from ingest.io.retry import FaultLog, RetryPolicy, read_with_retries
from ingest.io.transports.base import Transport


@dataclass
class ReadStats:
    """What one execution did; times are seconds from the start of `execute`."""

    requests: int = 0
    bytes_needed: int = 0
    bytes_wire: int = 0
    elapsed_s: float = 0.0
    first_byte_s: float | None = None  # earliest time any reply started arriving
    retries: int = 0
    resumed_bytes: int = 0  # bytes resumed requests did not fetch twice
    faults: dict = field(default_factory=dict)  # fault kind -> count (recovered or not)
    request_s: list = field(default_factory=list, repr=False)  # per-request wall time, for percentiles

    @property
    def throughput_bytes_per_s(self) -> float:
        return self.bytes_needed / self.elapsed_s if self.elapsed_s > 0 else 0.0


class _Worker:
    """Per-thread state: one reusable scatter buffer, allocated on first use."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._buf: bytearray | None = None

    def buffer(self, nbytes: int) -> bytearray:
        if self._buf is None or len(self._buf) < nbytes:
            self._buf = bytearray(max(nbytes, min(self.plan.chunk_bytes, self.plan.wire_bytes)))
        return self._buf


def _run_one(plan: Plan, read, out: np.ndarray, flat: memoryview, i: int, worker: _Worker) -> tuple[float, int]:
    """Execute request i; return (its time to first byte, its size in bytes)."""
    lat = plan.lattice
    req = plan.request(i)
    if plan.byte_mode:
        run = int(np.ravel_multi_index(req.index, lat.counts)) if lat.counts else 0
        dst = run * lat.run_bytes + req.run_offset
        return read(flat[dst : dst + req.nbytes], req.offset), req.nbytes
    level = plan.level
    if req.contiguous:
        first = req.index + (0,) * (len(lat.counts) - level - 1)
        dst = int(np.ravel_multi_index(first, lat.counts)) * lat.run_bytes
        return read(flat[dst : dst + req.nbytes], req.offset), req.nbytes
    buf = worker.buffer(req.nbytes)
    ttfb_s = read(memoryview(buf)[: req.nbytes], req.offset)
    src = np.ndarray(
        shape=(req.units,) + lat.counts[level + 1 :] + (lat.run_bytes,),
        dtype=np.uint8,
        buffer=buf,
        strides=lat.strides[level:] + (1,),
    )
    dst_view = out[req.index[:-1] + (slice(req.index[-1], req.index[-1] + req.units),)]
    np.copyto(dst_view, src)
    return ttfb_s, req.nbytes


def lattice_view(array: np.ndarray, plan: Plan) -> np.ndarray:
    """View a C-contiguous output array as the plan's lattice of runs (uint8)."""
    lat = plan.lattice
    if not array.flags.c_contiguous or array.nbytes != lat.needed_bytes:
        raise ValueError("output must be C-contiguous and exactly the selection's size")
    return array.reshape(-1).view(np.uint8).reshape(lat.counts + (lat.run_bytes,))


def execute(
    plan: Plan,
    transport: Transport,
    array: np.ndarray,
    *,
    threads: int = 1,
    progress=None,
    retry: RetryPolicy = RetryPolicy(),
) -> ReadStats:
    """Fill `array` (the selection's raw bytes, C order) by running `plan` on `threads` threads.

    Transient failures are retried per `retry`, resuming broken ranges. `progress`, if given,
    is called with the byte count of each finished request (from worker threads). The first
    unrecoverable error stops all workers and is raised here.
    """
    out = lattice_view(array, plan)
    flat = memoryview(out.reshape(-1))
    n = plan.n_requests
    stats = ReadStats(bytes_needed=plan.needed_bytes)
    lock = threading.Lock()
    next_index = [0]
    failure: list[BaseException] = []
    faults = FaultLog()
    t0 = time.perf_counter()

    def on_fault(exc, will_retry: bool, resumed_bytes: int) -> None:
        with lock:
            faults.record(exc)
            if will_retry:
                faults.retries += 1
                faults.resumed_bytes += resumed_bytes

    def read(buffer: memoryview, offset: int) -> float:
        return read_with_retries(transport, buffer, offset, retry, on_fault)

    def work():
        worker = _Worker(plan)
        while True:
            with lock:
                if failure or next_index[0] >= n:
                    return
                i = next_index[0]
                next_index[0] += 1
            t_req = time.perf_counter()
            try:
                ttfb_s, nbytes = _run_one(plan, read, out, flat, i, worker)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                with lock:
                    failure.append(exc)
                return
            t_end = time.perf_counter()
            with lock:
                stats.requests += 1
                stats.bytes_wire += nbytes
                stats.request_s.append(t_end - t_req)
                first = t_req + ttfb_s - t0
                if stats.first_byte_s is None or first < stats.first_byte_s:
                    stats.first_byte_s = first
            if progress is not None:
                progress(nbytes)

    n_threads = max(1, min(threads, n))
    if n_threads == 1:
        work()
    else:
        pool = [threading.Thread(target=work, name=f"ingest-read-{k}", daemon=True) for k in range(n_threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    stats.elapsed_s = time.perf_counter() - t0
    stats.retries, stats.resumed_bytes, stats.faults = faults.retries, faults.resumed_bytes, dict(faults.faults)
    if failure:
        raise failure[0]
    return stats
