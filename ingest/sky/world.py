"""A job's world region, as the command line and the Python API spell it, to one pixel box.

`run`, `prestage`, `plan`, `info`, `read_subcube` and `ingest.open` all come here, so a sky
region means the same box everywhere (the rule: ingest.sky.pixels).
"""
from __future__ import annotations

from ingest.errors import RegionError
from ingest.sky.footprint import where_the_cube_is
from ingest.sky.header import wcs_header
from ingest.sky.pixels import WorldBox, world_box
from ingest.sky.regions import SkyCircle, SpectralRange, parse_band, parse_channels, parse_pos


def has_world(pos=None, band=None, channels=None) -> bool:
    """Is any world (or channel) limit given?"""
    return any(v is not None for v in (pos, band, channels))


def world_region_box(layout, *, pos=None, band=None, channels=None, frame: str = "icrs",
                     convention: str = "radio", rest=None) -> WorldBox:
    """The box of `layout`'s cube that a sky region, a spectral range and/or a channel range
    select. Each may be text (SODA's syntax or the readable one) or an already parsed region."""
    if isinstance(pos, str):
        pos = parse_pos(pos, frame=frame)
    if isinstance(band, str):
        band = parse_band(band, convention=convention, rest=rest)
    if isinstance(channels, str):
        channels = parse_channels(channels)
    header, shape = wcs_header(layout), tuple(layout.shape)
    try:
        return world_box(header, shape, pos=pos, band=band, channels=channels)
    except RegionError as exc:  # off the cube, say: the message says where the cube is (ingest.sky.footprint)
        raise RegionError(f"{exc}{where_the_cube_is(header, shape, band)}") from None


def config_world_box(cfg, layout) -> WorldBox | None:
    """The world box a RunConfig's pos, band and channels select, or None when none is given."""
    if not has_world(cfg.pos, cfg.band, cfg.channels):
        return None
    return world_region_box(layout, pos=cfg.pos, band=cfg.band, channels=cfg.channels, frame=cfg.frame,
                            convention=cfg.velocity_convention, rest=cfg.rest_frequency)


def sky_circle(center, radius) -> SkyCircle:
    """An astropy SkyCoord and an angular Quantity as a SkyCircle (SkyCircle.around)."""
    return SkyCircle.around(center, radius)


def spectral_range(lo, hi, convention: str = "radio", rest=None) -> SpectralRange:
    """Two astropy Quantities (frequency, vacuum wavelength or velocity) as a SpectralRange;
    `rest`: a frequency for velocities (default: the header's RESTFRQ). SpectralRange.between."""
    return SpectralRange.between(lo, hi, convention=convention, rest=rest)
