"""HDF5 geometry from the file's metadata alone: which dataset, where its bytes are, how they are filtered.

h5py parses the metadata through `TransportFile`, a block-cached file object over a Transport,
so opening costs a few Range reads; the data itself is never read here (except compact data,
which lives inside the object header). Chunked datasets become a `core.chunks.ChunkIndex` built in
one `chunk_iter` pass. Everything is in numpy axis order. Never the ROS3 driver: PyPI wheels lack it.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ingest.core.chunks import ChunkIndex, Filter
from ingest.core.layout import ContiguousGeometry
from ingest.errors import IngestError, TransportError
from ingest.formats.h5file import TransportFile
from ingest.transports.retry import RetryPolicy, read_with_retries, retry_call

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
SIGNATURE_OFFSETS = (0, 512, 1024, 2048)  # where is_hdf5 looks for a superblock
_NUMERIC_KINDS = "iuf"
_LAYOUTS = {0: "compact", 1: "contiguous", 2: "chunked", 3: "virtual"}  # H5D_layout_t


class Hdf5FormatError(IngestError):
    """The object is not an HDF5 file ingest can read, or the dataset is not a plain numeric array."""


def is_hdf5(transport, retry: RetryPolicy = RetryPolicy()) -> bool:
    """True when an HDF5 superblock signature sits at byte 0, 512, 1024 or 2048 of the object.

    HDF5 itself tries every power of two from 512 up to the end of the file (a user block may
    precede the superblock). We read the first min(size, 2056) bytes in ONE request: a round trip
    costs the same for 8 bytes as for 2 KiB, and every further probe would be another round trip
    on every FITS file we are asked to tell apart. User blocks over 2 KiB are rare enough to miss.
    """
    size = transport.object_bytes
    nbytes = min(size, SIGNATURE_OFFSETS[-1] + len(HDF5_SIGNATURE))
    if nbytes < len(HDF5_SIGNATURE):
        return False
    buf = bytearray(nbytes)
    read_with_retries(transport, memoryview(buf), 0, retry, lambda *fault: None)
    return looks_like_hdf5(buf)


def looks_like_hdf5(head: bytes) -> bool:
    """Does the object's first bytes (2056 or more, when it has them) hold an HDF5 signature?"""
    return any(head[o : o + len(HDF5_SIGNATURE)] == HDF5_SIGNATURE for o in SIGNATURE_OFFSETS)


@dataclass(frozen=True)
class H5Layout(ContiguousGeometry):
    """Where one HDF5 dataset's bytes lie in its object and how they are stored."""

    source: str  # object name for messages (presigned query string already redacted)
    dataset: str  # absolute path in the file, e.g. "/0/DATA"
    shape: tuple[int, ...]  # numpy axis order
    dtype: np.dtype  # with the stored byte order, e.g. >f4
    storage: str  # "contiguous" | "chunked" | "compact"
    data_offset: int | None  # contiguous: byte offset of the data; None if never written
    chunks: ChunkIndex | None  # chunked: every written chunk
    filters: tuple[Filter, ...]  # pipeline order (decode in reverse)
    fill_value: np.generic  # what never-written data reads as
    compact_data: bytes | None  # compact: the data, stored order
    attrs: dict = field(default_factory=dict)  # the dataset's attributes, JSON-able
    object_bytes: int = 0
    open_requests: int = 0  # requests that opening and indexing cost
    open_bytes: int = 0  # bytes they read
    kind = "hdf5"
    hdu = None
    header_text = ""
    scaled = False

    @property
    def raw_dtype(self) -> np.dtype:
        return self.dtype

    @property
    def out_dtype(self) -> np.dtype:
        return self.dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize


@contextmanager
def _opened(transport, retry: RetryPolicy):
    """(h5py.File, TransportFile), failures named by file: a transport error as itself (h5py would
    bury it in its own error stack), anything else h5py raises as an Hdf5FormatError."""
    import h5py

    name = transport.display_name
    retry_call(lambda: transport.info, retry, name)
    fileobj = TransportFile(transport, retry=retry)
    try:
        # h5py's first read is this block anyway, so looking for the signature here costs nothing;
        # HDF5 itself would probe every power of two up to the end of a large non-HDF5 object.
        head = fileobj.read(min(fileobj.size, fileobj.block_bytes))
        if fileobj.error is not None:
            raise fileobj.error
        offsets = [0] + [512 << k for k in range(max(0, len(head).bit_length() - 9))]
        if not any(head[o : o + len(HDF5_SIGNATURE)] == HDF5_SIGNATURE for o in offsets):
            raise Hdf5FormatError(f"{name}: not an HDF5 file (no signature {HDF5_SIGNATURE!r} at byte 0 "
                                  f"or 512 * 2**k below {len(head)}; {fileobj.size} bytes)")
        fileobj.seek(0)
        with h5py.File(fileobj, "r") as f:
            fileobj.offset_bytes = f.id.get_create_plist().get_sizes()[0]  # turns on chunk-index readahead
            yield f, fileobj
            if fileobj.error is not None:  # a read failed under h5py: what it returned is not the file
                raise fileobj.error
    except (Hdf5FormatError, TransportError):
        raise
    except Exception as exc:
        if fileobj.error is not None:
            raise fileobj.error from None
        if isinstance(exc, (OSError, RuntimeError)):  # what h5py raises for a damaged file
            raise Hdf5FormatError(f"{name}: h5py cannot read it as HDF5: {exc}") from None
        raise


