"""Every data-moving command on the emulated cluster: exact, x its physical limit, x its prediction, rank 0's share.

N ranks over M nodes: `run` (the whole cube, and s2p regions), `prestage`, `publish` and
`cutouts`, each checked exact, timed against its physical limit and its prediction, with what
rank 0 did for the others (issue 46 part 4; issue 44's cutouts on 2 and 4 nodes).

One cluster per node count (configs/cluster.toml's rates, its node count overridden, as
bench/cluster/makespan.py) and one synthetic float32 cube (HI's RESTFRQ in its header, for the catalogue's
velocity widths), uploaded to it. Per rank count, in this order, one real `mpiexec python -m
ingest COMMAND ... --report FILE --no-progress` per command, ranks round-robin over the nodes
(`--map-by node`), inside links.meter_for(cluster) so the bytes each capped link carried are known.
Outputs go to a host directory, i.e. node-local disk (the namespaces isolate only the network):
  run       --grid auto over the whole cube; exact: every file holds its box of the cube, bit for
            bit, and every voxel is in some file
  s2p       bench.cluster.makespan's s2p regions (--region-shape), written and checked as run's
  prestage  the default layout; exact as its manifest says it wrote: a frame file is the cube byte
            for byte (a subcubes layout: each region's values)
  publish   that pre-stage back to s3://BUCKET/published-nM-pN.fits; exact: the stored object is
            the cube's file byte for byte
  cutouts   a WALLABY-like catalogue (bench/cutouts/_setup.py: --sources centres spread over the
            cube, WALLABY's pixel and channel extents); exact: every source cut, every cut-out
            bit-equal to its manifest box of the cube
The limit is ingest/testbed/cluster/limits.py's spec_limit of the cell's wire bytes from the
store (publish: its uploaded bytes into the store, whose ingress cluster.py caps at the egress
rate, as bench/publish/cluster.py); the carried limit is ingest.study.summary.row_limit of what
the links carried over the makespan's busiest stretch (publish: the upload's counters under the
read's names, every cap being symmetric). The prediction is the report's settings.prediction
(run, s2p, prestage before the read; cutouts priced from the ranks' plans; publish: none). Rank 0's ledger is the
report's "root" (ingest/driver/rootwork.py), wherever the command's report carries one ("no
ledger" in the table where it does not); cutouts' rank0_prepare_s and rank0_gather_s are kept
beside it. Targets: makespan <= 1.15x the limit; rank 0's own CPU seconds <= 5% of the
makespan (its wall share is shown beside: where ranks outnumber cores it counts the wait for one,
docs/install-cluster.md section 7); measured / predicted within 0.8-1.25.

    python -m bench.cluster.commands [--nodes 2,4] [--ranks 4] [--commands run,s2p,prestage,publish,cutouts]
                                     [--shape 64x512x512] [--sources 200] [--run-timeout-s 1200]
    python -m bench.cluster.commands --summarize bench/results/cluster_commands.json
Needs root (network namespaces) and scripts/setup.sh's tools, as bench/cluster/makespan.py.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.cluster import _commands_check as check
from bench.cluster import makespan as cluster_bench
from bench import common
from bench.cluster._commands_table import COMMANDS, TARGETS, to_markdown
from bench.cutouts._setup import HI_REST_HZ, wallaby_size_text, write_catalogue
from ingest.study import links
from ingest.study.summary import row_limit
from ingest.testbed.cluster import Cluster, unavailable_reason
from ingest.testbed.cluster.limits import STORE_EGRESS, spec_limit
from ingest.testbed.cluster.netns import call_in_netns
from ingest.testbed.signals import unwind_on_signals
from ingest.testbed.synth import write_cube

NAME = "cluster_commands"
RUN_TIMEOUT_S = 1200.0  # 64 ranks' start-up on this machine's 2 cores takes minutes, not seconds
CATALOGUE_SEED = 46
# report["root"]'s fields a cell keeps (ingest/driver/rootwork.py), each as root_<field>
ROOT_FIELDS = ("own_s", "own_cpu_s", "of_makespan", "cpu_of_makespan", "waiting_s", "gathers", "bytes_gathered",
               "steps", "steps_s", "measuring_s", "gather_s", "report_s", "starting_s", "starting_cpu_s", "by_step")


def command_argv(command: str, *, url: str, shape, out_dir: str, report: str, catalogue: str | None = None,
                 size: str | None = None, staged_dir: str | None = None, dest: str | None = None,
                 extra: tuple = ()) -> list[str]:
    """`python -m ingest` arguments of one cell (see the module docstring); `extra`: more options."""
    tail = ["--report", report, "--no-progress", *extra]
    if command == "run":
        return ["run", "--source", url, "--method", "s3", "--grid", "auto", "--output-dir", out_dir, *tail]
    if command == "s2p":
        return ["run", "--source", url, "--method", "s3", *cluster_bench.workload_args("s2p", shape),
                "--output-dir", out_dir, *tail]
    if command == "prestage":
        return ["prestage", "--source", url, "--method", "s3", "--output-dir", out_dir, *tail]
    if command == "publish":
        return ["publish", "--source", staged_dir, "--dest", dest, *tail]
    if command == "cutouts":
        return ["cutouts", "--source", url, "--method", "s3", "--catalogue", catalogue, "--size", size,
                "--output-dir", out_dir, *tail]
    raise ValueError(f"command {command!r}: expected one of {', '.join(COMMANDS)}")


def report_measures(command: str, report: dict) -> dict:
    """The makespan, wire bytes, requests, prediction and rank 0's ledger, by the names each
    command's report uses for them (makespan_field says which was taken)."""
    if command in ("run", "s2p", "prestage"):
        agg = report["aggregate"]
        out = {"makespan_s": agg["makespan_s"], "makespan_field": "aggregate.makespan_s",
               "wire_bytes": agg["bytes_wire"], "requests": agg["requests"]}
    elif command == "cutouts":
        totals = report["totals"]
        out = {"makespan_s": report["makespan_s"], "makespan_field": "makespan_s", "wire_bytes": totals["bytes_wire"],
               "requests": totals["requests"], "sources_done": totals["done"], "sources_skipped": totals["skipped"],
               "rank0_prepare_s": report.get("rank0_prepare_s"), "rank0_gather_s": report.get("rank0_gather_s")}
    elif command == "publish":
        ranks = report["ranks"]
        # An upload's wire bytes are the parts' bodies it sent to the store; its requests the UploadPart calls.
        out = {"makespan_s": report["elapsed_s"], "makespan_field": "elapsed_s",
               "wire_bytes": sum(r["bytes_uploaded"] for r in ranks),
               "requests": sum(r["parts_uploaded"] for r in ranks),
               "object_bytes": report["object_bytes"], "parts": report["parts"],
               # What the store's ingress carried beyond the object: parts sent again after a failed
               # attempt (a timeout, a reset), and throttled attempts (their bodies may not have gone).
               "upload_failures": report["upload_failures"]}
        timeline = report.get("timeline_s") or {}
        if "first_upload" in timeline and "last_upload_end" in timeline:
            # From rank 0's start to the first part going up, and from there to the last part's end.
            out["before_first_upload_s"] = timeline["first_upload"]["first"]
            out["upload_window_s"] = timeline["last_upload_end"]["last"] - timeline["first_upload"]["first"]
    else:
        raise ValueError(f"command {command!r}: expected one of {', '.join(COMMANDS)}")
    prediction = (report.get("settings") or {}).get("prediction") or {}
    if prediction.get("makespan_s"):
        out.update(predicted_s=prediction["makespan_s"], predicted_binding=prediction.get("binding"),
                   predicted_shared_source=prediction.get("shared_source"), predicted_by="report settings.prediction")
    root = report.get("root")
    out["root_ledger"] = bool(root)
    if root:
        out.update({f"root_{k}": root.get(k) for k in ROOT_FIELDS})
    return out


