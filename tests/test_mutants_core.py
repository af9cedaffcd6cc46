"""The core's pure geometry checked exhaustively on small cubes against numpy (every box, every
range), where the property tests in test_parts.py and test_decompose.py sample: these are the
tests that kill the mutants scripts/mutation.sh found surviving (docs/testing.md)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ingest.core.byteruns import ObjectImage, box_bytes_before, box_item_range, box_runs, cube_item, range_blocks
from ingest.core.decompose import (BoxStats, auto_grid, balance, describe_boxes, fits_axis_name, grid_boxes,
                                   parse_grid, resolve_grid)
from ingest.core.ownership import owned_boxes
from ingest.errors import ConfigError, RegionError
from tests.ownership_oracle import labels_of, owner_labels

SHAPES = [(5,), (2, 3), (3, 1, 4), (2, 3, 2)]


def _boxes(shape):
    """Every non-empty box of `shape`."""
    per_axis = [[(a, b) for a in range(n) for b in range(a + 1, n + 1)] for n in shape]
    return list(itertools.product(*per_axis))


def _byte_mask(box, shape, itemsize) -> np.ndarray:
    inside = np.zeros(shape, bool)
    inside[tuple(slice(a, b) for a, b in box)] = True
    return np.repeat(inside.reshape(-1), itemsize)


def _segments(mask: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """Maximal runs (start, length) of True in mask[lo:hi] (lo, hi clipped to the mask)."""
    lo, hi = max(lo, 0), min(hi, mask.size)
    out, start = [], None
    for i in range(lo, max(hi, lo)):
        if mask[i] and start is None:
            start = i
        if not mask[i] and start is not None:
            out.append((start, i - start))
            start = None
    if start is not None:
        out.append((start, hi - start))
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("itemsize", [1, 2])
def test_box_runs_are_the_boxs_maximal_byte_runs_in_any_range(shape, itemsize):
    data_bytes = math.prod(shape) * itemsize
    edges = sorted({-2, 0, 1, itemsize + 1, data_bytes // 2, data_bytes - 1, data_bytes, data_bytes + 3})
    for box in _boxes(shape):
        mask = _byte_mask(box, shape, itemsize)
        for lo, hi in itertools.product(edges, edges):
            starts, lengths = box_runs(box, shape, itemsize, lo, hi)
            assert starts.dtype == np.int64 and lengths.dtype == np.int64 and len(starts) == len(lengths)
            want = _segments(mask, lo, hi) if lo < hi else []
            assert list(zip(starts.tolist(), lengths.tolist())) == want, (shape, box, itemsize, lo, hi)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("itemsize", [1, 3])
def test_box_bytes_before_every_position_counts_the_boxs_bytes_before_it(shape, itemsize):
    data_bytes = math.prod(shape) * itemsize
    positions = np.arange(data_bytes + 1)
    for box in _boxes(shape):
        mask = _byte_mask(box, shape, itemsize)
        want = np.concatenate([[0], np.cumsum(mask)])
        got = box_bytes_before(box, shape, itemsize, positions)
        assert got.dtype == np.int64 and got.tolist() == want.tolist(), (shape, box, itemsize)


@pytest.mark.parametrize("shape", SHAPES + [(2, 2, 3, 2)])
def test_range_blocks_are_at_most_2n_minus_1_nonempty_boxes_tiling_the_range(shape):
    total = math.prod(shape)
    index = np.arange(total).reshape(shape)
    for start in range(total + 1):
        assert range_blocks(shape, start, start) == [] and range_blocks(shape, start, start - 1) == []
        for stop in range(start + 1, total + 1):
            blocks = range_blocks(shape, start, stop)
            assert 1 <= len(blocks) <= 2 * len(shape) - 1
            assert all(len(b) == len(shape) and all(0 <= a < c <= n for (a, c), n in zip(b, shape)) for b in blocks)
            got = np.concatenate([index[tuple(slice(a, b) for a, b in block)].reshape(-1) for block in blocks])
            assert got.tolist() == list(range(start, stop)), (shape, start, stop, blocks)


def test_range_blocks_of_whole_planes_is_one_block():
    assert range_blocks((4, 2, 3), 6, 18) == [((1, 3), (0, 2), (0, 3))]
    assert range_blocks((4, 2, 3), 7, 14) == [((1, 2), (0, 1), (1, 3)), ((1, 2), (1, 2), (0, 3)),
                                              ((2, 3), (0, 1), (0, 2))]


@pytest.mark.parametrize("shape", SHAPES)
def test_box_item_range_and_cube_item_for_every_box_and_range(shape):
    total = math.prod(shape)
    flat = np.arange(total).reshape(shape)
    for box in _boxes(shape):
        cube_index = flat[tuple(slice(a, b) for a, b in box)].reshape(-1)
        for local, want in enumerate(cube_index.tolist()):
            assert cube_item(box, shape, local) == want
            assert type(cube_item(box, shape, local)) is int
        for lo in range(total + 1):
            for hi in range(lo, total + 1):
                first, stop = box_item_range(box, shape, lo, hi)
                inside = np.flatnonzero((cube_index >= lo) & (cube_index < hi))
                want = (int(inside[0]), int(inside[-1]) + 1) if inside.size else (first, first)
                assert (first, stop) == want and type(first) is int and type(stop) is int


def test_object_image_check_names_the_span_that_breaks_the_tiling():
    header, pad = (0, b"h" * 10), (30, b"\0" * 80)
    ObjectImage(110, 10, (5,), 4, (header, pad, (110, b""))).check()  # an empty piece takes no bytes
    assert ObjectImage(110, 10, (5,), 4, (header, pad)).data_bytes == 20
    with pytest.raises(RegionError, match=r"data at byte 12 but the previous span ends at 10; .* a hole"):
        ObjectImage(110, 12, (5,), 4, (header, (32, b"\0" * 78))).check()
    with pytest.raises(RegionError, match=r"metadata at byte 28 but the previous span ends at 30; "
                                          r"the object would have overlapping bytes"):
        ObjectImage(110, 10, (5,), 4, (header, (28, b"\0" * 82))).check()
    with pytest.raises(RegionError, match=r"metadata at byte 32 but the previous span ends at 30; .* a hole"):
        ObjectImage(110, 10, (5,), 4, (header, (32, b"\0" * 78))).check()
    with pytest.raises(RegionError, match=r"spans end at byte 110, the object is 120 bytes"):
        ObjectImage(120, 10, (5,), 4, (header, pad)).check()


# --- core/ownership ---------------------------------------------------------------------------

def _first_region_labels(regions, shape) -> np.ndarray:
    """Each voxel to the first region, in index order, that holds it (-1: none)."""
    labels = np.full(shape, -1)
    for r, box in reversed(list(enumerate(regions))):
        labels[tuple(slice(a, b) for a, b in box)] = r
    return labels


def _is_rising_grid_1d(regions) -> bool:
    """Distinct intervals whose starts and stops both rise strictly once sorted: the middle cut's case."""
    intervals = sorted(box[0] for box in regions)
    return len(set(intervals)) == len(regions) and all(
        b[0] > a[0] and b[1] > a[1] for a, b in zip(intervals, intervals[1:]))


