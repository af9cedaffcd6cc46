"""Planner (pure): a region of a cube -> the byte-range requests that read it.

The bytes a box needs form a regular lattice: runs of `run_bytes` contiguous bytes, one per
combination of indices along the "outer" axes (those whose selection is not contiguous with
the axes inside them), at `base + sum(index * stride)`. Because the lattice is regular, every
decision is the same for every run, so a plan is a handful of integers, not a list: the study's
"small" strategy on a 34 GB subcube is 4 million requests, which a list would make expensive.

Planning, following seed 001 s7.4:
1. Collapse trailing axes whose selection is contiguous into the run (as astropy's Section).
2. Coalesce: neighbouring units along an axis merge when the gap between them is at most
   `max_gap_bytes` (merging is only worth it while reading the gap costs less than a request).
3. Split: group as many merged units as fit in `chunk_bytes` into one request, descending to a
   finer axis when a single unit is larger than a chunk, down to byte pieces of a single run.

Byte ranges are half-open (start, stop) everywhere; the inclusive `Range:` header is made only
in the HTTP and S3 transports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ingest.errors import ConfigError
from ingest.core.layout import Layout
from ingest.core.cost import CostModel
from ingest.core.selection import Selection

STRATEGIES = ("auto", "large", "intermediate", "small")
# Used when nothing (config, caller, probe) says otherwise. 4-16 MiB requests were the loopback
# sweet spot (INFRA.md); 4 threads is where seed 001's presigned runs settled per process.
DEFAULT_CHUNK_BYTES = 16 << 20
DEFAULT_THREADS = 4
UNLIMITED_GAP = 1 << 62


@dataclass(frozen=True)
class Lattice:
    """The needed bytes: runs of `run_bytes` at base + sum(i_k * strides[k]), i_k < counts[k]."""

    base: int  # object offset of the first needed byte
    counts: tuple[int, ...]  # outer axes, each with count > 1
    strides: tuple[int, ...]  # bytes between consecutive indices of each outer axis
    axes: tuple[int, ...]  # the numpy axis each outer axis came from
    run_bytes: int  # contiguous bytes per run

    @property
    def n_runs(self) -> int:
        return math.prod(self.counts)

    @property
    def needed_bytes(self) -> int:
        return self.n_runs * self.run_bytes

    def __post_init__(self):
        # Computed once: Plan.request asks for it for every one of (possibly) millions of requests.
        spans = [self.run_bytes] * len(self.counts)
        for j in range(len(self.counts) - 2, -1, -1):
            spans[j] = (self.counts[j + 1] - 1) * self.strides[j + 1] + spans[j + 1]
        object.__setattr__(self, "_spans", tuple(spans))

    def unit_spans(self) -> tuple[int, ...]:
        """Bytes from the first to the last needed byte of one index along each outer axis."""
        return self._spans

    def gaps(self) -> tuple[int, ...]:
        """Unwanted bytes between consecutive units along each outer axis."""
        return tuple(s - u for s, u in zip(self.strides, self.unit_spans()))


def lattice_for(layout: Layout, sel: Selection) -> Lattice:
    """Describe the bytes `sel` needs from `layout` as a Lattice (pure arithmetic)."""
    obj_strides = layout.strides_bytes
    base = layout.data_offset + sum(s * st for s, st in zip(sel.starts, obj_strides))
    run = layout.itemsize
    n = len(layout.shape)
    # Collapse from the innermost axis while the selection stays contiguous in the object.
    axis = n - 1
    while axis >= 0:
        count, stride = sel.counts[axis], sel.steps[axis] * obj_strides[axis]
        if count == 1:
            axis -= 1  # a single index only moves the base
        elif stride == run:
            run *= count
            axis -= 1
        else:
            break
    outer = [(sel.counts[a], sel.steps[a] * obj_strides[a], a) for a in range(axis + 1) if sel.counts[a] > 1]
    return Lattice(
        base=base,
        counts=tuple(c for c, _, _ in outer),
        strides=tuple(s for _, s, _ in outer),
        axes=tuple(a for _, _, a in outer),
        run_bytes=run,
    )


@dataclass(frozen=True)
class Plan:
    """Requests that read a Lattice: groups of `group` units along outer axis `level`, or, when
    `byte_mode`, pieces of at most `group` bytes of every single run."""

    lattice: Lattice
    level: int
    group: int
    byte_mode: bool
    strategy: str
    chunk_bytes: int
    max_gap_bytes: int

    @property
    def request_shape(self) -> tuple[int, ...]:
        """Requests form a grid; request i is the i-th in C order (= object byte order)."""
        lat = self.lattice
        if self.byte_mode:
            return lat.counts + (-(-lat.run_bytes // self.group),)
        return lat.counts[: self.level] + (-(-lat.counts[self.level] // self.group),)

    @property
    def n_requests(self) -> int:
        return math.prod(self.request_shape)

    @property
    def needed_bytes(self) -> int:
        return self.lattice.needed_bytes

    @property
    def wire_bytes(self) -> int:
        """Bytes the requests transfer (needed bytes plus the gaps they read over)."""
        lat = self.lattice
        if self.byte_mode:
            return lat.needed_bytes
        k, n, s = self.group, lat.counts[self.level], lat.strides[self.level]
        u = lat.unit_spans()[self.level]
        full, rest = divmod(n, k)
        per_prefix = full * ((k - 1) * s + u) + (((rest - 1) * s + u) if rest else 0)
        return per_prefix * math.prod(lat.counts[: self.level])

    @property
    def amplification(self) -> float:
        """Read amplification: bytes on the wire per byte needed."""
        return self.wire_bytes / self.needed_bytes

    def request(self, i: int) -> "Request":
        """The i-th request: its byte range and where its bytes go in the output."""
        lat = self.lattice
        idx = np.unravel_index(i, self.request_shape) if self.request_shape else ()
        idx = tuple(int(v) for v in idx)
        if self.byte_mode:
            run_idx, piece = idx[:-1], idx[-1]
            offset = lat.base + sum(a * s for a, s in zip(run_idx, lat.strides)) + piece * self.group
            nbytes = min(self.group, lat.run_bytes - piece * self.group)
            return Request(offset, nbytes, run_idx, piece * self.group, 0, True)
        prefix, grp = idx[:-1], idx[-1]
        first = grp * self.group
        units = min(self.group, lat.counts[self.level] - first)
        offset = lat.base + sum(a * s for a, s in zip(prefix, lat.strides)) + first * lat.strides[self.level]
        nbytes = (units - 1) * lat.strides[self.level] + lat.unit_spans()[self.level]
        inner = math.prod(lat.counts[self.level + 1 :]) * lat.run_bytes
        contiguous = nbytes == units * inner
        return Request(offset, nbytes, prefix + (first,), 0, units, contiguous)

    def predicted_s(self, cost: CostModel, threads: int) -> float:
        """The cost model's time for this plan on `threads` threads."""
        return cost.predict_s(self.n_requests, self.wire_bytes, threads)

    @property
    def request_bytes_max(self) -> int:
        """The largest request: the first (a group's or a run's last piece may only be shorter)."""
        return self.request(0).nbytes if self.n_requests else 0

    def describe(self, cost: CostModel, threads: int) -> dict:
        """Summary for `plan`, reports and logs."""
        return {
            "strategy": self.strategy,
            "requests": self.n_requests,
            "request_bytes_max": self.request_bytes_max,
            "request_bytes_min": self.request(self.n_requests - 1).nbytes,
            "bytes_needed": self.needed_bytes,
            "bytes_wire": self.wire_bytes,
            "read_amplification": round(self.amplification, 4),
            "max_gap_bytes": self.max_gap_bytes,
            "chunk_bytes": self.chunk_bytes,
            "predicted_s": round(self.predicted_s(cost, threads), 4),
        }


