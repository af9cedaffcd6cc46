"""The benchmarks run end to end on tiny cubes and write well-formed JSON.

Structure only: these tests never judge speed or memory (the machine is shared and noisy;
the real figures are ratios from `python -m bench` on a 1 GiB cube). Each command starts its
own loopback versitygw (and Toxiproxy for the shaped profiles), so a missing binary fails here
with the setup hint in stderr. The subcube benchmark needs the `bench` extra (fsspec, aiohttp).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.proctools import processes

REPO = Path(__file__).resolve().parent.parent
TINY = ["--size-mib", "4", "--repeats", "1", "--warmup", "0", "--quiet"]
MACHINE_KEYS = {"nproc", "memory_bytes", "python", "packages", "git", "loadavg"}


def _run(args: list[str], results_dir: Path, timeout_s: float = 90) -> str:
    done = subprocess.run([sys.executable] + args + TINY + ["--results-dir", str(results_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _load(results_dir: Path, name: str) -> dict:
    path = results_dir / f"{name}.json"
    text = path.read_text()
    # A presigned URL is a credential: results must carry only the redacted form.
    assert "X-Amz-Signature" not in text and "X-Amz-Credential" not in text
    results = json.loads(text)
    assert results["schema_version"] == 1
    assert results["bench"] == name
    assert "bench" in results["command"] and "--size-mib 4" in results["command"]
    assert MACHINE_KEYS <= set(results["machine"])
    assert results["machine"]["nproc"] >= 1
    assert not list(results_dir.glob("*.tmp")), "a temporary results file was left behind"
    return results


def _positive_finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _check_ratios(results: dict, expected: set[str], with_target: set[str]) -> None:
    assert set(results["ratios"]) == expected
    assert set(results["targets"]) == with_target
    for key, tgt in results["targets"].items():
        assert tgt["op"] in (">=", "<=") and _positive_finite(tgt["value"]), key
    for key, ratio in results["ratios"].items():
        assert ratio["n"] == 1 and len(ratio["samples"]) == 1, key
        for stat in ("median", "min", "max"):
            assert _positive_finite(ratio[stat]), (key, stat, ratio)


def _check_whole_object(results: dict, profiles=("loopback", "acacia")) -> None:
    assert list(results["profiles"]) == list(profiles)
    expected, targeted = set(), set()
    for profile, pres in results["profiles"].items():
        cube = pres["cube"]
        curls = {"curl", "curl_range"} if profile == "loopback" else {"curl"}
        ingests = {"ingest_presigned_tuned", "ingest_s3_tuned", "ingest_presigned", "ingest_s3"}
        extra = {"numpy_touch"} if profile == "loopback" else set()
        assert set(pres["candidates"]) == ingests | curls | extra
        assert pres["link"]["profile"] == profile
        for name, cand in pres["candidates"].items():
            assert len(cand["samples"]) == 1
            sample = cand["samples"][0]
            assert sample["bytes"] == (cube["object_bytes"] if name == "curl" else cube["data_bytes"])
            for metric in ("elapsed_s", "throughput_gib_s", "cpu_s_per_gib"):
                # numpy_touch fills 4 MiB here: its CPU time can round to 0 at the clock's tick.
                ok = sample[metric] >= 0 if name == "numpy_touch" else _positive_finite(sample[metric])
                assert ok and math.isfinite(sample[metric]), (name, metric)
                assert cand["summary"][metric]["median"] == sample[metric]
            if name.endswith("_tuned"):  # the tuner may skip the probe for a box this small
                assert 0 <= sample["probe_s"] <= sample["tune_s"] < sample["elapsed_s"]
                assert sample["threads"] >= 1 and sample["chunk_bytes"] >= 1 and sample["choice"]
        for b in curls:
            expected |= {f"{profile}:{a}/{b}" for a in ingests}
            expected |= {f"{profile}:{a}(no probe)/{b}" for a in ("ingest_presigned_tuned", "ingest_s3_tuned")}
        targeted |= {f"{profile}:ingest_presigned_tuned/curl", f"{profile}:ingest_s3_tuned/curl"}
    _check_ratios(results, expected, targeted)
    assert set(results["cpu_ratios"]) == {k for k in expected if "(no probe)" not in k}


def _check_memory(results: dict) -> None:
    configs = {"whole_presigned", "whole_s3", "gappy_presigned", "gappy_s3"}
    mpi = {"mpi2_whole", "mpi2_gappy", "mpi2_tuned"}
    assert set(results["candidates"]) == configs | {"baseline"}
    assert _positive_finite(results["candidates"]["baseline"]["samples"][0]["peak_rss_bytes"])
    for name in configs:
        cand = results["candidates"][name]
        sample = cand["samples"][0]
        assert _positive_finite(sample["peak_rss_bytes"])
        assert sample["bound_bytes"] == (sample["output_bytes"] + cand["info"]["threads"] * cand["info"]["chunk_bytes"]
                                         + results["config"]["slack_bytes"])
        assert cand["plan"]["requests"] >= 1
    # The gappy reads are there to exercise the scatter buffers; the whole reads go straight in.
    assert results["candidates"]["gappy_presigned"]["plan"]["scatter_buffers"] is True
    assert results["candidates"]["whole_s3"]["plan"]["scatter_buffers"] is False
    assert set(results["mpi"]) == mpi
    for name in mpi:
        per_rank = results["mpi"][name]["samples"][0]["per_rank"]
        assert [r["rank"] for r in per_rank] == [0, 1]
        for r in per_rank:
            assert _positive_finite(r["peak_rss_bytes"])
            assert r["bound_bytes"] > r["output_bytes"]
    _check_ratios(results, configs | mpi, configs | mpi)


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory):
    """One run of the memory script (the slowest: a fresh process per read), shared by two tests."""
    results_dir = tmp_path_factory.mktemp("memory")
    return _run(["-m", "bench.reads.memory", "--mpi-ranks", "2"], results_dir, timeout_s=120), results_dir


@pytest.mark.timeout(120)
def test_whole_object_script(tmp_path):
    out = _run(["bench/reads/whole_object.py"], tmp_path)  # the file form, not -m
    assert "| ingest_presigned_tuned/curl |" in out and "`acacia`" in out
    _check_whole_object(_load(tmp_path, "whole_object"))


@pytest.mark.timeout(120)
def test_memory_script(memory_run):
    out, results_dir = memory_run
    assert "| gappy_presigned |" in out and "| mpi2_tuned |" in out
    _check_memory(_load(results_dir, "memory"))


@pytest.mark.timeout(120)
def test_subcube_script(tmp_path):
    out = _run(["-m", "bench.reads.subcube", "--profiles", "loopback", "--blocks-kib", "64"], tmp_path)
    assert "| astropy_default/ingest_tuned |" in out
    results = _load(tmp_path, "subcube")
    pres = results["profiles"]["loopback"]
    assert {"ingest_tuned", "ingest_default", "astropy_default"} <= set(pres["candidates"])
    assert set(pres["sweep"]) == {"astropy_block_64KiB"}
    assert {"astropy_default", "astropy_best"} <= set(pres["candidates"])
    keys = {f"loopback:{k}" for k in ("astropy_default/ingest_tuned", "astropy_best/ingest_tuned",
                                      "astropy_default/ingest_default", "ingest_default/ingest_tuned",
                                      "astropy_default/ingest_tuned(no probe)")}
    _check_ratios(results, keys, {"loopback:astropy_default/ingest_tuned"})


@pytest.mark.timeout(120)
def test_strategies_script(tmp_path):
    out = _run(["-m", "bench.reads.strategies", "--profiles", "loopback,acacia", "--no-sweep"], tmp_path)
    assert "| loopback:thin |" in out and "| acacia:spectrum |" in out
    results = _load(tmp_path, "strategies")
    cells = {f"{p}:{g}" for p in ("loopback", "acacia") for g in ("thin", "slab", "spectrum")}
    assert set(results["cells"]) == cells
    for key, cell in results["cells"].items():
        names = set(cell["candidates"])
        assert "auto" in names and {"large", "intermediate"} <= names, key
        assert ("small" in names) != ("small" in cell["skipped"]), key  # run, or skipped with a reason
        assert cell["best"] in names - {"auto"}
        auto = cell["candidates"]["auto"]["samples"][0]
        assert 0 <= auto["probe_s"] < auto["elapsed_s"] and auto["elapsed_noprobe_s"] > 0 and auto["choice"]
    _check_ratios(results, cells | {f"{c}(no probe)" for c in cells}, cells)
    assert all(t == {"op": "<=", "value": 1.05} for t in results["targets"].values())


@pytest.mark.timeout(120)
def test_scaling_script(tmp_path):
    out = _run(["-m", "bench.reads.scaling", "--threads-list", "1,4", "--ranks-list", "1,2"], tmp_path)
    assert "| threads_4 |" in out
    results = _load(tmp_path, "scaling")
    assert set(results["threads"]) == {"threads_1", "threads_4", "tuned"}
    assert set(results["ranks"]) == {"ranks_1", "ranks_2"}
    for res in results["ranks"].values():
        assert _positive_finite(res["samples"][0]["makespan_s"])
    _check_ratios(results, {"threads_1/threads_4", "threads_1/tuned", "ranks_1/ranks_2"}, set())


@pytest.mark.timeout(120)
def test_run_all_and_summarize(tmp_path, memory_run):
    # One benchmark through the runner keeps this short; the registry and the shared
    # server/cube are what is being tested, and the other tests cover the rest.
    out = _run(["-m", "bench", "--only", "whole_object"], tmp_path)
    assert "## ingest benchmarks" in out and "| ingest_s3_tuned/curl |" in out
    _check_whole_object(_load(tmp_path, "whole_object"))
    files = [str(tmp_path / "whole_object.json"), str(memory_run[1] / "memory.json")]
    again = subprocess.run([sys.executable, "-m", "bench", "--summarize", *files], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert "| ingest_presigned_tuned/curl |" in again.stdout and "| gappy_s3 |" in again.stdout


def test_predictions_script(tmp_path):
    """Predicted against measured: each run is a real mpiexec job whose report carried the
    planner's prediction, made before its read."""
    from ingest.core.sharing import (CONNECTION, CORES, CPU, EGRESS, LATENCY, NODE_CPU, NODE_PIPE, RANK_LINK,
                                     REQUESTS)
    from ingest.core.history import SIMILAR

    out = _run(["-m", "bench.cluster.predictions", "--quick", "--profiles", "loopback", "--ranks", "2",
                "--workloads", "whole,thin"], tmp_path, timeout_s=240)
    assert "| loopback | whole | 2 |" in out and "measured / predicted within 0.8-1.25 in" in out
    results = _load(tmp_path, "predictions")
    assert set(results["cells"]) == {"loopback/whole/2", "loopback/thin/2"}
    earlier = []  # the samples run before this one, in run order (whole, then thin)
    for cell in results["cells"].values():
        (sample,) = cell["samples"]
        assert sample["predicted_s"] > 0 and sample["makespan_s"] > 0
        assert sample["measured_over_predicted"] == pytest.approx(sample["makespan_s"] / sample["predicted_s"])
        assert sample["binding"] in {LATENCY, CPU, CONNECTION, RANK_LINK, NODE_PIPE, NODE_CPU, EGRESS, REQUESTS, CORES}
        assert len(sample["ranks_cpu_s"]) == 2 and all(cpu > 0 for cpu in sample["ranks_cpu_s"])
        # The bench's link cache starts empty, so only an earlier cell's job can vote, and only where
        # its shape matched: a thin plan that merged its gaps reads what the whole cube's does (CI
        # once saw thin's 2 ranks price from whole's job that way). Else the model alone predicts.
        if sample["history"] is None:
            assert sample["model_s"] == sample["predicted_s"]
            assert sample["measured_over_model"] == sample["measured_over_predicted"]
        else:
            assert "1 earlier job(s) of this shape" in sample["history"]
            assert any(all(1 / SIMILAR <= sample[k] / e[k] <= SIMILAR for k in ("bytes_wire", "requests"))
                       for e in earlier), (sample, earlier)
        earlier.append(sample)
    assert results["cells"]["loopback/whole/2"]["samples"][0]["history"] is None
    assert results["held"]["runs"] == 2 and "the model alone (the probe's rounds; no earlier job's time) in" in out
    # One run per cell: one fixed prediction holds it, and no cell spreads.
    assert (results["held"]["fixed_best"], results["held"]["cells_wider_than_band"]) == (2, 0)
    assert "| a fixed prediction holds |" in out and "One fixed prediction per cell could hold at most 2 of 2" in out
    assert results["held"]["others_median"] == 0 and "The median of each cell's other runs" in out  # none to take


