"""The job's model of what its ranks share (core/sharing.py) and the cache of measured links."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from ingest.core.cost import CostModel
from ingest.core.linkprobe import LinkProbe
from ingest.core.sharing import (assumed_shared, CORES, EGRESS, LATENCY, NODE_CPU, NODE_PIPE, REQUESTS, REQUESTS_SHARE_MAX, STARTUP,
                                 RankLoad, SharedCapacity, SharedRound, Topology, alone_from_rounds, predict_job,
                                 share_cost, shared_from_rounds)
from ingest.engine import linkcache

MiB = 1 << 20
MB = 1e6


def test_topology_from_hosts_and_block_distribution():
    t = Topology.of_hosts(["b", "b", "a", "b", "c"])
    assert t.node_of_rank == (0, 0, 1, 0, 2) and t.ranks_per_node == (3, 1, 1) and t.most_per_node == 3
    assert Topology.block(16, 4).ranks_per_node == (4, 4, 4, 4)
    assert Topology.block(5, 2).node_of_rank == (0, 0, 0, 1, 1)
    assert Topology.block(2, 4).n_nodes == 2  # no node without a rank
    assert "16 rank(s) on 4 node(s), 4 per node" == Topology.block(16, 4).describe()


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 10_000), st.integers(0, 1 << 34), st.sampled_from((1, 2, 4, 16, 64)),
       st.floats(1e-5, 0.1), st.floats(1e6, 1e10), st.floats(0.2, 1.0), st.floats(0, 1e-3), st.floats(0, 2e-9))
def test_one_rank_sharing_nothing_is_the_cost_model(n, wire, threads, lat, bw, stream_frac, cpu_req, cpu_byte):
    cost = CostModel(latency_s=lat, bandwidth_bytes_per_s=bw, stream_bandwidth_bytes_per_s=bw * stream_frac,
                     cpu_per_request_s=min(cpu_req, lat), cpu_per_byte_s=cpu_byte)
    p = predict_job(cost, SharedCapacity(), Topology.block(1, 1), [RankLoad(n, wire, threads)])
    assert p.makespan_s == pytest.approx(cost.predict_s(n, wire, threads), rel=1e-12, abs=1e-15)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 16), st.integers(1, 4), st.floats(1e6, 1e9), st.floats(1e6, 1e9), st.floats(1e6, 1e9),
       st.integers(1 << 20, 1 << 30))
def test_a_shared_pipe_is_never_faster_than_its_bytes(ranks, nodes, node_bps, egress_bps, alone_bps, wire):
    """The prediction is at least every pipe's bytes over its capacity, and the binding term is
    the largest one; each rank's share of a pipe (share_cost) is what the pipe gives all of them."""
    topo = Topology.block(ranks, nodes)
    cost = CostModel(latency_s=0.001, bandwidth_bytes_per_s=alone_bps)
    shared = SharedCapacity(node_bytes_per_s=node_bps, egress_bytes_per_s=egress_bps, source="test")
    p = predict_job(cost, shared, topo, [RankLoad(4, wire, 4)] * ranks)
    assert p.makespan_s >= ranks * wire / egress_bps
    assert p.makespan_s >= topo.most_per_node * wire / node_bps
    assert p.makespan_s >= wire / alone_bps
    assert p.terms_s[p.binding] == max(v for k, v in p.terms_s.items() if k != LATENCY) or p.binding == LATENCY
    share = share_cost(cost, shared, topo).bandwidth_bytes_per_s
    assert share == pytest.approx(min(alone_bps, node_bps / topo.most_per_node, egress_bps / ranks))


