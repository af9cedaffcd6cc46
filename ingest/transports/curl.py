"""The native engine: range GETs issued by libcurl (pycurl), many in flight from one thread.

urllib3 spends ~0.4-0.5 ms of client CPU per ranged GET and boto3 ~3 ms; libcurl's multi
interface spends a fraction of that, so the planner can afford the many small requests of a
low-waste plan. The contract is the presigned transport's (it subclasses it): 206 and
Content-Range checked, a 200 refused without streaming it, If-Match pinning, retryable faults
reported with the bytes that did arrive (so the executor resumes them), expired URLs re-signed,
the URL redacted everywhere. For the S3 method it reads through a URL it presigns itself with
boto3's standard credential chain (SigV4 query signing, once per hour, not once per request).
Endpoint, addressing style, CA and proxy are ingest.transports.environment's, as for every engine.

Each body is written by libcurl's write callback straight into its place in the destination
(the output array or a mapped window of the staged file); the one copy beyond the kernel's is
pycurl handing libcurl's receive buffer to Python.

One module: CurlSession drives the handles CurlTransport makes and checks (new_handle, prepare,
outcome, the _Transfer each carries), and CurlS3Transport only signs a URL for it; split, each part
would need the others' private transfer state.
"""
from __future__ import annotations

import re
import select
import ssl
import threading
import time

from ingest.errors import RangeNotSupportedError, RetryableError, TransportError
from ingest.transports.presign import parse_s3_uri, presign_url
from ingest.redact import scrub
from ingest.transports.base import BULK_READ_BYTES, ObjectInfo, Session
from ingest.transports.environment import Environment, resolve
from ingest.transports.http import HttpTransport
from ingest.transports.httpbody import check_content_range, range_header

try:  # an optional engine: without pycurl, ingest reads with urllib3 and boto3
    import pycurl
except ImportError:  # pragma: no cover - exercised on machines without the wheel
    pycurl = None

RECEIVE_BUFFER_BYTES = 512 << 10  # libcurl's per-transfer buffer: fewer, larger write callbacks
ERROR_DETAIL_BYTES = 1024  # of a refused reply's body, kept for its S3 error code
SELF_SIGNED_EXPIRES_S = 3600  # the S3 method's own presigned URL; re-signed when it expires
_STATUS_LINE = re.compile(rb"^HTTP/[\d.]+ (\d{3})")
_KEPT_HEADERS = frozenset((b"content-range", b"etag", b"last-modified"))
_KEPT_INITIALS = frozenset(name[:1] for kept in _KEPT_HEADERS for name in (kept, kept.upper()))
# libcurl error numbers (curl/curl.h) by what the executor should do about them.
_RESET = {16, 52, 55, 56, 92}  # HTTP2, GOT_NOTHING, SEND_ERROR, RECV_ERROR, HTTP2_STREAM
_TRUNCATED = {18}  # PARTIAL_FILE: the connection closed before Content-Length bytes
_CONNECT = {5, 6, 7}  # COULDNT_RESOLVE_PROXY, COULDNT_RESOLVE_HOST, COULDNT_CONNECT
_TIMEOUT = {28}
_EPOLL_IN = select.EPOLLIN | select.EPOLLHUP  # a peer's close is read as such by libcurl
_TLS = {35, 51, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91}


def native_engine_error() -> str | None:
    """Why the native engine cannot run here (None: it can)."""
    if pycurl is None:
        return "pycurl is not installed (pip install pycurl)"
    features = pycurl.version_info()[4]
    if not features & pycurl.VERSION_SSL:
        return f"libcurl has no TLS support ({pycurl.version})"
    return None


def engine_version() -> str:
    return pycurl.version if pycurl is not None else "absent"


def _default_ca_file() -> str | None:
    """The system's CA bundle, as Python's ssl finds it: the libcurl inside the wheel was built
    elsewhere and may look for one at a path this machine does not have."""
    paths = ssl.get_default_verify_paths()
    return paths.cafile or paths.openssl_cafile


