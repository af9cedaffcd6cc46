"""Ceph's RADOS Gateway as a test store (ingest.testbed.ceph), and uploads every store accepts
(ingest.transports.s3client's checksum policy): the test bed starts, answers over HTTP and HTTPS,
applies a setting at run time, and leaves nothing behind however it ends (stop, Ctrl-C, SIGTERM,
its parent killed); a missing package or a failing daemon is one line; `ingest upload` works on
RGW over both protocols, where boto3's default client fails over HTTPS (MissingContentLength)."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import ingest.testbed.ceph as ceph
from ingest.errors import ConfigError, IngestError
from ingest.staging.upload import upload_file
from ingest.testbed.ceph import CephRGW
from ingest.transports.s3client import checksum_calculation, s3_client
from tests.mpitools import ROOT, child_env, cli

pytestmark = pytest.mark.timeout(300)

CEPH_STATE_DIRS = ("/etc/ceph", "/var/lib/ceph", "/var/run/ceph", "/var/log/ceph")
PART_BYTES = 5 * 2**20
BODY = os.urandom(2 * PART_BYTES + 12_345)  # three parts of a multipart upload


def ceph_state() -> dict:
    """Everything under the system's Ceph directories (the packages made some): path -> (size, mtime)."""
    found = {}
    for top in CEPH_STATE_DIRS:
        for root, dirs, files in os.walk(top):
            for name in [*dirs, *files]:
                path = os.path.join(root, name)
                st = os.lstat(path)
                found[path] = (st.st_size, st.st_mtime_ns)
    return found


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line holds `text` (a test bed's temp dir is in every daemon's)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if text.encode() in fh.read():
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, not yet reaped
    except OSError:
        return False


def wait_until(predicate, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# ------------------------------------------------------------------ the test bed itself

def test_starts_serves_both_protocols_applies_settings_and_leaves_nothing(tmp_path):
    before = ceph_state()
    t0 = time.monotonic()
    with CephRGW(memstore_bytes=256 * 2**20) as rgw:
        entered_s = time.monotonic() - t0
        root, pids = rgw.root, rgw.pids
        assert rgw.running and set(pids) == {"mon", "osd", "rgw"} and all(map(alive, pids.values()))
        # What it says of its start is that start: inside the wait around it and within its own
        # deadline (a start past startup_timeout_s raises). The figure itself is printed by
        # `python -m ingest.testbed.ceph` ("ready in"), not judged here: a loaded machine is slower.
        assert 0 < rgw.startup_s <= entered_s and rgw.startup_s <= rgw.startup_timeout_s, (
            f"ready in {rgw.startup_s:.1f} s, entered in {entered_s:.1f} s")
        assert rgw.endpoint_url.startswith("http://127.0.0.1:") and rgw.https_endpoint.startswith("https://127.0.0.1:")
        assert rgw.ca_bundle.startswith(root) and os.path.isfile(rgw.ca_bundle)
        rgw.make_bucket("testbed")
        rgw.client().put_object(Bucket="testbed", Key="k", Body=b"0123456789")
        https = rgw.client(https=True)
        assert https.get_object(Bucket="testbed", Key="k", Range="bytes=3-5")["Body"].read() == b"345"
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):  # trusted only through its CA
            s3_client(endpoint_url=rgw.https_endpoint, aws_access_key_id=rgw.access_key,
                      aws_secret_access_key=rgw.secret_key, retries={"total_max_attempts": 1}).list_buckets()

        # A setting applied at run time: above N requests at once radosgw answers 503 SlowDown.
        rgw.set_config("rgw_max_concurrent_requests", 1)
        rgw.client().put_object(Bucket="testbed", Key="big", Body=os.urandom(4 * 2**20))
        no_retries = rgw.client(max_pool_connections=16, retries={"total_max_attempts": 1})

        def get(_):
            try:
                no_retries.get_object(Bucket="testbed", Key="big")["Body"].read()
                return "ok"
            except ClientError as exc:
                return exc.response["Error"]["Code"]

        def burst() -> list[str]:
            with ThreadPoolExecutor(16) as pool:
                return list(pool.map(get, range(48)))
        assert wait_until(lambda: "SlowDown" in burst(), timeout_s=20), "rgw_max_concurrent_requests never applied"
        with pytest.raises(ConfigError, match="key"):
            rgw.set_config("rgw max concurrent", 1)
    assert not rgw.running and rgw.root is None
    assert not any(map(alive, pids.values())) and not processes_mentioning(root)
    assert not os.path.exists(root)
    assert ceph_state() == before, "the test bed touched the system's Ceph directories"


