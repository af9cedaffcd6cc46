"""The cluster's servers: the object store and the shared filesystem, each in its namespace.

Both put Toxiproxy in front of the real server: the kernel here has no netem, so the
per-request latency is added in user space; the rate caps are HTB on the namespace's veth.
Every method that talks to a server runs in that server's namespace (call_in_netns): its
control ports are on that namespace's loopback, which the rest of the machine cannot reach.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from ingest.errors import IngestError
from ingest.testbed.cluster.netns import call_in_netns, sh
from ingest.testbed.localserver import LocalS3Server, find_tool, stop_process
from ingest.testbed.toxiproxy import ToxiproxyServer, free_port
from ingest.testbed.signals import signals_held

MOUNT_TIMEOUT_S = 15.0
SSHD_START_TIMEOUT_S = 10.0
SSHD = "/usr/sbin/sshd"  # Debian's openssh-server; not on a normal user's PATH


def _proxy(toxiproxy: ToxiproxyServer, name: str, listen_ip: str, upstream: str, latency_s: float) -> int:
    """A proxy on listen_ip (a free port) to upstream with latency_s on every reply; its port."""
    listen = toxiproxy.create_proxy(name, upstream, listen=f"{listen_ip}:0")
    if latency_s > 0:
        toxiproxy.add_toxic(name, "latency", {"latency": round(latency_s * 1000), "jitter": 0})
    return int(listen.rsplit(":", 1)[1])


class Store:
    """versitygw on the store namespace's loopback, reached through Toxiproxy on ip:port."""

    def __init__(self, ns: str, ip: str, root: str, latency_s: float):
        self.ns, self.ip, self.root, self.latency_s = ns, ip, root, latency_s
        self.server: LocalS3Server | None = None
        self.toxiproxy: ToxiproxyServer | None = None
        self.port: int | None = None

    def start(self) -> "Store":
        """Start both servers inside the namespace; returns self."""
        call_in_netns(self.ns, self._start)
        return self

    def _start(self) -> None:
        self.server = LocalS3Server(root=self.root).start()
        self.toxiproxy = ToxiproxyServer().start()
        self.port = _proxy(self.toxiproxy, "store", self.ip, f"127.0.0.1:{self.server.port}", self.latency_s)

    @property
    def endpoint_url(self) -> str:
        """What the nodes connect to (and presigned URLs are signed for): the proxy."""
        return f"http://{self.ip}:{self.port}"

    def env(self) -> dict[str, str]:
        """AWS_* variables that point boto3's standard chain on a node at the store."""
        return {**self.server.env(), "AWS_ENDPOINT_URL": self.endpoint_url}

    def make_bucket(self, bucket: str) -> None:
        """Create bucket (over the namespace's loopback: setup traffic is not shaped)."""
        call_in_netns(self.ns, self.server.make_bucket, bucket)

    def put_file(self, path: str, bucket: str, key: str) -> str:
        """Upload a local file; returns its s3:// URL."""
        call_in_netns(self.ns, lambda: self.server.client().upload_file(path, bucket, key))
        return f"s3://{bucket}/{key}"

    def stop(self) -> None:
        """Stop both servers (a signal each: no namespace needed); safe to call twice."""
        for server in (self.toxiproxy, self.server):
            if server is not None:
                server.stop()


_SSHD_CONFIG = """\
ListenAddress 127.0.0.1:{port}
HostKey {dir}/host_key
AuthorizedKeysFile {dir}/client_key.pub
PidFile none
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
LogLevel ERROR
"""


