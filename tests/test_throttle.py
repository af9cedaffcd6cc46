"""Riding out a throttling store, without a server: the AIMD rule's properties, the limiter under
threads, throttles kept out of the retry budget (threads, the one-thread loop, uploads), which
errors are throttles (through the real transports' sockets), and the report's fields.

The store is an in-memory object that refuses reads above a number in flight, as Ceph RGW does
above rgw_max_concurrent_requests; tests/test_throttle_store.py runs the same against RGW."""
from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.core.aimd import AimdRule, admitted, after_success, after_throttle, full_jitter_s
from ingest.engine.executor import run_requests
from ingest.engine.throttle import Limiter, limiter_for
from ingest.errors import ConfigError, RetryableError, TransportError
from ingest.transports.base import MemoryTransport, Session
from ingest.transports.retry import (FAILED, OK, THROTTLED, Attempts, FaultLog, RetryPolicy, gate_outcome,
                                     is_refusal, is_throttle, read_with_retries, retry_call)

FAST = RetryPolicy(retries=2, total_s=30.0, backoff_s=0.001, throttle_backoff_s=0.001, throttle_backoff_max_s=0.004)


# ------------------------------------------------------------------ the rule (pure)
limits = st.floats(min_value=1.0, max_value=256.0, allow_nan=False)
rules = st.builds(AimdRule, decrease=st.floats(0.1, 0.9), increase_per_window=st.floats(0.25, 4.0),
                  floor_requests=st.integers(1, 4))


@settings(max_examples=100, deadline=None)
@given(limit=limits, generation=st.integers(0, 50), rule=rules)
def test_a_throttle_seen_under_the_current_limit_cuts_it_once_never_below_the_floor(limit, generation, rule):
    cut, next_generation = after_throttle(limit, generation, generation, rule)
    assert next_generation == generation + 1
    assert cut == pytest.approx(max(rule.floor_requests, limit * rule.decrease))
    assert cut >= rule.floor_requests
    # Throttles of requests sent before that cut answer the same overload: nothing more changes.
    assert after_throttle(cut, next_generation, generation, rule) == (cut, next_generation)


@settings(max_examples=100, deadline=None)
@given(start=st.integers(1, 64), ceiling=st.integers(1, 128))
def test_a_window_of_successes_adds_about_one_request_up_to_the_ceiling(start, ceiling):
    limit = float(min(start, ceiling))
    for _ in range(int(limit)):  # one window: `limit` successes
        grown = after_success(limit, ceiling)
        assert limit <= grown <= ceiling
        limit = grown
    first = float(min(start, ceiling))
    if first + 1 <= ceiling:
        assert first + first / (first + 1) - 1e-9 <= limit <= first + 1 + 1e-9
    else:
        assert limit == pytest.approx(min(float(ceiling), limit))


@settings(max_examples=100, deadline=None)
@given(ceiling=st.integers(1, 64), rule=rules,
       events=st.lists(st.sampled_from(["ok", "throttle", "stale"]), min_size=1, max_size=300))
def test_any_sequence_of_outcomes_keeps_the_admitted_requests_within_floor_and_ceiling(ceiling, rule, events):
    limit, generation = float(max(ceiling, rule.floor_requests)), 0
    for event in events:
        if event == "ok":
            limit = after_success(limit, ceiling, rule)
        else:
            sent = generation if event == "throttle" else generation - 1
            limit, generation = after_throttle(limit, generation, sent, rule)
        assert rule.floor_requests <= admitted(limit, rule) <= max(ceiling, rule.floor_requests)


@settings(max_examples=100, deadline=None)
@given(attempt=st.integers(1, 5000), base_s=st.floats(0.001, 2.0), cap_s=st.floats(0.001, 60.0),
       draw=st.floats(0.0, 1.0))
def test_full_jitter_lies_between_zero_and_the_doubled_ceiling(attempt, base_s, cap_s, draw):
    delay = full_jitter_s(attempt, base_s, cap_s, draw)
    ceiling = min(cap_s, base_s * 2.0 ** min(attempt - 1, 1023))
    assert 0.0 <= delay <= ceiling + 1e-12
    assert delay == pytest.approx(draw * ceiling)


def test_full_jitter_spreads_ranks_over_the_interval():
    """Ranks throttled together do not come back together: 400 draws fill the interval."""
    policy = RetryPolicy(throttle_backoff_s=0.1)
    delays = np.array([policy.throttle_delay_s(2) for _ in range(400)])
    assert delays.min() >= 0 and delays.max() <= 0.2
    assert np.histogram(delays, bins=4, range=(0, 0.2))[0].min() > 50  # every quarter used


