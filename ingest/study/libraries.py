"""Seed 001 Table 7.2, "HTTP libraries": one contiguous download of the same bytes with urllib,
requests, urllib3 and ingest's own engine, fresh from disk or from the server's cache.

    python -m ingest.study.libraries --source URL --library urllib|requests|urllib3|ingest \
        --chunk-bytes 1GiB --bytes N [--offset 0] [--threads 4] [--cache fresh|cached] --json OUT.json

Bytes [offset, offset+bytes) arrive as consecutive Range GETs of chunk_bytes each, as the seed
did. The three plain libraries are used the idiomatic way, one thread; `ingest` is the tool's
transport and executor on --threads threads. Every body lands in a buffer allocated (and its
pages touched) before the clock starts - the whole download's when it fits in memory, else one
reused chunk buffer per thread - so allocation is not what is measured. Every run records a
CRC-32 of the bytes, so the study can check that all libraries downloaded the same thing.

One module: it is one runnable measurement (python -m ingest.study.libraries) whose downloaders,
buffer rule and CRC-32 check are what its JSON records, read top to bottom; no other module uses
its parts.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import platform
import queue
import socket
import sys
import time
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

from ingest.errors import ConfigError, IngestError, TransportError
from ingest.redact import redact_url, scrub
from ingest.transports.httpbody import check_content_range, range_header
from ingest.study.config import LIBRARIES  # urllib, requests, urllib3, ingest: one list for study and tool
from ingest.units import format_bytes, parse_bytes

CACHE_MODES = ("fresh", "cached")
DROP_CACHES_PATH = "/proc/sys/vm/drop_caches"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0  # per socket read, not per chunk: a 1 GiB body may take minutes
_PIP_NAME = {"requests": "requests", "urllib3": "urllib3", "ingest": "urllib3"}


class LibraryMissing(IngestError):
    """The library under test cannot be imported."""


# -- pure ------------------------------------------------------------------------------------
def chunk_ranges(offset: int, nbytes: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """[offset, offset+nbytes) as consecutive half-open (start, stop) ranges of chunk_bytes each,
    the last one shorter when chunk_bytes does not divide nbytes."""
    if offset < 0 or nbytes < 1 or chunk_bytes < 1:
        raise ConfigError(f"range: need offset >= 0, bytes >= 1 and chunk_bytes >= 1 "
                          f"(got {offset}, {nbytes}, {chunk_bytes})")
    end = offset + nbytes
    return [(start, min(start + chunk_bytes, end)) for start in range(offset, end, chunk_bytes)]


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def crc32_combine(crc1: int, crc2: int, len2_bytes: int) -> int:
    """CRC-32 of A+B from crc32(A), crc32(B) and len(B) (zlib's crc32_combine, which Python's
    zlib does not expose): ingest's threads finish chunks out of order, so each chunk's CRC is
    taken on its own thread and the whole is assembled in file order afterwards."""
    if len2_bytes <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = [_gf2_times(odd, odd[n]) for n in range(32)]  # two zero bits
    odd = [_gf2_times(even, even[n]) for n in range(32)]  # four
    while True:  # apply len2_bytes zero bytes to crc1, squaring the operator per bit of the length
        even = [_gf2_times(odd, odd[n]) for n in range(32)]
        if len2_bytes & 1:
            crc1 = _gf2_times(even, crc1)
        len2_bytes >>= 1
        if not len2_bytes:
            break
        odd = [_gf2_times(even, even[n]) for n in range(32)]
        if len2_bytes & 1:
            crc1 = _gf2_times(odd, crc1)
        len2_bytes >>= 1
        if not len2_bytes:
            break
    return crc1 ^ crc2


# -- the libraries ---------------------------------------------------------------------------
@dataclass
class Download:
    """One download: its timing, request count and the CRC-32 of its bytes."""

    elapsed_s: float
    requests: int
    crc32: int
    crc_s: float  # seconds spent computing the CRC
    crc_in_elapsed: bool  # whether elapsed_s includes that time
    threads: int
    retries: int = 0


def library_version(library: str) -> str:
    """The version of `library`; raises LibraryMissing (with the pip command) when absent."""
    try:
        if library == "urllib":
            return f"Python {platform.python_version()}"  # urllib ships with the interpreter
        if library == "requests":
            import requests
            return requests.__version__
        import urllib3  # urllib3 itself, and ingest's presigned transport
        if library == "urllib3":
            return urllib3.__version__
        from importlib.metadata import PackageNotFoundError, version
        try:
            own = version("ingest")
        except PackageNotFoundError:  # run from a checkout (PYTHONPATH), not pip-installed
            own = "checkout"
        return f"{own} (urllib3 {urllib3.__version__})"
    except ImportError as exc:  # note PackageNotFoundError is one too: caught above for ingest
        raise LibraryMissing(f"not installed ({exc}); pip install {_PIP_NAME[library]}") from None


def touched_buffer(nbytes: int) -> memoryview:
    """A buffer whose pages already exist: bytearray(n) is calloc'd and would page-fault on
    first write, inside the timing. Repeating one byte makes CPython memset every page now."""
    return memoryview(bytearray(b"\0") * nbytes)


def _check_reply(name: str, status: int, headers, start: int, nbytes: int) -> None:
    """Refuse anything but the 206 and the exact range asked for, before reading the body."""
    if status != 206:
        raise TransportError(f"{name}: HTTP {status} to a Range request for bytes {start}-{start + nbytes - 1} "
                             f"(expected 206 Partial Content){'; the server ignored Range' if status == 200 else ''}")
    check_content_range(headers.get("Content-Range"), start, nbytes, name)
    length = headers.get("Content-Length")
    if length is not None and int(length) != nbytes:
        raise TransportError(f"{name}: Content-Length {length} for a {nbytes}-byte range at {start}")


def _fill(readinto, view: memoryview, name: str, start: int) -> None:
    """Read exactly len(view) body bytes with the library's own readinto."""
    got = 0
    while got < len(view):
        k = readinto(view[got:])
        if not k:
            raise TransportError(f"{name}: body ended after {got} of {len(view)} bytes at offset {start}")
        got += k