@pytest.mark.parametrize("n", [3, 5, 6])
def test_every_set_of_up_to_three_intervals_is_owned_by_the_middle_cut_or_the_first_holder(n):
    """On one axis: a rising grid whose middle cut leaves every interval a voxel is owned as the
    oracle's middle cut (tests/ownership_oracle.py); anything else (same start, same stop, nested,
    duplicates) goes voxel by voxel to the first region holding it; a hole is named."""
    intervals = [((a, b),) for a in range(n) for b in range(a + 1, n + 1)]
    for k in (1, 2, 3):
        for regions in itertools.permutations(intervals, k):
            covered = np.zeros(n, bool)
            for ((a, b),) in regions:
                covered[a:b] = True
            if not covered.all():
                hole = int(np.flatnonzero(~covered)[0])
                with pytest.raises(RegionError, match=rf"voxel \({hole},\) \(numpy order\) is in no region"):
                    owned_boxes(list(regions), (n,))
                continue
            got = labels_of(owned_boxes(list(regions), (n,)), (n,))
            middle = owner_labels(regions, (n,)) if _is_rising_grid_1d(regions) else None
            if middle is not None and set(middle.tolist()) == set(range(k)):
                assert got.tolist() == middle.tolist(), regions
            else:
                assert got.tolist() == _first_region_labels(regions, (n,)).tolist(), regions


