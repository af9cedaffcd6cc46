"""`ingest.open(source)`: a remote cube opened once and read many times, like a numpy array.

`read_subcube` opens the object, reads its header and plans from scratch on every call. A
`RemoteCube` keeps what every read of one cube shares: the transport (its connection pool), the
layout (FITS header or HDF5 metadata, read once at open) and the link's cost model (tuned once,
on the first read big enough to repay a probe, then handed to the tuner for every later box).
Reads from many threads at once share all three; only opening and the probe take a lock.

It also keeps the bytes it read from a store, up to a memory budget (`cache=`, default
CACHE_BYTES): a read that overlaps earlier ones asks the store only for the bytes it lacks
(ingest.transports.cached), and `stats` says how many bytes came from memory and how many from
the store. The header and the probe's reads go around the cache (the probe measures the link), and
a local file has none (the kernel's page cache is one already).

A cube pickles as its source, settings and what was learned (layout, object identity, cost
model), never a connection or a key, so dask can ship it to workers: an unpickled cube opens its
own transport on its first read (keys for s3:// from boto3's standard chain where it runs) and
reads the version the original pinned (ETag, or a file's size and mtime).

This module opens and reads; the cube's description from its layout (shape, header, WCS) is
ingest.api.metadata's, its cut-outs ingest.api.cutouts', its cache budget and counts
ingest.api.caching's (CubeStats, CACHE_BYTES and cache_budget stay importable from here).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, fields

import numpy as np

from ingest.api.caching import CACHE_BYTES, CubeStats, cache_budget
from ingest.api.cutouts import CutoutMethods
from ingest.api.indexing import basic_index
from ingest.api.metadata import CubeMetadata
from ingest.api.read import plan_with, read_selection
from ingest.config import RunConfig, load_config
from ingest.config.settings import (Settings, configured_settings, read_options, resolve_settings, retry_policy,
                                    transport_options, tunable)
from ingest.core.cost import CostModel
from ingest.core.lattice import Plan
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.core.plan import storage_of
from ingest.core.selection import normalize
from ingest.core.tuning import THREADS_MAX
from ingest.engine.executor import execute
from ingest.formats.reader import read_any_layout_timed
from ingest.transports import open_transport
from ingest.transports.cached import CachedTransport
from ingest.transports.retry import RetryPolicy
from ingest.api.options import TRANSPORT_OPTIONS, keyword_names, refuse_unknown
from ingest.collection.spec import is_collection

# Transport options that are live objects, never pickled: a boto3 client holds credentials and a
# connection pool, a re-signing callable may close over keys. An unpickled cube goes without them.
_LIVE_OPTIONS = ("client", "refresh_url")


@dataclass(frozen=True)
class _Spec:
    """What opening needs, picklable and free of secrets (a presigned URL is its own bearer): the
    settings as a RunConfig, plus what only the Python API can hand over."""

    cfg: RunConfig
    cost: CostModel | None  # the model to start from; None: the config's
    retry: RetryPolicy
    extra_options: tuple  # (name, value) transport options RunConfig has no field for (posix O_DIRECT)
    cache_bytes: int = CACHE_BYTES  # memory for bytes already read (0: none)


class RemoteCube(CubeMetadata, CutoutMethods):
    """One FITS HDU or HDF5 dataset in an object store, sliced like a numpy array.

    Made by `ingest.open(source, ...)`; see its help for the options. `cube[key]` takes numpy
    basic indexing (integers, slices with steps, `...`, None) with numpy's meaning; `read(region,
    out=)` and `plan(region)` take read_subcube's stricter regions. Thread-safe; picklable (dask).
    `stats` counts this process's reads, requests and bytes (from the cache and from the store).
    """

    def __init__(self, spec: _Spec, *, live: dict | None = None, layout=None, info=None, header=None,
                 tuned_cost: CostModel | None = None, closed: bool = False):
        """Internal: use ingest.open(source, ...)."""
        self._spec = spec
        self._live = live or {}
        self._layout = layout
        self._info = info  # the object's size and identity, pinned for every read
        self._header = header  # the header request's timing: the tuner's free first look at the link
        self._tuned_cost = tuned_cost  # the cost model once a probe measured the link (or probe=False)
        self._memo: dict = {}  # (counts, steps) -> Settings, for contiguous layouts
        self._closed = closed
        self._transport = None  # the object's transport: the probe reads through it
        self._reader = None  # what reads go through: the transport, or the cache around it
        self._open_lock = threading.Lock()
        self._tune_lock = threading.Lock()
        self.stats = CubeStats()

    # -- opening and closing -------------------------------------------------------------------
    def _connect(self):
        """(transport, layout), opening the transport on first use (an unpickled cube's first read)."""
        transport = self._transport
        if transport is not None and not self._closed:
            return transport, self._layout
        with self._open_lock:
            if self._closed:
                raise ValueError(f"ingest.RemoteCube {self.source}: the cube is closed; open it again with "
                                 f"ingest.open(...) to read")
            if self._transport is None:
                transport = self._open_transport()
                # A local file has the kernel's page cache and no link to spare: no second copy.
                budget = self._spec.cache_bytes if transport.endpoint is not None else 0
                self._reader = (CachedTransport(transport, budget, on_served=self.stats.add_served) if budget
                                else transport)
                self._transport = transport
            return self._transport, self._layout

    def _open_transport(self):
        spec, cfg = self._spec, self._spec.cfg
        # Pool for the most threads the tuner may pick, and at least the probe's latency round.
        pool = max(cfg.threads or THREADS_MAX, LATENCY_THREADS)
        transport = open_transport(cfg.source, cfg.method, threads=pool, **transport_options(cfg),
                                   **dict(spec.extra_options), **self._live)
        try:
            if self._layout is None:
                self._layout, self._header = read_any_layout_timed(transport, hdu=cfg.hdu, dataset=cfg.dataset,
                                                                   retry=spec.retry)
                self._info = transport.info
            else:
                transport.adopt(self._info)  # no second HEAD; and the same version as the original
        except BaseException:
            transport.close()
            raise
        return transport

    def close(self) -> None:
        """Release the transport (connections, file). Later reads raise ValueError."""
        with self._open_lock:
            self._closed = True
            transport, self._transport = self._transport, None
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()  # the cache's memory, and the transport it wraps
        elif transport is not None:
            transport.close()

    @property
    def closed(self) -> bool:
        """True once close() (or the end of `with`) released the transport."""
        return self._closed

    def __enter__(self) -> "RemoteCube":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __reduce__(self):
        return (_restore, (self._spec, self._layout, self._info, self._header, self._tuned_cost, self._closed))

    def __dask_tokenize__(self):
        """dask's name for the cube: the object's identity and how it is read (no pickling)."""
        s, info = self._spec.cfg, self._info
        return ("ingest.RemoteCube", s.source, s.method, s.hdu, s.dataset, s.native_byteorder, self.shape,
                self.dtype.str, info.object_bytes, info.etag, info.last_modified)

    # -- reading -------------------------------------------------------------------------------
    def __getitem__(self, key):
        """numpy basic indexing, numpy's meaning (clipped slices, negative steps, None); one plan."""
        index = basic_index(key, self.shape)
        if index.empty:
            self._connect()  # a closed cube refuses even an empty read
            return np.empty(index.out_shape, dtype=self.dtype)
        return self._read(index.region)[index.post]

    def __array__(self, dtype=None, copy=None):
        """The whole cube (np.asarray(cube)): mind its nbytes."""
        return np.asarray(self[...], dtype=dtype)

    def read(self, region=(), out: np.ndarray | None = None) -> np.ndarray:
        """Read `region` (read_subcube's meaning: slices/ints/..., numpy axis order; a slice past
        the cube is an error, not clipped). With `out` (e.g. an np.memmap) the values land there:
        its shape must be the region's and its dtype the cube's (either byte order); returns it.
        A FITS cube without scaling whose `out` has the stored dtype gets the bytes in place."""
        if out is not None:
            self._check_out(out, normalize(region, self.shape).out_shape)
        return self._read(region, out)

    def plan(self, region=()) -> dict:
        """What reading `region` would do, as `python -m ingest plan --json` shows it: strategy,
        requests, bytes needed and on the wire, read amplification, predicted seconds, the box
        (numpy order, half-open), threads, and the tuner's choice when strategy is auto."""
        transport, layout = self._connect()
        settings = self._settings(transport, layout, normalize(region, layout.shape))
        sel, plan = plan_with(layout, region, settings)
        summary = plan.describe(settings.cost, settings.threads)
        summary.update(box=[list(b) for b in sel.box], threads=settings.threads)
        if settings.tuning is not None:
            summary["tuning"] = settings.tuning.as_dict()
        return summary


    def _count(self, stats, reader) -> None:
        """Add one executed plan to `stats`; without a cache every byte asked came from the store."""
        self.stats.add(stats)
        if not isinstance(reader, CachedTransport):
            self.stats.add_served(0, stats.bytes_wire)

    @property
    def wcs_full(self):
        """The same as `wcs` (every axis of the cube); kept for code that used it."""
        return self.wcs

    def to_xarray(self, chunks="auto", name: str | None = None):
        """A lazy xarray.DataArray over dask: dims and 1-D coordinates from the WCS (FITS) or
        dim_0.. (HDF5, unless its attributes name them); `chunks` as dask.array.from_array takes
        them. Needs the dask extra: pip install ingest[dask]."""
        from ingest.api.labels import to_xarray

        return to_xarray(self, chunks=chunks, name=name)

    def _check_out(self, out, shape: tuple[int, ...]) -> None:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out: expected a numpy array (np.empty, np.memmap...), got {type(out).__name__}")
        if out.shape != shape:
            raise ValueError(f"out: has shape {out.shape}, the region reads {shape}")
        if out.dtype not in (self.dtype, self.dtype.newbyteorder()):
            raise ValueError(f"out: has dtype {out.dtype.str}, the cube reads {self.dtype.str} "
                             f"(either byte order is fine: {self.dtype.newbyteorder().str})")
        if not out.flags.writeable:
            raise ValueError("out: is read-only")

    def _read(self, region, out: np.ndarray | None = None) -> np.ndarray:
        """One plan for `region`, executed into `out` or a new array."""
        transport, layout = self._connect()
        settings = self._settings(transport, layout, normalize(region, layout.shape))
        sel, plan = plan_with(layout, region, settings)
        spec, transport = self._spec, self._reader or transport
        if out is not None and self._lands_in_place(plan, out):
            stats = execute(plan, transport, out.reshape(sel.box_shape), threads=settings.threads, retry=spec.retry)
            data = out
        else:
            data, stats = read_selection(transport, layout, sel, plan, threads=settings.threads,
                                         native_byteorder=spec.cfg.native_byteorder, retry=spec.retry)
            if out is not None:
                out[...] = data
                data = out
        self._count(stats, transport)
        return data

    def _lands_in_place(self, plan, out: np.ndarray) -> bool:
        """Can the plan's bytes go straight into `out`: a lattice plan, stored values, same dtype?"""
        return (isinstance(plan, Plan) and not self._layout.scaled and out.dtype == self._layout.raw_dtype
                and out.flags.c_contiguous)

    def _settings(self, transport, layout, sel) -> Settings:
        """The settings for reading `sel`: the configured ones, or with strategy auto the tuner's.
        The first read big enough to repay a probe measures the link (under a lock: concurrent
        probes would measure each other); every later read reuses that cost model."""
        cfg, cost = self._spec.cfg, self._spec.cost
        options = read_options(cfg)
        if not tunable(options, layout):
            return configured_settings(cfg, cost)
        # In a contiguous layout a box's plan depends on its shape, not its place: dask's chunks and
        # a user's repeated boxes are tuned once per shape (choosing plans ~100 candidates, ~1 ms).
        memo = self._memo
        key = (sel.counts, sel.steps) if storage_of(layout) == "contiguous" else None
        if key in memo:
            return memo[key]
        if self._tuned_cost is not None:
            settings = resolve_settings(options, transport, layout, sel, cost=cost, measured=self._tuned_cost)
        else:
            with self._tune_lock:
                if self._tuned_cost is not None:
                    settings = resolve_settings(options, transport, layout, sel, cost=cost, measured=self._tuned_cost)
                else:
                    settings = resolve_settings(options, transport, layout, sel, cost=cost, header=self._header)
                    if settings.probe is not None or not cfg.probe:
                        self._tuned_cost = settings.cost
                        self._memo = memo = {}  # settings chosen before the probe are stale
        if key is not None:
            memo[key] = settings
        return settings


def _restore(spec, layout, info, header, tuned_cost, closed) -> RemoteCube:
    """Unpickling: the cube as it was, without a transport until its first read."""
    return RemoteCube(spec, layout=layout, info=info, header=header, tuned_cost=tuned_cost, closed=closed)


def open(
    source: str | os.PathLike,
    *,
    hdu: int = 0,
    dataset: str | None = None,
    method: str = "auto",
    threads: int | None = None,
    chunk_bytes: int | str | None = None,
    strategy: str = "auto",
    max_gap_bytes: int | str | None = None,
    probe: bool = True,
    cost: CostModel | None = None,
    retry: RetryPolicy | None = None,
    native_byteorder: bool = False,
    cache: int | str | bool | None = True,
    **transport_options,
) -> RemoteCube:
    """Open a FITS HDU or HDF5 dataset once and read it many times: a RemoteCube.

        with ingest.open("s3://survey/cube.fits") as cube:
            print(cube.shape, cube.dtype, cube.wcs)
            plane = cube[100]                        # numpy basic indexing
            box = cube.read((slice(0, 100), slice(2000, 2500), slice(2000, 2500)), out=my_memmap)
            moment0 = dask.array.from_array(cube, chunks=(-1, 512, 512)).sum(axis=0)

    The header (HDF5: the file's metadata) is read here, once, so a wrong source, HDU or
    dataset fails now. The cube keeps its connections and the tuned link for every read, is
    safe to read from many threads, pickles without connections or keys (dask workers reopen
    it), and closes with `with` or close(). FITS or HDF5 is told by the object's first bytes.

    Parameters (all but source are keywords):
      source            local path (posix), http(s) presigned URL, or s3://bucket/key (endpoint
                        and keys from boto3's standard chain: AWS_ENDPOINT_URL, AWS_PROFILE, ...)
      hdu               FITS: image HDU index; default 0 (the primary)
      dataset           HDF5: dataset path, e.g. "/0/DATA"; default the file's only 3-D or 4-D
                        numeric dataset
      method            "auto" (default: s3:// -> s3, http(s):// -> presigned, else posix),
                        "posix", "presigned" or "s3"
      threads           concurrent range requests per read (threads); default None: chosen by
                        the tuner per read (strategy auto), else 4
      chunk_bytes       largest single request (bytes, or a string like "16MiB"); default None:
                        chosen by the tuner, else 16 MiB
      strategy          "auto" (default: the tuner picks per read), "large", "intermediate",
                        "small" (seed 001 s7.4)
      max_gap_bytes     merge runs separated by at most this many unneeded bytes (bytes);
                        default latency x bandwidth of the cost model
      probe             strategy auto: measure the link (latency, bandwidth) on the first read
                        big enough to repay it, once per cube; default True
      cost              the CostModel to start from; default 2 ms per request, 75 MB/s
      retry             RetryPolicy for transient faults; default 5 retries within 300 s per
                        request, resuming broken ranges
      native_byteorder  return the machine's byte order; default False (big-endian as FITS
                        stores it, like astropy's .data)
      cache             memory for the bytes already read, so a read overlapping earlier ones
                        asks the store only for what it lacks (bytes, or a string like
                        "512MiB"); least recently used bytes go first beyond it; default True:
                        CACHE_BYTES (256 MiB); 0, False or None: no cache
      **transport_options, passed to the transport:
                        endpoint_url (URL), verify_tls (default True), ca_bundle (PEM path),
                        connect_timeout_s (s, default 10), read_timeout_s (s, default 60),
                        client (a boto3 S3 client; not pickled), refresh_url (callable returning
                        a fresh presigned URL; not pickled), engine (the HTTP engine), direct
                        (posix O_DIRECT), direct_buffer_bytes

    An unknown option is a TypeError naming the closest valid one; a bad value a ConfigError
    naming its unit. See RemoteCube for what the cube offers. A collection of tile cubes (a glob
    such as "s3://survey/field/*.fits", a prefix ending in "/", or "@FILE") opens as an
    ingest.api.collection.CubeCollection, whose cutout(...) cuts from the tile the rule picks.
    """
    refuse_unknown("ingest.open", transport_options, TRANSPORT_OPTIONS + _OPEN_NAMES)
    if is_collection(os.fspath(source)):  # a glob, a prefix ending in '/', @FILE: ingest.api.collection
        from ingest.api.collection import open_cube_collection

        return open_cube_collection(os.fspath(source), open, hdu=hdu, dataset=dataset, method=method, threads=threads,
                                    chunk_bytes=chunk_bytes, strategy=strategy, max_gap_bytes=max_gap_bytes,
                                    probe=probe, cost=cost, retry=retry, native_byteorder=native_byteorder,
                                    cache=cache, **transport_options)
    live = {k: v for k, v in transport_options.items() if k in _LIVE_OPTIONS and v is not None}
    settings = {k: v for k, v in transport_options.items() if k in _CONFIG_FIELDS}
    extra = tuple(sorted((k, v) for k, v in transport_options.items()
                         if k not in _LIVE_OPTIONS and k not in _CONFIG_FIELDS))
    cfg = load_config({"source": os.fspath(source), "method": method, "threads": threads, "chunk_bytes": chunk_bytes,
                       "strategy": strategy, "max_gap_bytes": max_gap_bytes, "probe": probe, "hdu": hdu,
                       "dataset": dataset, "native_byteorder": native_byteorder, **settings})
    spec = _Spec(cfg=cfg, cost=cost, retry=retry or retry_policy(cfg), extra_options=extra,  # AWS_MAX_ATTEMPTS too
                 cache_bytes=cache_budget(cache))
    cube = RemoteCube(spec, live=live)
    cube._connect()  # the header now: a wrong source, HDU or dataset fails here, not on the first read
    return cube



_CONFIG_FIELDS = {f.name for f in fields(RunConfig)}
_OPEN_NAMES = keyword_names(open)  # for the did-you-mean hint: a misspelt `thread` means `threads`
