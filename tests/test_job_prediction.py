"""The whole job's prediction against the local S3 server: the probe rounds in which several
ranks read at once, the prediction and its binding term in the report, `plan --ranks N --nodes
M`, and a read too small to probe that is planned with what an earlier run measured."""
from __future__ import annotations

import json

import pytest

from ingest.core.sharing import (CONNECTION, CORES, CPU, EGRESS, LATENCY, NODE_CPU, NODE_PIPE, RANK_LINK, REQUESTS,
                                 STARTUP)
from ingest.driver.probe_rounds import SHARED_BUDGET_FRACTION, SMALL_WAVES
from tests.mpitools import child_env, cli, mpiexec, upload_fits_cube

TERMS = {LATENCY, CPU, CONNECTION, RANK_LINK, NODE_PIPE, NODE_CPU, EGRESS, REQUESTS, CORES, STARTUP}
SHAPE = (128, 512, 512)  # 64 MiB of int16: enough to repay a probe and a round of four ranks


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    return upload_fits_cube(s3_server, tmp_path_factory.mktemp("predict"), "predict-cubes", SHAPE)


def test_four_ranks_measure_what_they_share_and_the_report_says_what_binds(cube, s3_server, tmp_path):
    report_path = tmp_path / "report.json"
    env = child_env(s3_server, INGEST_LINK_CACHE=str(tmp_path / "links.json"))
    proc, _ = mpiexec(4, ["run", "--source", cube["s3"], "--report", report_path, "--no-progress"], env)
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(report_path.read_text())["settings"]
    prediction = settings["prediction"]
    assert (prediction["ranks"], prediction["nodes"], prediction["ranks_per_node"]) == (4, 1, [4])
    assert prediction["binding"] in TERMS and prediction["makespan_s"] == settings["predicted_makespan_s"] > 0
    assert set(prediction["terms_s"]) <= TERMS
    # one round: the four ranks on rank 0's node reading at once (one node: no "nodes" round)
    (node_round,) = settings["shared_rounds"]
    assert node_round["name"] == "node" and node_round["ranks"] == 4 and node_round["total_bytes"] > 0
    # waves of small requests on each stream; each stream's first warms it up and is not counted
    assert node_round["small_requests"] == 4 * node_round["streams"] * (SMALL_WAVES - 1)
    assert node_round["small_wall_s"] > 0 and 0 < node_round["steady_bytes"] < node_round["total_bytes"]
    # how long every stream flowed at once: at most the steady window (negative: one after another)
    assert node_round["overlap_s"] <= node_round["steady_s"]
    assert prediction["shared_source"].startswith("measured: node round (4 ranks")
    assert "bound by" in proc.stdout and "measured / predicted" in proc.stdout
    # what they measured is kept for the next run on this endpoint
    kept = json.loads((tmp_path / "links.json").read_text())
    (entry,) = kept.values()
    assert "probe" in entry and "shared" in entry


def test_the_next_job_is_priced_with_what_the_ranks_shared_when_measuring_again_outweighs_it(cube, s3_server,
                                                                                             tmp_path):
    """The rounds' cost is kept with what they measured; a later job on the endpoint whose budget
    for them (SHARED_BUDGET_FRACTION of its predicted time) is less runs none and says so."""
    env = child_env(s3_server, INGEST_LINK_CACHE=str(tmp_path / "links.json"))
    settings = []
    for k in range(2):
        report_path = tmp_path / f"report{k}.json"
        proc, _ = mpiexec(4, ["run", "--source", cube["s3"], "--report", report_path, "--no-progress"], env)
        assert proc.returncode == 0, proc.stderr
        settings.append(json.loads(report_path.read_text())["settings"])
    first, second = settings
    (node_round,) = first["shared_rounds"]
    rounds_s = first["tuning"]["shared"]["rounds_s"]
    (entry,) = json.loads((tmp_path / "links.json").read_text()).values()
    assert entry["shared"]["rounds_s"] == rounds_s >= node_round["wall_s"] > 0
    # 4 ranks' barriers, clients and reads take longer than 6 % of a 64 MiB read on loopback
    assert rounds_s > SHARED_BUDGET_FRACTION * second["tuning"]["predicted_s"], (rounds_s, second["tuning"])
    assert second["shared_rounds"] == []
    assert second["prediction"]["shared_source"].startswith("cached measurement of")
    assert second["tuning"]["shared"]["node_bytes_per_s"] == first["tuning"]["shared"]["node_bytes_per_s"]


