"""bench/reads/prestage.py runs end to end on a tiny cube: both commands measured, outputs verified,
prestage's peak RssAnon under threads x chunk_bytes + 150 MB."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_bench_prestage_smoke(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.reads.prestage", "--size-mib", "8", "--methods", "posix",
                           "--quiet", "--results-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "RssAnon/bound" in done.stdout
    results = json.loads((tmp_path / "prestage.json").read_text())
    assert results["bench"] == "prestage" and results["schema_version"] == 1
    assert set(results["candidates"]) == {"posix_prestage", "posix_run"}
    assert results["verified"] is True
    for res in results["candidates"].values():
        (sample,) = res["samples"]
        assert sample["verified"] is True
        assert sample["rss_anon_samples"] > 0 and sample["peak_rss_anon_bytes"] > 0 and sample["vm_hwm_bytes"] > 0
    pre = results["candidates"]["posix_prestage"]["samples"][0]
    assert pre["bound_bytes"] == 2 * 4 * 2**20 + 150 * 10**6
    assert pre["peak_rss_anon_bytes"] < pre["bound_bytes"]
    assert "posix_prestage_over_run_rss_anon" in results["ratios"]