def test_a_regions_cells_merge_along_the_last_axis_only_where_they_touch_in_one_row():
    assert owned_boxes([((0, 4),), ((1, 3),)], (4,)) == ((((0, 4),),), ())
    # 2-d: the first region's corner cell, the rest of each row merged into one box per row
    small, whole = ((0, 1), (0, 1)), ((0, 2), (0, 3))
    assert owned_boxes([small, whole], (2, 3)) == ((small,), (((0, 1), (1, 3)), ((1, 2), (0, 3))))
    small, whole = ((0, 1), (0, 1), (0, 1)), ((0, 2), (0, 2), (0, 3))
    assert owned_boxes([small, whole], (2, 2, 3)) == (
        (small,), (((0, 1), (0, 1), (1, 3)), ((0, 1), (1, 2), (0, 3)), ((1, 2), (0, 1), (0, 3)),
                   ((1, 2), (1, 2), (0, 3))))


def test_the_first_voxel_no_region_holds_is_named_even_before_every_box():
    with pytest.raises(RegionError, match=r"voxel \(0,\) \(numpy order\) is in no region"):
        owned_boxes([((1, 3),)], (4,))
    with pytest.raises(RegionError, match=r"voxel \(0, 0\) \(numpy order\) is in no region"):
        owned_boxes([((1, 3), (0, 2)), ((0, 3), (2, 3))], (3, 3))


def test_no_region_an_empty_box_or_a_box_of_other_axes_is_refused_by_name():
    with pytest.raises(RegionError, match=r"regions: none given for a cube of shape \(4, 2\)"):
        owned_boxes([], (4, 2))
    with pytest.raises(RegionError, match=r"region 1: box \(\(2, 2\),\) is empty or outside the cube"):
        owned_boxes([((0, 2),), ((2, 2),), ((2, 4),)], (4,))
    with pytest.raises(RegionError, match=r"region 0: box \(\(0, 2\),\) is empty or outside"):
        owned_boxes([((0, 2),)], (2, 2))


# --- core/decompose ---------------------------------------------------------------------------

def test_axes_are_named_x_y_z_then_by_fits_number():
    assert [fits_axis_name(a, 5) for a in range(5)] == ["axis5", "axis4", "z", "y", "x"]
    with pytest.raises(ConfigError, match=r"grid: 1x1x1x2 splits axis4 into 2 parts but it has only 1 pixels"):
        grid_boxes((1, 3, 3, 3), (1, 1, 1, 2))
    with pytest.raises(ConfigError, match=r"splits y into 4 parts but it has only 3 pixels"):
        grid_boxes((2, 3, 5), (1, 4, 1))


def test_a_grid_that_is_not_text_or_has_too_many_axes_is_refused_by_name():
    for bad in (5, None, "  "):
        with pytest.raises(ConfigError, match=r"grid: expected 'auto' or parts per axis"):
            parse_grid(bad, 3)
    with pytest.raises(ConfigError, match=r"grid: '2x1x3' splits 3 axes but the cube has only 2"):
        parse_grid("2x1x3", 2)


def test_describe_boxes_and_balance_exactly():
    stats = describe_boxes((3, 4), [((0, 2), (0, 4)), ((2, 3), (1, 3))], 4)
    assert stats == [BoxStats(0, ((0, 2), (0, 4)), 8, 32, 1, 32), BoxStats(1, ((2, 3), (1, 3)), 2, 8, 1, 8)]
    assert balance(stats) == pytest.approx(32 / 20)


def test_ties_in_predicted_time_and_runs_go_to_more_parts_on_the_slower_axis():
    grid, reason = auto_grid((4, 4), 6, 4)
    assert grid == (2, 3) and reason.startswith("split y into 3, x into 2: ")  # not y 2 x 3


