"""Properties of ingest.core.regions: s2p_setup's split against a literal transcription of the
published script, coverage and order of the regions, rank assignment, union bytes, input.region."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ingest.core.regions import (
    assign_regions,
    fits_region_text,
    inclusive_fits_region,
    parse_min_overlap,
    parse_region_shape,
    s2p_axis_split,
    s2p_regions,
    union_bytes,
)
from ingest.errors import ConfigError, RegionError

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def script_split(lo: int, hi: int, w: int, min_overlap: int) -> list[tuple[int, int]]:
    """Oracle: AusSRC/s2p_setup's subcube_split_dimension plus its per-axis start/end lines, step
    by step as the script runs them (loop for N, float division then floor, max(.., 0), min(.., max)).
    Raises whatever the script raises: Exception for a too-wide region, ZeroDivisionError at N == 1."""
    w_total = hi - lo
    N = 1
    width = N * (w - min_overlap) + min_overlap
    if width > w_total:
        raise Exception("Selected region smaller than minimum sub-cube size in one dimension.")
    while width < w_total:
        N += 1
        width = N * (w - min_overlap) + min_overlap
    overlap = math.floor((N * w - w_total) / (N - 1))
    out = []
    for i in range(N):
        x1 = max((w - overlap) * i + lo, 0)
        x2 = min(x1 + w, hi)
        out.append((x1, x2))
    return out


@st.composite
def axis_cases(draw):
    lo = draw(st.integers(0, 40))
    extent = draw(st.integers(0, 2500))
    w = draw(st.one_of(st.integers(1, 40), st.integers(1, extent + 3)))
    m = draw(st.integers(0, w - 1))
    return lo, lo + extent, w, m


@SETTINGS
@given(axis_cases())
def test_axis_split_equals_published_script(case):
    lo, hi, w, m = case
    try:
        expected = script_split(lo, hi, w, m)
    except (Exception, ZeroDivisionError):
        with pytest.raises(ConfigError, match="region_shape"):
            s2p_axis_split(lo, hi, w, m)
        return
    assert s2p_axis_split(lo, hi, w, m) == expected


@st.composite
def cubes(draw):
    """A small shape (numpy order), region shape (FITS order), overlaps and an optional job box."""
    ndim = draw(st.sampled_from([3, 4]))
    shape = (draw(st.integers(1, 3)),) if ndim == 4 else ()
    shape += tuple(draw(st.integers(3, 22)) for _ in range(3))
    box = None
    if draw(st.booleans()):
        box = []
        for n in shape:
            a = draw(st.integers(0, n - 1))
            box.append((a, draw(st.integers(a + 1, n))))
        box = tuple(box)
    extents = [b - a for a, b in (box or tuple((0, n) for n in shape))][-3:]
    assume(all(e >= 3 for e in extents))
    widths = tuple(draw(st.integers(1, e - 2)) for e in reversed(extents))  # FITS order, w < E
    spat = draw(st.integers(0, min(widths[0], widths[1]) - 1))
    spec = draw(st.integers(0, widths[2] - 1))
    return shape, widths, (spat, spec), box


@SETTINGS
@given(cubes())
def test_regions_cover_job_box_exactly_in_x_fastest_order(case):
    shape, widths, overlaps, job_box = case
    full = job_box or tuple((0, n) for n in shape)
    splits = [s2p_axis_split(a, b - 1, w, m) for (a, b), w, m in
              zip(reversed(full[-3:]), widths, (overlaps[0], overlaps[0], overlaps[1]))]
    nx, ny, nz = (len(s) for s in splits)
    if nx * ny * nz > 999:  # s2p_setup refuses more parameter files than its 3-digit names hold
        with pytest.raises(ConfigError, match="999"):
            s2p_regions(shape, widths, overlaps, job_box)
        return
    regions = s2p_regions(shape, widths, overlaps, job_box)
    assert len(regions) == nx * ny * nz

    mask = np.zeros(shape, dtype=bool)
    for region in regions:
        assert len(region) == len(shape)
        if len(shape) == 4:
            assert region[0] == full[0]  # the 4th axis is never split
        mask[tuple(slice(a, b) for a, b in region)] = True
    inside = np.zeros(shape, dtype=bool)
    inside[tuple(slice(a, b) for a, b in full)] = True
    assert np.array_equal(mask, inside)

    for idx, region in enumerate(regions):  # idx = x + nx*(y + ny*z)
        x, y, z = idx % nx, (idx // nx) % ny, idx // (nx * ny)
        assert region[-1] == (splits[0][x][0], splits[0][x][1] + 1)
        assert region[-2] == (splits[1][y][0], splits[1][y][1] + 1)
        assert region[-3] == (splits[2][z][0], splits[2][z][1] + 1)

    for split, m in zip(splits, (overlaps[0], overlaps[0], overlaps[1])):
        assert len(split) >= 2  # the script never succeeds with N == 1
        for (a0, b0), (a1, b1) in zip(split, split[1:]):
            assert a0 < a1 and b0 <= b1
            # inclusive ends: neighbours share b0 - a1 + 1 >= m + 1 pixels
            assert b0 - a1 + 1 >= m + 1


def test_askap_worked_example():
    """WALLABY defaults on a 5851 x 5851 x 6668 (FITS order) cube: subcube 1500 1500 1400, overlaps 256.

    x, y: E = 5850, w = 1500: N*1244 + 256 >= 5850 first at N = 5 (4 gives 5232); overlap =
    floor((5*1500 - 5850) / 4) = floor(412.5) = 412, step 1088; starts 0, 1088, 2176, 3264, 4352,
    the last ends at min(4352 + 1500, 5850) = 5850.
    z: E = 6667, w = 1400: N*1144 + 256 >= 6667 first at N = 6 (5 gives 5976); overlap =
    floor((6*1400 - 6667) / 5) = floor(346.6) = 346, step 1054; starts 0, 1054, ..., 5270, the
    last ends at min(5270 + 1400, 6667) = 6667. So 5 x 5 x 6 = 150 regions.
    """
    assert s2p_axis_split(0, 5850, 1500, 256) == [(0, 1500), (1088, 2588), (2176, 3676), (3264, 4764), (4352, 5850)]
    assert s2p_axis_split(0, 6667, 1400, 256) == [
        (0, 1400), (1054, 2454), (2108, 3508), (3162, 4562), (4216, 5616), (5270, 6667)]
    regions = s2p_regions((6668, 5851, 5851), parse_region_shape("1500x1500x1400"), parse_min_overlap("256,256"))
    assert len(regions) == 150
    assert regions[0] == ((0, 1401), (0, 1501), (0, 1501))
    assert fits_region_text(regions[0]) == "0, 1500, 0, 1500, 0, 1400"  # sofia_001.par
    assert fits_region_text(regions[1]) == "1088, 2588, 0, 1500, 0, 1400"  # x moves first
    assert fits_region_text(regions[5]) == "0, 1500, 1088, 2588, 0, 1400"  # then y
    assert fits_region_text(regions[25]) == "0, 1500, 0, 1500, 1054, 2454"  # then z
    assert fits_region_text(regions[149]) == "4352, 5850, 4352, 5850, 5270, 6667"  # sofia_150.par
    # Stokes axis kept whole; inner regions read 1501 x 1501 x 1401 voxels.
    regions4 = s2p_regions((1, 6668, 5851, 5851), (1500, 1500, 1400), (256, 256))
    assert regions4[31] == ((0, 1),) + regions[31]
    assert math.prod(b - a for a, b in regions[31]) == 1401 * 1501 * 1501
    assert union_bytes(regions, 4) == 6668 * 5851 * 5851 * 4


def test_job_box_is_the_boundary():
    regions = s2p_regions((50, 40, 40), (10, 10, 20), (2, 3), job_box=((5, 45), (0, 40), (10, 30)))
    # x: lo 10, hi 29, E 19, w 10, m 2 -> N 3 (2 gives 18), overlap floor((30 - 19) / 2) = 5:
    # 10..20, 15..25, 20..29 (inclusive).
    assert [r[-1] for r in regions[:3]] == [(10, 21), (15, 26), (20, 30)]
    # z: lo 5, hi 44, E 39, w 20, m 3 -> N 3, overlap floor((60 - 39) / 2) = 10: 5..25, 15..35, 25..44.
    assert sorted({r[0] for r in regions}) == [(5, 26), (15, 36), (25, 45)]


@st.composite
def loads(draw):
    sizes = draw(st.lists(st.integers(0, 10_000), max_size=40))
    return sizes, draw(st.integers(1, 50))


@SETTINGS
@given(loads())
def test_assign_regions_properties(case):
    sizes, n_ranks = case
    plan = assign_regions(sizes, n_ranks)
    assert len(plan) == n_ranks
    assert sorted(i for lst in plan for i in lst) == list(range(len(sizes)))
    for lst in plan:
        assert [sizes[i] for i in lst] == sorted((sizes[i] for i in lst), reverse=True)
    if sizes:
        rank_loads = [sum(sizes[i] for i in lst) for lst in plan]
        assert max(rank_loads) <= sum(sizes) / n_ranks + max(sizes)
    if len(sizes) <= n_ranks and all(sizes):  # R <= N: one region each, largest to rank 0
        assert all(len(lst) <= 1 for lst in plan)
        assert [lst for lst in plan if lst] == [(i,) for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))]
    assert assign_regions(sizes, n_ranks) == plan


def test_assign_regions_worked():
    # visit 4 (9), 0 (5), 1 (3), 2 (3), 3 (1): loads 9|5 -> 9|8 -> 9|11 -> 10|11
    assert assign_regions([5, 3, 3, 1, 9], 2) == ((4, 3), (0, 1, 2))
    assert assign_regions([1, 2], 4) == ((1,), (0,), (), ())
    assert assign_regions([7, 7, 7], 3) == ((0,), (1,), (2,))
    assert assign_regions([], 2) == ((), ())
    # Empty regions add no load, so by the tie rule (lowest rank) they stay with rank 0.
    assert assign_regions([0, 0], 2) == ((0, 1), ())


@st.composite
def box_sets(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(ndim))
    boxes = []
    for _ in range(draw(st.integers(0, 6))):
        box = []
        for n in shape:
            a = draw(st.integers(0, n))
            box.append((a, draw(st.integers(a, n))))
        boxes.append(tuple(box))
    return shape, boxes


@SETTINGS
@given(box_sets(), st.sampled_from([1, 2, 4, 8]))
def test_union_bytes_equals_mask(case, itemsize):
    shape, boxes = case
    mask = np.zeros(shape, dtype=bool)
    for box in boxes:
        mask[tuple(slice(a, b) for a, b in box)] = True
    assert union_bytes(boxes, itemsize) == int(mask.sum()) * itemsize


def test_inclusive_fits_region():
    assert inclusive_fits_region(((2, 5), (10, 20), (0, 7))) == (0, 6, 10, 19, 2, 4)
    assert fits_region_text(((0, 1), (2, 5), (10, 20), (0, 7))) == "0, 6, 10, 19, 2, 4"


@pytest.mark.parametrize("args, exc, words", [
    ((0, 100, 0, 0), ConfigError, ["region_shape", "at least 1"]),
    ((0, 100, 10, 10), ConfigError, ["min_overlap", "10"]),
    ((0, 100, 10, -1), ConfigError, ["min_overlap", "-1"]),
    ((0, 100, 101, 0), ConfigError, ["region_shape", "101", "101 pixels"]),
    ((0, 100, 100, 0), ConfigError, ["region_shape", "divides by zero"]),
    ((5, 4, 1, 0), RegionError, ["5..4"]),
])
def test_axis_split_errors(args, exc, words):
    with pytest.raises(exc) as info:
        s2p_axis_split(*args)
    for word in words:
        assert word in str(info.value)


def test_regions_errors():
    with pytest.raises(ConfigError) as info:
        s2p_regions((1400, 6000, 6000), (1500, 1500, 1400), (256, 256))
    assert all(w in str(info.value) for w in ("region_shape", "z width 1400", "1400 pixels"))
    with pytest.raises(ConfigError, match=r"region_shape: y width 50 .* 30 pixels"):
        s2p_regions((100, 100, 100), (10, 50, 10), (0, 0), job_box=((0, 100), (10, 40), (0, 100)))
    with pytest.raises(ConfigError, match="min_overlap: x"):
        s2p_regions((100, 100, 100), (10, 10, 10), (10, 0))
    with pytest.raises(ConfigError, match="999"):
        s2p_regions((100, 100, 100), (9, 9, 9), (0, 0))  # 11 x 11 x 11 = 1331 regions
    with pytest.raises(RegionError, match="3-D or 4-D"):
        s2p_regions((100, 100), (10, 10, 10), (0, 0))
    with pytest.raises(RegionError, match="job box"):
        s2p_regions((100, 100, 100), (10, 10, 10), (0, 0), job_box=((0, 101), (0, 100), (0, 100)))


@pytest.mark.parametrize("text", ["", "1500x1500", "1500x0x1400", "axbxc", "1500,1500,1400", None, "1x2x3x4"])
def test_parse_region_shape_errors(text):
    with pytest.raises(ConfigError) as info:
        parse_region_shape(text)
    assert "region_shape" in str(info.value) and repr(text) in str(info.value)


@pytest.mark.parametrize("text", ["", "256", "256,-1", "a,b", "1,2,3", None])
def test_parse_min_overlap_errors(text):
    with pytest.raises(ConfigError) as info:
        parse_min_overlap(text)
    assert "min_overlap" in str(info.value) and repr(text) in str(info.value)


def test_parsers():
    assert parse_region_shape(" 1500X1500x 1400 ") == (1500, 1500, 1400)
    assert parse_min_overlap("256, 128") == (256, 128)


def test_other_errors():
    with pytest.raises(ConfigError, match="ranks"):
        assign_regions([1], 0)
    with pytest.raises(RegionError, match="empty"):
        fits_region_text(((0, 0), (0, 1), (0, 1)))
    with pytest.raises(RegionError, match="3-D or 4-D"):
        inclusive_fits_region(((0, 1), (0, 1)))
    with pytest.raises(RegionError, match="start > stop"):
        union_bytes([((3, 2),)], 4)
