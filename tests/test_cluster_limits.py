"""The physical limit (ingest/testbed/cluster/limits.py) the study's figures and bench/cluster/makespan.py
share, from the bytes asked and from the bytes the links carried; the study config's `setting =
"cluster"` checks; and what STUDY.md says of a cluster study (its nodes, its phases against their
limits, methods within their runs' spread). Pure: no cluster is built."""
from __future__ import annotations

import os

import pytest

from ingest.errors import ConfigError
from ingest.study.config import parse_config
from ingest.testbed.cluster import load_spec
from ingest.testbed.cluster.limits import (FILESYSTEM, LATENCY, NODE_NIC, PAYLOAD_PER_FRAME_BYTE, STORE_EGRESS,
                                           busiest_node_ranks, carried_limit, payload_rate, physical_limit,
                                           spec_from_record, spec_limit, staging_limit)
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


# -- limits from what the links carried (issue 46) ------------------------------------------------

SEED = load_spec(os.path.join(ROOT, "configs", "cluster.toml"),
                 {"cluster": {"nodes": 25, "ranks_per_node": 1}, "store": {"egress_rate_bytes_per_s": "4MB"},
                  "node": {"nic_rate_bytes_per_s": "4MB"}, "fs": {"rate_bytes_per_s": "32MB"}})


def test_a_phase_is_limited_by_the_bytes_its_links_carried_read_ahead_included():
    # 4 readers of 2 MiB boxes through sshfs: the filesystem sent each node 3.9 MB (read-ahead)
    staged = {"fs_read": 4 * 3_900_000, **{f"fs>n{i}": 3_900_000 for i in range(4)}}
    lim = carried_limit(staged, SEED, "staged")
    assert lim.binding == NODE_NIC and lim.seconds == pytest.approx(3.9 / 4 + SEED.fs.latency_s)
    # 16 readers: the filesystem's 32 MB/s binds (62.4 MB of it), not a node's 4 MB/s
    sixteen = carried_limit({"fs_read": 16 * 3_900_000, **{f"fs>n{i}": 3_900_000 for i in range(16)}}, SEED, "staged")
    assert sixteen.binding == FILESYSTEM and sixteen.seconds == pytest.approx(16 * 3.9 / 32 + SEED.fs.latency_s)
    # the copy: node 0's NIC each way is its own cap; the largest of the four pipes binds
    copy = carried_limit({"store": 54_800_000, "store>n0": 54_800_000, "n0>fs": 55_400_000, "fs_write": 55_400_000},
                         SEED, "copy")
    assert copy.binding == NODE_NIC and copy.seconds == pytest.approx(55.4 / 4 + SEED.store.latency_s)
    direct = carried_limit({"store": 17_200_000, **{f"store>n{i}": 2_150_000 for i in range(8)}}, SEED, "direct")
    assert direct.binding == STORE_EGRESS and direct.terms_s[NODE_NIC] == pytest.approx(2.15 / 4)
    with pytest.raises(ValueError, match="phase"):
        carried_limit({}, SEED, "upload")


def _row(method, p, elapsed_s, repeat=1, link_bytes=None, **cols):
    return {"cell": f"processes/{method}/p{p}", "experiment": "processes", "status": "ok", "ranks": p,
            "repeat": repeat, "elapsed_s": elapsed_s,
            "params": {"method": method, "ranks": p, "stage_with": "s5cmd" if method == "staging" else None},
            "bytes_wire": 2_097_152 * p, "link_bytes": link_bytes or {}, "tool": "s5cmd v2.3.0", **cols}


def _staged_row(p, read_s, stage_s, repeat=1, read_ahead=1.9):
    per_node = int(2_097_152 * read_ahead)
    read = {"fs_read": per_node * p, **{f"fs>n{i}": per_node for i in range(p)}}
    copy = {"store": 54_800_000, "store>n0": 54_800_000, "n0>fs": 55_400_000, "fs_write": 55_400_000}
    return _row("staging", p, read_s, repeat, {"read": read, "copy": copy}, stage_s=stage_s, total_s=read_s + stage_s)


def test_figure_lines_and_the_limits_table_use_what_the_links_carried():
    import dataclasses

    from ingest.study import physics, summary

    meta = {"cluster": dataclasses.asdict(SEED), "cube": {"object_bytes": 52_428_800 + 2880}}
    rows = [_staged_row(p, read_s, 14.9, repeat) for p, read_s in ((1, 1.1), (4, 1.12), (8, 1.15), (16, 2.2))
            for repeat in (1, 2)]
    (fig1,) = summary.limit_lines("fig1", rows, meta)
    # read-ahead counted: 1.9 x 2 MiB at 4 MB/s, not the 2 MiB the ranks asked for
    assert fig1.seconds[1] == pytest.approx(1.9 * 2_097_152 / 4e6 + SEED.fs.latency_s)
    assert (fig1.binding[4], fig1.binding[16]) == (NODE_NIC, FILESYSTEM)  # at 8 the two pipes tie: the knee
    records = {(r["phase"], r["ranks"]): r for r in physics.against_limits(rows, meta)}
    assert records["staging copy", 8]["ratio"] == pytest.approx(14.9 / (55.4 / 4 + 0.001))
    assert records["staged read", 16]["binding"] == FILESYSTEM
    text = "\n".join(physics.limits_section(rows, meta))
    assert "staging copy came within 1.15× of its limit at every count" in text
    assert "Fig. 1's knee: the staged read stays within 10% of 1 reader(s)' 1.10 s up to p = 8" in text
    # a staged read at 1.4x its limit: the tool is named, and why
    slow = rows + [_staged_row(25, 4.8, 14.9, repeat) for repeat in (1, 2)]
    text = "\n".join(physics.limits_section(slow, meta))
    assert "staged read took more than 1.15× its limit at p = 25" in text and "sshfs (FUSE over sftp)" in text
    assert "Why: sshfs serves each read from a chain of sftp requests" in text
    # a study before link_bytes (none recorded): the lines fall back to the bytes asked, no table
    old = [{**r, "link_bytes": {}} for r in rows]
    assert summary.limit_lines("fig1", old, meta)[0].seconds[1] == spec_limit(SEED, 2_097_152, 1, source="fs").seconds
    assert physics.against_limits(old, meta) == [] and physics.limits_section(old, meta) == []


