"""Makespan / physical limit on the emulated cluster: N ranks over M nodes, direct S3 reads and the
staging baseline, per workload, with where each cell's bottleneck is.

Each node count builds one cluster (ingest.testbed.cluster: configs/cluster.toml's rates, its
node count overridden) and uploads one synthetic cube; every cell is a real `mpiexec python -m
ingest run|stage` on its nodes, ranks spread round-robin (`--map-by node`). The limit is
ingest/testbed/cluster/limits.py's, the one the study's figures draw: the cell's wire bytes
through the binding pipe (node NIC, store egress, shared filesystem) at the payload rate its
frames leave a TCP reader, plus one latency; staging
adds the whole cube's copy through node 0 (s5cmd on rank 0). "x carried limit" is the cell's time over
the study's limit instead (ingest.study.summary.row_limit): the bytes each capped link carried
(its counters, sampled while the cell ran: read-ahead, headers and retries included) over its
rate, the largest plus one latency; staging's is the copy's plus the read's. The bottleneck column is the
limit's binding term, or "client CPU" when the cell ran at over CPU_BOUND_RATIO x its limit
while this machine's cores were at least CPU_BUSY busy (sampled from /proc/stat over the read).

    python -m bench.cluster.makespan [--nodes 1,2,4] [--ranks 1,2,4,8,16] [--workloads whole,thin,s2p]
                            [--methods direct,staging] [--repeats 1]
Needs root (network namespaces) and scripts/setup.sh's tools; s5cmd from the bench extra.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common
from ingest.driver.mpi import cpus
from ingest.study import links
from ingest.study.summary import row_limit
from ingest.testbed.cluster import Cluster, load_spec, unavailable_reason
from ingest.testbed.cluster.limits import spec_limit
from ingest.testbed.signals import unwind_on_signals
from ingest.testbed.synth import write_cube
from ingest.units import MiB

NAME = "cluster"
CONFIG = os.path.join(common.REPO_ROOT, "configs", "cluster.toml")
SHAPE = (64, 512, 512)  # numpy order, float32: 64 MiB, 0.5 MiB per plane
CPU_BOUND_RATIO = 2.0  # over 2x the pipes' limit ...
CPU_BUSY = 0.9  # ... with the machine's cores >= 90% busy: the client's CPU, not a pipe, set the pace
RUN_TIMEOUT_S = 300.0
MACHINE_CORES = len(cpus())  # the emulated nodes' ranks all run on this machine's


def _thin_region(shape) -> str:
    """Seed 001's thin box (bench/reads/shared.py): every channel, a centred window 1/16 of the side."""
    nchan, ny, nx = shape
    w = max(1, nx // 16)
    y0, x0 = (ny - w) // 2, (nx - w) // 2
    return f"0:{nchan},{y0}:{y0 + w},{x0}:{x0 + w}"


def workload_args(name: str, shape) -> list[str]:
    """The ingest options of each workload: the whole cube over the ranks, the thin box over the
    ranks, or s2p_setup's regions (a quarter of the plane, half the channels, FITS order)."""
    nchan, ny, nx = shape
    return {"whole": ["--grid", "auto"],
            "thin": ["--region", _thin_region(shape), "--grid", "auto"],
            "s2p": ["--region-shape", f"{nx // 2}x{ny // 2}x{nchan // 2}"]}[name]


class CpuSampler:
    """/proc/stat every 50 ms on a thread: busy fraction of all cores over any window."""

    def __init__(self, period_s: float = 0.05):
        self.period_s, self.samples, self._stop = period_s, [], threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def _read():
        with open("/proc/stat") as fh:
            vals = [int(v) for v in fh.readline().split()[1:]]
        idle = vals[3] + vals[4]
        return sum(vals) - idle, sum(vals)

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append((time.time(), *self._read()))
            time.sleep(self.period_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def busy(self, t0: float, t1: float) -> float | None:
        inside = [s for s in self.samples if t0 - self.period_s <= s[0] <= t1 + self.period_s]
        if len(inside) < 2 or inside[-1][2] == inside[0][2]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])


