"""The FITS header whose WCS maps a cube's pixels to the sky, for FITS and HDF5 sources alike.

A FITS layout carries its HDU's header cards. An HDF5 dataset carries FITS keys as attributes
(CARTA/IDIA's schema, ingest's own outputs): those that are valid FITS keywords with scalar
values become the header, with NAXISn from the dataset's shape. A cube whose header has no
celestial or spectral axes is refused where a world region needs one (ingest.sky.pixels).
"""
from __future__ import annotations

import re
import warnings

from astropy.io import fits

_KEY = re.compile(r"[A-Z0-9_-]{1,8}")
_STRUCTURAL = {"SIMPLE", "XTENSION", "BITPIX", "NAXIS", "EXTEND", "PCOUNT", "GCOUNT", "END"}


def wcs_header(layout) -> fits.Header:
    """The header of `layout`'s cube (FITS: its cards; HDF5: its FITS-keyed attributes)."""
    if getattr(layout, "header_text", ""):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fits.Header.fromstring(layout.header_text)
    header = fits.Header()
    header["NAXIS"] = len(layout.shape)
    for n, size in enumerate(reversed(layout.shape), start=1):
        header[f"NAXIS{n}"] = size
    for key, value in (getattr(layout, "attrs", None) or {}).items():
        upper = str(key).upper()
        if (_KEY.fullmatch(upper) and upper not in _STRUCTURAL and not upper.startswith("NAXIS")
                and isinstance(value, (str, int, float, bool))):
            header[upper] = value
    return header
