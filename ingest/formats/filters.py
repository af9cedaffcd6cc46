"""Decode HDF5 chunks outside HDF5: undo a dataset's filter pipeline on a chunk's stored bytes.

HDF5 applies the filters in pipeline order when it writes a chunk; `decode_chunk` undoes them in
REVERSE order, skipping filter i when bit i of the chunk's filter_mask is set (an optional filter
that failed, or a chunk written with `H5Dwrite_chunk`). Decoding runs on executor threads: every
function here is pure (no shared state) and the codecs release the GIL while they work.

Libraries: for each filter the fastest decoder on a chunk, one thread (BENCHMARKS: HDF5):
  deflate   libdeflate via `imagecodecs.deflate_decode` (zlib streams; faster than zlib.decompress),
            `zlib.decompress` when the output size is not known in advance
  zstd      `imagecodecs.zstd_decode` (same speed as numcodecs.Zstd; it takes an output size, so a
            corrupt header can not make it allocate more, and decodes bitshuffle blocks in place)
  blosc     `numcodecs.blosc.decompress` (on par for lz4, faster than imagecodecs' for zstd+bitshuffle)
  lz4       `imagecodecs.lz4h5_decode` (HDF5's framing; numcodecs.LZ4 frames differently)
  bitshuffle `imagecodecs.bitshuffle_decode`, its blocks by `imagecodecs.lz4_decode` / `zstd_decode`
  shuffle   numpy, one strided copy per byte plane (as fast as numcodecs.Shuffle, which holds the GIL)
  fletcher32 `imagecodecs.h5checksum_fletcher32` (HDF5's own H5_checksum_fletcher32 code)
"""
from __future__ import annotations

import math
import zlib

import imagecodecs
import numpy as np
from numcodecs import blosc as _blosc

from ingest.core.chunks import Filter
from ingest.errors import IngestError

SUPPORTED: dict[int, str] = {1: "deflate", 2: "shuffle", 3: "fletcher32", 32001: "blosc",
                             32004: "lz4", 32008: "bitshuffle", 32015: "zstd"}
# Names for the refusal message when the file stores none (registered HDF5 filter ids).
_KNOWN = {4: "szip", 5: "nbit", 6: "scaleoffset", 305: "lzo", 307: "bzip2", 32000: "lzf",
          32013: "zfp", 32016: "fcidecomp", 32017: "sz", 32018: "fcidecomp", 32024: "sz3",
          32026: "blosc2", 32028: "sperr", 32033: "htj2k"}
_BSHUF_CODECS = {0: "none", 2: "lz4", 3: "zstd"}  # bitshuffle cd_values[4], as hdf5plugin writes it


class FilterError(IngestError):
    """A chunk's filter pipeline can not be decoded: an unsupported filter, or a corrupt chunk."""


def _name(f: Filter) -> str:
    return SUPPORTED.get(f.id) or _KNOWN.get(f.id) or f.name.split(";")[0].strip() or "unnamed"


def check_supported(filters, where: str) -> None:
    """Refuse, before any data moves, a pipeline with a filter `decode_chunk` can not undo."""
    bad = []
    for f in filters:
        if f.id not in SUPPORTED:
            why = " (lossy; rewrite the data without it)" if f.id == 6 else ""
            bad.append(f"filter {f.id} ({_name(f)}) is not supported{why}")
        elif f.id == 32008 and len(f.values) > 4 and f.values[4] not in _BSHUF_CODECS:
            bad.append(f"filter 32008 (bitshuffle) with compression {f.values[4]} is not supported "
                       f"(only {', '.join(_BSHUF_CODECS.values())})")
    if bad:
        raise FilterError(f"{where}: {'; '.join(bad)}. ingest decodes: "
                          + ", ".join(f"{i} {n}" for i, n in SUPPORTED.items()))


def _fletcher32(buf: memoryview, f, itemsize, expect, where) -> memoryview:
    """Verify and strip HDF5's Fletcher-32 (H5Zfletcher32.c, H5checksum.c).

    The checksum runs over the preceding bytes as big-endian 16-bit words (an odd last byte is
    the high byte of a final word), two 32-bit sums folded to 16 bits; it is stored after them as
    a little-endian uint32 (sum2 << 16 | sum1). HDF5 also accepts the pre-1.6.3 value, which has
    the two bytes of each 16-bit half swapped; so do we."""
    if len(buf) < 4:
        raise FilterError(f"{where}: fletcher32 chunk of {len(buf)} bytes has no room for its checksum")
    data = buf[:-4]
    stored = int.from_bytes(buf[-4:], "little")
    computed = imagecodecs.h5checksum_fletcher32(data)
    swapped = ((computed & 0x00FF00FF) << 8) | ((computed >> 8) & 0x00FF00FF)
    if stored not in (computed, swapped):
        raise FilterError(f"{where}: fletcher32 checksum mismatch (stored {stored:#010x}, computed "
                          f"{computed:#010x} over {len(data)} bytes): the stored chunk is corrupt")
    return data


