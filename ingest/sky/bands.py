"""Spectral regions: a band in frequency, vacuum wavelength or velocity, or a channel range.

`SpectralRange` and `ChannelRange` are frozen dataclasses of plain floats and strings (they
pickle and broadcast over MPI unchanged); `parse_band` and `parse_channels` read them from
IVOA SODA's syntax (BAND: two bare numbers, vacuum wavelength in metres, -Inf/+Inf for an open
side; CHANNEL: two 0-based inclusive channels) or from values with units ('1.4170GHz 1.4185GHz',
'1.4170 GHz 1.4185 GHz' as astropy writes quantities, '1417.0 1418.5 MHz', '1200km/s 1500km/s
optical'). `ingest.sky.regions` re-exports all of it beside the sky regions;
`ingest.sky.spectral` turns a band into channels with a cube's header. Numbers in messages for
people are written by `readable`; text that must parse back to the same floats by `number_text`.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import asdict, dataclass

import astropy.units as u

from ingest.errors import ConfigError

KINDS = ("frequency", "wavelength", "velocity")
CONVENTIONS = ("radio", "optical", "relativistic")
_SPEED_OF_LIGHT_M_S = 299_792_458.0


def number_text(value: float) -> str:
    """Shortest text that reads back as the same float ('150.12', '150', '-inf')."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