def test_pages_script(tmp_path):
    """No server: fresh processes fill a numpy buffer and an ingest one, alternately."""
    out = _run(["-m", "bench.reads.pages", "--pause-s", "0"], tmp_path, timeout_s=60)
    assert "| ingest |" in out and "| numpy |" in out and "| spread_ingest |" in out
    results = _load(tmp_path, "pages")
    _check_ratios(results, {"fill_wall_ingest_over_numpy", "spread_ingest", "spread_numpy"}, {"spread_ingest"})
    for name in ("numpy", "ingest"):
        (sample,) = results["candidates"][name]["samples"]
        assert sample["bytes"] == 4 << 20 and sample["fill_wall_s"] > 0
    if sys.platform.startswith("linux"):
        # 4 KiB pages: one fault per page touched, so ingest's buffer took no huge page
        assert results["candidates"]["ingest"]["samples"][0]["minor_faults"] >= (4 << 20) // 4096


def test_cutout_writes_script(tmp_path):
    """No server: each pair of ways to write a cut-out's header, BEAMS table, CRC and manifest, interleaved."""
    out = _run(["-m", "bench.cutouts.writes", "--files", "20", "--sources", "50", "--channels", "40"], tmp_path,
               timeout_s=90)
    assert "| headers_patched |" in out and "| crc_summed |" in out and "| manifest_text |" in out
    assert "| beams_patched |" in out and "cut from 40 rows" in out
    results = _load(tmp_path, "cutout_writes")
    _check_ratios(results, {"headers_card/headers_patched", "beams_astropy/beams_patched", "crc_read_back/crc_summed",
                            "manifest_dump/manifest_text"}, set())
    assert results["config"]["files"] == 20 and results["config"]["sources"] == 50
    assert results["config"]["channels"] == 40
    for name, cand in results["candidates"].items():
        (sample,) = cand["samples"]
        assert sample["elapsed_s"] > 0, name


