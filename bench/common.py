"""Shared by every benchmark: a loopback S3 server with a synthetic cube on it, side-by-side
timing of candidates, and results written as JSON with the machine that produced them.

The machine is shared and noisy, so no benchmark reports a bare time as its finding: each
runs its candidates interleaved (A, B, A, B, ...) in one process, on the same object, and
reports per-repetition ratios with their median and spread.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

from ingest.testbed.ceph import CephRGW
from ingest.testbed.localserver import LocalS3Server, find_tool
from ingest.testbed.signals import unwind_on_signals
from ingest.transports.presign import presign_url
from ingest.testbed.synth import write_cube
from ingest.units import GiB, MiB

SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR_DEFAULT = REPO_ROOT / "bench" / "results"
BUCKET = "bench"
PACKAGES = ("ingest", "numpy", "astropy", "boto3", "botocore", "urllib3", "fsspec", "aiohttp", "mpi4py", "h5py", "h5coro")
# Variables that would steer boto3 away from the bench server (a service-specific endpoint
# beats AWS_ENDPOINT_URL; a profile or token adds credentials versitygw rejects).
_AWS_VARS_TO_CLEAR = (
    "AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION",
)


# The stores a benchmark can run against (--store), each started on loopback by ingest.testbed:
# versitygw (posix backend, the default) and a one-node Ceph RGW (memstore OSD: objects in RAM).
STORES = ("versitygw", "ceph")
# The RGW's OSD keeps objects in RAM up to this (memory is taken as objects are written): a full
# run's cubes and the objects publish writes (~4 GiB) fit under it.
CEPH_MEMSTORE_BYTES = 8 * GiB


class BenchCeph(CephRGW):
    """CephRGW as a benchmark sees a server: its HTTP `port` (bench.links proxies it) and the pids
    whose CPU is the server's (radosgw, which speaks HTTP, and the OSD, which holds the bytes)."""

    @property
    def port(self) -> int:
        return self.ports["http"]

    @property
    def pid(self) -> tuple[int, ...]:
        pids = self.pids
        return tuple(pids[name] for name in ("rgw", "osd") if name in pids)


# -- the cube and the server --------------------------------------------------------------------
@dataclass(frozen=True)
class Cube:
    """A synthetic FITS cube: local file, its object on the bench server, its geometry."""

    path: str
    bucket: str
    key: str
    shape: tuple[int, ...]  # numpy order (channels, y, x)
    bitpix: int
    data_offset: int  # bytes of header in front of the data
    data_bytes: int  # bytes of data (what a whole-cube read returns)
    object_bytes: int  # bytes of the whole object (what curl downloads)
    upload_s: float  # wall time of the upload, for the record only

    @property
    def s3_uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def describe(self) -> dict:
        """JSON-ready description (no local path: it is a temp dir of the run)."""
        return {"shape": list(self.shape), "bitpix": self.bitpix, "data_offset": self.data_offset,
                "data_bytes": self.data_bytes, "object_bytes": self.object_bytes, "key": self.key,
                "upload_s": round(self.upload_s, 3)}


def cube_shape(size_bytes: int, bitpix: int = -32) -> tuple[int, int, int]:
    """Numpy-order (channels, side, side) shape of about size_bytes: 1024^2 planes from 256 MiB, 256^2 below."""
    itemsize = abs(int(bitpix)) // 8
    side = 1024 if size_bytes >= 256 * MiB else 256
    plane_bytes = side * side * itemsize
    return (max(1, round(size_bytes / plane_bytes)), side, side)


