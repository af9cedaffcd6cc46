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
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field, fields

import numpy as np

from ingest.api.indexing import basic_index
from ingest.api.read import apply_scaling, plan_with, read_selection, to_native
from ingest.config import RunConfig, load_config, shown_source
from ingest.config.settings import (Settings, configured_settings, read_options, resolve_settings, retry_policy,
                                    transport_options, tunable)
from ingest.core.cost import CostModel
from ingest.core.cutplan import box_selection, gather_box, plan_spans, rank_share_box
from ingest.core.lattice import Plan
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.core.plan import storage_of
from ingest.core.selection import box_to_region, normalize
from ingest.core.tuning import THREADS_MAX
from ingest.engine.executor import execute, run_requests
from ingest.formats.reader import read_any_layout_timed
from ingest.transports import open_transport
from ingest.transports.cached import CachedTransport
from ingest.transports.retry import RetryPolicy
from ingest.units import MiB, format_bytes, parse_bytes
from ingest.api.options import TRANSPORT_OPTIONS, keyword_names, refuse_unknown
from ingest.collection.spec import is_collection

# Transport options that are live objects, never pickled: a boto3 client holds credentials and a
# connection pool, a re-signing callable may close over keys. An unpickled cube goes without them.
_LIVE_OPTIONS = ("client", "refresh_url")

# What a cube keeps of the bytes it read, by default: room for a few hundred cut-outs or a few
# dozen channel maps of a large cube, small beside a notebook's memory (fsspec's BlockCache keeps
# 32 blocks of a file; a cube's reads are larger than its 5 MB blocks).
CACHE_BYTES = 256 * MiB


@dataclass(frozen=True)
class _Spec:
    """What opening needs, picklable and free of secrets (a presigned URL is its own bearer): the
    settings as a RunConfig, plus what only the Python API can hand over."""

    cfg: RunConfig
    cost: CostModel | None  # the model to start from; None: the config's
    retry: RetryPolicy
    extra_options: tuple  # (name, value) transport options RunConfig has no field for (posix O_DIRECT)
    cache_bytes: int = CACHE_BYTES  # memory for bytes already read (0: none)


@dataclass
class CubeStats:
    """What this cube's reads have cost so far, over all threads (this process's copy only).

    bytes_wire is what the plans asked for (the bytes needed and the gaps merged between them);
    of those, bytes_from_cache came from the cube's memory and bytes_from_store over the wire."""

    reads: int = 0  # plans executed: one per read(), cube[...] or dask task
    requests: int = 0  # the plans' requests, before the cache took what it held
    bytes_needed: int = 0
    bytes_wire: int = 0
    retries: int = 0
    bytes_from_cache: int = 0
    bytes_from_store: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, stats) -> None:
        with self._lock:
            self.reads += 1
            self.requests += stats.requests
            self.bytes_needed += stats.bytes_needed
            self.bytes_wire += stats.bytes_wire
            self.retries += stats.retries

    def add_served(self, from_cache_bytes: int, from_store_bytes: int) -> None:
        """Bytes of a read taken from the cube's cache and from the store (the cache's tally)."""
        with self._lock:
            self.bytes_from_cache += from_cache_bytes
            self.bytes_from_store += from_store_bytes

    def __str__(self) -> str:
        return (f"{self.reads} reads, {self.requests} requests, {format_bytes(self.bytes_needed)} needed, "
                f"{format_bytes(self.bytes_wire)} asked: {format_bytes(self.bytes_from_cache)} from cache, "
                f"{format_bytes(self.bytes_from_store)} from the store, {self.retries} retries")


