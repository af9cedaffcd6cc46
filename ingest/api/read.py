"""The Python API: `read_subcube(source, region)` and the pieces the MPI driver reuses."""
from __future__ import annotations

import math
import os

import numpy as np

from ingest.errors import ConfigError

from ingest import buffers
from ingest.config.settings import Settings
from ingest.engine.destination import Destination
from ingest.engine.executor import ReadStats, execute
from ingest.core.layout import Layout
from ingest.formats.reader import read_any_layout
from ingest.core.lattice import DEFAULT_CHUNK_BYTES, DEFAULT_THREADS, Plan
from ingest.core.cost import CostModel
from ingest.core.plan import LocalPlan, plan_selection
from ingest.transports.retry import RetryPolicy
from ingest.core.selection import Selection, normalize
from ingest.transports import Transport, open_transport
from ingest.api.options import TRANSPORT_OPTIONS, keyword_names, refuse_unknown


def apply_scaling(raw: np.ndarray, layout: Layout) -> np.ndarray:
    """Convert raw stored values exactly as astropy's section does (BSCALE/BZERO/BLANK).

    Same dtype rules, same operation order and precision, so results are bit-identical.
    """
    if not layout.scaled:
        return raw
    out_dtype = layout.out_dtype
    if out_dtype.kind in "ui" and out_dtype.itemsize == layout.itemsize:
        # Pseudo-unsigned (or int8 with BZERO=-128): adding 2**(bits-1) modulo 2**bits is
        # flipping the top bit, done in place on a native-order copy.
        data = raw.astype(raw.dtype.newbyteorder("="))
        data = data.view(np.dtype(f"u{layout.itemsize}"))
        data ^= np.array(1 << (8 * layout.itemsize - 1), dtype=data.dtype)
        return data.view(out_dtype)
    blanks = None
    if layout.blank is not None and layout.bitpix > 0:
        blanks = raw == layout.blank
    data = raw if out_dtype == raw.dtype else raw.astype(out_dtype)
    if layout.bscale != 1:
        np.multiply(data, layout.bscale, data)
    if layout.bzero != 0:
        data += layout.bzero
    if layout.blank and blanks is not None:  # astropy tests BLANK for truth, so BLANK=0 is ignored
        data[blanks] = np.nan
    return data


def to_native(array: np.ndarray) -> np.ndarray:
    """Swap to the machine's byte order in place (no copy) when the array is big-endian."""
    if array.dtype.byteorder in ("=", "|") or array.dtype.isnative:
        return array
    array.byteswap(inplace=True)
    return array.view(array.dtype.newbyteorder("="))


def plan_read(
    layout: Layout,
    region,
    *,
    strategy: str = "auto",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_gap_bytes: int | None = None,
    cost: CostModel | None = None,
):
    """Normalise `region` against the layout and plan its requests (pure): a lattice Plan for FITS
    and contiguous HDF5, a ChunkPlan for chunked HDF5, a LocalPlan when no byte need be read."""
    sel = normalize(region, layout.shape)
    plan = plan_selection(layout, sel, strategy=strategy, chunk_bytes=chunk_bytes, max_gap_bytes=max_gap_bytes,
                          cost=cost or CostModel())
    return sel, plan


def plan_with(layout: Layout, region, settings: Settings):
    """plan_read with resolved settings (ingest.config.settings): what the driver, `ingest.open`
    and `plan` all read with."""
    return plan_read(layout, region, strategy=settings.strategy, chunk_bytes=settings.chunk_bytes,
                     max_gap_bytes=settings.max_gap_bytes, cost=settings.cost)


def read_selection(
    transport: Transport,
    layout: Layout,
    sel: Selection,
    plan: Plan,
    *,
    threads: int = DEFAULT_THREADS,
    native_byteorder: bool = False,
    convert: bool = True,
    progress=None,
    retry: RetryPolicy = RetryPolicy(),
    order: str = "sequential",
) -> tuple[np.ndarray, ReadStats]:
    """Execute a plan into a fresh array and convert it as astropy would (convert=False: the raw
    stored values in the selection's box shape, e.g. to write them out unchanged)."""
    if isinstance(plan, Plan):
        raw = buffers.empty(sel.box_shape, layout.raw_dtype)
        stats = execute(plan, transport, raw, threads=threads, progress=progress, retry=retry, order=order)
    else:
        raw, stats = _read_stored_box(transport, layout, sel, plan, threads=threads, progress=progress, retry=retry,
                                      order=order)
    if not convert:
        return raw, stats
    data = apply_scaling(raw, layout)
    if native_byteorder:
        data = to_native(data)
    return data.reshape(sel.out_shape), stats


def _read_stored_box(transport, layout, sel: Selection, plan, **options):
    """HDF5 chunked, compact or never-written data: the bounding box, then the selection's steps."""
    box = buffers.empty(tuple(b - a for a, b in sel.box), layout.raw_dtype)
    stats = fill_box(box, transport, layout, sel.box, plan, **options)
    stepped = box[tuple(slice(None, None, step) for step in sel.steps)]
    return np.ascontiguousarray(stepped), stats


