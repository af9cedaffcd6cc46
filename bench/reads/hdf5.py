"""HDF5 subcube: ingest vs h5py on an fsspec HTTP file object, same object, same box, same URL.

Three layouts of one cube's values: chunked 16x64x64 and 1x512x512 (gzip + shuffle), and
contiguous. The box is seed 001's thin box (every channel, a centred window 1/16 of the side).
h5py runs on `fsspec.open(url, block_size=...)` with fsspec's defaults and with the best block
size of a small sweep made first in the same run. Every result is checked against h5py's read
of the local file, bit for bit. Also measured: ingest's wire bytes against the stored bytes of
the chunks the box needs (target <= 1.2) and, for contiguous data, ingest's FITS path on the
same values. Ratios are per interleaved round (times h5py / ingest; target >= 10 on acacia).

    python -m bench.reads.hdf5 [--size-mib 1024] [--profiles loopback,acacia] [--blocks-kib 256,1024]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np

from bench import common, links
from bench.reads import shared as reads
from ingest.units import KiB, MiB

NAME = "hdf5"
TARGET_SPEEDUP = 10.0  # h5py+fsspec defaults / ingest, acacia (issue 10)
TARGET_VS_H5CORO = 3.0  # h5coro / ingest, acacia
TARGET_WIRE = 1.2  # ingest wire bytes / stored bytes of the needed chunks
LAYOUTS = {"chunked_16x64x64": (16, 64, 64), "chunked_1x512x512": (1, 512, 512), "contiguous": None}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.hdf5", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--profiles", default="loopback,acacia", help="link profiles (default loopback,acacia)")
    parser.add_argument("--blocks-kib", default="256,1024", help="fsspec block sizes to sweep for h5py, KiB")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help=f"of {','.join(LAYOUTS)}")
    return parser


def h5_cube(env: common.BenchEnv, fits_cube: common.Cube, layout: str) -> dict:
    """The FITS cube's values as an HDF5 dataset in `layout`, written once, uploaded once."""
    import h5py

    from ingest.testbed.synth_hdf5 import write_hdf5_cube
    from ingest.staging.upload import upload_file

    name = f"{os.path.splitext(fits_cube.key)[0]}_{layout}.h5"
    path = os.path.join(env.cache_dir, name)
    chunks = LAYOUTS[layout]
    if chunks is not None:
        chunks = tuple(min(c, n) for c, n in zip(chunks, fits_cube.shape))
    if not os.path.exists(path):
        write_hdf5_cube(path, fits_cube.shape, fits_cube.bitpix, chunks=chunks,
                        compression="gzip" if chunks else "none", shuffle=chunks is not None,
                        byteorder="<")  # little-endian, as most HDF5 is (h5coro misreads big-endian)
    upload_file(path, f"s3://{fits_cube.bucket}/{name}", progress=False, client=env.server.client())
    with h5py.File(path, "r") as f:
        (dataset,) = [k for k in f if isinstance(f[k], h5py.Dataset)]
    return {"path": path, "key": name, "dataset": "/" + dataset, "chunks": chunks, "object_bytes": os.path.getsize(path)}


def _local(path: str, dataset: str, region) -> np.ndarray:
    import h5py

    with h5py.File(path, "r") as f:
        return f[dataset][region]


def h5py_candidate(name, url, dataset, region, want, block_bytes, server_pid, warm=True) -> common.Candidate:
    import fsspec
    import h5py

    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        kw = {} if block_bytes is None else {"block_size": block_bytes}
        with fsspec.open(url, "rb", **kw) as fh, h5py.File(fh, "r") as f:
            data = f[dataset][region]
            cache = getattr(fh, "cache", None)
            counts = ({"requests": int(cache.miss_count), "wire_bytes": int(cache.total_requested_bytes)}
                      if cache is not None and hasattr(cache, "miss_count") else {})
        elapsed_s = time.perf_counter() - t0
        reads.check_same(data, want, name)
        return {"elapsed_s": elapsed_s, "cpu_s": common.cpu_self_s() - cpu0,
                "server_cpu_s": common.cpu_pid_s(server_pid) - srv0, **counts}

    shown = "fsspec default" if block_bytes is None else f"block {block_bytes // KiB} KiB"
    return common.Candidate(name, run, {"reader": f"h5py.File(fsspec.open(url)) [{shown}]",
                                        "block_bytes": block_bytes}, warm=warm)


