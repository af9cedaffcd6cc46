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

# A probe costs about nine round trips (warm-up, three sequential and two concurrent rounds of
# small reads, two bandwidth rounds) plus three bandwidth reads. It runs when the configured
# model says the read will take at least this many times as long as the probe.
PROBE_WORTH_FACTOR = 5.0
PROBE_ROUND_TRIPS = 9
PROBE_READ_MAX_BYTES = 8 * MiB
PROBE_READ_MIN_BYTES = 256 << 10


def probe_read_bytes(needed_bytes: int) -> int:
    """Size of the probe's bandwidth reads: 1/32 of the read (so three of them cost about a tenth
    of a bandwidth-bound read), within 256 KiB..8 MiB."""
    return max(PROBE_READ_MIN_BYTES, min(PROBE_READ_MAX_BYTES, needed_bytes // 32))


def tune_read(transport: Transport, layout: Layout, sel: Selection, fallback: CostModel, *,
              probe: bool = True, chunk_bytes: int | None = None, threads: int | None = None,
              gap_bytes: int | None = None, ranks_sharing: int = 1) -> tuple[Tuning, LinkProbe | None]:
    """(the chosen plan's settings, the probe or None). `sel` is the (largest) box to read."""
    needed = layout.itemsize
    for n in sel.counts:
        needed *= n
    model = (f"configured cost model ({fallback.latency_s * 1e3:g} ms per request, "
             f"{fallback.bandwidth_bytes_per_s / 1e6:g} MB/s)")
    tuning = choose(fallback, layout, sel, chunk_bytes=chunk_bytes, threads=threads, gap_bytes=gap_bytes, model=model)
    probe_s = PROBE_ROUND_TRIPS * fallback.latency_s + 3 * probe_read_bytes(needed) / fallback.stream_bytes_per_s
    # Judged as if the read's requests did not overlap: the configured model cannot know whether
    # they will, and many small requests are exactly where a wrong guess costs most.
    if not probe or tuning.predicted_s * tuning.threads < PROBE_WORTH_FACTOR * probe_s:
        return tuning, None
    link = probe_link(transport, layout.data_offset, layout.data_bytes, large_bytes=probe_read_bytes(needed))
    cost = cost_from_probe(link, ranks_sharing=ranks_sharing)
    tuning = choose(cost, layout, sel, chunk_bytes=chunk_bytes, threads=threads, gap_bytes=gap_bytes,
                    model=describe_probe(link, cost, ranks_sharing))
    return tuning, link