def test_rounds_script(tmp_path):
    """One launch of 2 ranks: rounds of 1 MiB a stream and of the whole share, each measured."""
    out = _run(["-m", "bench.reads.rounds", "--ranks", "2", "--streams", "2", "--stream-mib", "1"], tmp_path, timeout_s=120)
    assert "| MiB a stream |" in out and "| 2 | 2 | whole share |" in out
    results = _load(tmp_path, "rounds")
    share = results["cube"]["data_bytes"] // 2
    assert sorted((r["stream_mib"], r["total_bytes"]) for r in results["rounds"]) == [
        (0, 2 * share), (1, 2 * min(share, 2 << 20))]
    assert all(r["ranks"] == 2 and r["streams"] == 2 and r["bytes_per_s"] > 0 and r["overlap_s"] <= r["steady_s"]
               for r in results["rounds"])
    assert "| all flowing at once, ms |" in out
    by_size = {row["stream_mib"]: row for row in results["summary"]}
    sized = results["rounds"][[r["stream_mib"] for r in results["rounds"]].index(1)]
    assert by_size[0]["over_whole_share"] == 1.0 and by_size[1]["median_bytes_per_s"] == sized["bytes_per_s"]
    # the window as measured, and less its requests: taking time out never makes a round slower
    assert by_size[1]["median_window_bytes_per_s"] == sized["window_bytes_per_s"] <= sized["bytes_per_s"]


