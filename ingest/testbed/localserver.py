"""A real S3 server on loopback for tests and the demo: the Versity S3 Gateway (versitygw).

Objects are plain files under ROOT/bucket/key, and versitygw checks SigV4 signatures and
presigned-URL expiry like a production store (moto does neither). Run
`python -m ingest.testbed.localserver` to get one plus the `export` lines that point boto3 at it.
"""
from __future__ import annotations

import argparse
import http.client
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref

from ingest.errors import IngestError
from ingest.testbed.s3store import LoopbackStore
from ingest.testbed.signals import UNWIND_SIGNALS, signals_held, unwind_on_signals

TOOL_DIR_DEFAULT = os.path.join("~", ".local", "share", "ingest", "bin")
REGION = "us-east-1"
START_ATTEMPTS = 5  # port races: another process may take the port between probe and bind


def find_tool(name: str) -> str:
    """Path of executable name from $INGEST_TOOLS_DIR, ~/.local/share/ingest/bin, then PATH."""
    dirs = [os.environ.get("INGEST_TOOLS_DIR", ""), os.path.expanduser(TOOL_DIR_DEFAULT)]
    for directory in dirs:
        candidate = os.path.join(directory, name) if directory else ""
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return found
    searched = ", ".join(d for d in dirs if d) + ", PATH"
    raise IngestError(
        f"{name}: executable not found (searched {searched}); run scripts/setup.sh to build it"
    )


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(log_file, n_chars: int = 2000) -> str:
    """Last n_chars of the server's output file, for error messages."""
    log_file.flush()
    log_file.seek(0, os.SEEK_END)
    size = log_file.tell()
    log_file.seek(max(0, size - n_chars))
    return log_file.read().decode("utf-8", "replace").strip() or "(no output)"


