"""Shared fixtures: one real S3 server (versitygw on loopback) per test session, and, started
only when a test asks for it, one Ceph RADOS Gateway (`ceph_rgw`) per session; `any_store` runs
a test once per store of the matrix (versitygw and Ceph RGW, each over HTTP and HTTPS).

A missing versitygw binary or Ceph package FAILS the tests that need it, with the setup hint: a
skipped server test looks like a passing suite and hides that nothing was checked.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
import warnings
from typing import NamedTuple

import pytest

from ingest.errors import IngestError
from ingest.testbed.localserver import LocalS3Server, stop_process
from ingest.testbed.toxiproxy import SERVER_NAME, ToxiproxyServer, find_tool, free_port
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


@pytest.fixture
def counting_source():
    """Serve a FITS file over HTTP counting the bytes sent, for every "before any data moves"
    claim: `with counting_source(path) as source:` run the command on `source.url`, then
    `source.assert_no_data_moved()` (no more bytes than the header reads, none of the data)."""
    from tests.datamoves import CountingSource

    return CountingSource


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


# ------------------------------------------------------------------ the store matrix
STORE_NAMES = ("versitygw-http", "versitygw-https", "ceph-http", "ceph-https")


@pytest.fixture(scope="session")
def ceph_rgw():
    """A running CephRGW (mon, memstore OSD, radosgw on HTTP and HTTPS) shared by the session;
    started at the first test that asks for it, torn down at the end, and also on SIGTERM (the
    daemons die with this process in any case: ingest.testbed.ceph)."""
    from ingest.testbed.ceph import CephRGW

    rgw = CephRGW()
    try:
        rgw.start()
        error = None
    except IngestError as exc:
        error = str(exc)
    if error:  # outside `except`: the one line alone, without a chained traceback
        pytest.fail(f"cannot start the test Ceph RGW: {error}", pytrace=False)
    previous = signal.getsignal(signal.SIGTERM)

    def stop_then_die(signum, frame):  # a killed session still removes the cluster's temp dir
        rgw.stop()
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, stop_then_die)
    yield rgw
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    rgw.stop()


@pytest.fixture(scope="session")
def versitygw_https(s3_server, tmp_path_factory):
    """(https endpoint, CA bundle) of a versitygw with TLS on s3_server's root and keys: the same
    buckets and objects over HTTPS. A second process, because versitygw's --cert applies to every
    port it listens on."""
    from ingest.testbed.certs import make_ca_and_cert

    certs = make_ca_and_cert(str(tmp_path_factory.mktemp("versitygw-tls")))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VGW_")}
    env.update(ROOT_ACCESS_KEY=s3_server.access_key, ROOT_SECRET_KEY=s3_server.secret_key)
    log = tmp_path_factory.mktemp("versitygw-tls-log") / "versitygw.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([find_tool("versitygw"), "--port", f"127.0.0.1:{port}", "--region", s3_server.region,
                                 "--cert", certs["server"], "--key", certs["key"], "--keep-alive", "--quiet",
                                 "posix", s3_server.root], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"https://127.0.0.1:{port}"
    client = _store_client(s3_server, endpoint, certs["ca"])
    deadline = time.monotonic() + 10.0
    while True:
        try:
            client.list_buckets()
            break
        except Exception as exc:  # connection refused until it listens
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                pytest.fail(f"versitygw with TLS on {endpoint} did not start ({exc}): {log.read_text()[-500:]}",
                            pytrace=False)
            time.sleep(0.05)
    yield endpoint, certs["ca"]
    stop_process(proc)


def _store_client(server, endpoint_url: str, ca_bundle: str | None):
    from ingest.transports.s3client import s3_client

    return s3_client(endpoint_url=endpoint_url, aws_access_key_id=server.access_key,
                     aws_secret_access_key=server.secret_key, region_name=server.region,
                     **({"verify": ca_bundle} if ca_bundle else {}))


class StoreCase(NamedTuple):
    """One store of the matrix, as a test sees it: name (e.g. ceph-https), endpoint, the CA to
    trust (None over HTTP), a fresh bucket, the AWS_* variables set for this test (and to give a
    child process), a boto3 client, and the server object (LocalS3Server or CephRGW)."""

    name: str
    endpoint_url: str
    ca_bundle: str | None
    bucket: str
    env: dict
    client: object
    server: object


_STORE_CLIENTS: dict = {}  # a client costs 0.1-0.2 s: one per store, endpoint and server start (its keys)


@pytest.fixture(params=STORE_NAMES)
def any_store(request, monkeypatch, tmp_path_factory):
    """Run the test once per store of the matrix, with boto3's chain pointed at it (as s3_env does,
    plus AWS_CA_BUNDLE over HTTPS) and a fresh bucket, emptied and deleted afterwards. Ceph starts
    only when a Ceph case runs."""
    name = request.param
    if name.startswith("ceph"):
        server = request.getfixturevalue("ceph_rgw")
        endpoint, ca_bundle = (server.https_endpoint, server.ca_bundle) if name.endswith("https") else (server.endpoint_url, None)
    else:
        server = request.getfixturevalue("s3_server")
        endpoint, ca_bundle = request.getfixturevalue("versitygw_https") if name.endswith("https") else (server.endpoint_url, None)
    env = {**server.env(), "AWS_ENDPOINT_URL": endpoint, **({"AWS_CA_BUNDLE": ca_bundle} if ca_bundle else {})}
    for var in (*_AWS_VARS_TO_CLEAR, "AWS_CA_BUNDLE", "AWS_REQUEST_CHECKSUM_CALCULATION"):
        monkeypatch.delenv(var, raising=False)
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    # Paths that never exist, the same for every test: the AWS_* variables key ingest's client
    # cache (ingest.transports.s3client), and a per-test path would make a client per test.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path_factory.getbasetemp() / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path_factory.getbasetemp() / "no-aws-credentials"))
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    key = (name, endpoint, server.access_key)
    if key not in _STORE_CLIENTS:
        _STORE_CLIENTS[key] = _store_client(server, endpoint, ca_bundle)
    client = _STORE_CLIENTS[key]
    bucket = f"matrix-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)
    yield StoreCase(name, endpoint, ca_bundle, bucket, env, client, server)
    _delete_bucket(client, bucket)


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