def _datasets(f) -> dict:
    """Every dataset in the file by absolute path (hard links, each object once)."""
    import h5py

    found = {}

    def take(path, obj):  # returns None: a value would stop visititems
        if isinstance(obj, h5py.Dataset):
            found["/" + path] = obj

    f.visititems(take)
    return found


def _storage(dset) -> str:
    """The dataset's storage layout, by HDF5's H5D_layout_t value (h5py.h5d.COMPACT is 0, ...)."""
    return _LAYOUTS.get(dset.id.get_create_plist().get_layout(), "unknown")


def _filters(dcpl) -> tuple[Filter, ...]:
    out = []
    for i in range(dcpl.get_nfilters()):
        fid, flags, values, name = dcpl.get_filter(i)
        out.append(Filter(int(fid), name.decode("ascii", "replace") if isinstance(name, bytes) else str(name),
                          int(flags), tuple(int(v) for v in values)))
    return tuple(out)


def _dtype_name(dt) -> str:
    """'>f4', '<i2', '|u1'; 'compound' or h5py's name for the rest."""
    import h5py

    if dt.names is not None:
        return "compound"
    if h5py.check_string_dtype(dt) is not None:
        return "string"
    return "variable-length" if h5py.check_vlen_dtype(dt) is not None else dt.str


def _candidates(found: dict) -> list[str]:
    """Datasets ingest would pick by default: 3-D or 4-D, integer or float."""
    return [p for p, d in found.items() if d.ndim in (3, 4) and d.dtype.kind in _NUMERIC_KINDS]


def _choose(f, found: dict, dataset: str | None, name: str):
    """The dataset asked for, or the file's only cube (the CARTA/IDIA /0/DATA among its copies)."""
    import h5py

    listing = "; ".join(f"{p} {d.shape} {_dtype_name(d.dtype)}" for p, d in found.items()) or "none"
    if dataset is not None:
        path = "/" + dataset.strip("/")
        try:
            obj = f.get(path)
        except (KeyError, ValueError):  # a dangling link
            obj = None
        if isinstance(obj, h5py.Dataset):
            return path, obj
        what = "a group, not a dataset" if isinstance(obj, h5py.Group) else "not in the file"
        raise Hdf5FormatError(f"{name}: {dataset!r} is {what}; its datasets: {listing}")
    cubes = _candidates(found)
    if len(cubes) > 1 and "/0/DATA" in cubes:
        cubes = ["/0/DATA"]  # IDIA files also hold swizzled copies and mipmaps of it
    if len(cubes) == 1:
        return cubes[0], found[cubes[0]]
    why = "no 3-D or 4-D numeric dataset" if not cubes else f"{len(cubes)} 3-D/4-D numeric datasets"
    raise Hdf5FormatError(f"{name}: {why}; choose one with dataset=. Its datasets: {listing}")


def _check(dset, where: str) -> None:
    """Refuse what cannot be read as a plain numeric array by Range reads."""
    dt = dset.dtype
    if dt.kind not in _NUMERIC_KINDS or dt.names is not None:
        raise Hdf5FormatError(f"{where}: dtype {_dtype_name(dt)} ({dt}) is not integer or float; "
                              f"ingest reads only those")
    if dset.is_virtual:
        raise Hdf5FormatError(f"{where}: a virtual dataset (its data lives in other datasets or files)")
    if dset.id.get_create_plist().get_external_count() > 0:
        raise Hdf5FormatError(f"{where}: stored in external raw files, not in this object")
    if dset.shape is None or dset.size == 0:
        raise Hdf5FormatError(f"{where}: empty dataset (shape {dset.shape})")
    if not 1 <= dset.ndim <= 4:
        raise Hdf5FormatError(f"{where}: {dset.ndim} axes; ingest reads cubes of 1 to 4 axes")