_PEOPLES_UNITS = {"Hz": ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz")), "m/s": ((1e3, "km/s"),)}
READABLE_DIGITS = 10  # significant digits: float tails (1e-16 relative) go, a person's value stays
DEG_DECIMALS = 6  # 1e-6 deg is 3.6 mas, finer than any cube's pixel


def readable(values, unit: str = "", joiner: str = "..") -> str:
    """Numbers in a message for people, all in one unit: degrees to 1e-6 deg, Hz as GHz, MHz or kHz
    and m/s as km/s (chosen by the largest value), anything else to 10 significant digits; so
    159.17499999999998 deg is '159.175 deg' and 1417300000.0000002 Hz is '1.4173 GHz'. Several
    values are joined by `joiner` ('1417.3..1417.6 MHz'). Not for text that must parse back to
    the same float (`describe()` uses number_text)."""
    values = [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    finite = [abs(v) for v in values if math.isfinite(v)]
    scale = 1.0
    for factor, name in _PEOPLES_UNITS.get(unit, ()):
        if finite and max(finite) >= factor:
            scale, unit = factor, name
            break
    texts = []
    for value in values:
        value /= scale
        if not math.isfinite(value):
            text = str(value)
        elif unit == "deg":
            text = degrees_text(value)
        else:
            text = f"{value:.{READABLE_DIGITS}g}"
        texts.append("0" if text == "-0" else text)
    return joiner.join(texts) + (f" {unit}" if unit else "")


def degrees_text(value: float) -> str:
    """An angle in degrees for people: to 1e-6 deg, trailing zeros dropped ('159.175')."""
    text = f"{float(value):.{DEG_DECIMALS}f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def bare_number(token: str) -> float | None:
    """The number a token spells (inf included), or None (NaN is no number)."""
    try:
        value = float(token)
    except ValueError:
        return None
    return None if math.isnan(value) else value



@dataclass(frozen=True)
class SpectralRange:
    """A band lo..hi (edges included, either order given; stored lo <= hi) in unit.

    kind is frequency, wavelength (vacuum) or velocity; convention (velocity only) is radio,
    optical or relativistic; rest_hz None takes RESTFRQ/RESTFREQ from the cube's header. The
    band is read in the cube's own spectral reference frame (its SPECSYS): no LSRK/barycentric
    conversion is made."""

    lo: float
    hi: float
    unit: str
    kind: str
    convention: str | None = None
    rest_hz: float | None = None

    def __post_init__(self):
        lo, hi = sorted((float(self.lo), float(self.hi)))
        what = f"band {readable([lo, hi], str(self.unit), ' ')}"
        if math.isnan(lo) or math.isnan(hi):
            raise ConfigError(f"{what}: a value is not a number")
        unit_text, kind, c_in_unit = _band_unit(str(self.unit), what)
        if self.kind != kind:
            raise ConfigError(f"{what}: kind {self.kind!r} does not match unit {self.unit!r} (a {kind})")
        convention = None
        if kind == "velocity":
            convention = (self.convention or "radio").lower()
            if convention not in CONVENTIONS:
                raise ConfigError(f"{what}: velocity convention {self.convention!r} is not one of "
                                  f"{', '.join(CONVENTIONS)}")
            if any(math.isfinite(v) and abs(v) >= c_in_unit for v in (lo, hi)):
                raise ConfigError(f"{what}: a velocity must be below the speed of light")
        elif any(v <= 0.0 and math.isfinite(v) for v in (lo, hi)) or hi == -math.inf:
            raise ConfigError(f"{what}: a {kind} must be positive (-Inf/+Inf for an open side)")
        rest = self.rest_hz
        if rest is not None:
            rest = float(rest)
            if not (rest > 0.0 and math.isfinite(rest)):
                raise ConfigError(f"{what}: rest frequency {self.rest_hz} Hz must be positive")
        for name, value in (("lo", lo), ("hi", hi), ("unit", unit_text),
                            ("convention", convention), ("rest_hz", rest)):
            object.__setattr__(self, name, value)

    @classmethod
    def between(cls, lo, hi, convention: str = "radio", rest=None) -> SpectralRange:
        """From two astropy Quantities (or SpectralCoords) of frequency, wavelength or velocity;
        rest as for parse_band (a Quantity, text, or Hz)."""
        if not (isinstance(lo, u.Quantity) and isinstance(hi, u.Quantity)):
            raise ConfigError(f"band {lo!r} {hi!r}: give both ends as astropy Quantities with units")
        kind = _kind_of(lo.unit, f"band {lo} {hi}")
        try:
            hi_value = float(hi.to_value(lo.unit))
        except u.UnitsError:
            raise ConfigError(f"band {lo} {hi}: the two ends are not in the same kind of unit") from None
        return cls(float(lo.value), hi_value, _unit_text(lo.unit), kind,
                   convention if kind == "velocity" else None, _rest_hz(rest))

    def describe(self, for_people: bool = False) -> str:
        """SODA-like text that parses back to this band; `for_people`: its numbers rounded for a
        message (readable), which need not parse back exactly."""
        if for_people:
            text = f"BAND {readable([self.lo, self.hi], self.unit, ' ')}"
        else:
            text = f"BAND {number_text(self.lo)} {number_text(self.hi)} {self.unit}"
        if self.kind == "velocity":
            text += f" {self.convention}"
        if self.rest_hz is not None:
            text += f" rest={readable(self.rest_hz, 'Hz')}" if for_people else f" rest={number_text(self.rest_hz)}Hz"
        return text

    def as_dict(self) -> dict:
        """JSON-safe: an open side (-inf/+inf) is None."""
        fields = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        return {"shape": "band", **fields, "text": self.describe()}


@dataclass(frozen=True)
class ChannelRange:
    """Channels lo..hi of the spectral axis, 0-based and inclusive (SODA's CHANNEL)."""

    lo: int
    hi: int

    def __post_init__(self):
        lo, hi = self.lo, self.hi
        if not all(isinstance(v, int) or (hasattr(v, "__index__") and not isinstance(v, bool)) for v in (lo, hi)):
            raise ConfigError(f"channel range {lo!r} {hi!r}: channels are integers")
        lo, hi = int(lo), int(hi)
        if lo < 0 or hi < lo:
            raise ConfigError(f"channel range {lo} {hi}: need 0 <= lo <= hi (0-based, inclusive)")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    def describe(self, for_people: bool = False) -> str:
        return f"CHANNEL {self.lo} {self.hi}"

    def as_dict(self) -> dict:
        return {"shape": "channels", **asdict(self), "text": self.describe()}


@functools.lru_cache(maxsize=256)
def _unit_info(text: str) -> tuple[str, str, float] | str:
    """(normalised text, kind, speed of light in the unit or nan) of a band's unit, or why not.
    Cached: a catalogue makes thousands of bands in one unit."""
    try:
        unit = u.Unit(text)
    except ValueError:
        return f"unit {text!r} is not a unit astropy knows"
    try:
        kind = _kind_of(unit, "")
    except ConfigError:
        return f"unit {_unit_text(unit)!r} is not a frequency, wavelength or velocity"
    c_in_unit = (_SPEED_OF_LIGHT_M_S * u.m / u.s).to_value(unit) if kind == "velocity" else math.nan
    return _unit_text(unit), kind, c_in_unit


def _band_unit(text: str, what: str) -> tuple[str, str, float]:
    info = _unit_info(text)
    if isinstance(info, str):
        raise ConfigError(f"{what}: {info}")
    return info


def _unit_text(unit) -> str:
    return unit.to_string().replace(" ", "")


def _kind_of(unit, what: str) -> str:
    if unit.is_equivalent(u.Hz):
        return "frequency"
    if unit.is_equivalent(u.m):
        return "wavelength"
    if unit.is_equivalent(u.m / u.s):
        return "velocity"
    raise ConfigError(f"{what}: unit {_unit_text(unit)!r} is not a frequency, wavelength or velocity")


def _rest_hz(rest) -> float | None:
    """A rest frequency as Hz: None, a number (Hz), a Quantity or text like '1420.405752MHz'
    (a wavelength such as '21.106cm' is converted)."""
    if rest is None:
        return None
    if isinstance(rest, (int, float)):
        return float(rest)
    try:
        quantity = u.Quantity(rest.replace(" ", "") if isinstance(rest, str) else rest)
        return float(quantity.to_value(u.Hz, equivalencies=u.spectral()))
    except (ValueError, TypeError, u.UnitsError):
        raise ConfigError(f"rest frequency {rest!r}: expected a frequency with a unit, e.g. 1420.405752MHz") from None


def parse_band(text: str, convention: str = "radio", rest=None) -> SpectralRange:
    """SODA's BAND ('0.2112 0.2114': vacuum wavelength in metres, -Inf/+Inf for an open side) or
    two values with units ('1.4170GHz 1.4185GHz', '1.4170 GHz 1.4185 GHz' as astropy writes them,
    '1417.0 1418.5 MHz', '21.1cm 21.2cm', '1200km/s 1500km/s optical'). A bare number beside a
    value with a unit ('1400 1500km/s') is refused: it could be in either unit. A trailing radio|optical|relativistic word overrides
    convention; 'rest=1420.405752MHz' (or rest) gives the rest frequency for velocities."""
    tokens = str(text).replace(",", " ").split()
    if tokens and tokens[0].lower() == "band":
        tokens = tokens[1:]
    rest_tokens = [t for t in tokens if t.lower().startswith("rest=")]
    tokens = [t for t in tokens if not t.lower().startswith("rest=")]
    if rest_tokens:
        rest = rest_tokens[-1].split("=", 1)[1]
    if tokens and tokens[-1].lower() in CONVENTIONS:
        convention, tokens = tokens[-1].lower(), tokens[:-1]
    tokens = _units_joined(tokens)
    unit_word = None
    if len(tokens) == 3:
        unit_word, tokens = tokens[2], tokens[:2]
        try:
            u.Unit(unit_word)
        except ValueError:
            raise ConfigError(f"band {text!r}: {unit_word!r} is neither a unit nor a velocity convention "
                              f"({', '.join(CONVENTIONS)})") from None
    if len(tokens) != 2:
        raise ConfigError(f"band {text!r}: expected two values, e.g. '0.2112 0.2114' (metres, SODA), "
                          f"'1.4170GHz 1.4185GHz', '1417.0 1418.5 MHz' or '1200km/s 1500km/s'")
    bare = [bare_number(t) for t in tokens]
    try:
        if all(b is not None for b in bare):
            unit = u.Unit(unit_word) if unit_word else u.m
            values = bare
        elif unit_word is None and all(b is None for b in bare):
            quantities = [u.Quantity(t) for t in tokens]
            unit = quantities[0].unit
            values = [float(q.to_value(unit)) for q in quantities]
        else:
            raise ConfigError(f"band {text!r}: give both values with units, or two numbers and one unit "
                              f"after them")
    except (ValueError, TypeError, u.UnitsError) as exc:
        raise ConfigError(f"band {text!r}: cannot read the values with units ({exc})") from None
    try:
        kind = _kind_of(unit, f"band {text!r}")
        return SpectralRange(values[0], values[1], _unit_text(unit), kind,
                             convention if kind == "velocity" else None, _rest_hz(rest))
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(f"band {text!r}") else f"band {text!r}: {message}") from None


def _is_unit_word(token: str) -> bool:
    """A unit alone ('GHz', 'km/s'); not a number, nor a number with its unit ('1500km/s')."""
    if not token[:1].isalpha() or bare_number(token) is not None:  # 'inf' is a number
        return False
    try:
        u.Unit(token)
    except ValueError:
        return False
    return True


def _units_joined(tokens: list[str]) -> list[str]:
    """Values as astropy writes quantities ('1.4008 GHz 1.4012 GHz': each number then its unit)
    joined into one token each. Two bare numbers and one unit after them ('1417.0 1418.5 MHz') are
    left as they are, and a bare number left beside a value with a unit stays bare, to be refused."""
    if len(tokens) == 3 and all(bare_number(t) is not None for t in tokens[:2]):
        return tokens
    out = []
    for token in tokens:
        if out and bare_number(out[-1]) is not None and _is_unit_word(token):
            out[-1] = f"{out[-1]} {token}"
        else:
            out.append(token)
    return out


def parse_channels(text: str) -> ChannelRange:
    """'lo hi': channels of the spectral axis, 0-based and inclusive (SODA's CHANNEL)."""
    tokens = str(text).replace(",", " ").split()
    if tokens and tokens[0].lower() in ("channel", "channels"):
        tokens = tokens[1:]
    if len(tokens) != 2 or not all(re.fullmatch(r"\+?\d+", t) for t in tokens):
        raise ConfigError(f"channels {text!r}: expected two non-negative integers 'lo hi' (0-based, inclusive)")
    try:
        return ChannelRange(int(tokens[0]), int(tokens[1]))
    except ConfigError as exc:
        raise ConfigError(f"channels {text!r}: {exc}") from None


def rest_frequency_hz(rest) -> float | None:
    """A rest frequency as Hz (None, a number in Hz, a Quantity, or text like '1420.405752MHz')."""
    return _rest_hz(rest)
