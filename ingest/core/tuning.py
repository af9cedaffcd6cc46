"""Self-tuning (pure): from a link probe and a box, choose strategy, gap, request size, threads.

Plans are closed-form (a handful of integers, see lattice.py), so instead of rules of thumb the
tuner plans every candidate - gap none / break-even (latency x bandwidth) / unlimited, or one
channel per request; requests of 1..64 MiB; 1..16 threads - and keeps the one the probed cost
model predicts fastest. The model knows what the probe saw: per-request latency, one stream's
bandwidth, whether streams add up (a per-connection cap) or share one link, and how far
latency overlaps across threads (on a real network it does; when the "latency" is a busy
server's CPU, it does not).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ingest.core.layout import Layout
from ingest.core.lattice import UNLIMITED_GAP, Plan
from ingest.core.cost import CostModel
from ingest.core.plan import plan_selection
from ingest.core.linkprobe import LATENCY_THREADS, ROUNDS, SCALING_FRACTION, LinkProbe
from ingest.core.selection import Selection
from ingest.core.sharing import SharedCapacity

MiB = 1 << 20
CHUNK_CANDIDATES = tuple(MiB << k for k in range(7))  # 1 MiB .. 64 MiB
THREAD_CANDIDATES = (1, 2, 4, 8, 16)  # seed 001 Fig. 6 / seed 003: gains flatten well before 16
THREADS_MAX = THREAD_CANDIDATES[-1]
# A concurrent engine (libcurl multi) keeps requests in flight without a thread each, so deeper
# concurrency costs no threads: it is what lets many small requests hide a long latency.
IN_FLIGHT_CANDIDATES = THREAD_CANDIDATES + (32, 64)
IN_FLIGHT_MAX = IN_FLIGHT_CANDIDATES[-1]
# The probe's figures move by tens of percent from one probe to the next on a busy machine, so
# plans predicted within 10 % of the best are treated as equal, and among those the one nearest
# the measured loopback sweet spot (4 threads, 16 MiB requests) is taken: stable choices, and
# threads that overlap client CPU work with transfers, which the model does not see.
NEAR_BEST = 1.10
PREFERRED_THREADS = 4
PREFERRED_CHUNK_BYTES = 16 * MiB


@dataclass(frozen=True)
class Tuning:
    """The values a read will use, the model's prediction, and why."""

    cost: CostModel
    strategy: str
    chunk_bytes: int
    threads: int
    max_gap_bytes: int | None  # None: the strategy's own (large/intermediate: unlimited)
    predicted_s: float
    reason: str
    alone: CostModel | None = None  # one rank's link as it reads alone (None: `cost` is that)
    shared: SharedCapacity | None = None  # what the job's ranks share, which `cost` divides among them
    model: str = ""  # where `cost` came from (the reason's first part)
    # The stream round's read where it ran as a first look at a link nothing was measured of
    # (ingest.engine.autotune), else 0: the reason says so, and the report how much it read.
    first_look_bytes: int = 0

    def as_dict(self) -> dict:
        return {
            "latency_s": self.cost.latency_s,
            "stream_bandwidth_bytes_per_s": self.cost.stream_bytes_per_s,
            "link_bandwidth_bytes_per_s": self.cost.bandwidth_bytes_per_s,
            "latency_concurrency": self.cost.latency_concurrency,
            "latency_wave": self.cost.latency_wave,
            "cpu_per_request_s": self.cost.cpu_per_request_s,
            "cpu_per_byte_s": self.cost.cpu_per_byte_s,
            "strategy": self.strategy,
            "chunk_bytes": self.chunk_bytes,
            "threads": self.threads,
            "max_gap_bytes": self.max_gap_bytes,
            "predicted_s": self.predicted_s,
            "reason": self.reason,
            "shared": self.shared.as_dict() if self.shared else None,
            "first_look_bytes": self.first_look_bytes,
        }


def streams_add_up(probe: LinkProbe) -> bool:
    """Did `streams` concurrent streams get (nearly) `streams` times one stream's bandwidth?"""
    return probe.scaling >= SCALING_FRACTION * probe.streams


def overlap_of(measured: float | None, wave: int = LATENCY_THREADS) -> float | None:
    """How many requests' latencies overlap: the probe's measure when it saw them serialize
    (`wave` requests at once is the most it can see; near that, no limit is known: None)."""
    return measured if measured is not None and measured < 0.9 * wave else None