def cell_limit(spec, command: str, wire_bytes: float, ranks: int, nodes: int) -> dict:
    """limits.spec_limit of the cell's bytes from the store (publish: into it, through the store's
    ingress, capped at its egress rate), ranks spread round-robin: ceil(ranks / nodes) a node."""
    lim = spec_limit(spec, wire_bytes, ranks, source="store", nodes=nodes, ranks_per_node=math.ceil(ranks / nodes))
    binding = "store ingress" if command == "publish" and lim.binding == STORE_EGRESS else lim.binding
    return {"limit_s": lim.seconds, "limit_binding": binding, "limit_terms_s": lim.terms_s}


def upload_as_read(carried: dict) -> dict:
    """An upload's counters under a read's names ("store_in" -> "store", "nI>store" -> "store>nI"):
    every cap of the cluster is symmetric (cluster.py), so carried_limit's direct phase over them
    is the upload's least time."""
    out = {"store": carried.get("store_in", 0)}
    out.update({f"store>{link[:-len('>store')]}": n for link, n in carried.items() if link.endswith(">store")})
    return out


def carried_measures(meter, cluster, command: str, makespan_s: float) -> dict:
    """The carried limit: what the links carried over the makespan's busiest stretch, over their rates."""
    if command == "publish":
        span = meter.busiest("store_in", makespan_s)
        if span is None:
            return {}
        up = links.short_names(cluster, meter.carried_between(meter.links, *span))
        link_bytes, lim = {"upload": up}, row_limit({"link_bytes": {"read": upload_as_read(up)}}, cluster.spec, "store")
    else:
        link_bytes = links.phase_bytes(meter, cluster, staged=False, read_s=makespan_s)
        lim = row_limit({"link_bytes": link_bytes}, cluster.spec, "store")
    if lim is None:
        return {"link_bytes": link_bytes}
    return {"link_bytes": link_bytes, "carried_limit_s": lim.seconds, "carried_binding": lim.binding,
            "x_carried_limit": makespan_s / lim.seconds}


