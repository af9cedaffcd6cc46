"""HDF5 outputs for HDF5 sources beyond one region's file (ingest.formats.h5_cutout writes
that): a virtual dataset that stitches the regions' files back into one cube, and the metadata a
`frame` copy of the source needs.
"""
from __future__ import annotations

import os

import numpy as np

from ingest.atomic import publish, remove_quietly
from ingest.errors import ConfigError
from ingest.formats.h5_cutout import set_attrs

FRAME_METADATA_LIMIT_BYTES = 64 << 20  # beyond this, copying the rest of the file is a staging step of its own


def _owned_cells(regions) -> list[tuple[int, tuple]]:
    """Split the regions' union into boxes each mapped from exactly one region (the first that
    holds it): overlapping regions (halos, s2p_setup's overlaps) map every voxel once."""
    ndim = len(regions[0])
    cuts = [sorted({v for box in regions for v in box[axis]}) for axis in range(ndim)]
    cells = []
    for index in np.ndindex(*(len(c) - 1 for c in cuts)):
        cell = tuple((cuts[axis][i], cuts[axis][i + 1]) for axis, i in enumerate(index))
        owner = next((r for r, box in enumerate(regions)
                      if all(a <= lo and hi <= b for (lo, hi), (a, b) in zip(cell, box))), None)
        if owner is not None:
            cells.append((owner, cell))
    return cells


def write_vds(path, layout, regions, files) -> str:
    """An HDF5 virtual dataset of the source's full shape at the source's dataset path, mapping
    each region's file (relative names: the directory may move); voxels in no region read as the
    source's fill value. Written atomically."""
    import h5py

    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    vlayout = h5py.VirtualLayout(shape=layout.shape, dtype=layout.dtype)
    sources = [h5py.VirtualSource(os.path.relpath(os.path.abspath(f), directory), layout.dataset,
                                  shape=tuple(b - a for a, b in box), dtype=layout.dtype)
               for f, box in zip(files, regions)]
    for owner, cell in _owned_cells([tuple(tuple(b) for b in box) for box in regions]):
        start = regions[owner]
        vlayout[tuple(slice(lo, hi) for lo, hi in cell)] = sources[owner][
            tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(cell, start))]
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w", libver="latest") as f:
            dset = f.create_virtual_dataset(layout.dataset, vlayout, fillvalue=layout.fill_value)
            set_attrs(dset, dict(layout.attrs))
        publish(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    return path


def frame_pieces(layout, read_range, limit_bytes: int = FRAME_METADATA_LIMIT_BYTES) -> tuple:
    """For `--layout frame` of an HDF5 source: every byte of the object outside the dataset's
    data, fetched with `read_range(offset, nbytes)`, so ranks can write their regions in place.
    Only a contiguous dataset has its data as plain bytes at fixed offsets."""
    where = f"{layout.source} dataset {layout.dataset}"
    if layout.storage != "contiguous" or layout.data_offset is None:
        what = {"chunked": "chunked: its bytes are compressed chunks that cannot be written region by region",
                "compact": "compact: its data lives inside the file's metadata"}.get(
            layout.storage, "never written: it has no data bytes to place")
        raise ConfigError(f"layout: frame needs a contiguous dataset; {where} is {what}. Use --layout subcubes")
    start, end = layout.data_offset, layout.data_offset + layout.data_bytes
    outside = start + (layout.object_bytes - end)
    if outside > limit_bytes:
        raise ConfigError(f"layout: frame copies the file's other bytes whole, and {where} leaves {outside:,} bytes "
                          f"outside its data (limit {limit_bytes:,}): that copy would be a staging step of its "
                          f"own. Use --layout subcubes")
    pieces = []
    if start:
        pieces.append((0, read_range(0, start)))
    if end < layout.object_bytes:
        pieces.append((end, read_range(end, layout.object_bytes - end)))
    return tuple(pieces)