def _h5coro_read(url: str, dataset: str, region, counts: dict) -> np.ndarray:
    """One h5coro read of `region` over its HTTP driver (requests), counting its range requests."""
    from h5coro import h5coro, webdriver

    class CountingDriver(webdriver.HTTPDriver):  # h5coro builds the driver from (url, credentials)
        def read(self, pos, size):
            counts["requests"] += 1
            counts["wire_bytes"] += size
            return super().read(pos, size)

    with h5coro.H5Coro(url, CountingDriver, credentials=None) as h5:
        slab = [(s.start, s.stop) for s in region]
        return np.asarray(h5.readDatasets([{"dataset": dataset, "hyperslice": slab}], block=True)[dataset])


def h5coro_candidate(name, url, dataset, region, want, server_pid) -> common.Candidate | str:
    """h5coro's candidate, or why it cannot be one here (its failure on this file, as text)."""
    try:
        got = _h5coro_read(url, dataset, region, {"requests": 0, "wire_bytes": 0})
        reads.check_same(got, want, name)
    except Exception as exc:  # h5coro's own limits (contiguous hyperslabs, newer file versions): recorded
        return f"{type(exc).__name__}: {exc}"

    def run() -> dict:
        counts = {"requests": 0, "wire_bytes": 0}
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        got = _h5coro_read(url, dataset, region, counts)
        elapsed_s = time.perf_counter() - t0
        reads.check_same(got, want, name)
        return {"elapsed_s": elapsed_s, "cpu_s": common.cpu_self_s() - cpu0,
                "server_cpu_s": common.cpu_pid_s(server_pid) - srv0, **counts}

    return common.Candidate(name, run, {"reader": "h5coro.H5Coro(url, HTTPDriver) defaults"})


def ingest_candidate(name, url, region, want, server_pid, dataset=None) -> common.Candidate:
    def run() -> dict:
        srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
        got = reads.tuned_read(url, region, method="presigned", dataset=dataset)
        elapsed_s = time.perf_counter() - t0
        reads.check_same(got.data, want, name)
        return {**reads.tuned_sample(got), "elapsed_s": elapsed_s, "cpu_s": common.cpu_self_s() - cpu0,
                "server_cpu_s": common.cpu_pid_s(server_pid) - srv0}

    return common.Candidate(name, run, {"reader": "ingest, self-tuned (probe included)"})


def run_layout(env, args, profile: str, fits_cube, layout: str, log) -> dict:
    cube = h5_cube(env, fits_cube, layout)
    region = reads.thin_box(fits_cube.shape)
    want = _local(cube["path"], cube["dataset"], region)
    url = env.links.presign(profile, fits_cube.bucket, cube["key"]) if profile != "loopback" else \
        env.presign(common.Cube(cube["path"], fits_cube.bucket, cube["key"], fits_cube.shape, fits_cube.bitpix,
                                0, 0, cube["object_bytes"], 0.0))
    layout_obj = reads.layout_of(url, "presigned", dataset=cube["dataset"])
    pid, shaped = env.server_pid, profile != "loopback"
    blocks = [int(b) * KiB for b in args.blocks_kib.split(",") if b.strip()]
    sweep = common.run_interleaved([h5py_candidate(f"h5py_block_{b // KiB}KiB", url, cube["dataset"], region, want,
                                                   b, pid) for b in blocks], 1, 0, log=log) if blocks else {}
    candidates = [ingest_candidate("ingest", url, region, want, pid, cube["dataset"]),
                  h5py_candidate("h5py_default", url, cube["dataset"], region, want, None, pid, warm=not shaped)]
    if sweep:
        best = min(sweep, key=lambda n: sweep[n]["summary"]["elapsed_s"]["median"])
        candidates.append(h5py_candidate("h5py_best", url, cube["dataset"], region, want,
                                         sweep[best]["info"]["block_bytes"], pid, warm=not shaped))
    coro = h5coro_candidate("h5coro", url, cube["dataset"], region, want, pid)
    if isinstance(coro, str):
        h5coro_failure = coro
    else:
        h5coro_failure = None
        candidates.append(coro)
    if layout == "contiguous":  # the FITS path on the same values
        candidates.append(ingest_candidate("ingest_fits", env.presign(fits_cube, profile=profile), region,
                                           reads.expected(fits_cube, region), pid))
    if log:
        log(f"{NAME} [{profile} {layout}]: box {reads.region_text(region)}; {args.repeats} rounds")
    results = common.run_interleaved(candidates, args.repeats, args.warmup, log=log)
    key = f"{profile}:{layout}"
    ratios = {f"{key}:h5py_default/ingest": common.paired_ratio(results, "h5py_default", "ingest", "elapsed_s")}
    if "h5py_best" in results:
        ratios[f"{key}:h5py_best/ingest"] = common.paired_ratio(results, "h5py_best", "ingest", "elapsed_s")
    if "h5coro" in results:
        ratios[f"{key}:h5coro/ingest"] = common.paired_ratio(results, "h5coro", "ingest", "elapsed_s")
    if "ingest_fits" in results:
        ratios[f"{key}:ingest_fits/ingest"] = common.paired_ratio(results, "ingest_fits", "ingest", "elapsed_s")
    targets = {}
    if profile == "acacia":
        targets[f"{key}:h5py_default/ingest"] = common.target(">=", TARGET_SPEEDUP)
        if "h5coro" in results:
            targets[f"{key}:h5coro/ingest"] = common.target(">=", TARGET_VS_H5CORO)
    if cube["chunks"] is not None:
        from ingest.core.chunkplan import chunks_for_box

        present, _ = chunks_for_box(layout_obj.chunks, tuple((s.start, s.stop) for s in region))
        needed = int(layout_obj.chunks.sizes[present].sum())
        wire = [s["wire_bytes"] for s in results["ingest"]["samples"]]
        ratios[f"{key}:ingest_wire/needed_chunks"] = common.ratio_of(wire, [needed] * len(wire), metric="bytes")
        if profile == "acacia":
            targets[f"{key}:ingest_wire/needed_chunks"] = common.target("<=", TARGET_WIRE)
    return {"object_bytes": cube["object_bytes"], "chunks": cube["chunks"], "region": reads.region_text(region),
            "box_bytes": int(want.nbytes), "h5coro_failure": h5coro_failure, "sweep": sweep, "candidates": results, "ratios": ratios, "targets": targets}