@dataclass
class Setting:
    """One built cluster and what every cell on it needs."""

    cluster: Cluster
    nodes: int
    url: str
    cube_path: str
    shape: tuple
    work_dir: str
    catalogue: str | None
    n_sources: int
    timeout_s: float
    keep_reports: str | None = None  # a directory every cell's report is copied into
    extra: dict = field(default_factory=dict)  # command -> more `ingest` options (--publish-args, ...)
    staged: dict = field(default_factory=dict)  # ranks -> the prestage cell's directory, for publish

    @property
    def env(self) -> dict:
        # Nothing of this shell's AWS or MPI settings steers the ranks: the cluster's store, root's permission.
        return self.cluster.launch_env()

    def store_digest(self, key: str) -> tuple[str, int]:
        """(SHA-256, bytes) of an object, read on the store's own loopback (unshaped, outside any cell)."""
        bucket = self.cluster.spec.store.bucket

        def fetch():
            body = self.cluster.store.server.client().get_object(Bucket=bucket, Key=key)["Body"]
            return check.stream_digest(body.iter_chunks(check.READ_CHUNK_BYTES))
        return call_in_netns(self.cluster.store_ns, fetch)

    def delete_object(self, key: str) -> None:
        bucket = self.cluster.spec.store.bucket
        call_in_netns(self.cluster.store_ns,
                      lambda: self.cluster.store.server.client().delete_object(Bucket=bucket, Key=key))


def _tail(text) -> str:
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else (text or "")
    return text[-800:]


def _exactness(s: Setting, command: str, report: dict, out_dir: str, key: str | None) -> str | None:
    if command in ("run", "s2p"):
        return check.check_run(report, s.cube_path)
    if command == "prestage":
        return check.check_prestage(report["extra"]["manifest"], s.cube_path)
    if command == "cutouts":
        return check.check_cutouts(out_dir, s.cube_path, s.n_sources)
    digest, n_bytes = s.store_digest(key)
    if n_bytes != os.path.getsize(s.cube_path) or digest != check.file_digest(s.cube_path):
        return f"s3://{s.cluster.spec.store.bucket}/{key}: {n_bytes} bytes, not the cube's file byte for byte"
    return None


