"""Self-tuning (pure): from a link probe and a box, choose gap, request size and thread count.

- gap: merge runs whose gap costs less to read than a request costs to make, L x B per stream;
- request size: large enough that latency is a small part of each request (16 x L x B, as a
  power of two within 4..64 MiB: 4-16 MiB was the loopback sweet spot, 256 MiB was slower),
  small enough that every thread gets work;
- threads: when streams add up (a per-connection cap), as many as help, up to threads_max;
  when one stream nearly fills the link, just enough in flight to hide the latency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ingest.planner import CostModel
from ingest.probe import LinkProbe

MiB = 1 << 20
MIN_CHUNK_BYTES = 4 * MiB
MAX_CHUNK_BYTES = 64 * MiB
THREADS_MAX = 16  # seed 001 Fig. 6 / seed 003: gains flatten well before this
SCALING_FRACTION = 0.75  # k streams giving >= 0.75 k x one stream's bandwidth "add up"


@dataclass(frozen=True)
class Tuning:
    """The values a read will use, and why."""

    cost: CostModel
    chunk_bytes: int
    threads: int
    max_gap_bytes: int
    reason: str

    def as_dict(self) -> dict:
        return {
            "latency_s": self.cost.latency_s,
            "stream_bandwidth_bytes_per_s": self.cost.stream_bytes_per_s,
            "link_bandwidth_bytes_per_s": self.cost.bandwidth_bytes_per_s,
            "chunk_bytes": self.chunk_bytes,
            "threads": self.threads,
            "max_gap_bytes": self.max_gap_bytes,
            "reason": self.reason,
        }


def streams_add_up(probe: LinkProbe) -> bool:
    """Did `streams` concurrent streams get (nearly) `streams` times one stream's bandwidth?"""
    return probe.scaling >= SCALING_FRACTION * probe.streams


def cost_from_probe(probe: LinkProbe, threads_max: int = THREADS_MAX, ranks_sharing: int = 1) -> CostModel:
    """A CostModel for one rank. When streams add up (a per-connection cap), the link is what
    threads_max streams get; when they saturate, it is the measured aggregate, shared by the
    `ranks_sharing` ranks on the probing rank's node (the probe ran alone; the job will not)."""
    per_stream = probe.stream_bandwidth_bytes_per_s
    if streams_add_up(probe):
        link = per_stream * threads_max
    else:
        link = max(per_stream, probe.parallel_bandwidth_bytes_per_s) / max(1, ranks_sharing)
    return CostModel(latency_s=probe.latency_s, bandwidth_bytes_per_s=link,
                     stream_bandwidth_bytes_per_s=min(per_stream, link))


def _pow2_clamp(nbytes: float, low: int, high: int) -> int:
    return int(min(high, max(low, 2 ** math.ceil(math.log2(max(nbytes, 1))))))


def choose(probe: LinkProbe, needed_bytes: int, *, threads_max: int = THREADS_MAX,
           chunk_bytes: int | None = None, threads: int | None = None, ranks_sharing: int = 1) -> Tuning:
    """Pick chunk_bytes, threads and max_gap_bytes for one rank reading `needed_bytes` over the
    probed link, with `ranks_sharing` ranks on its node. A value the user fixed (chunk_bytes /
    threads not None) is kept as given."""
    cost = cost_from_probe(probe, threads_max, ranks_sharing)
    lat, stream = cost.latency_s, cost.stream_bytes_per_s
    adds_up = streams_add_up(probe)
    chunk = chunk_bytes or _pow2_clamp(16 * lat * stream, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
    if threads is None:
        if adds_up:
            threads = threads_max
            why_threads = f"streams add up ({probe.scaling:.2f}x on {probe.streams}), up to {threads_max}"
        else:
            # Enough requests in flight that one is always transferring while others wait.
            per_request_s = lat + chunk / stream
            threads = max(1, min(threads_max, math.ceil(per_request_s * cost.bandwidth_bytes_per_s / chunk)))
            threads = max(threads, 2) if lat > 0.2 * per_request_s else threads
            why_threads = f"one stream nearly fills the link ({probe.scaling:.2f}x on {probe.streams}), enough to hide latency"
        # Every thread should have a request: shrink requests for small reads.
        if chunk_bytes is None and needed_bytes < threads * chunk:
            chunk = max(MiB, -(-needed_bytes // threads))
        threads = max(1, min(threads, -(-needed_bytes // chunk)))
    else:
        why_threads = "as configured"
    gap = cost.gap_bytes
    shared = f", link shared by {ranks_sharing} ranks per node" if ranks_sharing > 1 and not adds_up else ""
    reason = (f"probe: latency {lat * 1e3:.2f} ms, {stream / 1e6:.0f} MB/s per stream{shared} -> gap {gap:,} B "
              f"(latency x bandwidth), requests of {chunk / MiB:.3g} MiB, {threads} threads ({why_threads})")
    return Tuning(cost, chunk, threads, gap, reason)