def fill_box(out: np.ndarray, transport, layout, box, plan, **options) -> ReadStats:
    """Fill `out` (box-shaped, the stored dtype) with a box of HDF5 data that is not a lattice in
    the object: chunked (fetched and decoded), compact (in the layout) or never written."""
    if isinstance(plan, LocalPlan):
        if layout.storage == "compact":
            whole = np.frombuffer(layout.compact_data, dtype=layout.raw_dtype).reshape(layout.shape)
            out[...] = whole[tuple(slice(a, b) for a, b in box)]
        else:
            out[...] = layout.fill_value
        return ReadStats(bytes_needed=plan.needed_bytes)
    from ingest.engine.chunked import execute_chunks

    return execute_chunks(plan, layout.chunks, layout.filters, layout.raw_dtype, transport, out, box,
                          fill_value=layout.fill_value, name=f"{transport.display_name} {layout.dataset}", **options)


def execute_plan(plan, layout, transport, dest: Destination, box, **options) -> ReadStats:
    """Run any layout's plan for `box` into a Destination (e.g. a mapped output file): a lattice
    plan request by request; any other into the destination's compact box, mapped whole (file
    pages, not anonymous memory: a region of any size stays within the memory bound)."""
    if isinstance(plan, Plan):
        return execute(plan, transport, dest, **options)
    nbytes = math.prod(b - a for a, b in box) * layout.itemsize
    with dest.window(dest.base, dest.base + nbytes) as window:
        out = window.view(layout.raw_dtype).reshape(tuple(b - a for a, b in box))
        try:
            return fill_box(out, transport, layout, box, plan, **options)
        finally:
            del out  # the mapping closes only when no array points into it


def read_subcube(
    source: str,
    region=(),
    *,
    hdu: int = 0,
    dataset: str | None = None,
    threads: int = DEFAULT_THREADS,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    strategy: str = "auto",
    max_gap_bytes: int | None = None,
    method: str = "auto",
    native_byteorder: bool = False,
    cost: CostModel | None = None,
    retry: RetryPolicy | None = None,
    pos=None,
    band=None,
    channels=None,
    **transport_options,
) -> np.ndarray:
    """Read `region` of HDU `hdu` of the FITS object `source`, or of dataset `dataset` of the HDF5
    object `source` (told apart by their magic bytes), into a numpy array.

    source: a local path (posix), an http(s) presigned URL (urllib3 Range GETs) or
    s3://bucket/key (boto3; endpoint and keys from boto3's standard chain).
    region: slices/ints in numpy axis order, meaning what astropy's `section[region]` (or h5py's
    `dset[region]`) means. dataset: an HDF5 dataset path (default: the file's only 3-D or 4-D
    numeric dataset).
    threads: concurrent requests (default 4); chunk_bytes: largest request (default 16 MiB);
    strategy: auto | large | intermediate | small (seed 001 s7.4); max_gap_bytes: coalescing gap
    (default from `cost`: latency x bandwidth); retry: a RetryPolicy for transient faults
    (default 5 retries within 300 s, resuming broken ranges). The result equals astropy's section: same
    values and dtype, big-endian as stored unless native_byteorder=True.
    transport_options: endpoint_url, verify_tls, ca_bundle, connect_timeout_s, read_timeout_s, client,
    refresh_url, engine, direct; any other name is a TypeError naming the closest valid one.
    pos, band, channels: a world region instead of `region` (ingest.api.sky.world_box_of: SODA
    text, parsed regions, or astropy objects: (SkyCoord, radius), (lo, hi) Quantities); the box is
    every pixel whose centre lies in it, clipped to the cube.
    Each call opens the source and reads its header afresh: for many reads of one cube,
    `ingest.open(source)` keeps both (and the tuned link) across reads.
    """
    refuse_unknown("ingest.read_subcube", transport_options, TRANSPORT_OPTIONS + _READ_SUBCUBE_NAMES)
    retry = retry or _retry_for(source, method, transport_options)
    with open_transport(source, method, threads=threads, **transport_options) as transport:
        layout = read_any_layout(transport, hdu=hdu, dataset=dataset, retry=retry)
        if pos is not None or band is not None or channels is not None:
            if region != ():
                raise ConfigError("read_subcube: give a region or a world region (pos, band, channels), not both")
            from ingest.api.sky import world_box_of

            region = tuple(slice(a, b) for a, b in world_box_of(layout, pos, band, channels).box)
        sel, plan = plan_read(
            layout, region, strategy=strategy, chunk_bytes=chunk_bytes, max_gap_bytes=max_gap_bytes, cost=cost
        )
        data, _ = read_selection(transport, layout, sel, plan, threads=threads, native_byteorder=native_byteorder,
                                 retry=retry)
        return data


def _retry_for(source, method: str, transport_options: dict) -> RetryPolicy:
    """The retries `run` and `ingest.open` would use for this source (RunConfig.resolved_retries:
    AWS_MAX_ATTEMPTS or the profile's max_attempts for a store, else the default)."""
    from ingest.config import load_config
    from ingest.config.settings import retry_policy

    given = {k: transport_options[k] for k in ("endpoint_url", "ca_bundle", "verify_tls")
             if transport_options.get(k) is not None}
    return retry_policy(load_config({"source": os.fspath(source), "method": method, **given}))


_READ_SUBCUBE_NAMES = keyword_names(read_subcube)  # for the did-you-mean hint (`thread` -> threads)
