"""What a RemoteCube's axes mean: its WCS, and the labelled, lazy xarray view over dask.

FITS cubes carry a WCS in their header; HDF5 cubes in the CARTA/IDIA schema carry the same
keys as dataset attributes, so both get one. A dimension is named after its axis type (ra,
dec, freq, vrad, stokes...). Only axes whose world coordinate depends on that pixel axis alone
(spectral, Stokes) get coordinate values: RA and Dec vary together across the sky plane, and
a 1-D stand-in for them would be wrong away from the reference pixel (use `cube.wcs`).

dask and xarray are optional (the `dask` extra): imported here, when first asked for.
"""
from __future__ import annotations

import warnings

import numpy as np

_DASK_HINT = "pip install ingest[dask]"


def _fits_like_header(cube):
    """The FITS header, or an HDF5 dataset's attributes as one when they hold CTYPEn keys."""
    from astropy.io import fits

    if cube.layout.kind == "fits":
        return cube.header
    attrs = cube.layout.attrs
    if not any(key.upper().startswith("CTYPE") for key in attrs):
        return None
    header = fits.Header()
    for key, value in attrs.items():
        if len(key) <= 8 and isinstance(value, (bool, int, float, str)):
            try:
                header[key.upper()] = value
            except (ValueError, KeyError):  # not a valid FITS card: not WCS either
                continue
    return header


def full_wcs(cube):
    """astropy.wcs.WCS of every axis the header describes (FITS axis order), or None."""
    header = _fits_like_header(cube)
    if header is None:
        return None
    from astropy.wcs import WCS, FITSFixedWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FITSFixedWarning)  # wcslib's notes on what it normalised
        return WCS(header)


def cube_wcs(cube, celestial_spectral: bool = True):
    """The cube's WCS; with celestial_spectral, just its celestial and spectral axes (a Stokes
    axis dropped) when it has any."""
    wcs = full_wcs(cube)
    if wcs is None or not celestial_spectral or not (wcs.has_celestial or wcs.wcs.spec >= 0):
        return wcs
    return wcs.sub(["celestial", "spectral"])


def _axis_name(ctype: str) -> str | None:
    """RA---SIN -> ra, FREQ -> freq, VRAD -> vrad, STOKES -> stokes; '' -> None."""
    return ctype.split("-")[0].strip().lower() or None


def _hdf5_dim_labels(cube) -> list[str] | None:
    """h5py's dimension labels (dset.dims[i].label), when every axis has a distinct one."""
    labels = cube.layout.attrs.get("DIMENSION_LABELS")
    if isinstance(labels, list) and len(labels) == cube.ndim and all(labels) and len(set(labels)) == cube.ndim:
        return [str(label) for label in labels]
    return None


def dims_and_coords(cube) -> tuple[tuple[str, ...], dict]:
    """(dims in numpy order, {dim: (dim, values, attrs)} for the separable WCS axes)."""
    ndim = cube.ndim
    names: list[str | None] = [None] * ndim
    coords = {}
    wcs = full_wcs(cube)
    if wcs is not None:
        pixel_axes = min(wcs.pixel_n_dim, ndim)
        correlated = wcs.axis_correlation_matrix  # world x pixel
        for pixel in range(pixel_axes):
            axis = ndim - 1 - pixel  # FITS axis 1 is the last numpy axis
            names[axis] = _axis_name(wcs.wcs.ctype[pixel])
            worlds = np.flatnonzero(correlated[:, pixel])
            if len(worlds) == 1 and correlated[worlds[0]].sum() == 1 and names[axis]:
                coords[axis] = _separable_values(wcs, pixel, worlds[0], cube.shape[axis])
    elif cube.layout.kind != "fits":
        names = _hdf5_dim_labels(cube) or names
    if len({n for n in names if n}) != sum(1 for n in names if n):  # two axes of one type: no guessing
        names = [None] * ndim
    dims = tuple(name or f"dim_{axis}" for axis, name in enumerate(names))
    return dims, {dims[axis]: (dims[axis], values, attrs) for axis, (values, attrs) in coords.items() if names[axis]}


def _separable_values(wcs, pixel: int, world: int, n: int):
    """World values of one axis along its pixels (the others at pixel 0: they do not matter)."""
    pixels = [np.zeros(n) for _ in range(wcs.pixel_n_dim)]
    pixels[pixel] = np.arange(n, dtype=float)
    values = wcs.pixel_to_world_values(*pixels)
    values = values[world] if wcs.world_n_dim > 1 else values
    return np.asarray(values), {"units": wcs.world_axis_units[world], "ctype": wcs.wcs.ctype[pixel]}


def to_xarray(cube, chunks="auto", name: str | None = None):
    """A lazy xarray.DataArray over `dask.array.from_array(cube, chunks)`: every dask task reads
    its chunk with one plan; nothing is read until computed."""
    try:
        import dask.array as da
        import xarray as xr
    except ImportError as exc:
        raise ImportError(f"RemoteCube.to_xarray needs dask and xarray ({exc.name} is not installed): "
                          f"{_DASK_HINT}") from exc
    # fancy=False: dask never hands the cube a list index (RemoteCube does basic indexing only);
    # the meta is given so dask need not slice the cube to learn it.
    data = da.from_array(cube, chunks=chunks, fancy=False, meta=np.empty((0,) * cube.ndim, dtype=cube.dtype))
    dims, coords = dims_and_coords(cube)
    attrs = {"source": cube.source}
    if cube.layout.kind == "fits":
        unit = cube.header.get("BUNIT")
        if unit:
            attrs["units"] = unit
    else:
        attrs.update(cube.layout.attrs)
    array = xr.DataArray(data, dims=dims, coords=coords, attrs=attrs)
    array.name = name  # else xarray names it after the dask graph key
    return array
