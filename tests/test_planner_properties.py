"""Properties of the pure core: every strategy's plan, executed against an in-memory cube,
equals numpy slicing, and no request exceeds chunk_bytes."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.api.read import plan_read, read_selection
from ingest.errors import ConfigError
from ingest.formats.fits import BITPIX_DTYPES, FitsLayout as Layout
from ingest.core.lattice import STRATEGIES, make_plan
from ingest.core.cost import CostModel
from ingest.core.selection import normalize
from ingest.transports import MemoryTransport

HEADER_BYTES = 2880  # data starts after one header block, as in a real file


def cube_object(shape, bitpix, seed=0):
    """An in-memory 'object': a fake header block, then the cube's big-endian bytes, then padding."""
    dtype = np.dtype(BITPIX_DTYPES[bitpix])
    rng = np.random.default_rng(seed)
    nbytes = math.prod(shape) * dtype.itemsize
    data = np.frombuffer(rng.bytes(nbytes), dtype=dtype).reshape(shape)
    if dtype.kind == "f":  # random bytes can make NaNs, which never compare equal
        data = np.where(np.isfinite(data), data, 0).astype(dtype)
    blob = b"H" * HEADER_BYTES + data.tobytes() + b"P" * 100
    layout = Layout("memory", 0, tuple(shape), bitpix, 0, HEADER_BYTES, len(blob))
    return blob, data, layout


@st.composite
def index_for(draw, n):
    """An index along an axis of length n: an int or a slice with a positive step."""
    if draw(st.booleans()) and n > 0:
        i = draw(st.integers(0, n - 1))
        return i - n if draw(st.booleans()) else i
    start = draw(st.integers(0, n - 1))
    stop = draw(st.integers(start + 1, n))
    step = draw(st.sampled_from([None, 1, 1, 2, 3]))
    return slice(start, stop, step)


@st.composite
def cube_and_region(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    bitpix = draw(st.sampled_from(sorted(BITPIX_DTYPES)))
    region = tuple(draw(index_for(n)) for n in shape[: draw(st.integers(0, ndim))])
    return shape, bitpix, region


@settings(max_examples=300, deadline=None)
@given(
    cube_and_region(),
    st.sampled_from(STRATEGIES),
    st.integers(1, 600),
    st.integers(1, 4),
    st.none() | st.integers(0, 400),
)
def test_plan_executes_to_numpy_slice(case, strategy, chunk_bytes, threads, max_gap_bytes):
    shape, bitpix, region = case
    blob, data, layout = cube_object(shape, bitpix)
    sel, plan = plan_read(layout, region, strategy=strategy, chunk_bytes=chunk_bytes, max_gap_bytes=max_gap_bytes)
    transport = MemoryTransport(blob)
    got, stats = read_selection(transport, layout, sel, plan, threads=threads)
    want = np.asarray(data[region], dtype=data.dtype)  # all-integer regions give a scalar
    assert got.shape == want.shape
    assert got.dtype == data.dtype
    assert got.tobytes() == want.tobytes()
    # Every request fits a chunk and stays inside the cube's data.
    sizes = [plan.request(i).nbytes for i in range(plan.n_requests)]
    assert max(sizes) <= chunk_bytes
    offsets = [plan.request(i).offset for i in range(plan.n_requests)]
    assert min(offsets) >= layout.data_offset
    assert max(o + s for o, s in zip(offsets, sizes)) <= layout.data_offset + layout.data_bytes
    # The closed-form totals agree with the requests actually made.
    assert transport.requests == plan.n_requests == stats.requests
    assert sum(sizes) == plan.wire_bytes == stats.bytes_wire
    assert plan.needed_bytes == want.nbytes
    assert offsets == sorted(offsets), "requests are issued in object order"


@settings(max_examples=150, deadline=None)
@given(cube_and_region(), st.integers(1, 600))
def test_small_strategy_reads_no_waste(case, chunk_bytes):
    shape, bitpix, region = case
    _, _, layout = cube_object(shape, bitpix)
    _, plan = plan_read(layout, region, strategy="small", chunk_bytes=chunk_bytes)
    assert plan.wire_bytes == plan.needed_bytes


@settings(max_examples=150, deadline=None)
@given(cube_and_region(), st.integers(1, 600))
def test_large_makes_fewest_requests(case, chunk_bytes):
    """Merging over every gap can only reduce the request count."""
    shape, bitpix, region = case
    _, _, layout = cube_object(shape, bitpix)
    counts = {s: plan_read(layout, region, strategy=s, chunk_bytes=chunk_bytes)[1].n_requests for s in STRATEGIES}
    assert counts["large"] == min(counts.values())
    assert counts["small"] == max(counts.values())


def test_study_geometry_plans_in_closed_form():
    """Seed 001 s7.4: 1893 channels of 2151 x 2151 float32 out of 6668 x 5851 x 5851.

    The small strategy is one request per row (4,071,843, as the study counted); large batches
    whole planes under the ~2 GB read limit (the study made 135 reads of 14 channels); the
    plan itself stays a handful of integers.
    """
    layout = Layout("askap", 0, (6668, 5851, 5851), -32, 0, 2880, 2880 + 6668 * 5851 * 5851 * 4)
    region = (slice(0, 1893), slice(0, 2151), slice(0, 2151))
    sel = normalize(region, layout.shape)
    small = make_plan(layout, sel, strategy="small", chunk_bytes=1 << 31)
    assert small.n_requests == 1893 * 2151 == 4_071_843
    assert small.wire_bytes == small.needed_bytes == 1893 * 2151 * 2151 * 4
    large = make_plan(layout, sel, strategy="large", chunk_bytes=1_920_000_000)
    assert large.n_requests == math.ceil(1893 / 14) == 136
    assert 7.0 < large.amplification < 7.5  # the study's ~7x read amplification
    inter = make_plan(layout, sel, strategy="intermediate", chunk_bytes=1_920_000_000)
    assert inter.n_requests == 1893
    cost = CostModel(latency_s=0.002, bandwidth_bytes_per_s=75e6)
    auto = make_plan(layout, sel, strategy="auto", chunk_bytes=16 << 20, cost=cost)
    # the 14 KB gap between rows (5851-2151 pixels) is under latency x bandwidth = 150 KB
    assert auto.max_gap_bytes == 150_000
    assert auto.amplification < large.amplification


def test_plan_rejects_bad_parameters():
    _, _, layout = cube_object((4, 4), -32)
    sel = normalize((), layout.shape)
    with pytest.raises(ConfigError, match="strategy"):
        make_plan(layout, sel, strategy="fastest")
    with pytest.raises(ConfigError, match="chunk_bytes"):
        make_plan(layout, sel, chunk_bytes=0)
    with pytest.raises(ConfigError, match="max_gap_bytes"):
        make_plan(layout, sel, max_gap_bytes=-1)