def test_plan_predicts_a_job_of_n_ranks_on_m_nodes(cube, s3_server):
    proc = cli(["plan", cube["s3"], "--ranks", "16", "--nodes", "4", "--json", "--latency-s", "0.001",
                "--bandwidth-bytes-per-s", "40MB"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job"]
    assert (job["ranks"], job["nodes"], job["ranks_per_node"]) == (16, 4, [4, 4, 4, 4])
    assert job["regions"] == 16 and job["binding"] in TERMS and job["makespan_s"] > 0
    text = cli(["plan", cube["s3"], "--ranks", "16", "--nodes", "4", "--requests", "0"], child_env(s3_server))
    assert "predicted makespan" in text.stdout and "16 rank(s) on 4 node(s), 4 per node, bound by" in text.stdout
    bad = cli(["plan", cube["s3"], "--nodes", "4"], child_env(s3_server))
    assert bad.returncode != 0 and "nodes: give --ranks too" in bad.stderr
    # with each node's cores, the ranks' CPU seconds on them are a term: 16 ranks on 4 one-core
    # nodes spend 4 ranks' CPU on each core
    with_cores = cli(["plan", cube["s3"], "--ranks", "16", "--nodes", "4", "--cores-per-node", "1", "--json",
                      "--latency-s", "0.001", "--bandwidth-bytes-per-s", "40MB", "--cpu-per-request-s", "0.0005"],
                     child_env(s3_server))
    assert with_cores.returncode == 0, with_cores.stderr
    terms = json.loads(with_cores.stdout)["job"]["terms_s"]
    assert terms[CORES] > terms[CPU] > 0 and job["terms_s"].get(CORES, 0.0) == 0.0
    bad = cli(["plan", cube["s3"], "--cores-per-node", "0", "--ranks", "2"], child_env(s3_server))
    assert bad.returncode != 0 and "cores-per-node: expected a whole number >= 1" in bad.stderr


def test_a_read_too_small_to_probe_is_planned_with_what_an_earlier_run_measured(cube, s3_server, tmp_path):
    env = child_env(s3_server, INGEST_LINK_CACHE=str(tmp_path / "links.json"))
    # plan does not probe by default, as a read too small to repay a probe does not
    thin = ["plan", cube["s3"], "--region", "0:128,100:101,100:104", "--json"]
    first = json.loads(cli(thin, env).stdout)["tuning"]["reason"]
    assert "configured cost model" in first  # nothing known yet
    whole = cli(["run", "--source", cube["s3"], "--no-progress"], env)
    assert whole.returncode == 0, whole.stderr
    later = json.loads(cli(thin, env).stdout)["tuning"]["reason"]
    assert later.startswith(f"cached measurement of {s3_server.endpoint_url}") and " s ago" in later


def test_a_second_job_of_the_same_shape_is_predicted_from_what_the_first_took(cube, s3_server, tmp_path):
    env = child_env(s3_server, INGEST_LINK_CACHE=str(tmp_path / "links.json"))
    # threads and request size given: the tuner cannot plan the two jobs differently
    args = ["run", "--source", cube["s3"], "--no-progress", "--threads", "4", "--chunk-bytes", "8MiB"]
    reports = []
    for k in range(2):
        proc, _ = mpiexec(2, args + ["--report", tmp_path / f"report{k}.json"], env)
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads((tmp_path / f"report{k}.json").read_text())["settings"])
    assert "1 earlier job(s) of this shape" in proc.stdout  # the second job's summary says so
    first, second = reports
    assert first["prediction"]["history"] is None
    assert first["prediction"]["makespan_s"] == first["prediction"]["model_makespan_s"]
    # each job's makespan is kept under the endpoint with its shape
    (entry,) = json.loads((tmp_path / "links.json").read_text()).values()
    assert [j["makespan_s"] for j in entry["jobs"]] == [first["measured_makespan_s"], second["measured_makespan_s"]]
    assert entry["jobs"][0]["ranks_per_node"] == [2] and entry["jobs"][0]["threads"] == 4
    history = second["prediction"]["history"]
    assert history.startswith(f"1 earlier job(s) of this shape on {s3_server.endpoint_url} (")
    model_s = second["prediction"]["model_makespan_s"]
    if "stands" in history:  # the model differed by over 3x: the link changed, its figure stands
        assert second["prediction"]["makespan_s"] == model_s
    elif "one more vote" in history:  # this job's probe ran: its model and the one job, halfway
        assert second["prediction"]["makespan_s"] == pytest.approx((first["measured_makespan_s"] + model_s) / 2)
    else:  # no probe: the job of this very shape stands
        assert second["prediction"]["makespan_s"] == pytest.approx(first["measured_makespan_s"])
    assert second["predicted_makespan_s"] == second["prediction"]["makespan_s"]
