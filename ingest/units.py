"""Byte sizes as people write them ("64MiB", "1 GiB", "5000000") and as ingest prints them."""
from __future__ import annotations

import re
from fractions import Fraction

from ingest.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

# Binary (IEC) and decimal (SI) suffixes, matched case-insensitively. Bare "K", "M", "G" are
# refused on purpose: "64M" means MiB to some tools and MB to others, a 5% error at 64 MiB
# and a wrong answer at the S3 5 MiB part minimum.
_UNITS = {
    "": 1, "b": 1,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
}
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int, field: str) -> int:
    """Parse a byte count: a plain integer or a number with B, KiB..TiB (1024) or kB..TB (1000)."""
    if isinstance(text, bool):
        raise ConfigError(f"{field}: expected a byte count such as 64MiB, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ConfigError(f"{field}: byte count must be >= 0, got {text}")
        return text
    match = _PATTERN.match(str(text))
    if not match:
        raise ConfigError(
            f"{field}: cannot read {text!r} as a byte count; write e.g. 5000000, 64MiB, 1GiB or 500MB"
        )
    number, unit = match.groups()
    scale = _UNITS.get(unit.lower())
    if scale is None:
        raise ConfigError(
            f"{field}: unknown unit {unit!r} in {text!r}; use B, KiB, MiB, GiB, TiB "
            "(powers of 1024) or kB, MB, GB, TB (powers of 1000)"
        )
    # Fraction keeps "1.5GiB" exact instead of going through a binary float.
    value = Fraction(number) * scale
    if value.denominator != 1:
        raise ConfigError(f"{field}: {text!r} is not a whole number of bytes")
    return int(value)


def format_bytes(n: int | float) -> str:
    """Format a byte count with binary units: 512 B, 5 MiB, 1.5 GiB (one decimal unless exact)."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for name, scale in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            value = n / scale
            text = f"{value:.0f}" if value == int(value) else f"{value:.1f}"
            return f"{sign}{text} {name}"
    return f"{sign}{n:g} B"


def format_age(age_s: float) -> str:
    """How old a measurement is, in the unit a reader takes in at once: 45 s, 12 min, 3.5 h."""
    if age_s < 120:
        return f"{age_s:.0f} s"
    return f"{age_s / 60:.0f} min" if age_s < 7200 else f"{age_s / 3600:.1f} h"
