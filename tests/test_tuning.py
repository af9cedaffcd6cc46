"""The self-tuner: pure rules over probe results, and a real probe against the local server."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.planner import CostModel
from ingest.probe import LinkProbe, probe_link
from ingest.transports import MemoryTransport, open_transport
from ingest.tuning import MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, THREADS_MAX, choose, cost_from_probe

MiB = 1 << 20


def link(latency_s, stream_bw, parallel_bw, streams=2):
    return LinkProbe(latency_s, stream_bw, parallel_bw, streams, probe_bytes=0, probe_s=0.0)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(1e-4, 0.3),  # latency
    st.floats(1e6, 5e9),  # per-stream bandwidth
    st.floats(0.3, 2.2),  # scaling of 2 streams
    st.integers(1, 1 << 36),  # needed bytes
    st.integers(1, 32),  # ranks per node
)
def test_choices_stay_in_bounds(lat, bw, scaling, needed, ranks):
    t = choose(link(lat, bw, bw * scaling), needed, ranks_sharing=ranks)
    assert 1 <= t.threads <= THREADS_MAX
    assert MiB <= t.chunk_bytes <= MAX_CHUNK_BYTES
    assert t.threads <= max(1, math.ceil(needed / t.chunk_bytes)), "no thread without a request"
    assert t.max_gap_bytes == int(lat * t.cost.stream_bytes_per_s)
    assert t.cost.bandwidth(t.threads) <= t.cost.bandwidth_bytes_per_s


def test_per_connection_caps_get_many_threads_saturated_links_few():
    capped = choose(link(0.002, 75e6, 150e6), 1 << 30)  # two streams, twice the bandwidth
    assert capped.threads == THREADS_MAX and "add up" in capped.reason
    saturated = choose(link(0.001, 1e9, 1.05e9), 1 << 30)
    assert saturated.threads <= 3 and "fills the link" in saturated.reason


def test_gap_is_latency_times_stream_bandwidth():
    # seed 001's Acacia: ~2 ms per request, ~75 MB/s: merging a gap < 150 KB beats a request
    t = choose(link(0.002, 75e6, 75e6), 1 << 30)
    assert t.max_gap_bytes == 150_000


def test_request_size_hides_latency():
    slow = choose(link(0.1, 12.5e6, 25e6), 1 << 30)  # wan: 100 ms, 100 Mbit/s
    assert slow.chunk_bytes >= 16 * 0.1 * 12.5e6 or slow.chunk_bytes == MAX_CHUNK_BYTES
    fast = choose(link(0.0002, 1e9, 1e9), 1 << 30)
    assert fast.chunk_bytes == MIN_CHUNK_BYTES


def test_small_reads_give_every_thread_a_request():
    t = choose(link(0.002, 75e6, 150e6), 8 * MiB)
    assert t.threads * t.chunk_bytes >= 8 * MiB and t.threads == 8 and t.chunk_bytes == MiB


def test_ranks_on_one_node_share_a_saturated_link():
    alone = cost_from_probe(link(0.001, 1e9, 1e9))
    shared = cost_from_probe(link(0.001, 1e9, 1e9), ranks_sharing=4)
    assert shared.bandwidth_bytes_per_s == pytest.approx(alone.bandwidth_bytes_per_s / 4)


def test_user_values_are_kept():
    t = choose(link(0.002, 75e6, 150e6), 1 << 30, chunk_bytes=3 * MiB, threads=5)
    assert (t.chunk_bytes, t.threads) == (3 * MiB, 5)


def test_cost_model_without_stream_bandwidth_is_the_old_one():
    c = CostModel(latency_s=0.002, bandwidth_bytes_per_s=75e6)
    assert c.bandwidth(1) == c.bandwidth(16) == 75e6
    assert c.predict_s(10, 75_000_000, 2) == pytest.approx(10 * 0.002 / 2 + 1.0)


def test_probe_reads_stay_inside_the_data():
    """Any data size from the minimum up: no read leaves [data_offset, data_offset + data_bytes)."""
    for data_bytes in (3 * 64 * 1024, 200_000, 3 * MiB, 40 * MiB):
        blob = b"h" * 2880 + bytes(data_bytes)
        seen = []

        class Recording(MemoryTransport):
            def read_into(self, buffer, offset):
                seen.append((offset, len(buffer)))
                return super().read_into(buffer, offset)

        probe_link(Recording(blob), 2880, data_bytes)
        assert all(2880 <= o and o + n <= 2880 + data_bytes for o, n in seen), data_bytes
    with pytest.raises(ValueError, match="too little"):
        probe_link(MemoryTransport(b"x" * 5000), 0, 5000)


def test_real_probe_against_the_local_server(s3_server, s3_env):
    bucket = s3_server.make_bucket("probe-bucket")
    s3_server.client().put_object(Bucket=bucket, Key="blob", Body=bytes(24 * MiB))
    with open_transport(f"s3://{bucket}/blob", threads=2) as t:
        p = probe_link(t, 0, 24 * MiB)
    assert 0 < p.latency_s < 1.0
    assert p.stream_bandwidth_bytes_per_s > 1e6 and p.parallel_bandwidth_bytes_per_s > 1e6
    assert p.probe_bytes <= 24 * MiB + 64 * 1024  # 3 large reads fill the data, plus a few 4 KiB ones