def run_cell(s: Setting, command: str, ranks: int) -> dict:
    """One command on `ranks` ranks: launched, metered, measured, checked; a failure is a row, not an exception."""
    row = {"command": command, "nodes": s.nodes, "ranks": ranks, "ranks_per_node": math.ceil(ranks / s.nodes)}
    tag = f"{command}-n{s.nodes}-p{ranks}"
    report_path, out_dir = os.path.join(s.work_dir, f"report-{tag}.json"), os.path.join(s.work_dir, tag)
    key = f"published-n{s.nodes}-p{ranks}.fits" if command == "publish" else None
    if command == "publish" and ranks not in s.staged:
        return {**row, "status": "failed", "stderr_tail": "no pre-stage of this rank count to publish (its prestage "
                                                          "cell failed)"}
    argv = command_argv(command, url=s.url, shape=s.shape, out_dir=out_dir, report=report_path,
                        catalogue=s.catalogue, size=wallaby_size_text(), staged_dir=s.staged.get(ranks),
                        dest=f"s3://{s.cluster.spec.store.bucket}/{key}", extra=s.extra.get(command, ()))
    cmd = s.cluster.mpiexec_command([sys.executable, "-m", "ingest", *argv], ranks, map_by="node")
    t0 = time.monotonic()
    try:
        with links.meter_for(s.cluster) as meter:
            proc = subprocess.run(cmd, env=s.env, capture_output=True, text=True, timeout=s.timeout_s,
                                  stdin=subprocess.DEVNULL)
        row["wall_s"] = time.monotonic() - t0
        if proc.returncode != 0 or not os.path.exists(report_path):
            return {**row, "status": "failed", "stderr_tail": _tail(proc.stderr)}
        if command == "prestage":
            s.staged[ranks] = out_dir  # kept for this rank count's publish; the run loop removes it
        with open(report_path) as fh:
            report = json.load(fh)
        if s.keep_reports:
            os.makedirs(s.keep_reports, exist_ok=True)
            shutil.copyfile(report_path, os.path.join(s.keep_reports, f"report-{tag}.json"))
        row.update(report_measures(command, report))
        if row.get("predicted_s"):
            row["measured_over_predicted"] = row["makespan_s"] / row["predicted_s"]
        row.update(cell_limit(s.cluster.spec, command, row["wire_bytes"], ranks, s.nodes))
        row["x_limit"] = row["makespan_s"] / row["limit_s"]
        if row.get("upload_window_s"):
            row["x_limit_uploads"] = row["upload_window_s"] / row["limit_s"]
        row.update(carried_measures(meter, s.cluster, command, row["makespan_s"]))
        problem = _exactness(s, command, report, out_dir, key)
        return {**row, "status": "ok" if problem is None else "inexact", "exact": problem is None, "check": problem}
    except subprocess.TimeoutExpired as exc:  # a cell, not the whole bench: the next cells still run
        return {**row, "status": "failed", "wall_s": time.monotonic() - t0,
                "stderr_tail": f"timed out after {s.timeout_s:g} s (--run-timeout-s); {_tail(exc.stderr)}"}
    except Exception as exc:  # noqa: BLE001 - a report or an output this bench cannot read is the cell's failure
        return {**row, "status": "failed", "stderr_tail": f"bench: {type(exc).__name__}: {exc}"[-800:]}
    finally:
        if s.staged.get(ranks) != out_dir:  # every output but a pre-stage kept for publish goes now
            shutil.rmtree(out_dir, ignore_errors=True)
        if key is not None:
            try:
                s.delete_object(key)
            except Exception:  # noqa: BLE001 - an object that was never written
                pass