def test_quick_is_the_default_of_every_bench():
    """--quick reaches every benchmark through the runner, and fills only what was not given."""
    from bench import common, run_all

    for module in run_all.BENCHES.values():
        args = module.build_parser().parse_args(["--quick", "--repeats", "2"])
        common.settle(args, **getattr(module, "SIZES", {}))
        assert (args.size_mib, args.repeats, args.warmup) == (common.QUICK["size_mib"], 2, 0)
    assert "quick" in run_all.COMMON_OPTIONS


def test_hdf5_script(tmp_path):
    out = _run(["-m", "bench.reads.hdf5", "--profiles", "loopback", "--blocks-kib", "256",
                "--layouts", "chunked_16x64x64,contiguous"], tmp_path, timeout_s=150)
    assert "| h5py_default/ingest |" in out
    results = _load(tmp_path, "hdf5")
    chunked, contiguous = results["cells"]["loopback:chunked_16x64x64"], results["cells"]["loopback:contiguous"]
    assert {"ingest", "h5py_default", "h5py_best"} <= set(chunked["candidates"])
    assert "ingest_fits" in contiguous["candidates"]  # the FITS path on the same values
    wire = chunked["ratios"]["loopback:chunked_16x64x64:ingest_wire/needed_chunks"]
    assert wire["median"] >= 1.0  # a read never fetches less than the chunks the box needs
    assert all(math.isfinite(r["median"]) and r["median"] > 0 for r in results["ratios"].values())


