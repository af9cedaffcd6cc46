"""Byte ranges of one object kept in memory within a budget (pure): what is held, what a range
lacks, and which bytes go first when the budget is full.

`ingest.open` reads one cube many times, and a notebook's cut-outs overlap: this is the
bookkeeping that lets a read ask the store only for the bytes no earlier read brought (the I/O is
`ingest.transports.cached`). Ranges are half-open `(start, stop)` byte offsets in the object.

The rules:
- A range splits into `pieces`: held bytes (served from memory) and maximal missing runs (asked
  of the store, one request each). Held bytes are never asked for again, so the only split of a
  request is around bytes already held; adjacent held entries do not split a missing run.
- `put` keeps the bytes of a range that are not held yet, in entries of at most `block_bytes`
  (eviction frees memory block by block, not a whole large request at once).
- Least recently used first: a lookup or a put touches every entry it meets; beyond
  `budget_bytes` the entries touched longest ago are dropped. A put larger than the budget keeps
  only its tail (its head would be dropped first anyway), so nothing is copied only to be freed.
"""
from __future__ import annotations

import bisect
from collections import OrderedDict

BLOCK_BYTES = 1 << 20  # largest entry: the unit of eviction (1 MiB)


class RangeCache:
    """Bytes of one object held in memory, at most `budget_bytes`, least recently used out first.

    Not thread-safe: its one user (the caching transport) calls it under a lock."""

    def __init__(self, budget_bytes: int, block_bytes: int = BLOCK_BYTES):
        if budget_bytes < 0 or block_bytes < 1:
            raise ValueError(f"RangeCache: budget_bytes {budget_bytes} must be >= 0 and block_bytes "
                             f"{block_bytes} >= 1")
        self.budget_bytes = budget_bytes
        self.block_bytes = block_bytes
        self.held_bytes = 0
        self._starts: list[int] = []  # sorted starts of the entries (disjoint ranges)
        self._entries: OrderedDict[int, bytes] = OrderedDict()  # start -> bytes, least recent first

    def spans(self) -> list[tuple[int, int]]:
        """The held ranges, sorted, adjacent ones merged."""
        out: list[list[int]] = []
        for start in self._starts:
            stop = start + len(self._entries[start])
            if out and out[-1][1] == start:
                out[-1][1] = stop
            else:
                out.append([start, stop])
        return [(a, b) for a, b in out]

    def pieces(self, start: int, stop: int) -> list[tuple[int, int, memoryview | None]]:
        """[start, stop) as consecutive pieces (a, b, data): `data` the held bytes of [a, b), or
        None for a maximal run the cache lacks. Touches the entries it meets (most recent now)."""
        out: list[tuple[int, int, memoryview | None]] = []
        pos = start
        for entry_start in self._overlapping(start, stop):
            data = self._entries[entry_start]
            self._entries.move_to_end(entry_start)
            a, b = max(pos, entry_start), min(stop, entry_start + len(data))
            if a > pos:
                out.append((pos, a, None))
            out.append((a, b, memoryview(data)[a - entry_start : b - entry_start]))
            pos = b
        if pos < stop:
            out.append((pos, stop, None))
        return out

    def missing(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The maximal runs of [start, stop) not held, in order (touches nothing)."""
        runs, pos = [], start
        for entry_start in self._overlapping(start, stop):
            if entry_start > pos:
                runs.append((pos, entry_start))
            pos = max(pos, entry_start + len(self._entries[entry_start]))
        if pos < stop:
            runs.append((pos, stop))
        return runs

    def put(self, start: int, data) -> None:
        """Keep the bytes `data` (a bytes-like object) found at `start`: the parts not held yet,
        copied; touch the held entries the range meets; then drop the least recent beyond the
        budget."""
        view = memoryview(data).cast("B")
        stop = start + len(view)
        if len(view) > self.budget_bytes:  # only the tail could stay
            cut = len(view) - self.budget_bytes
            start, view = start + cut, view[cut:]
        for entry_start in self._overlapping(start, stop):
            self._entries.move_to_end(entry_start)
        for a, b in self.missing(start, stop):
            for lo in range(a, b, self.block_bytes):
                hi = min(b, lo + self.block_bytes)
                self._insert(lo, bytes(view[lo - start : hi - start]))
        self._evict()

    def clear(self) -> None:
        """Drop everything."""
        self._starts.clear()
        self._entries.clear()
        self.held_bytes = 0

    def _overlapping(self, start: int, stop: int) -> list[int]:
        """Starts of the entries that meet [start, stop), in offset order."""
        starts = self._starts
        i = bisect.bisect_right(starts, start) - 1
        if i < 0 or starts[i] + len(self._entries[starts[i]]) <= start:
            i += 1
        j = bisect.bisect_left(starts, stop, lo=max(i, 0))
        return starts[i:j]

    def _insert(self, start: int, data: bytes) -> None:
        bisect.insort(self._starts, start)
        self._entries[start] = data
        self.held_bytes += len(data)

    def _evict(self) -> None:
        while self.held_bytes > self.budget_bytes:
            start, data = self._entries.popitem(last=False)
            del self._starts[bisect.bisect_left(self._starts, start)]
            self.held_bytes -= len(data)
