"""Reads the benchmarks time: boxes (seed 001 geometries), ingest's self-tuned read done as the MPI
driver does it, and the oracle every result is checked against (numpy on the local cube file).
"""
from __future__ import annotations

import re
import time
from collections import Counter
import dataclasses
from dataclasses import dataclass

import numpy as np

from bench.common import Cube
from ingest.api.read import plan_read, read_selection
from ingest.core.selection import normalize
from ingest.transports import open_transport


# -- boxes, numpy order (channels, y, x) ---------------------------------------------------------
def thin_box(shape: tuple[int, ...]) -> tuple:
    """All channels, a centred spatial window 1/16 of the plane's side wide (a thin seed-001 box)."""
    nchan, ny, nx = shape
    w = max(1, nx // 16)
    y0, x0 = (ny - w) // 2, (nx - w) // 2
    return (slice(0, nchan), slice(y0, y0 + w), slice(x0, x0 + w))


def seed001_box(shape: tuple[int, ...]) -> tuple:
    """Seed 001's subcube in proportion: 2151/5851 of each spatial side through 1893/6668 of the
    channels, centred."""
    nchan, ny, nx = shape
    c = max(1, round(nchan * 1893 / 6668))
    wy, wx = max(1, round(ny * 2151 / 5851)), max(1, round(nx * 2151 / 5851))
    c0, y0, x0 = (nchan - c) // 2, (ny - wy) // 2, (nx - wx) // 2
    return (slice(c0, c0 + c), slice(y0, y0 + wy), slice(x0, x0 + wx))


def slab_box(shape: tuple[int, ...]) -> tuple:
    """A contiguous slab of whole channel planes: 1/8 of the channels from a quarter of the way in."""
    nchan = shape[0]
    n = max(1, nchan // 8)
    c0 = min(nchan - n, nchan // 4)
    return (slice(c0, c0 + n), slice(None), slice(None))


def spectrum_box(shape: tuple[int, ...]) -> tuple:
    """One spectrum: the centre pixel through every channel (a 1-D result)."""
    nchan, ny, nx = shape
    return (slice(0, nchan), ny // 2, nx // 2)


GEOMETRIES = {"thin": thin_box, "slab": slab_box, "spectrum": spectrum_box, "seed001": seed001_box}


def region_text(region: tuple) -> str:
    """A box as the driver's --region string (numpy order, 'a:b' or 'i' per axis)."""
    parts = []
    for r in region:
        if isinstance(r, slice):
            parts.append(f"{'' if r.start is None else r.start}:{'' if r.stop is None else r.stop}")
        else:
            parts.append(str(int(r)))
    return ",".join(parts)


# -- the oracle ----------------------------------------------------------------------------------
def expected(cube: Cube, region: tuple) -> np.ndarray:
    """The region's values straight from the local FITS file (numpy on a memmap of the data)."""
    dtype = np.dtype({8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}[cube.bitpix])
    data = np.memmap(cube.path, dtype=dtype, mode="r", offset=cube.data_offset, shape=cube.shape)
    return np.array(data[region])


def check_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Raise unless got equals want exactly (values and shape; NaNs equal): a fast wrong read is no result."""
    if got.shape != want.shape or not np.array_equal(got, want, equal_nan=want.dtype.kind == "f"):
        raise AssertionError(f"{what}: returned values differ from the local file's "
                             f"(shape {got.shape} vs {want.shape})")


# -- ingest, self-tuned ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TunedRead:
    """One self-tuned read: the data, the time split, and what the tuner chose."""

    data: np.ndarray
    elapsed_s: float  # open + header + tuning (probe + choice) + plan + read: what a user waits for
    probe_s: float  # the probe alone (0 when the tuner judged the read too small to repay one)
    tune_s: float  # probe + the tuner's search over plans
    requests: int
    wire_bytes: int
    tuning: dict  # strategy, threads, chunk_bytes, max_gap_bytes, reason, probe measurements, plan summary

    @property
    def elapsed_without_probe_s(self) -> float:
        return self.elapsed_s - self.probe_s


def tuned_read(source: str, region, *, method: str, dataset: str | None = None, overrides: dict | None = None,
               **transport_options) -> TunedRead:
    """Read `region` as `python -m ingest run` does with strategy auto and threads/chunk on auto
    (ingest.driver.job._tuned): open a transport for the probe, read the header (timed: the
    tuner's first latency and CPU per request), tune the read with ingest.engine.autotune.tune_read (the
    probe rounds that fit its budget, then the plan the cost model predicts fastest), then read with
    the chosen strategy, threads, request size and gap on a transport sized for them (rank 0's
    probe transport is not the ranks' read transport in the driver either). `overrides` replaces
    some of the tuner's choices (strategy, threads, chunk_bytes, max_gap_bytes) after the same
    probe: a manual plan timed exactly as the tuned one."""
    from ingest.engine.autotune import tune_read
    from ingest.formats.reader import read_any_layout_timed
    from ingest.core.cost import CostModel
    from ingest.core.linkprobe import LATENCY_THREADS

    t0 = time.perf_counter()
    with open_transport(source, method, threads=LATENCY_THREADS, **transport_options) as transport:
        layout, header = read_any_layout_timed(transport, dataset=dataset)  # FITS or HDF5
        info = transport.info
        sel = normalize(region, layout.shape)
        t_tune = time.perf_counter()
        tuning, link = tune_read(transport, layout, sel, CostModel(), header=header)
        tune_s = time.perf_counter() - t_tune
        if overrides:
            tuning = dataclasses.replace(tuning, **overrides, reason="overridden: " + ", ".join(sorted(overrides)))
    with open_transport(source, method, threads=tuning.threads, **transport_options) as transport:
        transport.adopt(info)
        sel, plan = plan_read(layout, region, strategy=tuning.strategy, chunk_bytes=tuning.chunk_bytes,
                              max_gap_bytes=tuning.max_gap_bytes, cost=tuning.cost)
        data, stats = read_selection(transport, layout, sel, plan, threads=tuning.threads)
    elapsed_s = time.perf_counter() - t0
    record = {**tuning.as_dict(), "probe": link.as_dict() if link else None,
              "plan": plan.describe(tuning.cost, tuning.threads)}
    return TunedRead(data, elapsed_s, link.probe_s if link else 0.0, tune_s, stats.requests, stats.bytes_wire, record)


def choice_text(tuning: dict) -> str:
    """The tuner's choice in a few words: 'auto (gap 401 KiB), 16 thr x 4 MiB, probed'."""
    strategy = tuning["strategy"]
    gap = tuning.get("max_gap_bytes")
    if strategy == "auto" and gap is not None:
        strategy += f" (gap {gap / 1024:.0f} KiB)"
    probe = tuning.get("probe")
    probed = (f"probed ({'+'.join(probe.get('measured', ['all']))})" if probe
              else "no probe (no round would repay itself)")
    return f"{strategy}, {tuning['threads']} thr x {tuning['chunk_bytes'] / (1 << 20):.3g} MiB, {probed}"


def tuned_sample(got: TunedRead) -> dict:
    """The numbers (and the choice, as text) a benchmark records for one tuned read."""
    return {"elapsed_s": got.elapsed_s, "probe_s": got.probe_s, "tune_s": got.tune_s,
            "elapsed_noprobe_s": got.elapsed_without_probe_s, "requests": got.requests,
            "wire_bytes": got.wire_bytes, "threads": got.tuning["threads"], "chunk_bytes": got.tuning["chunk_bytes"],
            "choice": choice_text(got.tuning), "reason": got.tuning["reason"]}


def choices(samples: list[dict]) -> str:
    """What the tuner chose over the rounds (it re-probes every round, so it may differ), with
    the median probe time when it probed."""
    # Older results carried the probe's seconds inside the choice text.
    counts = Counter(re.sub(r"probe [0-9.]+ s", "probed", s["choice"]) for s in samples if "choice" in s)
    probes = sorted(s["probe_s"] for s in samples if s.get("probe_s"))
    probe = f" (probe {probes[len(probes) // 2]:.2f} s)" if probes else ""
    if len(counts) <= 1:
        return next(iter(counts), "-") + probe
    return "; ".join(f"{n}x {c}" for c, n in counts.most_common()) + probe


def layout_of(source: str, method: str, dataset: str | None = None, **transport_options):
    """The cube's layout (FITS or HDF5) read through a transport (for planning outside the timed part)."""
    from ingest.formats.reader import read_any_layout

    with open_transport(source, method, threads=1, **transport_options) as transport:
        return read_any_layout(transport, dataset=dataset)


def plan_summary(layout, region, *, strategy: str, chunk_bytes: int, threads: int, cost=None,
                 max_gap_bytes: int | None = None) -> dict:
    """What read_subcube will do for these settings (requests, wire bytes, amplification, ...)."""
    from ingest.core.cost import CostModel

    cost = cost or CostModel()
    _, plan = plan_read(layout, region, strategy=strategy, chunk_bytes=chunk_bytes,
                        max_gap_bytes=max_gap_bytes, cost=cost)
    return {**plan.describe(cost, threads), "threads": threads, "level": plan.level,
            "byte_mode": plan.byte_mode}