def _urllib_session(url: str):
    import urllib.error
    import urllib.request

    name = redact_url(url)

    def get(start: int, view: memoryview) -> None:
        request = urllib.request.Request(url, headers={"Range": range_header(start, len(view))})
        try:
            resp = urllib.request.urlopen(request, timeout=READ_TIMEOUT_S)
        except urllib.error.HTTPError as exc:  # urllib raises for >= 400; the status is the news
            exc.close()
            raise TransportError(f"{name}: HTTP {exc.code} at offset {start}") from None
        with resp:  # urllib sends Connection: close, so each request is a new connection
            _check_reply(name, resp.status, resp.headers, start, len(view))
            _fill(resp.readinto, view, name, start)
    return get, lambda: None


def _requests_session(url: str):
    import requests

    session = requests.Session()
    name = redact_url(url)

    def get(start: int, view: memoryview) -> None:
        # stream=True: otherwise requests reads the body into a fresh bytes before we see it.
        resp = session.get(url, headers={"Range": range_header(start, len(view))}, stream=True,
                           timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
        with resp:
            _check_reply(name, resp.status_code, resp.headers, start, len(view))
            _fill(resp.raw.readinto, view, name, start)
    return get, session.close


def _urllib3_session(url: str):
    import urllib3

    pool = urllib3.PoolManager(timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S))
    name = redact_url(url)

    def get(start: int, view: memoryview) -> None:
        resp = pool.request("GET", url, headers={"Range": range_header(start, len(view))}, preload_content=False)
        try:
            _check_reply(name, resp.status, resp.headers, start, len(view))
            _fill(resp.readinto, view, name, start)
        except BaseException:
            resp.close()  # a refused or broken reply's connection is not reused
            raise
        finally:
            resp.release_conn()
    return get, pool.clear


SESSIONS = {"urllib": _urllib_session, "requests": _requests_session, "urllib3": _urllib3_session}


def memory_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (what can be had without swapping), else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def choose_buffer(nbytes: int, setting: str) -> str:
    """'whole': one buffer for the whole download, as the tool reads into its output array, with
    the CRC taken after the clock stops. 'chunk': one buffer per thread, reused (a 32 GiB
    download need not fit). auto picks whole when it takes at most half the available memory,
    leaving the rest for a local server's page cache of the same bytes."""
    if setting != "auto":
        return setting
    available = memory_available_bytes()
    return "whole" if available is not None and nbytes <= available // 2 else "chunk"


def _span(ranges: list[tuple[int, int]]) -> tuple[int, int, int]:
    """(first byte, total bytes, largest chunk) of consecutive ranges."""
    return ranges[0][0], ranges[-1][1] - ranges[0][0], max(stop - start for start, stop in ranges)


