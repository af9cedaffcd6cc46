"""Earlier jobs of the same shape on an endpoint predict the next one (core/history.py), kept in
the link cache (engine/linkcache.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from ingest.core.history import KEEP, MODEL_AGREES, NEWEST, JobShape, PastJob, with_floors, with_history
from ingest.core.cost import CostModel
from ingest.core.sharing import CPU, REQUESTS, JobPrediction, RankLoad, SharedCapacity, Topology
from ingest.engine import linkcache
from ingest.units import MiB

TOPOLOGY = Topology.block(4, 2)
SHAPE = JobShape.of("s3", TOPOLOGY, [RankLoad(16, 256 * MiB, 4)] * 4, 16 * MiB)
ENDPOINT = "http://store:9000"


def model(makespan_s: float, binding: str = CPU) -> JobPrediction:
    return JobPrediction(makespan_s, binding, {binding: makespan_s}, TOPOLOGY, "measured")


def test_the_shape_is_the_busiest_rank_and_how_the_job_is_spread_and_planned():
    shape = JobShape.of("s3", TOPOLOGY, [RankLoad(3, 10, 4), RankLoad(2, 30, 4), RankLoad(9, 20, 4)], 8)
    assert (shape.ranks_per_node, shape.threads, shape.chunk_bytes) == ((2, 2), 4, 8)
    assert (shape.rank_wire_bytes, shape.rank_requests) == (30, 2)
    # block(4, 2): ranks 0-1 on node 0 (10 + 30 bytes), rank 2 on node 1 (20), rank 3 reads nothing
    assert (shape.node_wire_bytes, shape.streams_per_node) == (40, 8)
    assert JobShape.from_dict(shape.as_dict()) == shape
    older = {k: v for k, v in shape.as_dict().items() if k != "node_wire_bytes"}  # kept before it was
    assert JobShape.from_dict(older).node_wire_bytes == 0
    assert SHAPE.similar(SHAPE)
    for other in (JobShape("presigned", (2, 2), 4, 16 * MiB, 256 * MiB, 16),  # another method
                  JobShape("s3", (4,), 4, 16 * MiB, 256 * MiB, 16),  # one node, not two
                  JobShape("s3", (2, 2), 16, 16 * MiB, 256 * MiB, 16),  # 4x the streams
                  JobShape("s3", (2, 2), 4, 4 * MiB, 256 * MiB, 64),  # requests a quarter the size
                  JobShape("s3", (2, 2), 4, 16 * MiB, 1024 * MiB, 64)):  # 4x the bytes
        assert not SHAPE.similar(other)
    assert SHAPE.similar(JobShape("s3", (2, 2), 4, 16 * MiB, 300 * MiB, 19))  # a little bigger
    assert SHAPE.similar(JobShape("s3", (2, 2), 8, 12 * MiB, 256 * MiB, 22))  # twice the streams, 3/4 the request


def test_no_similar_job_leaves_the_model():
    past = [PastJob(JobShape("s3", (4,), 4, 16 * MiB, 256 * MiB, 16), 9.0, 10.0)]
    assert with_history(model(1.0), SHAPE, past, 100.0, ENDPOINT) == model(1.0)
    assert with_history(model(1.0), SHAPE, [], 100.0, ENDPOINT) == model(1.0)


def test_the_median_of_the_newest_similar_jobs_scaled_to_this_one_predicts():
    # seven earlier runs; only the NEWEST (5) count: 1.0, 1.2, 1.4, 1.1, 1.3 -> 1.2
    past = [PastJob(SHAPE, s, at) for at, s in enumerate((9.0, 9.0, 1.0, 1.2, 1.4, 1.1, 1.3))]
    got = with_history(model(1.5), SHAPE, past, 3600.0, ENDPOINT, probed=False)
    assert got.makespan_s == pytest.approx(1.2) and got.model_s == 1.5 and got.model_makespan_s == 1.5
    assert got.history == f"{NEWEST} earlier job(s) of this shape on {ENDPOINT} (60 min to 60 min ago) took 1.2 s"
    assert got.as_dict()["model_makespan_s"] == 1.5 and "the model: predicted makespan 1.5 s" in got.describe()
    # a job 10% larger in bytes is predicted 10% longer; where requests bind, by its requests
    bigger = JobShape("s3", (2, 2), 4, 16 * MiB, int(256 * MiB * 1.1), 20)
    assert with_history(model(1.5), bigger, past, 3600.0, ENDPOINT, probed=False).makespan_s == pytest.approx(1.32)
    assert with_history(model(1.5, REQUESTS), bigger, past, 3600.0, ENDPOINT,
                        probed=False).makespan_s == pytest.approx(1.5)
    # this job's probe is one more vote: 1.0 1.1 1.2 1.3 1.4 and 1.5 -> 1.25
    voted = with_history(model(1.5), SHAPE, past, 3600.0, ENDPOINT)
    assert voted.makespan_s == pytest.approx(1.25) and voted.model_makespan_s == 1.5
    assert voted.history.endswith("took 1.2 s; with this job's probed model (1.5 s) as one more vote, 1.25 s")
    # a job from the future (a clock set back) is not history
    assert with_history(model(1.5), SHAPE, [PastJob(SHAPE, 1.0, 5000.0)], 3600.0, ENDPOINT) == model(1.5)


def test_one_slow_earlier_job_does_not_set_the_prediction_alone():
    # bench.cluster.predictions at 7e71707: a 1.43 s warm-up, then 0.37-0.50 s jobs whose probes said 0.33-0.57 s
    slow, then_fast = PastJob(SHAPE, 1.43, 0.0), PastJob(SHAPE, 0.495, 1.0)
    assert with_history(model(0.394), SHAPE, [slow], 60.0, ENDPOINT).makespan_s == 0.394  # over 3x: it stands
    assert with_history(model(0.331), SHAPE, [slow, then_fast], 60.0, ENDPOINT).makespan_s == pytest.approx(0.495)


def test_jobs_that_ran_this_plan_count_before_its_neighbours():
    # bench.cluster.predictions, acacia, 2 ranks: 4-stream jobs took about 1.02 s; the plan then chose 8
    # streams, which took 0.73-0.76 s, and was priced at 1.02 s until the 4-stream jobs aged out
    four, eight = replace(SHAPE, threads=4), replace(SHAPE, threads=8)
    past = [PastJob(four, 1.02, 0.0), PastJob(four, 1.01, 1.0), PastJob(four, 1.03, 2.0), PastJob(eight, 0.75, 3.0)]
    got = with_history(model(0.70), eight, past, 60.0, ENDPOINT)
    assert got.makespan_s == pytest.approx(0.725)  # median of the 8-stream job and the model
    assert got.history.startswith(f"1 earlier job(s) of this shape on {ENDPOINT}")
    # with no job of this plan yet, a probe that measured it stands alone; without a probe the
    # neighbours (half or twice the streams) count: on a shared pipe a plan flips between 4 and 8
    # streams and both take its time
    assert with_history(model(0.70), eight, past[:3], 60.0, ENDPOINT) == model(0.70)
    assert with_history(model(0.70), eight, past[:3], 60.0, ENDPOINT, probed=False).makespan_s == pytest.approx(1.02)
    assert with_history(model(0.70), replace(SHAPE, threads=16), past[:3], 60.0, ENDPOINT, probed=False) == model(0.70)


@given(st.floats(0.01, 100.0), st.floats(0.01, 100.0), st.booleans())
def test_a_probed_model_stands_where_the_link_changed_an_unprobed_one_never(model_s, measured_s, probed):
    got = with_history(model(model_s), SHAPE, [PastJob(SHAPE, measured_s, 0.0)], 60.0, ENDPOINT, probed=probed)
    # a model no probe of this job made (cached, or the configured default) knows less than the
    # jobs of this very shape did
    agrees = not probed or 1 / MODEL_AGREES <= model_s / measured_s <= MODEL_AGREES
    # where a probed model agrees, it is one vote beside the one job: their median is the mean
    expected_s = model_s if not agrees else (model_s + measured_s) / 2 if probed else measured_s
    assert got.makespan_s == pytest.approx(expected_s)
    assert got.model_makespan_s == model_s and "1 earlier job(s) of this shape" in got.history
    assert ("stands" in got.history) != agrees


def test_the_link_cache_keeps_the_newest_jobs_of_an_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv(linkcache.CACHE_ENV, str(tmp_path / "links.json"))
    assert linkcache.recall_jobs(ENDPOINT) == []
    for k in range(KEEP + 3):
        linkcache.remember(ENDPOINT, job=PastJob(SHAPE, 1.0 + k, 1000.0 + k), now_s=1000.0 + k)
    linkcache.remember(ENDPOINT, shared=None, probe=None)  # nothing to keep: nothing changes
    jobs = linkcache.recall_jobs(ENDPOINT, now_s=2000.0)
    assert len(jobs) == KEEP and jobs[0].makespan_s == 4.0 and jobs[-1] == PastJob(SHAPE, KEEP + 3.0, 1000.0 + KEEP + 2)
    assert linkcache.recall_jobs("http://other:9000") == []
    assert linkcache.recall_jobs(ENDPOINT, now_s=1000.0 + linkcache.MAX_AGE_S + KEEP + 3) == []  # stale
    # a record another version wrote is skipped, not fatal
    linkcache.remember(ENDPOINT, job=PastJob(SHAPE, 2.0, 1500.0))
    data = (tmp_path / "links.json").read_text().replace('"rank_requests"', '"requests_of_rank"', 1)
    (tmp_path / "links.json").write_text(data)
    assert len(linkcache.recall_jobs(ENDPOINT, now_s=2000.0)) == KEEP - 1


def _ran(method: str, ranks_on_node: int, threads: int, node_bytes_per_s: float, at_s: float = 0.0,
         rank_wire_bytes: int = 1) -> PastJob:
    """An earlier job on one node that moved node_bytes_per_s through it, with no more bytes
    than SHAPE's busiest node (512 MiB)."""
    seconds = SHAPE.node_wire_bytes / node_bytes_per_s
    return PastJob(JobShape(method, (ranks_on_node,), threads, 16 * MiB, rank_wire_bytes, 1, SHAPE.node_wire_bytes),
                   seconds, at_s)


