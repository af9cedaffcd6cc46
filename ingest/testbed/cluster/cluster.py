"""An emulated cluster on one machine: M nodes, an object store and a shared filesystem, each
in its own network namespace, joined by a bridge in a hub namespace.

    hub (bridge 10.23.0.1, runs mpiexec)
     |-- store 10.23.0.2: versitygw <- Toxiproxy (latency) <- HTB cap, both directions (shared by all,
     |                   an equal share per node lent to the others: ClusterSpec.queue)
     |-- fs    10.23.0.3: sshd      <- Toxiproxy (latency) <- HTB cap, both directions
     |-- node i 10.23.0.(10+i): HTB cap on store/fs traffic, both directions (its NIC);
                                its own sshfs mount of the fs; its Open MPI daemon and ranks

MPI traffic (between nodes, and to mpiexec) goes through the uncapped class: the filters
select the store's and the filesystem's addresses only. Open MPI starts its daemons through
a launcher agent (`--mca plm_rsh_agent`) that runs `ip netns exec NODE` instead of ssh, in
a UTS namespace whose hostname is the node's name, so the driver's per-rank `host` (and
MPI_Get_processor_name, which ranks_per_node counts) name the node; the agent also binds
the node's sshfs mount to `shared_dir`, one path for every node as on a real cluster.
With launcher="slurm" the nodes also run a slurmd each (slurm.py: same namespace, hostname
and bind), so `srun --mpi=pmix` from the hub places ranks the same way.
"""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref

from ingest.errors import IngestError
from ingest.testbed.cluster import netns
from ingest.testbed.cluster.netns import ClusterUnavailable
from ingest.testbed.cluster.services import SSHD, SharedFs, Store
from ingest.testbed.cluster.slurm import Slurm
from ingest.testbed.cluster.slurm import missing_tools as slurm_missing_tools
from ingest.testbed.cluster.spec import ClusterSpec
from ingest.testbed.localserver import find_tool
from ingest.testbed.mpilaunch import LOCAL_MPI_ENV

# A launch's variables from this process that would steer the cluster's ranks elsewhere: another
# store's AWS_* settings, another MPI job's OMPI_* and PMIX_*.
STEERING_PREFIXES = ("AWS_", "OMPI_", "PMIX_")
SUBNET = "10.23.0.0/24"  # private to the hub's bridge: no route leaves the namespaces
HUB_IP, STORE_IP, FS_IP = "10.23.0.1", "10.23.0.2", "10.23.0.3"
PREFIX = "ing"  # namespaces are ing<pid>-<n>-<role>: `down` can tell a dead owner's leftovers
_counter = itertools.count()
LAUNCHERS = ("mpiexec", "slurm")  # mpiexec always works; "slurm" adds slurmctld and a slurmd per node

# Open MPI calls AGENT HOST COMMAND... as it would call ssh; the command is one shell string.
# hostname inside `unshare --uts`: the node's own name for gethostname() and MPI.
_AGENT = """#!/bin/sh
# Open MPI's rsh launcher for the emulated cluster (made by ingest.testbed.cluster; see there).
node=$1; shift
exec ip netns exec "$node" unshare --uts sh -c \\
  'hostname "$0" && mount --bind "{run_dir}/mnt/$0" "{shared_dir}" && exec sh -c "$1"' "$node" "$*"
"""


def node_ip(i: int) -> str:
    """Node i's address on the hub's bridge."""
    return f"10.23.0.{10 + i}"


def missing_tools(launcher: str = "mpiexec") -> list[str]:
    """Programs the cluster needs that are not installed (scripts/setup.sh installs them)."""
    missing = slurm_missing_tools() if launcher == "slurm" else []
    for tool in ("versitygw", "toxiproxy-server", "sshfs", "mpiexec", "ssh-keygen", "unshare"):
        try:
            find_tool(tool)
        except IngestError:
            missing.append(tool)
    if not os.access(SSHD, os.X_OK):
        missing.append(SSHD)
    if not os.path.exists("/dev/fuse"):
        missing.append("/dev/fuse")
    return missing


