"""Decomposition (pure): a cube's shape and a rank count -> one box per MPI rank.

Conventions
* A box is a tuple of half-open `(start, stop)` pairs in numpy axis order (slowest axis
  first): `data[tuple(slice(a, b) for a, b in box)]` is the rank's subcube.
* A grid is written by users in FITS order, x (NAXIS1, the fastest axis) first: "5x5x1" splits
  x and y into 5 and leaves z whole. Axes the grid does not mention are left whole, so a 3-part
  grid on a (stokes, z, y, x) cube never splits stokes.
* Rank r owns box r, boxes numbered in C order over the grid (numpy order): the part index along
  the slowest axis changes slowest, so with only z split rank order is file-offset order.
* Along each axis n pixels go to p parts as evenly as possible (sizes differ by at most 1,
  larger parts first), so box 0 is always a largest box.

Halo (`halo=H` pixels)
* Each box is its core box grown by H pixels on both sides along every axis, clipped to the
  cube. Sides on the cube edge therefore do not grow; every other side grows into the neighbour.
* Two boxes adjacent along an axis, whose cores meet at plane b of an n-pixel axis, share
  exactly the planes [max(b - H, 0), min(b + H, n)) along that axis (2H planes unless the cube
  edge clips them) and have identical extents along every other axis.
* A core thinner than H lets a grown box reach past its neighbour into the next one; the
  statement above about direct neighbours still holds.
* halo=0 gives the cores, which tile the cube: every voxel belongs to exactly one rank.

Automatic grid (`auto_grid`): FITS data is C order with x fastest, so a box that splits only
the slowest axis is one contiguous byte range, while a box that splits x is one short run per
(z, y) row. Every grid whose parts fit the shape is scored by the predicted read time of the
slowest rank (box 0, a largest box), with the planner's cost model:

    score_s = requests * latency_s / threads + box_bytes / bandwidth_bytes_per_s
    requests = runs * ceil(run_bytes / chunk_bytes)

where `runs` is the number of contiguous byte runs in the box. The bytes term is the load
imbalance (the slowest rank reads max, not mean, bytes); the requests term penalises splitting
fast axes. Ties go to fewer runs, then to more parts on slower axes. Consequence: when the
slowest axis has at least as many planes as ranks, it alone is split unless the leftover
imbalance costs more time than the extra requests of a balanced multi-axis split (30 planes on
25 ranks: 5 ranks read 2 planes, 20 read 1; splitting z into 5 and y into 5 can be faster).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ingest.errors import ConfigError, RegionError
from ingest.core.lattice import DEFAULT_CHUNK_BYTES, DEFAULT_THREADS, CostModel  # noqa: F401 - re-exported defaults
from ingest.units import format_bytes

Box = tuple[tuple[int, int], ...]

# Same defaults as RunConfig and planner.CostModel (a test keeps them in sync); the driver
# passes the configured values.
DEFAULT_LATENCY_S = CostModel.latency_s
DEFAULT_BANDWIDTH_BYTES_PER_S = CostModel.bandwidth_bytes_per_s

_GRID_HELP = "expected 'auto' or parts per axis in FITS order (x first), e.g. '5x5x1'"


def fits_axis_name(numpy_axis: int, ndim: int) -> str:
    """Human name of a numpy axis: x, y, z for FITS axes 1-3, then 'axis4', 'axis5', ..."""
    fits_axis = ndim - numpy_axis
    return {1: "x", 2: "y", 3: "z"}.get(fits_axis, f"axis{fits_axis}")


def format_grid(grid_fits: tuple[int, ...]) -> str:
    """(5, 5, 1) -> '5x5x1' (FITS order, the form `parse_grid` reads)."""
    return "x".join(str(p) for p in grid_fits)


def parse_grid(text: str, ndim: int) -> tuple[int, ...]:
    """Parse 'PXxPYxPZ' (FITS order) into ndim parts in FITS order; unmentioned axes get 1."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"grid: {_GRID_HELP}, got {text!r}")
    pieces = text.strip().lower().split("x")
    try:
        parts = tuple(int(p.strip()) for p in pieces)
    except ValueError:
        raise ConfigError(f"grid: {_GRID_HELP}, got {text!r}") from None
    if any(p < 1 for p in parts):
        raise ConfigError(f"grid: every axis needs at least 1 part, got {text!r}")
    return _fit_grid(parts, ndim, text)


def _fit_grid(parts: tuple[int, ...], ndim: int, text) -> tuple[int, ...]:
    """Pad with 1s for axes not mentioned; extra trailing axes are allowed only if they are 1."""
    if len(parts) > ndim:
        if any(p != 1 for p in parts[ndim:]):
            raise ConfigError(f"grid: {text!r} splits {len(parts)} axes but the cube has only {ndim}")
        parts = parts[:ndim]
    return tuple(parts) + (1,) * (ndim - len(parts))