class _Transfer:
    """One range GET's state, filled by libcurl's callbacks on whichever thread drives it."""

    __slots__ = ("buffer", "nbytes", "offset", "url", "pos", "lines", "status", "headers", "detail", "error",
                 "active_s")

    def __init__(self, buffer: memoryview, offset: int, url: str):
        self.buffer, self.nbytes, self.offset, self.url = buffer, len(buffer), offset, url
        self.pos = 0
        self.lines: list[bytes] = []  # header lines; HEADERFUNCTION is their append (no Python frame)
        self.status = 0  # 0 until the first body bytes (or the end) make us read the headers
        self.headers: dict[bytes, str] = {}  # the final reply's headers of _KEPT_HEADERS, by lower-case name
        self.detail = bytearray()  # a refused reply's body
        self.error: Exception | None = None  # why the write callback stopped the transfer
        self.active_s = time.monotonic()  # when bytes last arrived (or the request started)

    def write(self, data: bytes):
        self.active_s = time.monotonic()
        if not self.status:
            self.read_headers()
        n = len(data)
        if self.status != 206:
            if self.status == 200:  # the whole object is coming: stop at once
                return 0
            self.detail += data[: max(0, ERROR_DETAIL_BYTES - len(self.detail))]
            return None
        end = self.pos + n
        if end > self.nbytes:
            self.error = TransportError(f"reply to the range at {self.offset} is longer than the {self.nbytes} "
                                        "bytes asked for")
            return 0
        self.buffer[self.pos:end] = data
        self.pos = end
        return None

    def read_headers(self) -> None:
        """Status and kept headers of the final reply, in one pass back from the last line to its
        status line (an interim reply's headers, before it, do not count). Once per request:
        a regex per line per header cost ~10 µs of a ~100-120 µs request."""
        headers: dict[bytes, str] = {}
        for line in reversed(self.lines):
            if line[:1] in _KEPT_INITIALS:  # most of a reply's ~14 lines are passed over here
                name, _colon, value = line.partition(b":")
                name = name.lower()
                if name in _KEPT_HEADERS and name not in headers:  # the last value of a repeated header
                    headers[name] = value.strip().decode("latin-1")
            elif line.startswith(b"HTTP/"):
                m = _STATUS_LINE.match(line)
                self.status = int(m.group(1)) if m else 0
                break
        self.headers = headers


def _final_header(lines: list[bytes], name: bytes) -> str:
    """The final reply's header `name` (lower case) from a transfer's raw header lines, "" when
    it has none. Only where a reply is looked at once (_stat): reads keep _KEPT_HEADERS alone."""
    for line in reversed(lines):
        if line.startswith(b"HTTP/"):
            break
        key, _colon, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return ""


