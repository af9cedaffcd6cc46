"""The benchmarks run end to end on a tiny cube and write well-formed JSON.

Structure only: these tests never judge speed or memory (the machine is shared and noisy;
the real figures are ratios from `python -m bench` on a 1 GiB cube). Each command starts its
own loopback versitygw, so a missing binary fails here with the setup hint in stderr.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY = ["--size-mib", "4", "--repeats", "1", "--warmup", "0", "--quiet"]
MACHINE_KEYS = {"nproc", "memory_bytes", "python", "packages", "git", "loadavg"}


def _run(args: list[str], results_dir: Path) -> str:
    done = subprocess.run([sys.executable] + args + TINY + ["--results-dir", str(results_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=90,
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
    for key, ratio in results["ratios"].items():
        assert ratio["n"] == 1 and len(ratio["samples"]) == 1, key
        for stat in ("median", "min", "max"):
            assert _positive_finite(ratio[stat]), (key, stat, ratio)


def _check_whole_object(results: dict) -> None:
    assert set(results["candidates"]) == {"ingest_presigned", "ingest_s3", "curl", "curl_range"}
    cube = results["config"]["cube"]
    assert results["config"]["server_keep_alive"] is True
    for name, cand in results["candidates"].items():
        assert len(cand["samples"]) == 1
        sample = cand["samples"][0]
        expected_bytes = cube["object_bytes"] if name == "curl" else cube["data_bytes"]  # curl_range: data
        assert sample["bytes"] == expected_bytes
        for metric in ("elapsed_s", "throughput_gib_s", "cpu_s_per_gib"):
            assert _positive_finite(sample[metric]), (name, metric)
            assert cand["summary"][metric]["median"] == sample[metric]
    targeted = {"ingest_presigned/curl", "ingest_s3/curl"}
    everything = targeted | {"ingest_presigned/curl_range", "ingest_s3/curl_range"}
    _check_ratios(results, everything, targeted)
    assert set(results["cpu_ratios"]) == everything


def _check_memory(results: dict) -> None:
    configs = {"whole_presigned", "whole_s3", "gappy_presigned", "gappy_s3"}
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
    _check_ratios(results, configs, configs)


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory):
    """One run of the memory script (the slowest: a fresh process per read), shared by two tests."""
    results_dir = tmp_path_factory.mktemp("memory")
    return _run(["-m", "bench.memory"], results_dir), results_dir


@pytest.mark.timeout(120)
def test_whole_object_script(tmp_path):
    out = _run(["bench/whole_object.py"], tmp_path)  # the file form, not -m
    assert "| ingest_presigned/curl |" in out
    _check_whole_object(_load(tmp_path, "whole_object"))


@pytest.mark.timeout(120)
def test_memory_script(memory_run):
    out, results_dir = memory_run
    assert "| gappy_presigned |" in out
    _check_memory(_load(results_dir, "memory"))


@pytest.mark.timeout(120)
def test_run_all_and_summarize(tmp_path, memory_run):
    # One benchmark through the runner keeps this under a few seconds; the registry and the
    # shared server/cube are what is being tested, and the memory run above covers the rest.
    out = _run(["-m", "bench", "--only", "whole_object"], tmp_path)
    assert "## ingest benchmarks" in out and "| ingest_s3/curl |" in out
    _check_whole_object(_load(tmp_path, "whole_object"))
    files = [str(tmp_path / "whole_object.json"), str(memory_run[1] / "memory.json")]
    again = subprocess.run([sys.executable, "-m", "bench", "--summarize", *files], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert "| ingest_presigned/curl |" in again.stdout and "| gappy_s3 |" in again.stdout
