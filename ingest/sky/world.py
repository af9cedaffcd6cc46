"""A job's world region, as the command line and the Python API spell it, to one pixel box.

`run`, `prestage`, `plan`, `info`, `read_subcube` and `ingest.open` all come here, so a sky
region means the same box everywhere (the rule: ingest.sky.pixels).
"""
from __future__ import annotations

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
    return world_box(wcs_header(layout), tuple(layout.shape), pos=pos, band=band, channels=channels)


def config_world_box(cfg, layout) -> WorldBox | None:
    """The world box a RunConfig's pos, band and channels select, or None when none is given."""
    if not has_world(cfg.pos, cfg.band, cfg.channels):
        return None
    return world_region_box(layout, pos=cfg.pos, band=cfg.band, channels=cfg.channels, frame=cfg.frame,
                            convention=cfg.velocity_convention, rest=cfg.rest_frequency)


def sky_circle(center, radius) -> SkyCircle:
    """An astropy SkyCoord and an angular Quantity as a SkyCircle in the coordinate's own frame
    (ICRS, FK5 or Galactic; FK5 at another equinox is taken to J2000 first)."""
    from astropy import units as u

    frame = center.frame.name
    if frame == "fk5" and center.frame.equinox != center.frame.__class__().equinox:
        from astropy.coordinates import FK5

        center = center.transform_to(FK5())
    if frame == "galactic":
        lon, lat = center.l.deg, center.b.deg
    else:
        lon, lat = center.spherical.lon.deg, center.spherical.lat.deg
    return SkyCircle(float(lon), float(lat), float(u.Quantity(radius).to_value(u.deg)), frame)


def spectral_range(lo, hi, convention: str = "radio", rest=None) -> SpectralRange:
    """Two astropy Quantities (frequency, vacuum wavelength or velocity) as a SpectralRange;
    `rest`: a frequency Quantity or text for velocities (default: the header's RESTFRQ)."""
    from astropy import units as u

    lo, hi = u.Quantity(lo), u.Quantity(hi)
    kinds = {"frequency": u.Hz, "length": u.m, "speed": u.m / u.s}
    kind = next((k for k, unit in kinds.items() if lo.unit.is_equivalent(unit)), None)
    if kind is None:
        raise ValueError(f"spectral range {lo} .. {hi}: expected a frequency, wavelength or velocity")
    unit = kinds[kind]
    rest_hz = None if rest is None else float(u.Quantity(rest).to_value(u.Hz))  # text like "1420.4MHz" too
    name = {"frequency": "frequency", "length": "wavelength", "speed": "velocity"}[kind]
    return SpectralRange(float(lo.to_value(unit)), float(hi.to_value(unit)), unit.to_string(), name,
                         convention if name == "velocity" else None, rest_hz)
