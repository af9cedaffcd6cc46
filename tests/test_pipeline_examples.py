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
