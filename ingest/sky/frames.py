"""Celestial frame names: the one string each frame a region may be in goes by.

"icrs", "galactic", "fk5" (FK5 J2000), "fk4" (FK4 B1950), or either of the last two at another
equinox, "fk5 J2010", "fk4 B1900" (FK4's obstime is its equinox, astropy's default).
`normalize_frame` turns what a user writes into that name, `frame_equinox` splits it into
(frame, equinox year) and `frame_of` names an astropy frame when a name says it exactly.
`ingest.sky.regions` re-exports the public names.
"""
from __future__ import annotations

import functools
import re

from ingest.errors import ConfigError
from ingest.sky.bands import number_text

FRAMES = ("icrs", "fk5", "fk4", "galactic")  # fk5 alone is J2000, fk4 alone B1950; either may name an equinox
_FRAME_ALIASES = {"icrs": "icrs", "fk5": "fk5", "j2000": "fk5", "fk4": "fk4", "b1950": "fk4",
                  "galactic": "galactic", "gal": "galactic"}
# frame -> (the letter of its equinox's year: Julian or Besselian, the equinox it means unnamed)
_EQUINOXES = {"fk5": ("J", 2000.0), "fk4": ("B", 1950.0)}
_EQUINOX = re.compile(r"([JB])(\d+(?:\.\d*)?)", re.IGNORECASE)
EQUINOX_YEARS = (1000.0, 3000.0)  # an equinox outside is a typo, not a frame (ERFA's models end too)
EQUINOX_DECIMALS = 9  # an equinox is kept to 1e-9 year: precession moves a star 5e-8 arcsec in that


def normalize_frame(name: str) -> str:
    """A frame's one name: 'ICRS' -> 'icrs', 'FK5', 'FK5 J2000' or 'J2000' -> 'fk5', 'fk5 j2010.50' ->
    'fk5 J2010.5', 'FK4', 'fk4 B1950' or 'B1950' -> 'fk4', 'fk4 B1900' -> 'fk4 B1900', 'Galactic' or
    'gal' -> 'galactic' (any case). An equinox in the other year (fk5 B1950) is converted to the
    frame's own (Julian for FK5, Besselian for FK4). Anything else is a ConfigError naming it."""
    return _normal_frame(" ".join(str(name).split()))


@functools.lru_cache(maxsize=256)
def _normal_frame(key: str) -> str:
    words = key.split()
    base = _FRAME_ALIASES.get(words[0].lower()) if words else None
    if base is None or len(words) > 2:
        raise ConfigError(f"sky frame {key!r} is not supported: use one of {', '.join(FRAMES)}, fk5 or fk4 "
                          f"with an equinox (fk5 J2010, fk4 B1900); fk5 alone means J2000, fk4 alone B1950")
    if len(words) == 1:
        return base
    if base not in _EQUINOXES or words[0].lower() in ("j2000", "b1950"):
        raise ConfigError(f"sky frame {key!r}: only fk5 and fk4 take an equinox ({words[1]!r} follows {words[0]!r})")
    match = _EQUINOX.fullmatch(words[1])
    if match is None:
        raise ConfigError(f"sky frame {key!r}: {words[1]!r} is not an equinox; write a Julian or Besselian "
                          f"year, e.g. {base} J2010 or {base} B1950")
    letter, year = match.group(1).upper(), float(match.group(2))
    if not EQUINOX_YEARS[0] <= year <= EQUINOX_YEARS[1]:
        raise ConfigError(f"sky frame {key!r}: equinox year {number_text(year)} is outside "
                          f"{EQUINOX_YEARS[0]:.0f}..{EQUINOX_YEARS[1]:.0f}")
    if letter != _EQUINOXES[base][0]:
        from astropy.time import Time

        epoch = Time(year, format="jyear" if letter == "J" else "byear")
        year = float(epoch.byear if letter == "J" else epoch.jyear)
    return _frame_name(base, year)


def _frame_name(base: str, year: float) -> str:
    """'fk5' or 'fk5 J2010.5' for FK5 at Julian year `year` (FK4 likewise, Besselian)."""
    letter, default = _EQUINOXES[base]
    year = round(float(year), EQUINOX_DECIMALS)
    return base if year == default else f"{base} {letter}{number_text(year)}"


def frame_equinox(name: str) -> tuple[str, float | None]:
    """(frame, equinox year) of a frame name: ('fk5', 2010.0) for 'fk5 J2010' (Julian for FK5,
    Besselian for FK4; 2000 and 1950 when unnamed), (name, None) for ICRS and Galactic."""
    name = normalize_frame(name)
    base, _, equinox = name.partition(" ")
    if base not in _EQUINOXES:
        return base, None
    return base, float(equinox[1:]) if equinox else _EQUINOXES[base][1]


def frame_of(frame) -> str | None:
    """The frame name that says an astropy celestial frame exactly (its class and every attribute:
    an FK5's equinox, an FK4's equinox when its obstime is that equinox, astropy's default), or
    None when no name does (an FK4 observed at another epoch, ecliptic, GCRS, ...)."""
    name = frame.name
    if name in ("icrs", "galactic"):
        return name
    if name == "fk5" and frame.equinox.isscalar:
        return _frame_name("fk5", frame.equinox.jyear)
    if name == "fk4" and frame.equinox.isscalar and frame.obstime.isscalar and frame.obstime == frame.equinox:
        return _frame_name("fk4", frame.equinox.byear)
    return None