def _cell(cluster: Cluster, url: str, shape, workload: str, method: str, ranks: int, nodes: int,
          object_bytes: int, work_dir: str, sampler: CpuSampler, timeout_s: float = RUN_TIMEOUT_S) -> dict:
    report = os.path.join(work_dir, f"report-{workload}-{method}-n{nodes}-p{ranks}.json")
    if os.path.exists(report):
        os.remove(report)
    stage_here = os.path.join(cluster.fs.export_dir, "stage")
    argv = [*(["run", "--method", "s3"] if method == "direct" else
              ["stage", "--method", "s3", "--stage-with", "s5cmd", "--stage-dir",
               os.path.join(cluster.shared_dir, "stage")]),
            "--source", url, *workload_args(workload, shape), "--report", report, "--no-progress",
            # direct reads: the planner chooses threads for the whole job; staging's read as before
            *([] if method == "direct" else ["--threads", "4"])]
    if method == "staging":
        os.makedirs(stage_here, exist_ok=True)
    cmd = cluster.mpiexec_command([sys.executable, "-m", "ingest", *argv], ranks, map_by="node")
    child_env = cluster.launch_env()
    import subprocess

    t_start = time.time()
    row = {"workload": workload, "method": method, "nodes": nodes, "ranks": ranks, "queue": cluster.spec.queue,
           "ranks_per_node": math.ceil(ranks / nodes)}
    try:
        with links.meter_for(cluster) as meter:  # what each capped link carried, for the carried limit
            proc = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:  # a cell, not the whole bench: the next cells still run
        stderr = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return {**row, "status": "failed", "wall_s": time.time() - t_start,
                "stderr_tail": f"timed out after {timeout_s:g} s (--run-timeout-s); {stderr[-600:]}"}
    finally:
        shutil.rmtree(stage_here, ignore_errors=True)
    row["wall_s"] = time.time() - t_start
    if proc.returncode != 0 or not os.path.exists(report):
        return {**row, "status": "failed", "stderr_tail": proc.stderr[-800:]}
    with open(report) as fh:
        rep = json.load(fh)
    end = os.path.getmtime(report)
    agg = rep["aggregate"]
    row.update(status="ok", bytes_wire=agg["bytes_wire"], bytes_needed=agg["bytes_needed"],
               requests=agg["requests"], regions=len(rep.get("regions") or []))
    if rep.get("root"):  # rank 0's own work (ingest.driver.rootwork): what grows with the ranks
        root = rep["root"]
        row.update(root_own_s=root["own_s"], root_own_cpu_s=root.get("own_cpu_s"), root_steps_s=root["steps_s"],
                   root_waiting_s=root.get("waiting_s"), root_gather_s=root["gather_s"],
                   root_report_s=root["report_s"], root_bytes_gathered=root["bytes_gathered"],
                   root_of_makespan=root["own_s"] / agg["makespan_s"] if agg["makespan_s"] else None,
                   root_cpu_of_makespan=root.get("cpu_of_makespan"))
    rpn = math.ceil(ranks / nodes)  # --map-by node: the fullest node holds ceil(N/M) ranks
    if method == "direct":
        row["makespan_s"] = agg["makespan_s"]
        prediction = (rep.get("settings") or {}).get("prediction") or {}
        if prediction.get("makespan_s"):  # the planner's whole-job prediction, made before the read
            row.update(predicted_s=prediction["makespan_s"], predicted_binding=prediction["binding"],
                       measured_over_predicted=agg["makespan_s"] / prediction["makespan_s"],
                       shared_source=prediction.get("shared_source"),
                       # the model alone, where earlier jobs of the cell's shape predicted it (a repeat)
                       model_s=prediction.get("model_makespan_s") or prediction["makespan_s"],
                       history=prediction.get("history"),
                       # what the job's probe rounds measured, for the record (why the model said so)
                       shared_rounds=(rep.get("settings") or {}).get("shared_rounds"),
                       tuning=(rep.get("settings") or {}).get("tuning"))
        lim = spec_limit(cluster.spec, agg["bytes_wire"], ranks, source="store", nodes=nodes, ranks_per_node=rpn)
        window = row["makespan_s"]
    else:
        base = rep["baseline"]
        row.update(makespan_s=base["total_s"], stage_s=base["stage_s"], read_s=base["read_makespan_s"])
        lim = spec_limit(cluster.spec, agg["bytes_wire"], ranks, source="staging", object_bytes=object_bytes,
                         nodes=nodes, ranks_per_node=rpn)
        window = base["read_makespan_s"]  # the read: the copy is one s5cmd process, not the ranks
    # The client's CPU floor: every rank's CPU seconds over the read (the report's), on this
    # machine's cores, which all the emulated nodes share. Where it is above the pipes' limit, it
    # is the limit (issue 24: bytes over the binding pipe plus latency, or the CPU floor).
    cpus = [r.get("cpu_s") for r in rep.get("ranks") or []]
    client_cpu_s = sum(cpus) if cpus and all(c is not None for c in cpus) else None
    cpu_floor_s = client_cpu_s / MACHINE_CORES if client_cpu_s is not None and method == "direct" else None
    limit_s, binding = lim.seconds, lim.binding
    if cpu_floor_s is not None and cpu_floor_s > limit_s:
        limit_s, binding = cpu_floor_s, "client CPU"
    # The study's limit (ingest.study.summary.row_limit): the bytes each link carried over its rate.
    carried = links.phase_bytes(meter, cluster, staged=method == "staging", read_s=window,
                                stage_s=row.get("stage_s"))
    carried_lim = row_limit({"link_bytes": carried}, cluster.spec, "store" if method == "direct" else "staging")
    if carried_lim is not None:
        row.update(carried_limit_s=carried_lim.seconds, carried_binding=carried_lim.binding,
                   carried_ratio=row["makespan_s"] / carried_lim.seconds, link_bytes=carried)
    row.update(pipe_limit_s=lim.seconds, limit_s=limit_s, limit_binding=binding, limit_terms_s=lim.terms_s,
               client_cpu_s=client_cpu_s, cpu_floor_s=cpu_floor_s, ratio=row["makespan_s"] / limit_s,
               cpu_busy=sampler.busy(end - window, end))
    cpu_bound = row["ratio"] > CPU_BOUND_RATIO and (row["cpu_busy"] or 0) >= CPU_BUSY
    row["bottleneck"] = "client CPU" if cpu_bound else binding
    return row


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m bench.cluster.makespan", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG, help="cluster TOML (default configs/cluster.toml)")
    parser.add_argument("--nodes", default="1,2,4", help="node counts, one cluster each (default 1,2,4)")
    parser.add_argument("--ranks", default="1,2,4,8,16", help="rank counts (default 1,2,4,8,16)")
    parser.add_argument("--workloads", default="whole,thin,s2p", help="whole, thin, s2p (default all)")
    parser.add_argument("--methods", default="direct,staging", help="direct (S3 API), staging (s5cmd + read)")
    parser.add_argument("--staging-workloads", default=None,
                        help="workloads that also run the staging baseline (default: all of --workloads)")
    parser.add_argument("--queue", default=None, choices=("fair", "fifo"),
                        help="how the servers' pipes are shared among the nodes (default: the config's, fair)")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds per cell (default 1)")
    parser.add_argument("--shape", default=None, metavar="CHANNELSxYxX",
                        help="the cube's shape, float32 (default 64x512x512: 64 MiB)")
    parser.add_argument("--run-timeout-s", type=float, default=RUN_TIMEOUT_S,
                        help=f"bound on one cell's mpiexec, rank start-up included (default {RUN_TIMEOUT_S:g})")
    parser.add_argument("--results-dir", default=None, help="where cluster.json goes (default bench/results)")
    parser.add_argument("--summarize", metavar="JSON", default=None, help="print the table of a cluster.json; run nothing")
    parser.add_argument("--append", action="store_true",
                        help="keep the cells of an earlier cluster.json in --results-dir and add these")
    parser.add_argument("--quiet", action="store_true", help="no per-cell lines on stderr")
    return parser