def _slow_down():
    return RetryableError("SlowDown: Please reduce your request rate.", kind="SlowDown")


def test_a_throttle_backoff_grows_only_at_the_limiters_floor():
    """Above the floor the limiter halves the requests in flight and the request waits the first
    ceiling again; at the floor (16 -> 8 -> 4 -> 2 -> 1) each throttle doubles it."""
    policy = RetryPolicy(throttle_backoff_s=0.01, throttle_backoff_max_s=10.0, total_s=600.0)
    gate = Limiter(16)
    attempts = Attempts(MemoryTransport(b"x" * 10), memoryview(bytearray(10)), 0, policy, gate)
    escalations, delays = [], []
    for _ in range(7):
        gate.release(gate.acquire(), THROTTLED)  # the gate hears the outcome first, as the engines do
        delays.append(attempts.failed(_slow_down(), lambda *fault: None))
        escalations.append(attempts.escalation)
    assert escalations == [0, 0, 0, 1, 2, 3, 4]
    assert gate.at_floor and gate.limit == 1
    assert all(d <= 0.01 * 2 ** max(0, e - 1) for d, e in zip(delays, escalations)), delays


def test_without_a_gate_every_throttle_doubles_the_backoff():
    policy = RetryPolicy(throttle_backoff_s=0.01, throttle_backoff_max_s=10.0, total_s=600.0)
    attempts = Attempts(MemoryTransport(b"x" * 10), memoryview(bytearray(10)), 0, policy)
    for _ in range(4):
        attempts.failed(_slow_down(), lambda *fault: None)
    assert attempts.escalation == 4 and attempts.throttles == 4


@pytest.mark.parametrize("field, kw", [("decrease", {"decrease": 1.0}), ("increase_per_window", {"increase_per_window": 0}),
                                       ("floor_requests", {"floor_requests": 0})])
def test_a_bad_rule_names_its_field(field, kw):
    with pytest.raises(ConfigError, match=field):
        AimdRule(**kw)


# ------------------------------------------------------------------ the limiter
def test_a_burst_of_throttles_halves_the_limit_once():
    limiter = Limiter(16)
    tickets = [limiter.acquire() for _ in range(16)]
    assert limiter.try_acquire() is None  # full
    for ticket in tickets:
        limiter.release(ticket, THROTTLED)
    assert limiter.limit == 8 and limiter.in_flight == 0
    seen = limiter.stats()
    assert (seen.throttled, seen.concurrency_min, seen.concurrency_ceiling) == (16, 8, 16)
    for outcome in (FAILED, FAILED):  # a fault that is not a throttle leaves the limit alone
        limiter.release(limiter.acquire(), outcome)
    assert limiter.limit == 8


def test_successes_bring_the_limit_back_and_a_new_ceiling_keeps_what_was_learned():
    limiter = Limiter(4)
    limiter.release(limiter.acquire(), THROTTLED)
    assert limiter.limit == 2
    for _ in range(2):  # a window of 2 successes: 2 + 1/2 + 1/2.5
        limiter.release(limiter.acquire(), OK)
    assert limiter.limit == 2
    for _ in range(5):
        limiter.release(limiter.acquire(), OK)
    assert limiter.limit == 4  # about one more per window, then capped at the ceiling
    limiter.release(limiter.acquire(), THROTTLED)
    limiter.set_ceiling(16)
    assert limiter.limit == 2  # the next execution starts where this one left off
    with pytest.raises(ValueError, match="outcome"):
        limiter.release(limiter.acquire(), "maybe")


def test_one_limiter_per_open_transport():
    a, b = MemoryTransport(b"x" * 10), MemoryTransport(b"x" * 10)
    assert limiter_for(a, 8) is limiter_for(a, 4)
    assert limiter_for(a, 4).stats().concurrency_ceiling == 4
    assert limiter_for(b, 8) is not limiter_for(a, 8)


