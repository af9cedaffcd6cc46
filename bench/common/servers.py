"""The benchmarks' store: a loopback S3 server with a synthetic cube on it, started for a run
(--store: versitygw or a one-node Ceph RGW) and stopped after it, with the environment a child needs to reach it."""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from bench.common.machine import REPO_ROOT
from ingest.testbed.ceph import CephRGW
from ingest.testbed.localserver import LocalS3Server
from ingest.testbed.synth import write_cube
from ingest.transports.presign import presign_url
from ingest.units import GiB, MiB


BUCKET = "bench"
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
