"""Real servers for tests/test_environment.py: versitygw behind its own TLS with a private CA, and
tinyproxy as a forward proxy whose log says which requests went through it.

`make_pki(dir, hosts)` writes ca.pem, server.pem, server.key: a CA made at test time and a server
certificate for 127.0.0.1, localhost and the given DNS names (a virtual-host bucket's
`BUCKET.localhost`: libcurl resolves *.localhost to loopback itself, RFC 6761).
"""
from __future__ import annotations

import http.client
import os
import secrets
import socket
import ssl
import subprocess
import tempfile
import time

from ingest.testbed.localserver import find_tool, stop_process
from tests.tlsserver import make_ca_and_cert

HOST = "127.0.0.1"
REGION = "us-east-1"
START_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def make_pki(directory, dns_names=()) -> dict[str, str]:
    """A private CA and a server certificate it signed; {'ca', 'server', 'key'} -> paths."""
    return make_ca_and_cert(directory, dns_names)


class TlsS3Server:
    """versitygw serving HTTPS with a certificate from `certs` (make_pki), virtual-host buckets
    under localhost too; a context manager. `client()` is plain boto3, configured explicitly
    (no environment), for setting up and checking what the tests read."""

    def __init__(self, certs: dict[str, str], root: str):
        self.certs, self.root = certs, root
        self.access_key = "ingest" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(30)
        self.port = free_port()
        self._proc = None
        self._log = None

    @property
    def endpoint_url(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def host_endpoint_url(self) -> str:
        """The same server by name, so a virtual-host bucket is BUCKET.localhost."""
        return f"https://localhost:{self.port}"

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": REGION}

    def __enter__(self) -> "TlsS3Server":
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VGW_", "ROOT_"))}
        env.update(ROOT_ACCESS_KEY=self.access_key, ROOT_SECRET_KEY=self.secret_key)
        cmd = [find_tool("versitygw"), "--port", f"{HOST}:{self.port}", "--region", REGION, "--keep-alive", "--quiet",
               "--cert", self.certs["server"], "--key", self.certs["key"], "--virtual-domain", "localhost",
               "posix", self.root]
        self._log = tempfile.TemporaryFile(prefix="ingest-vgw-tls-")
        self._proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        context = ssl.create_default_context(cafile=self.certs["ca"])
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._log.seek(0)
                output = self._log.read().decode(errors="replace")
                self.__exit__()
                raise RuntimeError(f"versitygw (TLS) on {HOST}:{self.port} did not start: {output}")
            conn = http.client.HTTPSConnection(HOST, self.port, timeout=0.5, context=context)
            try:
                conn.request("GET", "/")
                conn.getresponse().read()
                return self
            except OSError:
                time.sleep(0.02)
            finally:
                conn.close()

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            stop_process(self._proc)
        if self._log is not None:
            self._log.close()

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=REGION, verify=self.certs["ca"],
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, proxies={}))


class TinyProxy:
    """tinyproxy on a free loopback port with its own config; `requests()` lists the request lines
    it logged ("CONNECT 127.0.0.1:PORT HTTP/1.1", "GET http://... HTTP/1.1")."""

    def __init__(self, directory):
        directory = os.fspath(directory)
        self.port = free_port()
        self.log_path = os.path.join(directory, "tinyproxy.log")
        self.conf_path = os.path.join(directory, "tinyproxy.conf")
        with open(self.conf_path, "w") as fh:
            # No ConnectPort lines: CONNECT is allowed to any port (the test servers' are random).
            fh.write(f'Port {self.port}\nListen {HOST}\nAllow {HOST}\nTimeout 30\nMaxClients 64\n'
                     f'LogFile "{self.log_path}"\nLogLevel Connect\nDisableViaHeader Yes\n')
        self._proc = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> "TinyProxy":
        binary = "/usr/bin/tinyproxy" if os.access("/usr/bin/tinyproxy", os.X_OK) else "tinyproxy"
        self._proc = subprocess.Popen([binary, "-d", "-c", self.conf_path], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection((HOST, self.port), timeout=0.5).close()
                return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"tinyproxy on {HOST}:{self.port} did not start (config {self.conf_path})")
                time.sleep(0.02)

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            stop_process(self._proc)

    def requests(self) -> list[str]:
        try:
            with open(self.log_path, errors="replace") as fh:
                lines = fh.read().splitlines()
        except FileNotFoundError:
            return []
        marker = "): "
        return [line.split(marker, 1)[1] for line in lines if "Request (file descriptor" in line and marker in line]
