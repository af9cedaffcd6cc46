"""What a RemoteCube keeps and counts: the memory budget for bytes it read (`cache=`) and
`CubeStats`, its reads, requests and bytes from the cache and from the store."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ingest.units import MiB, format_bytes, parse_bytes

# What a cube keeps of the bytes it read, by default: room for a few hundred cut-outs or a few
# dozen channel maps of a large cube, small beside a notebook's memory (fsspec's BlockCache keeps
# 32 blocks of a file; a cube's reads are larger than its 5 MB blocks).
CACHE_BYTES = 256 * MiB


def cache_budget(cache: int | str | bool | None) -> int:
    """`ingest.open`'s cache= as bytes: True the default, 0/False/None none, else a byte count."""
    if cache is True:
        return CACHE_BYTES
    if cache is None or cache is False:
        return 0
    return parse_bytes(cache, "cache")


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