def stop_process(proc: subprocess.Popen | None, grace_s: float = 5.0) -> None:
    """Stop a server this module (or a test bed beside it) started: SIGTERM, then SIGKILL after
    `grace_s`; safe on a process already gone."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cleanup(proc, log_file, root_to_remove):
    """Stop the process and delete what start() created; safe to call twice (also run at exit)."""
    stop_process(proc)
    if log_file is not None and not log_file.closed:
        log_file.close()
    if root_to_remove:
        shutil.rmtree(root_to_remove, ignore_errors=True)


class LocalS3Server(LoopbackStore):
    """versitygw on 127.0.0.1 with random root keys; a context manager (start on enter, stop on exit)."""

    def __init__(self, root: str | None = None, port: int | None = None,
                 startup_timeout_s: float = 10.0, keep_alive: bool = True, request_log: bool = False):
        """root: data dir (default: a temp dir removed by stop); port: default a free one; timeout in s."""
        self.root = root
        self.requested_port = port  # None: a free port, picked again at every start()
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        # versitygw closes every connection after one request unless told otherwise; real
        # stores keep connections alive, and a benchmark should not pay a connect per range.
        self.keep_alive = keep_alive
        # One stdout line per request is noise in tests and grows without bound in benchmarks.
        self.request_log = request_log
        self.region = REGION
        self.access_key = ""
        self.secret_key = ""
        self._proc = None
        self._log = None
        self._made_root = None
        self._finalizer = None
        self.forget_clients()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "LocalS3Server":
        """Start the server and wait (at most startup_timeout_s) until it answers signed requests."""
        if self.running:
            raise IngestError(f"versitygw: already running at {self.endpoint_url}")
        binary = find_tool("versitygw")
        if self.root is None:
            self._made_root = tempfile.mkdtemp(prefix="ingest-s3-")
            self.root = self._made_root
        else:
            os.makedirs(self.root, exist_ok=True)
        self.access_key = "ingest" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(30)
        fixed_port = self.requested_port
        attempts_left = 1 if fixed_port else START_ATTEMPTS
        while True:
            port = fixed_port or _free_port()
            try:
                error = self._launch(binary, port)
            except BaseException:  # a signal's SystemExit while it starts: the server goes too
                self.stop()
                raise
            if error is None:
                return self
            self._discard_process()
            attempts_left -= 1
            # Only a lost port race is worth another try; anything else will fail again.
            if "address already in use" not in error or attempts_left == 0:
                root, self.port = self.root, fixed_port
                self.stop()
                raise IngestError(f"versitygw on 127.0.0.1:{port} (root {root}): {error}")

    def _launch(self, binary: str, port: int) -> str | None:
        """Run versitygw on port and wait for it; None when ready, else what went wrong."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("VGW_") and k not in ("ROOT_ACCESS_KEY_ID", "ROOT_SECRET_ACCESS_KEY")}
        env.update(ROOT_ACCESS_KEY=self.access_key, ROOT_SECRET_KEY=self.secret_key)
        cmd = [binary, "--port", f"127.0.0.1:{port}", "--region", self.region]
        if self.keep_alive:
            cmd.append("--keep-alive")
        if not self.request_log:
            cmd.append("--quiet")
        cmd += ["posix", self.root]
        # Output to a file, not a pipe: nobody reads a pipe while tests run, and a full pipe
        # would freeze the server mid-request.
        self._log = tempfile.TemporaryFile(prefix="ingest-versitygw-", suffix=".log")
        with signals_held():
            self._proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
            self._finalizer = weakref.finalize(self, _cleanup, self._proc, self._log, self._made_root)
        self.port = port
        return self._wait_ready()

    def _wait_ready(self) -> str | None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return f"exited with status {self._proc.returncode} during start-up; output:\n{_tail(self._log)}"
            if self._answers_http():
                break
            time.sleep(0.02)
        else:
            return (f"did not answer HTTP within {self.startup_timeout_s:g} s (startup_timeout_s); "
                    f"output:\n{_tail(self._log)}")
        # Something answers; make sure it is this process with these keys, not a port thief.
        try:
            self.client().list_buckets()
        except Exception as exc:
            return f"answers HTTP but refused a request signed with its own keys ({exc}); output:\n{_tail(self._log)}"
        if self._proc.poll() is not None:
            return f"exited with status {self._proc.returncode} during start-up; output:\n{_tail(self._log)}"
        return None

    def _answers_http(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=0.5)
        try:
            conn.request("GET", "/")
            conn.getresponse().read()
            return True
        except OSError:
            return False
        finally:
            conn.close()

    def _discard_process(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        _cleanup(self._proc, self._log, None)
        self._proc = self._log = self._finalizer = None
        self.forget_clients()

    def stop(self) -> None:
        """Terminate the server (kill after 5 s) and remove the root dir if start() made it."""
        if self._finalizer is not None:
            self._finalizer()  # runs _cleanup once; later calls are no-ops
        else:
            _cleanup(self._proc, self._log, self._made_root)
        self._proc = self._log = self._finalizer = None
        self.forget_clients()
        if self._made_root:
            self.root = None
            self._made_root = None

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of versitygw, or None when not started."""
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, n_chars: int = 2000) -> str:
        """Last n_chars of the server's combined stdout/stderr."""
        return _tail(self._log, n_chars) if self._log is not None else "(not running)"

    # -- what clients need ---------------------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT of the running server."""
        if self.port is None:
            raise IngestError("versitygw: no port yet; call start() first")
        return f"http://127.0.0.1:{self.port}"


def main(argv: list[str] | None = None) -> int:
    """`python -m ingest.testbed.localserver [--root DIR] [--port N]`: print export lines, serve until killed."""
    parser = argparse.ArgumentParser(
        prog="python -m ingest.testbed.localserver",
        description="Run a Versity S3 Gateway on 127.0.0.1 and print shell export lines for it.",
    )
    parser.add_argument("--root", default=None, help="data directory (default: a temp dir, removed on exit)")
    parser.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    args = parser.parse_args(argv)

    unwind_on_signals((*UNWIND_SIGNALS, signal.SIGINT))  # `with` below stops the server
    try:
        with LocalS3Server(root=args.root, port=args.port) as server:
            for bucket in args.bucket:
                server.make_bucket(bucket)
            for name, value in server.env().items():
                print(f"export {name}={shlex.quote(value)}")
            print(f"# versitygw pid {server.pid}, root {server.root}; kill {os.getpid()} to stop")
            sys.stdout.flush()
            returncode = server._proc.wait()
            print(f"ingest.testbed.localserver: versitygw exited with status {returncode}:\n{server.log_tail()}",
                  file=sys.stderr)
            return 1
    except IngestError as exc:
        print(f"ingest.testbed.localserver: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