@pytest.mark.timeout(120)
def test_engine_script(tmp_path):
    out = _run(["-m", "bench.engine.engine", "--requests", "60", "--boto3-requests", "20", "--depths", "1,8",
                "--large-mib", "32"], tmp_path)
    assert "| native_cpu_per_request_us@8 |" in out and "| cpu_per_gib_native/curl |" in out
    results = _load(tmp_path, "engine")
    for depth in ("1", "8"):
        cells = results["small"][depth]
        assert set(cells) == {f"{e}@{depth}" for e in ("native", "urllib3", "boto3", "curl", "awscrt")}
        for name, cell in cells.items():
            sample = cell["samples"][0]
            assert sample["requests"] == (20 if name.startswith("boto3") else 60)
            assert sample["bytes"] == sample["requests"] * results["small_bytes"]
            assert _positive_finite(sample["elapsed_s"]) and sample["cpu_s"] >= 0
    large_bytes = min(32 << 20, results["object_bytes"])  # TINY's cube is smaller than 32 MiB
    assert all(cell["samples"][0]["bytes"] == large_bytes for cell in results["large"].values())
    assert set(results["targets"]) <= set(results["ratios"])
    assert all(math.isfinite(r["median"]) and r["median"] > 0 for r in results["ratios"].values())


@pytest.mark.timeout(120)
def test_staging_script(tmp_path):
    out = _run(["-m", "bench.reads.staging"], tmp_path)
    assert "| s5cmd/ingest_native |" in out
    results = _load(tmp_path, "staging")
    assert set(results["candidates"]) == {"ingest_native", "ingest_urllib3", "s5cmd"}
    for cell in results["candidates"].values():  # every copier wrote the whole object
        assert all(s["bytes"] == results["object_bytes"] for s in cell["samples"])
    assert set(results["targets"]) == {f"s5cmd/ingest_{results['stage_engine']}"}
    assert all(math.isfinite(r["median"]) and r["median"] > 0 for r in results["ratios"].values())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-3, max_value=10.0), min_size=1, max_size=8))
def test_fixed_best_is_the_most_runs_one_prediction_holds(makespans):
    """bench.cluster.predictions' reference: the most runs of a cell one fixed prediction holds within
    0.8-1.25 (run m holds for p in [m / 1.25, m / 0.8]), against every prediction that could
    matter (each run's band edges, both of them), and all of them exactly when the cell's runs
    spread no wider than the band."""
    from bench.cluster.predictions import HOLDS, fixed_best, spread

    lo, hi = HOLDS
    candidates = [m / hi for m in makespans] + [m / lo for m in makespans]
    brute = max(sum(m / hi <= p <= m / lo for m in makespans) for p in candidates)
    assert fixed_best(makespans) == brute
    assume(abs(spread(makespans) - hi / lo) > 1e-9)  # not on the edge, where rounding decides
    assert (fixed_best(makespans) == len(makespans)) == (spread(makespans) < hi / lo)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-3, max_value=10.0), min_size=1, max_size=8))
