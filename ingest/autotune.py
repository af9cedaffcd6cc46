"""Tune a read: probe the link when the read is big enough to repay it, then let the tuner pick
the plan the cost model predicts fastest. Used by the driver (rank 0, once per job), `plan
--probe` and the benchmarks."""
from __future__ import annotations

from ingest.geometry import Layout
from ingest.planner import CostModel
from ingest.probe import MiB, LinkProbe, probe_link
from ingest.region import Selection
from ingest.transports.base import Transport
from ingest.tuning import Tuning, choose, cost_from_probe, describe_probe

# A probe costs a dozen small requests and three bandwidth reads: a few round trips plus a
# few MiB. Below this much data per rank the configured cost model is good enough.
PROBE_MIN_BOX_BYTES = 32 * MiB
PROBE_READ_MAX_BYTES = 8 * MiB
PROBE_READ_MIN_BYTES = 256 << 10


def probe_read_bytes(needed_bytes: int) -> int:
    """Size of the probe's bandwidth reads: an eighth of the read, within 256 KiB..8 MiB."""
    return max(PROBE_READ_MIN_BYTES, min(PROBE_READ_MAX_BYTES, needed_bytes // 8))


def tune_read(transport: Transport, layout: Layout, sel: Selection, fallback: CostModel, *,
              probe: bool = True, chunk_bytes: int | None = None, threads: int | None = None,
              gap_bytes: int | None = None, ranks_sharing: int = 1) -> tuple[Tuning, LinkProbe | None]:
    """(the chosen plan's settings, the probe or None). `sel` is the (largest) box to read."""
    needed = layout.itemsize
    for n in sel.counts:
        needed *= n
    link = None
    cost, model = fallback, (f"configured cost model ({fallback.latency_s * 1e3:g} ms per request, "
                             f"{fallback.bandwidth_bytes_per_s / 1e6:g} MB/s)")
    if probe and needed >= PROBE_MIN_BOX_BYTES:
        link = probe_link(transport, layout.data_offset, layout.data_bytes, large_bytes=probe_read_bytes(needed))
        cost = cost_from_probe(link, ranks_sharing=ranks_sharing)
        model = describe_probe(link, cost, ranks_sharing)
    tuning = choose(cost, layout, sel, chunk_bytes=chunk_bytes, threads=threads, gap_bytes=gap_bytes, model=model)
    return tuning, link