def test_two_methods_within_their_runs_spread_are_no_different():
    from ingest.study import report, summary

    same = [_row(m, 25, t, repeat) for m in ("presigned", "s3") for repeat, t in ((1, 13.9), (2, 14.1))]
    choice = summary.method_choice(same)
    assert choice["no_difference"] and choice["winner"] is None and choice["wins"] == {"presigned": [], "s3": []}
    assert "**Method: no difference.** At p = 25" in report.rec_method(choice)
    # the same rows in another order, or one repeat slower: still no difference, never a flip
    shuffled = list(reversed(same))
    shuffled[0] = {**shuffled[0], "elapsed_s": 14.3}
    assert summary.method_choice(shuffled)["no_difference"]
    # ranges apart: the faster is named
    apart = [_row("presigned", 25, t, r) for r, t in ((1, 10.0), (2, 10.4))] + \
            [_row("s3", 25, t, r) for r, t in ((1, 14.0), (2, 14.2))]
    assert summary.method_choice(apart)["winner"] == "presigned"
    assert "**Method: presigned URL.**" in report.rec_method(summary.method_choice(apart))


def test_study_md_names_the_nodes_the_ranks_ran_on():
    from ingest.study import report

    rows = [{**_row("s3", 4, 2.2), "host": "vm", "nodes": [f"ing7-0-n{i}" for i in (0, 1, 2, 3)]},
            {**_row("s3", 16, 8.9), "host": "vm", "nodes": [f"ing7-0-n{i}" for i in range(10, 16)]}]
    line = next(x for x in report.header(rows, {"host": "vm"}) if x.startswith("- hosts"))
    assert line.startswith("- hosts: study on vm; runs on 10 nodes: ing7-0-n0, ing7-0-n1, ing7-0-n2, ing7-0-n3, "
                           "ing7-0-n10,")
    assert "runs on vm" not in line


def test_study_config_overrides_the_cluster_rates_and_names_a_bad_one():
    def with_rates(rates: str) -> str:
        return _study().replace("[study.embedded]", rates + "[study.embedded]")

    cfg = parse_config(with_rates('[study.cluster.store]\negress_rate_bytes_per_s = "4MB"\n'
                                  '[study.cluster.fs]\nrate_bytes_per_s = "32MB"\n'))
    assert cfg.cluster.store.egress_rate_bytes_per_s == 4 * MB and cfg.cluster.fs.rate_bytes_per_s == 32 * MB
    assert cfg.cluster.node.nic_rate_bytes_per_s == 10 * MB and cfg.cluster.nodes == 3  # the spec's, the study's
    with pytest.raises(ConfigError, match=r"store\.egress_rate_bytes_per_s.*\[study\.cluster\.store\]"):
        parse_config(with_rates("[study.cluster.store]\negress_rate_bytes_per_s = -1\n"))
    seed = os.path.join(ROOT, "configs", "study-seed-counts.toml")
    from ingest.study.config import load_config

    shipped = load_config(seed)
    assert shipped.cluster.nodes == 25 and shipped.experiments["processes"]["ranks"] == [1, 4, 8, 16, 25]
    assert shipped.cluster.fs.rate_bytes_per_s == 8 * shipped.cluster.node.nic_rate_bytes_per_s  # the knee at 8


def test_an_older_study_database_gains_the_new_columns(tmp_path):
    import sqlite3

    from ingest.study import db

    path = str(tmp_path / db.DB_NAME)
    old_schema = db.SCHEMA_SQL.replace("    nodes         TEXT,", "").replace("    link_bytes    TEXT,", "")
    assert "link_bytes" not in old_schema.split("PRIMARY KEY")[0]
    with sqlite3.connect(path) as conn:
        conn.executescript(old_schema)
    conn = db.connect(path)
    row = {"cell": "processes/s3/p1", "experiment": "processes", "params": {"method": "s3"}, "repeat": 1, "seq": 0,
           "status": "ok", "started_utc": "2026-11-27T00:00:00Z", "runtime_s": 1.0, "command": "x",
           "nodes": ["n0"], "link_bytes": {"read": {"store": 5}}}
    db.record(conn, row)
    (back,) = db.rows(conn)
    assert back["nodes"] == ["n0"] and back["link_bytes"] == {"read": {"store": 5}}
    conn.close()
