"""Executor: carry out a Plan over a Transport with worker threads, straight into the output.

A request whose bytes are all needed is read directly into its place in the destination (the
output array, or a mapped window of an output file); one with gaps is read into its thread's
reusable buffer (at most chunk_bytes) and scattered by one strided numpy copy. So one read holds
at most threads x chunk_bytes beside its destination, and nothing beside it when the destination
is a file (`engine.destination`).
"""
from __future__ import annotations

import threading
import time
import numpy as np

from ingest.core.lattice import Plan
from ingest.core.tuning import THREADS_MAX
from ingest.engine.destination import ArrayDestination, Destination
from ingest.engine.multi import run_concurrent
from ingest.engine.stats import ReadStats, Worker, finish_stats, record_request
from ingest.engine.throttle import Limiter, limiter_for
from ingest.transports.retry import FaultLog, RetryPolicy, read_with_retries
from ingest.transports.base import BULK_READ_BYTES, Transport


def _run_one(plan: Plan, dest: Destination, i: int, worker: Worker):
    """Request i into `dest`, as a request generator (see `run_requests`): it yields its one read
    and returns its size in bytes. The destination window stays open across the yield, so the
    read lands in it wherever the read is carried out."""
    lat = plan.lattice
    req = plan.request(i)
    if plan.byte_mode or req.contiguous:
        lo = dest.offset(req.index) + (req.run_offset if plan.byte_mode else 0)
        with dest.window(lo, lo + req.nbytes) as win:
            yield memoryview(win), req.offset
        return req.nbytes
    level = plan.level
    lo = dest.offset(req.index)  # the request's first run (later axes at index 0)
    buf = worker.buffer(req.nbytes)
    yield memoryview(buf)[: req.nbytes], req.offset
    shape = (req.units,) + lat.counts[level + 1 :] + (lat.run_bytes,)
    src = np.ndarray(shape=shape, dtype=np.uint8, buffer=buf, strides=lat.strides[level:] + (1,))
    span = (req.units - 1) * dest.strides[level] + dest.unit_spans[level]
    with dest.window(lo, lo + span) as win:
        _scatter(src, win, dest.strides[level:])
    return req.nbytes


def _scatter(src: np.ndarray, win: np.ndarray, strides: tuple[int, ...]) -> None:
    """Copy the needed runs into the window (a function of its own so the view dies with it and
    a mapped window can close)."""
    np.copyto(np.ndarray(shape=src.shape, dtype=np.uint8, buffer=win, strides=strides + (1,)), src)


def execute(
    plan: Plan,
    transport: Transport,
    array: np.ndarray | Destination,
    *,
    threads: int = 1,
    progress=None,
    retry: RetryPolicy = RetryPolicy(),
    order: str = "sequential",
) -> ReadStats:
    """Fill `array` (the selection's raw bytes, C order), or a Destination such as a mapped output
    file, by running `plan` on `threads` threads.

    Transient failures are retried per `retry`, resuming broken ranges. `progress`, if given,
    is called with the byte count of each finished request (from worker threads). The first
    unrecoverable error stops all workers and is raised here.
    """
    dest = array if isinstance(array, Destination) else ArrayDestination(array, plan.lattice)
    return run_requests(plan.n_requests, lambda i, worker: _run_one(plan, dest, i, worker), transport,
                        needed_bytes=plan.needed_bytes, buffer_bytes=plan.request_bytes_max,
                        wire_bytes=plan.wire_bytes,
                        threads=threads, progress=progress, retry=retry, order=order)


def request_order(n: int, order: str) -> np.ndarray | range:
    """The order requests 0..n-1 are issued in: file order, or a random permutation of them
    (seed 000's access-order experiment: the same requests, only their order differs)."""
    if order == "sequential":
        return range(n)
    if order == "random":
        return np.random.default_rng().permutation(n)
    raise ValueError(f"order: {order!r} is not sequential or random")


