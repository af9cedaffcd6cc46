"""Shared by the tests of the pipeline examples in jobs/: a cube and its weights in the test S3
server, a SoFiA-2 template, and a `sofia` stand-in that checks each region against the original."""
from __future__ import annotations

import json
import uuid
import stat
import sys
from pathlib import Path

from ingest.testbed.synth import write_cube

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (24, 36, 40)  # numpy order; with REGION_SHAPE 24x20x10 and MIN_OVERLAP 4,2: 2 x 2 x 3 = 12 regions
REGION_SHAPE, MIN_OVERLAP, N_REGIONS = "24x20x10", "4,2", 12
TEMPLATE = """# SoFiA-2 parameters (a trimmed template_par_file.par)
pipeline.verbose = false
pipeline.threads = 0
input.data =
input.region =
input.weights =
output.directory =
output.filename =
scfind.enable = true
"""


def pipeline_inputs(s3_server, directory: Path) -> dict:
    """Upload a cube and its weights; write the template and the checker wrapper. Returns the
    environment for the example (CUBE, WEIGHTS, TEMPLATE, SOFIA, SOFIA_CHECK_ORIGINAL_*)."""
    bucket = s3_server.make_bucket(f"pipe-{uuid.uuid4().hex[:16]}")  # one per test: they share the server
    env = {}
    for name, bitpix in (("cube", -32), ("weights", -32)):
        path = directory / f"{name}.fits"
        write_cube(path, SHAPE, bitpix)
        s3_server.client().upload_file(str(path), bucket, f"survey/{name}.fits")
        env["CUBE" if name == "cube" else "WEIGHTS"] = f"s3://{bucket}/survey/{name}.fits"
        env[f"SOFIA_CHECK_ORIGINAL_{'DATA' if name == 'cube' else 'WEIGHTS'}"] = str(path)
    template = directory / "template.par"
    template.write_text(TEMPLATE)
    sofia = directory / "sofia"  # one executable path, as `sofia` is
    sofia.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'sofia_checker.py'} \"$@\"\n")
    sofia.chmod(sofia.stat().st_mode | stat.S_IXUSR)
    env.update(TEMPLATE=str(template), SOFIA=str(sofia), REGION_SHAPE=REGION_SHAPE, MIN_OVERLAP=MIN_OVERLAP,
               RUN_NAME="wal")
    return env


def assert_every_region_checked(out_dir: Path) -> list[dict]:
    """Every sofia_NNN.par exists and the checker compared its region (and weights) bit for bit."""
    pars = sorted(out_dir.glob("sofia_*.par"))
    assert [p.name for p in pars] == [f"sofia_{i:03d}.par" for i in range(1, N_REGIONS + 1)]
    checks = [json.loads((out_dir / "outputs" / f"wal_{i:03d}_check.json").read_text())
              for i in range(1, N_REGIONS + 1)]
    assert (out_dir / "config.ini").read_text().count("sofia_processes = 12") == 1
    return checks
