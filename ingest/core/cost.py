"""The cost model (pure): what a plan's requests and bytes cost on a link, in seconds.

A probe (core/linkprobe.py, filled by engine/probe.py) or the configuration sets its numbers;
the planners use it to choose the gap worth reading through, and the tuner to compare plans.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    """Per-request latency and bandwidth, used to choose the gap and to predict time.

    bandwidth_bytes_per_s is the link's aggregate; stream_bandwidth_bytes_per_s, when known
    (from a probe), is what one connection gets, so T threads get min(T x stream, link).
    """

    latency_s: float = 0.002  # seed 001 measured ~1.95 ms per small request on Acacia
    bandwidth_bytes_per_s: float = 75e6  # ~600 Mbit/s, the Nimbus <-> Acacia link
    stream_bandwidth_bytes_per_s: float | None = None  # None: one stream can fill the link
    latency_concurrency: float | None = None  # how many requests' latencies overlap; None: all threads
    latency_wave: int | None = None  # how many were in flight when that was measured (None: not measured)
    # The client's own CPU (from a probe): issuing and parsing a request is serialized (the GIL,
    # or the engine's one loop) whatever the thread count, and every byte is copied out of a
    # socket and written to fresh output pages. On a fast link this, not the network, is what a
    # read waits for. The part of latency_s that is this CPU does not overlap across threads; the
    # rest does. Copying a byte overlaps with the next bytes' arrival, so bytes go at the slower
    # of the link and the client's copy, never at the sum: where the copy bounds a stream, the
    # probe's one-stream bandwidth already includes it.
    cpu_per_request_s: float = 0.0
    cpu_per_byte_s: float = 0.0

    @property
    def stream_bytes_per_s(self) -> float:
        return self.stream_bandwidth_bytes_per_s or self.bandwidth_bytes_per_s

    def bandwidth(self, threads: int) -> float:
        """Aggregate bytes/s of `threads` concurrent streams."""
        return min(max(1, threads) * self.stream_bytes_per_s, self.bandwidth_bytes_per_s)

    def overlap(self, threads: int) -> float:
        """How many requests' latencies overlap with `threads` in flight.

        Past the depth it was measured at, it stays as measured (nobody saw more). Below it, it
        follows 1 / overlap = a + b / threads through no overlap at one and the measured overlap
        at the wave: the curve of requests whose latency overlaps but that queue for a resource
        with a fixed cost per request (a server sharing two cores with the client). A shallower
        depth never gets the overlap measured at a deeper one."""
        t = max(1, threads)
        if self.latency_concurrency is None:
            return float(t)
        measured = max(1.0, self.latency_concurrency)
        wave = self.latency_wave
        if wave is None or wave <= 1 or t >= wave or measured >= wave:
            return min(float(t), measured)
        b = (1 - 1 / measured) / (1 - 1 / wave)
        return min(float(t), 1 / ((1 - b) + b / t))

    @property
    def gap_bytes(self) -> int:
        """Break-even gap: reading this many unwanted bytes on a stream costs as much as one
        more request on it."""
        return int(self.latency_s * self.stream_bytes_per_s)

    def predict_s(self, n_requests: int, wire_bytes: int, threads: int) -> float:
        """The client's CPU per request adds, whatever the thread count; the rest is the slower
        of each thread's own chain of waits and bytes (chain_s) and every byte through what the
        threads share, after one wait (pipe_s)."""
        return n_requests * self.cpu_per_request_s + max(self.chain_s(n_requests, wire_bytes, threads),
                                                         self.pipe_s(n_requests, wire_bytes, threads))

    @property
    def waiting_s(self) -> float:
        """The part of a request's latency that is not the client's own CPU: a wait that overlaps."""
        return max(0.0, self.latency_s - self.cpu_per_request_s)

    def waits_s(self, n_requests: int, threads: int) -> float:
        """Every request's wait, as far as `threads` in flight overlap them."""
        return n_requests * self.waiting_s / self.overlap(threads)

    def chain_s(self, n_requests: int, wire_bytes: int, threads: int) -> float:
        """The busiest thread's requests one after another: the waits as they overlap, and its
        share of the bytes at what one connection gets (or the client's copy, if slower). Where
        each connection is capped this is the read's time: a thread that waits lends nothing.
        Where one link is shared, the other threads' bytes fill a thread's waits (pipe_s)."""
        return self.waits_s(n_requests, threads) + self.chain_bytes_s(n_requests, wire_bytes, threads)

    def chain_bytes_s(self, n_requests: int, wire_bytes: int, threads: int) -> float:
        """The busiest thread's share of the bytes (its ceil(n / threads) requests) at what one
        connection gets, or at the client's copy where that is slower: chain_s without the waits."""
        if n_requests <= 0:
            return 0.0
        waves = -(-n_requests // max(1, threads))
        per_byte_s = max(1.0 / self.stream_bytes_per_s, self.cpu_per_byte_s)
        return waves * (wire_bytes / n_requests) * per_byte_s

    def pipe_s(self, n_requests: int, wire_bytes: int, threads: int) -> float:
        """Every byte through the link the threads share, and through the client's copy, after
        the first wait: while one thread waits for its reply, the others' bytes keep the link
        (or the copy) busy. Measured on the emulated cluster: a rank of 4 threads moving 64
        requests of 62 KiB through a node's 10 MB/s took its bytes' time (0.43 s), not that plus
        its 64 waits (0.07 s more)."""
        first_wait_s = self.waiting_s if n_requests > 0 else 0.0
        return first_wait_s + max(self.link_s(n_requests, wire_bytes, threads), wire_bytes * self.cpu_per_byte_s)

    def link_s(self, n_requests: int, wire_bytes: int, threads: int) -> float:
        """The time of `wire_bytes` in `n_requests` through the link on `threads` streams. Where
        each connection is capped, requests go in waves: the busiest stream carries
        ceil(n / threads) of them, and a stream idle in the last wave cannot lend its cap to the
        others (a shared link lends: then the bytes go at the link's rate)."""
        link_s = wire_bytes / self.bandwidth(threads)
        if n_requests <= 0 or self.stream_bandwidth_bytes_per_s is None:
            return link_s
        waves = -(-n_requests // max(1, threads))
        return max(link_s, waves * (wire_bytes / n_requests) / self.stream_bytes_per_s)
