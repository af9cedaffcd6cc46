"""LocalS3Server and find_tool against the real versitygw binary (plus fake binaries for failures)."""
from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

import ingest.testbed.localserver as localserver
from ingest.errors import IngestError
from ingest.testbed.localserver import LocalS3Server, find_tool

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_tool(directory, name: str, script: str) -> str:
    path = directory / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_find_tool_missing_says_run_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("INGEST_TOOLS_DIR", str(tmp_path / "tools"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(IngestError, match=r"versitygw.*scripts/setup\.sh"):
        find_tool("versitygw")


def test_find_tool_prefers_ingest_tools_dir(monkeypatch, tmp_path):
    fake = _fake_tool(tmp_path, "versitygw", "exit 0\n")
    monkeypatch.setenv("INGEST_TOOLS_DIR", str(tmp_path))
    assert find_tool("versitygw") == fake


def test_server_serves_plain_files_under_root(s3_server, s3_bucket):
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="cubes/a.fits", Body=b"SIMPLE  =")
    assert client.get_object(Bucket=s3_bucket, Key="cubes/a.fits")["Body"].read() == b"SIMPLE  ="
    with open(os.path.join(s3_server.root, s3_bucket, "cubes", "a.fits"), "rb") as f:
        assert f.read() == b"SIMPLE  ="
    assert s3_bucket in [b["Name"] for b in client.list_buckets()["Buckets"]]


def test_env_points_a_subprocess_at_the_server(s3_server, s3_bucket):
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"xyz")
    code = (
        "import sys\nfrom ingest.transports.s3client import s3_client\n"
        f"sys.stdout.write(s3_client().get_object(Bucket={s3_bucket!r}, Key='k')['Body'].read().decode())"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3_server.env(), PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "xyz"


def test_wrong_secret_is_refused(s3_server, s3_bucket):
    from botocore.exceptions import ClientError

    from ingest.transports.s3client import s3_client

    bad = s3_client(endpoint_url=s3_server.endpoint_url, aws_access_key_id=s3_server.access_key,
                    aws_secret_access_key="not-the-secret", region_name="us-east-1")
    with pytest.raises(ClientError) as info:
        bad.list_objects_v2(Bucket=s3_bucket)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_stop_kills_process_and_removes_temp_root():
    server = LocalS3Server().start()
    root, proc = server.root, server._proc
    assert server.running and os.path.isdir(root)
    server.stop()
    assert proc.poll() is not None
    assert not os.path.exists(root)
    assert not server.running
    server.stop()  # idempotent


def test_given_root_is_kept(tmp_path):
    root = tmp_path / "data"
    with LocalS3Server(root=str(root)) as server:
        server.make_bucket("kept")
        server.client().put_object(Bucket="kept", Key="x", Body=b"1")
    assert (root / "kept" / "x").read_bytes() == b"1"


def test_start_retries_when_port_is_taken(monkeypatch):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        real_free_port = localserver._free_port
        monkeypatch.setattr(localserver, "_free_port", lambda: next(ports, None) or real_free_port())
        with LocalS3Server() as server:
            assert server.port != taken
            server.client().list_buckets()


def test_fixed_port_taken_fails_with_server_output(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(IngestError, match="address already in use"):
            LocalS3Server(root=str(tmp_path), port=port).start()


def test_start_failure_shows_stderr_tail(monkeypatch, tmp_path):
    _fake_tool(tmp_path, "versitygw", "echo 'posix backend: disk on fire' >&2\nexit 3\n")
    monkeypatch.setenv("INGEST_TOOLS_DIR", str(tmp_path))
    server = LocalS3Server()
    with pytest.raises(IngestError, match=r"status 3(.|\n)*disk on fire"):
        server.start()
    assert server.root is None  # the temp root it made is gone


def test_start_timeout_is_bounded(monkeypatch, tmp_path):
    _fake_tool(tmp_path, "versitygw", "echo 'stuck'\nexec sleep 30\n")
    monkeypatch.setenv("INGEST_TOOLS_DIR", str(tmp_path))
    server = LocalS3Server(startup_timeout_s=0.5)
    with pytest.raises(IngestError, match=r"within 0.5 s(.|\n)*stuck"):
        server.start()
    assert not server.running


def test_module_main_prints_exports_and_stops_on_sigterm():
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "-m", "ingest.testbed.localserver"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        exports = {}
        for line in proc.stdout:
            if line.startswith("#"):
                break
            name, _, value = line.removeprefix("export ").strip().partition("=")
            exports[name] = value
        assert set(exports) == {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                "AWS_DEFAULT_REGION"}
        from ingest.transports.s3client import s3_client

        client = s3_client(endpoint_url=exports["AWS_ENDPOINT_URL"], region_name="us-east-1",
                           aws_access_key_id=exports["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=exports["AWS_SECRET_ACCESS_KEY"])
        client.create_bucket(Bucket="demo")
        root = line.split("root ")[1].split(";")[0]
        assert os.path.isdir(os.path.join(root, "demo"))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        assert not os.path.exists(root)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_make_bucket_error_names_the_bucket(s3_server):
    from ingest.errors import TransportError

    with pytest.raises(TransportError, match="bucket 'x'"):
        s3_server.make_bucket("x")  # S3 bucket names need 3+ characters


def test_restart_gets_new_keys_and_works():
    server = LocalS3Server()
    with server:
        first_key = server.access_key
    with server:
        assert server.access_key != first_key
        server.client().list_buckets()
