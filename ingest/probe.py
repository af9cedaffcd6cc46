"""Probe a source before reading it: latency L, per-stream bandwidth B, and whether streams add up.

A handful of requests, all inside the cube's data: time to first byte of small ranges gives
L (the per-request cost the study measured at ~2 ms on Acacia); one chunk-sized read gives B
for one stream; the same read on two concurrent streams tells whether the link or the stream
is the limit (a per-connection cap, like Toxiproxy's or a TCP window over a long path, lets
more streams help; a saturated link does not).
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import asdict, dataclass

from ingest.transports.base import Transport

MiB = 1 << 20
MIN_PROBE_READ_BYTES = 64 << 10  # below this a "bandwidth" read measures latency again
PROBE_MIN_DATA_BYTES = 1 * MiB  # smaller cubes are read faster than they could be probed


@dataclass(frozen=True)
class LinkProbe:
    """What a probe measured."""

    latency_s: float  # median time to first byte of a small range
    stream_bandwidth_bytes_per_s: float  # one stream, chunk-sized read, latency excluded
    parallel_bandwidth_bytes_per_s: float  # aggregate of `streams` concurrent streams
    streams: int  # concurrent streams in the parallel measurement
    probe_bytes: int  # bytes the probe transferred
    probe_s: float  # wall time the probe took
    latency_concurrency: float = float(4)  # small requests' speed-up on 4 threads (4 = fully overlapped)

    @property
    def scaling(self) -> float:
        """Aggregate bandwidth of `streams` streams over one stream's (1 = link-limited)."""
        return self.parallel_bandwidth_bytes_per_s / self.stream_bandwidth_bytes_per_s

    def as_dict(self) -> dict:
        return {**asdict(self), "scaling": round(self.scaling, 3)}


def _timed_read(transport: Transport, offset: int, nbytes: int) -> tuple[float, float]:
    """(seconds to first byte, total seconds) of one ranged read."""
    buf = bytearray(nbytes)
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


LATENCY_THREADS = 4


def probe_link(
    transport: Transport,
    data_offset: int,
    data_bytes: int,
    *,
    small_bytes: int = 4096,
    large_bytes: int = 8 * MiB,
    streams: int = 2,
) -> LinkProbe:
    """Measure L and B with a few reads spread over [data_offset, data_offset + data_bytes).

    1. every thread opens its connection with one small read (a cold connect is a one-off);
    2. three small reads in a row: their median time to first byte is the latency L;
    3. two small reads on each of 4 threads at once: how far latencies overlap;
    4. one `large_bytes` read (one stream's bandwidth), then one on each of `streams` threads.
    """
    if data_bytes < (streams + 1) * MIN_PROBE_READ_BYTES:
        raise ValueError(f"probe_link: {data_bytes} data bytes is too little to measure a link "
                         f"(need {(streams + 1) * MIN_PROBE_READ_BYTES})")
    t_start = time.perf_counter()
    # Every read stays inside the data: streams + 1 large reads laid end to end.
    large_bytes = max(MIN_PROBE_READ_BYTES, min(large_bytes, data_bytes // (streams + 1)))
    small_bytes = min(small_bytes, large_bytes)
    span = max(1, data_bytes - small_bytes)
    n_small = 0

    def small(k: int) -> tuple[float, float]:
        # spread through the cube so one cached block does not answer them all
        return _timed_read(transport, data_offset + (k * 7919 * small_bytes) % span, small_bytes)

    _concurrently(lambda k: small(k), LATENCY_THREADS)  # warm every connection
    sequential = [small(LATENCY_THREADS + k) for k in range(3)]
    latency_s = statistics.median(ttfb for ttfb, _ in sequential)
    t0 = time.perf_counter()
    _concurrently(lambda k: [small(16 + 2 * k + j) for j in range(2)], LATENCY_THREADS)
    wall_s = time.perf_counter() - t0
    n_small = LATENCY_THREADS + 3 + 2 * LATENCY_THREADS
    one_s = statistics.median(total for _, total in sequential)
    latency_concurrency = max(1.0, min(float(LATENCY_THREADS), 2 * LATENCY_THREADS * one_s / max(wall_s, 1e-6)))
    ttfb_s, total_s = _timed_read(transport, data_offset, large_bytes)
    stream_bw = large_bytes / max(total_s - ttfb_s, 1e-6)
    # The same size on `streams` connections at once, at different offsets; each stream's
    # transfer time excludes its own wait for the first byte.
    timings = _concurrently(lambda k: _timed_read(transport, data_offset + (k + 1) * large_bytes, large_bytes), streams)
    parallel_bw = streams * large_bytes / max(max(total - ttfb for ttfb, total in timings), 1e-6)
    return LinkProbe(
        latency_s=latency_s,
        stream_bandwidth_bytes_per_s=stream_bw,
        parallel_bandwidth_bytes_per_s=parallel_bw,
        streams=streams,
        probe_bytes=n_small * small_bytes + (1 + streams) * large_bytes,
        probe_s=time.perf_counter() - t_start,
        latency_concurrency=latency_concurrency,
    )