def unavailable_reason(launcher: str = "mpiexec") -> str | None:
    """One line saying why a cluster cannot be built here, or None when it can."""
    problem = netns.namespace_problem()
    missing = missing_tools(launcher)
    parts = [problem] if problem else []
    if missing:
        parts.append(f"missing {', '.join(missing)} (run scripts/setup.sh)")
    # One line whatever the tools printed: it is a skip reason and a one-line CLI error.
    return " ".join(("cannot build the emulated cluster: " + "; ".join(parts)).split()) if parts else None


class Cluster:
    """`with Cluster(spec) as c: c.mpiexec(["run", "--source", url])`: build on enter, tear down
    on exit (success, failure or Ctrl-C). Attributes: nodes (namespace names, also the ranks'
    hostnames), shared_dir (the shared filesystem, same path on every node), run_dir (hostfile,
    launcher agent, server logs; kept after teardown when keep_dir), build_s and teardown_s.
    launcher="slurm" also starts SLURM on the nodes: then c.srun(...) works too, and c.launch(...)
    (what the command line calls) uses srun."""

    def __init__(self, spec: ClusterSpec, keep_dir: bool = False, launcher: str = "mpiexec"):
        if launcher not in LAUNCHERS:
            raise IngestError(f"cluster: launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)}")
        self.spec, self.launcher = spec, launcher
        self.prefix = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        self.hub = f"{self.prefix}-hub"
        self.store_ns, self.fs_ns = f"{self.prefix}-store", f"{self.prefix}-fs"
        self.nodes = [f"{self.prefix}-n{i}" for i in range(spec.nodes)]
        self.run_dir = ""
        self.shared_dir = ""
        self.keep_dir = keep_dir
        self._parts: _Parts | None = None
        self._finalizer = None
        self.build_s = self.teardown_s = None

    @property
    def store(self) -> Store | None:
        """The object store's servers (None before start)."""
        return self._parts.store if self._parts else None

    @property
    def fs(self) -> SharedFs | None:
        """The shared filesystem's server and mounts (None before start)."""
        return self._parts.fs if self._parts else None

    # -- build and teardown ------------------------------------------------------------------
    def start(self) -> "Cluster":
        """Build everything; on any failure (or Ctrl-C) tear down what was built, then raise."""
        if self._parts is not None:
            raise IngestError(f"cluster {self.prefix}: already started (a Cluster is built once)")
        reason = unavailable_reason(self.launcher)
        if reason:
            raise ClusterUnavailable(reason)
        t0 = time.monotonic()
        self.run_dir = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        self.shared_dir = os.path.join(self.run_dir, "shared")
        self._parts = _Parts(self.run_dir, self.keep_dir)
        # Also at interpreter exit or garbage collection: a forgotten cluster must not outlive us.
        self._finalizer = weakref.finalize(self, self._parts.teardown)
        try:
            self._build()
        except BaseException:
            self.stop()
            raise
        self.build_s = time.monotonic() - t0
        return self

    def _build(self) -> None:
        spec = self.spec
        for ns in [self.hub, self.store_ns, self.fs_ns, *self.nodes]:
            self._parts.namespaces.append(ns)  # before: a half-made namespace is deleted too
            netns.add_namespace(ns)
        netns.sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        netns.sh("ip", "-n", self.hub, "addr", "add", f"{HUB_IP}/24", "dev", "br0")
        netns.sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        netns.add_link(self.hub, "store", "br0", self.store_ns, f"{STORE_IP}/24")
        netns.add_link(self.hub, "fs", "br0", self.fs_ns, f"{FS_IP}/24")
        # The servers' pipes, shared among the nodes as spec.queue says (each node's own share, or one FIFO).
        node_ips = [node_ip(i) for i in range(len(self.nodes))]
        to_nodes, from_nodes = (("dst", node_ips), ("src", node_ips)) if spec.queue == "fair" else (None, None)
        egress = spec.store.egress_rate_bytes_per_s
        netns.shape(self.store_ns, "eth0", egress, fair_among=to_nodes)  # store -> everyone
        # everyone -> store (uploads: publish) at the same rate: a real store's ingress is finite too
        netns.shape(self.hub, "store", egress, fair_among=from_nodes)
        netns.shape(self.fs_ns, "eth0", spec.fs.rate_bytes_per_s, fair_among=to_nodes)  # reads from the fs
        netns.shape(self.hub, "fs", spec.fs.rate_bytes_per_s, fair_among=from_nodes)  # writes to the fs (staging)
        nic = spec.node.nic_rate_bytes_per_s
        for i, node in enumerate(self.nodes):
            netns.add_link(self.hub, f"n{i}", "br0", node, f"{node_ips[i]}/24")
            netns.shape(self.hub, f"n{i}", nic, [("src", STORE_IP), ("src", FS_IP)])  # into the node
            netns.shape(node, "eth0", nic, [("dst", STORE_IP), ("dst", FS_IP)])  # out of the node
        self._parts.store = Store(self.store_ns, STORE_IP, os.path.join(self.run_dir, "store"), spec.store.latency_s)
        self.store.start()
        self.store.make_bucket(spec.store.bucket)
        self._parts.fs = SharedFs(self.fs_ns, FS_IP, self.run_dir, os.path.join(self.run_dir, "export"),
                                  spec.fs.latency_s)
        self.fs.start()
        os.makedirs(self.shared_dir)
        for node in self.nodes:
            self.fs.mount(node, os.path.join(self.run_dir, "mnt", node))
        with open(self.hostfile, "w") as fh:
            fh.writelines(f"{node} slots={spec.ranks_per_node}\n" for node in self.nodes)
        with open(self.agent, "w") as fh:
            fh.write(_AGENT.format(run_dir=self.run_dir, shared_dir=self.shared_dir))
        os.chmod(self.agent, 0o755)
        if self.launcher == "slurm":
            ips = {node: node_ip(i) for i, node in enumerate(self.nodes)}
            binds = {node: [(os.path.join(self.run_dir, "mnt", node), self.shared_dir)] for node in self.nodes}
            self._parts.slurm = Slurm(self.prefix, self.run_dir, self.hub, HUB_IP, ips, spec.ranks_per_node, binds)
            self._parts.slurm.start()

    def stop(self) -> None:
        """Tear everything down: mounts, servers, every process in the namespaces, the
        namespaces and the run directory. Safe to call twice."""
        t0 = time.monotonic()
        if self._finalizer is not None:
            self._finalizer()
        self.teardown_s = time.monotonic() - t0

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- using it ----------------------------------------------------------------------------
    @property
    def hostfile(self) -> str:
        return os.path.join(self.run_dir, "hostfile")

    @property
    def agent(self) -> str:
        return os.path.join(self.run_dir, "launch-agent.sh")

    def env(self) -> dict[str, str]:
        """Variables a rank needs: the store's AWS_* (endpoint: the store's proxy), and no
        ~/.aws files, whose profile or addressing style would steer boto3 elsewhere."""
        no_file = os.path.join(self.run_dir, "no-aws-config")
        slurm = self._parts.slurm.env() if self._parts.slurm else {}  # SLURM_CONF, for srun
        return {**self.store.env(), "AWS_CONFIG_FILE": no_file, "AWS_SHARED_CREDENTIALS_FILE": no_file, **slurm}

    def launch_env(self, drop: tuple[str, ...] = STEERING_PREFIXES) -> dict[str, str]:
        """The environment of a launch of ranks on the cluster: this process's, without the
        variables that would steer the ranks elsewhere (`drop`: their prefixes), with the cluster's
        own (`env`) and what Open MPI's ranks need on one machine (LOCAL_MPI_ENV)."""
        mine = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        return {**mine, **self.env(), **LOCAL_MPI_ENV}

    def put_file(self, path: str, key: str) -> str:
        """Upload a local file into the spec's bucket; returns its s3:// URL."""
        return self.store.put_file(path, self.spec.store.bucket, key)

    def mpiexec_command(self, argv: list[str], n_ranks: int | None = None, map_by: str | None = None) -> list[str]:
        """The mpiexec command line (to run in the hub namespace) for argv on n_ranks ranks
        (default: every slot), placed node by node as the hostfile's slots say, or by Open
        MPI's --map-by (map_by="node": round-robin, ranks spread evenly over the nodes)."""
        n_ranks = n_ranks or self.spec.nodes * self.spec.ranks_per_node
        return [
            "ip", "netns", "exec", self.hub, "mpiexec", "-n", str(n_ranks), "--hostfile", self.hostfile,
            "--mca", "plm_rsh_agent", self.agent,
            "--mca", "plm_rsh_no_tree_spawn", "1",  # every daemon started from the hub, one hop
            "--mca", "oob_tcp_if_include", SUBNET, "--mca", "btl_tcp_if_include", SUBNET,
            "--bind-to", "none", *(["--map-by", map_by] if map_by else []), *argv,
        ]

    def srun_command(self, argv: list[str], n_ranks: int | None = None, map_by: str | None = None) -> list[str]:
        """The srun command line (SLURM_CONF from env()) for argv on n_ranks tasks (default: every
        slot), filling node by node, or round-robin with map_by="node"; needs launcher="slurm"."""
        if self._parts is None or self._parts.slurm is None:
            raise IngestError(f"cluster {self.prefix}: srun needs Cluster(spec, launcher='slurm')")
        return self._parts.slurm.srun_command(argv, n_ranks or self.spec.nodes * self.spec.ranks_per_node, map_by)

    def launch_command(self, argv: list[str], n_ranks: int | None = None, map_by: str | None = None) -> list[str]:
        """The cluster's launcher's command line: srun_command with launcher="slurm", else mpiexec_command."""
        make = self.srun_command if self.launcher == "slurm" else self.mpiexec_command
        return make(argv, n_ranks, map_by)

    def mpiexec(self, args: list[str], n_ranks: int | None = None, env: dict | None = None,
                timeout_s: float = 600.0, python_args: tuple = ("-m", "ingest")) -> subprocess.CompletedProcess:
        """`mpiexec python -m ingest ARGS` across the nodes; output captured, timeout_s bounds it."""
        return self._run(self.mpiexec_command, args, n_ranks, env, timeout_s, python_args)

    def srun(self, args: list[str], n_ranks: int | None = None, env: dict | None = None,
             timeout_s: float = 600.0, python_args: tuple = ("-m", "ingest")) -> subprocess.CompletedProcess:
        """`srun --mpi=pmix python -m ingest ARGS` across the nodes (launcher="slurm")."""
        return self._run(self.srun_command, args, n_ranks, env, timeout_s, python_args)

    def launch(self, args: list[str], n_ranks: int | None = None, env: dict | None = None,
               timeout_s: float = 600.0, python_args: tuple = ("-m", "ingest")) -> subprocess.CompletedProcess:
        """srun with launcher="slurm", else mpiexec."""
        return self._run(self.launch_command, args, n_ranks, env, timeout_s, python_args)

    def _run(self, make_command, args, n_ranks, env, timeout_s, python_args) -> subprocess.CompletedProcess:
        # Nothing from a surrounding job (an allocation's SLURM_*, a user's OMPI_*) may steer these ranks.
        child_env = {**self.launch_env(STEERING_PREFIXES + ("SLURM_",)), **(env or {})}
        cmd = make_command([sys.executable, *python_args, *map(str, args)], n_ranks)
        return subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)

    def counters(self) -> dict[str, tuple[str, str, str]]:
        """Every link's tc counter, name -> (namespace, device, class): "store" (its egress),
        "store_in" (uploads), "fs_read", "fs_write", a node's name (store and fs traffic into the
        node) and "NODE:out" (out of it); with queue "fair" also each server's leaf per node,
        "store>NODE", "NODE>store", "fs>NODE" and "NODE>fs": what that node got of the pipe."""
        where = {"store": (self.store_ns, "eth0", "1:10"), "store_in": (self.hub, "store", "1:10"),
                 "fs_read": (self.fs_ns, "eth0", "1:10"), "fs_write": (self.hub, "fs", "1:10")}
        for i, node in enumerate(self.nodes):
            where[node] = (self.hub, f"n{i}", "1:10")
            where[f"{node}:out"] = (node, "eth0", "1:10")
            if self.spec.queue == "fair":
                leaf = netns.leaf_classid(i)
                where.update({f"store>{node}": (self.store_ns, "eth0", leaf),
                              f"{node}>store": (self.hub, "store", leaf),
                              f"fs>{node}": (self.fs_ns, "eth0", leaf), f"{node}>fs": (self.hub, "fs", leaf)})
        return where

    def server_links(self) -> list[str]:
        """The links the servers' four pipes count (with their per-node leaves): four devices'
        counters, however many nodes."""
        servers = {(self.store_ns, "eth0"), (self.hub, "store"), (self.fs_ns, "eth0"), (self.hub, "fs")}
        return [name for name, (ns, dev, _) in self.counters().items() if (ns, dev) in servers]

    def link_bytes(self, links=None) -> dict[str, int]:
        """Bytes that crossed each cap so far (tc counters, every frame the cap metered), by the
        names of `counters`; `links`, if given, only those (one netlink dump per device they are on).
        Default: "store", "store_in", "fs_read", "fs_write" and each node's name."""
        where = self.counters()
        links = list(links) if links is not None else ["store", "store_in", "fs_read", "fs_write", *self.nodes]
        unknown = sorted(set(links) - set(where))
        if unknown:
            raise IngestError(f"cluster {self.prefix}: no link named {', '.join(unknown)} (links: {', '.join(where)})")
        read = {}
        for ns, dev in dict.fromkeys(where[link][:2] for link in links):
            if (ns, dev) not in self._parts.counters:  # a netlink socket per device, kept until teardown
                self._parts.counters[ns, dev] = netns.ClassCounters(ns, dev)
            read[ns, dev] = self._parts.counters[ns, dev].read()
        return {link: read[where[link][:2]][where[link][2]] for link in links}


