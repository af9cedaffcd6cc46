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

import mmap
import os
from contextlib import contextmanager

import numpy as np

from ingest.core.planner import Lattice

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

    def __init__(self, fd: int, lattice: Lattice, base: int, strides: tuple[int, ...]):
        super().__init__(lattice, base, strides)
        self.fd = fd

    @contextmanager
    def window(self, lo: int, hi: int):
        start = lo - lo % _PAGE_BYTES
        mapped = mmap.mmap(self.fd, hi - start, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
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


def compact_file(fd: int, lattice: Lattice, data_offset: int) -> FileDestination:
    """A cut-out file: the selection's bytes in C order from `data_offset` on."""
    return FileDestination(fd, lattice, data_offset, compact_strides(lattice))


def mirror_file(fd: int, lattice: Lattice) -> FileDestination:
    """A frame file: every byte at the offset it has in the object."""
    return FileDestination(fd, lattice, lattice.base, lattice.strides)


def size_file(fd: int, nbytes: int) -> None:
    """Give a new file its final size without writing it (a sparse file: holes cost no disk)."""
    if os.fstat(fd).st_size != nbytes:
        os.ftruncate(fd, nbytes)