def check_shape(shape) -> tuple[int, ...]:
    shape = tuple(int(n) for n in shape)
    if not shape:
        raise RegionError("cube has no axes (NAXIS = 0): nothing to split among ranks")
    if any(n < 1 for n in shape):
        raise RegionError(f"cube shape {shape} has an empty axis: nothing to split among ranks")
    return shape


def _numpy_grid(shape: tuple[int, ...], grid_fits, n_ranks: int | None) -> tuple[int, ...]:
    """Validate a FITS-order grid against the shape and rank count; return it in numpy order."""
    grid_fits = _fit_grid(tuple(int(p) for p in grid_fits), len(shape), format_grid(grid_fits))
    grid = tuple(reversed(grid_fits))
    if any(p < 1 for p in grid):
        raise ConfigError(f"grid: every axis needs at least 1 part, got {format_grid(grid_fits)}")
    if n_ranks is not None and math.prod(grid) != n_ranks:
        raise ConfigError(
            f"grid: {format_grid(grid_fits)} makes {math.prod(grid)} boxes but there are {n_ranks} ranks "
            "(the product of the parts must equal the number of ranks)"
        )
    for axis, (p, n) in enumerate(zip(grid, shape)):
        if p > n:
            raise ConfigError(
                f"grid: {format_grid(grid_fits)} splits {fits_axis_name(axis, len(shape))} into {p} parts "
                f"but it has only {n} pixels (every part needs at least 1 pixel)"
            )
    return grid


