"""Toxiproxy launcher and client against a real toxiproxy-server and an in-test HTTP upstream."""
import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3

from ingest.errors import ConfigError, IngestError
from ingest.testbed.toxiproxy import PROFILES, SERVER_NAME, ToxiproxyServer, find_tool

BODY = bytes(range(256)) * 400  # 100 KiB with a recognisable pattern


class BodyHandler(BaseHTTPRequestHandler):
    """GET anything -> 200 with BODY and its Content-Length."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass  # keep test output clean


class QuietServer(ThreadingHTTPServer):
    """Peers cut off by a toxic are expected here: no traceback for them."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


@contextlib.contextmanager
def serve_http():
    """A threaded HTTP server on a free loopback port; yields "127.0.0.1:PORT", joins on exit."""
    server = QuietServer(("127.0.0.1", 0), BodyHandler)
    thread = threading.Thread(target=server.serve_forever, name="upstream", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert not thread.is_alive()


def refuses_connections(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def get(address: str, **kwargs):
    """One GET over a fresh connection (so connection reuse never hides a toxic); (response, s)."""
    host, port = address.rsplit(":", 1)
    with urllib3.HTTPConnectionPool(host, int(port), maxsize=1, retries=False,
                                    timeout=urllib3.Timeout(connect=2, read=10)) as pool:
        start = time.perf_counter()
        resp = pool.request("GET", "/", **kwargs)
        return resp, time.perf_counter() - start


@pytest.fixture(scope="module")
def upstream():
    with serve_http() as address:
        yield address




@pytest.fixture
def proxy(toxiproxy, upstream, request):
    """A fresh proxy to the upstream; yields (name, listen address)."""
    name = request.node.name.replace("[", "_").replace("]", "")
    listen = toxiproxy.create_proxy(name, upstream)
    yield name, listen
    toxiproxy.delete_proxy(name)


def test_proxy_passes_the_body_through(toxiproxy, proxy, upstream):
    name, listen = proxy
    assert listen.startswith("127.0.0.1:") and listen != upstream
    resp, _ = get(listen)
    assert resp.status == 200 and resp.data == BODY


def test_latency_toxic_adds_at_least_its_delay(toxiproxy, proxy):
    name, listen = proxy
    toxiproxy.add_toxic(name, "latency", {"latency": 200})
    resp, elapsed_s = get(listen)
    assert resp.data == BODY
    assert elapsed_s >= 0.200
    toxiproxy.remove_toxic(name, "latency_downstream")
    assert toxiproxy.list_toxics(name) == []


def test_limit_data_cuts_the_body_short(toxiproxy, proxy):
    name, listen = proxy
    toxiproxy.add_toxic(name, "limit_data", {"bytes": 1000}, name="cut")
    with pytest.raises(urllib3.exceptions.ProtocolError):  # short of Content-Length
        get(listen)
    host, port = listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: upstream\r\n\r\n")
        reply = b"".join(iter(lambda: sock.recv(65536), b""))  # until the proxy closes
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200")
    assert len(reply) == 1000 and BODY.startswith(body)


def test_reset_removes_every_toxic(toxiproxy, proxy):
    name, listen = proxy
    toxiproxy.add_toxic(name, "latency", {"latency": 5000}, stream="upstream", toxicity=0.5)
    assert [t["name"] for t in toxiproxy.list_toxics(name)] == ["latency_upstream"]
    toxiproxy.reset()
    assert toxiproxy.list_toxics(name) == []
    assert get(listen)[0].data == BODY


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profiles_apply(toxiproxy, proxy, profile):
    name, listen = proxy
    added = toxiproxy.apply_profile(name, profile)
    assert sorted(t["type"] for t in toxiproxy.list_toxics(name)) == sorted(t["type"] for t in added)
    assert len(added) == len(PROFILES[profile])
    assert get(listen)[0].data == BODY


def test_bad_requests_name_what_is_wrong(toxiproxy, proxy, upstream):
    name, _ = proxy
    with pytest.raises(ConfigError, match="^profile:"):
        toxiproxy.apply_profile(name, "dialup")
    with pytest.raises(ConfigError, match="^stream:"):
        toxiproxy.add_toxic(name, "latency", {"latency": 1}, stream="sideways")
    with pytest.raises(IngestError, match="409"):
        toxiproxy.create_proxy(name, upstream)
    with pytest.raises(IngestError, match="404"):
        toxiproxy.remove_toxic(name, "no_such_toxic")


def test_servers_stop_cleanly(upstream):
    try:
        find_tool(SERVER_NAME)
    except IngestError as exc:  # scripts/setup.sh installs it: missing is a failure, not a skip
        pytest.fail(str(exc), pytrace=False)
    with serve_http() as address:
        assert get(address)[0].data == BODY
    assert refuses_connections(address)
    with ToxiproxyServer() as server:
        listen = server.create_proxy("short_lived", upstream)
        assert get(listen)[0].data == BODY
    assert server.process.returncode is not None
    assert refuses_connections(server.api_url.removeprefix("http://"))
    assert refuses_connections(listen)
    server.stop()  # idempotent


def test_a_server_that_dies_at_startup_is_reported():
    with pytest.raises(IngestError, match="exited with status 1"):
        ToxiproxyServer(binary="/bin/false").start()


def test_missing_tool_says_run_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("INGEST_TOOLS_DIR", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(IngestError, match="toxiproxy-server.*scripts/setup.sh"):
        find_tool(SERVER_NAME)