def parse_commands(text: str) -> list[str]:
    """--commands, in COMMANDS' order (publish sends prestage's directory back, so it comes after it)."""
    given = [c.strip() for c in text.split(",") if c.strip()]
    unknown = sorted(set(given) - set(COMMANDS))
    if unknown or not given:
        raise SystemExit(f"--commands: {', '.join(unknown) or 'none given'}; expected some of {', '.join(COMMANDS)}")
    if "publish" in given and "prestage" not in given:
        raise SystemExit("--commands: publish sends the prestage cell's directory back; add prestage")
    return [c for c in COMMANDS if c in given]


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m bench.cluster.commands", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=cluster_bench.CONFIG, help="cluster TOML (default configs/cluster.toml)")
    parser.add_argument("--nodes", default="2,4", help="node counts, one cluster each (default 2,4)")
    parser.add_argument("--ranks", default="4", help="rank counts (default 4)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"some of {','.join(COMMANDS)} (default all)")
    parser.add_argument("--queue", default=None, choices=("fair", "fifo"),
                        help="how the servers' pipes are shared among the nodes (default: the config's)")
    parser.add_argument("--shape", default=None, metavar="CHANNELSxYxX",
                        help="the cube's shape, float32 (default bench/cluster/makespan.py's 64x512x512)")
    parser.add_argument("--sources", type=int, default=200, help="catalogue sources for cutouts (default 200)")
    parser.add_argument("--run-timeout-s", type=float, default=RUN_TIMEOUT_S,
                        help=f"bound on one cell's mpiexec, rank start-up included (default {RUN_TIMEOUT_S:g})")
    parser.add_argument("--results-dir", default=None, help=f"where {NAME}.json goes (default bench/results)")
    parser.add_argument("--summarize", metavar="JSON", default=None,
                        help=f"print the table of a {NAME}.json; run nothing")
    for command in COMMANDS:
        parser.add_argument(f"--{command}-args", default="", metavar="ARGS",
                            help=f"more `ingest` options for the {command} cells, e.g. '--threads 8'")
    parser.add_argument("--keep-reports", metavar="DIR", default=None,
                        help="copy every cell's JSON report (per-rank figures included) into DIR")
    parser.add_argument("--quiet", action="store_true", help="no per-cell lines on stderr")
    return parser


def extra_args(args) -> dict:
    """--COMMAND-args as each command's option list; a line that does not split is refused by name."""
    out = {}
    for command in COMMANDS:
        text = getattr(args, f"{command}_args")
        try:
            out[command] = tuple(shlex.split(text))
        except ValueError as exc:
            raise SystemExit(f"--{command}-args: {text!r} does not split into options ({exc})") from None
    return out


def _results(args, rows: list, object_bytes: int, complete: bool) -> dict:
    return {**cluster_bench._results(args, rows, object_bytes, complete), "commands": parse_commands(args.commands),
            "sources": args.sources, "targets": TARGETS}


def _log_line(row: dict) -> str:
    text = f"{row['command']} {row['nodes']} nodes {row['ranks']} ranks: {row['status']}"
    if "x_limit" in row:
        text += f", {row['makespan_s']:.3f} s, x{row['x_limit']:.2f} the limit ({row['limit_binding']})"
    return text + "".join(f"; {row[k]}" for k in ("check", "plan_error") if row.get(k)) + (
        f"\n{row['stderr_tail'][-400:]}" if row.get("stderr_tail") else "")


def run(args) -> dict:
    reason = unavailable_reason()
    if reason:
        raise SystemExit(reason)
    commands, shape, log = parse_commands(args.commands), cluster_bench._shape(args), common.logger(args)
    nodes_list, ranks_list = common.counts("--nodes", args.nodes), common.counts("--ranks", args.ranks)
    if args.sources < 1:
        raise SystemExit(f"--sources: {args.sources} must be at least 1")
    extra = extra_args(args)
    work_dir = tempfile.mkdtemp(prefix="ingest-bench-cluster-commands-")
    # The cells share one cache of measured links, as a centre's runs do (bench/cluster/makespan.py): a cell
    # too small to probe is planned with what an earlier one measured.
    os.environ["INGEST_LINK_CACHE"] = os.path.join(work_dir, "links.json")
    rows, object_bytes = [], 0
    try:
        cube_path = os.path.join(work_dir, "cube.fits")
        made = write_cube(cube_path, shape, -32, restfrq_hz=HI_REST_HZ)
        object_bytes = made["file_bytes"]
        catalogue = None
        if "cutouts" in commands:  # the catalogue reads the cube's header: its WCS places the sources
            cube = common.Cube(cube_path, cluster_bench._spec(args).store.bucket, "cube.fits", tuple(shape), -32,
                               made["data_offset"], made["data_bytes"], object_bytes, 0.0)
            catalogue = write_catalogue(os.path.join(work_dir, "catalogue.csv"), cube, args.sources, CATALOGUE_SEED)
        for nodes in nodes_list:
            with Cluster(cluster_bench._spec(args, nodes, max(ranks_list))) as cluster:
                url = cluster.put_file(cube_path, "cube.fits")
                s = Setting(cluster, nodes, url, cube_path, shape, work_dir, catalogue, args.sources,
                            args.run_timeout_s, args.keep_reports,
                            extra)
                for ranks in ranks_list:
                    try:
                        for command in commands:
                            row = run_cell(s, command, ranks)
                            rows.append(row)
                            # after every cell: a stopped run keeps what it measured
                            common.write_results(NAME, _results(args, rows, object_bytes, False), args.results_dir)
                            if log:
                                log(_log_line(row))
                    finally:
                        for staged in s.staged.values():
                            shutil.rmtree(staged, ignore_errors=True)
                        s.staged.clear()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return _results(args, rows, object_bytes, True)


def main(argv=None) -> int:
    # killed, a run still tears its cluster down (ingest.testbed.signals); a summary starts none
    return common.summarize_or_run(build_parser().parse_args(argv), NAME, run, to_markdown,
                                   before_run=unwind_on_signals)


if __name__ == "__main__":
    raise SystemExit(main())