class _Parts:
    """What a cluster has built so far, i.e. what teardown undoes. Kept apart from Cluster so
    that its finalizer holds no reference to the cluster itself."""

    def __init__(self, run_dir: str, keep_dir: bool):
        self.run_dir, self.keep_dir = run_dir, keep_dir
        self.namespaces: list[str] = []
        self.store: Store | None = None
        self.fs: SharedFs | None = None
        self.slurm: Slurm | None = None
        self.counters: dict = {}  # (namespace, device) -> netns.ClassCounters: link_bytes's sockets

    def teardown(self) -> None:
        """Close the counters' sockets (each holds its namespace), stop SLURM (its slurmds hold
        binds of the mounts), unmount (a FUSE mount whose sshfs dies answers ENOTCONN to
        everyone), stop the servers, kill whatever else runs in the namespaces (mpiexec,
        daemons, ranks), delete them."""
        for counters in self.counters.values():
            counters.close()
        self.counters.clear()
        for part in (self.slurm, self.fs, self.store):
            if part is not None:
                part.stop()
        for ns in reversed(self.namespaces):
            netns.delete_namespace(ns)
        self.namespaces.clear()
        if self.run_dir and not self.keep_dir and os.path.isdir(self.run_dir):
            with open("/proc/mounts") as fh:
                mounted = [line.split()[1] for line in fh if line.split()[1].startswith(self.run_dir + "/")]
            if not mounted:  # never rmtree through a mount: it would delete the files behind it
                shutil.rmtree(self.run_dir, ignore_errors=True)