def _deflate(buf, f, itemsize, expect, where):
    if expect is None:
        return zlib.decompress(buf)
    return imagecodecs.deflate_decode(buf, out=expect)  # more than `expect` bytes is an error


def _shuffle(buf, f, itemsize, expect, where):
    """Byte unshuffle: plane j (every element's byte j) goes back to byte j of each element."""
    k = int(f.values[0]) if f.values else itemsize
    n = len(buf) // k
    if k <= 1 or n <= 1:
        return buf
    planes = np.frombuffer(buf, np.uint8, count=n * k).reshape(k, n)
    out = np.empty(len(buf), np.uint8)
    grid = out[:n * k].reshape(n, k)
    for j in range(k):  # one strided copy per plane: faster than ascontiguousarray(planes.T)
        grid[:, j] = planes[j]
    out[n * k:] = np.frombuffer(buf, np.uint8, offset=n * k)  # HDF5 leaves trailing bytes as they are
    return out


def _blosc_decode(buf, f, itemsize, expect, where):
    # c-blosc 1 trusts its 16-byte header (uint32 LE nbytes at 4, cbytes at 12) for the input's
    # length: a truncated chunk decodes to garbage, read past its end. Check the header first.
    nbytes, cbytes = (int.from_bytes(buf[4:8], "little"), int.from_bytes(buf[12:16], "little"))
    if len(buf) < 16 or cbytes > len(buf) or (expect is not None and nbytes != expect):
        raise FilterError(f"{where}: blosc chunk of {len(buf)} bytes has a header for {cbytes} bytes "
                          f"decoding to {nbytes} (expected {expect}): truncated or corrupt")
    return _blosc.decompress(buf)


def _zstd_decode(buf, f, itemsize, expect, where):
    return imagecodecs.zstd_decode(buf, out=expect)


def _lz4(buf, f, itemsize, expect, where):
    return imagecodecs.lz4h5_decode(buf, out=expect)


