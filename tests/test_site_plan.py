"""`plan --site FILE`: a site file's figures (each with its source) price the pipes a job's ranks
share wherever nothing measured them; without one, `plan` says in one line that the store's egress
is unknown; a request ceiling binds a job of many requests; a measurement beats the site file
only for the term it measured; and, at 1/1000 scale, the emulated cluster's rates written as a
site file predict its jobs without a probe: the binding pipe named, its byte time predicted, and no
job beating it (how close a job comes is this machine's CPU, a benchmark's figure, not a test's)."""
from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.cli.main import main
from ingest.config.site import load_site, parse_rate, site_from_dict
from ingest.config.site_pricing import ASSUMED, GIVEN, MEASURED, SITE, UNKNOWN, job_topology, price_job, starting_cost
from ingest.core.cost import CostModel
from ingest.core.sharing import EGRESS, NODE_PIPE, REQUESTS, RankLoad, SharedCapacity, Topology, predict_job
from ingest.engine import linkcache
from ingest.errors import ConfigError
from ingest.testbed.cluster.limits import PAYLOAD_PER_FRAME_BYTE
from ingest.testbed.synth import write_cube
from tests.mpitools import ROOT, upload_fits_cube

SITES = os.path.join(ROOT, "configs", "sites")
ACACIA = os.path.join(SITES, "acacia-setonix.toml")
EMULATED = os.path.join(SITES, "emulated-cluster.toml")
CLUSTER_CONFIG = os.path.join(ROOT, "configs", "cluster.toml")
SHAPE = (32, 256, 256)  # int16, 4 MiB: a local cube that plan reads the header of


def _doc(**changes) -> dict:
    """A valid site document; changes {"table.key": entry or None (removed)} on top."""
    doc = {"site": {"name": "test site"},
           "node": {"nic_bytes_per_s": {"value": "10 Gbit/s", "source": "iperf3, 2026-11-20"},
                    "ranks_per_node": {"value": 4, "source": "our SLURM default"}},
           "store": {"egress_bytes_per_s": {"value": "2 GB/s", "source": "the store's admins"},
                     "requests_per_s": {"value": 5500, "source": "AWS's documented GETs per prefix"},
                     "latency_s": {"value": 0.002, "source": "seed 001 s7.4"}}}
    for dotted, entry in changes.items():
        table, key = dotted.split(".")
        if entry is None:
            doc[table].pop(key)
        else:
            doc.setdefault(table, {})[key] = entry
    return doc