ALONE = CostModel(latency_s=0.001, bandwidth_bytes_per_s=200e6, stream_bandwidth_bytes_per_s=100e6)
NODE_ROUND = SharedCapacity(node_bytes_per_s=800e6, source="measured: node round")


def test_an_earlier_job_floors_the_nodes_pipe_at_what_it_moved_through_one_node():
    # this job: 2 ranks per node x 4 threads = 8 streams per node
    past = [_ran("s3", 1, 2, 1.2e9, 10.0), _ran("s3", 2, 4, 1.0e9, 20.0)]
    alone, got = with_floors(ALONE, NODE_ROUND, SHAPE, past, 100.0)
    assert got.node_bytes_per_s == pytest.approx(1.2e9) and got.egress_bytes_per_s == NODE_ROUND.egress_bytes_per_s
    assert got.source == ("measured: node round; the node's pipe at least 1200 MB/s, as a job of 1 rank(s) x "
                          "2 stream(s) on one node moved 90 s ago")
    assert alone == ALONE  # their ranks moved 1 byte each: nothing to say of a rank's link


@pytest.mark.parametrize("past", [
    [_ran("presigned", 1, 2, 1.2e9)],  # another method
    [_ran("s3", 4, 4, 1.2e9)],  # 16 streams on its node, this job 8: more streams move more under a cap
    [PastJob(JobShape("s3", (1,), 2, 16 * MiB, 1, 1, 2 * SHAPE.node_wire_bytes), 0.5, 0.0)],  # a larger job
    [_ran("s3", 1, 2, 1.2e9, at_s=500.0)],  # after now
    [PastJob(JobShape("s3", (1,), 2, 16 * MiB, 1, 1), 1.0, 0.0)],  # a record without its node's bytes
    [_ran("s3", 1, 2, 0.5e9)],  # less than the rounds saw
    [_ran("s3", 1, 2, 0.81e9 * MODEL_AGREES * 1.25)],  # over MODEL_AGREES x the rounds: the link changed
    [],
])
def test_the_floor_stands_only_for_a_like_job_that_moved_more(past):
    assert with_floors(ALONE, NODE_ROUND, SHAPE, past, 100.0) == (ALONE, NODE_ROUND)


