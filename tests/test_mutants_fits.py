"""ingest.formats.fits's header rules spelled out on headers built in memory: the tests that kill
the mutants scripts/mutation.sh found surviving against the file-based tests (docs/testing.md)."""
from __future__ import annotations

import dataclasses
import math

import pytest
from astropy.io import fits

from ingest.errors import FitsFormatError
from ingest.formats.beams import BeamTable
from ingest.formats.fits import (FitsLayout, axis_roles, check_first_block, has_wcs_keys, hdu_data_span, header_end,
                                 image_layout, parse_header, says_beams, shifted_axis, with_beams)
from ingest.testbed.synth import beam_rows


def _header(**cards) -> fits.Header:
    header = fits.Header()
    for key, value in cards.items():
        header[key] = value
    return header


def _layout(header, *, hdu=0, data_offset=2880, object_bytes=10**6):
    return image_layout(header, source="s3://b/c.fits", hdu=hdu, header_offset=0, data_offset=data_offset,
                        object_bytes=object_bytes)


def _cards(*pairs) -> str:
    return "".join(f"{key:<8}= {value:<70}" for key, value in pairs)


def test_a_plain_image_becomes_its_layout_in_numpy_order():
    layout = _layout(_header(SIMPLE=True, BITPIX=16, NAXIS=3, NAXIS1=5, NAXIS2=4, NAXIS3=3, BSCALE=2.0, BZERO=1.0,
                             BLANK=-99))
    assert (layout.shape, layout.bitpix, layout.bscale, layout.bzero, layout.blank) == ((3, 4, 5), 16, 2.0, 1.0, -99)
    assert (layout.source, layout.hdu, layout.header_offset, layout.data_offset) == ("s3://b/c.fits", 0, 0, 2880)
    floats = _layout(_header(SIMPLE=True, BITPIX=-32, NAXIS=1, NAXIS1=5, BLANK=7))
    assert floats.blank is None and (floats.bscale, floats.bzero) == (1.0, 0.0)  # BLANK means nothing for floats
    ext = _layout(_header(XTENSION=" image ", BITPIX=8, NAXIS=1, NAXIS1=5), hdu=1)
    assert ext.shape == (5,)


@pytest.mark.parametrize("cards, hdu, message", [
    (dict(XTENSION="IMAGE", ZIMAGE=True, BITPIX=8, NAXIS=1, NAXIS1=5), 1,
     r"^s3://b/c.fits HDU 1 is a tile-compressed image \(ZIMAGE\); only uncompressed images can be read by range$"),
    (dict(XTENSION="BINTABLE", BITPIX=8, NAXIS=1, NAXIS1=5), 1,
     r"^s3://b/c.fits HDU 1 is a BINTABLE extension, not an image; choose an IMAGE HDU$"),
    (dict(SIMPLE=True, BITPIX=8, NAXIS=1, NAXIS1=5, GROUPS=True), 0, r"^s3://b/c.fits HDU 0 holds random groups"),
    (dict(SIMPLE=True, BITPIX=12, NAXIS=1, NAXIS1=5), 0,
     r"^s3://b/c.fits HDU 0: BITPIX 12 is not one of \[-64, -32, 8, 16, 32, 64\]$"),
    (dict(SIMPLE=True, NAXIS=1, NAXIS1=5), 0, r"BITPIX 0 is not one of"),
    (dict(SIMPLE=True, BITPIX=8, NAXIS=0), 0,
     r"^s3://b/c.fits HDU 0 has no data \(NAXIS = 0\) \(the data is probably in an extension: try hdu=1\)$"),
    (dict(XTENSION="IMAGE", BITPIX=8, NAXIS=0), 2, r"^s3://b/c.fits HDU 2 has no data \(NAXIS = 0\)$"),
    (dict(SIMPLE=True, BITPIX=8), 0, r"has no data \(NAXIS = 0\)"),
    (dict(SIMPLE=True, BITPIX=8, NAXIS=5, NAXIS1=1, NAXIS2=1, NAXIS3=1, NAXIS4=1, NAXIS5=1), 0,
     r"^s3://b/c.fits HDU 0: NAXIS = 5; ingest reads cubes of 1 to 4 axes$"),
    (dict(SIMPLE=True, BITPIX=8, NAXIS=2, NAXIS1=5, NAXIS2=0), 0,
     r"^s3://b/c.fits HDU 0 has an empty axis \(NAXISn = \[5, 0\]\)$"),
    (dict(SIMPLE=True, BITPIX=8, NAXIS=1, NAXIS1=5, BSCALE=0.0), 0,
     r"^s3://b/c.fits HDU 0: BSCALE = 0 would map every value to BZERO$"),
])
def test_what_is_not_a_plain_image_is_refused_by_name(cards, hdu, message):
    with pytest.raises(FitsFormatError, match=message):
        _layout(_header(**cards), hdu=hdu)


