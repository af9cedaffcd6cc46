"""Probe a source before reading it: latency L, per-stream bandwidth B, and whether streams add up.

A few rounds of requests, all inside the cube's data, most informative first, so a caller can
stop after any round when the rest would cost more than they could save (ingest.engine.autotune does):

1. stream: one chunk-sized read; its time to first byte is L, its transfer rate one stream's B
   (read again, longer, when it was cut to a budget sized for a slower link than it found:
   `grow_stream`);
2. latency: two small reads in a row (L again: the whole of a small request, request to last
   byte, which is what one occupies; without the server's work for a big range), then
   small reads at once - on 4 threads, or for an engine that keeps many requests in flight from
   one thread, LATENCY_WAVE of them in its own loop, as the read will issue them: how far
   latencies overlap (on a real network they do; when the "latency" is a busy server's or
   client's CPU, they do not), and for such an engine its CPU per request in that loop;
3. streams: the chunk-sized read on two connections at once: does a second stream add its B
   (a per-connection cap, like Toxiproxy's or a TCP window over a long path) or share one link?
   (Both measures are taken again, once, when the answer falls in between.)

Every round also takes this process's CPU time (all threads), so the client's own cost per
request and per byte is known: on a fast link it, not the network, bounds a read.
What a round that did not run would have measured is assumed: latencies overlap, a second stream
adds nothing (so no plan leans on parallel streams nobody measured), and the client's CPU per
byte is ASSUMED_CPU_PER_BYTE_S.
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

import numpy as np

from ingest import buffers
from ingest.core.linkprobe import (ASSUMED_CPU_PER_BYTE_S, LATENCY_THREADS, LATENCY_WAVE, ROUNDS, SCALING_FRACTION,
                                   LinkProbe)
from ingest.core.rounds import StreamSpan
from ingest.transports.base import Transport

MiB = 1 << 20
# Below this a "bandwidth" read measures latency again (TCP slow start, a proxy's first chunk).
MIN_PROBE_READ_BYTES = 256 << 10
CPU_PER_BYTE_MIN_READ_BYTES = 1 * MiB  # a smaller read's CPU per byte drowns in its CPU per request
# Two streams that move at most this much more than one share the link (within a round's noise);
# more means a per-connection cap, which more streams get round (BENCHMARKS: Rounds).
SHARED_SCALING_MAX = 1.15


def _timed_read(transport: Transport, offset: int, nbytes: int) -> tuple[float, float]:
    """(seconds to first byte, total seconds) of one ranged read, into pages new to the process
    as a job's output is (the CPU a byte costs includes its page's first touch)."""
    buf = buffers.empty(nbytes, np.uint8, fresh=True)
    t0 = time.perf_counter()
    ttfb_s = transport.read_into(memoryview(buf), offset)
    return ttfb_s, time.perf_counter() - t0


def _concurrently(fn, n: int) -> list:
    """Run fn(k) for k < n on n threads; return results in order; re-raise the first error."""
    results: list = [None] * n
    errors: list[BaseException] = []

    def one(k: int) -> None:
        try:
            results[k] = fn(k)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    workers = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return results


class LinkProber:
    """Runs the probe's rounds one at a time; `result()` is the probe so far."""

    def __init__(self, transport: Transport, data_offset: int, data_bytes: int, *, small_bytes: int = 4096,
                 large_bytes: int = 8 * MiB, streams: int = 2, latency_s: float | None = None,
                 cpu_per_request_s: float = 0.0):
        """latency_s and cpu_per_request_s: what an earlier small request (the header's) showed,
        until the rounds measure them."""
        if data_bytes < (streams + 1) * MIN_PROBE_READ_BYTES:
            raise ValueError(f"probe_link: {data_bytes} data bytes is too little to measure a link "
                             f"(need {(streams + 1) * MIN_PROBE_READ_BYTES})")
        self.transport = transport
        self.data_offset = data_offset
        self.streams = streams
        # Every read stays inside the data: streams + 1 large reads laid end to end.
        self._large_cap = max(MIN_PROBE_READ_BYTES, data_bytes // (streams + 1))
        self._large_wanted = large_bytes  # what the caller asked for, before a budget cut it
        self.large_bytes = max(MIN_PROBE_READ_BYTES, min(large_bytes, self._large_cap))
        self.small_bytes = min(small_bytes, self.large_bytes)
        self._span = max(1, data_bytes - self.small_bytes)
        self._n_small = 0
        self._large_bytes_read = 0  # summed: large reads' sizes differ when the stream read grows
        self._spent_s = 0.0
        self._small_requests_s = [] if latency_s is None else [latency_s]  # small requests' times, first to last byte
        self._large_first_byte_s: float | None = None
        self._cpu_per_request_s = cpu_per_request_s
        self._cpu_per_byte_s = ASSUMED_CPU_PER_BYTE_S
        self._stream_bw: float | None = None
        self._parallel_bw: float | None = None
        self._concurrency: float | None = None
        self._on_session = transport.concurrent  # waves in the engine's own loop
        self._wave = LATENCY_WAVE if self._on_session else LATENCY_THREADS
        self.measured: list[str] = []
        self.skipped: list[str] = []  # rounds passed over (not worth their time), later ones may still run

    # -- rounds ----------------------------------------------------------------------------------
    @property
    def spent_s(self) -> float:
        """Wall time of the rounds run so far."""
        return self._spent_s

    @property
    def next_round(self) -> str | None:
        return next((r for r in ROUNDS if r not in self.measured and r not in self.skipped), None)

    def skip_round(self) -> None:
        """Pass over the next round; the ones after it may still run."""
        self.skipped.append(self.next_round)

    def next_round_s(self, latency_s: float, stream_bytes_per_s: float) -> float:
        """What the next round should cost on a link with this latency and stream bandwidth."""
        return self.round_s(self.next_round, latency_s, stream_bytes_per_s)

    def until_s(self, name: str, latency_s: float, stream_bytes_per_s: float, overlap: float | None = None) -> float:
        """What the rounds still to run up to and including `name` should cost (see round_s)."""
        todo = [r for r in ROUNDS[:ROUNDS.index(name) + 1] if r not in self.measured]
        return sum(self.round_s(r, latency_s, stream_bytes_per_s, overlap) for r in todo)

    def round_s(self, name: str | None, latency_s: float, stream_bytes_per_s: float,
                overlap: float | None = None) -> float:
        """What round `name` should cost. The latency round is two small requests in a row, then
        two waves of them in flight, of which `overlap` overlap (None: the whole wave at once).
        Priced at once, a wave of 16 costs one latency; where client and server share a few
        cores it takes up to 16 of them; hence `overlap`."""
        large_s = latency_s + self.large_bytes / stream_bytes_per_s
        at_once = float(self._wave) if overlap is None else max(1.0, min(float(self._wave), overlap))
        latency_round_s = 2 * latency_s + 2 * latency_s * self._wave / at_once
        return {"stream": large_s, "latency": latency_round_s, "streams": large_s}.get(name, 0.0)

    def fit_large_bytes(self, within_s: float, latency_s: float, stream_bytes_per_s: float) -> None:
        """Shrink the chunk-sized reads, before the first, so one takes about `within_s` (not
        below MIN_PROBE_READ_BYTES: next_round_s then says the round does not fit)."""
        fits = (within_s - latency_s) * stream_bytes_per_s
        self._cut_large(int(min(fits, self.large_bytes)))

    def size_first_read(self, nbytes: int) -> None:
        """Before the first read: the chunk-sized reads nbytes long, within the size the prober
        was made with and the span's share (not below MIN_PROBE_READ_BYTES)."""
        self._cut_large(min(nbytes, self._large_wanted, self._large_cap))

    def _cut_large(self, nbytes: int) -> None:
        """Before the first chunk-sized read only: those reads nbytes long (not below
        MIN_PROBE_READ_BYTES), the small ones no longer than they."""
        if self._large_bytes_read == 0:
            self.large_bytes = max(MIN_PROBE_READ_BYTES, nbytes)
            self.small_bytes = min(self.small_bytes, self.large_bytes)

    def grow_stream(self, within_s: float, latency_s: float, stream_bytes_per_s: float, max_bytes: int) -> bool:
        """Measure one stream again with a longer read, when the stream round's read was cut to a
        budget sized for a slower link than it found and at least twice its bytes now fit in
        `within_s`. A read of well under a millisecond is mostly its start and whatever else ran
        on the cores meanwhile, and that noise only ever slows it: 0.8 MB reads on loopback gave
        1.1-1.5 GB/s where 1-8 MiB reads give 2-3.5. The faster of the two reads counts."""
        size = int(min((within_s - latency_s) * stream_bytes_per_s, max_bytes, self._large_cap))
        if "stream" not in self.measured or size < 2 * self.large_bytes:
            return False
        first_bw = self._stream_bw or 0.0
        self.large_bytes = size
        t0 = time.perf_counter()
        self._stream()
        self._spent_s += time.perf_counter() - t0
        self._stream_bw = max(first_bw, self._stream_bw)
        return True

    def run_round(self) -> None:
        name = self.next_round
        t0 = time.perf_counter()
        getattr(self, f"_{name}")()
        self._spent_s += time.perf_counter() - t0
        self.measured.append(name)

    def run_all(self) -> LinkProbe:
        while self.next_round:
            self.run_round()
        return self.result()

    def _small(self, k: int) -> tuple[float, float]:
        self._n_small += 1
        return _timed_read(self.transport, self._small_offset(k), self.small_bytes)

    def _small_offset(self, k: int) -> int:
        # spread through the cube so one cached block does not answer them all
        return self.data_offset + (k * 7919 * self.small_bytes) % self._span

    def _large(self, k: int) -> tuple[float, float]:
        self._large_bytes_read += self.large_bytes
        return _timed_read(self.transport, self.data_offset + k * self.large_bytes, self.large_bytes)

    def _stream(self) -> None:
        cpu0 = time.process_time()
        ttfb_s, total_s = self._large(0)
        cpu_s = time.process_time() - cpu0
        self._large_first_byte_s = ttfb_s
        self._stream_bw = self.large_bytes / max(total_s - ttfb_s, 1e-6)
        if self.large_bytes >= CPU_PER_BYTE_MIN_READ_BYTES:
            self._cpu_per_byte_s = max(0.0, cpu_s - self._cpu_per_request_s) / self.large_bytes

    def _latency(self) -> None:
        cpu0 = time.process_time()
        sequential = [self._small(k) for k in range(2)]
        self._cpu_per_request_s = (time.process_time() - cpu0) / 2
        # A small request occupies its connection from request to last byte, so that whole time is
        # its latency: a server may send the headers before it has read the data (versitygw does),
        # so the first byte's time would understate it.
        self._small_requests_s += [total for _, total in sequential]
        one_s = statistics.median(total for _, total in sequential)
        n = self._wave
        session = self.transport.open_session(n) if self._on_session else None
        walls = []
        try:
            for wave in range(2):  # the first wave also opens the other connections
                first_k = 2 + n * wave
                cpu0, t0 = time.process_time(), time.perf_counter()
                if session is None:
                    _concurrently(lambda k: self._small(first_k + k), n)
                else:
                    self._small_wave(session, first_k, n)
                walls.append(time.perf_counter() - t0)
                if session is not None and wave == 1:  # the engine's own loop, connections open
                    self._cpu_per_request_s = (time.process_time() - cpu0) / n
        finally:
            if session is not None:
                session.close()
        self._concurrency = max(1.0, min(float(n), n * one_s / max(min(walls), 1e-6)))

    def _small_wave(self, session, first_k: int, n: int) -> None:
        """n small reads in flight at once on one of the transport's sessions (ingest.engine.multi's
        interface), as a read on this engine issues them."""
        buffers = [bytearray(self.small_bytes) for _ in range(n)]
        for k in range(n):
            self._n_small += 1
            session.start(k, memoryview(buffers[k]), self._small_offset(first_k + k))
        left = n
        while left:
            for _key, _ttfb_s, error in session.wait(1.0):
                if error is not None:
                    raise error
                left -= 1

    def _streams(self) -> None:
        """The streams at once. When they measure between a shared link and streams adding up,
        one stream and the streams at once are read again, once, and the faster measure of each
        counts (as in grow_stream): whatever else runs on the cores only ever slows a read, and a
        slowed pair deflates the ratio as a slowed single read inflates it. Read once, a pair slowed
        on a per-connection cap can look like a shared link and have the tuner choose a few threads
        where many would read faster (BENCHMARKS: Predicted against measured)."""
        self._parallel_bw = self._parallel_once()
        if SHARED_SCALING_MAX <= self._parallel_bw / self._stream_bw < SCALING_FRACTION * self.streams:
            ttfb_s, total_s = self._large(0)
            self._stream_bw = max(self._stream_bw, self.large_bytes / max(total_s - ttfb_s, 1e-6))
            self._parallel_bw = max(self._parallel_bw, self._parallel_once())

    def _parallel_once(self) -> float:
        # Each stream's transfer time excludes its own wait for the first byte.
        timings = _concurrently(lambda k: self._large(k + 1), self.streams)
        return self.streams * self.large_bytes / max(max(total - ttfb for ttfb, total in timings), 1e-6)

    @property
    def latency_s(self) -> float | None:
        """Small requests' median time, request to last byte; else a large read's time to first
        byte (which includes the server's work for its range)."""
        if self._small_requests_s:
            return statistics.median(self._small_requests_s)
        return self._large_first_byte_s

    def result(self) -> LinkProbe:
        if not self.measured:
            raise ValueError("probe: no round has run")
        stream_bw = self._stream_bw or 0.0
        return LinkProbe(
            latency_s=self.latency_s,
            stream_bandwidth_bytes_per_s=stream_bw,
            parallel_bandwidth_bytes_per_s=self._parallel_bw or stream_bw,
            streams=self.streams,
            probe_bytes=self._n_small * self.small_bytes + self._large_bytes_read,
            probe_s=self.spent_s,
            latency_concurrency=self._concurrency,
            latency_wave=self._wave,
            measured=tuple(self.measured),
            cpu_per_request_s=self._cpu_per_request_s,
            cpu_per_byte_s=self._cpu_per_byte_s,
        )


def probe_link(transport: Transport, data_offset: int, data_bytes: int, *, small_bytes: int = 4096,
               large_bytes: int = 8 * MiB, streams: int = 2) -> LinkProbe:
    """Every round: L and B from reads spread over [data_offset, data_offset + data_bytes)."""
    return LinkProber(transport, data_offset, data_bytes, small_bytes=small_bytes, large_bytes=large_bytes,
                      streams=streams).run_all()


def warm_connections(transport: Transport, offset: int, streams: int, nbytes: int = 4096) -> None:
    """Open `streams` connections with a small read each, so a timed read after it measures the
    pipe, not TCP's handshakes (a client opens its connections lazily, on the first request)."""
    _concurrently(lambda k: _timed_read(transport, offset + k * nbytes, nbytes), streams)


@dataclass(frozen=True)
class RoundRead:
    """One rank's part of a round (ingest.driver.probe_rounds)."""

    wall_s: float  # from the start to the last stream's last byte: start-up included
    spans: tuple[StreamSpan, ...]  # each stream's two parts, from the start (core.rounds prices them)
    cpu_s: float  # this process's CPU seconds over the whole read


# The first part of each stream's bytes warms it up (threads, buffers, a rank scheduled late on
# busy cores): the rate is timed over the rest, and the start-up is what the first part cost
# beyond it.
WARMUP_FRACTION = 0.25


def timed_parallel_read(transport: Transport, offset: int, nbytes: int, streams: int) -> RoundRead:
    """Read [offset, offset + nbytes) as `streams` streams at once, each stream as two requests
    on its connection, a short one and the rest: one rank's part in a round where many ranks
    read together. Each stream's span is timed from the start: its second request's first byte
    (each request's wait for its first byte is latency, which the probe measures apart) and its
    last byte."""
    streams = max(1, min(streams, nbytes // (MIN_PROBE_READ_BYTES // 4) or 1))  # parts of >= 64 KiB
    part = -(-nbytes // streams)

    def stream(k: int) -> StreamSpan:
        start, length = offset + k * part, min(part, nbytes - k * part)
        head = max(1, min(length - 1, int(length * WARMUP_FRACTION))) if length > 1 else length
        _timed_read(transport, start, head)
        if head == length:
            done_s = time.perf_counter() - t0
            return StreamSpan(head, done_s, done_s, 0)
        t1 = time.perf_counter()
        ttfb_s, _ = _timed_read(transport, start + head, length - head)
        return StreamSpan(head, t1 + ttfb_s - t0, time.perf_counter() - t0, length - head)

    cpu0, t0 = time.process_time(), time.perf_counter()
    spans = _concurrently(stream, streams)
    wall_s = time.perf_counter() - t0
    return RoundRead(max(1e-6, wall_s), tuple(spans), time.process_time() - cpu0)


def timed_small_reads(transport: Transport, offsets, nbytes: int, in_flight: int) -> tuple[int, float]:
    """Read `nbytes` at each of `offsets`, `in_flight` at a time: one rank's part of a round of
    small requests from many ranks at once, which shows the request rate the store (and, on one
    machine, the cores) can serve them all. Each in-flight thread's first request warms it up;
    returns (the requests after those, their wall seconds from the first of them to the last)."""
    offsets = list(offsets)
    in_flight = max(1, min(in_flight, len(offsets)))
    per = -(-len(offsets) // in_flight)

    def thread(k: int) -> tuple[int, float, float]:
        mine = offsets[k * per:(k + 1) * per]
        if mine:
            _timed_read(transport, mine[0], nbytes)
        t1 = time.perf_counter()
        for offset in mine[1:]:
            _timed_read(transport, offset, nbytes)
        return max(0, len(mine) - 1), t1, time.perf_counter()

    timings = [t for t in _concurrently(thread, in_flight) if t[0]]
    if not timings:
        return 0, 0.0
    return sum(n for n, _, _ in timings), max(end for _, _, end in timings) - min(t1 for _, t1, _ in timings)
