"""Cut-outs in the sky's coordinates from Python: `cube.cutout(center, radius, spectral=(lo, hi))`.

astropy's own objects in (a SkyCoord, an angular Quantity, two spectral Quantities), the box the
rule of ingest.sky.pixels gives (every pixel whose centre lies in the region), the data read as
any other box is, and a WCS whose pixels keep the world coordinates they had in the cube. A
Cutout is also the file the command line writes for that box: of a FITS cube, a FITS file (header,
BEAMS table, writeto) and spectral-cube's cube of it; of an HDF5 cube, an .h5 file (writeto).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Cutout:
    """A cut-out: its data, its WCS (the cube's every axis, shifted to the box), the box (numpy
    order, half-open), the axes the cube's edges clipped, and the region as text.

    It is also the file `python -m ingest run --pos ... --output-dir d` writes for the same box:
    `header` (every card of the cube, CRPIXn shifted, CASAMBM and ingest's HISTORY line, as
    ingest.formats.fits_cutout makes them for the command line), `beams` (the BEAMS table cut to
    the box), `writeto(path)` and `to_hdulist()` (those bytes), `to_spectral_cube()`.
    What is written is the stored values read from the cube (BITPIX, BSCALE and BZERO kept); to
    write other values, change the data of `to_hdulist()` and write that. Of an HDF5 cube, the
    file is HDF5 and `writeto(path)` is all it offers (ingest.formats.h5_cutout: the dataset at
    the cube's path, its attributes with CRPIXn shifted); `header` and `beams` are None and
    `to_hdulist()`/`to_spectral_cube()` are refused, as there is no FITS file to give."""

    data: np.ndarray
    wcs: object  # astropy.wcs.WCS of every axis (as cube.wcs), or None for a cube without one
    box: tuple
    clipped: tuple
    region_text: str
    layout: object = field(default=None, repr=False)  # the cube's layout: its header, beams, source
    raw: np.ndarray | None = field(default=None, repr=False)  # stored values as read; None: `data`

    @property
    def header(self):
        """The cut-out's FITS header (astropy.io.fits.Header), as the command line writes it; None
        for an HDF5 cube."""
        layout = self._fits("header", required=False)
        if layout is None:
            return None
        from ingest.formats.fits_cutout import subcube_header

        return subcube_header(layout, self.box)

    @property
    def beams(self):
        """The cube's BEAMS table cut to the box (ingest.formats.beams.BeamTable: rows, header,
        to_hdu()), CHAN and POL renumbered from 0; None when the cube has none."""
        layout = self._fits("beams", required=False)
        return None if layout is None else layout.box_beams(self.box)

    def writeto(self, path, overwrite: bool = False) -> None:
        """Write the cut-out to `path` as one file, the bytes `python -m ingest run --pos ...
        --output-dir` writes for the same box: of a FITS cube a FITS file (header, data, then the
        cut BEAMS table), of an HDF5 cube an HDF5 file (the region's dataset and attributes).
        Atomic (a temporary name beside `path`, then a rename). An existing file is an OSError
        unless `overwrite` (as astropy's writeto)."""
        import os

        from ingest.atomic import atomic_write

        path = os.fspath(path)
        if self.layout is not None and self.layout.kind == "hdf5":
            self._write_h5(path, overwrite)
            return
        head, data, tail = self._pieces("writeto", path)
        if not overwrite and os.path.exists(path):
            raise OSError(f"{path}: the file exists; pass overwrite=True to replace it")
        from ingest.formats.fits_cutout import write_fits_cutout

        directory, name = os.path.split(path)
        with atomic_write(path, os.path.join(directory, f".{name}.tmp-{os.getpid()}")) as fh:
            write_fits_cutout(fh, head, data, tail)

    def to_hdulist(self):
        """The cut-out as an astropy.io.fits.HDUList (the primary HDU, then BEAMS when the cube has
        one), read from the same bytes `writeto` writes."""
        import io

        from astropy.io import fits

        from ingest.formats.fits_cutout import write_fits_cutout

        buffer = io.BytesIO()
        write_fits_cutout(buffer, *self._pieces("to_hdulist"))
        return fits.HDUList.fromstring(buffer.getvalue())

    def to_spectral_cube(self):
        """The cut-out as spectral-cube reads its file (`SpectralCube.read`): with a BEAMS table a
        VaryingResolutionSpectralCube (a radio_beam Beam per channel), with BMAJ/BMIN a SpectralCube
        with that beam; a cube with a Stokes axis gives its I component, as spectral-cube does
        (StokesSpectralCube.read(cut.to_hdulist()) keeps every one). Needs the spectral extra:
        pip install ingest[spectral]."""
        try:
            from spectral_cube import SpectralCube
        except ImportError as exc:
            raise ImportError(f"Cutout.to_spectral_cube needs spectral-cube ({exc.name} is not installed): "
                              f"pip install ingest[spectral]") from exc
        return SpectralCube.read(self.to_hdulist())

    def _write_h5(self, path: str, overwrite: bool) -> None:
        """An HDF5 cube's cut-out as `run --output-dir` writes it (ingest.outputs.subcubes'
        write_cutout: the same source label, no extra attributes), atomically."""
        import os

        from ingest.formats.fits_cutout import source_label
        from ingest.formats.h5_cutout import write_h5_subcube

        if not overwrite and os.path.exists(path):
            raise OSError(f"{path}: the file exists; pass overwrite=True to replace it")
        raw = self.data if self.raw is None else self.raw
        write_h5_subcube(path, self.layout, self.box, raw, source_label=source_label(self.layout))

    def _fits(self, what: str, required: bool = True):
        """The cube's FITS layout; None (or a ConfigError naming `what`, when required) otherwise."""
        layout = self.layout
        if layout is not None and layout.kind == "fits":
            return layout
        if not required:
            return None
        from ingest.errors import ConfigError

        kind = "was made without its cube" if layout is None else "is of an HDF5 cube"
        raise ConfigError(f"Cutout.{what}: a FITS cut-out needs a FITS cube; this cut-out {kind} "
                          f"(Cutout.writeto, like python -m ingest run --pos ... --output-dir, writes an HDF5 "
                          f"cube's cut-out as HDF5)")

    def _pieces(self, what: str, path: str | None = None):
        """(head, data, tail): the cut-out's FITS bytes as ingest.formats.fits_cutout makes them."""
        layout = self._fits(what)
        from ingest.formats.fits_cutout import cutout_data, cutout_parts

        head, tail = cutout_parts(layout, self.box)
        return head, cutout_data(path or f"Cutout.{what}", self.data if self.raw is None else self.raw, layout), tail


def world_box_of(layout, pos=None, band=None, channels=None, *, frame="icrs", convention="radio", rest=None):
    """The WorldBox of `layout`'s cube for a region given as astropy objects, parsed regions or text.
    pos: a SkyCircle/SkyRange/SkyPolygon, text, or a (SkyCoord, radius Quantity) pair; band: a
    SpectralRange, text, or a (lo, hi) pair of Quantities; channels: (lo, hi) inclusive or text."""
    from ingest.sky.regions import ChannelRange
    from ingest.sky.world import sky_circle, spectral_range, world_region_box

    if isinstance(pos, tuple) and len(pos) == 2:
        pos = sky_circle(*pos)
    if isinstance(band, tuple) and len(band) == 2:
        band = spectral_range(*band, convention=convention, rest=rest)
    if isinstance(channels, tuple) and len(channels) == 2:
        channels = ChannelRange(*channels)
    return world_region_box(layout, pos=pos, band=band, channels=channels, frame=frame, convention=convention,
                            rest=rest)


def shifted_wcs(header_wcs, box):
    """The cube's WCS for `box`: astropy's WCS slicing moves CRPIX by the box start (FITS order).
    A WCS of fewer axes than the box (an HDF5 cube's attributes may describe the trailing ones
    only) is sliced along its own axes, the box's last ones."""
    if header_wcs is None:
        return None
    return header_wcs[tuple(slice(a, b) for a, b in box[max(0, len(box) - header_wcs.naxis):])]


def one_position(center, radius, pos):
    """`cube.cutout`'s sky region: (center, radius) for a SkyCoord of one position, else `pos`. An
    array SkyCoord or a list of regions is a TypeError that points at `cube.cutouts`."""
    if center is not None:
        if radius is None:
            raise TypeError("cutout: give radius with center (an angular Quantity, e.g. 2 * u.arcmin)")
        if not getattr(center, "isscalar", True):
            raise TypeError(f"cutout: center holds {center.size} positions; cube.cutouts(center, radius, ...) "
                            f"cuts them all from one planned read and returns a list of cut-outs")
        return center, radius
    if isinstance(pos, list):
        raise TypeError(f"cutout: pos is a list of {len(pos)} regions; cube.cutouts(pos=[...]) cuts them all "
                        f"from one planned read and returns a list of cut-outs")
    return pos


def many_positions(center, radius, pos) -> list:
    """`cube.cutouts`' sky regions, in order: one (SkyCoord, radius) per position of `center` (any
    shape, flattened in C order; `radius` one angle for all or one per position), or the regions
    of the list `pos` (text, SkyRange, SkyPolygon or (SkyCoord, radius) pairs)."""
    if center is not None:
        if pos is not None:
            raise TypeError("cutouts: give center (a SkyCoord) and radius, or pos (a list of regions), not both")
        if radius is None:
            raise TypeError("cutouts: give radius with center (an angular Quantity, one for all or one per position)")
        coords = [center] if center.isscalar else list(center.ravel())
        radii = [radius] * len(coords) if getattr(radius, "isscalar", True) else list(radius.ravel())
        if len(radii) != len(coords):
            raise ValueError(f"cutouts: radius has {len(radii)} values for {len(coords)} positions; "
                             f"give one angle for all or one per position")
        return list(zip(coords, radii))
    if not isinstance(pos, list):
        raise TypeError(f"cutouts: give center (a SkyCoord of N positions) and radius, or pos as a list of regions "
                        f"(got pos={pos!r})")
    return list(pos)


def per_position(value, n: int, name: str) -> list:
    """`value` for each of n cut-outs: a list is one value per cut-out (its length n), else the
    same value for all."""
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"cutouts: {name} is a list of {len(value)} for {n} positions; give one for all "
                         f"(a tuple) or a list of one per position")
    return value
