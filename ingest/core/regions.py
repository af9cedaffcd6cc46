"""Regions (pure): WALLABY's s2p_setup split of a cube, and which rank reads which region.

s2p_setup (AusSRC/s2p_setup, `s2p_setup.py`, function `subcube_split_dimension` and the loop in
`main`) cuts nothing: it writes one SoFiA-2 parameter file per region. Per axis, with INCLUSIVE
bounds lo..hi and E = hi - lo (one less than the pixel count), region width w, minimum overlap m:
* N = the smallest N >= 1 with N*(w - m) + m >= E. The script refuses w > E ("Selected region
  smaller than minimum sub-cube size") and at w == E it reaches N = 1 and divides by zero, so
  it only ever produces a split when w < E, which always gives N >= 2. We refuse w >= E too.
* overlap = floor((N*w - E) / (N - 1)) (>= m);  start_i = (w - overlap)*i + lo;
  end_i = min(start_i + w, hi), inclusive: every region but the last is w + 1 pixels and two
  neighbours share overlap + 1 pixels.
* idx = x + nx*(y + ny*z) (x fastest) numbers the files sofia_{idx+1:03d}.par; more than 999
  regions is refused.
Boxes here are half-open (start, stop) pairs in numpy axis order, as in decompose.py.
"""
from __future__ import annotations

import heapq
import itertools
import math

import numpy as np

from ingest.errors import ConfigError, RegionError

Box = tuple[tuple[int, int], ...]

S2P_MAX_REGIONS = 999  # s2p_setup exits rather than write more parameter files (3-digit names)
_AXES = "xyz"  # FITS order: region_shape is (W, H, D) along (x, y, z)


def _whole(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name}: expected a whole number of pixels, got {value!r}")
    return int(value)