def test_four_axes_are_read_and_data_past_the_object_is_refused():
    four = _header(SIMPLE=True, BITPIX=8, NAXIS=4, NAXIS1=2, NAXIS2=3, NAXIS3=4, NAXIS4=1)
    assert _layout(four).shape == (1, 4, 3, 2)
    header = _header(SIMPLE=True, BITPIX=16, NAXIS=1, NAXIS1=10)
    assert _layout(header, data_offset=2880, object_bytes=2900).data_bytes == 20  # ends exactly at the object's end
    with pytest.raises(FitsFormatError, match=r"^s3://b/c.fits HDU 0: header says the data ends at byte 2900 but "
                                              r"the object is only 2899 bytes; the object is truncated$"):
        _layout(header, data_offset=2880, object_bytes=2899)


def test_an_hdus_data_span_is_its_bytes_padded_to_whole_blocks():
    assert hdu_data_span(_header(NAXIS=0)) == 0
    assert hdu_data_span(_header(BITPIX=8)) == 0
    assert hdu_data_span(_header(BITPIX=-32, NAXIS=2, NAXIS1=10, NAXIS2=72)) == 2880  # exactly one block
    assert hdu_data_span(_header(BITPIX=-32, NAXIS=2, NAXIS1=10, NAXIS2=73)) == 5760
    assert hdu_data_span(_header(BITPIX=16, NAXIS=1, NAXIS1=2, GCOUNT=3, PCOUNT=4)) == 2880  # 2 x 3 x (4 + 2)
    assert hdu_data_span(_header(BITPIX=8, NAXIS=1, NAXIS1=3000, GCOUNT=2, PCOUNT=0)) == 8640  # 6000 bytes
    assert hdu_data_span(_header(BITPIX=8, NAXIS=1, NAXIS1=2000, PCOUNT=1000)) == 5760  # 1 x (1000 + 2000) bytes
    groups = _header(BITPIX=8, NAXIS=2, NAXIS1=0, NAXIS2=3000, GROUPS=True, GCOUNT=1, PCOUNT=0)
    assert hdu_data_span(groups) == 5760  # NAXIS1 = 0 is a placeholder, not an empty axis
    assert hdu_data_span(_header(BITPIX=8, NAXIS=2, NAXIS1=0, NAXIS2=3000)) == 0  # without GROUPS it is empty


def test_axis_roles_read_the_first_spectral_and_stokes_ctypes_of_the_primary_wcs():
    text = _cards(("CTYPE1", "'RA---SIN'"), ("CTYPE2", "'DEC--SIN'"), ("CTYPE3", "'vrad'"), ("CTYPE4", "'STOKES  '"))
    assert axis_roles(text, 4) == (1, 0)
    assert axis_roles(text, 3) == (0, None)  # CTYPE4 names no axis of a 3-axis cube
    assert axis_roles(_cards(("CTYPE3", "'FREQ'"), ("CTYPE2", "'VELO-LSR'"), ("CTYPE1", "'STOKES'"),
                             ("CTYPE4", "'STOKES'")), 4) == (1, 3)
    assert axis_roles(_cards(("CTYPE0", "'FREQ'"), ("CTYPE1", "'RA'")), 2) == (None, None)
    assert axis_roles("", 3) == (None, None)
    for ctype in ("FREQ", "ENER", "WAVN", "VRAD", "WAVE", "VOPT", "ZOPT", "AWAV", "VELO-LSR", "BETA", "FELO-HEL"):
        assert axis_roles(_cards(("CTYPE1", f"'{ctype}'")), 1) == (0, None), ctype


def test_beams_are_said_only_by_a_true_casambm():
    assert says_beams(_header(CASAMBM=True)) is True
    assert says_beams(_header(CASAMBM=False)) is False and says_beams(_header()) is False
    assert says_beams(_header(CASAMBM=1)) is False


