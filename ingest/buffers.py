"""Large buffers that a read fills once: output arrays, per-thread slots, upload parts.

Why not np.empty: on Linux numpy advises transparent huge pages (MADV_HUGEPAGE) for every
array of 4 MiB or more. Under the kernel's default THP defrag setting ("madvise") a fault in
such a region may stop to compact memory, and in a VM that hands free memory back to its host
(free page reporting, in 2 MiB blocks) it may wait for the host to fetch a whole block back.
So the first touch of a fresh output costs a different amount every time: `python -m
bench.pages` measures it side by side on this machine (BENCHMARKS.md, "First touch"). A read
writes each page once at the network's pace, where huge pages' gain (fewer TLB misses) is
small; 4 KiB pages cost the same every time, so a job's makespan is one that can be predicted.

The rule: a steady cost over a sometimes faster one. Huge pages win only when the kernel has
some at hand; after an idle spell their first touch is slower and varies from run to run, which
4 KiB pages do not (the figures: BENCHMARKS.md, "First touch"). Whoever wants numpy's behaviour
back sets numpy's own switch, NUMPY_MADVISE_HUGEPAGE=1, and these buffers then come from np.empty too.

Arrays smaller than MAPPED_MIN_BYTES come from np.empty as before: they are below numpy's own
huge-page threshold, and a mapping per small array would waste a system call and its rounding.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import mmap
import os

import numpy as np

MAPPED_MIN_BYTES = 4 << 20  # numpy advises huge pages from here up

# Where the platform has no private anonymous mapping with madvise (Windows), np.empty serves.
_CAN_MAP = hasattr(mmap, "MAP_ANONYMOUS") and hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap.mmap, "madvise")
# numpy reads this once, at import; so do these buffers (numpy's "Global state" documents it).
HUGE_PAGES_ASKED = os.environ.get("NUMPY_MADVISE_HUGEPAGE") == "1"


def empty(shape, dtype, *, fresh: bool = False) -> np.ndarray:
    """An uninitialised C-ordered array, like np.empty, whose pages are never huge pages.

    fresh=True maps it whatever its size, so that every page is new to the process and its first
    write pays the kernel's fault and zeroing: what a job's output costs, which a probe must
    measure too (malloc would hand a small read memory an earlier one had already touched)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    small = nbytes == 0 or (nbytes < MAPPED_MIN_BYTES and not fresh)
    if small or not _CAN_MAP or HUGE_PAGES_ASKED:
        return np.empty(shape, dtype)
    # Private and anonymous: plain process memory (a shared anonymous map would be shmem).
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        # Explicit, so that a kernel set to THP "always" does not hand this range huge pages either.
        mapping.madvise(mmap.MADV_NOHUGEPAGE)
    # The array holds the mapping (its .base); the pages go back when the last view is gone.
    return np.frombuffer(mapping, dtype=dtype, count=count).reshape(shape)


def resident_bytes(statm: str = "/proc/self/statm") -> int | None:
    """This process's resident memory now (Linux's statm); None where the system does not say."""
    try:
        with open(statm) as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def return_freed_heap() -> bool:
    """Give the C heap's free pages back to the OS (glibc's malloc_trim; elsewhere, nothing).

    Work that builds and drops many small objects (rank 0's catalogue: astropy's table, the sky
    conversion's arrays, a box per source) leaves the freed memory in the process's heap, where it
    still counts in its RSS; a buffer mapped after it adds to that instead of reusing it. With
    10,000 sources that was 11 MB of rank 0's peak (BENCHMARKS, "Where the 10,000-source cut-outs'
    memory goes"). True where the heap was trimmed."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):  # no C library by that name, or not glibc's
        return False
    trim(0)
    return True
