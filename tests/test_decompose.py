"""Properties of ingest.core.decompose, checked against numpy counting for every rank count 1..64."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.core import decompose
from ingest.core.decompose import (
    auto_grid,
    contiguous_runs,
    describe_boxes,
    grid_boxes,
    parse_grid,
    resolve_grid,
    split_axis,
)
from ingest.errors import ConfigError

RANK_COUNTS = range(1, 65)
PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47]
MAX_VOXELS = 60_000  # keeps the numpy counter arrays small so 64 x examples stays fast
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def factorizations(n: int, ndim: int):
    """Brute force, independent of decompose._grids: ordered ndim-tuples with product n."""
    if ndim == 1:
        return [(n,)]
    return [(p,) + rest for p in range(1, n + 1) if n % p == 0 for rest in factorizations(n // p, ndim - 1)]


def fits_in(grid, shape) -> bool:
    return all(p <= n for p, n in zip(grid, shape))


@st.composite
def axis_size(draw, low: int, budget: int) -> int:
    high = max(low, min(50, budget))
    return draw(st.one_of(st.integers(low, high), st.sampled_from([p for p in PRIMES if low <= p <= high] or [low])))


@st.composite
def shape_and_grid(draw, n_ranks: int):
    """A shape (1-4 axes, sizes 1..50, primes likely) and a numpy-order grid of n_ranks that fits it.

    An axis split into p > 50 parts (prime rank counts 53, 59, 61) gets exactly p..p pixels.
    """
    ndim = draw(st.integers(1, 4))
    grid = draw(st.sampled_from(factorizations(n_ranks, ndim)))
    shape, used = [], math.prod(grid)
    for p in grid:
        budget = MAX_VOXELS * p // used  # remaining voxel budget for this axis
        size = draw(axis_size(p, budget))
        shape.append(size)
        used = used // p * size
    return tuple(shape), grid


@st.composite
def any_shape(draw):
    ndim = draw(st.integers(1, 4))
    shape, used = [], 1
    for _ in range(ndim):
        size = draw(axis_size(1, MAX_VOXELS // used))
        shape.append(size)
        used *= size
    return tuple(shape)


def counter(shape, boxes):
    count = np.zeros(shape, dtype=np.int32)
    for box in boxes:
        count[tuple(slice(a, b) for a, b in box)] += 1
    return count


def core_index(rank: int, grid):
    return np.unravel_index(rank, grid)


# ---------------------------------------------------------------- tiling without halo


@pytest.mark.parametrize("n_ranks", RANK_COUNTS)
@FAST
@given(data=st.data())
def test_boxes_cover_every_voxel_exactly_once(n_ranks, data):
    shape, grid = data.draw(shape_and_grid(n_ranks))
    boxes = grid_boxes(shape, tuple(reversed(grid)), n_ranks=n_ranks)
    assert len(boxes) == n_ranks
    assert np.all(counter(shape, boxes) == 1)
    for axis, (n, p) in enumerate(zip(shape, grid)):
        extents = {b[axis][1] - b[axis][0] for b in boxes}
        assert max(extents) - min(extents) <= 1  # balanced
        assert min(extents) >= 1
        assert max(extents) == math.ceil(n / p)
    # box 0 is a largest box: auto_grid's score relies on it
    sizes = [math.prod(b - a for a, b in box) for box in boxes]
    assert sizes[0] == max(sizes)


@pytest.mark.parametrize("n_ranks", RANK_COUNTS)
@FAST
@given(data=st.data())
def test_halo_overlap_is_exactly_as_documented(n_ranks, data):
    shape, grid = data.draw(shape_and_grid(n_ranks))
    halo = data.draw(st.integers(0, 6))
    grid_fits = tuple(reversed(grid))
    cores = grid_boxes(shape, grid_fits)
    grown = grid_boxes(shape, grid_fits, halo)
    for core, box in zip(cores, grown):
        for (a, b), (c, d), n in zip(core, box, shape):
            assert 0 <= c <= a < b <= d <= n  # contains its core, never leaves the cube
            assert (c, d) == (max(a - halo, 0), min(b + halo, n))
    # face neighbours: same part on every other axis, next part along `axis`
    for rank, box in enumerate(grown):
        idx = core_index(rank, grid)
        for axis, n in enumerate(shape):
            if idx[axis] + 1 == grid[axis]:
                continue
            nidx = list(idx)
            nidx[axis] += 1
            other = grown[int(np.ravel_multi_index(nidx, grid))]
            boundary = cores[rank][axis][1]
            shared = (max(box[axis][0], other[axis][0]), min(box[axis][1], other[axis][1]))
            assert shared == (max(boundary - halo, 0), min(boundary + halo, n))
            assert all(box[k] == other[k] for k in range(len(shape)) if k != axis)
    covered = counter(shape, grown)
    assert np.all(covered >= 1)
    if halo == 0:
        assert np.all(covered == 1)


def test_halo_example_2h_overlap():
    # 20 planes in 2 parts meet at 10: with halo 3 both boxes hold planes 7..12 (6 = 2H planes).
    boxes = grid_boxes((20, 4), (1, 2), halo=3)
    assert boxes == [((0, 13), (0, 4)), ((7, 20), (0, 4))]


def test_split_axis_larger_parts_first():
    assert split_axis(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_axis(6668, 25)[0] == (0, 267)


# ---------------------------------------------------------------- parse_grid and grid errors


def test_parse_grid_fits_order_and_padding():
    assert parse_grid("5x4x1", 3) == (5, 4, 1)
    assert parse_grid(" 5X4 ", 3) == (5, 4, 1)
    # 4-D (stokes, z, y, x): a 3-part grid leaves stokes whole
    assert parse_grid("1x1x25", 4) == (1, 1, 25, 1)
    boxes = grid_boxes((2, 50, 3, 3), parse_grid("1x1x25", 4))
    assert all(box[0] == (0, 2) for box in boxes)
    assert parse_grid("2x3x1", 2) == (2, 3)  # extra axes of 1 are harmless


@pytest.mark.parametrize("text", ["", "auto", "5x", "5xx5", "axb", "0x5", "-1x5", "2.5x2", "5x5x2x2"])
def test_parse_grid_errors_name_grid(text):
    with pytest.raises(ConfigError, match=r"^grid: "):
        parse_grid(text, 3)


def test_grid_product_must_match_ranks():
    with pytest.raises(ConfigError, match=r"grid: 5x5x1 makes 25 boxes but there are 24 ranks"):
        grid_boxes((10, 10, 10), (5, 5, 1), n_ranks=24)


def test_grid_more_parts_than_pixels():
    with pytest.raises(ConfigError, match=r"grid: .*splits x into 8 parts but it has only 7 pixels"):
        grid_boxes((3, 7), (8, 1))


def test_negative_halo_names_halo():
    with pytest.raises(ConfigError, match=r"^halo: .*pixels"):
        grid_boxes((10,), (2,), halo=-1)


# ---------------------------------------------------------------- auto_grid


@pytest.mark.parametrize("n_ranks", RANK_COUNTS)
@FAST
@given(shape=any_shape(), itemsize=st.sampled_from([1, 2, 4, 8]))
def test_auto_grid_is_valid_or_refused_clearly(n_ranks, shape, itemsize):
    feasible = [g for g in factorizations(n_ranks, len(shape)) if fits_in(g, shape)]
    if not feasible:
        match = "cannot split" if n_ranks > math.prod(shape) else "no grid of"
        with pytest.raises(ConfigError, match=rf"^grid: {match}"):
            auto_grid(shape, n_ranks, itemsize)
        return
    grid_fits, reason = auto_grid(shape, n_ranks, itemsize)
    assert math.prod(grid_fits) == n_ranks
    assert tuple(reversed(grid_fits)) in feasible
    assert reason and "balance" in reason
    assert np.all(counter(shape, grid_boxes(shape, grid_fits, n_ranks=n_ranks)) == 1)


@pytest.mark.parametrize("n_ranks", RANK_COUNTS)
@FAST
@given(shape=any_shape(), planes_per_rank=st.integers(1, 4))
def test_auto_grid_splits_only_the_slowest_axis_when_it_divides_evenly(n_ranks, shape, planes_per_rank):
    # Slowest axis with a multiple of n_ranks planes: one contiguous range per rank and perfect
    # balance, which no other grid can beat.
    shape = (n_ranks * planes_per_rank,) + shape[1:]
    grid_fits, reason = auto_grid(shape, n_ranks, 4)
    assert grid_fits == (1,) * (len(shape) - 1) + (n_ranks,)
    assert "one contiguous" in reason


def test_auto_grid_study_cube_splits_z():
    grid_fits, reason = auto_grid((6668, 5851, 5851), 25, 4)
    assert grid_fits == (1, 1, 25)
    assert reason.startswith("split z into 25: each rank reads at most one contiguous")
    assert "balance 1.00" in reason


def test_auto_grid_trades_one_range_for_balance_when_planes_are_scarce():
    # 30 planes on 25 ranks: z alone leaves 5 ranks with twice the data (balance 1.67); with
    # 4 MB planes the extra requests of a 5 x 5 split cost far less than that imbalance.
    grid_fits, reason = auto_grid((30, 1000, 1000), 25, 4)
    assert grid_fits == (1, 5, 5)
    assert "z alone would be balance 1.67" in reason
    # With tiny planes latency dominates and z alone wins despite the imbalance.
    assert auto_grid((30, 10, 10), 25, 4)[0] == (1, 1, 25)


def test_auto_grid_is_the_minimum_of_its_documented_score():
    shape, n_ranks = (12, 18, 20), 12
    grid_fits, _ = auto_grid(shape, n_ranks, 4)

    def score(grid):
        box = tuple((0, -(-n // p)) for n, p in zip(shape, grid))
        runs, run_px = contiguous_runs(shape, box)
        requests = runs * -(-(run_px * 4) // decompose.DEFAULT_CHUNK_BYTES)
        return requests * 0.002 / 4 + runs * run_px * 4 / 75e6

    best = min(score(g) for g in factorizations(n_ranks, 3) if fits_in(g, shape))
    assert score(tuple(reversed(grid_fits))) == best


def test_auto_grid_too_many_ranks():
    with pytest.raises(ConfigError, match=r"cannot split a cube of 6 voxels .* at most 6 ranks"):
        auto_grid((2, 3), 7, 4)
    with pytest.raises(ConfigError, match=r"no grid of 3 ranks .* run with 2 ranks"):
        auto_grid((2, 2), 3, 4)  # 4 voxels, but 3 is prime and no axis has 3 pixels


# ---------------------------------------------------------------- runs and descriptions


@given(shape=any_shape(), data=st.data())
@settings(max_examples=200, deadline=None)
def test_contiguous_runs_match_numpy_offsets(shape, data):
    box = tuple(data.draw(st.tuples(st.integers(0, n - 1), st.integers(1, n))) for n in shape)
    box = tuple((a, max(a + 1, b)) for a, b in box)
    flat = np.arange(math.prod(shape)).reshape(shape)[tuple(slice(a, b) for a, b in box)].ravel()
    n_runs, run_px = contiguous_runs(shape, box)
    breaks = np.count_nonzero(np.diff(flat) != 1)
    assert n_runs * run_px == flat.size
    assert n_runs == breaks + 1


def test_describe_boxes_and_resolve_grid():
    shape = (10, 6, 4)
    boxes = grid_boxes(shape, (1, 1, 3))
    stats = describe_boxes(shape, boxes, 4)
    assert [s.n_bytes for s in stats] == [4 * 6 * 4 * 4, 3 * 6 * 4 * 4, 3 * 6 * 4 * 4]
    assert all(s.n_runs == 1 for s in stats)
    grid_fits, reason = resolve_grid(shape, "2x1x1", 2, 4)
    assert grid_fits == (2, 1, 1) and "60 contiguous run(s) of 8 B" in reason
    assert resolve_grid(shape, "auto", 3, 4)[0] == (1, 1, 3)
    # Regions are not ranks: a given grid of 4 regions runs on 3 ranks (the driver assigns them).
    grid_fits, reason = resolve_grid(shape, "2x2", 3, 4)
    assert grid_fits == (2, 2, 1) and "4 region(s) on 3 rank(s)" in reason
    with pytest.raises(ConfigError, match="^grid: "):
        resolve_grid(shape, "2x2x2x2", 3, 4)