def download_plain(library: str, url: str, ranges: list[tuple[int, int]], buffer: str) -> Download:
    """One thread, one GET per range, each body read into a preallocated buffer; the clock runs
    only while a request is on the wire, so the CRC (ours, not the library's) is not measured."""
    base, nbytes, chunk_max = _span(ranges)
    view = touched_buffer(nbytes if buffer == "whole" else chunk_max)
    get, close = SESSIONS[library](url)  # outside the clock, but no connection is open yet
    elapsed_s = crc_s = 0.0
    crc = 0
    try:
        for start, stop in ranges:
            chunk = view[start - base : stop - base] if buffer == "whole" else view[: stop - start]
            t0 = time.perf_counter()
            get(start, chunk)
            t1 = time.perf_counter()
            elapsed_s += t1 - t0
            if buffer == "chunk":  # the next chunk overwrites this one: checksum it now
                crc = zlib.crc32(chunk, crc)
                crc_s += time.perf_counter() - t1
    finally:
        close()
    if buffer == "whole":
        t0 = time.perf_counter()
        crc = zlib.crc32(view)
        crc_s = time.perf_counter() - t0
    return Download(elapsed_s, len(ranges), crc, crc_s, False, 1)


def download_ingest(url: str, ranges: list[tuple[int, int]], threads: int, buffer: str) -> Download:
    """ingest's presigned transport and executor as the tool runs them (retries included).
    whole: every request lands at its place in one buffer, as in the tool's output array.
    chunk: each thread reuses its own chunk buffer, so the CRC must run on the worker after its
    read, inside the wall clock (with several threads it cannot be taken out exactly; the bias
    is against ingest, and crc_in_elapsed says so)."""
    from ingest.engine.executor import run_requests
    from ingest.transports import open_transport

    base, nbytes, chunk_max = _span(ranges)
    n_threads = max(1, min(threads, len(ranges)))
    whole = touched_buffer(nbytes) if buffer == "whole" else None
    buffers: queue.SimpleQueue = queue.SimpleQueue()  # one per thread, so get() never waits
    for _ in range(n_threads if whole is None else 0):
        buffers.put(touched_buffer(chunk_max))
    crcs: list[int] = [0] * len(ranges)
    crc_s = [0.0] * len(ranges)

    def do_one(i: int, _worker):
        start, stop = ranges[i]
        if whole is not None:
            yield whole[start - base : stop - base], start
            return stop - start
        view = buffers.get()
        try:
            chunk = view[: stop - start]
            yield chunk, start
            t0 = time.perf_counter()
            crcs[i] = zlib.crc32(chunk)
            crc_s[i] = time.perf_counter() - t0
        finally:
            buffers.put(view)
        return stop - start

    # No stat request: without one the transport sends no If-Match and reads exactly as asked.
    with open_transport(url, "presigned", threads=n_threads) as transport:
        stats = run_requests(len(ranges), do_one, transport, needed_bytes=nbytes, buffer_bytes=chunk_max,
                             threads=n_threads)
    if whole is not None:
        t0 = time.perf_counter()
        crc = zlib.crc32(whole)
        return Download(stats.elapsed_s, stats.requests, crc, time.perf_counter() - t0, False, n_threads,
                        stats.retries)
    crc = crcs[0]
    for (start, stop), part in zip(ranges[1:], crcs[1:]):
        crc = crc32_combine(crc, part, stop - start)
    return Download(stats.elapsed_s, stats.requests, crc, sum(crc_s), True, n_threads, stats.retries)


def download(library: str, url: str, ranges: list[tuple[int, int]], threads: int, buffer: str) -> Download:
    """Download `ranges` with `library` (threads: ingest's only) into a 'whole' or 'chunk' buffer."""
    if library == "ingest":
        return download_ingest(url, ranges, threads, buffer)
    return download_plain(library, url, ranges, buffer)


# -- the server's cache ----------------------------------------------------------------------
def server_is_local(host: str) -> tuple[bool, str]:
    """Whether every address `host` resolves to is this machine's (loopback, or one we can bind).
    A loopback proxy in front of a remote store would pass this; the study's proxies front the
    local server."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return False, f"cannot resolve {host}: {exc}"
    for family, _, _, _, sockaddr in infos:
        address = sockaddr[0].split("%")[0]
        ip = ipaddress.ip_address(address)
        if ip.is_loopback or ip.is_unspecified:
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((sockaddr[0], 0))  # succeeds only for an address of this machine
        except OSError:
            return False, f"{host} ({address}) is not this machine"
    return True, f"{host} is this machine"


def drop_page_cache(url: str, drop_caches_path: str = DROP_CACHES_PATH) -> tuple[str, str]:
    """Make the server read from disk: sync, then drop this machine's page cache. Returns
    ("fresh", how) or ("fresh-unavailable", why) - never pretends."""
    host = urlsplit(url).hostname or ""
    local, where = server_is_local(host)
    if not local:
        return "fresh-unavailable", f"the server is remote ({where}): its page cache cannot be dropped from here"
    os.sync()  # dirty pages are not dropped: write them first, as `sync; echo 3 > ...` does
    try:
        with open(drop_caches_path, "w") as fh:
            fh.write("3\n")
    except OSError as exc:  # not root, or /proc read-only (a container)
        return "fresh-unavailable", f"cannot write {drop_caches_path}: {exc.strerror or exc}"
    return "fresh", f"dropped the page cache (sync; 3 > {drop_caches_path}); {where}"


# -- command line ----------------------------------------------------------------------------
def resolve_source(source: str) -> str:
    """An http(s) URL as given; s3://bucket/key presigned with the environment's credentials."""
    if source.startswith(("http://", "https://")):
        return source
    if source.startswith("s3://"):
        from ingest.transports.presign import parse_s3_uri, presign_url

        return presign_url(*parse_s3_uri(source))
    raise ConfigError(f"--source: {source!r} is neither an http(s) presigned URL nor s3://bucket/key")


