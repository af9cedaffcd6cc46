"""SLURM on the emulated cluster: one slurmctld in the hub namespace, one slurmd in each node's
namespace, so `srun --mpi=pmix` starts a node's ranks inside that node, as mpiexec's launcher
agent does: their store and filesystem traffic crosses the node's cap, and gethostname() in a
rank (the report's `host`) is the node's name.

    hub 10.23.0.1:          munged (a key and socket of its own), slurmctld (port CTLD_PORT)
    node i 10.23.0.(10+i):  slurmd -N NODE in UTS and mount namespaces of its own (hostname NODE),
                            the shared filesystem bound on shared_dir, a PMIx directory of its own

Everything lives under run_dir/slurm (config, state, spools, logs, sockets) and every daemon runs
inside the cluster's namespaces, so the cluster's teardown (and `down`, for a killed owner)
removes it all. Nothing is shared with a SLURM or munged the machine runs (scripts/slurm-local.sh):
the ports are the namespaces' own, and the munge socket, key and SLURM_CONF are this cluster's.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time

from ingest.errors import IngestError
from ingest.testbed.cluster.netns import call_in_netns, sh
from ingest.testbed.localserver import stop_process
from ingest.testbed.signals import signals_held

CTLD_PORT, SLURMD_PORT = 6817, 6818  # each namespace has its own ports: no clash with the machine's
READY_TIMEOUT_S = 30.0  # slurmctld up and every slurmd registered (about 2 s here)
PARTITION = "cluster"
SBIN = "/usr/sbin"  # Debian's daemons; not on every user's PATH
# Programs, and the library the pmix plugin dlopens by its unversioned name (libpmix-dev).
TOOLS = ("slurmctld", "slurmd", "srun", "sinfo", "munged", "mungekey", "nsenter")
PMIX_LIBRARY = "libpmix.so"

_CONF = """\
# Written by ingest.testbed.cluster.slurm for cluster {prefix}; removed with it.
ClusterName=ingest
SlurmctldHost={hub}({hub_ip})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/munge.socket
StateSaveLocation={dir}/state
# %n: each slurmd's files are its node's (all nodes share one filesystem here).
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
# No cgroups here: track processes by parent pid, bind nothing (more tasks than cores).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Trust CPUs= below (the spec's slots) over the cores slurmd counts.
SlurmdParameters=config_overrides
# --mpi=none would give every rank a silent world of its own (../shared/INFRA.md).
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
InactiveLimit=0
KillWait=5
# sbatch --wait polls every MinJobAge/2 s (at least 2 s) at first: a short job returns in seconds.
MinJobAge=4
{nodes}
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def missing_tools() -> list[str]:
    """What SLURM on the cluster needs that is not installed (scripts/setup.sh installs it)."""
    missing = [name for name in TOOLS if _which(name) is None]
    libdirs = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
    if not any(os.path.exists(os.path.join(d, PMIX_LIBRARY)) for d in libdirs):
        missing.append(f"{PMIX_LIBRARY} (libpmix-dev)")
    return missing


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=SBIN)


def _tool(name: str) -> str:
    path = _which(name)
    if path is None:
        raise IngestError(f"cluster: {name} not found (run scripts/setup.sh)")
    return path


