"""World-coordinate regions to pixel boxes, with the cube's header: the one rule and its API.

The rule: **every pixel whose centre lies in the region is in the box, and the box is the
smallest one holding those pixels.** Boxes are in numpy order, 0-based and half-open,
`((start, stop), ...)` over ALL axes of the cube; an axis the request does not constrain (a
Stokes axis, the spectral axis of a sky-only request) is kept whole.

- A pixel centre is in a sky region when its direction (the WCS at that centre, in the cube's
  frame: RADESYS/EQUINOX, or Galactic for GLON/GLAT) carried into the region's frame passes
  the region's own test: great-circle distance for a circle, longitude and latitude in the
  region's frame for a range (wrapping through 0 when lon_min > lon_max), a spherical
  point-in-polygon test for a polygon (`ingest.sky.sphere`). Where the WCS is undefined (SIN
  beyond the native hemisphere gives NaN) the pixel is in no region.
- A channel is in a band when its centre value, read in the band's kind and unit, lies in
  [lo, hi] (`ingest.sky.spectral`); a ChannelRange is its channels, 0-based and inclusive.
- The box is clipped to the cube. `clipped` names each axis on which the region continues past
  the cube: a pixel centre on the line just beyond an edge of that axis (for the sky plane the
  one-pixel ring round it, corners included) would be in the region.
- A region wholly off the cube (no pixel centre in it), a band on a cube with no spectral axis,
  a sky region on one without celestial axes, a velocity band with no rest frequency, or a frame
  that cannot be converted is a RegionError that names the region and the cube's axes. This is
  pure computation on the header: it happens before any data moves.

`world_boxes` answers many requests at once (a catalogue) without testing the whole sky plane
per region (`ingest.sky.skyplane`); `world_box` is the same for one request, raising instead of
returning the reason.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ingest.errors import ConfigError, RegionError
from ingest.sky.regions import ChannelRange, SkyCircle, SkyPolygon, SkyRange, SpectralRange
from ingest.sky.regions import parse_band, parse_channels, parse_pos
from ingest.sky.skyplane import SkyPlane, sky_boxes
from ingest.sky.spectral import SpectralAxis

_SKY_TYPES = (SkyCircle, SkyRange, SkyPolygon)


@dataclass(frozen=True)
class WorldBox:
    """A request's pixel box: numpy-order half-open (start, stop) per axis, the axes cut by the
    cube's edges, and the request as text (the regions' describe())."""

    box: tuple[tuple[int, int], ...]
    clipped: tuple[str, ...]
    region_text: str

    def as_dict(self) -> dict:
        return {"box": [list(b) for b in self.box], "clipped": list(self.clipped), "region": self.region_text}


class CubeAxes:
    """What a header says about the cube's axes, read once for any number of requests."""

    def __init__(self, header, shape):
        from astropy.wcs import WCS

        self.shape = tuple(int(n) for n in shape)
        ndim = len(self.shape)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # wcslib's notes on the cards it normalised
                wcs = WCS(header)
        except Exception as exc:  # noqa: BLE001 - astropy's many reasons; the message carries it
            raise RegionError(f"cannot read the cube's WCS from its header: {exc}") from None
        if wcs.pixel_n_dim != ndim:
            raise RegionError(f"the cube's header describes {wcs.pixel_n_dim} axes but its shape "
                              f"{self.shape} has {ndim}")
        for i in range(ndim):
            naxis = header.get(f"NAXIS{i + 1}")
            if naxis is not None and int(naxis) != self.shape[ndim - 1 - i]:
                raise RegionError(f"the cube's header has NAXIS{i + 1} = {naxis} but its shape "
                                  f"{self.shape} (numpy order) has {self.shape[ndim - 1 - i]} on that axis")
        self.wcs = wcs
        self.ctypes = [str(c) for c in wcs.wcs.ctype]
        lng, lat, spec = wcs.wcs.lng, wcs.wcs.lat, wcs.wcs.spec
        self.lng, self.lat = lng, lat  # both -1 or both axes: wcslib refuses an unmatched celestial axis
        self.spec = spec
        self._check_separable()
        self._plane = self._spectral = None
        self.sky_problem = self.spectral_problem = None

    def describe(self) -> str:
        return f"the cube ({', '.join(c or '?' for c in self.ctypes)}; shape {self.shape})"

    def numpy_axis(self, fits_index: int) -> int:
        return len(self.shape) - 1 - fits_index

    def axis_name(self, fits_index: int) -> str:
        """A celestial axis's name: wcslib accepts its CTYPE only with the name before the first '-'."""
        return self.ctypes[fits_index].split("-")[0].strip().lower()

    def _check_separable(self) -> None:
        """Boxes need the sky plane and the spectral axis to vary independently of each other."""
        matrix = self.wcs.axis_correlation_matrix  # (world, pixel)
        sky = [a for a in (self.lng, self.lat) if a >= 0]
        for group in (sky, [self.spec] if self.spec >= 0 else []):
            others = [a for a in range(len(self.shape)) if a not in group]
            if group and matrix[np.ix_(group, others)].any() | matrix[np.ix_(others, group)].any():
                names = ", ".join(self.ctypes[a] for a in group)
                raise RegionError(f"{self.describe()}: the axes {names} are coupled to others by the "
                                  f"PC/CD matrix; a box needs them separable")

    @property
    def plane(self) -> SkyPlane | None:
        """The sky plane, or None with sky_problem saying why."""
        if self._plane is None and self.sky_problem is None:
            if self.lng < 0:
                self.sky_problem = f"{self.describe()} has no celestial axes"
            else:
                from astropy.wcs.utils import wcs_to_celestial_frame

                sky_wcs = self.wcs.sub([self.lng + 1, self.lat + 1])
                try:
                    frame = wcs_to_celestial_frame(sky_wcs)
                except ValueError as exc:
                    self.sky_problem = f"{self.describe()}: its celestial frame is not one astropy knows ({exc})"
                else:
                    self._plane = SkyPlane(sky_wcs, self.shape[self.numpy_axis(self.lng)],
                                           self.shape[self.numpy_axis(self.lat)], frame)
        return self._plane

    @property
    def spectral(self) -> SpectralAxis | None:
        """The spectral axis, or None with spectral_problem saying why."""
        if self._spectral is None and self.spectral_problem is None:
            if self.spec < 0:
                self.spectral_problem = f"{self.describe()} has no spectral axis"
            else:
                self._spectral = SpectralAxis(self.wcs, self.spec, self.shape[self.numpy_axis(self.spec)])
        return self._spectral