def test_a_floor_has_its_requests_in_it():
    """A pipe of 800 MB/s priced without its rounds' requests, each 4 ms of it: a like job that
    moved 900 MB/s, its requests and all, floors it, and no request is charged on top. One that
    moved 700 is compared with the 800 (not with the 672 that SHAPE's 32 requests would leave):
    the fastest earlier job is an optimistic figure on a noisy machine, and is kept for where it
    beat the rounds outright."""
    priced = replace(NODE_ROUND, node_request_s=0.004)
    alone, got = with_floors(ALONE, priced, SHAPE, [_ran("s3", 1, 2, 0.9e9)], 100.0)
    assert got.node_bytes_per_s == pytest.approx(0.9e9) and got.node_request_s == 0.0
    assert with_floors(ALONE, priced, SHAPE, [_ran("s3", 1, 2, 0.7e9)], 100.0) == (ALONE, priced)


def test_the_floor_makes_no_pipe_where_none_was_seen():
    shared = SharedCapacity(source="measured: node round (ranks added up)")
    assert with_floors(ALONE, shared, SHAPE, [_ran("s3", 1, 2, 1.2e9)], 100.0) == (ALONE, shared)


def test_an_earlier_rank_floors_a_ranks_link_with_at_most_its_streams_and_bytes():
    # SHAPE's ranks: 4 threads, 256 MiB each; the probe saw 4 streams get 200 MB/s
    quick = PastJob(JobShape("s3", (2,), 2, 16 * MiB, 128 * MiB, 8, 256 * MiB), 128 * MiB / 300e6, 5.0)
    alone, shared = with_floors(ALONE, SharedCapacity(), SHAPE, [quick], 65.0)
    assert alone.bandwidth(4) == pytest.approx(300e6) and alone.stream_bytes_per_s == pytest.approx(150e6)
    assert shared.node_bytes_per_s is None and "a rank's link at least 300 MB/s, as a rank of 2 stream(s) moved 60 s ago" in shared.source
    for other in (replace(quick.shape, threads=8), replace(quick.shape, rank_wire_bytes=512 * MiB),
                  replace(quick.shape, method="presigned")):
        assert with_floors(ALONE, SharedCapacity(), SHAPE, [replace(quick, shape=other)], 65.0)[0] == ALONE