def measure(args) -> dict:
    """Prepare the cache, download once timed, and return the JSON record."""
    version = library_version(args.library)  # before anything else: a missing library costs nothing
    chunk_bytes = parse_bytes(args.chunk_bytes, "--chunk-bytes")
    nbytes = parse_bytes(args.bytes, "--bytes")
    offset = parse_bytes(args.offset, "--offset")
    if args.threads < 1:
        raise ConfigError(f"--threads: {args.threads} is not a positive thread count")
    ranges = chunk_ranges(offset, nbytes, chunk_bytes)
    buffer = choose_buffer(nbytes, args.buffer)
    url = resolve_source(args.source)
    warm = None
    if args.cache == "cached":
        warm = download(args.library, url, ranges, args.threads, buffer)  # unrecorded: fills the server's cache
        cache, reason = "cached", "the same range was read once before the timed read"
    else:
        cache, reason = drop_page_cache(url)
    result = download(args.library, url, ranges, args.threads, buffer)
    if warm is not None and warm.crc32 != result.crc32:
        raise TransportError(f"{args.library}: the warm-up read and the timed read differ "
                             f"(CRC-32 {warm.crc32:08x} then {result.crc32:08x}); the object changed?")
    return {"schema": 1, "library": args.library, "version": version, "source": redact_url(url),
            "chunk_bytes": chunk_bytes, "bytes": nbytes, "offset": offset, "cache": cache, "cache_reason": reason,
            "elapsed_s": result.elapsed_s,
            "throughput_bytes_per_s": nbytes / result.elapsed_s if result.elapsed_s > 0 else 0.0,
            "requests": result.requests, "retries": result.retries, "crc32": result.crc32,
            "buffer": buffer, "crc_s": result.crc_s, "crc_in_elapsed": result.crc_in_elapsed, "threads": result.threads}


def _write_json(path: str, record: dict) -> None:
    tmp = f"{path}.part"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)  # a reader never sees half a record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ingest.study.libraries", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, help="presigned http(s) URL, or s3://bucket/key to presign")
    p.add_argument("--library", required=True, choices=LIBRARIES)
    p.add_argument("--chunk-bytes", required=True, help="bytes per Range GET, e.g. 1GiB")
    p.add_argument("--bytes", required=True, help="bytes to download, e.g. 32GiB")
    p.add_argument("--offset", default="0", help="first byte (default 0)")
    p.add_argument("--threads", type=int, default=4, help="ingest's threads (default 4; the others use one)")
    p.add_argument("--cache", choices=CACHE_MODES, default="cached",
                   help="fresh: drop the server's page cache first; cached (default): read the range once first")
    p.add_argument("--buffer", choices=("auto", "whole", "chunk"), default="auto",
                   help="whole: the download in one buffer, CRC after the clock; chunk: a reused buffer per "
                        "thread; auto (default): whole if it takes at most half the available memory")
    p.add_argument("--json", required=True, metavar="OUT.json")
    args = p.parse_args(argv)
    try:
        record = measure(args)
    except IngestError as exc:
        print(f"libraries: {args.library}: {scrub(str(exc))}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a library's own error; its text may quote the URL
        print(f"libraries: {args.library}: download failed: {type(exc).__name__}: {scrub(str(exc))}",
              file=sys.stderr)
        return 1
    _write_json(args.json, record)
    print(f"{record['library']} {record['version']}: {format_bytes(record['bytes'])} in {record['requests']} "
          f"requests of {format_bytes(record['chunk_bytes'])} on {record['threads']} thread(s), {record['cache']}: "
          f"{record['elapsed_s']:.3f} s, {format_bytes(record['throughput_bytes_per_s'])}/s, "
          f"crc32 {record['crc32']:08x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