class Store:
    """An in-memory store that answers 503 SlowDown above `capacity` requests at once (as RGW
    does above rgw_max_concurrent_requests), and records the most it ever served at once."""

    def __init__(self, capacity: int, service_s: float = 0.002, refuse_first: int = 0):
        self.capacity, self.service_s, self.refuse_first = capacity, service_s, refuse_first
        self.lock = threading.Lock()
        self.active = self.most_served = self.refused = self.served = 0

    def enter(self) -> None:
        with self.lock:
            if self.active >= self.capacity or self.refused < self.refuse_first:
                self.refused += 1
                raise RetryableError("HTTP 503 SlowDown", kind="slowdown")
            self.active += 1
            self.most_served = max(self.most_served, self.active)

    def leave(self) -> None:
        with self.lock:
            self.active -= 1
            self.served += 1


class ThrottlingTransport(MemoryTransport):
    """MemoryTransport in front of a Store: each read_into enters it or is refused."""

    def __init__(self, data, store: Store, *, fail_first: int = 0):
        super().__init__(data)
        self.store = store
        self.resets_left = fail_first  # real faults (resets) before the store answers at all

    def read_into(self, buffer, offset):
        if self.resets_left > 0:
            self.resets_left -= 1
            raise RetryableError("connection reset", kind="reset")
        self.store.enter()
        try:
            time.sleep(self.store.service_s)
            return super().read_into(buffer, offset)
        finally:
            self.store.leave()


def _blocks(data_bytes: int, block_bytes: int, out: np.ndarray):
    def do_one(i, worker):
        start = i * block_bytes
        yield memoryview(out)[start:start + block_bytes], start
        return block_bytes
    return data_bytes // block_bytes, do_one


def _ride_out(transport_type, capacity: int, kib: int, threads: int, seed: int):
    """Read `kib` KiB in 1 KiB requests on `threads` through a store serving `capacity` at once,
    with no retry budget: (stats, store, transport, requests), the data checked exact and every
    throttle counted, none as a fault or retry."""
    data = np.random.default_rng(seed).integers(0, 255, kib * 1024, dtype=np.uint8)
    out = np.zeros_like(data)
    store = Store(capacity=capacity)
    transport = transport_type(data, store)
    n, do_one = _blocks(data.size, 1024, out)
    policy = RetryPolicy(retries=0, total_s=60.0, throttle_backoff_s=0.002, throttle_backoff_max_s=0.02)
    stats = run_requests(n, do_one, transport, needed_bytes=data.size, buffer_bytes=1024, threads=threads,
                         retry=policy)
    assert np.array_equal(out, data)  # retries=0, yet every throttled request completed
    assert stats.retries == 0 and stats.faults == {}
    assert stats.throttled == store.refused > 0
    return stats, store, transport, n


def test_threads_ride_out_a_store_that_serves_three_at_once():
    stats, store, transport, n = _ride_out(ThrottlingTransport, capacity=3, kib=600, threads=16, seed=1)
    assert stats.concurrency_ceiling == 16 and 1 <= stats.concurrency_min <= 3
    assert stats.concurrency_settled <= 4.5  # near the store's 3, far below the 16 threads
    assert store.refused < n / 4, f"{store.refused} refusals for {n} requests: the limit did not hold"
    assert limiter_for(transport, 16).in_flight == 0


class StoreSession(Session):
    """A one-thread session over a Store, for the native engine's loop: a read is refused at
    start when the store is full; `wait` finishes the reads that have been served."""

    def __init__(self, transport: ThrottlingTransport):
        self.transport, self.store = transport, transport.store
        self.pending: list = []  # (key, buffer, offset, error, due)

    def start(self, key, buffer, offset):
        try:
            self.store.enter()
            self.pending.append((key, buffer, offset, None, time.monotonic() + self.store.service_s))
        except RetryableError as exc:
            self.pending.append((key, buffer, offset, exc, time.monotonic()))

    def wait(self, timeout_s):
        if not self.pending:
            time.sleep(min(timeout_s, 0.001))
            return []
        time.sleep(max(0.0, min(timeout_s, min(p[4] for p in self.pending) - time.monotonic())))
        now, done, keep = time.monotonic(), [], []
        for key, buffer, offset, error, due in self.pending:
            if due > now:
                keep.append((key, buffer, offset, error, due))
                continue
            if error is None:
                buffer[:] = self.transport._data[offset:offset + len(buffer)]
                self.store.leave()
            done.append((key, 0.0, error))
        self.pending = keep
        return done

    def close(self):
        for _key, _buffer, _offset, error, _due in self.pending:
            if error is None:
                self.store.leave()
        self.pending = []


class ConcurrentThrottlingTransport(ThrottlingTransport):
    concurrent = True

    def open_session(self, depth):
        return StoreSession(self)


