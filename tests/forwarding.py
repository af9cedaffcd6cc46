"""A loopback HTTP proxy in front of one store, for tests that watch or damage what passes.

Every request is read whole, handed to `on_request(method, path, body, headers)`, which returns
the (body, headers) to send on (to log a request, return them unchanged; to damage one, change
them), and forwarded; the store's answer comes back untouched but for hop-by-hop headers.
"""
from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


class ForwardingProxy:
    """Serves on `url` (127.0.0.1, a free port) and forwards to `upstream` (an http:// endpoint)."""

    def __init__(self, upstream: str, on_request=None):
        target = urlsplit(upstream)
        self.upstream = (target.hostname, target.port)
        self.on_request = on_request or (lambda method, path, body, headers: (body, headers))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue answered for botocore's Expect

            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                body, headers = proxy.on_request(self.command, self.path, body, headers)
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    reply = upstream.getresponse()
                    data = reply.read()
                    self.send_response(reply.status, reply.reason)
                    for name, value in reply.getheaders():
                        if name.lower() not in HOP_HEADERS and name.lower() != "content-length":
                            self.send_header(name, value)
                    length = reply.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                    self.send_header("Content-Length", length or "0")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