def test_the_end_card_ends_the_header_and_a_first_block_must_be_fits():
    block = _cards(("SIMPLE", "T")).encode() + b"END".ljust(80) + b" " * (2880 - 160)
    assert header_end(block) == 160 and header_end(b" " * 2880) is None
    assert header_end(b"ENDX".ljust(80) + b"END".ljust(80)) == 160
    check_first_block(block, "s3://b/c.fits", 0, 0)
    with pytest.raises(FitsFormatError, match=r"^s3://b/c.fits: object ends inside the header of HDU 0 "
                                              r"\(only 2879 bytes at offset 0\); truncated or not FITS$"):
        check_first_block(block[:2879], "s3://b/c.fits", 0, 0)
    with pytest.raises(FitsFormatError, match=r"^s3://b/c.fits: header of HDU 0 is not ASCII text; not FITS$"):
        check_first_block(block[:100] + b"\xff" + block[101:], "s3://b/c.fits", 0, 0)
    check_first_block(block + b"\xff", "s3://b/c.fits", 0, 0)  # only the first block must be text


def test_a_header_astropy_cannot_read_is_one_error_naming_the_hdu():
    assert parse_header(_cards(("NAXIS", "0")).encode() + b"END".ljust(80), "s", 0)["NAXIS"] == 0
    with pytest.raises(FitsFormatError, match=r"^s3://b/c.fits: cannot parse header of HDU 3: "):
        parse_header(b"\xff" * 80, "s3://b/c.fits", 3)


def test_cards_are_read_at_card_starts_only():
    inside = _cards(("SIMPLE", "T"), ("HISTORY", "x CTYPE1 = 'FREQ'"), ("OBJECT", "'M31 END     '"))
    assert axis_roles(inside, 1) == (None, None)  # a CTYPE inside another card's text is not a CTYPE card
    assert header_end((inside + "END".ljust(80)).encode()) == 320
    # a CTYPE card naming an axis the cube lacks is skipped, not the end of the search
    assert axis_roles(_cards(("SIMPLE", "T"), ("CTYPE5", "'FREQ'"), ("CTYPE1", "'FREQ'")), 1) == (0, None)


def test_a_later_hdu_must_start_with_xtension_and_its_layout_keeps_what_it_was_given():
    block = _cards(("SIMPLE", "T")).encode() + b" " * (2880 - 80)
    with pytest.raises(FitsFormatError, match=r"^s3://b/c.fits: no FITS header at offset 5760 for HDU 1 "
                                              r"\(found b'SIMPLE  '\)$"):
        check_first_block(block, "s3://b/c.fits", 1, 5760)
    header = _header(SIMPLE=True, BITPIX=8, NAXIS=1, NAXIS1=5)
    assert _layout(header).header_text == "" and _layout(header, object_bytes=9000).object_bytes == 9000
    given = image_layout(header, source="s", hdu=0, header_offset=0, data_offset=2880, object_bytes=9000,
                         header_text="CARDS")
    assert given.header_text == "CARDS"


# --- BEAMS tables (CASAMBM = T) against the cube's axes --------------------------------------

def _table(nchan: int, npol: int) -> BeamTable:
    return BeamTable(beam_rows(nchan, npol), _cards(("XTENSION", "'BINTABLE'"), ("NCHAN", nchan), ("NPOL", npol))
                     + "END".ljust(80))


def _cube(shape, *ctypes):
    """A FITS layout of `shape` (numpy order) whose CTYPEn are `ctypes` (FITS order, x first)."""
    text = _cards(*[(f"CTYPE{i}", f"'{c}'") for i, c in enumerate(ctypes, 1)])
    return FitsLayout(source="s3://b/c.fits", hdu=0, shape=shape, bitpix=-32, header_offset=0, data_offset=2880,
                      object_bytes=2880 + 4 * math.prod(shape), header_text=text)