def _chunk_index(dset, object_bytes: int, where: str) -> ChunkIndex:
    """The chunk index in one chunk_iter pass (a get_chunk_info loop is quadratic in chunks)."""
    n, ndim = dset.id.get_num_chunks(), dset.ndim
    grid = np.empty((n, ndim), np.int64)
    offsets, sizes, masks = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.uint32)
    count = 0

    def take(info):
        nonlocal count
        if count < n:
            grid[count], offsets[count] = info.chunk_offset, info.byte_offset
            sizes[count], masks[count] = info.size, info.filter_mask
        count += 1

    dset.id.chunk_iter(take)
    if count != n:
        raise Hdf5FormatError(f"{where}: chunk index lists {count} chunks, HDF5 counts {n}")
    chunk_shape = tuple(int(c) for c in dset.chunks)
    grid //= np.asarray(chunk_shape, np.int64)
    ends = offsets + sizes
    if n and int(ends.max()) > object_bytes:
        raise Hdf5FormatError(f"{where}: a chunk ends at byte {int(ends.max())} but the object is only "
                              f"{object_bytes} bytes; truncated")
    return ChunkIndex(tuple(dset.shape), chunk_shape, grid, offsets, sizes, masks)


def _jsonable(value):
    """An attribute as plain Python (numbers, strings, lists); anything exotic as its repr."""
    if isinstance(value, np.ndarray) and value.dtype.names is None or isinstance(value, np.generic):
        value = value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


def _attrs(dset) -> dict:
    """The dataset's attributes over its group's, JSON-able; one h5py cannot read is named, not
    fatal. The group's count because CARTA/IDIA's schema keeps a cube's FITS header on the group
    (/0) and the pixels in /0/DATA; the root's do not (a file's own metadata, not a cube's)."""
    out = {}
    holders = [dset.parent, dset] if dset.parent.name != "/" else [dset]
    for holder in holders:
        for key in holder.attrs:
            try:
                out[key] = _jsonable(holder.attrs[key])
            except Exception as exc:  # h5py raises OSError, TypeError... for exotic attribute types
                out[key] = f"<unreadable: {exc}>"
    return out


def read_hdf5_layout(transport, dataset: str | None = None, retry: RetryPolicy = RetryPolicy()) -> H5Layout:
    """Open an HDF5 object by Range reads and describe one dataset: `dataset` (absolute path), or
    the file's only 3-D/4-D integer or float dataset."""
    name = transport.display_name
    with _opened(transport, retry) as (f, fileobj):
        path, dset = _choose(f, _datasets(f), dataset, name)
        where = f"{name} dataset {path}"
        _check(dset, where)
        dcpl, dtype, storage = dset.id.get_create_plist(), dset.dtype, _storage(dset)
        data_offset = chunks = compact = None
        if storage == "chunked":
            chunks = _chunk_index(dset, transport.object_bytes, where)
        elif storage == "compact":  # the data sits in the object header, already in the cache
            compact = np.ascontiguousarray(dset[...], dtype=dtype).tobytes()
        elif storage == "contiguous":
            data_offset = dset.id.get_offset()  # None: never written, all fill value
            end = (data_offset or 0) + dtype.itemsize * math.prod(dset.shape)
            if data_offset is not None and end > transport.object_bytes:
                raise Hdf5FormatError(f"{where}: data ends at byte {end} but the object is only "
                                      f"{transport.object_bytes} bytes; truncated")
        else:
            raise Hdf5FormatError(f"{where}: {storage} storage layout; ingest reads contiguous, chunked or compact")
        fill = np.array(dset.fillvalue if dset.fillvalue is not None else 0, dtype=dtype)[()]
        result = H5Layout(
            source=name, dataset=path, shape=tuple(int(n) for n in dset.shape), dtype=dtype, storage=storage,
            data_offset=None if data_offset is None else int(data_offset), chunks=chunks, filters=_filters(dcpl),
            fill_value=fill, compact_data=compact, attrs=_attrs(dset), object_bytes=transport.object_bytes,
            open_requests=fileobj.requests, open_bytes=fileobj.bytes_read,
        )
    return result


def list_datasets(transport, retry: RetryPolicy = RetryPolicy()) -> list[dict]:
    """Every dataset in the file: path, shape, dtype, storage, chunk shape, filters (for `ingest info`)."""
    with _opened(transport, retry) as (f, _):
        cubes = set(_candidates(found := _datasets(f)))
        return [{"path": path, "shape": None if d.shape is None else list(d.shape), "dtype": _dtype_name(d.dtype),
                 "storage": _storage(d), "chunks": None if d.chunks is None else list(d.chunks),
                 "filters": [{"id": flt.id, "name": flt.name} for flt in _filters(d.id.get_create_plist())],
                 "candidate": path in cubes}
                for path, d in found.items()]