def _shape(args) -> tuple:
    """The cube's numpy shape: --shape CHANNELSxYxX, or SHAPE."""
    if not args.shape:
        return SHAPE
    try:
        shape = tuple(int(n) for n in args.shape.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise SystemExit(f"--shape: {args.shape!r} is not CHANNELSxYxX, e.g. 256x512x512")
    return shape


def _spec(args, nodes: int | None = None, ranks_per_node: int | None = None):
    """The config's cluster, with the command line's node count, slots and queue."""
    cluster = {k: v for k, v in (("nodes", nodes), ("ranks_per_node", ranks_per_node), ("queue", args.queue))
               if v is not None}
    return load_spec(args.config, {"cluster": cluster} if cluster else None)


def _results(args, rows: list, object_bytes: int, complete: bool) -> dict:
    spec = _spec(args)
    return {"cube_shape": list(_shape(args)), "object_bytes": object_bytes, "complete": complete, "spec": {
        "store_egress_bytes_per_s": spec.store.egress_rate_bytes_per_s, "store_latency_s": spec.store.latency_s,
        "nic_bytes_per_s": spec.node.nic_rate_bytes_per_s, "fs_bytes_per_s": spec.fs.rate_bytes_per_s,
        "fs_latency_s": spec.fs.latency_s, "queue": spec.queue}, "cells": rows}


def _earlier(args) -> list:
    """The cells of the cluster.json an --append run adds to."""
    path = common.results_dir(args.results_dir) / f"{NAME}.json"
    if not path.exists():
        return []
    with open(path) as fh:
        return json.load(fh)["cells"]


def run(args) -> dict:
    reason = unavailable_reason()
    if reason:
        raise SystemExit(reason)
    log = common.logger(args)
    nodes_list, ranks_list = common.counts("--nodes", args.nodes), common.counts("--ranks", args.ranks)
    workloads, methods = args.workloads.split(","), args.methods.split(",")
    staging_workloads = args.staging_workloads.split(",") if args.staging_workloads else workloads
    work_dir = tempfile.mkdtemp(prefix="ingest-bench-cluster-")
    # The cells share one cache of measured links, as a centre's runs do: a cell too small to
    # probe is planned with what an earlier cell measured (the report names which it used).
    os.environ["INGEST_LINK_CACHE"] = os.path.join(work_dir, "links.json")
    cube = os.path.join(work_dir, "cube.fits")
    shape = _shape(args)
    write_cube(cube, shape, -32)
    object_bytes = os.path.getsize(cube)
    rows = _earlier(args) if args.append else []
    try:
        with CpuSampler() as sampler:
            for nodes in nodes_list:
                spec = _spec(args, nodes, max(ranks_list))
                with Cluster(spec) as cluster:
                    url = cluster.put_file(cube, "cube.fits")
                    for repeat in range(1, args.repeats + 1):
                        for workload in workloads:
                            for method in methods:
                                if method == "staging" and workload not in staging_workloads:
                                    continue
                                for ranks in ranks_list:
                                    row = _cell(cluster, url, shape, workload, method, ranks, nodes, object_bytes,
                                                work_dir, sampler, args.run_timeout_s)
                                    rows.append({**row, "repeat": repeat})
                                    # after every cell: a stopped run keeps what it measured
                                    common.write_results(NAME, _results(args, rows, object_bytes, False),
                                                         args.results_dir)
                                    if log:
                                        log(f"{workload} {method} {nodes} nodes {ranks} ranks: {row['status']} "
                                            + (f"{row['makespan_s']:.3f} s, limit {row['limit_s']:.3f} s "
                                               f"({row['limit_binding']}), x{row['ratio']:.2f}, cpu "
                                               f"{row['cpu_busy'] or 0:.0%} -> {row['bottleneck']}"
                                               if row["status"] == "ok" else row.get("stderr_tail", "")[-300:]))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return _results(args, rows, object_bytes, True)


def to_markdown(results: dict) -> str:
    groups: dict = {}
    for r in results["cells"]:
        groups.setdefault((r["workload"], r["method"], r["nodes"], r["ranks"]), []).append(r)
    body = []
    order = {"whole": 0, "thin": 1, "s2p": 2, "direct": 0, "staging": 1}
    for (workload, method, nodes, ranks), rs in sorted(groups.items(), key=lambda kv: (
            order.get(kv[0][0], 9), order.get(kv[0][1], 9), kv[0][2], kv[0][3])):
        ok = [r for r in rs if r["status"] == "ok"]
        if not ok:
            body.append([workload, method, nodes, ranks, "failed", *["-"] * 12])
            continue
        med = statistics.median
        r0 = ok[0]
        predicted = [r for r in ok if r.get("predicted_s")]
        body.append([workload, method, nodes, ranks, f"{med(r['makespan_s'] for r in ok):.3f}",
                     f"{med(r['predicted_s'] for r in predicted):.3f}" if predicted else "-",
                     f"{med(r['measured_over_predicted'] for r in predicted):.2f}" if predicted else "-",
                     predicted[0]["predicted_binding"] if predicted else "-",
                     f"{med(r.get('pipe_limit_s', r['limit_s']) for r in ok):.3f}",
                     f"{med(r['cpu_floor_s'] for r in ok):.3f}" if all(r.get("cpu_floor_s") for r in ok) else "-",
                     f"{med(r['ratio'] for r in ok):.2f}",
                     f"{med(r['carried_ratio'] for r in ok):.2f}" if all(r.get("carried_ratio") for r in ok) else "-",
                     f"{med(r['bytes_wire'] for r in ok) / MiB:.1f}",
                     f"{med(r['bytes_needed'] for r in ok) / MiB:.2f}",
                     (f"{med(r['root_own_s'] for r in ok):.3f} ({med(r['root_of_makespan'] for r in ok):.1%}); cpu "
                      f"{med(r['root_own_cpu_s'] for r in ok):.3f} ({med(r['root_cpu_of_makespan'] for r in ok):.1%}); "
                      f"{med(r['root_bytes_gathered'] for r in ok) / 1024:.0f} KiB"
                      if all(r.get("root_cpu_of_makespan") is not None for r in ok) else "-"),
                     r0["limit_binding"],
                     f"{r0['bottleneck']} (cpu {med((r['cpu_busy'] or 0) for r in ok):.0%})"])
    s = results["spec"]
    head = common.cluster_heading(
        "Emulated cluster: makespan / physical limit", results,
        f"node NIC {s['nic_bytes_per_s'] / 1e6:g} MB/s, store egress {s['store_egress_bytes_per_s'] / 1e6:g} MB/s "
        f"+{s['store_latency_s'] * 1e3:g} ms, shared fs {s['fs_bytes_per_s'] / 1e6:g} MB/s +{s['fs_latency_s'] * 1e3:g} ms")
    return "\n".join([head, "", common.markdown_table(
        ["workload", "method", "nodes", "ranks", "makespan s", "predicted s", "measured / predicted", "model binds",
         "pipes' limit s", "client CPU floor s", "x limit", "x carried limit", "wire MiB", "needed MiB",
         "rank 0's own s (of makespan); its CPU s; gathered", "limit binds",
         "bottleneck"], body)])


def main(argv=None) -> int:
    unwind_on_signals()  # killed, it still tears its cluster down (ingest.testbed.signals)
    return common.summarize_or_run(build_parser().parse_args(argv), NAME, run, to_markdown)


if __name__ == "__main__":
    raise SystemExit(main())