def s2p_axis_split(lo: int, hi: int, width: int, min_overlap: int, *, axis: str = "axis") -> list[tuple[int, int]]:
    """s2p_setup's split of one axis: (start, end) pixel pairs, BOTH INCLUSIVE, lo first.

    lo, hi: inclusive pixel bounds of the area to split (s2p_setup's [boundary] min and max).
    width: region width w in pixels; min_overlap: minimum overlap m in pixels. `axis` names the
    axis in error messages.
    """
    lo, hi = _whole(lo, f"{axis} min"), _whole(hi, f"{axis} max")
    width, m = _whole(width, "region_shape"), _whole(min_overlap, "min_overlap")
    if lo < 0 or lo > hi:
        raise RegionError(f"{axis}: bounds {lo}..{hi} are not 0 <= min <= max (pixels, inclusive)")
    if width < 1:
        raise ConfigError(f"region_shape: {axis} width must be at least 1 pixel, got {width}")
    if not 0 <= m < width:
        # m >= w would never make N*(w - m) + m grow: the script loops forever.
        raise ConfigError(f"min_overlap: {axis} overlap must be >= 0 and less than the region width "
                          f"{width}, got {m}")
    extent = hi - lo
    if width >= extent:
        raise ConfigError(
            f"region_shape: {axis} width {width} pixels does not fit the {extent + 1} pixels "
            f"{lo}..{hi} it would split: s2p_setup needs width < max - min = {extent} (it refuses "
            f"a wider region and divides by zero at an equal one)"
        )
    # Closed form of the script's `while width < w_total: N += 1` (it starts at N = 1, w < E).
    n = 1 + -(-(extent - width) // (width - m))
    overlap = (n * width - extent) // (n - 1)  # exact integer floor of the script's float floor
    starts = [(width - overlap) * i + lo for i in range(n)]
    return [(s, min(s + width, hi)) for s in starts]


def _job_box(shape: tuple[int, ...], job_box) -> Box:
    if job_box is None:
        return tuple((0, n) for n in shape)
    box = tuple((int(a), int(b)) for a, b in job_box)
    if len(box) != len(shape):
        raise RegionError(f"job box has {len(box)} axes but the cube has {len(shape)} (shape {shape})")
    for (a, b), n in zip(box, shape):
        if not 0 <= a < b <= n:
            raise RegionError(f"job box {box} is empty or outside the cube (shape {shape}, numpy order)")
    return box


def s2p_regions(shape, region_shape_fits, min_overlap, job_box=None) -> tuple[Box, ...]:
    """The regions s2p_setup gives for a 3-D (z, y, x) or 4-D (s, z, y, x) cube, in its file order.

    region_shape_fits: (W, H, D) pixels in FITS order (x, y, z); min_overlap: (spatial, spectral)
    pixels, spatial for x and y, spectral for z; job_box: half-open numpy-order box playing the
    role of s2p_setup's [boundary] (min = start, max = stop - 1), default the whole cube.
    Returns half-open numpy-order boxes; regions[idx] is sofia_{idx+1:03d}.par. A 4th numpy
    axis 0 is not split: every region takes the job box's range along it. (s2p_setup instead takes
    nz from NAXIS4 when NAXIS3 == 1; that layout fails here, z having 1 pixel.)
    """
    shape = tuple(int(n) for n in shape)
    if len(shape) not in (3, 4):
        raise RegionError(f"s2p_setup splits 3-D or 4-D cubes, got shape {shape} (numpy order)")
    if len(region_shape_fits) != 3:
        raise ConfigError(f"region_shape: expected 3 widths (x, y, z), got {region_shape_fits!r}")
    if len(min_overlap) != 2:
        raise ConfigError(f"min_overlap: expected (spatial, spectral), got {min_overlap!r}")
    box = _job_box(shape, job_box)
    overlaps = (min_overlap[0], min_overlap[0], min_overlap[1])
    splits = []  # FITS order x, y, z; half-open
    for k, (width, m) in enumerate(zip(region_shape_fits, overlaps)):
        start, stop = box[-1 - k]
        pairs = s2p_axis_split(start, stop - 1, width, m, axis=_AXES[k])
        splits.append([(a, b + 1) for a, b in pairs])
    count = math.prod(len(s) for s in splits)
    if count > S2P_MAX_REGIONS:
        raise ConfigError(f"region_shape: {'x'.join(str(len(s)) for s in splits)} = {count} regions; "
                          f"s2p_setup refuses more than {S2P_MAX_REGIONS}, choose larger regions")
    lead = box[:1] if len(shape) == 4 else ()
    # product() varies its last factor fastest: (z, y, x) gives idx = x + nx*(y + ny*z).
    return tuple(lead + (z, y, x) for z, y, x in itertools.product(splits[2], splits[1], splits[0]))


def _parse_ints(text, sep: str, count: int, name: str, minimum: int, help_text: str) -> tuple[int, ...]:
    bad = ConfigError(f"{name}: {help_text}, got {text!r}")
    if not isinstance(text, str):
        raise bad
    try:
        values = tuple(int(p.strip()) for p in text.strip().lower().split(sep))
    except ValueError:
        raise bad from None
    if len(values) != count or any(v < minimum for v in values):
        raise bad
    return values


def parse_region_shape(text: str) -> tuple[int, int, int]:
    """'1500x1500x1400' -> (1500, 1500, 1400): region width W, H, D in pixels, FITS order (x, y, z)."""
    return _parse_ints(text, "x", 3, "region_shape", 1,
                       "expected WxHxD pixels in FITS order (x first), each >= 1, e.g. '1500x1500x1400'")


def parse_min_overlap(text: str) -> tuple[int, int]:
    """'256,256' -> (256, 256): minimum (spatial, spectral) overlap in pixels."""
    return _parse_ints(text, ",", 2, "min_overlap", 0,
                       "expected 'SPATIAL,SPECTRAL' pixels, each >= 0, e.g. '256,256'")


def assign_regions(region_bytes, n_ranks: int) -> tuple[tuple[int, ...], ...]:
    """Region indices per rank, in reading order (largest first), by longest-processing-time greedy.

    Regions are visited by bytes descending (ties: lower index first); each goes to the rank with
    the fewest bytes so far (ties: lowest rank). So every rank's max load is at most the mean
    load plus the largest region. Ranks beyond the number of regions get nothing.
    """
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 1:
        raise ConfigError(f"ranks: need at least 1 rank, got {n_ranks!r}")
    sizes = [int(b) for b in region_bytes]
    if any(b < 0 for b in sizes):
        raise ConfigError(f"region bytes must be >= 0, got {min(sizes)}")
    loads = [(0, r) for r in range(n_ranks)]  # a heap of (bytes so far, rank): ties to lowest rank
    out: list[list[int]] = [[] for _ in range(n_ranks)]
    for idx in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, rank = heapq.heappop(loads)
        out[rank].append(idx)
        heapq.heappush(loads, (load + sizes[idx], rank))
    return tuple(tuple(lst) for lst in out)


def union_bytes(boxes, itemsize: int) -> int:
    """Exact bytes covered by the union of half-open boxes (overlaps counted once).

    Coordinate compression: each axis is cut at every box edge, a boolean array marks the cells
    any box covers, and covered cells are weighted by their size. The array has one cell per
    pair of neighbouring edges, so it stays small for grid or s2p decompositions.
    """
    boxes = [tuple((int(a), int(b)) for a, b in box) for box in boxes]
    if not boxes:
        return 0
    ndim = len(boxes[0])
    if ndim == 0 or any(len(b) != ndim for b in boxes):
        raise RegionError("union_bytes: every box needs the same number of axes (at least 1)")
    if any(a > b for box in boxes for a, b in box):
        raise RegionError("union_bytes: a box has start > stop")
    edges = [np.unique([v for box in boxes for v in box[k]]) for k in range(ndim)]
    covered = np.zeros([max(len(e) - 1, 0) for e in edges], dtype=bool)
    for box in boxes:
        covered[tuple(slice(np.searchsorted(e, a), np.searchsorted(e, b)) for e, (a, b) in zip(edges, box))] = True
    voxels = covered.astype(np.int64)
    for e in reversed(edges):  # contract the last axis with its cell widths, one axis at a time
        voxels = np.tensordot(voxels, np.diff(e).astype(np.int64), axes=([voxels.ndim - 1], [0]))
    return int(voxels) * int(itemsize)


def inclusive_fits_region(box) -> tuple[int, int, int, int, int, int]:
    """Numpy half-open (z, y, x) or (s, z, y, x) box -> (x_min, x_max, y_min, y_max, z_min, z_max).

    0-based and both ends inclusive, as SoFiA-2's input.region wants. A 4th numpy axis 0 has no
    field in input.region and is left out.
    """
    box = tuple((int(a), int(b)) for a, b in box)
    if len(box) not in (3, 4):
        raise RegionError(f"input.region: SoFiA-2 regions are for 3-D or 4-D cubes, got box {box}")
    if any(not 0 <= a < b for a, b in box):
        raise RegionError(f"input.region: box {box} is empty or has a negative start")
    (z0, z1), (y0, y1), (x0, x1) = box[-3:]
    return (x0, x1 - 1, y0, y1 - 1, z0, z1 - 1)


def fits_region_text(box) -> str:
    """The SoFiA-2 `input.region` value for a box: 'x_min, x_max, y_min, y_max, z_min, z_max'."""
    return ", ".join(str(v) for v in inclusive_fits_region(box))


def take_first(regions, n: int) -> tuple:
    """The first n regions of a split, in its order (x fastest), for weak scaling: the study
    splits the cube into B boxes once and a p-rank run reads p of them, each the same size."""
    if not 1 <= n <= len(regions):
        raise ConfigError(f"take_regions: {n} is not in 1..{len(regions)} (the split has {len(regions)} regions)")
    return tuple(regions[:n])