def run_requests(n: int, do_one, transport: Transport, *, needed_bytes: int, buffer_bytes: int, threads: int = 1,
                 progress=None, retry: RetryPolicy = RetryPolicy(), order: str = "sequential",
                 wire_bytes: int | None = None, limiter: Limiter | None = None) -> ReadStats:
    """Run requests 0..n-1 with `threads` in flight, in `order`.

    `do_one(i, worker)` returns request i as a generator: it yields each read it needs as
    (buffer, offset), is sent back that read's seconds to first byte, and returns the bytes it
    put on the wire. Whatever runs the reads, the request's own code (scatter, decode) is the same:
    here, `threads` Python threads run them through `transport.read_into`; a transport that
    keeps many reads in flight from one thread (`concurrent`) runs them in `ingest.engine.multi`.
    Each request runs with a Worker whose buffer starts at buffer_bytes. Transient failures are
    retried per `retry`; the first unrecoverable error stops everything and is raised here.
    Reads in flight follow `limiter` (default: the transport's, `limiter_for`), which a
    throttling store lowers: `threads` (or the depth) is its ceiling, not a fixed count.
    """
    stats = ReadStats(bytes_needed=needed_bytes)
    faults = FaultLog()
    sequence = request_order(n, order)
    t0 = time.perf_counter()
    # Many small requests go to a concurrent transport's one-thread loop; bulk ones (large on
    # average) to threads, where the transport's read_into copies them in parallel.
    wire_bytes = needed_bytes if wire_bytes is None else wire_bytes
    if transport.concurrent and n > 0 and wire_bytes < n * BULK_READ_BYTES:
        depth = max(1, threads)
        run_concurrent(sequence, do_one, transport, stats, faults, t0, depth=depth,
                       buffer_bytes=buffer_bytes, progress=progress, retry=retry,
                       limiter=_ceiling(limiter, transport, depth))
    else:
        if transport.concurrent:
            threads = min(threads, THREADS_MAX)  # its deeper concurrency is for small requests
        threads = max(1, threads)
        _run_threaded(sequence, do_one, transport, stats, faults, t0, threads=threads, buffer_bytes=buffer_bytes,
                      progress=progress, retry=retry, limiter=_ceiling(limiter, transport, threads))
    return stats


def _ceiling(limiter: Limiter | None, transport: Transport, requests: int) -> Limiter:
    """The limiter this execution follows, its ceiling set to the requests it may keep in flight."""
    if limiter is None:
        return limiter_for(transport, requests)
    limiter.set_ceiling(requests)
    return limiter


def _run_threaded(sequence, do_one, transport, stats, faults, t0, *, threads, buffer_bytes, progress, retry, limiter):
    n = len(sequence)
    lock = threading.Lock()
    next_index = [0]
    failure: list[BaseException] = []

    def on_fault(exc, will_retry: bool, resumed_bytes: int) -> None:
        with lock:
            faults.note(exc, will_retry, resumed_bytes)

    def work():
        worker = Worker(buffer_bytes)
        while True:
            with lock:
                if failure or next_index[0] >= n:
                    return
                i = int(sequence[next_index[0]])
                next_index[0] += 1
            t_req = time.perf_counter()
            try:
                first_byte_s, nbytes = _drive(do_one(i, worker), transport, retry, on_fault, limiter)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                with lock:
                    failure.append(exc)
                return
            with lock:
                record_request(stats, t0, t_req, first_byte_s, nbytes)
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
    finish_stats(stats, faults, t0, limiter)
    if failure:
        raise failure[0]


def _drive(request, transport, retry: RetryPolicy, on_fault, limiter: Limiter) -> tuple[float, int]:
    """Run one request generator to its end on this thread: (its first read's time to first
    byte, its bytes on the wire). Each read waits for room in `limiter` first."""
    first_byte_s = None
    try:
        read = next(request)
        while True:
            ttfb_s = read_with_retries(transport, *read, retry, on_fault, gate=limiter)
            if first_byte_s is None:
                first_byte_s = ttfb_s
            # Drop our view of the buffer first: the request may now close a mapped window on it.
            read = None
            read = request.send(ttfb_s)
    except StopIteration as done:
        return (first_byte_s or 0.0), done.value
    except BaseException:
        request.close()  # its windows close now, not whenever it is collected
        raise
