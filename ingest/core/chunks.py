"""Chunked datasets (HDF5), as plain data: the chunk index and the filter pipeline.

Rank 0 reads them once (`ingest.formats.hdf5`) and broadcasts them; the planner
(`core.chunkplan`) and the decoder (`formats.filters`) take them as they are. Arrays, not lists of
objects: a survey cube has hundreds of thousands of chunks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Filter:
    """One stage of an HDF5 filter pipeline, as the dataset creation property list lists it."""

    id: int  # HDF5 filter id: 1 deflate, 2 shuffle, 3 fletcher32, 32015 zstd, ...
    name: str  # the name stored in the file (may be empty)
    flags: int  # H5Z flags (bit 0: optional)
    values: tuple[int, ...]  # the filter's client data (cd_values), e.g. deflate's level


@dataclass(frozen=True, eq=False)
class ChunkIndex:
    """Every chunk that was written, in one pass over the file's chunk index.

    A chunk missing here was never written and reads as the fill value. `grid[i]` is chunk i's
    position in chunk units (its first element divided by the chunk shape), numpy axis order.
    """

    shape: tuple[int, ...]  # the dataset's shape
    chunk_shape: tuple[int, ...]
    grid: np.ndarray  # (n, ndim) int64
    offsets: np.ndarray  # (n,) int64: byte offset of the stored chunk in the object
    sizes: np.ndarray  # (n,) int64: stored (filtered) bytes
    filter_masks: np.ndarray  # (n,) uint32: bit i set = filter i was skipped for this chunk

    def __post_init__(self):
        n = len(self.offsets)
        if self.grid.shape != (n, len(self.shape)) or len(self.sizes) != n or len(self.filter_masks) != n:
            raise ValueError(f"chunk index arrays disagree: grid {self.grid.shape}, {n} offsets, "
                             f"{len(self.sizes)} sizes, {len(self.filter_masks)} masks for shape {self.shape}")

    @property
    def n_chunks(self) -> int:
        return len(self.offsets)

    @property
    def chunks_per_axis(self) -> tuple[int, ...]:
        """Chunks along each axis of the dataset (edge chunks count as whole ones)."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunk_shape))