def test_the_median_of_a_cells_other_runs_is_scored_against_each_run(makespans):
    """bench.cluster.predictions' second reference: each run predicted by the median of the rest of its
    cell (by hand, against the median's definition), all of them when the runs are one figure, and
    none in a cell of one run."""
    from bench.cluster.predictions import HOLDS, fixed_best, others_median_held

    lo, hi = HOLDS
    by_hand = 0
    for i, m in enumerate(makespans):
        rest = sorted(makespans[:i] + makespans[i + 1:])
        if rest:
            mid = len(rest) // 2
            by_hand += lo <= m / (rest[mid] if len(rest) % 2 else (rest[mid - 1] + rest[mid]) / 2) <= hi
    assert others_median_held(makespans) == by_hand
    assert others_median_held([makespans[0]] * 3) == 3 and others_median_held(makespans[:1]) == 0


def test_a_killed_benchmark_stops_its_server(tmp_path):
    """SIGTERM (kill, a batch job's time limit) unwinds a benchmark: its versitygw, started in a
    session of its own, stops with it instead of running on orphaned."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "bench.cluster.predictions", *TINY, "--results-dir", str(tmp_path)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (servers := processes("versitygw", parent=proc.pid)) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        assert servers, "the benchmark started no versitygw within 60 s"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert not set(servers) & set(processes("versitygw")), "the killed benchmark left its versitygw running"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# The store each bench reads from and writes to (--store): a Ceph RGW as well as versitygw. One
# run per bench, loopback only; the results go to NAME-ceph.json and name the store.
CEPH_RUNS = {
    "subcube": ["-m", "bench.reads.subcube", "--store", "ceph", "--profiles", "loopback", "--blocks-kib", "64"],
    "whole_object": ["-m", "bench.reads.whole_object", "--store", "ceph", "--profiles", "loopback"],
    "publish": ["-m", "bench.publish.local", "--store", "ceph", "--profiles", "loopback"],
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bench", list(CEPH_RUNS))
def test_benches_run_on_ceph_rgw(tmp_path, bench):
    out = _run(CEPH_RUNS[bench], tmp_path, timeout_s=110)
    assert out.startswith("Store: Ceph RGW"), f"{bench}: the tables name the store first:\n{out[:300]}"
    results = _load(tmp_path, f"{bench}-ceph")
    assert results["store"]["store"] == "ceph", results["store"]
    assert not (tmp_path / f"{bench}.json").exists(), f"{bench}: a ceph run must not overwrite versitygw's results"
    assert results["ratios"] and all(_positive_finite(r["median"]) for r in results["ratios"].values()), \
        f"{bench}: every ratio measured: {results['ratios']}"
    if bench == "whole_object":
        _check_whole_object(results, profiles=("loopback",))
        # The server's CPU is read from /proc for radosgw and its OSD (a 4 MiB read may take less
        # than a clock tick of it, so the readers' sum is what must show it).
        server_cpu = [c["samples"][0]["server_cpu_s_per_gib"] for c in results["profiles"]["loopback"]["candidates"].values()]
        assert all(math.isfinite(v) and v >= 0 for v in server_cpu) and sum(server_cpu) > 0, server_cpu
    if bench == "publish":
        assert results["verified"] is True and "cluster" not in results, "versitygw's cluster figures are not RGW's"


def test_summarize_renders_the_benches_that_run_alone_and_names_a_file_it_cannot(tmp_path):
    # The emulated cluster's benches run on their own (root, namespaces); their results, kept in
    # bench/results/, are rendered by --summarize like any other (a KeyError 'cluster' before).
    kept = [os.path.join(REPO, "bench", "results", name) for name in ("cluster.json", "collectives.json")]
    done = subprocess.run([sys.executable, "-m", "bench", "--summarize", *kept], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| s2p | staging |" in done.stdout and "| bcast mpi/quiet |" in done.stdout
    stranger = tmp_path / "other.json"
    stranger.write_text(json.dumps({"bench": "nonesuch"}))
    refused = subprocess.run([sys.executable, "-m", "bench", "--summarize", kept[0], str(stranger)], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and refused.stdout == ""
    assert f"--summarize: {stranger}: bench 'nonesuch' is none of" in refused.stderr
