"""Parts of a multipart upload (pure): S3's limits, the part size, and which rank aggregates each part.

S3 (AWS documents the limits; Ceph/Acacia, MinIO and versitygw follow them): every part but the
last is at least 5 MiB, none is above 5 GiB, at most 10,000 parts, at most 5 TiB per object.
Seed 001 s1.2: a client whose part size ignores these (MinIO's ~8.8 kB) has an 800 GB upload
refused after an hour, so every size here is checked before a byte moves.

`plan_part_bytes` is the planner's rule for a publish, which uploads from many ranks at once:
1. the S3 floor, a hard limit: max(5 MiB, object / 10,000 rounded up to whole MiB);
2. the link floor: a part's fixed cost (one request's latency) at most 5 % of its transfer time,
   so parts >= 20 x latency x bandwidth (acacia, 2 ms x 75 MB/s: 3 MB; a 100 ms WAN: 25 MB);
3. the spread ceiling: every rank's upload slots busy for >= 4 waves, so parts
   <= object / (ranks x parts in flight x 4) (the last, partial wave then costs <= 1/4);
4. between floor and ceiling, 64 MiB (few requests, cheap to retry, a bounded buffer);
5. whole waves: where the count leaves the last of at most 4 waves part empty (with more, it costs
   less than a quarter), the nearest size (more, smaller parts first; never under the S3 floor)
   that gives every rank as many parts as the others: a rank with one part more than the rest
   uploads it at the end, alone, at its own link's rate while the store's pipe idles;
the S3 floor wins over everything, the ceiling over the link floor. Whole MiB, but for whole
waves, which need finer steps (WAVE_STEP_BYTES) to fit an object that is not whole MiB.
"""
from __future__ import annotations

import math

import numpy as np

from ingest.errors import ConfigError
from ingest.units import GiB, MiB, TiB, format_bytes

MIN_PART_BYTES = 5 * MiB  # every part but the last
MAX_PART_BYTES = 5 * GiB  # also the largest single PUT
MAX_PARTS = 10_000
MAX_OBJECT_BYTES = 5 * TiB
DEFAULT_PART_BYTES = 64 * MiB  # few enough requests, small enough to retry cheaply
OVERHEAD_FRACTION = 0.05  # a part's request latency as a share of its transfer time, at most
SPREAD_WAVES = 4  # waves of uploads every rank should get, so the partial last one is cheap
WAVE_STEP_BYTES = 4096  # whole waves' part sizes: a whole number of any value's bytes, fine enough for ~1,000 parts


def _check_object_bytes(object_bytes: int) -> None:
    if isinstance(object_bytes, bool) or not isinstance(object_bytes, int) or object_bytes < 0:
        raise ConfigError(f"object_bytes: expected a size >= 0 in bytes, got {object_bytes!r}")
    if object_bytes > MAX_OBJECT_BYTES:
        raise ConfigError(
            f"object_bytes: {object_bytes} B ({format_bytes(object_bytes)}) exceeds the S3 object "
            f"limit of {format_bytes(MAX_OBJECT_BYTES)}"
        )


def s3_floor_bytes(object_bytes: int) -> int:
    """The smallest part size S3 allows for this object: 5 MiB, or object / 10,000 in whole MiB."""
    _check_object_bytes(object_bytes)
    return max(MIN_PART_BYTES, math.ceil(math.ceil(object_bytes / MAX_PARTS) / MiB) * MiB)


def choose_part_bytes(object_bytes: int, requested_part_bytes: int | None = None) -> int:
    """Part size in bytes for an object_bytes upload: requested (checked) or 64 MiB raised to fit 10,000 parts."""
    _check_object_bytes(object_bytes)
    # Smallest part that keeps the count within the limit, rounded up to whole MiB.
    fit_bytes = math.ceil(math.ceil(object_bytes / MAX_PARTS) / MiB) * MiB
    if requested_part_bytes is None:
        return max(DEFAULT_PART_BYTES, fit_bytes)

    part = requested_part_bytes
    if isinstance(part, bool) or not isinstance(part, int):
        raise ConfigError(f"part_bytes: expected a byte count, got {part!r}")
    if part < MIN_PART_BYTES:
        raise ConfigError(
            f"part_bytes: {part} B ({format_bytes(part)}) is below the S3 minimum part size of "
            f"{format_bytes(MIN_PART_BYTES)}"
        )
    if part > MAX_PART_BYTES:
        raise ConfigError(
            f"part_bytes: {part} B ({format_bytes(part)}) is above the S3 maximum part size of "
            f"{format_bytes(MAX_PART_BYTES)}"
        )
    n_parts = math.ceil(object_bytes / part)
    if n_parts > MAX_PARTS:
        raise ConfigError(
            f"part_bytes: {format_bytes(part)} parts would split this {format_bytes(object_bytes)} object "
            f"into {n_parts} parts, above the S3 limit of {MAX_PARTS} parts; use at least "
            f"{format_bytes(max(fit_bytes, MIN_PART_BYTES))} (or omit part_bytes)"
        )
    return part


def _whole_mib(n_bytes: float) -> int:
    return max(1, math.ceil(n_bytes / MiB)) * MiB