def test_a_missing_package_is_one_line_and_starts_nothing(monkeypatch, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    made = lambda: set(glob.glob(os.path.join(tempfile.gettempdir(), "ingest-ceph-*")))  # noqa: E731
    before = made()
    with pytest.raises(IngestError) as err:
        CephRGW().start()
    assert str(err.value) == ("ceph-mon not found: run scripts/setup.sh "
                              "(apt: ceph-mon ceph-osd radosgw ceph-common)")
    assert made() == before
    proc = subprocess.run([sys.executable, "-m", "ingest.testbed.ceph"], capture_output=True, text=True,
                          env={**child_env(), "PATH": str(empty)}, cwd=ROOT, timeout=60)
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0
    assert "ceph-mon not found" in proc.stderr and "scripts/setup.sh" in proc.stderr


def test_a_failing_daemon_is_named_with_its_log(monkeypatch):
    """radosgw's HTTP port taken at every attempt: the error names the daemon and its own words."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    taken_port, calls = taken.getsockname()[1], iter(range(10_000))
    real_free_port = ceph.free_port
    # start() asks for mon_v2, mon_v1, http, https in that order: http is the taken one.
    monkeypatch.setattr(ceph, "free_port", lambda: taken_port if next(calls) % 4 == 2 else real_free_port())
    rgw = CephRGW()
    try:
        with pytest.raises(IngestError) as err:
            rgw.start()
    finally:
        taken.close()
    message = str(err.value)
    # radosgw exits 98 (EADDRINUSE) or, when it crashes while unwinding the failed frontend, by
    # SIGSEGV (-11): the message names the daemon either way, and its log says why.
    assert "\n" not in message and message.startswith("ceph rgw: rgw exited with status ")
    assert "Address already in use" in message
    assert next(calls) == 3 * 4, "a port taken at start is worth another try, three in all"
    assert rgw.root is None and not rgw.running


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_the_command_runs_one_and_a_signal_tears_it_down(how):
    """`python -m ingest.testbed.ceph`: endpoints and keys printed; Ctrl-C or kill stops the daemons
    and removes the dir; even a SIGKILL of the command takes the daemons with it."""
    proc = subprocess.Popen([sys.executable, "-m", "ingest.testbed.ceph"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    printed = {}
    try:
        for line in proc.stdout:
            if line.startswith("export "):
                name, value = line[len("export "):].strip().split("=", 1)
                printed[name] = value.strip("'")
            if line.startswith("# Ctrl-C"):
                break
        assert set(printed) >= {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CA_BUNDLE"}, \
            proc.stderr.read() if proc.poll() is not None else printed
        root = os.path.dirname(os.path.dirname(printed["AWS_CA_BUNDLE"]))
        daemons = processes_mentioning(root)
        assert len(daemons) == 3
        client = s3_client(endpoint_url=printed["AWS_ENDPOINT_URL"], verify=printed["AWS_CA_BUNDLE"],
                           aws_access_key_id=printed["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=printed["AWS_SECRET_ACCESS_KEY"])
        assert client.list_buckets()["Buckets"] == []
        proc.send_signal(getattr(signal, how))
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_until(lambda: not any(map(alive, daemons))), f"daemons left after {how}"
    if how == "SIGKILL":  # nothing can run in a killed process: the daemons die, the dir stays
        assert proc.returncode == -signal.SIGKILL
        shutil.rmtree(root)
    else:
        assert proc.returncode == {"SIGINT": 130, "SIGTERM": 128 + signal.SIGTERM}[how]
        assert not os.path.exists(root)


# ------------------------------------------------------------------ uploads every store accepts

def test_boto3_defaults_fail_on_rgw_https_where_ingest_upload_works(ceph_rgw, tmp_path):
    """The failure this policy fixes, reproduced first with a client made as boto3 makes it."""
    rgw = ceph_rgw
    bucket = rgw.make_bucket(f"upload-{os.urandom(4).hex()}")
    raw = boto3.session.Session().client("s3", endpoint_url=rgw.https_endpoint, verify=rgw.ca_bundle,
                                         aws_access_key_id=rgw.access_key, aws_secret_access_key=rgw.secret_key,
                                         region_name=rgw.region, config=Config(s3={"addressing_style": "path"}))
    assert raw.meta.config.request_checksum_calculation == "when_supported"  # boto3 >= 1.36's default
    with pytest.raises(ClientError, match="MissingContentLength"):
        raw.put_object(Bucket=bucket, Key="raw", Body=b"a body with a CRC32 trailer")

    path = tmp_path / "cube.bin"
    path.write_bytes(BODY)
    small = tmp_path / "small.bin"
    small.write_bytes(BODY[:1000])
    for endpoint, ca_bundle in ((rgw.endpoint_url, None), (rgw.https_endpoint, rgw.ca_bundle)):
        env = child_env(rgw, AWS_ENDPOINT_URL=endpoint, **({"AWS_CA_BUNDLE": ca_bundle} if ca_bundle else {}))
        for source, key, n_parts in ((path, "multi.bin", 3), (small, "single.bin", 1)):
            proc = cli(["upload", source, f"s3://{bucket}/{key}", "--part-bytes", "5MiB", "--no-progress"], env)
            assert proc.returncode == 0, proc.stderr
            assert f"in {n_parts} part(s)" in proc.stdout
            stored = rgw.client().get_object(Bucket=bucket, Key=key)["Body"].read()
            assert stored == source.read_bytes(), f"{key} over {endpoint}"


@pytest.mark.parametrize("setting", [None, "when_supported"])
def test_every_part_carries_a_header_checksum_and_no_trailer(ceph_rgw, tmp_path, setting):
    """What goes on the wire: Content-MD5 on every part by default (RGW verifies it), a CRC32
    header when flexible checksums are asked for; never an aws-chunked body."""
    rgw = ceph_rgw
    bucket = rgw.make_bucket(f"wire-{os.urandom(4).hex()}")
    client = rgw.client(https=True, **({"request_checksum_calculation": setting} if setting else {}))
    sent = []
    client.meta.events.register("before-send.s3.UploadPart", lambda request, **_: sent.append(dict(request.headers)))
    path = tmp_path / "parts.bin"
    path.write_bytes(BODY)
    result = upload_file(str(path), f"s3://{bucket}/k", part_bytes=PART_BYTES, progress=False, client=client)
    assert result.n_parts == len(sent) == 3
    assert rgw.client().get_object(Bucket=bucket, Key="k")["Body"].read() == BODY
    for headers in sent:
        names = {name.lower() for name in headers}
        assert "x-amz-trailer" not in names and b"aws-chunked" not in headers.get("Content-Encoding", b"")
        assert ("content-md5" in names) == (setting is None)
        assert ("x-amz-checksum-crc32" in names) == (setting == "when_supported")
    assert result.checksum == ("CRC32" if setting else "Content-MD5")


def test_rgw_refuses_a_part_whose_content_md5_does_not_match(ceph_rgw):
    """Why Content-MD5 is the default off AWS: RGW checks it (and ignores a wrong CRC32)."""
    rgw = ceph_rgw
    bucket = rgw.make_bucket(f"digest-{os.urandom(4).hex()}")
    client = rgw.client(https=True, retries={"total_max_attempts": 1})
    wrong_md5 = "1B2M2Y8AsgTpgAmY7PhCfg=="  # the MD5 of no bytes at all
    with pytest.raises(ClientError, match="BadDigest"):
        client.put_object(Bucket=bucket, Key="k", Body=b"some bytes", ContentMD5=wrong_md5)
    client.put_object(Bucket=bucket, Key="k", Body=b"some bytes", ChecksumCRC32="AAAAAA==")  # wrong, yet stored
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"some bytes"


def test_checksum_setting_is_read_as_boto3_reads_it(monkeypatch, tmp_path):
    config = tmp_path / "config"
    config.write_text("[default]\nrequest_checksum_calculation = when_supported\n"
                      "[profile site]\nrequest_checksum_calculation = WHEN_REQUIRED\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_REQUEST_CHECKSUM_CALCULATION", raising=False)
    store = "https://acacia.example.org"
    assert checksum_calculation(store)[0] == "when_required"  # a store not known to take flexible checksums
    assert checksum_calculation(None)[0] == "when_supported"  # AWS's own endpoint
    assert checksum_calculation("https://s3.ap-southeast-2.amazonaws.com")[0] == "when_supported"
    assert checksum_calculation("https://amazonaws.com.example.org")[0] == "when_required"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert checksum_calculation(store) == ("when_supported", "profile 'default' request_checksum_calculation")
    assert checksum_calculation(store, profile="site")[0] == "when_required"
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")  # the variable beats the file
    assert checksum_calculation(store) == ("when_required", "AWS_REQUEST_CHECKSUM_CALCULATION")
    assert checksum_calculation(store, "when_supported")[0] == "when_supported"  # an explicit setting beats both
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "sometimes")
    with pytest.raises(ConfigError, match="request_checksum_calculation: 'sometimes' \\(from "
                                          "AWS_REQUEST_CHECKSUM_CALCULATION\\) is not one of"):
        checksum_calculation(store)
    client = s3_client(endpoint_url=store, request_checksum_calculation="when_supported")
    assert client.meta.config.request_checksum_calculation == "when_supported"


def test_run_config_offers_the_setting_with_choices():
    from ingest.config.run import check_field

    assert check_field("request_checksum_calculation", "When_Required") == "when_required"
    assert check_field("request_checksum_calculation", None) is None  # the policy decides
    with pytest.raises(ConfigError, match="request_checksum_calculation: expected one of when_supported, when_required"):
        check_field("request_checksum_calculation", "always")
