"""Toxiproxy launcher and client: emulate slow or faulty links between ingest and a store.

Kernel netem is not available on the project's machines, so link shaping is done in user
space by Toxiproxy (a TCP proxy whose "toxics" add latency, cap bandwidth or cut streams),
driven through its plain HTTP/JSON control API.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time

import urllib3

from ingest.errors import ConfigError, IngestError
from ingest.testbed.localserver import find_tool  # the project's one tool finder (also re-exported here)
from ingest.testbed.signals import signals_held

SERVER_NAME = "toxiproxy-server"

# Named link profiles for benchmarks, applied to a proxy's downstream (store -> client) stream.
# Toxiproxy's latency toxic delays every chunk crossing it in one direction; on downstream only
# it adds its delay once per request/response exchange (pipelined, so throughput is unchanged).
# The bandwidth toxic's `rate` is in kB/s (1000 bytes) and applies PER CONNECTION: N parallel
# connections get N times the rate, so these profiles emulate a per-stream link, not a shared
# pipe. Measured here (one urllib3 stream, loopback upstream): the toxic falls ~12% short above
# ~50 MB/s (rate 75000 gave 66-68 MB/s, 85000 gives ~75) and is exact at 12.5 MB/s.
PROFILES: dict[str, list[dict]] = {
    "loopback": [],
    # Acacia (Pawsey object store) from Setonix, seed 001: ~600 Mbit/s per stream and 1.95 ms
    # per small ranged GET. A 1 ms toxic measured 1.7-1.9 ms per 100-byte GET end to end here
    # (0.7 ms without toxics; a 2 ms toxic gave 3.1 ms), so 1 ms reproduces seed 001.
    "acacia": [
        {"type": "latency", "attributes": {"latency": 1, "jitter": 0}},
        {"type": "bandwidth", "attributes": {"rate": 85_000}},  # measured ~75 MB/s = 600 Mbit/s
    ],
    # Wide-area link, seed 004: 100 ms per request (measured 102 ms), 100 Mbit/s per stream.
    "wan": [
        {"type": "latency", "attributes": {"latency": 100, "jitter": 0}},
        {"type": "bandwidth", "attributes": {"rate": 12_500}},  # measured 12.4 MB/s = 100 Mbit/s
    ],
}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; racy but fine on loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ToxiproxyServer:
    """`with ToxiproxyServer() as tp:` runs toxiproxy-server on 127.0.0.1:port (default: a free one)."""

    def __init__(self, port: int | None = None, binary: str | None = None,
                 startup_timeout_s: float = 10.0):
        self.host = "127.0.0.1"
        self.port = port
        self.binary = binary
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None
        self._log = None
        self._http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=2.0, read=10.0),
                                         retries=False)

    @property
    def api_url(self) -> str:
        """Base URL of the control API, e.g. http://127.0.0.1:8474."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> "ToxiproxyServer":
        """Start the server and wait (up to startup_timeout_s, default 10 s) for GET /version."""
        binary = self.binary or find_tool(SERVER_NAME)
        self.port = self.port or free_port(self.host)
        # Its log goes to a file: it logs every connection, and a full pipe would stall it.
        self._log = tempfile.TemporaryFile(prefix="toxiproxy-", suffix=".log")
        with signals_held():  # a kill mid-start must not leave it running, owned by nobody
            self.process = subprocess.Popen([binary, "-host", self.host, "-port", str(self.port)],
                                            stdin=subprocess.DEVNULL, stdout=self._log,
                                            stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:  # its own errors, and a signal's SystemExit while it waits
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self.process.poll() is not None:
                raise IngestError(f"{SERVER_NAME}: exited with status {self.process.returncode} "
                                  f"on port {self.port}: {self._log_tail()}")
            try:
                if self._http.request("GET", self.api_url + "/version").status == 200:
                    return
            except urllib3.exceptions.HTTPError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise IngestError(f"{SERVER_NAME}: API on port {self.port} not up after "
                                  f"{self.startup_timeout_s} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s); safe to call twice."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._http.clear()

    def __enter__(self) -> "ToxiproxyServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _log_tail(self, nbytes: int = 2000) -> str:
        self._log.seek(0, os.SEEK_END)
        self._log.seek(max(0, self._log.tell() - nbytes))
        return self._log.read().decode("utf-8", "replace").strip()

    def _api(self, method: str, path: str, body: dict | None = None):
        """One control-API call; any non-2xx answer -> IngestError naming the call."""
        data = None if body is None else json.dumps(body).encode()
        resp = self._http.request(method, self.api_url + path, body=data,
                                  headers={"Content-Type": "application/json"})
        if not 200 <= resp.status < 300:
            raise IngestError(f"toxiproxy {method} {path}: HTTP {resp.status}: "
                              f"{resp.data.decode('utf-8', 'replace').strip()}")
        return resp.json() if resp.data else None

    def create_proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> str:
        """Proxy `name` to upstream "host:port"; returns its listen "127.0.0.1:PORT" (default: free port)."""
        # Port 0 lets toxiproxy bind any free port and report it: no pick-then-bind race.
        reply = self._api("POST", "/proxies", {"name": name, "listen": listen,
                                               "upstream": upstream, "enabled": True})
        return reply["listen"]

    def delete_proxy(self, name: str) -> None:
        """Remove proxy `name` and close its connections."""
        self._api("DELETE", f"/proxies/{name}")

    def add_toxic(self, proxy: str, type: str, attributes: dict, stream: str = "downstream",
                  toxicity: float = 1.0, name: str | None = None) -> dict:
        """Add a toxic (latency ms, bandwidth rate kB/s per connection, limit_data bytes, ...); returns it."""
        if stream not in ("downstream", "upstream"):
            raise ConfigError(f"stream: {stream!r} is not 'downstream' or 'upstream'")
        if not 0.0 <= toxicity <= 1.0:
            raise ConfigError(f"toxicity: {toxicity!r} is not a probability in [0, 1]")
        body = {"name": name or f"{type}_{stream}", "type": type, "stream": stream,
                "toxicity": toxicity, "attributes": attributes}
        return self._api("POST", f"/proxies/{proxy}/toxics", body)

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Remove toxic `name` (default names are TYPE_STREAM, e.g. latency_downstream)."""
        self._api("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def list_toxics(self, proxy: str) -> list[dict]:
        """The toxics currently on `proxy` (name, type, stream, toxicity, attributes)."""
        return self._api("GET", f"/proxies/{proxy}/toxics")

    def reset(self) -> None:
        """Re-enable every proxy and remove every toxic."""
        self._api("POST", "/reset")

    def apply_profile(self, proxy: str, name: str) -> list[dict]:
        """Add the toxics of link profile `name` (a key of PROFILES) to `proxy`; returns them."""
        if name not in PROFILES:
            raise ConfigError(f"profile: {name!r} is not one of {sorted(PROFILES)}")
        return [self.add_toxic(proxy, t["type"], dict(t["attributes"]),
                               stream=t.get("stream", "downstream"))
                for t in PROFILES[name]]
