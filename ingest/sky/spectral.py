"""Bands and channel ranges to channels of a cube's spectral axis.

Every channel's centre is computed once per header (channels -1..n: the two beyond the ends
tell whether a band was clipped), in the axis's own kind (FREQ, WAVE, VRAD...), then carried
to the band's kind and unit with astropy's equivalencies: `spectral()` between frequency and
vacuum wavelength, `doppler_radio/optical/relativistic` with a rest frequency for velocities
(the band's own, else RESTFRQ/RESTFREQ or RESTWAV from the header). A channel is in the band
when its centre value lies in [lo, hi]. Comparing in the band's space, never the band in the
axis's, makes a reversed axis (negative CDELT) and an order-reversing conversion (frequency
axis, wavelength or velocity band) the same case: the channels are found by value, whatever
their order.

A velocity axis (VRAD, VOPT, VELO; ZOPT and BETA as optical and relativistic velocities) read
with a velocity band of its own convention is compared directly, in the band's unit. Any other
pairing goes through frequency: the axis with the header's rest frequency (a velocity axis
without one can only be read directly), the band with its own rest frequency or else the
header's. AWAV (air wavelength) and other types are refused by name.
"""
from __future__ import annotations

import warnings

import astropy.units as u
import numpy as np

from ingest.sky.bands import ChannelRange, SpectralRange

_C_M_S = 299_792_458.0
_VELOCITY_AXES = {"VRAD": "radio", "VOPT": "optical", "VELO": "relativistic", "ZOPT": "optical",
                  "BETA": "relativistic"}
_DEFAULT_UNITS = {"FREQ": "Hz", "WAVE": "m", "WAVN": "1/m", "ENER": "J", "VRAD": "m/s", "VOPT": "m/s",
                  "VELO": "m/s", "ZOPT": "", "BETA": ""}
_DOPPLER = {"radio": u.doppler_radio, "optical": u.doppler_optical, "relativistic": u.doppler_relativistic}
_MASK_CELLS = 1 << 22  # bands x channels compared at once


class SpectralRefusal(Exception):
    """A band that this axis cannot answer (no rest frequency, an axis type without a conversion)."""


class SpectralAxis:
    """The cube's spectral axis: its channel centres and how to read them in a band's terms."""

    def __init__(self, wcs, spec_index: int, n_channels: int):
        sub = wcs.sub([spec_index + 1])
        self.ctype = str(sub.wcs.ctype[0])
        self.code = self.ctype[:4].upper()
        self.n_channels = n_channels
        unit_text = str(sub.wcs.cunit[0]) or _DEFAULT_UNITS.get(self.code, "")
        self.unit = u.Unit(unit_text) if unit_text else u.dimensionless_unscaled
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.values = np.asarray(sub.all_pix2world(np.arange(-1, n_channels + 1, dtype=float), 0)[0], float)
        restfrq, restwav = float(wcs.wcs.restfrq or 0.0), float(wcs.wcs.restwav or 0.0)
        self.rest_hz = restfrq if restfrq > 0 else (_C_M_S / restwav if restwav > 0 else None)
        self._cache: dict[tuple, np.ndarray] = {}

    def describe(self) -> str:
        ends = self.values[1], self.values[-2]
        return f"{self.n_channels} channels of {self.ctype}, {ends[0]:.10g}..{ends[1]:.10g} {self.unit}"

    def _velocity_quantity(self):
        """The axis as velocities (m/s) and its Doppler convention."""
        if self.code == "ZOPT":
            return self.values * _C_M_S * (u.m / u.s), "optical"
        if self.code == "BETA":
            return self.values * _C_M_S * (u.m / u.s), "relativistic"
        return (self.values * self.unit).to(u.m / u.s), _VELOCITY_AXES[self.code]

    def in_band_terms(self, band: SpectralRange) -> np.ndarray:
        """Channel centres -1..n expressed in the band's unit (cached per unit, convention, rest)."""
        key = (band.unit, band.kind, band.convention, band.rest_hz)
        if key not in self._cache:
            self._cache[key] = self._convert(band)
        return self._cache[key]

    def _convert(self, band: SpectralRange) -> np.ndarray:
        target = u.Unit(band.unit)
        if self.code in _VELOCITY_AXES:
            velocity, convention = self._velocity_quantity()
            same_rest = band.rest_hz is None or self.rest_hz is None or band.rest_hz == self.rest_hz
            if band.kind == "velocity" and band.convention == convention and same_rest:
                return velocity.to_value(target)
            if self.rest_hz is None:
                raise SpectralRefusal(f"the cube's velocity axis {self.ctype} has no rest frequency "
                                      f"(RESTFRQ/RESTFREQ/RESTWAV) to read it as a {band.kind}")
            quantity = velocity.to(u.Hz, equivalencies=_DOPPLER[convention](self.rest_hz * u.Hz))
        elif self.code in ("FREQ", "WAVE", "WAVN", "ENER"):
            quantity = self.values * self.unit
        else:
            raise SpectralRefusal(f"the cube's spectral axis {self.ctype} cannot be converted to a "
                                  f"{band.kind} (supported: FREQ, WAVE, WAVN, ENER, VRAD, VOPT, VELO, ZOPT, BETA)")
        if band.kind in ("frequency", "wavelength"):
            return quantity.to_value(target, equivalencies=u.spectral())
        rest = band.rest_hz if band.rest_hz is not None else self.rest_hz
        if rest is None:
            raise SpectralRefusal("a velocity band needs a rest frequency: the cube's header has no "
                                  "RESTFRQ/RESTFREQ and none was given")
        return quantity.to_value(target, equivalencies=u.spectral() + _DOPPLER[band.convention](rest * u.Hz))

    def channels(self, bands: list) -> list:
        """Per band: (start, stop, clipped) half-open on the axis, None when no channel is in it,
        or a str saying why the band cannot be read on this axis."""
        out: list = [None] * len(bands)
        groups: dict[tuple, list[int]] = {}
        for i, band in enumerate(bands):
            if isinstance(band, ChannelRange):
                n = self.n_channels
                out[i] = None if band.lo >= n else (band.lo, min(band.hi + 1, n), band.hi >= n)
                continue
            try:
                self.in_band_terms(band)
            except SpectralRefusal as exc:
                out[i] = str(exc)
                continue
            groups.setdefault((band.unit, band.kind, band.convention, band.rest_hz), []).append(i)
        for members in groups.values():
            values = self.in_band_terms(bands[members[0]])
            step = max(1, _MASK_CELLS // len(values))
            for at in range(0, len(members), step):
                chunk = members[at:at + step]
                lo = np.array([bands[i].lo for i in chunk])[:, None]
                hi = np.array([bands[i].hi for i in chunk])[:, None]
                with np.errstate(invalid="ignore"):
                    inside = (values >= lo) & (values <= hi)
                core = inside[:, 1:-1]
                any_in = core.any(axis=1)
                first = core.argmax(axis=1)
                last = core.shape[1] - 1 - core[:, ::-1].argmax(axis=1)
                clipped = inside[:, 0] | inside[:, -1]
                for k, i in enumerate(chunk):
                    out[i] = (int(first[k]), int(last[k]) + 1, bool(clipped[k])) if any_in[k] else None
        return out
