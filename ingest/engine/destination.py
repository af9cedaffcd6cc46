"""Where a plan's bytes land: an array in memory, or a file mapped one request's window at a time.

A plan's needed bytes are a lattice of runs (`core.planner.Lattice`). A destination lays the
same lattice out in its own container, with its own base offset and strides:
- `ArrayDestination`: the compact C-order array `read_subcube` returns (base 0, C strides);
- `FileDestination`: a file. A cut-out (`subcubes`) is the compact layout after its header; a
  `frame` file mirrors the object, so its base and strides are the object's own and every byte
  lands at the offset it has in the object.

The executor asks for one window per request, `[lo, hi)` in container bytes. A file window is
an mmap of just those pages, closed when the request is done: the data goes from the socket
straight into the file's pages, the process holds at most threads x one request of them, and
no page outside the needed runs is touched, so a frame file's holes stay holes.
"""
from __future__ import annotations

import math
import mmap
import os
import zlib
from contextlib import contextmanager

import numpy as np

from ingest.core.lattice import Lattice

_PAGE_BYTES = mmap.ALLOCATIONGRANULARITY  # mmap offsets must be multiples of this


def _unit_spans(counts: tuple[int, ...], strides: tuple[int, ...], run_bytes: int) -> tuple[int, ...]:
    """Bytes from the first to the last byte of one index along each axis (as Lattice.unit_spans)."""
    spans = [run_bytes] * len(counts)
    for j in range(len(counts) - 2, -1, -1):
        spans[j] = (counts[j + 1] - 1) * strides[j + 1] + spans[j + 1]
    return tuple(spans)


class Destination:
    """A lattice of runs laid out at `base + sum(index * strides)` in some container."""

    def __init__(self, lattice: Lattice, base: int, strides: tuple[int, ...]):
        if len(strides) != len(lattice.counts):
            raise ValueError(f"destination strides {strides} do not match the lattice's {len(lattice.counts)} axes")
        self.lattice = lattice
        self.base = base
        self.strides = tuple(strides)
        self.unit_spans = _unit_spans(lattice.counts, self.strides, lattice.run_bytes)

    def offset(self, index: tuple[int, ...]) -> int:
        """Container offset of the run at `index` (a prefix of the lattice's axes; the rest are 0)."""
        return self.base + sum(i * s for i, s in zip(index, self.strides))

    def window(self, lo: int, hi: int):
        """Context manager: a writable uint8 array over container bytes [lo, hi)."""
        raise NotImplementedError


class ArrayDestination(Destination):
    """The compact output array itself (C-contiguous, exactly the selection's bytes)."""

    def __init__(self, array: np.ndarray, lattice: Lattice):
        if not array.flags.c_contiguous or array.nbytes != lattice.needed_bytes:
            raise ValueError("output must be C-contiguous and exactly the selection's size")
        super().__init__(lattice, 0, compact_strides(lattice))
        self._flat = array.reshape(-1).view(np.uint8)

    @contextmanager
    def window(self, lo: int, hi: int):
        yield self._flat[lo:hi]


class FileDestination(Destination):
    """Runs written into an open file (`fd`, opened read-write and already sized), one mapped
    window per request."""

    def __init__(self, fd: int, lattice: Lattice, base: int, strides: tuple[int, ...], *, writable: bool = True):
        super().__init__(lattice, base, strides)
        self.fd = fd
        self.protection = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)

    @contextmanager
    def window(self, lo: int, hi: int):
        start = lo - lo % _PAGE_BYTES
        mapped = mmap.mmap(self.fd, hi - start, mmap.MAP_SHARED, self.protection, offset=start)
        view = np.frombuffer(mapped, dtype=np.uint8, count=hi - lo, offset=lo - start)
        try:
            yield view
        finally:
            del view
            try:
                mapped.close()
            except BufferError:  # an error left an array pointing into it: unmapped when that is freed
                pass


def compact_strides(lattice: Lattice) -> tuple[int, ...]:
    """Strides of the lattice laid out densely in C order (runs back to back)."""
    strides, step = [], lattice.run_bytes
    for count in reversed(lattice.counts):
        strides.append(step)
        step *= count
    return tuple(reversed(strides))


def compact_file(fd: int, lattice: Lattice, data_offset: int, *, writable: bool = True) -> FileDestination:
    """A cut-out file: the selection's bytes in C order from `data_offset` on."""
    return FileDestination(fd, lattice, data_offset, compact_strides(lattice), writable=writable)


def mirror_file(fd: int, lattice: Lattice, *, writable: bool = True) -> FileDestination:
    """A frame file: every byte at the offset it has in the object."""
    return FileDestination(fd, lattice, lattice.base, lattice.strides, writable=writable)


def crc32_of(dest: Destination, slab_bytes: int = 32 << 20) -> str:
    """CRC-32 of the lattice's bytes in C order, read back from `dest` a slab at a time.

    The same region has the same checksum in a frame file and in a cut-out (layout-free), and a
    flipped byte anywhere in it changes the checksum. Memory: one slab (<= slab_bytes) at a time.
    """
    lat = dest.lattice
    m = len(lat.counts)
    inner = [math.prod(lat.counts[j + 1:]) * lat.run_bytes for j in range(m)]
    level = next((j for j in range(m) if inner[j] <= slab_bytes), None)
    crc = 0
    if level is None:  # no outer axes, or single runs bigger than a slab: runs piece by piece
        for index in np.ndindex(*lat.counts):
            lo = dest.offset(index)
            for piece in range(0, lat.run_bytes, slab_bytes):
                with dest.window(lo + piece, lo + min(lat.run_bytes, piece + slab_bytes)) as win:
                    crc = zlib.crc32(win, crc)
        return f"crc32:{crc:08x}"
    group = max(1, slab_bytes // inner[level])
    shape_tail = lat.counts[level + 1:] + (lat.run_bytes,)
    for prefix in np.ndindex(*lat.counts[:level]):
        for first in range(0, lat.counts[level], group):
            units = min(group, lat.counts[level] - first)
            lo = dest.offset(prefix + (first,))
            with dest.window(lo, lo + (units - 1) * dest.strides[level] + dest.unit_spans[level]) as win:
                crc = _crc_of(win, (units,) + shape_tail, dest.strides[level:] + (1,), crc)
    return f"crc32:{crc:08x}"


def _crc_of(win: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], crc: int) -> int:
    """CRC of a strided view of a window, continued from `crc` (its own function so the view dies here)."""
    return zlib.crc32(np.ascontiguousarray(np.ndarray(shape, np.uint8, buffer=win, strides=strides)), crc)


def size_file(fd: int, nbytes: int) -> None:
    """Give a new file its final size without writing it (a sparse file: holes cost no disk)."""
    if os.fstat(fd).st_size != nbytes:
        os.ftruncate(fd, nbytes)
