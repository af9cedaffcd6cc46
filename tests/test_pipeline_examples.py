"""jobs/prestage-sofia.sh, the pipeline hand-off without SLURM: mpiexec -n 4 prestage, then one
`sofia` per parameter file (the checker stands in for SoFiA-2). The SLURM script runs in
tests/test_slurm.py under a real single-node SLURM."""
import subprocess

from tests.mpitools import child_env
from tests.pipeline_fixtures import ROOT, assert_every_region_checked, pipeline_inputs


def test_bash_hand_off_stages_then_every_sofia_reads_its_region(s3_server, tmp_path):
    # More ranks than this machine has cores: Open MPI 4 needs to be told it may oversubscribe.
    env = child_env(s3_server, OMPI_MCA_rmaps_base_oversubscribe="1", **pipeline_inputs(s3_server, tmp_path))
    out_dir = tmp_path / "run"
    proc = subprocess.run(["bash", str(ROOT / "jobs" / "prestage-sofia.sh"), env["CUBE"], env["WEIGHTS"],
                           str(out_dir), env["TEMPLATE"], "4"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = assert_every_region_checked(out_dir)
    assert all(c for c in checks)
    assert proc.stdout.count("sofia_checker: OK") == 12


def test_round_trip_prestage_sofia_then_publish_the_mask_cube(s3_server, tmp_path):
    """jobs/prestage-sofia-publish.sh: the regions' SoFiA-2 masks (the stand-in fills each with its
    parameter file's number) come back as one int32 cube in which every voxel was written by the
    region that owns it (overlaps cut in the middle), under the cube's own header."""
    import io
    import json

    import numpy as np
    from astropy.io import fits

    from tests.ownership_oracle import owner_labels
    from tests.pipeline_fixtures import SHAPE

    env = child_env(s3_server, OMPI_MCA_rmaps_base_oversubscribe="1", SOFIA_CHECK_WRITE_MASK="1",
                    **pipeline_inputs(s3_server, tmp_path))
    bucket = env["CUBE"].split("/")[2]
    out_dir = tmp_path / "run"
    proc = subprocess.run(["bash", str(ROOT / "jobs" / "prestage-sofia-publish.sh"), env["CUBE"], env["WEIGHTS"],
                           str(out_dir), env["TEMPLATE"], f"s3://{bucket}/products/mask.fits", "3"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    boxes = [tuple(tuple(p) for p in r["box"]) for r in json.loads((out_dir / "manifest.json").read_text())["regions"]]
    # who owns each voxel, worked out voxel by voxel, not by the code under test
    expected = (owner_labels(boxes, SHAPE) + 1).astype(">i4")
    assert expected.min() == 1
    body = s3_server.client().get_object(Bucket=bucket, Key="products/mask.fits")["Body"].read()
    with fits.open(io.BytesIO(body)) as f:
        assert f[0].header["BITPIX"] == 32 and np.array_equal(f[0].data, expected)
        assert f[0].header["CTYPE1"] == fits.getheader(env["SOFIA_CHECK_ORIGINAL_DATA"])["CTYPE1"]
    assert json.loads((out_dir / "publish-report.json").read_text())["format"] == "fits"
