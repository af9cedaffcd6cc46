"""What a probe of the link measured (pure record): the tuner's input, the report's evidence.

The prober that fills it does I/O and lives in engine/probe.py; the tuner (core/tuning.py) and
the cost model only read it, so the record and the constants both sides share live here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

MiB = 1 << 20
PROBE_MIN_DATA_BYTES = 1 * MiB  # smaller cubes are read faster than they could be probed
# Until a large enough read measures it: about what the kernel takes to copy a byte out of a
# socket and to zero a fresh output page for it, taken at the low end of its range
# (BENCHMARKS: First touch).
ASSUMED_CPU_PER_BYTE_S = 0.25 / (1 << 30)
LATENCY_THREADS = 4  # connections the latency round uses (transports for probing need this many)
# A concurrent engine's wave: deep enough to see overlap at the depths the tuner may choose
# (its CPU per request, amortized in the loop, is then what a read pays), still tiny in bytes.
LATENCY_WAVE = 16
ROUNDS = ("stream", "latency", "streams")
SCALING_FRACTION = 0.75  # k streams giving >= 0.75 k x one stream's bandwidth "add up"


@dataclass(frozen=True)
class LinkProbe:
    """What a probe measured (and, for rounds in ROUNDS but not in `measured`, assumed)."""

    latency_s: float  # a small request's time, request to last byte (else a large one's to first byte)
    stream_bandwidth_bytes_per_s: float  # one stream, chunk-sized read, latency excluded
    parallel_bandwidth_bytes_per_s: float  # aggregate of `streams` concurrent streams
    streams: int  # concurrent streams in the parallel measurement
    probe_bytes: int  # bytes the probe transferred
    probe_s: float  # wall time the probe took
    latency_concurrency: float | None = float(LATENCY_THREADS)  # small requests' speed-up at once; None: unmeasured
    latency_wave: int = LATENCY_THREADS  # how many were at once: the most overlap the round could see
    measured: tuple[str, ...] = ROUNDS  # the rounds that ran
    cpu_per_request_s: float = 0.0  # this process's CPU per small request (0: unmeasured)
    cpu_per_byte_s: float = 0.0  # this process's CPU per byte of a large read, beyond its request

    @property
    def scaling(self) -> float:
        """Aggregate bandwidth of `streams` streams over one stream's (1 = link-limited)."""
        return self.parallel_bandwidth_bytes_per_s / self.stream_bandwidth_bytes_per_s

    def as_dict(self) -> dict:
        return {**asdict(self), "measured": list(self.measured), "scaling": round(self.scaling, 3)}
