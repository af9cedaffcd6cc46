"""Exact boxes, clipped axes, request texts and messages of ingest.sky.pixels that its other fast
tests left unchecked: each test here kills mutants that survived `bash scripts/mutation.sh
sky/pixels` (docs/testing.md). Boxes come from brute force over pixel centres (tests/sky_oracle.py:
astropy's pixel_to_world and SkyCoord.separation), channels from the header by hand."""
from __future__ import annotations

import pytest
from astropy.io import fits

from ingest.errors import ConfigError, RegionError
from ingest.sky.pixels import world_box, world_boxes
from ingest.sky.regions import SkyCircle
from tests.sky_oracle import bbox, ring, sky_header, sky_members

NX, NY, NCHAN = 10, 8, 50


def sky_cube() -> fits.Header:
    """RA---TAN/DEC--TAN 10 x 8 px of 0.1 deg round (10, 20), and 50 channels of 200 kHz from
    1.41 GHz at channel 0 (so channel k is 1.41 GHz + k x 200 kHz)."""
    header = sky_header("TAN", 10.0, 20.0, -0.1, 0.1, NX, NY)
    header["NAXIS"], header["NAXIS3"] = 3, NCHAN
    header["CTYPE3"], header["CRVAL3"], header["CDELT3"], header["CRPIX3"], header["CUNIT3"] = \
        "FREQ", 1.41e9, 2e5, 1.0, "Hz"
    return header


SHAPE = (NCHAN, NY, NX)


def brute_sky(region):
    """(x0, x1, y0, y1) of the pixel centres astropy puts in the region, and whether the ring
    beyond the x and the y edges holds any: the oracle's strict members (no centre sits near an
    edge in these cases, so strict and loose agree)."""
    strict, loose = sky_members(sky_header("TAN", 10.0, 20.0, -0.1, 0.1, NX, NY), NX, NY, region)
    assert (strict == loose).all()
    return bbox(strict), ring(strict)


# a circle inside the image, one over its east (x = 0: RA falls with x) edge, one over a corner
INSIDE = SkyCircle(10.0, 20.0, 0.25)
OVER_X = SkyCircle(10.45, 20.0, 0.2)
OVER_CORNER = SkyCircle(10.45, 20.38, 0.2)


@pytest.mark.parametrize("region, channels, clipped_spectral, text", [
    (None, None, False, "whole cube"),
    (INSIDE, None, False, "CIRCLE icrs 10 20 0.25 deg"),
    (OVER_X, "3 9", False, "CIRCLE icrs 10.45 20 0.2 deg; CHANNEL 3 9"),
    (OVER_CORNER, "45 60", True, "CIRCLE icrs 10.45 20.38 0.2 deg; CHANNEL 45 60"),
    (None, "45 60", True, "CHANNEL 45 60"),
])
def test_box_clipped_axes_and_text_of_a_sky_and_spectral_request(region, channels, clipped_spectral, text):
    got = world_box(sky_cube(), SHAPE, pos=region, channels=channels)
    x0, x1, y0, y1 = (0, NX, 0, NY)
    names = []
    if region is not None:
        (x0, x1, y0, y1), (ring_x, ring_y) = brute_sky(region)
        names = [name for name, cut in (("ra", ring_x), ("dec", ring_y)) if cut]
    c0, c1 = (0, NCHAN) if channels is None else (int(channels.split()[0]), min(int(channels.split()[1]) + 1, NCHAN))
    expected = {"box": [[c0, c1], [y0, y1], [x0, x1]], "clipped": names + ["spectral"] * clipped_spectral,
                "region": text}
    assert got.as_dict() == expected
    assert (got.box, got.clipped, got.region_text) == (tuple(map(tuple, expected["box"])), tuple(expected["clipped"]), text)


def spectrum_and_linear(pc1_2: float = 0.0) -> fits.Header:
    """No celestial axes: FREQ (6 channels) and a LINEAR axis, coupled when pc1_2 is not 0."""
    return fits.Header({"NAXIS": 2, "NAXIS1": 6, "NAXIS2": 5, "CTYPE1": "FREQ", "CTYPE2": "LINEAR",
                        "CRVAL1": 1.4e9, "CDELT1": 1e5, "CRPIX1": 1.0, "CUNIT1": "Hz", "PC1_2": pc1_2})


def coupled_sky() -> fits.Header:
    header = sky_cube()
    header["PC1_3"] = 0.001  # RA moves with the channel
    return header


def no_ctype3() -> fits.Header:
    header = sky_cube()
    del header["CTYPE3"]
    return header


CUBE = "the cube (RA---TAN, DEC--TAN, FREQ; shape (50, 8, 10))"