class BenchEnv:
    """A running store (`store`: versitygw or ceph, STORES) with one bucket, a cube cache and the
    AWS_* variables that point boto3 at it (set in this process while entered, and handed to
    subprocesses by `env()`).

    cache_dir: where synthetic cubes are kept (default: a temp dir removed on exit; a given
    dir is kept, so a later run reuses its cubes). keep_alive: pass versitygw --keep-alive
    (without it versitygw closes every connection after one request; radosgw always keeps them).
    """

    def __init__(self, cache_dir: str | None = None, keep_alive: bool = True, store: str = "versitygw"):
        if store not in STORES:
            raise ValueError(f"store: {store!r} is not one of {', '.join(STORES)}")
        self.store = store
        self.keep_alive = keep_alive if store == "versitygw" else True
        self.links = None  # bench.links.Links: link profiles, Toxiproxy started on first use
        self._given_cache = cache_dir
        self.cache_dir: str | None = None
        self.server: LocalS3Server | None = None
        self._cubes: dict[tuple, Cube] = {}
        self._saved_env: dict[str, str | None] = {}

    def __enter__(self) -> "BenchEnv":
        if self._given_cache:
            os.makedirs(self._given_cache, exist_ok=True)
            self.cache_dir = self._given_cache
        else:
            self.cache_dir = tempfile.mkdtemp(prefix="ingest-bench-")
        try:
            self.server = (LocalS3Server(keep_alive=self.keep_alive) if self.store == "versitygw"
                           else BenchCeph(memstore_bytes=CEPH_MEMSTORE_BYTES)).start()
            self.server.make_bucket(BUCKET)
            self._set_environ()
            from bench.links import Links

            self.links = Links(self.server)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = {}
        if self.links is not None:
            self.links.close()
            self.links = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.cache_dir and not self._given_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
        self.cache_dir = None

    def _aws_environ(self) -> dict[str, str | None]:
        """Name -> value (None: unset) for boto3's standard chain to find the bench server."""
        values: dict[str, str | None] = {name: None for name in _AWS_VARS_TO_CLEAR}
        # Keep a developer's ~/.aws files (endpoint, profile, addressing style) out of it.
        values["AWS_CONFIG_FILE"] = os.path.join(self.cache_dir, "no-aws-config")
        values["AWS_SHARED_CREDENTIALS_FILE"] = os.path.join(self.cache_dir, "no-aws-credentials")
        values.update(self.server.env())
        return values

    def _set_environ(self) -> None:
        for name, value in self._aws_environ().items():
            self._saved_env.setdefault(name, os.environ.get(name))
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def env(self) -> dict[str, str]:
        """A full environment for a subprocess that reads from the bench server with boto3."""
        env = dict(os.environ)
        for name, value in self._aws_environ().items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        # Children import bench/ and ingest/ from this checkout, wherever they are started.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        return env

    @property
    def server_pid(self) -> int | tuple[int, ...]:
        """The server's pid, or pids (Ceph: radosgw and the OSD): what cpu_pid_s sums."""
        return self.server.pid

    def describe_store(self) -> dict:
        """Which store served the run, for the record."""
        if self.store == "ceph":
            return {"store": "ceph", "server": "Ceph RGW (radosgw, beast) with one memstore OSD on 127.0.0.1",
                    "server_cpu": "radosgw + OSD"}
        return {"store": "versitygw", "server": "versitygw posix on 127.0.0.1", "server_cpu": "versitygw"}

    def cube(self, size_bytes: int, bitpix: int = -32, shape: tuple[int, ...] | None = None) -> Cube:
        """A cube of about size_bytes (or of exactly `shape`, numpy order) on the server: written
        once into the cache, uploaded once per run."""
        shape = tuple(shape) if shape else cube_shape(size_bytes, bitpix)
        cache_key = (shape, bitpix)
        if cache_key in self._cubes:
            return self._cubes[cache_key]
        name = "cube_{}_bp{}.fits".format("x".join(str(n) for n in reversed(shape)), bitpix).replace("-", "m")
        path = os.path.join(self.cache_dir, name)
        if not os.path.exists(path):
            write_cube(path, shape, bitpix)
        from ingest.staging.upload import upload_file

        t0 = time.perf_counter()
        upload_file(path, f"s3://{BUCKET}/{name}", progress=False, client=self.server.client())
        upload_s = time.perf_counter() - t0
        itemsize = abs(bitpix) // 8
        data_bytes = math.prod(shape) * itemsize
        object_bytes = os.path.getsize(path)
        data_offset = object_bytes - data_bytes - (-data_bytes % 2880)
        cube = Cube(path, BUCKET, name, shape, bitpix, data_offset, data_bytes, object_bytes, upload_s)
        self._cubes[cache_key] = cube
        return cube

    def presign(self, cube: Cube, expires_s: int = 3600, profile: str = "loopback") -> str:
        """SigV4 presigned GET URL of the cube's object through link `profile` (bench.links)
        (a credential: never write it to results)."""
        if profile == "loopback":
            return presign_url(cube.bucket, cube.key, expires_s, client=self.server.client())
        return self.links.presign(profile, cube.bucket, cube.key, expires_s)

    def link(self, profile: str):
        """bench.links.Link of `profile`: loopback (direct), acacia or wan (through Toxiproxy)."""
        return self.links.get(profile)

    def source(self, cube: Cube, method: str, profile: str = "loopback") -> tuple[str, dict]:
        """(source, transport options) to read `cube` with `method` (presigned | s3) over `profile`."""
        if method == "presigned":
            return self.presign(cube, profile=profile), {}
        if method == "s3":
            return cube.s3_uri, ({} if profile == "loopback" else {"endpoint_url": self.link(profile).endpoint_url})
        raise ValueError(f"method: {method!r} is not presigned or s3")