def _write(tmp_path, text: str, name: str = "site.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _site_toml(nic: str, egress: str, requests="unknown", latency_s=0.002, rpn=4) -> str:
    requests = f'"{requests}"' if isinstance(requests, str) else requests
    return (f'[node]\nnic_bytes_per_s = {{ value = "{nic}", source = "the NIC test figure" }}\n'
            f'ranks_per_node = {{ value = {rpn}, source = "the ranks test figure" }}\n'
            f'[store]\negress_bytes_per_s = {{ value = "{egress}", source = "the egress test figure" }}\n'
            f'requests_per_s = {{ value = {requests}, source = "the ceiling test figure" }}\n'
            f'latency_s = {{ value = {latency_s}, source = "the latency test figure" }}\n')


# ------------------------------------------------------------------ the file

@pytest.mark.parametrize("text, expected", [
    ("600 MB/s", 600e6), ("600MB", 600e6), ("25 Gbit/s", 25e9 / 8), ("600 MiB/s", 600 * 2**20),
    ("4.7 GiB/s", 4.7 * 2**30), (12345, 12345.0), (2.5e9, 2.5e9), ("1e6 B/s", 1e6), ("100 Mbit/s", 12.5e6),
])
def test_rates_read_as_bytes_per_second(text, expected):
    assert parse_rate(text, "k") == pytest.approx(expected)


@pytest.mark.parametrize("change, words", [
    ({"node.nic_bytes_per_s": "10 Gbit/s"}, ["node.nic_bytes_per_s", "expected a table", "bytes/s", "source"]),
    ({"node.nic_bytes_per_s": {"value": "10 Gbit/s"}}, ["node.nic_bytes_per_s.source", "required", "iperf3"]),
    ({"node.nic_bytes_per_s": {"value": "10 Gbit/s", "source": "  "}}, ["node.nic_bytes_per_s.source"]),
    ({"node.nic_bytes_per_s": {"source": "x"}}, ["node.nic_bytes_per_s.value", "required", "bytes/s", "unknown"]),
    ({"store.egress_bytes_per_s": {"value": "600 Mb/s", "source": "x"}},
     ["store.egress_bytes_per_s.value", "ambiguous", "Mbit/s", "MB/s"]),
    ({"store.egress_bytes_per_s": {"value": "6 Gbps", "source": "x"}}, ["store.egress_bytes_per_s.value", "ambiguous"]),
    ({"store.egress_bytes_per_s": {"value": "10 furlongs/s", "source": "x"}},
     ["store.egress_bytes_per_s.value", "unknown unit", "bytes/s"]),
    ({"store.egress_bytes_per_s": {"value": -5, "source": "x"}}, ["store.egress_bytes_per_s.value", "> 0", "bytes/s"]),
    ({"store.latency_s": {"value": "2ms", "source": "x"}}, ["store.latency_s.value", "seconds"]),
    ({"store.latency_s": {"value": 0, "source": "x"}}, ["store.latency_s.value", "seconds"]),
    ({"store.requests_per_s": {"value": True, "source": "x"}}, ["store.requests_per_s.value", "requests per second"]),
    ({"node.ranks_per_node": {"value": 2.5, "source": "x"}}, ["node.ranks_per_node.value", "whole number"]),
    ({"node.ranks_per_node": {"value": 4, "source": "x", "unit": "ranks"}},
     ["node.ranks_per_node.unit", "unknown field", "known: value, source"]),
    ({"node.nic_rate": {"value": 4, "source": "x"}},
     ["node.nic_rate", "unknown field", "did you mean nic_bytes_per_s"]),
    ({"store.requests_per_s": None}, ["store.requests_per_s", "required", "requests per second", "unknown"]),
    ({"network.mtu": 1500}, ["[network]", "unknown table"]),
])
def test_a_bad_figure_is_named_with_the_unit_expected(change, words):
    with pytest.raises(ConfigError) as info:
        site_from_dict(_doc(**change))
    for word in words:
        assert word in str(info.value), str(info.value)


def test_errors_name_the_file(tmp_path):
    path = _write(tmp_path, _site_toml("10 Gb/s", "1 GB/s"))
    with pytest.raises(ConfigError, match=rf"^site file {path}: node.nic_bytes_per_s.value: .*ambiguous"):
        load_site(path)
    broken = _write(tmp_path, "[node\n", "broken.toml")
    with pytest.raises(ConfigError, match=rf"^site file {broken}: not valid TOML"):
        load_site(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        load_site(str(tmp_path / "absent.toml"))


def test_a_figure_may_be_unknown_with_its_reason():
    site = site_from_dict(_doc(**{"store.requests_per_s": {"value": "unknown", "source": "never measured"}}))
    assert site.requests_per_s.value is None and site.requests_per_s.source == "never measured"
    assert site.egress_bytes_per_s.value == 2e9 and site.nic_bytes_per_s.value == 10e9 / 8


def test_the_shipped_site_files_are_valid_and_every_figure_has_a_source():
    acacia = load_site(ACACIA)
    figures = [v for v in vars(acacia).values() if hasattr(v, "source")]
    assert len(figures) == 7 and all("seed 001" in f.source for f in figures)
    assert acacia.latency_s.value == pytest.approx(7941 / 4_071_843, rel=0.01)
    assert acacia.stream_bytes_per_s.value == pytest.approx(34359738368 / 134.1, rel=0.01)


def test_the_emulated_cluster_site_file_states_configs_cluster_toml_rates():
    """The shipped file is configs/cluster.toml's caps as a reader gets them (x 1448/1514)."""
    from ingest.testbed.cluster import load_spec

    spec, site = load_spec(CLUSTER_CONFIG), load_site(EMULATED)
    assert site.nic_bytes_per_s.value == pytest.approx(spec.node.nic_rate_bytes_per_s * PAYLOAD_PER_FRAME_BYTE,
                                                       rel=1e-3)
    assert site.egress_bytes_per_s.value == pytest.approx(
        spec.store.egress_rate_bytes_per_s * PAYLOAD_PER_FRAME_BYTE, rel=1e-3)
    assert site.ranks_per_node.value == spec.ranks_per_node


# ------------------------------------------------------------------ pricing, term by term

def test_the_site_prices_what_nothing_measured():
    site = site_from_dict(_doc(), "s.toml")
    topology, placement = job_topology(1000, None, None, site)
    assert (topology.n_nodes, topology.most_per_node) == (250, 4) and placement[0].origin == SITE
    alone = starting_cost(CostModel(), site)
    assert (alone.latency_s, alone.bandwidth_bytes_per_s) == (0.002, 10e9 / 8)
    pricing = price_job(alone, SharedCapacity(), topology, site)
    shared = pricing.shared
    assert (shared.node_bytes_per_s, shared.egress_bytes_per_s, shared.requests_per_s) == (10e9 / 8, 2e9, 5500)
    assert shared.source == "site file s.toml (node pipe, egress, request rate)" and not pricing.egress_unknown
    origins = {f.term: (f.origin, f.source) for f in pricing.facts}
    assert origins[EGRESS] == (SITE, "the store's admins") and origins["latency"] == (SITE, "seed 001 s7.4")
    assert origins["rank's link"][0] == SITE and "iperf3, 2026-11-20" in origins["rank's link"][1]


def test_without_a_site_the_egress_is_unknown_and_the_rest_assumed():
    topology, placement = job_topology(8, None, None, None)
    assert topology.n_nodes == 1 and placement[0].origin == ASSUMED
    pricing = price_job(CostModel(), SharedCapacity(), topology, None)
    assert pricing.egress_unknown and pricing.shared == SharedCapacity()
    origins = {f.term: f.origin for f in pricing.facts}
    assert origins == {EGRESS: UNKNOWN, NODE_PIPE: UNKNOWN, REQUESTS: UNKNOWN, "latency": ASSUMED,
                       "rank's link": ASSUMED}


def test_a_measurement_beats_the_site_only_for_the_term_it_measured():
    site = site_from_dict(_doc(), "s.toml")
    topology = Topology.block(16, 4)
    measured = SharedCapacity(egress_bytes_per_s=50e6, source="measured: nodes round (4 ranks on 4 node(s))",
                              nodes_seen=4)
    pricing = price_job(CostModel(latency_s=0.01), measured, topology, site,
                        link_measured="cached measurement of http://s from 3 min ago")
    facts = {f.term: f for f in pricing.facts}
    assert facts[EGRESS].origin == MEASURED and facts[EGRESS].value == 50e6
    assert "the site file's 2 GB/s (the store's admins)" in facts[EGRESS].not_used
    assert facts[NODE_PIPE].origin == SITE and pricing.shared.node_bytes_per_s == 10e9 / 8  # the round saw no node pipe
    assert facts["latency"].origin == MEASURED and facts["latency"].value == 0.01
    assert "the site file's 2 ms" in facts["latency"].not_used
    assert pricing.shared.egress_bytes_per_s == 50e6
    assert pricing.shared.source.startswith("measured: nodes round")
    assert "site file s.toml (node pipe" in pricing.shared.source


def test_the_site_replaces_what_the_probe_only_assumed():
    """A probe of one rank assumes its node's ranks share its link; the site's NIC replaces it."""
    assumed = SharedCapacity(node_bytes_per_s=70e6, node_request_s=0.001,
                             source="assumed: a node's ranks share the one stream rank 0 measured")
    site = site_from_dict(_doc(), "s.toml")
    pricing = price_job(CostModel(), assumed, Topology.block(8, 2), site, link_measured="this plan's probe")
    node = next(f for f in pricing.facts if f.term == NODE_PIPE)
    assert node.origin == SITE and node.not_used.startswith("assumed: a node's ranks share")
    assert "70 MB/s" in node.not_used
    assert pricing.shared.node_bytes_per_s == 10e9 / 8 and pricing.shared.node_request_s == 0.0


def test_the_command_line_beats_the_site_file():
    site = site_from_dict(_doc(), "s.toml")
    given = frozenset({"latency_s"})
    alone = starting_cost(CostModel(latency_s=0.005), site, given)
    assert alone.latency_s == 0.005 and alone.bandwidth_bytes_per_s == 10e9 / 8
    pricing = price_job(alone, SharedCapacity(), Topology.block(4, 1), site, given=given)
    latency = next(f for f in pricing.facts if f.term == "latency")
    assert latency.origin == GIVEN and "the site file's 2 ms" in latency.not_used
    topology, (rpn, _) = job_topology(1000, 100, None, site)
    assert topology.most_per_node == 10 and rpn.origin == GIVEN and "the site file's 4" in rpn.not_used


@settings(max_examples=60, deadline=None)
@given(ceiling=st.floats(1.0, 1e5), n_ranks=st.integers(1, 64), n_nodes=st.integers(1, 16),
       requests=st.integers(1, 10_000), request_bytes=st.integers(1, 1 << 24), threads=st.integers(1, 64))
def test_a_request_ceiling_bounds_the_makespan(ceiling, n_ranks, n_nodes, requests, request_bytes, threads):
    """However the ranks and pipes fall, a job's requests take at least requests / ceiling."""
    doc = _doc(**{"store.requests_per_s": {"value": ceiling, "source": "x"}})
    topology = Topology.block(n_ranks, n_nodes)
    pricing = price_job(CostModel(), SharedCapacity(), topology, site_from_dict(doc))
    loads = [RankLoad(requests, requests * request_bytes, threads)] * n_ranks
    prediction = predict_job(CostModel(), pricing.shared, topology, loads)
    assert prediction.makespan_s >= n_ranks * requests / ceiling * (1 - 1e-9)


# ------------------------------------------------------------------ plan, end to end

@pytest.fixture(scope="module")
def local_cube(tmp_path_factory):
    path = tmp_path_factory.mktemp("site-plan") / "cube.fits"
    write_cube(path, SHAPE, 16)
    return str(path)


def _plan(capsys, *args) -> tuple[int, str, str]:
    status = main(["plan", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_without_a_site_file_plan_says_in_one_line_that_the_egress_is_unknown(local_cube, capsys):
    status, out, _ = _plan(capsys, local_cube, "--ranks", "16", "--nodes", "4", "--requests", "0")
    assert status == 0
    warnings = [line for line in out.splitlines() if "egress is unknown" in line]
    assert len(warnings) == 1 and "16 rank(s) priced as if each had the store to itself" in warnings[0]
    assert "predicted makespan" in out  # the number is kept, only flagged
    _, out, _ = _plan(capsys, local_cube, "--ranks", "16", "--nodes", "4", "--json")
    job = json.loads(out)["job"]
    assert len(job["warnings"]) == 1 and job["makespan_s"] > 0 and job["site"] is None
    assert {f["term"]: f["origin"] for f in job["figures"]}[EGRESS] == UNKNOWN


def test_plan_with_a_site_file_names_the_binding_term_and_each_figures_source(local_cube, capsys):
    status, out, _ = _plan(capsys, local_cube, "--ranks", "1000", "--nodes", "250", "--site", ACACIA,
                           "--requests", "0")
    assert status == 0, out
    assert "egress is unknown" not in out
    assert "bound by egress" in out and "shared pipes: site file " + ACACIA + " (egress)" in out
    for source in ("seed 001 s7.1: 'restricted by the bandwidth", "seed 001 s7.4 table",
                   "seed 001 does not measure the store's ceiling", "seed 001 s7.2 table"):
        assert source in out
    _, out, _ = _plan(capsys, local_cube, "--ranks", "1000", "--nodes", "250", "--site", ACACIA, "--json")
    job = json.loads(out)["job"]
    figures = {f["term"]: f for f in job["figures"]}
    assert job["binding"] == EGRESS and job["warnings"] == [] and job["site"]["path"] == ACACIA
    assert figures[EGRESS]["origin"] == SITE and figures[EGRESS]["value"] == 600 * 2**20
    assert figures[REQUESTS]["origin"] == UNKNOWN and figures[NODE_PIPE]["origin"] == UNKNOWN
    # every byte of the job through the egress: no faster than the site's figure allows
    assert job["makespan_s"] >= job["job_bytes"] / (600 * 2**20)


def test_the_sites_ranks_per_node_places_the_ranks(local_cube, capsys, tmp_path):
    site = _write(tmp_path, _site_toml("10 MB/s", "1 GB/s", rpn=4))
    _, out, _ = _plan(capsys, local_cube, "--ranks", "10", "--site", site, "--json")
    job = json.loads(out)["job"]
    assert (job["nodes"], job["ranks_per_node"]) == (3, [4, 3, 3])


def test_a_job_whose_requests_exceed_the_ceiling_is_bound_by_it(local_cube, capsys, tmp_path):
    site = _write(tmp_path, _site_toml("10 GB/s", "10 GB/s", requests=50, latency_s=0.001))
    # a column one pixel wide, one request per row (strategy small): 32 x 256 requests of 2 bytes
    _, out, _ = _plan(capsys, local_cube, "--ranks", "8", "--nodes", "2", "--site", site, "--strategy", "small",
                      "--region", "0:32,0:256,100:101", "--json")
    report = json.loads(out)
    job = report["job"]
    n_requests = 32 * 256
    assert report["requests"] == n_requests
    assert job["binding"] == REQUESTS and job["makespan_s"] >= n_requests / 50
    assert {f["term"]: f["origin"] for f in job["figures"]}[REQUESTS] == SITE


def test_a_cached_measurement_beats_the_site_for_the_terms_it_measured(s3_server, s3_env, tmp_path, monkeypatch,
                                                                       capsys):
    cube = upload_fits_cube(s3_server, tmp_path, "site-plan-cubes", SHAPE)
    cache = tmp_path / "links.json"
    monkeypatch.setenv(linkcache.CACHE_ENV, str(cache))
    linkcache.remember(s3_server.endpoint_url, shared=SharedCapacity(
        egress_bytes_per_s=40e6, source="measured: nodes round (4 ranks on 4 node(s))", nodes_seen=4))
    site = _write(tmp_path, _site_toml("10 MB/s", "1 GB/s", rpn=4))
    _, out, _ = _plan(capsys, cube["s3"], "--ranks", "16", "--nodes", "4", "--site", site, "--json")
    figures = {f["term"]: f for f in json.loads(out)["job"]["figures"]}
    assert figures[EGRESS]["origin"] == MEASURED and figures[EGRESS]["value"] == 40e6
    assert figures[EGRESS]["source"].startswith(f"cached measurement of {s3_server.endpoint_url}")
    assert figures[EGRESS]["not_used"] == "the site file's 1 GB/s (the egress test figure)"
    assert figures[NODE_PIPE]["origin"] == SITE and figures[NODE_PIPE]["value"] == 10e6
    _, out, _ = _plan(capsys, cube["s3"], "--ranks", "16", "--nodes", "4", "--site", site, "--requests", "0")
    assert "not used: the site file's 1 GB/s (the egress test figure)" in out


# ------------------------------------------------------------------ the emulated cluster, 1/1000 scale

def cluster_site_toml(spec) -> str:
    """A ClusterSpec's rates as a site file: its caps as a reader gets them (x 1448/1514), and a
    small GET's time as measured on it (the toxic's latency and 0.7 ms of the machine's own)."""
    nic = spec.node.nic_rate_bytes_per_s * PAYLOAD_PER_FRAME_BYTE
    egress = spec.store.egress_rate_bytes_per_s * PAYLOAD_PER_FRAME_BYTE
    return (f'[site]\nname = "emulated cluster"\n'
            f'[node]\nnic_bytes_per_s = {{ value = {nic:.0f}, source = "the cluster spec\'s NIC cap x 1448/1514" }}\n'
            f'ranks_per_node = {{ value = {spec.ranks_per_node}, source = "the cluster spec" }}\n'
            f'[store]\negress_bytes_per_s = {{ value = {egress:.0f}, source = "the spec\'s egress cap x 1448/1514" }}\n'
            f'requests_per_s = {{ value = "unknown", source = "versitygw has no ceiling set" }}\n'
            f'latency_s = {{ value = {spec.store.latency_s + 0.0007:.4f}, source = "a small GET on the cluster" }}\n')


# Fixed on plan and run alike, so that the job run is the job planned: whole channel planes in
# requests of up to 4 MiB, 4 in flight, 2 regions per node along the channels.
JOB_OPTIONS = ["--method", "s3", "--strategy", "large", "--chunk-bytes", "4MiB", "--threads", "4"]
CLUSTER_SHAPE = (64, 512, 512)  # int16: 32 MiB, 3.3 s through one 10 MB/s NIC
BURST = 1.1  # HTB lets a cap's bytes through in bursts (tests/test_cluster.py's SLACK)


def test_the_emulated_clusters_rates_as_a_site_file_predict_its_jobs(tmp_path):
    """2 nodes of 10 MB/s NICs behind a 12 MB/s egress: 2 ranks on one node are bound by its NIC,
    4 ranks on both nodes by the egress. `plan --site` (no probe, no link cache) predicts each: the
    binding pipe and its byte time; the job run with --no-probe cannot beat that time (physics:
    the cube's bytes all pass the capped pipe). Its measured / predicted is printed: how near 1 it
    comes is the machine's CPU, so the issue's 0.8-1.25 is measured by the benchmarks (bench.cluster:
    makespan over the pipes' limit; bench.cluster.predictions: within HOLDS), not asserted under load."""
    from ingest.testbed.cluster import Cluster, load_spec, missing_tools, unavailable_reason
    from ingest.testbed.cluster.netns import namespace_problem

    problem = namespace_problem()
    if problem is not None:
        pytest.skip(f"emulated cluster: {problem}")
    if missing_tools():
        pytest.fail(unavailable_reason(), pytrace=False)
    spec = load_spec(CLUSTER_CONFIG, {"cluster": {"nodes": 2, "ranks_per_node": 2},
                                      "store": {"egress_rate_bytes_per_s": 12_000_000}})
    site = _write(tmp_path, cluster_site_toml(spec))
    cube = tmp_path / "cube.fits"
    write_cube(cube, CLUSTER_SHAPE, 16)
    results = []
    with Cluster(spec) as cluster:
        url = cluster.put_file(str(cube), "survey/cube.fits")
        for n_ranks, n_nodes, binding in ((2, 1, NODE_PIPE), (4, 2, EGRESS)):
            plan = cluster.launch(["plan", url, "--site", site, "--ranks", n_ranks, "--nodes", n_nodes, "--json",
                                   *JOB_OPTIONS], n_ranks=1, timeout_s=120)
            assert plan.returncode == 0, plan.stderr[-3000:]
            job = json.loads(plan.stdout)["job"]
            report_path = tmp_path / f"report-{n_ranks}.json"
            run = cluster.launch(["run", "--source", url, "--no-probe", "--report", report_path, "--no-progress",
                                  *JOB_OPTIONS], n_ranks=n_ranks, timeout_s=180)
            assert run.returncode == 0, run.stderr[-3000:]
            report = json.loads(report_path.read_text())
            measured_s = report["aggregate"]["makespan_s"]
            results.append((n_ranks, n_nodes, job["binding"], binding, job["makespan_s"], measured_s))
    cube_bytes = math.prod(CLUSTER_SHAPE) * 2
    # what the site's figures say: the cube through one node's NIC, then through the egress
    rates = {NODE_PIPE: spec.node.nic_rate_bytes_per_s, EGRESS: spec.store.egress_rate_bytes_per_s}
    for n_ranks, n_nodes, named, binding, predicted_s, measured_s in results:
        ratio = measured_s / predicted_s
        print(f"{n_ranks} ranks on {n_nodes} node(s): bound by {named}, predicted {predicted_s:.2f} s, "
              f"measured {measured_s:.2f} s: {ratio:.2f}")
        assert named == binding
        assert predicted_s == pytest.approx(cube_bytes / (rates[binding] * PAYLOAD_PER_FRAME_BYTE), rel=0.02)
        assert measured_s >= predicted_s / BURST, (n_ranks, predicted_s, measured_s)  # nobody beats the cap
