"""Network namespaces, veth pairs and HTB pipes: the kernel pieces of the emulated cluster.

Everything here runs `ip` and `tc` inside namespaces this process created (`ip -n NAME`); the
machine's own interfaces are never touched. Kernel netem is not available on the project's
machines, so the kernel only caps rates (HTB) and Toxiproxy adds latency in user space.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import threading
import time

from ingest.errors import IngestError

CLONE_NEWNET = 0x40000000  # <sched.h>; os.setns arrives only in Python 3.12
UNCAPPED_RATE_BIT_PER_S = 10 * 10**9  # the class MPI and control traffic go through
HTB_QUANTUM_BYTES = 60_000  # explicit: HTB's rate/r2q default warns at rates above ~12 MB/s
COMMAND_TIMEOUT_S = 20.0


class ClusterUnavailable(IngestError):
    """This machine cannot build the cluster; the message is one line naming what is missing."""


def sh(*cmd: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """Run a command; its stdout, or IngestError with the command and its stderr."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IngestError(f"cluster: `{' '.join(cmd)}` failed: {exc}") from exc
    if proc.returncode != 0:
        raise IngestError(f"cluster: `{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def namespace_problem() -> str | None:
    """Why network namespaces cannot be made here (one line), or None when they can."""
    if os.geteuid() != 0:
        return f"network namespaces need root (running as uid {os.geteuid()})"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"missing {' and '.join(missing)} (Debian package iproute2)"
    probe = f"ingprobe{os.getpid()}"
    try:
        sh("ip", "netns", "add", probe)
    except IngestError as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        sh("ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        sh("tc", "-n", probe, "qdisc", "add", "dev", "p0", "root", "handle", "1:", "htb")
    except IngestError as exc:
        return f"veth or tc htb unavailable in a namespace: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=COMMAND_TIMEOUT_S)
    return None


def list_namespaces() -> list[str]:
    """Names of every named network namespace (`ip netns list`)."""
    return [line.split()[0] for line in sh("ip", "netns", "list").splitlines() if line.strip()]


def add_namespace(name: str) -> None:
    """Create namespace `name` with its loopback up (servers inside bind 127.0.0.1)."""
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")


def namespace_pids(name: str) -> list[int]:
    """Processes whose network namespace is `name` (what `ip netns pids` lists, but a process
    exiting mid-scan is skipped instead of failing the whole listing)."""
    try:
        target = os.stat(f"/run/netns/{name}")
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ns = os.stat(f"/proc/{entry}/ns/net")
            except OSError:
                continue  # exited, or a kernel thread
            if (ns.st_dev, ns.st_ino) == (target.st_dev, target.st_ino):
                pids.append(int(entry))
    return pids


def kill_namespace_processes(name: str, grace_s: float = 3.0) -> None:
    """SIGTERM every process inside `name`, SIGKILL what is left after grace_s."""
    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    while pids := namespace_pids(name):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            if sig == signal.SIGKILL:
                return  # unkillable (D state): `ip netns del` still unlinks the name
            sig, deadline = signal.SIGKILL, time.monotonic() + grace_s
        time.sleep(0.05)


def delete_namespace(name: str) -> None:
    """Kill what runs inside, then delete the namespace (its veths go with it)."""
    kill_namespace_processes(name)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT_S)


def add_link(hub_ns: str, hub_if: str, bridge: str, peer_ns: str, address_cidr: str) -> None:
    """A veth from `peer_ns` (eth0, address_cidr) to the hub's bridge (port `hub_if`). The pair is
    created inside the hub and the far end moved straight into peer_ns: nothing in the root ns."""
    sh("ip", "-n", hub_ns, "link", "add", hub_if, "type", "veth", "peer", "name", "eth0", "netns", peer_ns)
    sh("ip", "-n", hub_ns, "link", "set", hub_if, "master", bridge, "up")
    sh("ip", "-n", peer_ns, "addr", "add", address_cidr, "dev", "eth0")
    sh("ip", "-n", peer_ns, "link", "set", "eth0", "up")


def shape(ns: str, dev: str, capped_rate_bytes_per_s: int, match: list[tuple[str, str]] | None = None,
          fair_among: tuple[str, list[str]] | None = None) -> None:
    """Egress of `dev` in `ns` through HTB: class 1:10 capped at the rate, class 1:20 uncapped.
    match: [("src"|"dst", ip), ...] selects what goes through the cap; None: everything does.
    fair_among: ("src"|"dst", [ip, ...]): the cap is shared equally among these peers, each a
    leaf of 1:10 guaranteed its share and lent what the others leave (HTB's borrowing is
    round-robin among leaves); anything else in the cap goes through a leaf of its own. None:
    one drop-tail queue, first come first served."""
    leaves = fair_among[1] if fair_among else []
    if leaves and match is not None:  # matched traffic goes to 1:10, which the leaves make an inner class
        raise ValueError("shape: fair_among shares the whole cap; it does not combine with match")
    default = ("ff" if leaves else "10") if match is None else "20"
    sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", default)
    for classid, rate_bit_per_s in (("1:10", capped_rate_bytes_per_s * 8), ("1:20", UNCAPPED_RATE_BIT_PER_S)):
        sh("tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", classid, "htb",
           "rate", f"{rate_bit_per_s}bit", "quantum", str(HTB_QUANTUM_BYTES))
    if leaves:
        share_bit_per_s = max(8, capped_rate_bytes_per_s * 8 // (len(leaves) + 1))
        # Leaf minors 0x100.. for the peers, 0xff for the rest (the default when nothing else matches).
        for minor, ip in [("ff", None), *((leaf_classid(k)[2:], ip) for k, ip in enumerate(leaves))]:
            sh("tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:10", "classid", f"1:{minor}", "htb",
               "rate", f"{share_bit_per_s}bit", "ceil", f"{capped_rate_bytes_per_s * 8}bit",
               "quantum", str(HTB_QUANTUM_BYTES))
            if ip is not None:
                sh("tc", "-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
                   "u32", "match", "ip", fair_among[0], f"{ip}/32", "flowid", f"1:{minor}")
    for direction, ip in match or []:
        sh("tc", "-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
           "u32", "match", "ip", direction, f"{ip}/32", "flowid", "1:10")


def class_bytes(ns: str, dev: str) -> dict[str, int]:
    """Bytes that have left `dev` through each of its HTB classes so far (tc's counters, every
    frame as the cap meters it): {"1:10": the cap, "1:100": a fair leaf, ...}. An inner class
    counts what all its leaves sent."""
    # Text, not `tc -j`: iproute2 6.1 prints classes as text even when asked for JSON.
    text = sh("tc", "-n", ns, "-s", "class", "show", "dev", dev)
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^class htb (\S+) .*?\n\s*Sent (\d+) bytes", text, re.MULTILINE)}


def capped_bytes(ns: str, dev: str) -> int:
    """Bytes that have left `dev` through its capped class 1:10 so far (tc's counter)."""
    counts = class_bytes(ns, dev)
    if "1:10" not in counts:
        raise IngestError(f"cluster: no class 1:10 on {dev} in {ns}")
    return counts["1:10"]


def leaf_classid(k: int) -> str:
    """The class of the k-th peer of shape(..., fair_among=...): its share of the cap."""
    return f"1:{0x100 + k:x}"


_libc = ctypes.CDLL(None, use_errno=True)


def call_in_netns(name: str, fn, *args, **kwargs):
    """fn(*args, **kwargs) on a fresh thread that has joined namespace `name`; its result.

    A network namespace belongs to a thread, so sockets that thread opens and processes it
    starts (subprocess forks from the calling thread) live in `name`; the rest of this
    process stays where it was. The thread ends with the call, so nothing has to switch back."""
    outcome: dict = {}

    def target():
        try:
            fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise IngestError(f"cluster: setns into {name}: {os.strerror(err)}")
            finally:
                os.close(fd)
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# rtnetlink, for reading a device's HTB class counters without starting `tc` (a child process
# per reading costs ~5 ms of CPU; a meter reads four devices ten times a second).
_NETLINK_ROUTE, _RTM_GETTCLASS, _RTM_NEWTCLASS = 0, 42, 40
_NLM_F_REQUEST, _NLM_F_DUMP, _NLMSG_DONE, _NLMSG_ERROR = 0x1, 0x300, 3, 2
_TCA_STATS = 3  # struct tc_stats: __u64 bytes first (the same counter `tc -s` prints as "Sent")


class ClassCounters:
    """A device's HTB class counters read over rtnetlink: `read()` -> {"1:10": bytes, ...}, as
    class_bytes gives them. The socket is opened inside namespace `ns` and stays bound to it, so
    any thread may read; close() when done."""

    def __init__(self, ns: str, dev: str):
        self.ns, self.dev = ns, dev
        self._sock, self._ifindex = call_in_netns(ns, self._open, dev)
        self._seq = 0

    @staticmethod
    def _open(dev: str):
        import socket

        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE)
        try:
            sock.bind((0, 0))
            return sock, socket.if_nametoindex(dev)
        except OSError:
            sock.close()
            raise

    def read(self) -> dict[str, int]:
        import struct

        self._seq += 1
        tcmsg = struct.pack("=BxxxiIII", 0, self._ifindex, 0, 0, 0)  # AF_UNSPEC, ifindex, handle, parent, info
        self._sock.send(struct.pack("=IHHII", 16 + len(tcmsg), _RTM_GETTCLASS, _NLM_F_REQUEST | _NLM_F_DUMP,
                                    self._seq, 0) + tcmsg)
        counts: dict[str, int] = {}
        while True:
            data = self._sock.recv(1 << 16)
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, offset)
                if kind == _NLMSG_DONE and seq == self._seq:
                    return counts
                if kind == _NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", data, offset + 16)[0]
                    raise IngestError(f"cluster: reading the classes of {self.dev} in {self.ns}: {os.strerror(errno)}")
                if kind == _RTM_NEWTCLASS and seq == self._seq:
                    handle = struct.unpack_from("=I", data, offset + 16 + 8)[0]
                    bytes_sent = self._stats_bytes(data, offset + 16 + 20, offset + length)
                    if bytes_sent is not None:
                        counts[f"{handle >> 16:x}:{handle & 0xFFFF:x}"] = bytes_sent
                offset += (length + 3) & ~3

    @staticmethod
    def _stats_bytes(data: bytes, offset: int, end: int) -> int | None:
        import struct

        while offset + 4 <= end:
            length, kind = struct.unpack_from("=HH", data, offset)
            if length < 4:
                return None
            if kind == _TCA_STATS:
                return struct.unpack_from("=Q", data, offset + 4)[0]
            offset += (length + 3) & ~3
        return None

    def close(self) -> None:
        self._sock.close()