def test_the_one_thread_loop_keeps_its_depth_to_what_the_store_serves():
    stats, store, _, n = _ride_out(ConcurrentThrottlingTransport, capacity=4, kib=500, threads=32, seed=2)
    assert stats.concurrency_ceiling == 32 and stats.concurrency_settled <= 6
    assert store.refused < n / 4, f"{store.refused} refusals for {n} requests: the depth did not follow the limit"
    assert store.active == 0


# ------------------------------------------------------------------ the retry budget
def test_throttles_do_not_use_up_the_retries_that_real_failures_get():
    data = bytes(range(256)) * 4
    store = Store(capacity=1, refuse_first=8)  # 8 throttles, then it serves
    transport = ThrottlingTransport(data, store, fail_first=2)
    log = FaultLog()
    buffer = bytearray(100)
    gate = Limiter(4)
    read_with_retries(transport, memoryview(buffer), 10, FAST, log.note, gate=gate)
    assert bytes(buffer) == data[10:110]
    assert log.retries == 2 and log.faults == {"reset": 2}  # the two resets are the only retries
    assert log.throttled == store.refused == 8  # four times what FAST.retries allows faults
    assert gate.stats().throttled == 8 and gate.in_flight == 0


def test_real_failures_still_give_up_after_their_retries():
    transport = ThrottlingTransport(b"x" * 100, Store(capacity=1), fail_first=10)
    with pytest.raises(TransportError, match=r"after 2 retries \(3 attempt\(s\) failed, 0 throttled"):
        read_with_retries(transport, memoryview(bytearray(10)), 0, FAST, FaultLog().note)


def test_a_store_that_never_stops_throttling_is_bounded_by_the_retry_time():
    transport = ThrottlingTransport(b"x" * 100, Store(capacity=0))
    policy = RetryPolicy(retries=1, total_s=0.2, throttle_backoff_s=0.01, throttle_backoff_max_s=0.02)
    t0 = time.monotonic()
    with pytest.raises(TransportError, match=r"0.2 s retry budget \(0 attempt\(s\) failed, \d+ throttled"):
        read_with_retries(transport, memoryview(bytearray(10)), 0, policy, FaultLog().note)
    assert time.monotonic() - t0 < 2.0


def test_an_upload_call_rides_out_throttles_through_its_gate():
    """retry_call (publish's UploadPart): throttles neither count as retries nor fail the part,
    and the gate hears each one."""
    answers = iter([RetryableError("part 3: SlowDown: Please reduce your request rate.", kind="SlowDown")] * 6
                   + [RetryableError("part 3: 500", kind="500")] + ["stored"])
    seen = []

    def put():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    gate = Limiter(4)
    policy = RetryPolicy(retries=1, total_s=30.0, backoff_s=0.001, throttle_backoff_s=0.001)
    assert retry_call(put, policy, "part 3", gate=gate, on_throttle=seen.append) == "stored"
    assert len(seen) == 6 and gate.stats().throttled == 6 and gate.limit == 2 and gate.in_flight == 0


# ------------------------------------------------------------------ which errors are throttles
# (error, what it is): "throttle" spares the retries and lowers the requests in flight;
# "refusal" lowers them too but stays a fault (a wrong endpoint must fail in seconds);
# "fault" leaves the limit alone.
@pytest.mark.parametrize("error, nature", [
    (RetryableError("HTTP 503 SlowDown at offset 0", kind="slowdown"), "throttle"),
    (RetryableError("HTTP 429 at offset 0", kind="http_429"), "throttle"),
    (RetryableError("part 2: SlowDown: Please reduce your request rate.", kind="SlowDown"), "throttle"),
    (RetryableError("part 2: 429", kind="429"), "throttle"),
    (RetryableError("HTTP 503 ServiceUnavailable Please reduce your request rate.", kind="http_503"), "throttle"),
    (RetryableError("request failed: NewConnectionError: [Errno 111] Connection refused", kind="connect"), "refusal"),
    (RetryableError("HTTP 503 at offset 0", kind="http_503"), "fault"),  # a gateway's 503 says nothing of load
    (RetryableError("HTTP 500 InternalError at offset 0", kind="http_500"), "fault"),
    (RetryableError("connection broke after 10 of 20 bytes", kind="reset"), "fault"),
    (RetryableError("stalled", kind="timeout"), "fault"),
    (RetryableError("Could not resolve host: store.invalid", kind="connect"), "fault"),
])
def test_which_failures_are_throttles(error, nature):
    assert is_throttle(error) is (nature == "throttle") and is_refusal(error) is (nature == "refusal")
    assert gate_outcome(error) == (FAILED if nature == "fault" else THROTTLED)
    log = FaultLog()
    log.note(error, True, 0)
    assert (log.throttled, log.retries) == ((1, 0) if nature == "throttle" else (0, 1))
    assert log.faults == ({} if nature == "throttle" else {error.kind: 1})