def _bitshuffle(buf, f, itemsize, expect, where):
    """bitshuffle's HDF5 filter (bshuf_h5filter.c); cd_values: (major, minor, elem_size,
    block_size in elements or 0, compression 0 none/2 lz4/3 zstd[, zstd level])."""
    v = f.values
    elem = int(v[2]) if len(v) > 2 and v[2] else itemsize
    comp = int(v[4]) if len(v) > 4 else 0
    if comp == 0:
        return imagecodecs.bitshuffle_decode(buf, itemsize=elem, blocksize=int(v[3]) if len(v) > 3 else 0)
    if len(buf) < 12:
        raise FilterError(f"{where}: bitshuffle chunk of {len(buf)} bytes is shorter than its header")
    total, block_bytes = int.from_bytes(buf[:8], "big"), int.from_bytes(buf[8:12], "big")
    if (expect is not None and total != expect) or total % elem or block_bytes % (8 * elem) or not block_bytes:
        raise FilterError(f"{where}: bitshuffle header says {total} bytes in blocks of {block_bytes} "
                          f"(element size {elem}, expected {expect} bytes): corrupt chunk")
    # Blocks of block_bytes, then one of the rest rounded down to 8 elements, each stored as a
    # big-endian uint32 size and a compressed block; the last (n % 8) elements are stored raw.
    tail = total % (8 * elem)
    sizes = [block_bytes] * ((total - tail) // block_bytes)
    if (total - tail) % block_bytes:
        sizes.append((total - tail) % block_bytes)
    tmp = bytearray(total)
    out, pos, at = memoryview(tmp), 12, 0
    for size in sizes:
        nb = int.from_bytes(buf[pos:pos + 4], "big")
        src = buf[pos + 4:pos + 4 + nb]
        if len(src) != nb:
            raise FilterError(f"{where}: bitshuffle block at byte {pos} runs past the chunk's end")
        got = (imagecodecs.lz4_decode if comp == 2 else imagecodecs.zstd_decode)(src, out=out[at:at + size])
        if len(got) != size:
            raise FilterError(f"{where}: bitshuffle block at byte {pos} decoded to {len(got)} bytes, not {size}")
        pos, at = pos + 4 + nb, at + size
    if len(buf) - pos != tail:
        raise FilterError(f"{where}: bitshuffle chunk has {len(buf) - pos} bytes after its blocks, not {tail}")
    out[at:] = buf[pos:]
    return imagecodecs.bitshuffle_decode(tmp, itemsize=elem, blocksize=block_bytes // elem)


_DECODERS = {1: _deflate, 2: _shuffle, 3: _fletcher32, 32001: _blosc_decode, 32004: _lz4,
             32008: _bitshuffle, 32015: _zstd_decode}


def _bytes(buf) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def decode_chunk(stored, filters: tuple[Filter, ...], filter_mask: int, itemsize: int,
                 chunk_nbytes: int, *, where: str = "stored chunk") -> memoryview:
    """The raw bytes (exactly `chunk_nbytes`) of a chunk whose stored (filtered) bytes are `stored`.

    The result may share memory with `stored` (no filter applied, or only fletcher32); `stored` is
    never modified. `where` names the chunk (file, dataset, offset) in error messages. Raises
    FilterError for an unsupported filter, a failed checksum, or data that does not decode to
    `chunk_nbytes` (a truncated or corrupt object)."""
    active = [i for i in range(len(filters)) if not (filter_mask >> i) & 1]
    check_supported([filters[i] for i in active], where)
    buf = _bytes(stored)
    for k in range(len(active) - 1, -1, -1):
        f = filters[active[k]]
        # Output size of this stage, if the stages still to undo allow knowing it in advance.
        expect = chunk_nbytes
        for g in (filters[i] for i in active[:k]):
            if g.id == 3:
                expect += 4
            elif g.id not in (2, 32008) or (g.id == 32008 and len(g.values) > 4 and g.values[4]):
                expect = None
                break
        try:
            buf = _bytes(_DECODERS[f.id](buf, f, itemsize, expect, where))
        except FilterError:
            raise
        except Exception as e:  # the codecs raise RuntimeError, ValueError, zlib.error, ...
            raise FilterError(f"{where}: filter {f.id} ({_name(f)}) could not decode {len(buf)} bytes "
                              f"({type(e).__name__}: {e}); the stored chunk is truncated or corrupt") from e
        if expect is not None and len(buf) != expect:
            raise FilterError(f"{where}: filter {f.id} ({_name(f)}) decoded to {len(buf)} bytes, expected "
                              f"{expect}; the stored chunk is truncated or corrupt")
    if len(buf) != chunk_nbytes:
        raise FilterError(f"{where}: chunk decoded to {len(buf)} bytes, expected {chunk_nbytes}; "
                          f"the stored chunk is truncated or corrupt")
    return buf


def decode_chunk_part(stored, filters: tuple[Filter, ...], filter_mask: int, dtype: np.dtype,
                      chunk_shape: tuple[int, ...], part: tuple[slice, ...], *, where: str = "stored chunk") -> np.ndarray:
    """The `part` (a slice per axis) of a decoded chunk, as an array of `dtype` (the stored one).

    Why not decode_chunk(...)[part]: when the filter undone last is a byte shuffle over whole
    elements (HDF5's usual pipeline: shuffle, then a compressor), only the part's elements are
    unshuffled. A box that clips a 1x512x512 chunk to 64x64 then costs 1/64 of the unshuffle,
    which otherwise takes twice as long as libdeflate's inflate of the same chunk. The bytes are
    the same: plane j of the shuffled chunk is byte j of every element, in element order."""
    dtype = np.dtype(dtype)
    count = math.prod(chunk_shape)
    active = [i for i in range(len(filters)) if not (filter_mask >> i) & 1]
    first = filters[active[0]] if active else None
    k = (int(first.values[0]) if first.values else dtype.itemsize) if first is not None and first.id == 2 else 0
    if k != dtype.itemsize or k <= 1 or count <= 1:
        raw = decode_chunk(stored, filters, filter_mask, dtype.itemsize, count * dtype.itemsize, where=where)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(chunk_shape)[part]
    # Undo every other filter (the mask bit says "not applied"), then unshuffle the part alone.
    shuffled = decode_chunk(stored, filters, filter_mask | (1 << active[0]), k, count * k, where=where)
    planes = np.frombuffer(shuffled, np.uint8).reshape((k,) + tuple(chunk_shape))[(slice(None),) + tuple(part)]
    out = np.empty(planes.shape[1:] + (k,), np.uint8)
    for j in range(k):
        out[..., j] = planes[j]
    return out.view(dtype)[..., 0]
