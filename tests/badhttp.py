"""A real threaded HTTP server on a free loopback port that serves one object with Range
support, and misbehaves on demand (fsspec's conftest idea): ignore Range, send the wrong
Content-Range, cut the body short, or answer with an error status for the next N requests."""
from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


class BadHttpServer:
    """Serves `data` at any path. Set `.mode` to one of: None (behave), "ignore_range",
    "wrong_range", "short_body"; `.fail_next = [503, 503]` answers the next requests with those
    statuses. `.bytes_sent` counts body bytes written (to show a refused body was not streamed)."""

    def __init__(self, data: bytes):
        self.data = data
        self.mode = None
        self.fail_next: list[int] = []
        self.bytes_sent = 0
        self.requests = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                outer._serve(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

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

    def _write(self, handler, body: bytes) -> None:
        try:
            for pos in range(0, len(body), 1 << 16):
                handler.wfile.write(body[pos : pos + (1 << 16)])
                with self._lock:
                    self.bytes_sent += len(body[pos : pos + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _serve(self, handler) -> None:
        with self._lock:
            self.requests += 1
            status = self.fail_next.pop(0) if self.fail_next else None
        if status is not None:
            body = b"<Error><Code>SlowDown</Code></Error>"
            handler.send_response(status)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        m = _RANGE.match(handler.headers.get("Range", ""))
        total = len(self.data)
        if self.mode == "ignore_range" or not m:
            handler.send_response(200)
            handler.send_header("Content-Length", str(total))
            handler.end_headers()
            self._write(handler, self.data)
            return
        first, last = int(m.group(1)), min(int(m.group(2)), total - 1)
        body = self.data[first : last + 1]
        claimed = (first + 1, last + 1) if self.mode == "wrong_range" else (first, last)
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {claimed[0]}-{claimed[1]}/{total}")
        handler.send_header("Content-Length", str(len(body)))
        if self.mode == "short_body":
            handler.send_header("Connection", "close")
            handler.end_headers()
            self._write(handler, body[: len(body) // 2])
            handler.close_connection = True
            return
        handler.end_headers()
        self._write(handler, body)
