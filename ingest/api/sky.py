"""Cut-outs in the sky's coordinates from Python: `cube.cutout(center, radius, spectral=(lo, hi))`.

astropy's own objects in (a SkyCoord, an angular Quantity, two spectral Quantities), the box the
rule of ingest.sky.pixels gives (every pixel whose centre lies in the region), the data read as
any other box is, and a WCS whose pixels keep the world coordinates they had in the cube.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Cutout:
    """A cut-out: its data, its WCS (the cube's, shifted to the box), the box (numpy order,
    half-open) and the axes the cube's edges clipped."""

    data: np.ndarray
    wcs: object  # astropy.wcs.WCS, or None for a cube without one
    box: tuple
    clipped: tuple
    region_text: str


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
    """The cube's WCS for `box`: astropy's WCS slicing moves CRPIX by the box start (FITS order)."""
    if header_wcs is None:
        return None
    return header_wcs[tuple(slice(a, b) for a, b in box)]