class Slurm:
    """The cluster's SLURM: start() writes the config and starts munged, slurmctld and one
    slurmd per node, and waits until every node is idle; stop() ends them. `env()` is what
    srun needs (SLURM_CONF), `srun_command()` the command line to run in the hub namespace."""

    def __init__(self, prefix: str, run_dir: str, hub: str, hub_ip: str, nodes: dict[str, str],
                 cpus_per_node: int, node_binds: dict[str, list[tuple[str, str]]]):
        """nodes: namespace (= node name) -> its IP; node_binds: node -> [(source, target)]
        bind mounts its slurmd (and so its ranks) sees, e.g. its sshfs mount on shared_dir."""
        self.prefix, self.hub, self.hub_ip = prefix, hub, hub_ip
        self.nodes, self.cpus_per_node = nodes, cpus_per_node
        self.dir = os.path.join(run_dir, "slurm")
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        self.node_binds = node_binds
        self.procs: dict[str, subprocess.Popen] = {}  # "munged", "slurmctld", node -> its daemon

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": self.conf}

    # -- start and stop ----------------------------------------------------------------------
    def start(self) -> "Slurm":
        for sub in ("etc", "munge", "state", "run", "log", "pmix", *(f"spool/{n}" for n in self.nodes),
                    *(f"pmix-nodes/{n}" for n in self.nodes)):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        self._write_conf()
        munge_dir = os.path.join(self.dir, "munge")
        sh(_tool("mungekey"), "--create", f"--keyfile={munge_dir}/munge.key")
        # -f: munged refuses a socket whose parents are not executable by all (run_dir is 0700);
        # only root (the daemons, srun, the ranks) uses this socket, so that check does not apply.
        self._spawn("munged", self.hub, [_tool("munged"), "-F", "-f", f"--socket={munge_dir}/munge.socket",
                                         f"--key-file={munge_dir}/munge.key", f"--pid-file={munge_dir}/munged.pid",
                                         f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"])
        self._wait_for(lambda: os.path.exists(f"{munge_dir}/munge.socket"), "munged's socket")
        # slurmctld runs only where the hostname is SlurmctldHost's name: the hub's, in its own UTS.
        self._spawn("slurmctld", self.hub, [_tool("slurmctld"), "-D", "-f", self.conf], hostname=self.hub)
        for node in self.nodes:
            binds = [*self.node_binds.get(node, []),
                     # The pmix plugin's client directory has no node in its name, and every node
                     # sees one filesystem here: each node gets its own behind the configured path.
                     (os.path.join(self.dir, "pmix-nodes", node), os.path.join(self.dir, "pmix"))]
            self._spawn(node, node, [_tool("slurmd"), "-D", "-f", self.conf, "-N", node], hostname=node, binds=binds)
        self._wait_for(self._all_idle, f"every node idle in sinfo ({len(self.nodes)} slurmd)")
        return self

    def _write_conf(self) -> None:
        nodes = "\n".join(f"NodeName={n} NodeAddr={ip} CPUs={self.cpus_per_node} State=UNKNOWN"
                          for n, ip in self.nodes.items())
        with open(self.conf, "w") as fh:
            fh.write(_CONF.format(prefix=self.prefix, hub=self.hub, hub_ip=self.hub_ip, ctld_port=CTLD_PORT,
                                  slurmd_port=SLURMD_PORT, dir=self.dir, nodes=nodes, partition=PARTITION))
        with open(os.path.join(os.path.dirname(self.conf), "mpi.conf"), "w") as fh:
            fh.write(f"PMIxCliTmpDirBase={self.dir}/pmix\n")

    def _spawn(self, name: str, ns: str, argv: list[str], hostname: str | None = None,
               binds: list[tuple[str, str]] = ()) -> None:
        """argv in network namespace ns, in the foreground (its pid is the daemon's), with a mount
        namespace of its own for the binds and a UTS namespace named `hostname`. nsenter, not
        `ip netns exec`: that remounts /sys, and slurmd will not start without /sys/fs/cgroup
        (22.05 loads its cgroup plugin even with proctrack/linuxproc)."""
        steps = ([f"hostname {shlex.quote(hostname)}"] if hostname else []) + [
            f"mount --bind {shlex.quote(src)} {shlex.quote(dst)}" for src, dst in binds]
        script = " && ".join([*steps, f"exec {shlex.join(argv)}"])
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "wb")
        cmd = ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--propagation", "slave", "--uts",
               "sh", "-c", script]
        with signals_held():  # a kill mid-start must find it in self.procs to stop it
            self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        log.close()

    def _all_idle(self) -> bool:
        out = call_in_netns(self.hub, subprocess.run, [_tool("sinfo"), "-h", "-N", "-o", "%N %T"],
                            env={**os.environ, **self.env()}, capture_output=True, text=True, timeout=10)
        states = dict(fields for fields in map(str.split, out.stdout.splitlines()) if len(fields) == 2)
        return out.returncode == 0 and all(states.get(node) == "idle" for node in self.nodes)

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready():
            dead = [name for name, proc in self.procs.items() if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"not after {READY_TIMEOUT_S:g} s"
                raise IngestError(f"cluster: SLURM not ready ({what}): {why}; {self.logs()}")
            time.sleep(0.1)

    def logs(self, n_chars: int = 600) -> str:
        """The tail of every daemon's log, for error messages."""
        parts = []
        for directory in (os.path.join(self.dir, "log"), os.path.join(self.dir, "munge")):
            for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
                if name.endswith((".log", ".out")):
                    with open(os.path.join(directory, name), "rb") as fh:
                        text = fh.read()[-n_chars:].decode("utf-8", "replace").strip()
                    if text:
                        parts.append(f"{name}: {text}")
        return "\n".join(parts) or "no daemon logged anything"

    def stop(self) -> None:
        """SIGTERM the slurmds, then slurmctld, then munged (SIGKILL after a grace); the steps'
        slurmstepd and ranks go with their namespaces. Safe to call twice."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for name in [*self.nodes, "slurmctld", "munged"]:
            stop_process(self.procs.get(name), grace_s=5.0)
        self.procs.clear()

    # -- launching ---------------------------------------------------------------------------
    def srun_command(self, argv: list[str], n_ranks: int, map_by: str | None = None) -> list[str]:
        """srun (in the hub namespace; SLURM_CONF from env()) of argv on n_ranks tasks, filling each
        node's CPUs (the spec's slots) in turn as the hostfile does, or with map_by="node" one
        task per node in turn (mpiexec's --map-by node)."""
        slots = len(self.nodes) * self.cpus_per_node
        if n_ranks > slots:  # slurmctld would queue it for ever; mpiexec says "not enough slots"
            raise IngestError(f"cluster: {n_ranks} ranks but {slots} slots ({len(self.nodes)} nodes x "
                              f"{self.cpus_per_node}: cluster.ranks_per_node)")
        spread = []
        if map_by == "node":
            spread = ["--nodes", str(min(n_ranks, len(self.nodes))), "--distribution", "cyclic"]
        elif map_by is not None:
            raise IngestError(f"cluster: srun places ranks by slot or by node, not {map_by!r}")
        return ["ip", "netns", "exec", self.hub, _tool("srun"), "--mpi=pmix", "--ntasks", str(n_ranks),
                "--partition", PARTITION, "--job-name", self.prefix, *spread,
                "--kill-on-bad-exit=1",  # one failed rank ends the step, as mpiexec does
                *argv]
