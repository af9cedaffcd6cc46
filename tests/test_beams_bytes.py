"""A cut-out's BEAMS table written by patching cards (ingest.outputs.cutout_headers.CutoutBeams) is
byte for byte the table astropy writes (`BeamTable.cut(...).to_bytes()`, the reference): random
CASA-like tables (units or none, one or several polarisations, rows in any order, extra columns
of every kind, free-format count cards) cut to random channel and polarisation ranges, many cuts
of one table in a row so that both the first box of a shape and the patched later ones are seen."""
import io
import warnings

import numpy as np
import pytest
from astropy.io import fits
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest.errors import RegionError
from ingest.formats.beams import BeamTable, parse_beam_table
from ingest.formats.reader import read_any_layout
from ingest.outputs.cutout_headers import CutoutBeams, CutoutHeaders
from ingest.testbed.synth import write_cube
from ingest.transports import open_transport

# Extra columns a table may carry besides CASA's five: plain numbers (patched) and the kinds left to
# astropy (strings, scaled, logical), so the fallback is compared too.
_EXTRA = {"plain-3E": ("3E", {}), "plain-1D": ("1D", {}), "plain-1I": ("1I", {}), "plain-1K": ("1K", {}),
          "plain-1B": ("1B", {}), "text-8A": ("8A", {}), "scaled-1E": ("1E", {"bscale": 0.5, "bzero": 3.0}),
          "unsigned-1J": ("1J", {"bzero": 2 ** 31}), "logical-1L": ("1L", {})}


def _values(rng, tform: str, n: int):
    repeat, letter = int(tform[:-1] or 1), tform[-1]
    shape = (n,) if repeat == 1 or letter == "A" else (n, repeat)
    if letter in "ED":
        values = rng.normal(10, 3, shape)
        values.flat[rng.integers(0, values.size, 2)] = [np.nan, np.inf]
        return values.astype("f4" if letter == "E" else "f8")
    if letter == "A":
        return np.array([f"b{k}" for k in rng.integers(0, 10 ** 6, n)])
    if letter == "L":
        return rng.integers(0, 2, n).astype(bool)
    return rng.integers(0, 100, shape).astype({"B": "u1", "I": "i2", "J": "i4", "K": "i8"}[letter])