class RemoteCube:
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

    # -- what it is ----------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """The source as it may be shown (a presigned URL's query removed)."""
        return shown_source(self._spec.cfg.source)

    @property
    def layout(self):
        """Where the data lies in the object (ingest.formats: FITS Layout or H5Layout)."""
        return self._layout

    @property
    def shape(self) -> tuple[int, ...]:
        """Numpy axis order (FITS: NAXISn reversed; HDF5: the dataset's)."""
        return self._layout.shape

    @property
    def dtype(self) -> np.dtype:
        """What reads return: astropy's (scaled) dtype for FITS, the stored one for HDF5; big-endian
        as stored unless the cube was opened with native_byteorder=True."""
        dtype = self._layout.out_dtype
        return dtype.newbyteorder("=") if self._spec.cfg.native_byteorder else dtype

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of voxels."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole cube as read (dtype.itemsize x size)."""
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...] | None:
        """HDF5 chunked: the storage chunk shape (as h5py's Dataset.chunks; dask's auto chunks
        follow it); None for FITS and contiguous data."""
        index = self._layout.chunks
        return tuple(index.chunk_shape) if index is not None else None

    def __len__(self) -> int:
        """Length of the first (slowest, numpy order) axis."""
        return self.shape[0]

    @property
    def header(self):
        """FITS: the HDU's header (astropy.io.fits.Header). HDF5: None (see attrs)."""
        if self._layout.kind != "fits":
            return None
        from astropy.io import fits

        return fits.Header.fromstring(self._layout.header_text)

    @property
    def attrs(self) -> dict:
        """HDF5: the dataset's attributes. FITS: the header's keywords and values (no COMMENT/HISTORY)."""
        if self._layout.kind != "fits":
            return dict(self._layout.attrs)
        return {k: v for k, v in self.header.items() if k not in ("COMMENT", "HISTORY", "")}

    @property
    def wcs(self):
        """astropy.wcs.WCS of every axis the header describes, FITS axis order: a Stokes axis too
        (a FITS cube's `wcs.naxis == cube.ndim`), and a cut-out's WCS is this one shifted to its
        box; `wcs.celestial` and `wcs.spectral` give the sky and spectral parts. From the FITS
        header, or HDF5 attributes carrying CTYPEn as the CARTA/IDIA schema's; else None."""
        from ingest.api.labels import cube_wcs

        return cube_wcs(self, celestial_spectral=False)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        where = f" hdu {self._spec.cfg.hdu}" if self._layout.kind == "fits" else f" {self._layout.dataset}"
        return f"<ingest.RemoteCube {self.source}{where} shape={self.shape} dtype={self.dtype.str} {state}>"

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

    def world_box(self, pos=None, band=None, channels=None, **options):
        """The box (ingest.sky.pixels.WorldBox) a sky region, spectral range or channels select:
        see `cutout`. Nothing is read."""
        from ingest.api.sky import world_box_of

        return world_box_of(self._connect()[1], pos, band, channels, **options)

    def cutout(self, center=None, radius=None, spectral=None, *, pos=None, channels=None, convention="radio",
               rest=None, frame="icrs"):
        """Read every pixel whose centre lies within `radius` (an angular Quantity) of `center` (a
        SkyCoord of one position: ICRS, FK5 or Galactic) and, with `spectral=(lo, hi)` (Quantities
        of frequency, vacuum wavelength or velocity; velocities by `convention` about `rest`,
        default the header's RESTFRQ), in that range. `pos` takes any other sky region (SODA text,
        a SkyRange, a SkyPolygon) instead of center and radius. Returns an ingest.api.sky.Cutout:
        data, WCS shifted to the box (every axis, as cube.wcs), the box, what the cube's edges
        clipped, and the file the command line writes for that box (header, beams, writeto,
        to_hdulist, to_spectral_cube). Many positions (an array SkyCoord): `cutouts`."""
        from ingest.api.sky import one_position

        options = dict(frame=frame, convention=convention, rest=rest)
        return self._cutouts([one_position(center, radius, pos)], [spectral], channels, options)[0]

    def cutouts(self, center=None, radius=None, spectral=None, *, pos=None, channels=None, convention="radio",
                rest=None, frame="icrs") -> list:
        """`cutout` for many positions, read by one plan: a list of Cutouts, one per position of
        `center` (a SkyCoord of any shape, flattened in C order) within `radius` (one angle, or an
        array of one per position), or one per region of the list `pos`. `spectral` is one (lo, hi)
        for all or a list of one per position. Every box's bytes are asked for once, in one set
        of requests (neighbours' shared and nearby bytes merged, as the cutouts command reads a
        catalogue); each cut-out equals what `cutout` gives for its position alone."""
        from ingest.api.sky import many_positions, per_position

        regions = many_positions(center, radius, pos)
        options = dict(frame=frame, convention=convention, rest=rest)
        return self._cutouts(regions, per_position(spectral, len(regions), "spectral"), channels, options)

    def _cutouts(self, regions, bands, channels, options) -> list:
        """The Cutouts of (sky region, spectral range) pairs, their boxes read together."""
        from ingest.api.sky import Cutout, shifted_wcs

        found = []
        for index, (pos, band) in enumerate(zip(regions, bands)):
            try:
                found.append(self.world_box(pos, band, channels, **options))
            except Exception as exc:
                if len(regions) > 1:
                    exc.add_note(f"cutouts: position {index} of {len(regions)}")
                raise
        raws = self._read_boxes([box.box for box in found])
        wcs, layout = self.wcs, self._layout
        return [Cutout(self._as_read(raw), shifted_wcs(wcs, box.box), box.box, box.clipped, box.region_text,
                       layout=layout, raw=raw) for box, raw in zip(found, raws)]

    def _as_read(self, raw: np.ndarray) -> np.ndarray:
        """Stored values as `read` returns them (astropy's scaling, the byte order asked for);
        never `raw` changed in place (a cut-out writes it)."""
        data = apply_scaling(raw, self._layout)
        if self._spec.cfg.native_byteorder:
            data = to_native(data.copy() if data is raw else data)
        return data

    def _read_boxes(self, boxes) -> list:
        """The RAW stored values of each box (numpy-order half-open pairs). Contiguous data: ONE
        plan for them all, as the cutouts command reads a band (ingest.core.cutplan.plan_spans:
        every box's runs merged where the gap between them costs less than a request, cut into
        requests of the settings' chunk_bytes), each box gathered from the one buffer. Chunked
        HDF5: each box through its chunks. Settings are those of the boxes' bounding box."""
        transport, layout = self._connect()
        reader, spec = self._reader or transport, self._spec
        settings = self._settings(transport, layout, box_selection(rank_share_box(boxes, 1), layout.shape))
        if storage_of(layout) != "contiguous":
            raws = []
            for box in boxes:
                sel, plan = plan_with(layout, box_to_region(box), settings)
                raw, stats = read_selection(reader, layout, sel, plan, convert=False, threads=settings.threads,
                                            retry=spec.retry)
                self._count(stats, reader)
                raws.append(raw)
            return raws
        gap = settings.cost.gap_bytes if settings.max_gap_bytes is None else settings.max_gap_bytes
        plan = plan_spans(layout, boxes, max_gap_bytes=gap, chunk_bytes=settings.chunk_bytes)
        buffer = np.empty(plan.buffer_bytes, np.uint8)
        at = plan.request_buffer_offsets()

        def one(i, worker):
            start, n = int(plan.request_starts[i]), int(plan.request_stops[i] - plan.request_starts[i])
            yield memoryview(buffer)[int(at[i]): int(at[i]) + n], start
            return n

        stats = run_requests(plan.n_requests, one, reader, needed_bytes=plan.needed_bytes,
                             buffer_bytes=settings.chunk_bytes, wire_bytes=plan.wire_bytes, threads=settings.threads,
                             retry=spec.retry)
        self._count(stats, reader)
        raws = []
        for box in boxes:
            raw = gather_box(plan, buffer, layout, box)
            if len(boxes) > 1 and np.may_share_memory(raw, buffer):
                raw = raw.copy()  # else one kept cut-out keeps every box's bytes alive
            raws.append(raw)
        return raws

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


def cache_budget(cache: int | str | bool | None) -> int:
    """`ingest.open`'s cache= as bytes: True the default, 0/False/None none, else a byte count."""
    if cache is True:
        return CACHE_BYTES
    if cache is None or cache is False:
        return 0
    return parse_bytes(cache, "cache")


_CONFIG_FIELDS = {f.name for f in fields(RunConfig)}
_OPEN_NAMES = keyword_names(open)  # for the did-you-mean hint: a misspelt `thread` means `threads`