def cost_from_probe(probe: LinkProbe, threads_max: int = THREADS_MAX) -> CostModel:
    """A CostModel for one rank reading alone. When streams add up (a per-connection cap), the
    link is what threads_max streams get; when they saturate, it is the measured aggregate. What
    the job's ranks share is not in it: core/sharing.py's share_cost divides the shared pipes."""
    per_stream = probe.stream_bandwidth_bytes_per_s
    if "streams" not in probe.measured:  # unknown: one stream's worth, not divided among ranks
        link = per_stream
    elif streams_add_up(probe):
        link = per_stream * threads_max
    else:
        link = max(per_stream, probe.parallel_bandwidth_bytes_per_s)
    return CostModel(latency_s=probe.latency_s, bandwidth_bytes_per_s=link,
                     stream_bandwidth_bytes_per_s=min(per_stream, link),
                     latency_concurrency=overlap_of(probe.latency_concurrency, probe.latency_wave),
                     latency_wave=probe.latency_wave if "latency" in probe.measured else None,
                     cpu_per_request_s=probe.cpu_per_request_s, cpu_per_byte_s=probe.cpu_per_byte_s)


def _candidates(layout: Layout, sel: Selection, cost: CostModel, chunks, threads_options, gap_bytes=None):
    """(strategy, gap, chunk, threads, plan) for every combination worth predicting."""
    gaps = (("small", 0), ("auto", cost.gap_bytes), ("large", None), ("intermediate", None))
    if gap_bytes is not None:  # the user fixed the gap: only request size and threads are free
        gaps = (("auto", gap_bytes),)
    for chunk in chunks:
        plans: dict[tuple, Plan] = {}
        for name, gap in gaps:
            plan = plan_selection(layout, sel, strategy=name, chunk_bytes=chunk, max_gap_bytes=gap)
            key = (plan.n_requests, plan.wire_bytes)  # identical plans need predicting once
            plans.setdefault(key, (name, gap, plan))
        for name, gap, plan in plans.values():
            for t in threads_options:
                # More threads than requests would idle, unless the user fixed the count.
                if t <= max(1, plan.n_requests) or len(threads_options) == 1:
                    yield name, gap, chunk, t, plan


def said_first_look(model: str, looked: bool) -> str:
    """A model's description, saying so where it came from a first look at the endpoint."""
    return f"first look (nothing measured of this endpoint before): {model}" if looked else model


def describe_probe(probe: LinkProbe, cost: CostModel, shared: str = "") -> str:
    """What the probe saw (and what it assumed, for rounds it skipped), in words; `shared` what
    the job's ranks share (core/sharing.py), when they do."""
    links = "streams add up" if streams_add_up(probe) else "streams share the link"
    if "streams" not in probe.measured:
        links = "one stream assumed"
    shared = f"; {shared}" if shared else ""
    overlap = (f"overlapping {probe.latency_concurrency:.1f}x of {probe.latency_wave} at once" if "latency" in probe.measured
               else "overlap assumed")
    scaling = f"{probe.scaling:.2f}x on {probe.streams}" if "streams" in probe.measured else "not measured"
    skipped = [r for r in ROUNDS if r not in probe.measured]
    cut = f"; rounds not worth their time: {', '.join(skipped)}" if skipped else ""
    return (f"probe: latency {cost.latency_s * 1e3:.2f} ms ({overlap}), {cost.stream_bytes_per_s / 1e6:.0f} MB/s "
            f"per stream, {links} ({scaling}), client CPU {cost.cpu_per_request_s * 1e3:.2f} ms per "
            f"request + {cost.cpu_per_byte_s * 2**30:.2f} s/GiB{cut}{shared}")


def choose(cost: CostModel, layout: Layout, sel: Selection, *, chunk_bytes: int | None = None,
           threads: int | None = None, gap_bytes: int | None = None, model: str = "configured cost model",
           threads_max: int = THREADS_MAX) -> Tuning:
    """The plan `cost` predicts fastest for reading `sel`. A value the user fixed (chunk_bytes /
    threads not None) is kept and only the rest is searched, with up to `threads_max` requests in
    flight (IN_FLIGHT_MAX for a concurrent engine). `model` says where `cost` came from."""
    chunks = (chunk_bytes,) if chunk_bytes else CHUNK_CANDIDATES
    threads_options = (threads,) if threads else tuple(t for t in IN_FLIGHT_CANDIDATES if t <= max(1, threads_max))
    scored = [(plan.predicted_s(cost, t), t, plan.n_requests, name, gap, chunk)
              for name, gap, chunk, t, plan in _candidates(layout, sel, cost, chunks, threads_options, gap_bytes)]
    best_s = min(s[0] for s in scored)
    near_best = [s for s in scored if s[0] <= best_s * NEAR_BEST]
    predicted_s, t, n, name, gap, chunk = min(near_best, key=lambda s: (
        abs(math.log2(s[1] / PREFERRED_THREADS)) + abs(math.log2(s[5] / PREFERRED_CHUNK_BYTES)) / 2, s[2], s[0]))
    reason = (f"{model}; best of {len(scored)} plans: {name}{f' (gap {gap:,} B)' if name == 'auto' else ''}, "
              f"requests up to {chunk / MiB:.3g} MiB, {t} threads, {n} requests, predicted {predicted_s:.3g} s")
    return Tuning(cost, name, chunk, t, gap if name in ("auto", "small") else UNLIMITED_GAP, predicted_s, reason,
                  model=model)