@st.composite
def tables(draw):
    """A BEAMS extension's bytes as some writer left them, parsed as ingest reads a cube's table."""
    nchan = draw(st.integers(1, 300))
    npol = draw(st.sampled_from([1, 1, 2, 4]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    float_form = draw(st.sampled_from(["1E", "1D"]))
    int_form = draw(st.sampled_from(["1J", "1J", "1I", "1K"]))
    units = draw(st.booleans())
    pol, chan = np.divmod(np.arange(nchan * npol), nchan)
    if draw(st.booleans()):  # some writers list channel by channel, or in no order at all
        order = rng.permutation(nchan * npol) if draw(st.booleans()) else np.lexsort((pol, chan))
        pol, chan = pol[order], chan[order]
    columns = [fits.Column(name=name, format=float_form, unit=unit if units else None,
                           array=_values(rng, float_form, nchan * npol))
               for name, unit in (("BMAJ", "arcsec"), ("BMIN", "arcsec"), ("BPA", "deg"))]
    columns += [fits.Column(name=name, format=int_form, array=values) for name, values in (("CHAN", chan), ("POL", pol))]
    for extra in draw(st.lists(st.sampled_from(sorted(_EXTRA)), max_size=2, unique=True)):
        tform, options = _EXTRA[extra]
        values = _values(rng, tform, nchan * npol)
        if "bscale" in options:  # physical values: stored = (value - bzero) / bscale
            values = options["bzero"] + options["bscale"] * values
        columns.insert(draw(st.integers(0, len(columns))),
                       fits.Column(name=extra.upper().replace("-", "_"), format=tform, array=values, **options))
    hdu = fits.BinTableHDU.from_columns(columns, name="BEAMS")
    if draw(st.booleans()):
        hdu.header["EXTVER"] = (1, "extension version")
    comments = draw(st.booleans())
    hdu.header["NCHAN"] = (nchan, "number of channels") if comments else nchan
    hdu.header["NPOL"] = (npol, "number of polarizations") if comments else npol
    if draw(st.booleans()):
        hdu.header["DATASUM"] = ("0", "stale: dropped by every cut")
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(buffer)
    raw = buffer.getvalue()[2880:]  # the primary header is one block
    if draw(st.booleans()):  # free-format count cards, as a hand-written header may have
        raw = raw.replace(f"NCHAN   = {nchan:>20}".encode(), f"NCHAN   = {nchan}".ljust(30).encode())
        raw = raw.replace(f"NPOL    = {npol:>20}".encode(), f"NPOL    = {npol}".ljust(30).encode())
    return parse_beam_table(raw, "hypothesis")


@st.composite
def ranges(draw, nchan: int, npol: int):
    """(chan_start, chan_stop, pol_start, pol_stop) within the table, whole axes often."""
    c0 = draw(st.one_of(st.just(0), st.integers(0, nchan - 1)))
    c1 = draw(st.one_of(st.just(nchan), st.integers(c0 + 1, nchan)))
    p0 = draw(st.one_of(st.just(0), st.integers(0, npol - 1)))
    p1 = draw(st.one_of(st.just(npol), st.integers(p0 + 1, npol)))
    return c0, c1, p0, p1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(table=tables(), data=st.data())
def test_patched_table_is_astropys(table, data):
    cuts = CutoutBeams(table)
    for c0, c1, p0, p1 in data.draw(st.lists(ranges(table.nchan, table.npol), min_size=1, max_size=6)):
        assert cuts.cut_bytes(c0, c1, p0, p1) == table.cut(c0, c1, p0, p1).to_bytes(), (c0, c1, p0, p1)
    assert cuts.cut_bytes(0, table.nchan) == table.cut(0, table.nchan).to_bytes()  # pol_stop None: every one
    plain = not any(name.split("_")[0] in ("TEXT", "SCALED", "UNSIGNED", "LOGICAL") for name in table.rows.dtype.names)
    # a table of plain numbers is patched after each shape's first box, never left to astropy
    assert (cuts._fits_dtype is not None) == plain
    assert not plain or None not in cuts._templates.values()


def test_casa_columns_are_patched(tmp_path, monkeypatch):
    """The columns CASA writes take the patched path (else the equality above proves nothing about
    it): after the first box of a shape, astropy is not asked again."""
    path = tmp_path / "cube.fits"
    write_cube(path, (40, 3, 5, 6), -32, beams=True, stokes=True)
    with open_transport(str(path)) as transport:
        table = read_any_layout(transport, hdu=0).beams
    expected = table.cut(5, 40, 0, 1).to_bytes()
    cuts = CutoutBeams(table)
    assert cuts.cut_bytes(2, 9, 1, 2) == table.cut(2, 9, 1, 2).to_bytes()

    def astropy_asked(*args):
        raise AssertionError(f"BeamTable.cut{args}: the patched path should have written it")

    monkeypatch.setattr(BeamTable, "cut", astropy_asked)
    assert cuts.cut_bytes(5, 40, 0, 1) == expected


@pytest.mark.parametrize("chan_start, chan_stop, pol_start, pol_stop",
                         [(0, 0, 0, 1), (3, 2, 0, 1), (-1, 4, 0, 1), (0, 41, 0, 1), (0, 4, 1, 1), (0, 4, 0, 2)])
def test_range_outside_the_table_is_refused_as_cut_refuses_it(tmp_path, chan_start, chan_stop, pol_start, pol_stop):
    path = tmp_path / "cube.fits"
    write_cube(path, (40, 5, 6), -32, beams=True)
    with open_transport(str(path)) as transport:
        table = read_any_layout(transport, hdu=0).beams
    cuts = CutoutBeams(table)
    cuts.cut_bytes(1, 5)  # a template of the shape exists
    with pytest.raises(RegionError) as expected:
        table.cut(chan_start, chan_stop, pol_start, pol_stop)
    with pytest.raises(RegionError) as got:
        cuts.cut_bytes(chan_start, chan_stop, pol_start, pol_stop)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("shape, options", [((30, 7, 8), {}), ((9, 3, 7, 8), {"stokes": True}),
                                            ((3, 9, 7, 8), {}), ((30, 7, 8), {"beams": False})])
def test_cutout_headers_tail_is_box_beams(tmp_path, shape, options):
    """CutoutHeaders.tail(box) is layout.box_beams(box).to_bytes(): channels along the spectral axis,
    polarisations along the Stokes axis (every one without it), b'' for a cube without a table."""
    path = tmp_path / "cube.fits"
    write_cube(path, shape, -32, **{"beams": True, **options})
    with open_transport(str(path)) as transport:
        layout = read_any_layout(transport, hdu=0)
    headers = CutoutHeaders(layout)
    rng = np.random.default_rng(5)
    for _ in range(12):
        box = []
        for n in shape:
            a = int(rng.integers(0, n))
            box.append((a, int(rng.integers(a + 1, n + 1))))
        beams = layout.box_beams(box)
        assert headers.tail(box) == (beams.to_bytes() if beams is not None else b"")
