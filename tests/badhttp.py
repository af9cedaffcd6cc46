"""A real threaded HTTP server on a free loopback port that serves one object with Range
support, and misbehaves on demand (fsspec's conftest idea), switched per request.

Persistent misbehaviour (`.mode`): ignore Range, send the wrong Content-Range, cut every body
short. One-shot misbehaviour, consumed request by request: `.fail_next` (error statuses),
`.short_next` (half a body then a clean close), `.reset_next` (half a body then a TCP RST),
`.stall_next` (half a body, a pause of `.stall_s`, then the rest), and `.fail_every` (every
k-th request fails). `.etag` makes it send an ETag and honour If-Match like S3.
"""
from __future__ import annotations

import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d+)-(\d+)")

# The <Code> an S3 store puts in the XML body of each error status (SlowDown is opt-in).
S3_ERROR_CODES = {403: "AccessDenied", 404: "NoSuchKey", 412: "PreconditionFailed", 416: "InvalidRange",
                  429: "TooManyRequests", 500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable",
                  504: "GatewayTimeout"}


class _QuietServer(ThreadingHTTPServer):
    """Clients that hang up mid-reply are what these tests are about: no tracebacks for them."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


def handler_for(serve):
    """A quiet HTTP/1.1 request handler class whose GETs are answered by serve(handler)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            serve(self)

    return Handler


class BadHttpServer:
    """Serves `data` at any path.

    mode: None (behave), "ignore_range", "wrong_range", "short_body" or "interim" (an interim
        100 reply carrying a wrong Content-Range and ETag before the real one), for every request.
    fail_next: statuses for the next requests, e.g. [503, 503]; an entry (503, "SlowDown")
        also sets the S3 error code in the body (default codes: S3_ERROR_CODES).
    fail_every: k > 0 answers every k-th request (by `.requests`) with fail_every_status.
    short_next / reset_next / stall_next: how many of the next ranged replies send half
        their body and then close cleanly / reset the connection (after reset_after_s) /
        pause stall_s seconds before the rest.
    etag: when set, sent as ETag; If-Match with another value gets 412 unless
        honour_if_match is False (a store that ignores it).
    bytes_sent counts body bytes written (to show a refused body was not streamed);
    requests counts requests; log holds one dict per request (range, if_match, status, fault).
    """

    def __init__(self, data: bytes):
        self.data = data
        self.mode = None
        self.fail_next: list = []
        self.fail_every = 0
        self.fail_every_status = 503
        self.short_next = 0
        self.reset_next = 0
        self.stall_next = 0
        self.stall_s = 2.0
        self.reset_after_s = 0.2
        self.etag: str | None = None
        self.honour_if_match = True
        self.bytes_sent = 0
        self.requests = 0
        self.log: list[dict] = []
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), handler_for(self._serve))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address
        return f"http://{host}:{port}/bucket/cube.fits?X-Amz-Signature=secret"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()

    def faults(self) -> list[str]:
        """The misbehaviour of each request that misbehaved, in order (e.g. ["503", "short"])."""
        with self._lock:
            return [entry["fault"] for entry in self.log if entry["fault"]]

    # -- one request ---------------------------------------------------------------------------
    def _write(self, handler, body: bytes) -> None:
        try:
            for pos in range(0, len(body), 1 << 16):
                handler.wfile.write(body[pos : pos + (1 << 16)])
                with self._lock:
                    self.bytes_sent += len(body[pos : pos + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _decide(self, handler) -> tuple[dict, object]:
        """Under the lock: log this request and pick its one-shot misbehaviour, if any."""
        with self._lock:
            self.requests += 1
            entry = {"range": handler.headers.get("Range"), "if_match": handler.headers.get("If-Match"),
                     "status": None, "fault": None}
            self.log.append(entry)
            if self.fail_next:
                return entry, self.fail_next.pop(0)
            if self.fail_every and self.requests % self.fail_every == 0:
                return entry, self.fail_every_status
            if not _RANGE.match(entry["range"] or "") or self.mode == "ignore_range":
                return entry, None
            for name in ("short_next", "reset_next", "stall_next"):
                if getattr(self, name):
                    setattr(self, name, getattr(self, name) - 1)
                    return entry, name.removesuffix("_next")
            return entry, None

    def _error(self, handler, entry: dict, status: int, code: str | None) -> None:
        code = code or S3_ERROR_CODES.get(status, "")
        body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
        entry["status"] = status
        handler.send_response(status)
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        self._write(handler, body)

    def _serve(self, handler) -> None:
        entry, fault = self._decide(handler)
        if isinstance(fault, (int, tuple)):
            status, code = fault if isinstance(fault, tuple) else (fault, None)
            entry["fault"] = str(status) if code is None else f"{status} {code}"
            self._error(handler, entry, status, code)
            return
        if self.etag and self.honour_if_match and entry["if_match"] not in (None, self.etag):
            self._error(handler, entry, 412, None)
            return
        m = _RANGE.match(entry["range"] or "")
        total = len(self.data)
        if self.mode == "ignore_range" or not m:
            entry["status"] = 200
            handler.send_response(200)
            handler.send_header("Content-Length", str(total))
            handler.end_headers()
            self._write(handler, self.data)
            return
        first, last = int(m.group(1)), min(int(m.group(2)), total - 1)
        if first >= total:
            self._error(handler, entry, 416, None)
            return
        body = self.data[first : last + 1]
        claimed = (first + 1, last + 1) if self.mode == "wrong_range" else (first, last)
        entry["status"] = 206
        if self.mode == "interim":  # only the final reply's headers may count
            handler.wfile.write(b"HTTP/1.1 100 Continue\r\nContent-Range: bytes 0-0/1\r\n"
                                b'ETag: "interim"\r\n\r\n')
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {claimed[0]}-{claimed[1]}/{total}")
        handler.send_header("Content-Length", str(len(body)))
        if self.etag:
            handler.send_header("ETag", self.etag)
        if self.mode == "short_body":
            fault = "short"
        entry["fault"] = fault
        if fault == "short":
            handler.send_header("Connection", "close")
            handler.end_headers()
            self._write(handler, body[: len(body) // 2])
            handler.close_connection = True
            return
        handler.end_headers()
        if fault == "reset":
            self._write(handler, body[: len(body) // 2])
            handler.wfile.flush()
            time.sleep(self.reset_after_s)  # the client has the half by then: no race with the RST
            _reset(handler)
            return
        if fault == "stall":
            self._write(handler, body[: len(body) // 2])
            handler.wfile.flush()
            time.sleep(self.stall_s)
            self._write(handler, body[len(body) // 2 :])
            return
        self._write(handler, body)


def _reset(handler) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), as a crashed proxy or NAT would."""
    sock = handler.connection
    try:
        handler.wfile.flush()
    except OSError:
        pass
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # The makefile()s hold references to the socket: it is only really closed (and the RST
    # sent) once they are closed too. socketserver's later shutdown/close are then no-ops.
    handler.rfile.close()
    handler.wfile.close()
    sock.close()
    handler.close_connection = True