def plan_part_bytes(object_bytes: int, n_ranks: int, parts_in_flight: int, latency_s: float,
                    bandwidth_bytes_per_s: float, requested_part_bytes: int | None = None) -> tuple[int, str]:
    """(part_bytes, reason) for a publish from n_ranks ranks with parts_in_flight uploads each, on a
    link of latency_s per request and bandwidth_bytes_per_s per stream; see the module docstring."""
    if requested_part_bytes is not None:
        part = choose_part_bytes(object_bytes, requested_part_bytes)
        return part, f"{format_bytes(part)} as configured (within S3's limits)"
    if n_ranks < 1 or parts_in_flight < 1:
        raise ConfigError(f"parts_in_flight: expected ranks >= 1 and parts in flight >= 1, got {n_ranks}, "
                          f"{parts_in_flight}")
    s3_floor = s3_floor_bytes(object_bytes)
    link_floor = _whole_mib(latency_s * bandwidth_bytes_per_s / OVERHEAD_FRACTION)
    ceiling = _whole_mib(object_bytes / (n_ranks * parts_in_flight * SPREAD_WAVES))
    part = min(ceiling, max(link_floor, DEFAULT_PART_BYTES))
    if part == ceiling and ceiling < max(link_floor, DEFAULT_PART_BYTES):
        why = (f"spread over {n_ranks} rank(s) x {parts_in_flight} in flight x {SPREAD_WAVES} waves "
               f"(link floor {format_bytes(link_floor)})")
    elif link_floor > DEFAULT_PART_BYTES:
        why = f"the link floor: latency {latency_s * 1e3:g} ms at {format_bytes(bandwidth_bytes_per_s)}/s under 5 %"
    else:
        why = "the default, within the link floor and the spread ceiling"
    if part < s3_floor:
        part, why = s3_floor, f"S3's floor for this object (5 MiB, at most {MAX_PARTS} parts)"
    part = min(part, MAX_PART_BYTES)
    whole = whole_waves_part_bytes(object_bytes, part, n_ranks, s3_floor)
    if whole != part:
        n_parts = math.ceil(object_bytes / whole)
        why += (f"; {format_bytes(part)} made {math.ceil(object_bytes / part)} parts, "
                f"{format_bytes(whole)} makes {n_parts}: {n_parts // n_ranks} for each of {n_ranks} ranks")
        part = whole
    return part, f"{format_bytes(part)}: {why}"


def whole_waves_part_bytes(object_bytes: int, part_bytes: int, n_ranks: int, floor_bytes: int) -> int:
    """`part_bytes`, or the size nearest it (in WAVE_STEP_BYTES steps, at least floor_bytes) that
    splits the object into a whole number of parts for each of n_ranks ranks: one more wave of
    smaller parts, else one fewer of larger ones; `part_bytes` when neither fits."""
    n_parts = math.ceil(object_bytes / part_bytes)
    waves = math.ceil(n_parts / n_ranks)
    if n_ranks < 2 or n_parts % n_ranks == 0 or waves > SPREAD_WAVES:
        return part_bytes
    for k in (waves, waves - 1):
        if k < 1:
            continue
        size = math.ceil(object_bytes / (k * n_ranks) / WAVE_STEP_BYTES) * WAVE_STEP_BYTES
        if floor_bytes <= size <= MAX_PART_BYTES and math.ceil(object_bytes / size) == k * n_ranks:
            return size
    return part_bytes


def split_parts(object_bytes: int, part_bytes: int) -> tuple[tuple[int, int], ...]:
    """The parts' byte ranges, half-open, in order (part number = index + 1); checked against S3's limits."""
    choose_part_bytes(object_bytes, part_bytes)
    if object_bytes == 0:
        raise ConfigError("object_bytes: an empty object has no parts to upload")
    return tuple((start, min(start + part_bytes, object_bytes)) for start in range(0, object_bytes, part_bytes))


def assign_aggregators(held_bytes: np.ndarray) -> tuple[int, ...]:
    """The rank that aggregates each part, from held_bytes[part, rank] (bytes of the part each rank
    holds): the rank holding most of it, so the fewest bytes cross MPI, unless that rank already
    has its share (ceil(parts / ranks)); then the next in bytes held, ties to the least loaded."""
    held = np.asarray(held_bytes, dtype=np.int64)
    n_parts, n_ranks = held.shape
    cap = math.ceil(n_parts / n_ranks)
    load = np.zeros(n_ranks, dtype=np.int64)
    out = []
    for part in range(n_parts):
        # lexsort's last key is primary: most bytes, then least load, then lowest rank.
        order = np.lexsort((np.arange(n_ranks), load, -held[part]))
        rank = next(int(r) for r in order if load[r] < cap)
        load[rank] += 1
        out.append(rank)
    return tuple(out)


def rounds(aggregators, n_ranks: int) -> tuple[tuple[int | None, ...], ...]:
    """Per round, per rank, the part (index) that rank aggregates in it, or None: round j holds
    every rank's j-th part, so each rank aggregates at most one part per round."""
    per_rank = [[] for _ in range(n_ranks)]
    for part, rank in enumerate(aggregators):
        per_rank[rank].append(part)
    n_rounds = max((len(p) for p in per_rank), default=0)
    return tuple(tuple(p[j] if j < len(p) else None for p in per_rank) for j in range(n_rounds))