# -- measuring ----------------------------------------------------------------------------------
def cpu_self_s() -> float:
    """User + system CPU seconds of this process, all threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def cpu_children_s() -> float:
    """User + system CPU seconds of this process's waited-for children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cpu_pid_s(pid: int | tuple[int, ...] | None) -> float:
    """User + system CPU seconds of another process so far (from /proc), or the sum over a tuple
    of pids (a store of several daemons); nan if unreadable."""
    if pid is None:
        return float("nan")
    if isinstance(pid, tuple):
        return sum(cpu_pid_s(one) for one in pid) if pid else float("nan")
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    # After the ")" ending the command name, utime and stime are fields 12 and 13 (0-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Candidate:
    """One thing to time: `run()` does one repetition and returns its measurements (numbers)."""

    name: str
    run: Callable[[], dict]
    info: dict = field(default_factory=dict)  # how it was run (settings, command), for the record
    warm: bool = True  # False: skip its warm-up rounds (a slow reader already warmed by a sweep)


def run_interleaved(candidates: list[Candidate], repeats: int, warmup: int = 1, log=None) -> dict:
    """Run candidates A, B, C, A, B, C, ... for `repeats` rounds after `warmup` unrecorded rounds.

    Returns {name: {"info", "samples": [one dict per round], "summary": {metric: stats}}}.
    Sample i of every candidate comes from round i, so ratios can be paired by round.
    """
    if repeats < 1:
        raise ValueError(f"repeats: {repeats} must be >= 1")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"candidate names must be unique: {names}")
    samples: dict[str, list[dict]] = {c.name: [] for c in candidates}
    for round_i in range(-warmup, repeats):
        for cand in candidates:
            if round_i < 0 and not cand.warm:
                continue
            sample = cand.run()
            if round_i >= 0:
                samples[cand.name].append(sample)
            if log is not None:
                what = "warm-up" if round_i < 0 else f"round {round_i + 1}/{repeats}"
                log(f"  {what} {cand.name}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in sample.items()
                                                          if isinstance(v, (int, float, str))))
    return {c.name: {"info": c.info, "samples": samples[c.name], "summary": summarize(samples[c.name])}
            for c in candidates}


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def stats(values) -> dict:
    """median, min, max and n of a list of numbers (nan values are dropped)."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(samples: list[dict]) -> dict:
    """Per numeric metric of the samples: median, min, max, n."""
    metrics = [k for k, v in samples[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {k: stats([s.get(k) for s in samples]) for k in metrics}


def ratio_of(numerators: list[float], denominators: list[float], **record) -> dict:
    """Per-round ratios a/b of two paired lists, with median/min/max (rounds with b == 0 dropped)."""
    ratios = [a / b for a, b in zip(numerators, denominators) if b]
    return {**record, "samples": ratios, **stats(ratios)}


def target(op: str, value: float) -> dict:
    """A ratio's target: op '>=' (at least value) or '<=' (at most value)."""
    if op not in (">=", "<="):
        raise ValueError(f"target op: {op!r} is not '>=' or '<='")
    return {"op": op, "value": value}


def verdict(ratio: dict, tgt: dict | None) -> str:
    """PASS when the median ratio meets the target, BELOW when it does not, '-' without a target."""
    if not tgt or ratio.get("median") is None:
        return "-"
    med = ratio["median"]
    ok = med >= tgt["value"] if tgt["op"] == ">=" else med <= tgt["value"]
    return "PASS" if ok else "BELOW"


def target_text(tgt: dict | None) -> str:
    return "-" if not tgt else f"{'≥' if tgt['op'] == '>=' else '≤'} {tgt['value']:g}"