@dataclass(frozen=True)
class Request:
    """One ranged read. `index` locates its first unit in the lattice; `units` units along the
    plan's level follow it (0 in byte mode, where `run_offset` is the offset inside the run)."""

    offset: int
    nbytes: int
    index: tuple[int, ...]
    run_offset: int
    units: int
    contiguous: bool  # every byte is needed: read straight into the output


def _channel_level(lat: Lattice, ndim: int) -> int | None:
    """Outer-axis position of the spectral axis (numpy axis ndim-3), if it is an outer axis."""
    channel_axis = max(0, ndim - 3)
    return lat.axes.index(channel_axis) if channel_axis in lat.axes else None


def make_plan(
    layout: Layout,
    sel: Selection,
    *,
    strategy: str = "auto",
    chunk_bytes: int = 16 << 20,
    max_gap_bytes: int | None = None,
    cost: CostModel = CostModel(),
) -> Plan:
    """Plan the requests that read `sel` from `layout` with a named strategy (seed 001 s7.4).

    large: merge everything, batches of whole planes up to chunk_bytes, crop in memory;
    intermediate: one channel plane per request; small: one request per contiguous run, no
    waste; auto: merge gaps up to max_gap_bytes (default latency x bandwidth from `cost`).
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes: {chunk_bytes} must be at least 1 byte")
    if max_gap_bytes is not None and max_gap_bytes < 0:
        raise ConfigError(f"max_gap_bytes: {max_gap_bytes} must be >= 0 bytes")
    lat = lattice_for(layout, sel)
    if strategy in ("large", "intermediate"):
        gap = UNLIMITED_GAP
    elif strategy == "small":
        gap = 0
    else:
        gap = cost.gap_bytes if max_gap_bytes is None else max_gap_bytes
    m = len(lat.counts)
    if m == 0:
        return Plan(lat, 0, chunk_bytes, True, strategy, chunk_bytes, gap)
    # Outermost axis from which on every gap may be read over.
    gaps = lat.gaps()
    level = m
    while level > 0 and gaps[level - 1] <= gap:
        level -= 1
    group_limit = None
    if strategy == "intermediate":
        channel = _channel_level(lat, len(layout.shape))
        if channel is not None:
            level, group_limit = channel, 1
    if level == m:  # nothing merges: one run per request
        level, group_limit = m - 1, 1
    spans = lat.unit_spans()
    while level < m and spans[level] > chunk_bytes:
        level += 1  # one unit is bigger than a chunk: split it along the next axis
        group_limit = None
    if level == m:
        return Plan(lat, m - 1, chunk_bytes, True, strategy, chunk_bytes, gap)
    fit = 1 + (chunk_bytes - spans[level]) // lat.strides[level]
    group = min(lat.counts[level], fit, group_limit or fit)
    return Plan(lat, level, group, False, strategy, chunk_bytes, gap)