def test_a_refusal_told_only_by_the_cause_is_seen():
    from botocore.exceptions import EndpointConnectionError

    from ingest.staging.multipart import _classify

    assert not is_throttle(TransportError("HTTP 403 AccessDenied"))
    boto = EndpointConnectionError(endpoint_url="http://127.0.0.1:9", error=ConnectionRefusedError(111, "Connection refused"))
    assert gate_outcome(_classify(boto, "s3://b/k: part 1")) == THROTTLED
    try:
        raise RetryableError("s3://b/k: get_object failed: EndpointConnectionError", kind="connect") from boto
    except RetryableError as exc:
        assert is_refusal(exc) and not is_throttle(exc)


@pytest.fixture
def closed_port(monkeypatch):
    """A loopback port nothing listens on (refuses connections); proxies out of the way."""
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("engine", ["urllib3", "native"])
def test_a_refused_connection_through_each_engine_lowers_the_limit_and_uses_the_retries(engine, closed_port):
    from ingest.transports import open_transport

    if engine == "native":
        from ingest.transports.curl import native_engine_error

        assert native_engine_error() is None, native_engine_error()
    with open_transport(f"http://127.0.0.1:{closed_port}/bucket/key", "presigned", engine=engine,
                        connect_timeout_s=2.0) as transport:
        with pytest.raises(RetryableError) as caught:
            transport.read_into(memoryview(bytearray(16)), 0)
    assert gate_outcome(caught.value) == THROTTLED and not is_throttle(caught.value), str(caught.value)
    gate = Limiter(8)
    with open_transport(f"http://127.0.0.1:{closed_port}/bucket/key", "presigned", engine=engine) as transport:
        with pytest.raises(TransportError, match="after 1 retries"):  # nothing listens: fail fast
            read_with_retries(transport, memoryview(bytearray(16)), 0, RetryPolicy(retries=1, backoff_s=0.001),
                              FaultLog().note, gate=gate)
    assert gate.limit == 2 and gate.stats().throttled == 2  # each attempt saw the limit it cut: 8 -> 4 -> 2


# ------------------------------------------------------------------ the report
def test_the_rank_record_and_summary_show_throttles_and_the_settled_concurrency():
    from ingest.driver.read import rank_record
    from ingest.outputs.report import aggregate, render_summary

    def region(index, throttled, settled, low):
        return {"index": index, "box": [[0, 1]], "bytes_needed": 10, "bytes_wire": 10, "requests": 1, "retries": 0,
                "resumed_bytes": 0, "faults": {}, "throttled": throttled, "concurrency_ceiling": 16,
                "concurrency_settled": settled, "concurrency_min": low, "first_byte_s": 0.01, "start_s": 0.0,
                "stop_s": 1.0}

    ranks = [rank_record(0, [region(0, 30, 3.0, 2), region(1, 5, 2.2, 1)], 1.0, 0.0, []),
             rank_record(1, [region(2, 0, 16.0, 16)], 1.0, 0.0, [])]
    assert (ranks[0]["throttled"], ranks[0]["concurrency_settled"], ranks[0]["concurrency_min"]) == (35, 2.2, 1)
    assert ranks[0]["retries"] == 0 and ranks[0]["faults"] == {}
    agg = aggregate(ranks)
    assert agg["throttled"] == 35 and agg["concurrency_min"] == 1 and agg["concurrency_settled"]["max"] == 16.0
    report = {"schema": "ingest.report/1", "ranks": ranks, "aggregate": agg}
    text = render_summary(report)
    assert "throttled by the store 35 time(s)" in text and "settled at 2.2-16" in text and "fewest 1" in text
    assert "2.2/16" in text  # the rank's own row
    old = [{k: v for k, v in r.items() if "throttl" not in k and "concurrency" not in k} for r in ranks]
    assert "throttled by the store" not in render_summary({"ranks": old, "aggregate": aggregate(old)})