def paired_ratio(results: dict, numerator: str, denominator: str, metric: str) -> dict:
    """numerator's metric / denominator's metric, round by round, with median/min/max."""
    pairs = zip(results[numerator]["samples"], results[denominator]["samples"])
    ratios = [a[metric] / b[metric] for a, b in pairs if b[metric]]
    return {"numerator": numerator, "denominator": denominator, "metric": metric,
            "samples": ratios, **stats(ratios)}


# -- the record ---------------------------------------------------------------------------------
def _run_text(cmd: list[str], cwd=None) -> str | None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_info() -> dict:
    """Commit of the checkout and whether it has local changes (read-only git commands)."""
    commit = _run_text(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT)
    # --no-optional-locks: status must not even refresh the index of a tree others work in.
    status = _run_text(["git", "--no-optional-locks", "status", "--porcelain"], cwd=REPO_ROOT)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def ingest_sources_digest() -> str:
    """SHA-1 over ingest/**/*.py of this checkout (path + content): names the exact code measured,
    also when the tree has uncommitted changes (git_info says dirty)."""
    import hashlib

    digest = hashlib.sha1()
    for path in sorted((REPO_ROOT / "ingest").rglob("*.py")):
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def machine_info() -> dict:
    """What produced a result: cores, memory, load, Python, package and tool versions, commit."""
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    curl = _run_text(["curl", "--version"])
    try:
        versitygw = find_tool("versitygw")
    except Exception:  # noqa: BLE001 - recorded as missing
        versitygw = None
    return {
        "hostname": platform.node(),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "memory_bytes": mem_total,
        "loadavg": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "packages": versions,
        "curl": curl.splitlines()[0] if curl else None,
        "versitygw": versitygw,
        "git": git_info(),
        "ingest_sources_sha1": ingest_sources_digest(),
    }


def command_line() -> str:
    """The exact command that started this process, as typed (sys.orig_argv)."""
    return shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv))


def results_dir(given: str | None = None) -> Path:
    """--results-dir, else $INGEST_BENCH_RESULTS_DIR, else bench/results of this checkout."""
    return Path(given or os.environ.get("INGEST_BENCH_RESULTS_DIR") or RESULTS_DIR_DEFAULT)


def cluster_heading(title: str, results: dict, spec_text: str) -> str:
    """A cluster bench's table heading: its title, the cube, the spec's rates (`spec_text`), and a
    note when the run was stopped before its last cell."""
    head = f"### {title} ({results['object_bytes'] / MiB:.1f} MiB cube; {spec_text})"
    if not results.get("complete", True):
        head += "\n\nPartial: the run was stopped; these are the cells it finished."
    return head


def summarize_or_run(args, name: str, run, to_markdown, before_run=None) -> int:
    """A bench's main: with --summarize print the table of a results file and run nothing;
    otherwise (after `before_run`) run, write NAME.json and print its table."""
    if args.summarize:
        with open(args.summarize) as fh:
            print(to_markdown(json.load(fh)))
        return 0
    if before_run is not None:
        before_run()
    results = run(args)
    path = write_results(name, results, args.results_dir)
    print(to_markdown(results))
    print(f"\nwrote {path}")
    return 0


