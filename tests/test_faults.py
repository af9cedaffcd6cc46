"""Fault injection with real tools: Toxiproxy between ingest and a real S3 server (versitygw),
and a misbehaving HTTP server (tests/badhttp.py) for what a TCP proxy cannot fake.

Every test asserts bit-exact data (against astropy reading the same file) or the specific,
clear error; the retry and fault counts ingest reports; and a generous bound on time, which
is there to catch hangs, not to measure speed. pytest-timeout is the backstop for a hang.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
import warnings
from datetime import datetime, timezone

import numpy as np
import pytest
from astropy.io import fits

from ingest.transports.httpbody import RESUME_GRAIN_BYTES
from ingest.api.read import plan_read, read_selection, read_subcube
from ingest.errors import (
    ExpiredURLError,
    ObjectChangedError,
    RangeNotSupportedError,
    RetryableError,
    TransportError,
)
from ingest.formats.reader import read_layout
from ingest.transports.presign import presign_url, url_expiry
from ingest.transports.retry import RetryPolicy
from ingest.transports.s3client import s3_client
from ingest.testbed.synth import write_cube
from ingest.transports import open_transport
from tests.badhttp import BadHttpServer

# A hang fails with a stack dump instead of stalling CI; every test runs over each HTTP engine.
pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("engine")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = (32, 96, 96)  # numpy order; float32: 1 179 648 data bytes
KEY = "survey/cube.fits"
KiB = 1024
CHUNK_BYTES = 128 * KiB  # 9 requests for the whole cube
# Fast backoff so a test with dozens of retries still takes a second, not a minute.
FAST = RetryPolicy(retries=5, total_s=30.0, backoff_s=0.01, backoff_max_s=0.05)
METHODS = ["presigned", "s3"]
BOUND_S = 30.0  # "did not hang": every read here takes a few seconds at most


# -- fixtures --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    """The test cube as a file, its bytes, astropy's reading of it, and an object on s3_server."""
    path = tmp_path_factory.mktemp("faults") / "cube.fits"
    write_cube(path, SHAPE, -32)
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        data = np.array(f[0].data)
    bucket = s3_server.make_bucket(f"faults-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, KEY)
    return {"path": str(path), "bytes": path.read_bytes(), "data": data, "bucket": bucket}




class Proxy:
    """A Toxiproxy proxy in front of s3_server, and ways to read the cube through it."""

    def __init__(self, toxiproxy, s3_server, cube):
        self.tp, self.s3, self.cube = toxiproxy, s3_server, cube
        self.name = f"faults_{uuid.uuid4().hex[:10]}"
        self.listen = toxiproxy.create_proxy(self.name, f"127.0.0.1:{s3_server.port}")
        self.endpoint_url = f"http://{self.listen}"
        self._timers: list[threading.Timer] = []

    def add(self, type: str, attributes: dict, *, toxicity: float = 1.0, stream: str = "downstream") -> str:
        name = f"{type}_{uuid.uuid4().hex[:6]}"
        self.tp.add_toxic(self.name, type, attributes, stream=stream, toxicity=toxicity, name=name)
        return name

    def remove_after(self, toxic: str, delay_s: float) -> threading.Timer:
        """Lift the toxic `delay_s` from now, from a timer thread (a link that recovers)."""
        timer = threading.Timer(delay_s, self.tp.remove_toxic, args=(self.name, toxic))
        timer.daemon = True
        timer.start()
        self._timers.append(timer)
        return timer

    def url(self, key: str = KEY, expires_s: int = 3600) -> str:
        """A presigned URL signed for the proxy's host:port, so it validates through the proxy."""
        client = s3_client(endpoint_url=self.endpoint_url, aws_access_key_id=self.s3.access_key,
                           aws_secret_access_key=self.s3.secret_key, region_name=self.s3.region)
        return presign_url(self.cube["bucket"], key, expires_s=expires_s, client=client)

    def open(self, method: str, *, threads: int = 2, **options):
        """The cube's transport through this proxy (s3: the endpoint is the proxy)."""
        if method == "presigned":
            return open_transport(self.url(), "presigned", threads=threads, **options)
        return open_transport(f"s3://{self.cube['bucket']}/{KEY}", "s3", threads=threads,
                              endpoint_url=self.endpoint_url, **options)

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
            timer.join()
        self.tp.delete_proxy(self.name)


@pytest.fixture
def proxy(toxiproxy, s3_server, cube, s3_env):
    p = Proxy(toxiproxy, s3_server, cube)
    yield p
    p.close()


# -- helpers ---------------------------------------------------------------------------------
def open_plan(transport, region=(), chunk_bytes: int = CHUNK_BYTES):
    """Read the header through `transport` and plan `region`: (layout, selection, plan)."""
    layout = read_layout(transport)
    sel, plan = plan_read(layout, region, chunk_bytes=chunk_bytes)
    return layout, sel, plan


def read(transport, opened, *, threads: int = 2, retry: RetryPolicy = FAST, progress=None):
    """Execute an opened plan: (data, ReadStats, seconds)."""
    layout, sel, plan = opened
    t0 = time.monotonic()
    data, stats = read_selection(transport, layout, sel, plan, threads=threads, retry=retry, progress=progress)
    return data, stats, time.monotonic() - t0


def assert_exact(data: np.ndarray, expected: np.ndarray) -> None:
    """Same shape, same dtype (byte order included), same bytes."""
    assert data.shape == expected.shape and data.dtype == expected.dtype
    assert np.ascontiguousarray(data).tobytes() == np.ascontiguousarray(expected).tobytes()


def expect_error(error_type, fn, *args, **kwargs):
    """Run fn expecting `error_type`; return (exception, seconds until it was raised)."""
    t0 = time.monotonic()
    with pytest.raises(error_type) as info:
        fn(*args, **kwargs)
    return info.value, time.monotonic() - t0


@pytest.fixture
def backoffs(monkeypatch):
    """The backoffs a read draws before its retries (every retry waits one, a throttle's too), in
    order: counted, not timed, so "not retried" holds on a loaded machine."""
    drawn = []
    for name in ("delay_s", "throttle_delay_s"):
        real = getattr(RetryPolicy, name)

        def draw(self, *args, _real=real):
            drawn.append(_real(self, *args))
            return drawn[-1]

        monkeypatch.setattr(RetryPolicy, name, draw)
    return drawn


def all_recovered(stats) -> bool:
    """Every fault seen was followed by a retry (none was fatal)."""
    return stats.retries == sum(stats.faults.values())


# == Toxiproxy between ingest and versitygw ==================================================
@pytest.mark.parametrize("method", METHODS)
def test_latency_delays_every_reply_but_not_the_bytes(proxy, cube, method):
    transport = proxy.open(method)
    opened = open_plan(transport)
    proxy.add("latency", {"latency": 50, "jitter": 0})
    data, stats, elapsed_s = read(transport, opened)
    assert_exact(data, cube["data"])
    assert stats.retries == 0 and stats.faults == {}
    assert stats.first_byte_s >= 0.050
    assert min(stats.request_s) >= 0.050, "every request paid the link's latency"
    assert elapsed_s < BOUND_S


@pytest.mark.parametrize("method", METHODS)
def test_bandwidth_cap_per_connection(proxy, cube, method):
    rate_kb_s = 1000  # per connection: 1.18 MB takes ~1.2 s on one stream
    transport = proxy.open(method, threads=4)
    opened = open_plan(transport)
    proxy.add("bandwidth", {"rate": rate_kb_s})
    one, stats1, one_s = read(transport, opened, threads=1)
    four, stats4, four_s = read(transport, opened, threads=4)
    assert_exact(one, cube["data"])
    assert_exact(four, cube["data"])
    assert stats1.retries == stats4.retries == 0
    assert one_s > 0.5 * cube["data"].nbytes / (rate_kb_s * 1000), "the cap was in force"
    # The cap is per connection, so more streams finish no slower (loose: a shared 2-core box).
    assert four_s < one_s * 1.1
    assert one_s < BOUND_S


@pytest.mark.parametrize("method", METHODS)
def test_limit_data_cuts_every_connection_and_reads_resume(proxy, cube, method):
    limit = 32 * KiB  # < CHUNK_BYTES: every request breaks, on every connection
    proxy.add("limit_data", {"bytes": limit})
    transport = proxy.open(method)  # opened through the cut link: header reads are < limit
    opened = open_plan(transport)
    plan = opened[2]
    assert plan.request(plan.n_requests - 1).nbytes > limit
    data, stats, elapsed_s = read(transport, opened, retry=RetryPolicy(retries=12, backoff_s=0.01, backoff_max_s=0.05))
    assert_exact(data, cube["data"])
    assert stats.requests == plan.n_requests
    # Each 128 KiB request needs at least 4 connections of < 32 KiB each.
    assert stats.retries >= 3 * plan.n_requests
    assert 0 < stats.resumed_bytes < plan.wire_bytes
    assert stats.faults.get("truncated", 0) + stats.faults.get("reset", 0) > 0
    assert set(stats.faults) <= {"truncated", "reset", "connect"}
    assert all_recovered(stats)
    assert elapsed_s < BOUND_S


@pytest.mark.parametrize("method", METHODS)
def test_limit_data_beyond_the_retry_budget_gives_up_clearly(proxy, cube, method):
    proxy.add("limit_data", {"bytes": 32 * KiB})
    transport = proxy.open(method, threads=1)
    opened = open_plan(transport)
    err, elapsed_s = expect_error(TransportError, read, transport, opened, threads=1,
                                  retry=RetryPolicy(retries=1, backoff_s=0.01))
    assert not isinstance(err, RetryableError)
    assert "gave up" in str(err) and "after 1 retries" in str(err) and KEY in str(err)
    assert elapsed_s < BOUND_S


@pytest.mark.parametrize("method", METHODS)
def test_reset_peer_until_the_link_recovers(proxy, cube, method):
    transport = proxy.open(method)
    opened = open_plan(transport)
    toxic = proxy.add("reset_peer", {"timeout": 0})  # RST as soon as the reply starts
    proxy.remove_after(toxic, 0.5)
    retry = RetryPolicy(retries=40, total_s=30.0, backoff_s=0.05, backoff_max_s=0.1)
    data, stats, elapsed_s = read(transport, opened, retry=retry)
    assert_exact(data, cube["data"])
    assert stats.retries > 0
    # A reset before the status line is reported as "connect", one mid-body as "reset".
    assert set(stats.faults) <= {"reset", "connect", "truncated"}
    assert all_recovered(stats)
    assert elapsed_s < BOUND_S


def test_reset_peer_on_some_connections_only(proxy, cube):
    """toxicity 0.5: Toxiproxy resets each new connection with probability 1/2. Sixteen reads,
    each on a fresh connection: some fault and recover, some are untouched, all are exact."""
    region = (slice(3, 5), slice(10, 60), slice(None))
    expected = cube["data"][region]
    first = proxy.open("presigned")
    info = first.info  # size, ETag and header learned once, as rank 0 does for the others
    layout, sel, plan = open_plan(first, region)
    proxy.add("reset_peer", {"timeout": 0}, toxicity=0.5)
    retry = RetryPolicy(retries=30, total_s=30.0, backoff_s=0.01, backoff_max_s=0.02)
    url = proxy.url()
    faulted = []
    t0 = time.monotonic()
    for _ in range(16):
        transport = open_transport(url, "presigned", threads=1)  # a new pool: a new connection
        transport.adopt(info)
        data, stats = read_selection(transport, layout, sel, plan, threads=1, retry=retry)
        transport.close()
        assert_exact(data, expected)
        assert all_recovered(stats)
        faulted.append(stats.retries > 0)
    assert any(faulted) and not all(faulted), faulted
    assert time.monotonic() - t0 < BOUND_S


@pytest.mark.parametrize("method", METHODS)
def test_stall_turns_into_a_timeout_and_the_read_completes_when_the_link_recovers(proxy, cube, method):
    transport = proxy.open(method, read_timeout_s=0.5)
    opened = open_plan(transport)
    toxic = proxy.add("timeout", {"timeout": 0})  # swallow every byte, never close
    proxy.remove_after(toxic, 1.5)  # > read_timeout_s: no connection outlives the stall
    retry = RetryPolicy(retries=20, total_s=30.0, backoff_s=0.05, backoff_max_s=0.1)
    data, stats, elapsed_s = read(transport, opened, retry=retry)
    assert_exact(data, cube["data"])
    assert stats.faults.get("timeout", 0) >= 1
    # After the toxic goes, a connection whose reply was swallowed sees the rest of it: garbage
    # where a status line should be, a protocol error ("connect"), retried like the rest.
    assert set(stats.faults) <= {"timeout", "connect", "reset", "truncated"}
    assert all_recovered(stats)
    assert 1.0 < elapsed_s < BOUND_S


@pytest.mark.parametrize("method", METHODS)
def test_permanent_stall_fails_clearly_within_the_budget(proxy, cube, method):
    transport = proxy.open(method, threads=1, read_timeout_s=0.5)
    opened = open_plan(transport)
    proxy.add("timeout", {"timeout": 0})
    err, elapsed_s = expect_error(TransportError, read, transport, opened, threads=1,
                                  retry=RetryPolicy(retries=2, backoff_s=0.05, backoff_max_s=0.1))
    message = str(err)
    assert "gave up" in message and "after 2 retries" in message and "3 attempt(s)" in message
    assert KEY in message and "Timeout" in message
    assert "X-Amz-Signature" not in message
    assert 3 * 0.5 <= elapsed_s < BOUND_S  # three 0.5 s read timeouts, a little backoff; no hang


def test_stall_beyond_the_total_retry_time_gives_up(proxy, cube, backoffs):
    transport = proxy.open("presigned", threads=1, read_timeout_s=0.3)
    opened = open_plan(transport)
    proxy.add("timeout", {"timeout": 0})
    err, elapsed_s = expect_error(TransportError, read, transport, opened, threads=1,
                                  retry=RetryPolicy(retries=1000, total_s=1.0, backoff_s=0.05, backoff_max_s=0.1))
    assert "gave up" in str(err) and "1 s retry budget" in str(err)
    # The budget, not the 1000 retries, ended it: a few 0.3 s timeouts, not 1000 (300 s).
    assert 1 <= len(backoffs) <= 1.0 / 0.3 + 1 and elapsed_s < BOUND_S


def test_cli_report_counts_recovered_faults(proxy, cube, s3_server, tmp_path):
    """`python -m ingest run` (a singleton MPI world) through a link that cuts every connection:
    exit 0, exact output, and the report's rank record carries the retries and faults."""
    proxy.add("limit_data", {"bytes": 48 * KiB})
    report_path, out_dir = tmp_path / "report.json", tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OMPI_", "PMIX_", "SLURM_"))}
    env.update(s3_server.env(), PYTHONPATH=ROOT, AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ingest", "run", "--source", f"s3://{cube['bucket']}/{KEY}", "--method", "s3",
         "--endpoint-url", proxy.endpoint_url, "--no-probe", "--threads", "2", "--chunk-bytes", "128KiB",
         "--retries", "8", "--retry-backoff-s", "0.01", "--report", str(report_path),
         "--output-dir", str(out_dir), "--no-progress"],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    elapsed_s = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    (rank,) = report["ranks"]
    assert rank["retries"] > 0 and rank["resumed_bytes"] > 0
    assert sum(rank["faults"].values()) == rank["retries"]
    with fits.open(rank["output_path"]) as f:
        assert_exact(np.asarray(f[0].data), cube["data"])
    assert 0 < report["aggregate"]["makespan_s"] <= elapsed_s  # its own clock: inside the process's life


# == A misbehaving HTTP server ================================================================
@pytest.fixture
def bad(cube):
    with BadHttpServer(cube["bytes"]) as server:
        yield server


def open_bad(server, threads: int = 1, chunk_bytes: int = CHUNK_BYTES, **options):
    """Open the cube on the bad server while it behaves; (transport, opened)."""
    transport = open_transport(server.url, threads=threads, **options)
    return transport, open_plan(transport, chunk_bytes=chunk_bytes)


def test_503_burst_then_ok(bad, cube):
    transport, opened = open_bad(bad)
    before = bad.requests
    bad.fail_next = [503, 503, 503]
    data, stats, elapsed_s = read(transport, opened, threads=1)
    assert_exact(data, cube["data"])
    assert stats.retries == 3 and stats.faults == {"http_503": 3} and stats.resumed_bytes == 0
    assert bad.requests - before == opened[2].n_requests + 3
    assert elapsed_s < BOUND_S


def test_slowdown_is_a_throttle_not_a_fault(bad, cube):
    # A store asking to slow down is ridden out (fewer requests in flight, a jittered wait), and
    # does not use up the retry budget real failures get (ingest.engine.throttle).
    transport, opened = open_bad(bad)
    bad.fail_next = [(503, "SlowDown"), (503, "SlowDown")]
    data, stats, _ = read(transport, opened, threads=1)
    assert_exact(data, cube["data"])
    assert stats.retries == 0 and stats.faults == {} and stats.throttled == 2


def test_every_transient_status_is_retried_and_named(bad, cube):
    transport, opened = open_bad(bad)
    bad.fail_next = [500, 502, 504, 429]
    data, stats, _ = read(transport, opened, threads=1)
    assert_exact(data, cube["data"])
    assert stats.faults == {"http_500": 1, "http_502": 1, "http_504": 1}
    assert stats.retries == 3 and stats.throttled == 1  # a 429 is a throttle


def test_every_third_request_fails(bad, cube):
    transport, opened = open_bad(bad, threads=2)
    bad.fail_every = 3
    data, stats, elapsed_s = read(transport, opened, threads=2)
    assert_exact(data, cube["data"])
    injected = bad.faults().count("503")
    assert injected >= opened[2].n_requests // 3
    assert stats.faults == {"http_503": injected} and stats.retries == injected
    assert elapsed_s < BOUND_S


@pytest.mark.parametrize("status, words", [(403, "access denied"), (404, "NoSuchKey"), (416, "InvalidRange")])
def test_permanent_statuses_are_not_retried(bad, backoffs, status, words):
    transport, opened = open_bad(bad)
    before = bad.requests
    bad.fail_next = [status]
    err, elapsed_s = expect_error(TransportError, read, transport, opened, threads=1,
                                  retry=RetryPolicy(retries=5, backoff_s=1.0))
    assert not isinstance(err, RetryableError)
    assert bad.requests - before == 1, "exactly one request: no retry"
    assert f"HTTP {status}" in str(err) and words in str(err)
    assert "cube.fits" in str(err) and "secret" not in str(err)
    assert backoffs == [] and elapsed_s < BOUND_S  # no backoff was drawn, none slept


def test_ignored_range_is_refused_before_the_object_streams(cube):
    big = cube["bytes"] + bytes(48 << 20)  # trailing bytes after the HDU: still a valid FITS
    with BadHttpServer(big) as server:
        transport, opened = open_bad(server)
        server.mode = "ignore_range"
        before = server.requests
        err, _ = expect_error(RangeNotSupportedError, read, transport, opened, threads=1)
        assert "ignored the Range header" in str(err)
        assert server.requests - before == 1, "not retried"
        # Opening is refused the same way, through the public API.
        expect_error(RangeNotSupportedError, read_subcube, server.url, retry=FAST)
        time.sleep(0.2)  # let the server's writer notice the hang-up
        assert server.bytes_sent < len(big) // 4


def test_wrong_content_range_is_refused_not_retried(bad):
    transport, opened = open_bad(bad)
    before = bad.requests
    bad.mode = "wrong_range"
    err, _ = expect_error(TransportError, read, transport, opened, threads=1)
    assert not isinstance(err, RetryableError)
    assert "asked for bytes" in str(err) and "but the server sent" in str(err)
    assert bad.requests - before == 1, "wrong bytes are not a transient: one request"


def test_short_bodies_on_the_next_two_requests_resume(bad, cube):
    transport, opened = open_bad(bad)
    first = opened[2].request(0).nbytes
    bad.short_next = 2  # the first request, then its resumption, get half of what they asked
    data, stats, elapsed_s = read(transport, opened, threads=1)
    assert_exact(data, cube["data"])
    assert stats.retries == 2 and stats.faults == {"truncated": 2}
    half = first // 2
    assert stats.resumed_bytes == half + (first - half) // 2
    assert elapsed_s < BOUND_S


# Requests well above the resume grain, so "half a body" holds whole grains to keep.
BIG_CHUNK_BYTES = 4 * RESUME_GRAIN_BYTES


def test_reset_mid_body_resumes_after_the_bytes_received(bad, cube):
    transport, opened = open_bad(bad, chunk_bytes=BIG_CHUNK_BYTES)
    request = opened[2].request(0)
    bad.reset_next = 1  # half the body is sent, then RST
    before = len(bad.log)
    data, stats, _ = read(transport, opened, threads=1)
    assert_exact(data, cube["data"])
    assert stats.faults == {"reset": 1} and stats.retries == 1
    # What arrived before the RST is kept, up to one resume grain, not fetched again.
    assert request.nbytes // 2 - RESUME_GRAIN_BYTES <= stats.resumed_bytes <= request.nbytes // 2
    assert stats.resumed_bytes > 0
    cut, again = bad.log[before], bad.log[before + 1]
    assert cut["fault"] == "reset"
    end = request.offset + request.nbytes - 1
    assert again["range"] == f"bytes={request.offset + stats.resumed_bytes}-{end}", "resumed, not restarted"


@pytest.mark.parametrize("threads", [1, 4])  # the native engine waits differently for one transfer and for many
def test_stall_mid_body_is_a_timeout_and_resumes(bad, cube, threads):
    transport, opened = open_bad(bad, threads=threads, chunk_bytes=BIG_CHUNK_BYTES, read_timeout_s=0.3)
    bad.stall_s = 20.0  # far beyond the 0.3 s read timeout: waiting it out is unmistakable
    bad.stall_next = 1  # half the body, then silence
    data, stats, elapsed_s = read(transport, opened, threads=threads)
    assert_exact(data, cube["data"])
    assert stats.faults == {"timeout": 1} and stats.retries == 1
    [cut] = [entry["range"] for entry in bad.log if entry["fault"] == "stall"]
    first, last = map(int, cut.removeprefix("bytes=").split("-"))
    stalled = last - first + 1  # whichever request the server took first when several are in flight
    assert stalled // 2 - RESUME_GRAIN_BYTES <= stats.resumed_bytes <= stalled // 2, "what arrived is kept"
    # Kept to the grain: when the server took the cube's 128 KiB tail request first (it may, with
    # several in flight), half of it is less than a grain and nothing is kept.
    assert stats.resumed_bytes > 0 or stalled // 2 < RESUME_GRAIN_BYTES
    assert elapsed_s < bad.stall_s, "the read timeout fired; nobody waited out the stall"


def test_fault_rate_beyond_the_budget_gives_up(bad):
    transport, opened = open_bad(bad)
    before = bad.requests
    bad.fail_next = [503, 503, 503]
    err, elapsed_s = expect_error(TransportError, read, transport, opened, threads=1,
                                  retry=RetryPolicy(retries=1, backoff_s=0.01))
    assert "gave up" in str(err) and "after 1 retries" in str(err) and "HTTP 503" in str(err)
    assert bad.requests - before == 2  # one retry, then it gave up: counted, not timed
    assert elapsed_s < BOUND_S


@pytest.mark.parametrize("honours_if_match", [True, False])
def test_changed_etag_stops_the_read(bad, cube, honours_if_match):
    bad.etag = '"v1"'
    bad.honour_if_match = honours_if_match
    transport, opened = open_bad(bad)
    assert transport.info.etag == '"v1"'
    bad.data = bytes(len(bad.data))  # a new version, same size
    bad.etag = '"v2"'
    before = bad.requests
    err, _ = expect_error(ObjectChangedError, read, transport, opened, threads=1)
    assert bad.requests - before == 1, "not retried"
    assert bad.log[-1]["if_match"] == '"v1"', "every read is pinned to the version opened"
    assert ("HTTP 412" if honours_if_match else 'ETag changed from "v1" to "v2"') in str(err)


def test_transient_faults_while_opening_are_retried(bad, cube):
    bad.fail_next = [503, 502]  # the size probe, then the first header block
    t0 = time.monotonic()
    data = read_subcube(bad.url, threads=1, retry=FAST)
    assert_exact(data, cube["data"])
    assert bad.faults()[:2] == ["503", "502"]
    assert time.monotonic() - t0 < BOUND_S


def test_the_callers_retry_policy_also_governs_opening(bad):
    bad.fail_next = [503]
    err, _ = expect_error(TransportError, read_subcube, bad.url, threads=1, retry=RetryPolicy(retries=0))
    assert "gave up" in str(err) and bad.requests == 1


def test_permanent_fault_while_opening_is_not_retried(bad):
    bad.fail_next = [404]
    err, _ = expect_error(TransportError, read_subcube, bad.url, threads=1, retry=FAST)
    assert "HTTP 404" in str(err) and bad.requests == 1


def test_pool_gets_broken_connections_back(bad, cube):
    """More broken bodies than the pool has connections: every one must go back to the pool,
    or the next request waits forever for a free connection."""
    transport, opened = open_bad(bad, threads=1)
    bad.short_next = 3
    done: list = []
    worker = threading.Thread(target=lambda: done.append(read(transport, opened, threads=1)), daemon=True)
    worker.start()
    worker.join(10.0)
    assert done, ("read hung after a broken body: HttpTransport.read_into closes the failed response "
                  "but never returns its connection to the urllib3 pool (block=True, maxsize=threads)")
    assert_exact(done[0][0], cube["data"])


# == Object identity ==========================================================================
def _new_version(cube) -> bytes:
    """Same size, different data bytes: only the identity check can tell."""
    raw = bytearray(cube["bytes"])
    raw[-100_000:] = bytes(100_000)
    return bytes(raw)


def _open_direct(method, s3_server, bucket, key, threads=1):
    if method == "presigned":
        return open_transport(presign_url(bucket, key, 3600, s3_server.client()), "presigned", threads=threads)
    return open_transport(f"s3://{bucket}/{key}", "s3", threads=threads)


def _uploaded_and_opened(cube, s3_server, method, key):
    """(client, transport, opened plan) for a fresh copy of the cube at `key`."""
    client = s3_server.client()
    client.put_object(Bucket=cube["bucket"], Key=key, Body=cube["bytes"])
    transport = _open_direct(method, s3_server, cube["bucket"], key)
    return client, transport, open_plan(transport)


@pytest.mark.parametrize("method", METHODS)
def test_object_replaced_between_open_and_read(cube, s3_server, s3_env, backoffs, method):
    key = f"replaced/open-{method}.fits"
    client, transport, opened = _uploaded_and_opened(cube, s3_server, method, key)
    client.put_object(Bucket=cube["bucket"], Key=key, Body=_new_version(cube))
    err, elapsed_s = expect_error(ObjectChangedError, read, transport, opened, threads=1)
    assert "changed" in str(err) and key in str(err)
    assert backoffs == [] and elapsed_s < BOUND_S  # not retried: a changed object stays changed


@pytest.mark.parametrize("method", METHODS)
def test_object_replaced_mid_read(cube, s3_server, s3_env, method):
    key = f"replaced/mid-{method}.fits"
    client, transport, opened = _uploaded_and_opened(cube, s3_server, method, key)
    finished = []

    def replace_after_first(nbytes):
        finished.append(nbytes)
        if len(finished) == 1:
            client.put_object(Bucket=cube["bucket"], Key=key, Body=_new_version(cube))

    err, _ = expect_error(ObjectChangedError, read, transport, opened, threads=1, progress=replace_after_first)
    assert "changed" in str(err)
    assert len(finished) == 1, "no request after the change was accepted"


def test_local_file_rewritten_mid_read(cube, tmp_path):
    path = tmp_path / "cube.fits"
    shutil.copyfile(cube["path"], path)
    old = time.time() - 60
    os.utime(path, (old, old))  # the file predates the run
    transport = open_transport(str(path), threads=1)
    opened = open_plan(transport)

    def rewrite_in_place(nbytes):
        with open(path, "r+b") as f:
            f.seek(-100_000, os.SEEK_END)
            f.write(bytes(100_000))

    err, _ = expect_error(ObjectChangedError, read, transport, opened, threads=1, progress=rewrite_in_place)
    assert "changed" in str(err) and str(path) in str(err)


def test_local_file_replaced_by_rename_reads_the_old_version_whole(cube, tmp_path):
    """An atomic replace (write elsewhere, rename over) leaves the open file intact: the read
    finishes with the version it started on, never a mix."""
    path = tmp_path / "cube.fits"
    shutil.copyfile(cube["path"], path)
    transport = open_transport(str(path), threads=1)
    opened = open_plan(transport)
    (tmp_path / "new.fits").write_bytes(_new_version(cube))
    data, _, _ = read(transport, opened, threads=1,
                      progress=lambda n: os.path.exists(tmp_path / "new.fits")
                      and os.replace(tmp_path / "new.fits", path))
    assert_exact(data, cube["data"])
    transport.close()


# == Presigned URL expiry =====================================================================
def _short_lived_url(cube, s3_server, lifetime_s: int = 2) -> str:
    return presign_url(cube["bucket"], KEY, expires_s=lifetime_s, client=s3_server.client())


def _sleep_past_expiry(url: str, margin_s: float = 1.2) -> None:
    left_s = (url_expiry(url) - datetime.now(timezone.utc)).total_seconds()
    time.sleep(max(0.0, left_s) + margin_s)


def test_expired_url_says_so(cube, s3_server, backoffs):
    url = _short_lived_url(cube, s3_server)
    transport = open_transport(url, threads=1)
    opened = open_plan(transport)  # while it is still valid
    _sleep_past_expiry(url)
    err, elapsed_s = expect_error(ExpiredURLError, read, transport, opened, threads=1)
    assert "expired" in str(err) and "HTTP 403" in str(err)
    assert "X-Amz-Signature" not in str(err)
    assert backoffs == [] and elapsed_s < BOUND_S, "not retried"
    # Opening an expired URL says the same.
    err, _ = expect_error(ExpiredURLError, read_subcube, url, retry=FAST)
    assert "expired" in str(err)


def test_expired_url_is_re_signed_when_a_signer_is_given(cube, s3_server):
    client = s3_server.client()
    url = _short_lived_url(cube, s3_server)
    signed = []

    def refresh():
        signed.append(presign_url(cube["bucket"], KEY, expires_s=3600, client=client))
        return signed[-1]

    transport = open_transport(url, "presigned", threads=2, refresh_url=refresh)
    opened = open_plan(transport)
    _sleep_past_expiry(url)
    data, stats, elapsed_s = read(transport, opened, threads=2)
    assert_exact(data, cube["data"])
    assert stats.faults.get("expired_url", 0) >= 1 and set(stats.faults) == {"expired_url"}
    assert 1 <= len(signed) <= 2, "re-signed once (threads racing may each see the 403 once)"
    assert transport.source == signed[-1]
    assert elapsed_s < BOUND_S