@pytest.mark.parametrize("header, shape, request_, message", [
    (sky_cube(), (40, 8, 10), {"channels": "1 2"},
     "the cube's header has NAXIS3 = 50 but its shape (40, 8, 10) (numpy order) has 40 on that axis"),
    (sky_cube(), (50, 8, 11), {"channels": "1 2"},
     "the cube's header has NAXIS1 = 10 but its shape (50, 8, 11) (numpy order) has 11 on that axis"),
    (sky_cube(), (8, 10), {},
     "the cube's header describes 3 axes but its shape (8, 10) has 2"),
    (spectrum_and_linear(0.5), (5, 6), {"channels": "1 2"},
     "the cube (FREQ, LINEAR; shape (5, 6)): the axes FREQ are coupled to others by the PC/CD matrix; "
     "a box needs them separable"),
    (coupled_sky(), SHAPE, {"channels": "1 2"},
     "the cube (RA---TAN, DEC--TAN, FREQ; shape (50, 8, 10)): the axes RA---TAN, DEC--TAN are coupled to "
     "others by the PC/CD matrix; a box needs them separable"),
    # messages give numbers rounded for people: 0.1 + 0.2 as 0.3, Hz as GHz
    (spectrum_and_linear(), (5, 6), {"pos": SkyCircle(0.1 + 0.2, 20.0, 1.0)},
     "CIRCLE icrs 0.3 20 1 deg: the cube (FREQ, LINEAR; shape (5, 6)) has no celestial axes"),
    (no_ctype3(), SHAPE, {"channels": "1 2"},
     "CHANNEL 1 2: the cube (RA---TAN, DEC--TAN, ?; shape (50, 8, 10)) has no spectral axis"),
    (no_ctype3(), SHAPE, {"band": "1500000000 1600000000 Hz"},
     "BAND 1.5 1.6 GHz: the cube (RA---TAN, DEC--TAN, ?; shape (50, 8, 10)) has no spectral axis"),
    (sky_cube(), SHAPE, {"band": "1500000000 1600000000 Hz"},
     "BAND 1.5 1.6 GHz: wholly off the cube: no channel of its spectral axis (50 channels of FREQ, "
     f"1410000000..1419800000 Hz) is in it ({CUBE})"),
    (sky_cube(), SHAPE, {"pos": SkyCircle(0.1 + 0.2, 20.0, 0.2)},
     "CIRCLE icrs 0.3 20 0.2 deg: wholly off the cube: no pixel centre of its sky plane (10 x 8 px, "
     f"RA---TAN/DEC--TAN) is in the region ({CUBE})"),
    (sky_cube(), SHAPE, {"channels": "50 60"},
     "CHANNEL 50 60: wholly off the cube: no channel of its spectral axis (50 channels of FREQ, "
     f"1410000000..1419800000 Hz) is in it ({CUBE})"),
    (sky_cube(), SHAPE, {"pos": SkyCircle(11.0, 20.0, 0.2)},
     "CIRCLE icrs 11 20 0.2 deg: wholly off the cube: no pixel centre of its sky plane (10 x 8 px, "
     f"RA---TAN/DEC--TAN) is in the region ({CUBE})"),
])
def test_a_refusal_names_the_field_and_the_cube(header, shape, request_, message):
    with pytest.raises(RegionError) as info:
        world_box(header, shape, **request_)
    assert str(info.value) == message


@pytest.mark.parametrize("ctype1, ctype2, reason", [
    ("RA---XYZ", "DEC--XYZ", r"XYZ in CTYPE1"),
    # a celestial axis without its pair: CubeAxes relies on this refusal (lng and lat both or neither)
    ("RA---TAN", "VRAD", "Unmatched celestial axes"),
    ("FREQ", "DEC--TAN", "Unmatched celestial axes"),
])
def test_an_unreadable_wcs_is_refused_with_wcslib_s_reason(ctype1, ctype2, reason):
    header = sky_cube()
    header["CTYPE1"], header["CTYPE2"] = ctype1, ctype2
    with pytest.raises(RegionError, match=rf"(?s)^cannot read the cube's WCS from its header: .*{reason}"):
        world_box(header, SHAPE)


@pytest.mark.parametrize("regions, bands, message", [
    ([(10.0, 20.0)], [None], "sky region (10.0, 20.0): expected a SkyCircle, SkyRange or SkyPolygon"),
    ([None], [(1.4e9, 1.5e9)], "spectral region (1400000000.0, 1500000000.0): expected a SpectralRange or ChannelRange"),
    ([None, None], [None], "world_boxes: 2 sky regions but 1 bands; give one of each per entry (None where there is none)"),
])
def test_a_request_of_the_wrong_type_or_count_is_a_config_error_naming_it(regions, bands, message):
    with pytest.raises(ConfigError) as info:
        world_boxes(sky_cube(), SHAPE, regions, bands)
    assert str(info.value) == message
