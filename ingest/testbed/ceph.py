"""Ceph's RADOS Gateway on loopback: the store Pawsey's Acacia runs, as a second real test store.

`CephRGW` starts a throwaway one-node Ceph as plain processes: a monitor, one OSD whose objects
live in its RAM (memstore, capped at `memstore_bytes`) and radosgw serving S3 over HTTP and over
HTTPS with a CA made at start (ingest.testbed.certs). Every path a daemon or a client tool would
use (data, keyring, admin sockets, pid files, logs, run dir, crash dir) points into one temp dir,
and every command is given that dir's ceph.conf: no Ceph state outside it is read or written (no
systemd unit, /etc/ceph, /var/lib/ceph, /var/run/ceph or /var/log/ceph), so it runs beside a
real cluster or another test bed. Ports are free loopback ports chosen at start.

Teardown: `stop()` (or leaving the `with` block, or interpreter exit) kills the daemons and
removes the dir. The data is throwaway, so SIGKILL, not a shutdown during which the memstore OSD
would write its RAM out. Started from the main thread, each daemon also gets SIGKILL when this
process dies however it dies (`setpriv --pdeathsig`), so a killed test run leaves no cluster.

`python -m ingest.testbed.ceph` runs one by hand: it prints the endpoints, the keys and the
`export` lines, and waits for Ctrl-C. Debian packages: ceph-mon ceph-osd radosgw ceph-common
(scripts/setup.sh installs them).

One module: CephRGW is one object around one temp dir's daemons, its start, waits, tools and
teardown all using the same paths, config and process list.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref

from ingest.errors import ConfigError, IngestError
from ingest.testbed.cephconf import RGW_NAME, cephx_key, conf_text, keyring_text, log_tail
from ingest.testbed.certs import make_ca_and_cert
from ingest.testbed.localserver import REGION
from ingest.testbed.s3store import LoopbackStore
from ingest.testbed.signals import UNWIND_SIGNALS, signals_held, unwind_on_signals
from ingest.testbed.toxiproxy import free_port

TOOLS = ("ceph-mon", "ceph-osd", "radosgw", "ceph", "radosgw-admin", "monmaptool")
SETUP_HINT = "run scripts/setup.sh (apt: ceph-mon ceph-osd radosgw ceph-common)"
DEFAULT_MEMSTORE_BYTES = 2 * 1024**3
START_ATTEMPTS = 3  # a free port taken by someone else between our probe and the daemon's bind
_APPLY_TIMEOUT_S = 30.0  # the monitor's push of a changed option to radosgw
_COMMAND_TIMEOUT_S = 60.0
_BIND_ERRORS = ("Address already in use", "failed to bind")


def missing_tool() -> str | None:
    """The first Ceph executable not on PATH, as a one-line error with the setup hint; None: all there."""
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} not found: {SETUP_HINT}"
    return None


def _kill_all(procs: list, root: str | None) -> None:
    """SIGKILL every daemon and remove the dir; safe to call twice (also run at interpreter exit)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass  # a daemon stuck in the kernel; nothing more a signal can do
    procs.clear()
    if root:
        shutil.rmtree(root, ignore_errors=True)