def split_axis(n_px: int, parts: int) -> list[tuple[int, int]]:
    """n_px pixels into `parts` half-open intervals whose sizes differ by at most 1, larger first."""
    size, extra = divmod(n_px, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + size + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def grid_boxes(shape, grid_fits, halo: int = 0, *, n_ranks: int | None = None, chunk_shape=None,
               origin=None) -> list[Box]:
    """One box per rank (list index = rank), grown by `halo` pixels as described above.

    `grid_fits` is in FITS order (x first); with `n_ranks` given, the grid's product must equal it.
    With `chunk_shape` (a chunked HDF5 dataset; `origin`: where `shape` starts in it), the cuts
    fall on chunk boundaries where the axis has chunks enough, so no chunk is read by two boxes.
    """
    shape = check_shape(shape)
    if isinstance(halo, bool) or not isinstance(halo, int) or halo < 0:
        raise ConfigError(f"halo: expected a whole number of pixels >= 0, got {halo!r}")
    grid = _numpy_grid(shape, grid_fits, n_ranks)
    if chunk_shape is None:
        splits = [split_axis(n, p) for n, p in zip(shape, grid)]
    else:
        from ingest.core.chunkplan import chunk_aligned_split

        splits = chunk_aligned_split(shape, chunk_shape, grid, origin)
    per_axis = [[(max(a - halo, 0), min(b + halo, n)) for a, b in split] for n, split in zip(shape, splits)]
    return [tuple(box) for box in itertools.product(*per_axis)]


def contiguous_runs(shape, box: Box) -> tuple[int, int]:
    """(number of runs, voxels per run) of the contiguous byte runs a box occupies in C order."""
    extents = [b - a for a, b in box]
    run_px, axis = 1, len(shape) - 1
    # Trailing axes read whole merge into one run, as does the first partial axis met.
    while axis >= 0:
        run_px *= extents[axis]
        if extents[axis] != shape[axis]:
            break
        axis -= 1
    return math.prod(extents[: max(axis, 0)]), run_px


@dataclass(frozen=True)
class BoxStats:
    """What one rank reads: its box, its size and how fragmented it is in the file."""

    rank: int
    box: Box
    n_voxels: int
    n_bytes: int
    n_runs: int  # contiguous byte ranges in the file (1 = one sequential read)
    run_bytes: int  # bytes per run


def describe_boxes(shape, boxes: list[Box], itemsize: int) -> list[BoxStats]:
    """Per-rank voxels, bytes and contiguous runs, for `plan` output and reports."""
    stats = []
    for rank, box in enumerate(boxes):
        n_voxels = math.prod(b - a for a, b in box)
        n_runs, run_px = contiguous_runs(shape, box)
        stats.append(BoxStats(rank, box, n_voxels, n_voxels * itemsize, n_runs, run_px * itemsize))
    return stats


def balance(stats: list[BoxStats]) -> float:
    """Load balance: largest box bytes / mean box bytes (1.0 = perfect)."""
    mean_bytes = sum(s.n_bytes for s in stats) / len(stats)
    return max(s.n_bytes for s in stats) / mean_bytes


def _grids(shape: tuple[int, ...], n_ranks: int):
    """Every numpy-order grid with product n_ranks and no axis split into more parts than pixels."""

    def rec(axis: int, left: int):
        if axis == len(shape) - 1:
            if left <= shape[axis]:
                yield (left,)
            return
        for p in range(1, min(left, shape[axis]) + 1):
            if left % p == 0:
                for rest in rec(axis + 1, left // p):
                    yield (p,) + rest

    yield from rec(0, n_ranks)


@dataclass(frozen=True)
class _Score:
    grid: tuple[int, ...]  # numpy order
    score_s: float
    n_runs: int
    run_bytes: int
    box_bytes: int
    balance: float

    def key(self):
        # Lower time, then fewer runs, then more parts on the slower axes.
        return (self.score_s, self.n_runs, tuple(-p for p in self.grid))


def _score(shape, grid, itemsize, latency_s, bandwidth_bytes_per_s, chunk_bytes, threads) -> _Score:
    box0 = tuple((0, -(-n // p)) for n, p in zip(shape, grid))  # a largest box
    n_runs, run_px = contiguous_runs(shape, box0)
    run_bytes = run_px * itemsize
    box_bytes = n_runs * run_bytes
    requests = n_runs * -(-run_bytes // chunk_bytes)
    score_s = requests * latency_s / threads + box_bytes / bandwidth_bytes_per_s
    mean_bytes = math.prod(shape) * itemsize / math.prod(grid)
    return _Score(grid, score_s, n_runs, run_bytes, box_bytes, box_bytes / mean_bytes)


def _largest_feasible(shape: tuple[int, ...], n_ranks: int) -> int:
    return next(m for m in range(n_ranks - 1, 0, -1) if next(_grids(shape, m), None) is not None)


def auto_grid(
    shape,
    n_ranks: int,
    itemsize: int,
    *,
    latency_s: float = DEFAULT_LATENCY_S,
    bandwidth_bytes_per_s: float = DEFAULT_BANDWIDTH_BYTES_PER_S,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int = DEFAULT_THREADS,
) -> tuple[tuple[int, ...], str]:
    """Choose the grid (FITS order) with the lowest predicted slowest-rank read time; see module doc.

    Returns (grid_fits, reason), reason being one line for `plan` to print.
    """
    shape = check_shape(shape)
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 1:
        raise ConfigError(f"grid: need at least 1 rank, got {n_ranks!r}")
    n_voxels = math.prod(shape)
    if n_ranks > n_voxels:
        raise ConfigError(
            f"grid: cannot split a cube of {n_voxels} voxels (shape {shape}) among {n_ranks} ranks; "
            f"every rank needs at least 1 voxel, so run with at most {n_voxels} ranks"
        )
    cost = (latency_s, bandwidth_bytes_per_s, chunk_bytes, max(1, threads))
    scores = [_score(shape, g, itemsize, *cost) for g in _grids(shape, n_ranks)]
    if not scores:
        raise ConfigError(
            f"grid: no grid of {n_ranks} ranks fits the cube shape {shape} (numpy order): every way "
            f"of factoring {n_ranks} splits some axis into more parts than it has pixels; "
            f"run with {_largest_feasible(shape, n_ranks)} ranks or give --grid with fewer parts"
        )
    best = min(scores, key=_Score.key)
    slow_only = tuple([n_ranks] + [1] * (len(shape) - 1))
    alternative = next((s for s in scores if s.grid == slow_only and s is not best), None)
    return tuple(reversed(best.grid)), _reason(shape, best, alternative, n_ranks)


def _reason(shape, best: _Score, alternative: _Score | None, n_ranks: int) -> str:
    ndim = len(shape)
    if n_ranks == 1:
        head = "no split (1 rank)"
    else:
        split = [f"{fits_axis_name(a, ndim)} into {p}" for a, p in enumerate(best.grid) if p > 1]
        head = "split " + ", ".join(split)
    if best.n_runs == 1:
        reads = f"one contiguous {format_bytes(best.box_bytes)} range"
    else:
        reads = (f"{best.n_runs:,} contiguous runs of {format_bytes(best.run_bytes)} "
                 f"({format_bytes(best.box_bytes)})")
    text = f"{head}: each rank reads at most {reads} (balance {best.balance:.2f}, predicted {best.score_s:.3g} s)"
    if alternative is not None:
        text += (f"; splitting {fits_axis_name(0, ndim)} alone would be balance "
                 f"{alternative.balance:.2f}, predicted {alternative.score_s:.3g} s")
    return text


def resolve_grid(shape, grid_text: str, n_ranks: int, itemsize: int, **cost) -> tuple[tuple[int, ...], str]:
    """'auto' -> auto_grid(...); otherwise parse and check the user's grid. Returns (grid_fits, reason)."""
    shape = check_shape(shape)
    if isinstance(grid_text, str) and grid_text.strip().lower() == "auto":
        return auto_grid(shape, n_ranks, itemsize, **cost)
    grid_fits = parse_grid(grid_text, len(shape))
    boxes = grid_boxes(shape, grid_fits)  # a given grid makes its own number of regions, ranks or not
    stats = describe_boxes(shape, boxes, itemsize)
    worst = max(stats, key=lambda s: (s.n_bytes, s.n_runs))
    return grid_fits, (
        f"grid {format_grid(grid_fits)} as given: {len(boxes)} region(s) on {n_ranks} rank(s); each region "
        f"is at most {worst.n_runs:,} contiguous run(s) of {format_bytes(worst.run_bytes)} "
        f"(balance {balance(stats):.2f})"
    )
