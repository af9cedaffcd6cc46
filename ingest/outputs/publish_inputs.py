"""Where a publish finds its regions on disk: a pre-stage directory, a pipeline's per-region files,
or `run --output-dir` cut-outs; each region as a `RegionData` a rank can map without reading it.

- DIR with manifest.json (`prestage`): the regions and boxes the manifest lists. `frame`: every
  region lies in the one full-size file at its place in the cube; `frame-per-rank`: in its rank's
  file; `subcubes`: in its own cut-out.
- The same DIR with `region_files` (e.g. `run1_{index:03d}_mask.fits`): region i's data is that
  file, a cut-out of the region's shape, as SoFiA-2 writes its outputs for `input.region`;
  `{index}` counts from 1 like sofia_NNN.par, `{index0}` from 0.
- DIR of `rankNNNN_x.._y.._z...fits|h5` files (`run --output-dir`): boxes from the names.

Every file is opened through the posix transport and its header read (FITS HDU 0, HDF5 dataset
`dataset`), so its data offset, shape and stored dtype are known before any rank maps it.
"""
from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass

import numpy as np

from ingest.errors import ConfigError
from ingest.formats.reader import read_any_layout
from ingest.outputs import manifest as manifests
from ingest.outputs.subcubes import parse_output_name
from ingest.transports import open_transport

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class RegionData:
    """One region's voxels: its box (halo included; numpy order) and the array that holds them,
    placed at `origin` of the cube; in a local file at `data_offset`, or (path None) in memory."""

    index: int
    box: Box
    origin: tuple[int, ...]
    array_shape: tuple[int, ...]
    dtype: str  # numpy dtype string with byte order, e.g. '>f4'
    path: str | None = None
    data_offset: int = 0

    @property
    def nbytes(self) -> int:
        return math.prod(b - a for a, b in self.box) * np.dtype(self.dtype).itemsize


def open_array(region: RegionData) -> tuple[np.ndarray, mmap.mmap]:
    """A read-only map of the region's file data (no bytes read until a rank sends them) and the
    mapping itself, which the sender tells to drop its pages once sent (they would otherwise count
    in the rank's resident memory until the end)."""
    dtype = np.dtype(region.dtype)
    count = math.prod(region.array_shape)
    start = region.data_offset // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
    fd = os.open(region.path, os.O_RDONLY)
    try:
        mapping = mmap.mmap(fd, region.data_offset - start + count * dtype.itemsize, prot=mmap.PROT_READ,
                            offset=start)
    finally:
        os.close(fd)
    array = np.frombuffer(mapping, dtype, count=count, offset=region.data_offset - start)
    return array.reshape(region.array_shape), mapping


def file_layout(path: str, hdu: int = 0, dataset: str | None = None):
    """The layout of a local FITS or HDF5 file (header read through the posix transport)."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such file (a region's data or a header source)")
    with open_transport(path, "posix") as transport:
        return read_any_layout(transport, hdu=hdu, dataset=dataset)


def _region_file(index: int, box: Box, path: str, origin, array_shape, dataset: str | None) -> RegionData:
    layout = file_layout(path, 0, dataset)  # cut-outs, frames and pipeline outputs keep their data in HDU 0
    where = f"region {index} ({path})"
    if layout.storage != "contiguous" or layout.data_offset is None:
        raise ConfigError(f"{where}: its data is {layout.storage}, not one contiguous run; publish maps a region's "
                          f"file in place (write it contiguous, as h5py does without chunks=)")
    if tuple(layout.shape) != tuple(array_shape):
        raise ConfigError(f"{where}: holds an array of shape {tuple(layout.shape)} (numpy order) where the region "
                          f"needs {tuple(array_shape)}")
    if layout.data_offset + layout.data_bytes > os.path.getsize(path):
        raise ConfigError(f"{where}: is {os.path.getsize(path)} bytes, shorter than its data "
                          f"({layout.data_offset} + {layout.data_bytes}); the file is truncated")
    return RegionData(index, box, tuple(origin), tuple(array_shape), layout.raw_dtype.str, path, layout.data_offset)


def _locate(directory: str, path: str) -> str:
    """A manifest's file path from here: as written (absolute, or relative to where the pre-stage
    ran), else its tail under the directory (a pre-stage run elsewhere with a relative --output-dir)."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    parts = os.path.normpath(path).split(os.sep)
    for k in range(1, len(parts)):
        candidate = os.path.join(directory, *parts[k:])
        if os.path.exists(candidate):
            return candidate
    return path  # missing: file_layout names it


def _from_manifest(directory: str, manifest: dict, region_files: str | None, dataset: str | None):
    regions, header_source = [], None
    kind = manifest["layout"]
    for record in manifest["regions"]:
        index = record["index"]
        box = tuple(tuple(pair) for pair in record["box"])
        extents = tuple(b - a for a, b in box)
        start = tuple(a for a, _ in box)
        if region_files is not None:
            try:
                name = region_files.format(index=index + 1, index0=index)
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"region_files: {region_files!r} is not a pattern with {{index}} or {{index0}} "
                                  f"({exc})") from None
            path = name if os.path.isabs(name) else os.path.join(directory, name)
            regions.append(_region_file(index, box, path, start, extents, dataset))
            continue
        if record.get("status") != manifests.DONE:
            raise ConfigError(f"{manifests.path_in(directory)}: region {index} is {record.get('status')!r}, not done; "
                              f"finish the pre-stage (run it again) before publishing it")
        path = _locate(directory, record["files"]["data"])
        if kind == "subcubes":
            regions.append(_region_file(index, box, path, start, extents, dataset))
        else:  # frame, frame-per-rank: the full cube at its own offsets, holes where no region was staged
            layout = file_layout(path, 0, dataset)
            regions.append(_region_file(index, box, path, (0,) * len(box), tuple(layout.shape), dataset))
            header_source = header_source or path  # the source's header, verbatim
    if header_source is None:
        name = manifest["cubes"]["data"]["name"]
        if name.startswith("s3://") or os.path.isfile(name):
            header_source = name  # a redacted presigned URL cannot be read again: then --header-from is needed
    return regions, header_source, f"{kind} pre-stage" + (" + region files" if region_files else "")


def _from_run_outputs(directory: str, dataset: str | None):
    regions = []
    for name in sorted(os.listdir(directory)):
        parsed = parse_output_name(name)
        if parsed is None:
            continue
        _, box = parsed
        extents = tuple(b - a for a, b in box)
        regions.append(_region_file(len(regions), box, os.path.join(directory, name), tuple(a for a, _ in box),
                                    extents, dataset))
    return regions


def regions_in(directory: str, region_files: str | None = None,
               dataset: str | None = None) -> tuple[list[RegionData], str | None, str]:
    """(regions, header source or None, what the directory was) for a publish from `directory`."""
    if not os.path.isdir(directory):
        raise ConfigError(f"source: {directory} is not a directory (a pre-stage directory or `run --output-dir` "
                          f"output); from Python, pass the regions in memory instead")
    manifest = manifests.load(directory)
    if manifest is not None:
        return _from_manifest(directory, manifest, region_files, dataset)
    if region_files is not None:
        raise ConfigError(f"region_files: needs the regions' boxes from {manifests.path_in(directory)}, which is "
                          f"not there")
    regions = _from_run_outputs(directory, dataset)
    if not regions:
        raise ConfigError(f"source: {directory} has neither a manifest.json (pre-stage) nor rankNNNN_x.._y.._z..."
                          f"fits/.h5 files (run --output-dir); nothing to publish")
    return regions, None, "run --output-dir cut-outs"