def test_a_beams_table_must_have_a_row_per_channel_and_polarisation_of_the_cube():
    cube = _cube((2, 3, 4, 5), "RA---SIN", "DEC--SIN", "FREQ", "STOKES")  # spectral numpy axis 1, Stokes 0
    assert with_beams(cube, _table(3, 2)).beams == _table(3, 2)
    where = r"^s3://b/c.fits: BEAMS table of HDU 0 has "
    with pytest.raises(FitsFormatError, match=where + r"NCHAN = 4 but the spectral axis \(numpy axis 1\) "
                                                      r"has 3 channel\(s\)$"):
        with_beams(cube, _table(4, 2))
    with pytest.raises(FitsFormatError, match=where + r"NPOL = 1 but the Stokes axis \(numpy axis 0\) "
                                                      r"has 2 polarisation\(s\)$"):
        with_beams(cube, _table(3, 1))
    flat = _cube((4, 5), "RA---SIN", "DEC--SIN")
    assert with_beams(flat, _table(1, 1)).beams == _table(1, 1)
    with pytest.raises(FitsFormatError, match=where + r"NCHAN = 2 but the cube \(no spectral axis\) "
                                                      r"has 1 channel\(s\)$"):
        with_beams(flat, _table(2, 1))
    with pytest.raises(FitsFormatError, match=where + r"NPOL = 2 but the cube \(no STOKES axis\) "
                                                      r"has 1 polarisation\(s\)$"):
        with_beams(flat, _table(1, 2))


def test_a_boxs_beams_are_its_channels_and_polarisations_of_the_table():
    cube = _cube((2, 3, 4, 5), "RA---SIN", "DEC--SIN", "FREQ", "STOKES")
    assert cube.box_beams(((0, 1), (0, 3), (0, 4), (0, 5))) is None  # no table
    cube = with_beams(cube, _table(3, 2))
    assert (cube.spectral_axis, cube.stokes_axis) == (1, 0)
    assert cube.box_beams(((1, 2), (1, 3), (0, 4), (0, 5))) == _table(3, 2).cut(1, 3, 1, 2)
    assert cube.box_beams(((0, 1), (1, 3), (0, 4), (0, 5))) == _table(3, 2).cut(1, 3, 0, 1)  # not every polarisation
    no_stokes = dataclasses.replace(_cube((3, 4, 5), "RA---SIN", "DEC--SIN", "VRAD"), beams=_table(3, 2))
    assert (no_stokes.spectral_axis, no_stokes.stokes_axis) == (0, None)
    assert no_stokes.box_beams(((0, 2), (0, 4), (0, 5))) == _table(3, 2).cut(0, 2, 0, 2)  # every polarisation
    flat = with_beams(_cube((4, 5), "RA---SIN", "DEC--SIN"), _table(1, 1))
    assert flat.box_beams(((1, 3), (0, 5))) == _table(1, 1).cut(0, 1, 0, 1)
    many = dataclasses.replace(flat, beams=_table(3, 1))  # a table the cube's axes cannot place
    with pytest.raises(FitsFormatError, match=r"^s3://b/c.fits HDU 0: a BEAMS table of 3 channels but no spectral "
                                              r"axis among the CTYPEs; cannot tell which channels a box keeps$"):
        many.box_beams(((1, 3), (0, 5)))


@pytest.mark.parametrize("key, ndim, axis", [
    ("CRPIX1", 3, 1), ("CRPIX3", 3, 3), ("CRPIX3A", 3, 3), ("CRPIX2Z", 3, 2), ("LTV2", 3, 2),
    ("CRPIX4", 3, None),  # a WCS axis the image does not have: no box moves it
    ("CRPIX12", 12, 12), ("LTV0", 3, None), ("CRPIX0", 3, None), ("CRPIX", 3, None),
    ("CRPIX1AB", 3, None), ("LTV1A", 3, None), ("XCRPIX1", 3, None), ("CRVAL1", 3, None), ("NAXIS1", 3, None),
])
def test_the_keywords_a_box_moves_and_the_axis_each_belongs_to(key, ndim, axis):
    assert shifted_axis(key, ndim) == axis


@pytest.mark.parametrize("keys, has_wcs", [
    (["CTYPE1"], True), (["CRVAL3"], True), (["CDELT2A"], True), (["CUNIT1"], True), (["CD1_2"], True),
    (["PC2_1"], True), (["PC2_1B"], True), (["CTYPE"], True),
    ([], False), (["NAXIS1", "BUNIT", "CRPIX1"], False), (["XCTYPE1"], False), (["CTYPE1AB"], False),
    (["CD1"], False), (["OBJECT", "CRVAL1"], True),
])
def test_which_keywords_make_a_wcs(keys, has_wcs):
    assert has_wcs_keys(keys) is has_wcs