class SharedFs:
    """An sftp server (sshd, own host key) exporting `export_dir`, through Toxiproxy on ip:port;
    each node mounts it with its own sshfs, so its bytes cross that node's link."""

    def __init__(self, ns: str, ip: str, run_dir: str, export_dir: str, latency_s: float):
        self.ns, self.ip, self.export_dir, self.latency_s = ns, ip, export_dir, latency_s
        self.ssh_dir = os.path.join(run_dir, "ssh")
        self.sshd: subprocess.Popen | None = None
        self.toxiproxy: ToxiproxyServer | None = None
        self.port: int | None = None
        self.mounts: dict[str, tuple[str, subprocess.Popen]] = {}  # node ns -> (mountpoint, sshfs)

    def start(self) -> "SharedFs":
        """Make keys, start sshd and the proxy inside the namespace; returns self."""
        os.makedirs(self.ssh_dir, mode=0o700, exist_ok=True)
        os.makedirs(self.export_dir, exist_ok=True)
        for key in ("host_key", "client_key"):
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ingest-cluster",
               "-f", os.path.join(self.ssh_dir, key))
        # sshd refuses to start without its privilege-separation directory; Debian makes it
        # only when the service starts, which it never does here.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        call_in_netns(self.ns, self._start)
        return self

    def _start(self) -> None:
        sshd_port = free_port()
        config = os.path.join(self.ssh_dir, "sshd_config")
        with open(config, "w") as fh:
            fh.write(_SSHD_CONFIG.format(port=sshd_port, dir=self.ssh_dir))
        log = open(os.path.join(self.ssh_dir, "sshd.log"), "wb")
        with signals_held():
            self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", config], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_for_sshd(sshd_port)
        self.toxiproxy = ToxiproxyServer().start()
        self.port = _proxy(self.toxiproxy, "fs", self.ip, f"127.0.0.1:{sshd_port}", self.latency_s)

    def _wait_for_sshd(self, port: int) -> None:
        """Until sshd sends its banner: sshfs gives up at once on a refused connection."""
        deadline = time.monotonic() + SSHD_START_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                    if sock.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if self.sshd.poll() is not None or time.monotonic() > deadline:
                raise IngestError(f"cluster: sshd on 127.0.0.1:{port} in {self.ns} not answering after "
                                  f"{SSHD_START_TIMEOUT_S:g} s (status {self.sshd.poll()}): "
                                  f"{_tail('sshd.log', self.ssh_dir)}")
            time.sleep(0.02)

    def mount(self, node_ns: str, mountpoint: str) -> None:
        """Mount the export at mountpoint with sshfs running in node_ns (its TCP on that node's
        link). The mount itself is made in this process's mount namespace, so every process
        on the machine sees it; the launcher binds it to the common path on its node."""
        os.makedirs(mountpoint, exist_ok=True)
        options = ",".join([
            f"port={self.port}", f"IdentityFile={self.ssh_dir}/client_key", "StrictHostKeyChecking=no",
            "UserKnownHostsFile=/dev/null", "BatchMode=yes", "LogLevel=ERROR", "Compression=no",
            # No attribute or directory cache: a file one node renames into place must be
            # visible at once on the others (what NFS's close-to-open gives a stage directory).
            "dir_cache=no", "attr_timeout=0", "entry_timeout=0", "negative_timeout=0",
        ])
        cmd = [find_tool("sshfs"), "-f", "-o", options, f"root@{self.ip}:{self.export_dir}", mountpoint]
        log = open(os.path.join(self.ssh_dir, f"sshfs-{node_ns}.log"), "wb")
        with signals_held():  # a kill mid-start must find it in self.mounts to stop it
            proc = call_in_netns(node_ns, subprocess.Popen, cmd, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            self.mounts[node_ns] = (mountpoint, proc)
        log.close()
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                # sshd's side says why a login was refused (e.g. a locked root account: sshd
                # without PAM refuses key logins to a password field starting with "!").
                raise IngestError(f"cluster: sshfs on {node_ns} did not mount {mountpoint} within "
                                  f"{MOUNT_TIMEOUT_S:g} s: {_tail(f'sshfs-{node_ns}.log', self.ssh_dir)}; "
                                  f"sshd: {_tail('sshd.log', self.ssh_dir)}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Unmount every node's sshfs (lazily: a busy mount must not block teardown), then stop
        sshd and the proxy; safe to call twice."""
        umount = shutil.which("fusermount3") or shutil.which("fusermount")
        for mountpoint, proc in self.mounts.values():
            if os.path.ismount(mountpoint):
                if umount is None or subprocess.run([umount, "-u", "-z", mountpoint], capture_output=True).returncode:
                    subprocess.run(["umount", "-l", mountpoint], capture_output=True)
            stop_process(proc)
        self.mounts.clear()
        stop_process(self.sshd)
        if self.toxiproxy is not None:
            self.toxiproxy.stop()


def _tail(name: str, directory: str, n_bytes: int = 600) -> str:
    with open(os.path.join(directory, name), "rb") as fh:
        return fh.read()[-n_bytes:].decode("utf-8", "replace").strip() or "no output"