class CurlTransport(HttpTransport):
    """Range GETs of a presigned URL by libcurl; `concurrent`: many in flight from one thread."""

    concurrent = True
    engine = "native"

    def __init__(self, source: str, *, threads: int = 1, connect_timeout_s: float = 10.0,
                 read_timeout_s: float = 60.0, verify_tls: bool = True, ca_bundle: str | None = None,
                 refresh_url=None, environment: Environment | None = None, **_ignored):
        problem = native_engine_error()
        if problem:
            raise TransportError(f"engine: the native engine cannot run: {problem}")
        # The parent's urllib3 pool carries the bulk reads (see read_into), one connection a thread;
        # it resolves the environment (CA, proxy) that both pools then share.
        super().__init__(source, threads=threads, connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s,
                         verify_tls=verify_tls, ca_bundle=ca_bundle, refresh_url=refresh_url,
                         environment=environment)
        verify_tls, ca_bundle = self.environment.tls_for(source)
        self.threads = threads
        # The read timeout is the session's (no bytes for this long): libcurl's own low-speed
        # check averages over seconds and lets a stall in mid-body go by.
        self.read_timeout_s = read_timeout_s
        self._options = [
            (pycurl.NOSIGNAL, 1),
            (pycurl.CONNECTTIMEOUT_MS, max(1, int(connect_timeout_s * 1000))),
            (pycurl.SSL_VERIFYPEER, 1 if verify_tls else 0),
            (pycurl.SSL_VERIFYHOST, 2 if verify_tls else 0),
            (pycurl.BUFFERSIZE, RECEIVE_BUFFER_BYTES),
            (pycurl.TCP_NODELAY, 1),
            (pycurl.FOLLOWLOCATION, 0),
            (pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS),
        ]
        ca_file = ca_bundle or (_default_ca_file() if verify_tls else None)
        if ca_file:
            self._options.append((pycurl.CAINFO, ca_file))
        # Always set: libcurl would otherwise read the proxy variables itself, and "" is libcurl's
        # "no proxy, whatever the environment says" (no_proxy matched, or none configured), so the
        # decision is the one the urllib3 pool and boto3 were given.
        self._options.append((pycurl.PROXY, self.environment.proxy_for(source) or ""))
        self._local = threading.local()  # read_into: one easy handle (and connection) per thread
        self._handles: list = []
        self._sessions: list = []
        self._handles_lock = threading.Lock()

    # -- handles and transfers -------------------------------------------------------------------
    def new_handle(self):
        handle = pycurl.Curl()
        for option, value in self._options:
            handle.setopt(option, value)
        with self._handles_lock:
            self._handles.append(handle)
        return handle

    def prepare(self, handle, buffer: memoryview, offset: int) -> _Transfer:
        """Point `handle` at the range [offset, offset + len(buffer)) and `buffer`."""
        transfer = _Transfer(buffer, offset, self.source)
        headers = ["Range: " + range_header(offset, len(buffer))]
        if self._info is not None and self._info.etag:
            headers.append("If-Match: " + self._info.etag)  # never mix two versions of the object
        handle.setopt(pycurl.URL, transfer.url)
        handle.setopt(pycurl.HTTPHEADER, headers)
        handle.setopt(pycurl.HEADERFUNCTION, transfer.lines.append)
        handle.setopt(pycurl.WRITEFUNCTION, transfer.write)
        return transfer

    def outcome(self, handle, transfer: _Transfer, failure: tuple[int, str] | None) -> tuple[float, Exception | None]:
        """(seconds to first byte, the error or None) of a finished transfer; lets go of its buffer."""
        ttfb_s = handle.getinfo(pycurl.STARTTRANSFER_TIME)
        try:
            self._check(transfer, failure)
            error = None
        except (TransportError, RetryableError) as exc:
            error = exc
        finally:
            transfer.buffer = None  # the destination window may close now
        return ttfb_s, error

    def _check(self, transfer: _Transfer, failure: tuple[int, str] | None) -> None:
        if transfer.error is not None:
            raise TransportError(f"{self.display_name}: {transfer.error}")
        if not transfer.status:
            transfer.read_headers()
        status = transfer.status
        if status and status != 206:
            if status == 200:
                raise RangeNotSupportedError(
                    f"{self.display_name}: server ignored the Range header and started sending the whole "
                    f"object (status 200); refusing to stream it")
            self._refusal(status, bytes(transfer.detail).decode("utf-8", "replace"), transfer.url, transfer.offset)
        if failure is not None:
            raise self._curl_error(failure, transfer)
        check_content_range(transfer.headers.get(b"content-range"), transfer.offset, transfer.nbytes,
                            self.display_name)
        self._check_etag(transfer.headers.get(b"etag"))
        if transfer.pos != transfer.nbytes:
            raise RetryableError(f"{self.display_name}: body ended after {transfer.pos} of {transfer.nbytes} bytes "
                                 f"at offset {transfer.offset}", kind="truncated", received=transfer.pos)

    def _curl_error(self, failure: tuple[int, str], transfer: _Transfer) -> Exception:
        errno, message = failure
        message = scrub(message)
        where = f"{self.display_name}: request for bytes at {transfer.offset}"
        if errno in _TLS:
            return TransportError(f"{self.display_name}: TLS failed: {message} ({self.environment.tls_hint()})")
        kind = ("timeout" if errno in _TIMEOUT else "reset" if errno in _RESET
                else "truncated" if errno in _TRUNCATED else "connect" if errno in _CONNECT else None)
        if kind is None:
            return TransportError(f"{where} failed: curl error {errno}: {message}")
        label = {"timeout": "Timeout", "reset": "ConnectionReset", "truncated": "ShortBody",
                 "connect": "ConnectError"}[kind]
        return RetryableError(f"{where} failed after {transfer.pos} of {transfer.nbytes} bytes: {label} (curl error "
                              f"{errno}: {message})", kind=kind, received=transfer.pos)

    # -- the Transport interface -----------------------------------------------------------------
    def _stat(self) -> ObjectInfo:
        # As the urllib3 transport: a presigned URL is signed for GET only, so a 1-byte GET.
        transfer = self._one(memoryview(bytearray(1)), 0)[1]
        headers = transfer.headers
        total = check_content_range(headers.get(b"content-range"), 0, 1, self.display_name)
        if total is None:
            raise TransportError(f"{self.display_name}: server did not report the object size")
        return ObjectInfo(total, headers.get(b"etag"), headers.get(b"last-modified"),
                          server=_final_header(transfer.lines, b"server"))

    def read_into(self, buffer: memoryview, offset: int) -> float:
        """One read on this thread. A bulk read goes through the parent's urllib3 pool, which
        receives straight from the socket into `buffer` with the GIL released, so bulk reads on
        several threads copy in parallel; libcurl's callbacks would copy each body twice under
        the GIL (bench/staging.py). Requests are what libcurl makes cheap, not bytes."""
        if len(buffer) >= BULK_READ_BYTES:
            return super().read_into(buffer, offset)
        return self._one(buffer, offset)[0]

    def _one(self, buffer: memoryview, offset: int) -> tuple[float, _Transfer]:
        """One read on this thread's own one-transfer session (the same checks and timeouts as
        many in flight): (seconds to first byte, the finished transfer)."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = CurlSession(self, 1)
            with self._handles_lock:
                self._sessions.append(session)  # closed with the transport
        session.start(None, buffer, offset)
        while True:
            for _key, ttfb_s, error in session.wait(1.0):
                if error is not None:
                    raise error
                return ttfb_s, session.last

    def open_session(self, depth: int) -> "CurlSession":
        """A session for ingest.engine.multi (its caller closes it)."""
        return CurlSession(self, depth)

    def close(self) -> None:
        with self._handles_lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()
            for handle in self._handles:
                handle.close()
            self._handles.clear()
        self._local = threading.local()
        super().close()


class CurlSession(Session):
    """Up to `depth` transfers in flight on one libcurl multi handle (see ingest.engine.multi).

    With more than one in flight it is driven by libcurl's socket interface: libcurl says which
    sockets to watch for what (M_SOCKETFUNCTION) and when it next needs the clock
    (M_TIMERFUNCTION); an epoll set waits on them, and each event moves only the transfer on that
    socket. multi.select/perform rebuild an fd_set and walk every transfer on each wake, which at
    64 in flight cost ~25 % more client CPU per request; with one transfer they are the cheaper
    way (no socket bookkeeping: ~10 % less), so a one-transfer session keeps them (bench/engine.py)."""

    def __init__(self, transport: CurlTransport, depth: int):
        self.transport = transport
        self.multi = pycurl.CurlMulti()
        self.multi.setopt(pycurl.M_MAXCONNECTS, max(depth, 1))
        self._epoll = select.epoll() if depth > 1 else None
        if self._epoll is not None:
            self.multi.setopt(pycurl.M_SOCKETFUNCTION, self._watch)
            self.multi.setopt(pycurl.M_TIMERFUNCTION, self._set_timer)
        self._watched: set[int] = set()
        self._timer_due_s: float | None = None  # on time.monotonic; None: libcurl needs no timer
        self._free: list = []
        self._active: dict = {}  # handle -> (key, transfer)
        self.last: _Transfer | None = None  # the transfer finished last (its headers, for _stat)
        # Look at the clock often enough that a stall is noticed within a tenth of the timeout.
        self._tick_s = max(0.01, transport.read_timeout_s / 10)

    def start(self, key, buffer: memoryview, offset: int) -> None:
        handle = self._free.pop() if self._free else self.transport.new_handle()
        self._active[handle] = (key, self.transport.prepare(handle, buffer, offset))
        self.multi.add_handle(handle)

    def wait(self, timeout_s: float) -> list:
        """Move every transfer along; [(key, ttfb_s, error or None)] of those that ended,
        waiting up to timeout_s for the sockets when none has."""
        self._kick()  # a transfer just started: send its request before waiting for its reply
        done = self._collect()
        if done or not self._active:
            return done
        wait_s = min(timeout_s, self._tick_s)
        if self._epoll is None:
            self.multi.select(wait_s)
        else:
            if self._timer_due_s is not None:
                wait_s = max(0.0, min(wait_s, self._timer_due_s - time.monotonic()))
            for fd, events in self._epoll.poll(wait_s):
                self.multi.socket_action(fd, (pycurl.CSELECT_IN if events & _EPOLL_IN else 0)
                                         | (pycurl.CSELECT_OUT if events & select.EPOLLOUT else 0)
                                         | (pycurl.CSELECT_ERR if events & select.EPOLLERR else 0))
        self._kick()
        return self._collect() or self._stalled()

    def _kick(self) -> None:
        """Let libcurl do what it can without waiting: run its timer when due (a transfer added
        asks for it at once), or perform, on a one-transfer session."""
        if self._epoll is None:
            while self.multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
        elif self._timer_due_s is not None and time.monotonic() >= self._timer_due_s:
            self._timer_due_s = None
            self.multi.socket_action(pycurl.SOCKET_TIMEOUT, 0)

    def _watch(self, what: int, fd: int, _multi, _socketp) -> None:
        """libcurl's M_SOCKETFUNCTION: what to wait for on socket `fd` from now on."""
        if what == pycurl.POLL_REMOVE:
            if fd in self._watched:
                self._watched.discard(fd)
                try:
                    self._epoll.unregister(fd)
                except OSError:  # closed already, which took it out of the set
                    pass
            return
        mask = (select.EPOLLIN if what & pycurl.POLL_IN else 0) | (select.EPOLLOUT if what & pycurl.POLL_OUT else 0)
        try:
            if fd in self._watched:
                self._epoll.modify(fd, mask)
            else:
                self._epoll.register(fd, mask)
        except FileNotFoundError:  # the fd was closed and reused without a REMOVE between
            self._epoll.register(fd, mask)
        except FileExistsError:
            self._epoll.modify(fd, mask)
        self._watched.add(fd)

    def _set_timer(self, timeout_ms: int) -> None:
        """libcurl's M_TIMERFUNCTION: call socket_action(SOCKET_TIMEOUT) in timeout_ms (-1: never)."""
        self._timer_due_s = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000

    def _stalled(self) -> list:
        """Transfers that received nothing for read_timeout_s, ended as timeouts (resumable)."""
        limit_s = time.monotonic() - self.transport.read_timeout_s
        stalled = [h for h, (_k, t) in self._active.items() if t.active_s < limit_s]
        return [self._finish(h, (28, f"no bytes for {self.transport.read_timeout_s:g} s (read timeout)"))
                for h in stalled]

    def _collect(self) -> list:
        done = []
        while True:
            queued, ok, failed = self.multi.info_read()
            done.extend(self._finish(handle, None) for handle in ok)
            done.extend(self._finish(handle, (errno, message)) for handle, errno, message in failed)
            if not queued:
                return done

    def _finish(self, handle, failure):
        self.multi.remove_handle(handle)
        key, transfer = self._active.pop(handle)
        self._free.append(handle)
        ttfb_s, error = self.transport.outcome(handle, transfer, failure)
        self.last = transfer
        return key, ttfb_s, error

    def close(self) -> None:
        if self.multi is None:
            return
        for handle, (_key, transfer) in list(self._active.items()):
            self.multi.remove_handle(handle)
            transfer.buffer = None
            self._free.append(handle)
        self._active.clear()
        self.multi.close()
        self.multi = None
        if self._epoll is not None:
            self._epoll.close()


class CurlS3Transport(CurlTransport):
    """The S3 method on the native engine: reads through a URL it presigns itself (boto3's
    credential chain and endpoint; SigV4 query signing), re-signed when it expires."""

    name = "s3"

    def __init__(self, source: str, *, threads: int = 1, client=None, endpoint_url: str | None = None,
                 verify_tls: bool = True, ca_bundle: str | None = None, environment: Environment | None = None,
                 **options):
        bucket, key = parse_s3_uri(source)
        # One resolution for the signer and the reads: the URL is signed for the endpoint and
        # addressing style the environment names, and fetched with its CA and proxy.
        environment = environment or resolve({"endpoint_url": endpoint_url, "verify_tls": verify_tls,
                                              "ca_bundle": ca_bundle})
        if client is None:
            from ingest.transports.s3client import shared_s3_client

            client = shared_s3_client(environment=environment)

        def sign() -> str:
            return presign_url(bucket, key, SELF_SIGNED_EXPIRES_S, client=client)

        self.s3_uri = source  # before anything can name the object in a message
        super().__init__(sign(), threads=threads, refresh_url=sign, environment=environment, **options)

    @property
    def display_name(self) -> str:
        return self.s3_uri
