"""Install where users run it: the package alone (no test tools) in a fresh venv, then
`python -m ingest run` as an unprivileged user against the S3 server, so that nothing on the run
path needs root or writes outside that user's own directories (docs/install-cluster.md)."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid

import numpy as np
import pytest
from astropy.io import fits

from tests.mpitools import ROOT, child_env, upload_fits_cube

USER = "ingest-ci-user"


@pytest.fixture(scope="module")
def venv():
    """ingest installed from this checkout into a fresh venv of the system's Python (as a user
    would, with the site's python module), without the test, bench or dask extras; built from a
    copy of the sources so the checkout gets no build files. Somewhere any user can read."""
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None:
        pytest.fail("no system python3 (Debian's python3 and python3-venv; scripts/setup.sh installs them)")
    base = tempfile.mkdtemp(prefix="ingest-install-")
    try:
        os.chmod(base, 0o755)
        src = os.path.join(base, "src")
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "bench",
                                                                "tests", "docs", "demo-out", "build"))
        env_dir = os.path.join(base, "venv")
        subprocess.run([system_python, "-m", "venv", env_dir], check=True, timeout=120, capture_output=True)
        python = os.path.join(env_dir, "bin", "python")
        proc = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", src],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        # what a user gets is the package and its dependencies: no test tools came along
        listed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                                check=True).stdout.lower()
        assert "ingest==" in listed and "pytest" not in listed and "hypothesis" not in listed, listed
        yield python
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """An unprivileged user made for this test (and removed after), with a home of its own."""
    if os.geteuid() != 0:
        pytest.skip("making a user for the test needs root (CI runs as root)")
    subprocess.run(["userdel", "-r", USER], capture_output=True)
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", USER], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        subprocess.run(["userdel", "-r", USER], capture_output=True)


def test_the_package_alone_runs_as_an_unprivileged_user(venv, user, s3_server, tmp_path):
    cube = upload_fits_cube(s3_server, tmp_path, f"install-{uuid.uuid4().hex[:8]}", (6, 40, 30))
    out = os.path.join(user.pw_dir, "subcubes")
    env = {k: v for k, v in child_env(s3_server).items() if k not in ("PYTHONPATH",)}
    env.update(HOME=user.pw_dir, USER=USER, LOGNAME=USER, TMPDIR=os.path.join(user.pw_dir, "tmp"))
    subprocess.run(["runuser", "-u", USER, "--", "mkdir", "-p", env["TMPDIR"]], check=True)
    proc = subprocess.run(["runuser", "-u", USER, "--", venv, "-m", "ingest", "run", "--source", cube["s3"],
                           "--output-dir", out, "--report", os.path.join(user.pw_dir, "r.json"), "--no-progress"],
                          env=env, cwd=user.pw_dir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    where = subprocess.run(["runuser", "-u", USER, "--", venv, "-c", "import ingest; print(ingest.__file__)"],
                           env=env, cwd=user.pw_dir, capture_output=True, text=True, check=True).stdout
    assert where.startswith(os.path.dirname(os.path.dirname(venv))), where  # the venv's copy ran
    (name,) = os.listdir(out)
    path = os.path.join(out, name)
    assert os.stat(path).st_uid == user.pw_uid  # written by the user, in the user's own directory
    with fits.open(path) as f:
        assert np.array_equal(f[0].data, cube["data"])
