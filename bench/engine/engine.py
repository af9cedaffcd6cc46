"""Request engines side by side: client CPU per request and per GiB, and requests/s by depth.

The same presigned object, the same ranges, in one run, interleaved: ingest's native engine
(libcurl multi, one thread), ingest's urllib3 transport (a thread per request in flight), the
boto3 transport, the curl CLI (`--parallel`, one process for all the requests), and the AWS CRT's
HTTP client (awscrt, the other native candidate the issue named: one connection per request in
flight on its event-loop thread, bodies copied into place by a Python callback, 206, Content-Range
and length checked), which is measured so the choice of libcurl stays one made by measurement. Client CPU
is this process's (all threads) for the in-process engines and the child's for curl; the server
(versitygw) shares the two cores, so requests/s is bounded by it and the ratios are what count.

- small: REQUESTS ranged GETs of SMALL_BYTES at random offsets, at each depth (requests in flight);
- large: the first LARGE_MIB MiB in 16 MiB ranges, 4 in flight (CPU per GiB).

Targets (issue 12): native CPU per small request <= 100 us; native CPU per GiB <= 1.1x curl's.

    python -m bench.engine.engine [--requests 3000] [--depths 1,4,16,64] [--large-mib 512] [--quick]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common
from ingest.errors import TransportError
from ingest.engine.executor import run_requests
from ingest.transports.httpbody import check_content_range, range_header
from ingest.transports import open_transport
from ingest.units import GiB, MiB

NAME = "engine"
SMALL_BYTES = 8 << 10
LARGE_REQUEST_BYTES = 16 * MiB
LARGE_DEPTH = 4
ENGINES = ("native", "urllib3", "boto3", "curl", "awscrt")
CPU_PER_REQUEST_TARGET_S = 100e-6
CPU_PER_GIB_TARGET = 1.1  # native / curl


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.engine.engine", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, size_mib=1024)
    parser.add_argument("--requests", type=int, default=None, help="small requests per depth (default 3000, --quick 300)")
    parser.add_argument("--boto3-requests", type=int, default=None,
                        help="small requests per depth for boto3, ~3 ms each (default 600, --quick 100)")
    parser.add_argument("--depths", default="1,4,16,64", help="requests in flight (default 1,4,16,64)")
    parser.add_argument("--large-mib", type=int, default=None, help="bytes read for CPU per GiB (default 512, --quick 64)")
    return parser


SIZES = {"requests": (3000, 300), "boto3_requests": (600, 100), "large_mib": (512, 64)}


def _ranges(n: int, nbytes: int, object_bytes: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(o, o + nbytes) for o in (rng.randrange(0, object_bytes - nbytes) for _ in range(n))]


def _in_process(source: str, method: str, engine: str, ranges, depth: int) -> dict:
    """ingest's transport on `engine` running `ranges` with `depth` in flight."""
    largest = max(b - a for a, b in ranges)
    buffers = [bytearray(largest) for _ in range(depth)]  # touched once, outside the clock
    free = list(range(depth))

    def do_one(i, _worker):
        slot = free.pop()
        try:
            a, b = ranges[i]
            yield memoryview(buffers[slot])[: b - a], a
        finally:
            free.append(slot)
        return b - a

    with open_transport(source, method, threads=depth, engine=engine) as transport:
        transport.object_bytes  # the size request is not part of what is measured
        cpu0, t0 = common.cpu_self_s(), time.perf_counter()
        stats = run_requests(len(ranges), do_one, transport, needed_bytes=sum(b - a for a, b in ranges),
                             buffer_bytes=0, threads=depth)
        elapsed_s, cpu_s = time.perf_counter() - t0, common.cpu_self_s() - cpu0
    return {"elapsed_s": elapsed_s, "cpu_s": cpu_s, "requests": stats.requests, "bytes": stats.bytes_wire}