class CephRGW(LoopbackStore):
    """A one-node Ceph with radosgw on 127.0.0.1, HTTP and HTTPS; a context manager (start on
    enter, torn down on exit). The loopback stores' client surface (ingest.testbed.s3store: client(),
    make_bucket(), env(), https=True for the TLS endpoint), plus set_config."""

    def __init__(self, memstore_bytes: int = DEFAULT_MEMSTORE_BYTES, startup_timeout_s: float = 90.0,
                 request_log: bool = False):
        """memstore_bytes: the OSD's RAM for objects (default 2 GiB); startup_timeout_s: the whole start;
        request_log: radosgw logs every request (its log grows without bound in benchmarks)."""
        self.memstore_bytes = memstore_bytes
        self.startup_timeout_s = startup_timeout_s
        self.request_log = request_log
        self.region = REGION
        self.access_key = self.secret_key = ""
        self.root: str | None = None
        self.ports: dict[str, int] = {}
        self.startup_s: float | None = None  # measured: start() called to both endpoints answering
        self._procs: list[subprocess.Popen] = []
        self._daemons: dict[str, subprocess.Popen] = {}
        self._finalizer = None
        self.forget_clients()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "CephRGW":
        """Start mon, OSD and radosgw and wait until both endpoints answer requests signed with the
        user's keys. IngestError in one line: a missing tool, or the daemon that failed and its log."""
        if self.running:
            raise IngestError(f"ceph rgw: already running at {self.endpoint_url}")
        problem = missing_tool()
        if problem:
            raise IngestError(problem)
        started = time.monotonic()
        for attempt in range(START_ATTEMPTS):
            try:
                self._start_once(deadline=started + self.startup_timeout_s)
                break
            except BaseException as exc:  # Ctrl-C mid-start too: nothing half-started stays
                self.stop()
                retry = isinstance(exc, IngestError) and any(e in str(exc) for e in _BIND_ERRORS)
                if not retry or attempt + 1 == START_ATTEMPTS:
                    raise
        self.startup_s = time.monotonic() - started
        return self

    def _start_once(self, deadline: float) -> None:
        self.root = tempfile.mkdtemp(prefix="ingest-ceph-")
        self._finalizer = weakref.finalize(self, _kill_all, self._procs, self.root)
        for sub in ("mon", "osd", "rgw", "run", "log", "crash", "tls"):
            os.mkdir(os.path.join(self.root, sub))
        self.ports = {name: free_port() for name in ("mon_v2", "mon_v1", "http", "https")}
        if len(set(self.ports.values())) < len(self.ports):
            raise IngestError("ceph rgw: the kernel gave the same free port twice: Address already in use")
        self._tls = make_ca_and_cert(os.path.join(self.root, "tls"))
        osd_uuid, osd_key, fsid = str(uuid.uuid4()), cephx_key(), str(uuid.uuid4())
        self._write("keyring", keyring_text(), mode=0o600)
        self._write("ceph.conf", conf_text(self.root, fsid, self.ports, self._tls, self.memstore_bytes,
                                           self.request_log))
        self._tool("monmaptool", "--create", "--fsid", fsid, "--addv", "a",
                   f"[v2:127.0.0.1:{self.ports['mon_v2']},v1:127.0.0.1:{self.ports['mon_v1']}]", self._path("monmap"))
        self._tool("ceph-mon", "--mkfs", "-i", "a", "--monmap", self._path("monmap"))
        self._spawn("mon", "ceph-mon", "-f", "-i", "a")
        # The OSD's store is made while the monitor starts; `osd new` then waits for the monitor.
        self._tool("ceph-osd", "--mkfs", "--no-mon-config", "-i", "0", "--osd-uuid", osd_uuid,
                   "--monmap", self._path("monmap"))
        self._write("osd-new.json", f'{{"cephx_secret": "{osd_key}"}}', mode=0o600)
        self._ceph("osd", "new", osd_uuid, "0", "-i", self._path("osd-new.json"), deadline=deadline)
        with open(self._path("keyring"), "a") as fh:  # after the monitor's mkfs: `osd new` made the entity
            fh.write(f"[osd.0]\n\tkey = {osd_key}\n")
        self._spawn("osd", "ceph-osd", "-f", "-i", "0")
        self._spawn("rgw", "radosgw", "-f", "-n", f"client.rgw.{RGW_NAME}")
        self._wait_http(deadline)
        self.access_key = "ingest" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(30)
        self._tool("radosgw-admin", "user", "create", "--uid", "ingest", "--display-name", "ingest test bed",
                   "--access-key", self.access_key, "--secret", self.secret_key, deadline=deadline)
        self._wait_signed(deadline)

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _write(self, name: str, text: str, mode: int = 0o644) -> None:
        path = self._path(name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as fh:
            fh.write(text)

    def _env(self) -> dict[str, str]:
        """This process's environment without CEPH_* steering, with this cluster's conf."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}
        env["CEPH_CONF"] = self._path("ceph.conf")
        return env

    def _spawn(self, name: str, binary: str, *args: str) -> None:
        """Start daemon `name` in the foreground (-f), its own session, output to log/NAME.out."""
        cmd = [binary, "-c", self._path("ceph.conf"), *args]
        # The parent's death kills it (a SIGKILLed test run leaves no cluster). The signal goes
        # when the starting *thread* ends, so only the main thread asks for it.
        if threading.current_thread() is threading.main_thread() and shutil.which("setpriv"):
            cmd = ["setpriv", "--pdeathsig", "KILL", "--", *cmd]
        with open(self._path("log", f"{name}.out"), "wb") as out, signals_held():
            proc = subprocess.Popen(cmd, env=self._env(), cwd=self.root, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            self._procs.append(proc)  # what stop() kills
        self._daemons[name] = proc

    def _tool(self, binary: str, *args: str, deadline: float | None = None) -> str:
        """Run a Ceph command against this cluster; its stdout, or IngestError naming it and its output."""
        timeout_s = _COMMAND_TIMEOUT_S if deadline is None else max(1.0, deadline - time.monotonic())
        cmd = [binary, "-c", self._path("ceph.conf"), *args]
        try:
            done = subprocess.run(cmd, env=self._env(), cwd=self.root, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise IngestError(f"ceph rgw: `{binary} {' '.join(args[:3])}` took over {timeout_s:.0f} s; "
                              f"{self._daemon_report()}") from None
        if done.returncode != 0:
            output = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
            raise IngestError(f"ceph rgw: `{binary} {' '.join(args[:3])}` failed (status {done.returncode}): "
                              f"{_last_lines(output)}; {self._daemon_report()}")
        return done.stdout.decode("utf-8", "replace")

    def _ceph(self, *args: str, deadline: float | None = None) -> str:
        """The `ceph` admin command, giving up on the monitor at the deadline."""
        timeout_s = _COMMAND_TIMEOUT_S if deadline is None else max(1.0, deadline - time.monotonic())
        return self._tool("ceph", "--connect-timeout", str(int(timeout_s)), *args, deadline=deadline)

    def _daemon_report(self) -> str:
        """Which daemon died, with the tail of its log; or that all still run."""
        for name, proc in self._daemons.items():
            if proc.poll() is not None:
                # Ceph daemons exit with an errno (98: a port taken) and may die before their
                # log thread writes why: name the errno too.
                code = proc.returncode
                meaning = f" ({os.strerror(code)})" if 1 < code < 128 else ""
                return f"{name} exited with status {code}{meaning}: {self.log_tail(name)}"
        return f"{', '.join(self._daemons)} still running" if self._daemons else "no daemon started yet"

    def _wait_http(self, deadline: float) -> None:
        """Until radosgw answers on its HTTP port (it opens it once its pools exist)."""
        import http.client

        while True:
            self._check_alive()
            conn = http.client.HTTPConnection("127.0.0.1", self.ports["http"], timeout=1.0)
            try:
                conn.request("GET", "/")
                conn.getresponse().read()
                return
            except OSError:
                pass
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise IngestError(f"ceph rgw: radosgw did not answer HTTP on 127.0.0.1:{self.ports['http']} within "
                                  f"{self.startup_timeout_s:g} s (startup_timeout_s): {self.log_tail('rgw')}")
            time.sleep(0.1)

    def _wait_signed(self, deadline: float) -> None:
        """Until a request signed with the new user's keys succeeds on both endpoints (the user
        reaches radosgw's cache a moment after radosgw-admin returns)."""
        for url in (self.endpoint_url, self.https_endpoint):
            while True:
                self._check_alive()
                try:
                    self.client(endpoint_url=url).list_buckets()
                    break
                except Exception as exc:  # InvalidAccessKeyId until the user is seen; SSL errors
                    if time.monotonic() > deadline:
                        raise IngestError(f"ceph rgw: {url} refused requests signed with the test user's keys "
                                          f"({exc}); {self.log_tail('rgw')}") from None
                    time.sleep(0.2)

    def _check_alive(self) -> None:
        report = self._daemon_report()
        if "exited" in report:
            raise IngestError(f"ceph rgw: {report}")

    def stop(self) -> None:
        """Kill the daemons and remove the temp dir; safe to call twice."""
        if self._finalizer is not None:
            self._finalizer()
        self._finalizer = None
        self._daemons = {}
        self.forget_clients()
        self.root = None

    @property
    def running(self) -> bool:
        """True while every daemon is alive."""
        return bool(self._daemons) and all(p.poll() is None for p in self._daemons.values())

    @property
    def pids(self) -> dict[str, int]:
        """Process id of each daemon ("mon", "osd", "rgw"); with setpriv, the id is the daemon's (setpriv execs it)."""
        return {name: proc.pid for name, proc in self._daemons.items()}

    def log_tail(self, daemon: str = "rgw", n_lines: int = 5) -> str:
        """What daemon ("mon", "osd", "rgw") logged last, on one line: its errors if any
        (ingest.testbed.cephconf.log_tail), from its log file and its stdout/stderr."""
        name = {"mon": "mon.a", "osd": "osd.0", "rgw": f"client.rgw.{RGW_NAME}"}.get(daemon, daemon)
        lines: list[str] = []
        for path in (self._path("log", f"{name}.log"), self._path("log", f"{daemon}.out")) if self.root else ():
            try:
                with open(path, "rb") as fh:
                    fh.seek(max(0, os.fstat(fh.fileno()).st_size - 16384))
                    lines += fh.read().decode("utf-8", "replace").splitlines()
            except OSError:
                continue
        return log_tail(lines, n_lines)

    def set_config(self, key: str, value) -> None:
        """`ceph config set client.rgw.NAME key value`: radosgw applies it at run time (about 2 s),
        e.g. set_config("rgw_max_concurrent_requests", 4) to make it answer 503 SlowDown above 4."""
        if not self.running:
            raise IngestError(f"ceph rgw: not running; cannot set {key}")
        if not key or any(c.isspace() for c in key):
            raise ConfigError(f"key: {key!r} is not a Ceph option name")
        self._ceph("config", "set", f"client.rgw.{RGW_NAME}", key, str(value))
        # The monitor pushes the change to radosgw a second or two later; radosgw calls the option's
        # observers (its throttle) as it takes the value, so the value its admin socket shows is
        # the value in force. Waiting on that, not on a burst of requests meeting the limit, holds
        # on a loaded machine, where a burst's requests may not overlap at all.
        deadline = time.monotonic() + _APPLY_TIMEOUT_S
        while (applied := self.config_value(key)) != str(value):
            if time.monotonic() > deadline:
                raise IngestError(f"ceph rgw: {key} = {value} set, but radosgw still has {applied!r} after "
                                  f"{_APPLY_TIMEOUT_S:g} s; {self._daemon_report()}")
            time.sleep(0.2)

    def config_value(self, key: str) -> str:
        """The value radosgw runs with for `key`, from its admin socket."""
        asok = self._path("run", f"client.rgw.{RGW_NAME}.asok")
        return str(json.loads(self._ceph("daemon", asok, "config", "get", key))[key])

    # -- what clients need ---------------------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT of radosgw."""
        if "http" not in self.ports:
            raise IngestError("ceph rgw: no port yet; call start() first")
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def https_endpoint(self) -> str:
        """https://127.0.0.1:PORT of radosgw; trust ca_bundle to reach it."""
        if "https" not in self.ports:
            raise IngestError("ceph rgw: no port yet; call start() first")
        return f"https://127.0.0.1:{self.ports['https']}"

    @property
    def ca_bundle(self) -> str:
        """PEM file of the CA that signed radosgw's HTTPS certificate (in the temp dir)."""
        if self.root is None:
            raise IngestError("ceph rgw: no CA yet; call start() first")
        return self._tls["ca"]


def _last_lines(text: str, n_lines: int = 3) -> str:
    """A command's output on one line: its last n_lines, without Ceph's log prefix."""
    return log_tail(text.splitlines()[-n_lines:], n_lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m ingest.testbed.ceph [--bucket NAME]`: start one, print its endpoints and keys, wait for Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m ingest.testbed.ceph",
                                     description="Run a one-node Ceph RADOS Gateway on 127.0.0.1 (HTTP and HTTPS).")
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    parser.add_argument("--memstore-bytes", type=int, default=DEFAULT_MEMSTORE_BYTES,
                        help="the OSD's RAM for objects, bytes (default 2 GiB)")
    args = parser.parse_args(argv)
    unwind_on_signals((*UNWIND_SIGNALS, signal.SIGINT))  # `with` below tears the cluster down
    try:
        with CephRGW(memstore_bytes=args.memstore_bytes) as rgw:
            for bucket in args.bucket:
                rgw.make_bucket(bucket)
            print(f"# ceph rgw ready in {rgw.startup_s:.1f} s; http {rgw.endpoint_url}, https {rgw.https_endpoint}")
            print(f"# CA bundle {rgw.ca_bundle}; dir {rgw.root}; pids {rgw.pids}")
            for name, value in rgw.env(https=True).items():
                print(f"export {name}={shlex.quote(value)}")
            print(f"# Ctrl-C or kill {os.getpid()} to stop")
            sys.stdout.flush()
            while rgw.running:
                time.sleep(0.5)
            print(f"ingest.testbed.ceph: a daemon exited: {rgw._daemon_report()}", file=sys.stderr)
            return 1
    except IngestError as exc:
        print(f"ingest.testbed.ceph: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
