"""`python -m ingest.testbed.cluster up|run|down`: the emulated cluster from the command line.

    run [--config F] [--set store.latency_s=0.01] [--launcher slurm] [-n RANKS] -- ARGS...
        build, upload the spec's synthetic cube, run `mpiexec python -m ingest ARGS` on the
        nodes ({source} in ARGS: the cube's s3:// URL; {shared}: the shared filesystem's path,
        the same on every node), print what crossed each link, tear down; exit status: mpiexec's.
        --launcher slurm: also start SLURM on the nodes (slurm.py) and launch with srun instead.
    up [--config F] [--set ...] [--launcher slurm]
        build and upload, print the mpiexec (or srun) command and environment to use, wait for Ctrl-C.
    down
        remove what clusters whose process died left behind (namespaces, mounts, directories).
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

from ingest.errors import ConfigError, IngestError
from ingest.testbed.cluster import netns
from ingest.testbed.cluster.cluster import LAUNCHERS, PREFIX, Cluster
from ingest.testbed.cluster.spec import load_spec
from ingest.testbed.signals import unwind_on_signals

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs", "cluster.toml")
_OWNED = re.compile(rf"^({PREFIX}(\d+)-\d+)-")


def _overrides(settings: list[str]) -> dict:
    """["store.latency_s=0.01", ...] -> {"store": {"latency_s": 0.01}}; values read as TOML."""
    out: dict = {}
    for item in settings:
        key, sep, text = item.partition("=")
        table, dot, field = key.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"--set {item!r}: expected TABLE.FIELD=VALUE, e.g. store.latency_s=0.01")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text  # a bare word such as 25MB
        out.setdefault(table, {})[field] = value
    return out


def _upload_cube(cluster: Cluster) -> str | None:
    """Write the spec's synthetic cube into the run directory and upload it; its s3:// URL."""
    cube = cluster.spec.cube
    if cube is None:
        return None
    from ingest.testbed.synth import write_cube

    path = os.path.join(cluster.run_dir, "cube.fits")
    write_cube(path, cube.shape, cube.bitpix)
    url = cluster.put_file(path, cube.key)
    os.unlink(path)  # the store has its own copy; nodes must read that one
    return url


def _print_links(cluster: Cluster, before: dict[str, int], elapsed_s: float, launcher: str) -> None:
    after = cluster.link_bytes()
    spec = cluster.spec
    caps = {"store": spec.store.egress_rate_bytes_per_s, "fs_read": spec.fs.rate_bytes_per_s,
            "fs_write": spec.fs.rate_bytes_per_s, **{n: spec.node.nic_rate_bytes_per_s for n in cluster.nodes}}
    print(f"cluster: bytes through each cap during {launcher} ({elapsed_s:.1f} s, rank start-up included, so the "
          "mean rate understates the transfer's; the report times the transfer itself):")
    for name, cap in caps.items():
        moved = after[name] - before[name]
        print(f"  {name:>20}: {moved:>12} B  {moved / elapsed_s / 1e6:8.2f} MB/s  (cap {cap / 1e6:g} MB/s)")


def _sweep() -> int:
    """Delete namespaces (and mounts and run directories) of clusters whose owner has exited."""
    dead = {}
    for ns in netns.list_namespaces():
        match = _OWNED.match(ns)
        if match and not os.path.exists(f"/proc/{match.group(2)}"):
            dead.setdefault(match.group(1), []).append(ns)
    for prefix, namespaces in dead.items():
        # Only under the run directories: /run/netns/PREFIX-* are mounts too, and they are the namespaces.
        run_dirs = os.path.join(tempfile.gettempdir(), f"{prefix}-")
        with open("/proc/mounts") as fh:
            mounts = [line.split()[1] for line in fh if line.split()[1].startswith(run_dirs)]
        for mountpoint in mounts:
            subprocess.run(["umount", "-l", mountpoint], capture_output=True)
        for ns in namespaces:
            netns.delete_namespace(ns)
        with open("/proc/mounts") as fh:
            still_mounted = [line.split()[1] for line in fh]
        for name in os.listdir(tempfile.gettempdir()):
            run_dir = os.path.join(tempfile.gettempdir(), name)
            if name.startswith(f"{prefix}-") and not any(m.startswith(run_dir + "/") for m in still_mounted):
                shutil.rmtree(run_dir, ignore_errors=True)  # never through a mount: it would delete the export
        print(f"cluster down: removed {prefix} ({len(namespaces)} namespaces, {len(mounts)} mounts)")
    if not dead:
        print("cluster down: nothing left behind")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.testbed.cluster",
                                     description="An emulated cluster on this machine (root).")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "run"):
        p = sub.add_parser(name)
        p.add_argument("--config", default=DEFAULT_CONFIG, help="cluster TOML (default configs/cluster.toml)")
        p.add_argument("--set", action="append", default=[], metavar="TABLE.FIELD=VALUE", help="override the file")
        p.add_argument("--launcher", choices=LAUNCHERS, default="mpiexec",
                       help="how ranks start on the nodes: mpiexec (default), or srun of a SLURM started on them")
        if name == "run":
            p.add_argument("-n", type=int, default=None, help="ranks (default: nodes x ranks_per_node)")
            p.add_argument("--timeout-s", type=float, default=600.0, help="bound on the mpiexec or srun run (s)")
            p.add_argument("args", nargs=argparse.REMAINDER, help="-- then `python -m ingest` arguments")
    sub.add_parser("down")
    args = parser.parse_args(argv)
    if args.command == "down":
        return _sweep()

    unwind_on_signals()  # `with Cluster` below tears the cluster down on SIGTERM, SIGHUP, Ctrl-C
    try:
        spec = load_spec(os.path.normpath(args.config), _overrides(args.set))
        with Cluster(spec, launcher=args.launcher) as cluster:
            source = _upload_cube(cluster)
            print(f"cluster {cluster.prefix}: {spec.nodes} nodes x {spec.ranks_per_node} slots, built in "
                  f"{cluster.build_s:.1f} s; store {cluster.store.endpoint_url}, shared fs {cluster.shared_dir}"
                  + (f", cube {source}" if source else ""), flush=True)
            if args.command == "up":
                env = " ".join(f"{k}={shlex.quote(v)}" for k, v in cluster.env().items())
                command = shlex.join(cluster.launch_command([sys.executable, "-m", "ingest", "run", "--source",
                                                             source or "s3://BUCKET/KEY"]))
                print(f"run ranks on it with:\n  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {env} "
                      f"{command}\nCtrl-C (or kill {os.getpid()}) tears it down.", flush=True)
                signal.pause()
                return 0
            ingest_args = [a.format(source=source or "", shared=cluster.shared_dir)
                           for a in (args.args[1:] if args.args[:1] == ["--"] else args.args)]
            before, t0 = cluster.link_bytes(), time.monotonic()
            proc = cluster.launch(ingest_args, n_ranks=args.n, timeout_s=args.timeout_s)
            elapsed_s = time.monotonic() - t0
            sys.stdout.write(proc.stdout)
            sys.stderr.write(proc.stderr)
            _print_links(cluster, before, elapsed_s, "srun" if args.launcher == "slurm" else "mpiexec")
        print(f"cluster {cluster.prefix}: torn down in {cluster.teardown_s:.1f} s")
        return proc.returncode
    except KeyboardInterrupt:
        print("cluster: interrupted; torn down", file=sys.stderr)
        return 130
    except (IngestError, subprocess.TimeoutExpired) as exc:
        print(f"python -m ingest.testbed.cluster: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
