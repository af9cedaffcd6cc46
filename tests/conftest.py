"""Shared fixtures: one real S3 server (versitygw on loopback) per test session.

A missing versitygw binary FAILS the tests that need it, with the setup hint: a skipped
server test looks like a passing suite and hides that nothing was checked.
"""
from __future__ import annotations

import os
import uuid
import warnings

import pytest

from ingest.errors import IngestError
from ingest.testbed.localserver import LocalS3Server
from ingest.testbed.toxiproxy import SERVER_NAME, ToxiproxyServer, find_tool
from tests.mpitools import PROXY_VARS

# Variables that would steer boto3 away from the test server: a service-specific endpoint
# beats AWS_ENDPOINT_URL, a profile or session token adds credentials versitygw rejects.
_AWS_VARS_TO_CLEAR = (
    "AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION",
)


# What a run measured of a link is kept for the next run (ingest.engine.linkcache); tests that
# share one server would then see each other's figures, so the suite runs without the cache
# (every child process inherits this) and the cache's own tests point it at a file of theirs.
os.environ["INGEST_LINK_CACHE"] = "off"


@pytest.fixture(scope="session")
def s3_server():
    """A running LocalS3Server shared by the whole session (started once, stopped at the end)."""
    server = LocalS3Server()
    try:
        server.start()
        error = None
    except IngestError as exc:
        error = str(exc)
    if error:  # outside `except`: the hint alone, without a chained traceback
        pytest.fail(f"cannot start the test S3 server: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def toxiproxy():
    """A Toxiproxy server per test module (proxies a module creates go with it)."""
    try:
        find_tool(SERVER_NAME)
    except IngestError as exc:  # scripts/setup.sh installs it: missing is a failure, not a skip
        pytest.fail(str(exc), pytrace=False)
    with ToxiproxyServer() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server):
    """A fresh, empty bucket name on s3_server for one test; emptied and deleted afterwards."""
    name = f"test-{uuid.uuid4().hex[:16]}"
    s3_server.make_bucket(name)
    yield name
    _delete_bucket(s3_server.client(), name)


@pytest.fixture
def s3_env(monkeypatch, tmp_path, s3_server):
    """Point boto3's standard chain (this process and its children) at s3_server; returns the vars."""
    for name in _AWS_VARS_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    for name in PROXY_VARS:  # loopback traffic never goes through a developer's proxy
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    # Keep a developer's ~/.aws/config (addressing style, endpoint, profile) out of the tests.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    env = s3_server.env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _delete_bucket(client, bucket: str) -> None:
    """Best effort: a test that left odd state must not turn its teardown into a second failure."""
    try:
        for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        client.delete_bucket(Bucket=bucket)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        warnings.warn(f"could not delete test bucket {bucket}: {exc}")


@pytest.fixture(params=["native", "urllib3"])
def engine(request, monkeypatch):
    """Run a test once per HTTP engine. `engine = auto` is what every path uses unless told
    otherwise, so the reference run makes auto find no native engine (as on a machine without
    pycurl) and the native run requires it: the contract and fault suites then cover the
    engine each run resolves to, config-driven paths included."""
    from ingest.transports import curl

    if request.param == "urllib3":
        monkeypatch.setattr(curl, "native_engine_error", lambda: "disabled for this test")
    else:
        problem = curl.native_engine_error()
        assert problem is None, f"the native engine cannot run here: {problem} (scripts/setup.sh installs pycurl)"
    return request.param


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: starts a real single-node SLURM (scripts/slurm-local.sh)")