def run(env: common.BenchEnv, args) -> dict:
    common.settle(args)
    log = common.logger(args)
    fits_cube = env.cube(args.size_mib * MiB)
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    per = {f"{p}:{lay}": run_layout(env, args, p, fits_cube, lay, log)
           for p in links.parse_profiles(args.profiles) for lay in layouts}
    flat = {"ratios": {}, "targets": {}}
    for res in per.values():
        for k in flat:
            flat[k].update(res[k])
    return {"config": {"size_mib": args.size_mib, "repeats": args.repeats, "warmup": args.warmup,
                       "blocks_kib": args.blocks_kib, "shape": list(fits_cube.shape)},
            "cells": per, **flat,
            "notes": ["h5coro runs with its defaults (HTTP driver on the same presigned URL, 4 MiB cache lines); "
                      "where it cannot read a layout the cell says why",
                      "the HDF5 objects are little-endian (h5coro returns wrong values for big-endian data)",
                      "h5py requests/wire bytes are fsspec's cache counters (misses, bytes requested)",
                      "every result is compared with h5py on the local file: identical"]}


def to_markdown(results: dict) -> str:
    out = []
    for key, cell in results["cells"].items():
        out += [f"### HDF5 `{key}`: box {cell['region']} ({cell['box_bytes'] / MiB:.1f} MiB), object "
                f"{cell['object_bytes'] / MiB:.0f} MiB, chunks {cell['chunks']}", ""]
        rows = []
        for name, res in cell["candidates"].items():
            s = res["summary"]
            rows.append([name, res["info"]["reader"], common.spread(s["elapsed_s"], "{:.3f}"),
                         f"{s['requests']['median']:.0f}" if "requests" in s else "-",
                         f"{s['wire_bytes']['median'] / MiB:.1f}" if "wire_bytes" in s else "-",
                         common.spread(s["cpu_s"])])
        out += [common.markdown_table(["reader", "how", "elapsed s median (min-max)", "requests", "wire MiB",
                                       "client CPU s"], rows), ""]
        rows = [[k.split(":", 2)[2], common.spread(r), common.target_text(cell["targets"].get(k)),
                 common.verdict(r, cell["targets"][k]) if k in cell["targets"] else "(diagnostic)"]
                for k, r in cell["ratios"].items()]
        out += [common.markdown_table(["ratio", "median (min-max)", "target", "verdict"], rows), ""]
        if cell.get("h5coro_failure"):
            out += [f"h5coro could not read this layout: `{cell['h5coro_failure']}`", ""]
    return "\n".join(out).rstrip()


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
