"""The physical limit (ingest/testbed/cluster/limits.py) the study's figures and bench/cluster.py
share, and the study config's `setting = "cluster"` checks. Pure: no cluster is built."""
from __future__ import annotations

import os

import pytest

from ingest.errors import ConfigError
from ingest.study.config import parse_config
from ingest.testbed.cluster import load_spec
from ingest.testbed.cluster.limits import (FILESYSTEM, LATENCY, NODE_NIC, PAYLOAD_PER_FRAME_BYTE, STORE_EGRESS,
                                           busiest_node_ranks, payload_rate, physical_limit, spec_from_record,
                                           spec_limit, staging_limit)
from tests.mpitools import ROOT

MB = 10**6
CAPS = {"server_rate_bytes_per_s": 25 * MB, "nic_rate_bytes_per_s": 10 * MB}
F = PAYLOAD_PER_FRAME_BYTE  # the caps meter frames: a reader's payload gets this fraction of them


def test_a_full_tcp_segment_carries_1448_payload_bytes_of_1514_metered():
    assert F == pytest.approx(1448 / 1514)
    assert payload_rate(10 * MB) == pytest.approx(10 * MB * 1448 / 1514)


def test_one_node_is_nic_bound_until_the_store_fills():
    one = physical_limit(10 * MB, ranks=1, nodes=1, ranks_per_node=1, latency_s=0.001, **CAPS)
    assert one.binding == NODE_NIC and one.seconds == pytest.approx(1.0 / F + 0.001)
    # 8 ranks on 8 nodes: each NIC moves 1/8, the store moves all of it: the store binds
    eight = physical_limit(80 * MB, ranks=8, nodes=8, ranks_per_node=1, latency_s=0.001, **CAPS)
    assert eight.binding == STORE_EGRESS and eight.seconds == pytest.approx(80 / 25 / F + 0.001)
    assert eight.terms_s[NODE_NIC] == pytest.approx(1.0 / F)


def test_ranks_fill_node_zero_first_then_oversubscribe_evenly():
    assert busiest_node_ranks(4, nodes=4, ranks_per_node=4) == 4  # all on node 0
    assert busiest_node_ranks(4, nodes=4, ranks_per_node=1) == 1
    assert busiest_node_ranks(16, nodes=4, ranks_per_node=2) == 4
    lim = physical_limit(40 * MB, ranks=4, nodes=4, ranks_per_node=4, **CAPS)
    assert lim.binding == NODE_NIC and lim.seconds == pytest.approx(4.0 / F)


def test_latency_binds_a_tiny_read_and_staging_adds_the_copy():
    tiny = physical_limit(1000, ranks=1, nodes=1, ranks_per_node=1, latency_s=0.002, **CAPS)
    assert tiny.binding == LATENCY
    st = staging_limit(64 * MB, 8 * MB, store_rate_bytes_per_s=25 * MB, nic_rate_bytes_per_s=10 * MB,
                       fs_rate_bytes_per_s=30 * MB, ranks=1, nodes=1, ranks_per_node=1)
    assert st.terms_s["copy"] == pytest.approx(6.4 / F) and st.terms_s["read"] == pytest.approx(0.8 / F)
    assert st.binding == NODE_NIC and st.seconds == pytest.approx(7.2 / F)
    with pytest.raises(ValueError):
        physical_limit(1, ranks=0, nodes=1, ranks_per_node=1, **CAPS)


def test_spec_limit_uses_the_spec_caps_and_round_trips_the_record():
    import dataclasses

    spec = load_spec(os.path.join(ROOT, "configs", "cluster.toml"))
    fs = spec_limit(spec, 90 * MB, 8, source="fs", nodes=8, ranks_per_node=1)
    assert fs.binding == FILESYSTEM and fs.seconds == pytest.approx(90 * MB / payload_rate(spec.fs.rate_bytes_per_s)
                                                                   + spec.fs.latency_s)
    assert spec_from_record(dataclasses.asdict(spec)) == spec
    with pytest.raises(ValueError):
        spec_limit(spec, 1, 1, source="staging")


STUDY = """
[study]
setting = "cluster"
[study.cluster]
spec = "{spec}"
nodes = 3
ranks_per_node = 1
[study.embedded]
shape = "64x64x8"
[processes]
ranks = [1, 2]
"""


def _study(extra: str = "", spec: str = os.path.join(ROOT, "configs", "cluster.toml")) -> str:
    return STUDY.format(spec=spec) + extra


def test_study_config_cluster_setting():
    cfg = parse_config(_study())
    assert cfg.cluster.nodes == 3 and cfg.cluster.ranks_per_node == 1
    assert cfg.cluster.store.egress_rate_bytes_per_s == 25 * MB
    assert parse_config(_study().replace('setting = "cluster"', "").split("[study.cluster]")[0]
                        + "[study.embedded]\n[processes]\nranks=[1]\n").cluster is None


@pytest.mark.parametrize("change, field", [
    (lambda t: t.replace('setting = "cluster"', 'setting = "clustr"'), "study.setting"),
    (lambda t: t.replace('setting = "cluster"', 'setting = "local"'), "study.cluster"),
    (lambda t: t.replace("nodes = 3", "nodes = 0"), "cluster.nodes"),
    (lambda t: t.replace("[study.embedded]\nshape = \"64x64x8\"\n", ""), "study.embedded"),
    (lambda t: t + "[libraries]\n", "[libraries]"),
    (lambda t: t.replace("[study.cluster]", 'launcher = "srun -n {ranks}"\n[study.cluster]'), "study.launcher"),
    (lambda t: _study(spec="/nonexistent/cluster.toml"), "study.cluster.spec"),
])
def test_study_config_cluster_refusals_name_the_field(change, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace(".", r"\.")):
        parse_config(change(_study()))


def test_study_figures_limit_lines_come_from_the_same_function():
    import dataclasses

    from ingest.study import summary

    spec = load_spec(os.path.join(ROOT, "configs", "cluster.toml"), {"cluster": {"nodes": 8, "ranks_per_node": 1}})
    meta = {"cluster": dataclasses.asdict(spec), "cube": {"object_bytes": 64 * MB}}
    rows = [{"experiment": "processes", "status": "ok", "ranks": p, "params": {"method": m, "ranks": p},
             "bytes_wire": 8 * MB * p, "elapsed_s": 1.0} for p in (1, 8) for m in ("s3", "staging")]
    (s3,) = summary.limit_lines("fig2", rows, meta)
    assert s3.binding == {1: NODE_NIC, 8: STORE_EGRESS}
    assert s3.seconds[8] == spec_limit(spec, 64 * MB, 8, source="store").seconds
    direct, staging = summary.limit_lines("fig3", rows, meta)
    assert staging.seconds[1] == pytest.approx(64 / 10 / F + 0.001 + 8 / 10 / F + 0.001)
    assert summary.limit_lines("fig2", rows, {}) == []  # not a cluster study: no line
    assert "10 MB/s" in summary.cluster_text(meta)