def _as_pos(region):
    region = parse_pos(region) if isinstance(region, str) else region
    if region is not None and not isinstance(region, _SKY_TYPES):
        raise ConfigError(f"sky region {region!r}: expected a SkyCircle, SkyRange or SkyPolygon")
    return region


def _as_band(band):
    if isinstance(band, str):
        return parse_band(band)
    if band is not None and not isinstance(band, (SpectralRange, ChannelRange)):
        raise ConfigError(f"spectral region {band!r}: expected a SpectralRange or ChannelRange")
    return band


def world_boxes(header, shape, regions, bands) -> list[WorldBox | str]:
    """One box per entry of the parallel sequences regions (sky region or None) and bands
    (SpectralRange, ChannelRange or None); an entry that is off the cube or cannot be answered
    gives a str reason (naming the region and the cube's axes) instead of raising. A header
    that cannot be read at all is a RegionError."""
    regions, bands = [_as_pos(r) for r in regions], [_as_band(b) for b in bands]
    if len(regions) != len(bands):
        raise ConfigError(f"world_boxes: {len(regions)} sky regions but {len(bands)} bands; give one of "
                          f"each per entry (None where there is none)")
    axes = CubeAxes(header, shape)
    problems: list[str | None] = [None] * len(regions)
    sky = [i for i, r in enumerate(regions) if r is not None]
    sky_answers = {}
    if sky and axes.plane is None:
        for i in sky:
            problems[i] = f"{regions[i].describe(for_people=True)}: {axes.sky_problem}"
    elif sky:
        plane = axes.plane
        for i, answer in zip(sky, sky_boxes(plane, [regions[i] for i in sky])):
            if answer is None:
                answer = (f"wholly off the cube: no pixel centre of its sky plane ({plane.nx} x {plane.ny} px, "
                          f"{axes.ctypes[axes.lng]}/{axes.ctypes[axes.lat]}) is in the region")
            if isinstance(answer, str):
                problems[i] = f"{regions[i].describe(for_people=True)}: {answer} ({axes.describe()})"
            sky_answers[i] = answer
    spectral = [i for i, b in enumerate(bands) if b is not None]
    spectral_answers = {}
    if spectral and axes.spectral is None:
        for i in spectral:
            problems[i] = problems[i] or f"{bands[i].describe(for_people=True)}: {axes.spectral_problem}"
    elif spectral:
        axis = axes.spectral
        for i, answer in zip(spectral, axis.channels([bands[i] for i in spectral])):
            if answer is None:
                answer = f"wholly off the cube: no channel of its spectral axis ({axis.describe()}) is in it"
            if isinstance(answer, str):
                problems[i] = problems[i] or f"{bands[i].describe(for_people=True)}: {answer} ({axes.describe()})"
            spectral_answers[i] = answer
    return [problems[i] or _assemble(axes, regions[i], bands[i], sky_answers.get(i), spectral_answers.get(i))
            for i in range(len(regions))]


def _assemble(axes: CubeAxes, region, band, sky, spectral) -> WorldBox:
    box = [[0, n] for n in axes.shape]
    clipped = []
    if sky is not None:
        x0, x1, y0, y1, clip_x, clip_y = sky
        box[axes.numpy_axis(axes.lng)] = [x0, x1]
        box[axes.numpy_axis(axes.lat)] = [y0, y1]
        clipped += [axes.axis_name(a) for a, c in ((axes.lng, clip_x), (axes.lat, clip_y)) if c]
    if spectral is not None:
        start, stop, clip = spectral
        box[axes.numpy_axis(axes.spec)] = [start, stop]
        clipped += ["spectral"] if clip else []
    text = "; ".join(r.describe() for r in (region, band) if r is not None) or "whole cube"
    return WorldBox(tuple((int(a), int(b)) for a, b in box), tuple(clipped), text)


def world_box(header, shape, pos=None, band=None, channels=None) -> WorldBox:
    """The box of one request: a sky region (pos), a band or channels (not both), or any of
    them as text (parse_pos, parse_band, parse_channels). RegionError when it cannot be cut."""
    if band is not None and channels is not None:
        raise RegionError(f"give a band or channels, not both (band {band!r}, channels {channels!r})")
    spectral = parse_channels(channels) if isinstance(channels, str) else channels
    answer = world_boxes(header, shape, [pos], [band if band is not None else spectral])[0]
    if isinstance(answer, str):
        raise RegionError(answer)
    return answer