def test_the_cluster_of_the_issue_binds_where_its_physics_says():
    """10 MB/s per node under a 25 MB/s egress, 64 MiB read in all: 1 node is bound by its NIC,
    4 nodes by the egress; each with the time of its bytes through that pipe."""
    cost = CostModel(latency_s=0.001, bandwidth_bytes_per_s=10 * MB)
    shared = SharedCapacity(node_bytes_per_s=10 * MB, egress_bytes_per_s=25 * MB, source="test")
    for nodes, binding, seconds in ((1, NODE_PIPE, 64 * MiB / 10e6), (4, EGRESS, 64 * MiB / 25e6)):
        ranks = 4 * nodes
        p = predict_job(cost, shared, Topology.block(ranks, nodes), [RankLoad(2, 64 * MiB // ranks, 4)] * ranks)
        assert p.binding == binding and p.makespan_s == pytest.approx(seconds, rel=0.01)


def shared_round(name, ranks, nodes, bps, busy=0.3):
    return SharedRound(name, ranks, nodes, 4, int(bps), 1.0, busy)


def test_rounds_tell_a_node_pipe_from_an_egress_and_from_cores():
    alone = CostModel(latency_s=0.001, bandwidth_bytes_per_s=10 * MB)  # one rank fills its node's 10 MB/s
    # four ranks on one node got what one gets: they share its pipe
    node = shared_from_rounds(alone, [shared_round("node", 4, 1, 10 * MB)], SharedCapacity())
    assert node.node_bytes_per_s == 10 * MB and node.egress_bytes_per_s is None and node.node_term == NODE_PIPE
    # four nodes got 25 MB/s together where their NICs would carry 40: an egress
    egress = shared_from_rounds(alone, [shared_round("nodes", 4, 4, 25 * MB)], SharedCapacity())
    assert egress.egress_bytes_per_s == 25 * MB
    # two nodes that got twice one: nothing behind them binds
    assert shared_from_rounds(alone, [shared_round("nodes", 2, 2, 20 * MB)], SharedCapacity()).egress_bytes_per_s is None
    # ranks on one machine that kept its cores busy: the node's "pipe" is its CPU
    fast = CostModel(latency_s=0.0005, bandwidth_bytes_per_s=2e9)
    cores = shared_from_rounds(fast, [shared_round("node", 4, 1, 0.8e9, busy=0.95)], SharedCapacity())
    assert cores.node_cpu_bound and cores.node_term == NODE_CPU
    # ranks that added up: the node carried what they got together, and no more was seen
    added = shared_from_rounds(fast, [shared_round("node", 2, 1, 3.9e9)], SharedCapacity())
    assert added.node_bytes_per_s == 3.9e9 and not added.node_cpu_bound


def test_streams_no_round_ran_are_not_priced_past_what_the_node_carried():
    """Two ranks of 4 streams each, every connection capped at 65 MB/s (Toxiproxy's), got 520 MB/s
    together: they added up. A plan of 16 streams per rank is priced at the 520 the node was seen
    to carry, not at 2 x 16 x 65 = 2080 MB/s that no round saw (the acacia profile's proxy, on the
    same 2 cores, stops at about 550)."""
    alone = CostModel(latency_s=0.001, bandwidth_bytes_per_s=10e9, stream_bandwidth_bytes_per_s=65 * MB)
    shared = shared_from_rounds(alone, [SharedRound("node", 2, 1, 4, 32 * MiB, 0.0645, 0.24)], SharedCapacity())
    assert shared.node_bytes_per_s == pytest.approx(32 * MiB / 0.0645)
    loads = [RankLoad(16, 256 * MiB, 16)] * 2
    p = predict_job(alone, shared, Topology.block(2, 1), loads)
    assert p.binding == NODE_PIPE and p.makespan_s == pytest.approx(512 * MiB / (32 * MiB / 0.0645), rel=0.02)


def test_a_shared_request_rate_binds_plans_of_many_small_requests():
    """Four ranks whose 16 small requests each took 0.1 s together (640/s) where one rank alone
    overlaps 4 of 2 ms requests (2000/s each): the store's request rate binds 65,536 requests."""
    alone = CostModel(latency_s=0.002, bandwidth_bytes_per_s=10 * MB)
    r = SharedRound("nodes", 4, 4, 4, 4 * MiB, 0.5, 0.2, small_requests=64, small_wall_s=0.1)
    shared = shared_from_rounds(alone, [r], SharedCapacity())
    assert shared.requests_per_s == pytest.approx(640)
    topo = Topology.block(4, 4)
    p = predict_job(alone, shared, topo, [RankLoad(16384, 16 * MiB, 64)] * 4)
    assert p.binding == REQUESTS and p.makespan_s == pytest.approx(65536 / 640, rel=0.01)
    # each rank's share of the rate is a time per request that no depth hides: merging wins
    assert share_cost(alone, shared, topo).cpu_per_request_s == pytest.approx(4 / 640)
    fast = SharedRound("nodes", 4, 4, 4, 4 * MiB, 0.5, 0.2, small_requests=64, small_wall_s=0.008)
    assert shared_from_rounds(alone, [fast], SharedCapacity()).requests_per_s is None  # they added up


def test_a_rounds_requests_are_taken_out_of_its_pipe_time():
    """Loopback, 2 ranks x 2 streams: 16 MB in a 20 ms window, its 6 late requests at the 1000/s
    its small requests got: the pipe moved the bytes in 14 ms, not 20. The requests' time is not
    start-up either. At most REQUESTS_SHARE_MAX of the window goes; a round with no small
    requests (no rate to price them at) keeps its window."""
    r = SharedRound("node", 2, 1, 2, 20_000_000, 0.03, 0.5, small_requests=40, small_wall_s=0.04,
                    steady_bytes=16_000_000, steady_s=0.02, steady_requests=6)
    assert r.steady_requests_s == pytest.approx(0.006)
    assert r.bytes_per_s == pytest.approx(16e6 / 0.014)
    assert r.startup_s(0.001) == pytest.approx(0.03 - 20e6 / (16e6 / 0.014) - 0.006 - 0.001)
    slow = replace(r, small_wall_s=0.4)  # 100/s: 60 ms of requests in a 20 ms window
    assert slow.bytes_per_s == pytest.approx(16e6 / (0.02 * (1 - REQUESTS_SHARE_MAX)))
    assert replace(r, small_requests=0).bytes_per_s == pytest.approx(16e6 / 0.02)
    assert replace(r, steady_requests=0).bytes_per_s == pytest.approx(16e6 / 0.02)
    # ranks that kept their cores idle read through a pipe that is not the cores (the emulated
    # cluster's): another stream's wait left it to the rest
    assert replace(r, cpu_busy=0.05).bytes_per_s == pytest.approx(16e6 / 0.02)
    assert r.as_dict()["steady_requests"] == 6
    assert r.window_bytes_per_s == pytest.approx(16e6 / 0.02) and r.as_dict()["window_bytes_per_s"] == 800_000_000


def test_ranks_on_one_machine_share_its_cores_nodes_in_namespaces_too():
    """Four ranks on two cores: each rank's CPU seconds stretch by two. Nodes emulated in network
    namespaces on one machine (one boot id) share its cores too; the union of the CPUs each rank
    may run on is the machine's."""
    topo = Topology.of_hosts(["n0", "n0", "n1", "n1"], [("boot-a", (0,)), ("boot-a", (1,)),
                                                         ("boot-a", (0, 1)), ("boot-a", (0, 1))])
    assert topo.n_nodes == 2 and topo.cores_of_machine == (2,) and topo.ranks_sharing_cores(3) == (4, 2.0)
    cost = CostModel(latency_s=0.0005, bandwidth_bytes_per_s=2e9, cpu_per_byte_s=2e-9)  # 0.5 GB/s of CPU
    p = predict_job(cost, SharedCapacity(), topo, [RankLoad(4, 256 * MiB, 4)] * 4)
    assert p.binding == CORES and p.terms_s[CORES] == pytest.approx(4 * 256 * MiB * 2e-9 / 2)
    # the planner prices each rank's CPU stretched as well
    assert share_cost(cost, SharedCapacity(), topo).cpu_per_byte_s == pytest.approx(4e-9)
    # unknown machines (plan's topology): no cores term
    unknown = predict_job(cost, SharedCapacity(), Topology.block(4, 2), [RankLoad(4, 256 * MiB, 4)] * 4)
    assert CORES not in unknown.terms_s or unknown.terms_s[CORES] == 0


def test_a_round_separates_the_start_up_from_the_rate_and_the_job_pays_it_once():
    # 4 MiB in 0.1 s, of which the last 3 MiB streamed in 0.03 s once under way: 100 MiB/s after
    # a start-up of 0.1 - 4/100 - latency
    r = SharedRound("node", 2, 1, 4, 4 * MiB, 0.1, 0.3, steady_bytes=3 * MiB, steady_s=0.03)
    assert r.bytes_per_s == pytest.approx(100 * MiB) and r.startup_s(0.001) == pytest.approx(0.1 - 0.04 - 0.001)
    alone = CostModel(latency_s=0.001, bandwidth_bytes_per_s=100 * MiB)
    shared = shared_from_rounds(alone, [r], SharedCapacity())
    assert shared.startup_s == pytest.approx(0.059)
    base = predict_job(alone, replace(shared, startup_s=0.0), Topology.block(2, 1), [RankLoad(8, 64 * MiB, 4)] * 2)
    p = predict_job(alone, shared, Topology.block(2, 1), [RankLoad(8, 64 * MiB, 4)] * 2)
    assert p.makespan_s == pytest.approx(base.makespan_s + 0.059) and p.terms_s[STARTUP] == pytest.approx(0.059)
    # a round timed as one piece (no steady part) is its bytes over its wall, and no start-up
    whole = SharedRound("node", 2, 1, 4, 4 * MiB, 0.1, 0.3)
    assert whole.bytes_per_s == pytest.approx(40 * MiB) and whole.startup_s(0.0) == pytest.approx(0.0)


def test_a_shared_pipe_carries_at_least_what_one_rank_got_alone():
    """A short round that got less than one rank alone measured its start, not the pipe."""
    alone = CostModel(latency_s=0.001, bandwidth_bytes_per_s=900 * MB)
    shared = shared_from_rounds(alone, [shared_round("node", 4, 1, 560 * MB)], SharedCapacity())
    assert shared.node_bytes_per_s == 900 * MB


def test_ranks_whose_streams_added_up_raise_the_link_rank_0_assumed():
    """Rank 0's probe had no time for parallel streams and assumed they share one 80 MB/s link;
    four ranks of four streams got 600 MB/s together: each rank gets at least 150 alone."""
    alone = CostModel(latency_s=0.001, bandwidth_bytes_per_s=80 * MB, stream_bandwidth_bytes_per_s=80 * MB)
    raised = alone_from_rounds(alone, [shared_round("node", 4, 1, 600 * MB)])
    assert raised.bandwidth(4) == pytest.approx(150 * MB)
    assert alone_from_rounds(alone, [shared_round("node", 4, 1, 200 * MB)]) == alone  # less: nothing learned
    # and the node carried the 600 they got: no node pipe below that
    assert shared_from_rounds(raised, [shared_round("node", 4, 1, 600 * MB)], SharedCapacity()).node_bytes_per_s == 600 * MB


def test_a_job_read_as_its_round_was_is_priced_at_the_window_as_measured():
    """The round's requests come out of its pipe's rate (REQUESTS_SHARE_MAX at most) and go back
    on the job's: a job of the round's own bytes and requests on that node takes the window as
    measured, and one of fewer, larger requests takes less. Before, the job was priced at the
    rate less its requests with none of its own charged: 1.44x fast in a demo on loopback."""
    r = SharedRound("node", 2, 1, 2, 20_000_000, 0.03, 0.5, small_requests=40, small_wall_s=0.04,
                    steady_bytes=16_000_000, steady_s=0.02, steady_requests=6)
    assert r.pipe_s_per_request == pytest.approx(0.001)
    alone = CostModel(latency_s=1e-6, bandwidth_bytes_per_s=500 * MB)  # 2 ranks of it add up past the round
    shared = shared_from_rounds(alone, [r], SharedCapacity())
    assert shared.node_bytes_per_s == pytest.approx(16e6 / 0.014) and shared.node_request_s == pytest.approx(0.001)
    topo = Topology.block(2, 1)
    like_round = predict_job(alone, shared, topo, [RankLoad(3, 8_000_000, 2)] * 2)
    assert like_round.terms_s[NODE_PIPE] == pytest.approx(0.02)  # 16 MB at the window's 800 MB/s
    fewer = predict_job(alone, shared, topo, [RankLoad(1, 8_000_000, 2)] * 2)
    assert fewer.terms_s[NODE_PIPE] == pytest.approx(0.014 + 0.002)
    # the planner's rank pays its share of each request's pipe time (its node's 2 ranks'), where
    # that is more than its share of the store's request rate (the same small requests' time)
    assert share_cost(alone, replace(shared, requests_per_s=None), topo).cpu_per_request_s == pytest.approx(0.002)
    assert share_cost(alone, replace(shared, requests_per_s=400), topo).cpu_per_request_s == pytest.approx(0.005)
    # capped: at most REQUESTS_SHARE_MAX of the window per round, so per request as much
    slow = replace(r, small_wall_s=0.4)
    assert slow.pipe_s_per_request == pytest.approx(REQUESTS_SHARE_MAX * 0.02 / 6)
    # none taken out (cores idle, or a rank's probe floors the pipe): none charged back
    assert shared_from_rounds(alone, [replace(r, cpu_busy=0.05)], SharedCapacity()).node_request_s == 0.0
    fast_alone = CostModel(latency_s=1e-6, bandwidth_bytes_per_s=10e9, stream_bandwidth_bytes_per_s=1e9)
    floored = shared_from_rounds(fast_alone, [r], SharedCapacity())
    assert floored.node_bytes_per_s == pytest.approx(2e9) and floored.node_request_s == 0.0
    # what the report and the link cache keep
    assert shared.as_dict()["node_request_s"] == pytest.approx(0.001)


def test_the_link_cache_keeps_a_probe_and_the_shared_pipes_with_their_age(tmp_path, monkeypatch):
    monkeypatch.setenv(linkcache.CACHE_ENV, str(tmp_path / "links.json"))
    probe = LinkProbe(0.002, 10 * MB, 20 * MB, 2, 3 * MiB, 0.4, measured=("stream", "streams"))
    shared = SharedCapacity(node_bytes_per_s=10 * MB, egress_bytes_per_s=25 * MB, source="measured",
                            node_request_s=0.001, egress_request_s=0.002)
    assert linkcache.recall("http://store:9000") is None
    linkcache.remember("http://store:9000", probe=probe, now_s=1000.0)
    linkcache.remember("http://store:9000", shared=shared, now_s=1000.0 + 3600)
    got = linkcache.recall("http://store:9000", now_s=1000.0 + 7200)
    assert got.probe == probe and got.age_s == pytest.approx(3600)
    assert (got.shared.node_bytes_per_s, got.shared.egress_bytes_per_s) == (10 * MB, 25 * MB)
    assert (got.shared.node_request_s, got.shared.egress_request_s) == (0.001, 0.002)
    assert "cached measurement of http://store:9000 from 60 min ago" == got.shared.source
    assert linkcache.recall("http://other:9000") is None
    assert linkcache.recall("http://store:9000", now_s=1000.0 + linkcache.MAX_AGE_S + 7200) is None  # stale
    monkeypatch.setenv(linkcache.CACHE_ENV, "off")
    assert linkcache.recall("http://store:9000") is None


def test_a_broken_cache_file_is_ignored(tmp_path, monkeypatch):
    path = tmp_path / "links.json"
    path.write_text("{not json")
    monkeypatch.setenv(linkcache.CACHE_ENV, str(path))
    assert linkcache.recall("http://store:9000") is None
    linkcache.remember("http://store:9000", shared=SharedCapacity(node_bytes_per_s=1.0))
    assert linkcache.recall("http://store:9000").shared.node_bytes_per_s == 1.0


def test_capped_connections_go_in_waves_and_a_shared_link_lends():
    # 18 requests of 1 MB on 4 streams capped at 10 MB/s each: the busiest stream carries 5
    capped = CostModel(latency_s=0.0, bandwidth_bytes_per_s=1e9, stream_bandwidth_bytes_per_s=10 * MB)
    assert capped.link_s(18, 18 * MB, 4) == pytest.approx(5 * 0.1)
    assert capped.link_s(20, 20 * MB, 4) == pytest.approx(5 * 0.1)  # full waves: the fluid time
    assert capped.link_s(2, 2 * MB, 4) == pytest.approx(0.1)  # fewer requests than streams: two in use
    # one link the streams share (no cap per connection): an idle stream's share goes to the others
    shared = CostModel(latency_s=0.0, bandwidth_bytes_per_s=40 * MB)
    assert shared.link_s(18, 18 * MB, 4) == pytest.approx(18 * MB / (40 * MB))
    load = RankLoad(18, 18 * MB, 4)
    job = predict_job(capped, SharedCapacity(), Topology.block(1, 1), [load])
    assert job.binding == "per-connection cap" and job.makespan_s == pytest.approx(capped.predict_s(18, 18 * MB, 4))


@given(st.integers(1, 200), st.integers(1, 10**9), st.integers(1, 16), st.floats(1e6, 1e9), st.floats(1e5, 1e9))
def test_waves_cost_at_most_one_request_more_than_the_streams_fluid_time(n, wire, threads, link_bps, stream_bps):
    cost = CostModel(bandwidth_bytes_per_s=link_bps, stream_bandwidth_bytes_per_s=stream_bps)
    fluid_s = wire / cost.bandwidth(threads)
    one_request_s = wire / n / cost.stream_bytes_per_s
    assert fluid_s * (1 - 1e-9) <= cost.link_s(n, wire, threads) <= (fluid_s + one_request_s) * (1 + 1e-9)


def test_a_nodes_ranks_assumed_to_share_rank_0s_link_share_its_requests_too():
    """Emulated cluster, 8 ranks on one 10 MB/s node, a thin box, nothing measured but rank 0's
    probe (its two streams shared the link, overlap not measured): priced with the node's pipe
    alone, 2048 requests of 128 B were predicted 0.16-0.28 s and took 0.69-0.83 s. Each request
    takes the node's pipe a latency over the overlap rank 0's probe streams had; a rank alone
    keeps its own overlap, and ranks whose streams added up are assumed to share nothing."""
    alone = CostModel(latency_s=0.002, bandwidth_bytes_per_s=10e6, stream_bandwidth_bytes_per_s=10e6)
    eight = assumed_shared(alone, True, False, probe_streams=2, ranks_per_node=8)
    assert eight.node_request_s == pytest.approx(0.001) and eight.node_bytes_per_s == 10e6
    assert assumed_shared(alone, False, False, probe_streams=2, ranks_per_node=8).node_request_s == pytest.approx(0.001)
    assert assumed_shared(alone, True, False, probe_streams=2, ranks_per_node=1).node_request_s == 0.0
    assert assumed_shared(alone, True, True, probe_streams=2, ranks_per_node=8).node_request_s == 0.0
    thin = predict_job(alone, eight, Topology.block(8, 1), [RankLoad(256, 256 * 128, 8)] * 8)
    assert thin.binding == NODE_PIPE and thin.makespan_s >= 2048 * 0.001
    merged = predict_job(alone, eight, Topology.block(8, 1), [RankLoad(8, 512 << 10, 4)] * 8)
    assert merged.makespan_s < thin.makespan_s  # 8 x 512 KiB through 10 MB/s: 0.42 s