def test_the_reason_prints_the_documented_score_with_the_given_cost_model():
    cost = dict(latency_s=0.01, bandwidth_bytes_per_s=1e6, chunk_bytes=100, threads=2)
    # one rank: one run of 4 x 8 x 8 x 4 = 1024 bytes, 11 requests of <= 100 bytes:
    # 11 x 0.01 s / 2 threads + 1024 B / 1e6 B/s = 0.056 s
    grid, reason = auto_grid((4, 8, 8), 1, 4, **cost)
    assert grid == (1, 1, 1)
    assert reason == ("no split (1 rank): each rank reads at most one contiguous 1 KiB range "
                      "(balance 1.00, predicted 0.056 s)")
    assert resolve_grid((4, 8, 8), "auto", 1, 4, **cost) == (grid, reason)


def test_too_many_ranks_for_any_grid_names_the_largest_count_that_fits():
    with pytest.raises(ConfigError, match=r"run with 6 ranks or give --grid"):  # 8 = 2 x 4 and 7 fit no 3 x 3
        auto_grid((3, 3), 8, 4)


def test_the_reason_for_a_balanced_split_names_its_runs_and_the_slow_axis_alternative():
    grid, reason = auto_grid((30, 100, 100), 25, 4, bandwidth_bytes_per_s=1e6, latency_s=0.0)
    assert grid == (1, 5, 5)
    assert reason == ("split z into 5, y into 5: each rank reads at most 6 contiguous runs of 7.8 KiB (46.9 KiB) "
                      "(balance 1.00, predicted 0.048 s); splitting z alone would be balance 1.67, predicted 0.08 s")
    assert auto_grid((4, 4), 6, 4)[1] == ("split y into 3, x into 2: each rank reads at most 2 contiguous runs of "
                                          "8 B (16 B) (balance 1.50, predicted 0.001 s)")


def test_auto_grid_counts_zero_threads_as_one_and_refuses_a_rank_count_that_is_no_whole_number():
    # 11 requests x 0.01 s / 1 thread + 1024 B / 1e6 B/s = 0.111 s
    _, reason = auto_grid((4, 8, 8), 1, 4, latency_s=0.01, bandwidth_bytes_per_s=1e6, chunk_bytes=100, threads=0)
    assert reason.endswith("(balance 1.00, predicted 0.111 s)")
    for bad in (0, True, 2.0):
        with pytest.raises(ConfigError, match=rf"grid: need at least 1 rank, got {bad!r}"):
            auto_grid((4, 8, 8), bad, 4)


def test_a_halo_that_is_no_whole_number_and_a_cube_without_voxels_are_refused_by_name():
    for bad in (True, 1.5, -1):
        with pytest.raises(ConfigError, match=rf"halo: expected a whole number of pixels >= 0, got {bad!r}"):
            grid_boxes((4, 4), (2, 2), bad)
    with pytest.raises(RegionError, match=r"cube has no axes \(NAXIS = 0\): nothing to split among ranks"):
        grid_boxes((), ())
    with pytest.raises(RegionError, match=r"cube shape \(3, 0\) has an empty axis: nothing to split among ranks"):
        grid_boxes((3, 0), (1, 1))


def test_chunk_aligned_cuts_follow_the_regions_origin_in_the_dataset():
    # chunks of 4 from dataset pixel 0; the region starts at pixel 2, so its first chunk boundary is at 2
    assert grid_boxes((8,), (2,), chunk_shape=(4,), origin=(2,)) == [((0, 6),), ((6, 8),)]
    assert grid_boxes((8,), (2,), chunk_shape=(4,)) == [((0, 4),), ((4, 8),)]


def test_a_grid_given_as_numbers_is_checked_with_its_own_spelling():
    with pytest.raises(ConfigError, match=r"grid: '1x1x2' splits 3 axes but the cube has only 2"):
        grid_boxes((2, 3), (1, 1, 2))
    with pytest.raises(ConfigError, match=r"grid: every axis needs at least 1 part, got 0x1"):
        grid_boxes((2, 3), (0, 1))
    with pytest.raises(ConfigError, match=r"grid: 2x1 makes 2 boxes but there are 3 ranks "
                                          r"\(the product of the parts must equal the number of ranks\)"):
        grid_boxes((2, 3), (2, 1), n_ranks=3)