def write_results(name: str, results: dict, directory: str | None = None) -> Path:
    """Write results as DIR/NAME.json (atomically), with schema version, command and machine."""
    payload = {
        "schema_version": SCHEMA_VERSION,
        "bench": name,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "cwd": os.getcwd(),
        "machine": machine_info(),
        **results,
    }
    out_dir = results_dir(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = out_dir / f"{name}.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


# -- command lines and tables -------------------------------------------------------------------
# Sizes and repetitions of a full run and of --quick (a minute or two for the whole suite).
FULL = {"size_mib": 1024, "repeats": 3, "warmup": 1}
QUICK = {"size_mib": 64, "repeats": 1, "warmup": 0}


def counts(option: str, text: str, empty_ok: bool = False) -> list[int]:
    """'2,4' -> [2, 4]: whole numbers >= 1 (none at all only if `empty_ok`), or an error naming
    the option."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = [0]
    if (not values and not empty_ok) or min(values, default=1) < 1:
        raise SystemExit(f"{option}: expected whole numbers >= 1 separated by commas, got {text!r}")
    return values


def add_common_arguments(parser: argparse.ArgumentParser, size_mib: int = FULL["size_mib"]) -> None:
    """Options every benchmark takes: cube size, repetitions, --quick, where cubes and results go."""
    parser.add_argument("--quick", action="store_true",
                        help=f"small cubes and one round (defaults become {QUICK}); given values still win")
    parser.add_argument("--size-mib", type=int, default=None,
                        help=f"cube size in MiB (default {size_mib}, --quick {QUICK['size_mib']}; "
                             "float32 planes of 1024^2 from 256 MiB)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"interleaved repetitions per candidate (default {FULL['repeats']}, --quick {QUICK['repeats']})")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"unrecorded rounds before the repetitions (default {FULL['warmup']}, --quick {QUICK['warmup']})")
    parser.add_argument("--results-dir", default=None,
                        help="where NAME.json goes (default $INGEST_BENCH_RESULTS_DIR or bench/results; "
                             "--quick: bench/results/quick)")
    parser.add_argument("--cache-dir", default=None,
                        help="keep synthetic cubes here and reuse them (default: a temp dir of the run)")
    parser.add_argument("--quiet", action="store_true", help="no per-repetition lines on stderr")


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    """--store: the store the benchmark runs against; its results go to NAME-STORE.json (NAME.json
    for versitygw, the default, as before)."""
    parser.add_argument("--store", choices=STORES, default="versitygw",
                        help="the store to start on loopback (ingest.testbed): versitygw (default) or ceph "
                             "(a one-node Ceph RGW, objects in RAM; needs Debian's ceph packages)")


def results_name(name: str, args) -> str:
    """The results file's name: NAME, or NAME-STORE for a store other than versitygw."""
    store = getattr(args, "store", "versitygw")
    return name if store == "versitygw" else f"{name}-{store}"


def settle(args, **full_quick) -> argparse.Namespace:
    """Fill options left at None: the common ones from FULL/QUICK, others from name=(full, quick)."""
    quick = getattr(args, "quick", False)
    table = {name: (FULL[name], QUICK[name]) for name in FULL}
    table.update(full_quick)
    for name, (full_value, quick_value) in table.items():
        if getattr(args, name, None) is None:
            setattr(args, name, quick_value if quick else full_value)
    # A quick run must not overwrite the full run's results that BENCHMARKS.md quotes.
    if quick and getattr(args, "results_dir", None) is None and not os.environ.get("INGEST_BENCH_RESULTS_DIR"):
        args.results_dir = str(RESULTS_DIR_DEFAULT / "quick")
    return args


def logger(args):
    """A print to stderr, or None with --quiet."""
    if getattr(args, "quiet", False):
        return None
    return lambda text: print(text, file=sys.stderr, flush=True)


def store_line(results: dict) -> str:
    """The store a run's results came from, as its tables' first line (results written before
    --store existed came from versitygw)."""
    store = results.get("store") or {"server": "versitygw posix on 127.0.0.1"}
    return f"Store: {store['server']}.\n"


def markdown_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ratios_table(ratios: dict, targets: dict, label: str = "ratio") -> str:
    """The markdown table of named ratios with their targets and verdicts ('-' where untargeted)."""
    rows = [[name, spread(r), target_text(targets.get(name)), verdict(r, targets.get(name))]
            for name, r in ratios.items()]
    return markdown_table([label, "median (min-max)", "target", "verdict"], rows)


def spread(st: dict, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    """'median (min-max)' of a stats dict, each divided by scale (e.g. MiB)."""
    if not st or st.get("median") is None:
        return "-"
    med, lo, hi = (fmt.format(st[k] / scale) for k in ("median", "min", "max"))
    return f"{med} ({lo}-{hi})"


def gib(n_bytes: float) -> float:
    return n_bytes / GiB


def bench_main(module, argv=None, server: bool = True, **settle_kw) -> int:
    """`python -m bench.NAME`: parse the module's options (settle_kw: its full/quick sizes), run it
    on a fresh server (server=False: with env None, for a benchmark that reads no object), write
    its JSON, print its markdown. Every bench module's main() is this."""
    unwind_on_signals()  # killed, it still stops its server and Toxiproxy (ingest.testbed.signals)
    args = settle(module.build_parser().parse_args(argv), **settle_kw)
    if server:
        with BenchEnv(cache_dir=args.cache_dir, store=getattr(args, "store", "versitygw")) as env:
            results = module.run(env, args)
            results["store"] = env.describe_store()
    else:
        results = module.run(None, args)
    path = write_results(results_name(module.NAME, args), results, args.results_dir)
    print(module.to_markdown(results))
    print(f"\nwrote {path}")
    return 0