def _curl(url: str, ranges, depth: int, workdir: str) -> dict:
    """The curl CLI fetching the same ranges, `depth` at once, in one process. In a config file
    an option holds until `next` starts the next URL's group, so every range has its own group
    (and its own fail/silent/write-out, which `next` resets too); the sizes curl reports are
    checked, so a transfer of the wrong bytes cannot pass as a fast one."""
    config = os.path.join(workdir, f"curl-{len(ranges)}-{depth}.cfg")
    with open(config, "w") as fh:
        fh.write("next\n".join(f'fail\nsilent\nshow-error\nurl = "{url}"\nrange = "{a}-{b - 1}"\n'
                                'output = "/dev/null"\nwrite-out = "%{size_download}\\n"\n' for a, b in ranges))
    cmd = ["curl", "-K", config] + (["--parallel", "--parallel-max", str(depth)] if depth > 1 else [])
    cpu0, t0 = common.cpu_children_s(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    elapsed_s, cpu_s = time.perf_counter() - t0, common.cpu_children_s() - cpu0
    if done.returncode != 0:
        raise RuntimeError(f"curl failed ({done.returncode}): {done.stderr.strip()[:300]}")
    got = sorted(int(n) for n in done.stdout.split())
    if got != sorted(b - a for a, b in ranges):
        raise RuntimeError(f"curl fetched {sum(got)} bytes in {len(got)} transfers, not the {len(ranges)} ranges asked")
    return {"elapsed_s": elapsed_s, "cpu_s": cpu_s, "requests": len(ranges), "bytes": sum(got)}


def _awscrt(url: str, ranges, depth: int) -> dict:
    """The AWS CRT's HTTP/1.1 client fetching the same ranges over `depth` connections, each
    starting its next range from the last one's completion callback (on the CRT's thread)."""
    from awscrt import http as crt_http, io as crt_io

    parts = urlsplit(url)
    target = f"{parts.path}?{parts.query}"
    bootstrap = crt_io.ClientBootstrap.get_or_create_static_default()
    lock, finished = threading.Lock(), threading.Event()
    state = {"next": 0, "done": 0, "bytes": 0, "error": None}

    def fetch(connection, buffer: memoryview) -> None:
        with lock:
            i, state["next"] = state["next"], state["next"] + 1
        if i >= len(ranges):
            return
        first, end = ranges[i]
        body, got, reply = buffer[: end - first], [0], {}

        def on_response(http_stream, status_code, headers, **_kw):
            reply.update(status=status_code, range=dict((k.lower(), v) for k, v in headers).get("content-range"))

        def on_body(http_stream, chunk, **_kw):
            body[got[0]:got[0] + len(chunk)] = chunk  # raises (and fails the stream) past the range's end
            got[0] += len(chunk)

        def on_done(future) -> None:
            bad = future.exception()
            if bad is None and (reply.get("status") != 206 or got[0] != end - first):
                bad = reply
            if bad is None:
                try:  # the same check ingest's transports make
                    check_content_range(reply.get("range"), first, end - first, "awscrt")
                except TransportError as exc:
                    bad = exc
            with lock:
                state["done"] += 1
                state["bytes"] += got[0]
                if bad is not None and state["error"] is None:
                    state["error"] = f"range {first}-{end - 1}: {bad}"
                if bad is not None or state["done"] == len(ranges):
                    finished.set()
                    return
            fetch(connection, buffer)

        request = crt_http.HttpRequest("GET", target, crt_http.HttpHeaders(
            [("Host", parts.netloc), ("Range", range_header(first, end - first))]))
        stream = connection.request(request, on_response, on_body)
        stream.completion_future.add_done_callback(on_done)
        stream.activate()

    largest = max(b - a for a, b in ranges)
    buffers = [memoryview(bytearray(largest)) for _ in range(depth)]  # touched once, outside the clock
    cpu0, t0 = common.cpu_self_s(), time.perf_counter()
    pending = [crt_http.HttpClientConnection.new(parts.hostname, parts.port, bootstrap) for _ in range(depth)]
    connections = [future.result() for future in pending]
    for connection, buffer in zip(connections, buffers):
        fetch(connection, buffer)
    finished.wait()
    elapsed_s, cpu_s = time.perf_counter() - t0, common.cpu_self_s() - cpu0
    for connection in connections:
        connection.close().result()
    if state["error"]:
        raise RuntimeError(f"awscrt: {state['error']}")
    return {"elapsed_s": elapsed_s, "cpu_s": cpu_s, "requests": len(ranges), "bytes": state["bytes"]}


def _engines() -> tuple[str, ...]:
    """ENGINES, less awscrt where it is not installed (the bench extra installs it)."""
    return tuple(e for e in ENGINES if e != "awscrt" or importlib.util.find_spec("awscrt") is not None)


def _candidate(name: str, engine: str, ranges, depth: int, url: str, s3_uri: str, workdir: str) -> common.Candidate:
    if engine == "awscrt":
        run = lambda: _awscrt(url, ranges, depth)  # noqa: E731
    elif engine == "curl":
        run = lambda: _curl(url, ranges, depth, workdir)  # noqa: E731
    elif engine == "boto3":
        run = lambda: _in_process(s3_uri, "s3", "urllib3", ranges, depth)  # noqa: E731
    else:
        run = lambda: _in_process(url, "presigned", engine, ranges, depth)  # noqa: E731
    return common.Candidate(name, run, {"engine": engine, "depth": depth, "requests": len(ranges)})


def run(env: common.BenchEnv, args) -> dict:
    args = common.settle(args, **SIZES)  # also when bench.run_all hands over its own defaults
    log = common.logger(args)
    cube = env.cube(args.size_mib * MiB)
    url = env.presign(cube)
    depths = [int(d) for d in args.depths.split(",")]
    results: dict = {"object_bytes": cube.object_bytes, "small_bytes": SMALL_BYTES, "depths": depths, "small": {}}
    with tempfile.TemporaryDirectory(prefix="ingest-bench-engine-") as workdir:
        for depth in depths:
            cands = []
            for engine in _engines():
                n = args.boto3_requests if engine == "boto3" else args.requests
                ranges = _ranges(n, SMALL_BYTES, cube.object_bytes, seed=depth)
                cands.append(_candidate(f"{engine}@{depth}", engine, ranges, depth, url, cube.s3_uri, workdir))
            if log:
                log(f"engine: {args.requests} GETs of {SMALL_BYTES} B, {depth} in flight")
            results["small"][str(depth)] = common.run_interleaved(cands, args.repeats, args.warmup, log)
        large_bytes = min(args.large_mib * MiB, cube.object_bytes)
        large = [(a, min(a + LARGE_REQUEST_BYTES, large_bytes)) for a in range(0, large_bytes, LARGE_REQUEST_BYTES)]
        if log:
            log(f"engine: {large_bytes / MiB:.0f} MiB in {len(large)} requests of 16 MiB, {LARGE_DEPTH} in flight")
        cands = [_candidate(engine, engine, large, LARGE_DEPTH, url, cube.s3_uri, workdir) for engine in _engines()]
        results["large"] = common.run_interleaved(cands, args.repeats, args.warmup, log)
    results["ratios"], results["targets"] = _ratios(results)
    return results


def _per(samples: list[dict], metric: str, per: str, scale: float = 1.0) -> list[float]:
    return [s[metric] / s[per] * scale for s in samples if s[per]]


def _ratios(results: dict) -> tuple[dict, dict]:
    """(ratios, targets) as bench.run_all tabulates them; CPU per request in µs."""
    ratios, targets = {}, {}
    for depth, cells in results["small"].items():
        name = f"native_cpu_per_request_us@{depth}"
        per_req = _per(cells["native@" + depth]["samples"], "cpu_s", "requests", 1e6)
        ratios[name] = {**common.stats(per_req), "samples": per_req}
        targets[name] = common.target("<=", CPU_PER_REQUEST_TARGET_S * 1e6)
        for other in ("curl", "awscrt"):  # diagnostics: the engine against the CLI and the other native client
            if f"{other}@{depth}" in cells:
                theirs = _per(cells[f"{other}@{depth}"]["samples"], "cpu_s", "requests", 1e6)
                ratios[f"cpu_per_request_native/{other}@{depth}"] = common.ratio_of(per_req, theirs)
    large = results["large"]
    native = _per(large["native"]["samples"], "cpu_s", "bytes", GiB)
    curl = _per(large["curl"]["samples"], "cpu_s", "bytes", GiB)
    ratios["cpu_per_gib_native/curl"] = common.ratio_of(native, curl)
    targets["cpu_per_gib_native/curl"] = common.target("<=", CPU_PER_GIB_TARGET)
    for engine in ("urllib3", "boto3", "awscrt"):
        if engine not in large:
            continue
        other = _per(large[engine]["samples"], "cpu_s", "bytes", GiB)
        ratios[f"cpu_per_gib_{engine}/curl"] = common.ratio_of(other, curl)
    return ratios, targets


def to_markdown(results: dict) -> str:
    lines = [f"### Request engines: {results['small_bytes']} B ranged GETs of a "
             f"{results['object_bytes'] / MiB:.0f} MiB object on loopback (server on the same 2 cores)", "",
             common.markdown_table(
                 ["in flight", "engine", "client CPU per request µs", "requests/s"],
                 [[depth, name.split("@")[0],
                   common.spread(common.stats(_per(cell["samples"], "cpu_s", "requests", 1e6)), "{:.0f}"),
                   common.spread(common.stats([s["requests"] / s["elapsed_s"] for s in cell["samples"]]), "{:.0f}")]
                  for depth, cells in results["small"].items() for name, cell in cells.items()])]
    large = results["large"]
    lines += ["", f"CPU per GiB, 16 MiB ranges, {LARGE_DEPTH} in flight:", "",
              common.markdown_table(
                  ["engine", "client CPU s/GiB", "GiB/s"],
                  [[name, common.spread(common.stats(_per(cell["samples"], "cpu_s", "bytes", GiB))),
                    common.spread(common.stats([s["bytes"] / s["elapsed_s"] / GiB for s in cell["samples"]]))]
                   for name, cell in large.items()])]
    lines += ["", common.ratios_table(results["ratios"], results["targets"])]
    return "\n".join(lines)


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, **SIZES)


if __name__ == "__main__":
    raise SystemExit(main())
