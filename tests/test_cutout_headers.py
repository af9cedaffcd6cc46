"""Cut-outs other tools trust: every box written from a synthetic cube with a beam per channel opens
in astropy, equals astropy's `section` of the source bit for bit, maps its pixels to the cube's
world coordinates, and carries the BEAMS rows of its channels; the same through the S3 server,
`run --output-dir` and `prestage`; HDF5 attributes give the same world coordinates."""
import dataclasses
import json
import math
import os
import pickle
import tempfile
import warnings

import h5py
import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS
from hypothesis import given, settings, strategies as st

from ingest.errors import ConfigError, FitsFormatError, RegionError
from ingest.formats.beams import parse_beam_table
from ingest.formats.reader import read_any_layout, read_layout_timed
from ingest.outputs.subcubes import output_name, write_cutout, write_subcube
from ingest.testbed.synth import beam_rows, build_header, voxel_values, write_cube
from ingest.testbed.synth_hdf5 import write_hdf5_cube
from ingest.transports import open_transport
from tests.mpitools import child_env, cli, mpiexec

RESTFRQ_HZ = 1.420405752e9
CASES = {  # id: (numpy shape, synth options, FITS axis whose CDELT is made negative)
    "3d-primary": ((9, 14, 12), {"bitpix": -32}, None),
    "4d-stokes-extension": ((7, 3, 10, 11), {"bitpix": 16, "bscale": 0.5, "bzero": 3.0, "stokes": True,
                                             "extension": True}, None),
    "4d-freq-negative-cdelt": ((2, 8, 10, 11), {"bitpix": -64}, 3),
}
# Cards a cut-out's writer changes on purpose; every other card of the source must be kept.
_CHANGED = {"SIMPLE", "XTENSION", "PCOUNT", "GCOUNT", "EXTEND", "CASAMBM", "CHECKSUM", "DATASUM", "HISTORY",
            "COMMENT", ""}


def _write(path, shape, options, negative_axis=None, beams=True):
    options = dict(options)
    bitpix = options.pop("bitpix")
    info = write_cube(path, shape, bitpix, beams=beams, restfrq_hz=RESTFRQ_HZ, **options)
    hdu = 1 if options.get("extension") else 0
    if negative_axis is not None:  # same card length: the data and the BEAMS table stay where they are
        with warnings.catch_warnings(), fits.open(path, mode="update") as f:
            warnings.simplefilter("ignore")
            f[hdu].header[f"CDELT{negative_axis}"] = -abs(f[hdu].header[f"CDELT{negative_axis}"])
    return info, hdu


def _layout(path, hdu):
    with open_transport(str(path)) as transport:
        return read_any_layout(transport, hdu=hdu)


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    root = tmp_path_factory.mktemp("beams")
    out = {}
    for name, (shape, options, negative) in CASES.items():
        path = root / f"{name}.fits"
        _, hdu = _write(path, shape, options, negative)
        out[name] = (str(path), _layout(path, hdu))
    return out


def _raw_box(layout, box) -> np.ndarray:
    """The box's raw stored values from the synth oracle, as a read hands them to the writer."""
    index = np.arange(math.prod(layout.shape), dtype=np.int64).reshape(layout.shape)
    return voxel_values(index[tuple(slice(a, b) for a, b in box)], layout.bitpix).astype(layout.raw_dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("=")).view(f"u{a.dtype.itemsize}")


def _cube_rows(layout, box) -> np.ndarray:
    """The cube's BEAMS rows for the box's channels and polarisations, CHAN and POL from 0 (the oracle)."""
    nchan, npol = layout.shape[layout.spectral_axis], (layout.shape[layout.stokes_axis] if layout.stokes_axis
                                                       is not None else 1)
    rows = beam_rows(nchan, npol)
    (c0, c1) = box[layout.spectral_axis]
    (p0, p1) = box[layout.stokes_axis] if layout.stokes_axis is not None else (0, npol)
    keep = rows[(rows["CHAN"] >= c0) & (rows["CHAN"] < c1) & (rows["POL"] >= p0) & (rows["POL"] < p1)]
    keep["CHAN"] -= c0
    keep["POL"] -= p0
    return keep, c1 - c0, p1 - p0


def check_cutout(path, source_path, layout, box, rng):
    """What a tool that trusts the cut-out relies on, against astropy's reading of the source."""
    ndim = len(box)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fits.open(source_path) as src, fits.open(path) as cut:
            cut.verify("exception")
            source_hdu, hdr = src[layout.hdu], cut[0].header
            got, want = cut[0].data, source_hdu.section[tuple(slice(a, b) for a, b in box)]
            assert got.shape == want.shape and got.dtype.itemsize == want.dtype.itemsize
            assert np.array_equal(_bits(got), _bits(want))  # bit for bit, as astropy returns both
            # (The headers as stored: astropy drops BSCALE and BZERO from a header once its data is scaled.)
            src_cards, cut_cards = fits.getheader(source_path, layout.hdu), fits.getheader(path)
            for key in set(src_cards.keys()) - _CHANGED:
                if not key.startswith(("NAXIS", "CRPIX")):
                    assert cut_cards[key] == src_cards[key], key
            # Pixels of the cut-out have the cube's world coordinates; a round trip lands within 1e-6 px.
            wcs_cut, wcs_cube = WCS(hdr), WCS(source_hdu.header)
            start = np.array([box[ndim - n][0] for n in range(1, ndim + 1)], dtype=float)
            extents = np.array([box[ndim - n][1] - box[ndim - n][0] for n in range(1, ndim + 1)])
            pix = rng.uniform(-0.5, extents - 0.5, size=(20, ndim))
            world = wcs_cut.wcs_pix2world(pix, 0)
            np.testing.assert_allclose(world, wcs_cube.wcs_pix2world(pix + start, 0), rtol=1e-12, atol=1e-9)
            np.testing.assert_allclose(wcs_cube.wcs_world2pix(world, 0) - start, pix, rtol=0, atol=1e-6)
            # The BEAMS table: the cube's rows of the box's channels, CHAN renumbered from 0.
            rows, nchan, npol = _cube_rows(layout, box)
            assert hdr["CASAMBM"] is True and [h.name for h in cut] == ["PRIMARY", "BEAMS"]
            table = cut["BEAMS"]
            assert (table.header["NCHAN"], table.header["NPOL"]) == (nchan, npol)
            assert table.columns.units[:3] == ["arcsec", "arcsec", "deg"]
            for name in rows.dtype.names:
                assert np.array_equal(table.data[name], rows[name]), name


def _boxes(shape):
    def axis(n):
        return st.integers(0, n - 1).flatmap(lambda a: st.tuples(st.just(a), st.integers(a + 1, n)))
    return st.tuples(*[axis(n) for n in shape])


@pytest.mark.parametrize("name", list(CASES))
def test_random_boxes_open_in_astropy_with_the_cubes_pixels_world_and_beams(cubes, name):
    source_path, layout = cubes[name]

    @settings(max_examples=15, deadline=None)
    @given(box=_boxes(layout.shape), seed=st.integers(0, 2**32 - 1))
    def check(box, seed):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "cutout.fits")
            nbytes = write_cutout(path, box, _raw_box(layout, box), layout, object_name="J0959-3015")
            assert nbytes == os.path.getsize(path) and nbytes % 2880 == 0
            assert os.listdir(scratch) == ["cutout.fits"]
            assert fits.getheader(path)["OBJECT"] == "J0959-3015"
            check_cutout(path, source_path, layout, box, np.random.default_rng(seed))

    check()


def test_run_output_uses_the_same_writer(cubes, tmp_path):
    source_path, layout = cubes["4d-stokes-extension"]
    box = ((2, 6), (1, 3), (0, 10), (4, 11))
    written = write_subcube(tmp_path, 3, box, _raw_box(layout, box), layout)
    assert os.path.basename(written) == output_name(3, box)
    check_cutout(written, source_path, layout, box, np.random.default_rng(1))


def test_extra_cards_are_added_and_the_writers_cards_refused(cubes, tmp_path):
    _, layout = cubes["3d-primary"]
    box = ((0, 3), (0, 14), (0, 12))
    path = tmp_path / "c.fits"
    write_cutout(path, box, _raw_box(layout, box), layout, extra_cards={"ORIGIN": ("ingest cutouts", "made by"),
                                                                         "HISTORY": "from catalogue row 7"})
    header = fits.getheader(path)
    assert header["ORIGIN"] == "ingest cutouts" and "from catalogue row 7" in str(header["HISTORY"])
    for key in ("NAXIS2", "CRPIX1", "BITPIX", "CASAMBM"):
        with pytest.raises(ConfigError, match=key):
            write_cutout(tmp_path / "x.fits", box, _raw_box(layout, box), layout, extra_cards=[(key, 1)])
    assert not (tmp_path / "x.fits").exists()


def test_a_failed_write_leaves_nothing_and_an_old_file_whole(cubes, tmp_path, monkeypatch):
    _, layout = cubes["3d-primary"]
    box = ((1, 4), (2, 9), (3, 12))
    path = tmp_path / "c.fits"
    write_cutout(path, box, _raw_box(layout, box), layout, object_name="old")
    before = path.read_bytes()

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ingest.atomic.os.fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        write_cutout(path, box, _raw_box(layout, box), layout, object_name="new")
    with pytest.raises(OSError, match="No space"):
        write_cutout(tmp_path / "fresh.fits", box, _raw_box(layout, box), layout)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["c.fits"]


def test_no_table_means_no_casambm(tmp_path, cubes):
    path = tmp_path / "plain.fits"
    _write(path, (6, 8, 7), {"bitpix": -32}, beams=False)
    layout = _layout(path, 0)
    assert layout.beams is None and layout.spectral_axis == 0
    box = ((1, 3), (0, 8), (2, 7))
    write_cutout(tmp_path / "a.fits", box, _raw_box(layout, box), layout)
    with fits.open(tmp_path / "a.fits") as f:
        assert len(f) == 1 and "CASAMBM" not in f[0].header
    # A layout that lost its table (a tiled cube's, say) must not promise one.
    _, beamy = cubes["3d-primary"]
    bare = dataclasses.replace(beamy, beams=None)
    write_cutout(tmp_path / "b.fits", box, _raw_box(bare, box), bare)
    with fits.open(tmp_path / "b.fits") as f:
        assert len(f) == 1 and "CASAMBM" not in f[0].header


def test_beam_table_cuts_pickles_and_refuses_bad_ranges(cubes):
    _, layout = cubes["4d-stokes-extension"]
    table = layout.beams
    again = pickle.loads(pickle.dumps(layout))
    assert again == layout and again.beams == table and not again.beams.rows.flags.writeable
    cut = table.cut(2, 5, 1, 3)
    assert (cut.nchan, cut.npol, len(cut.rows)) == (3, 2, 6)
    assert set(cut.rows["CHAN"]) == {0, 1, 2} and set(cut.rows["POL"]) == {0, 1}
    for bad in ((3, 3), (0, 8), (-1, 2)):
        with pytest.raises(RegionError, match="channels"):
            table.cut(*bad)
    no_bpa = fits.BinTableHDU.from_columns([c for c in table.to_hdu().columns if c.name != "BPA"],
                                           header=table.header)
    with pytest.raises(FitsFormatError, match="s3://b/cube.fits: BEAMS table lacks column.* BPA"):
        parse_beam_table(_extension_bytes(no_bpa), "s3://b/cube.fits")
    short = table.to_hdu()
    short.header["NCHAN"] = 6
    with pytest.raises(FitsFormatError, match="NCHAN x NPOL"):
        parse_beam_table(_extension_bytes(short), "s3://b/cube.fits")


def _extension_bytes(hdu) -> bytes:
    """An extension's bytes as they follow an image in a file."""
    with tempfile.TemporaryFile() as fh:
        fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(fh)
        fh.seek(2880)  # past the empty primary header
        return fh.read()


@pytest.fixture(scope="module")
def stored(s3_server, tmp_path_factory):
    """A cube with beams, the same without its table, one cut inside the table, and one without beams."""
    root = tmp_path_factory.mktemp("beams-s3")
    bucket = s3_server.make_bucket("cutout-headers")
    client = s3_server.client()
    info, _ = _write(root / "cube.fits", (12, 16, 14), {"bitpix": -32})
    data = (root / "cube.fits").read_bytes()
    objects = {"cube.fits": data, "no-table.fits": data[:info["beams_offset"]],
               "cut-table.fits": data[:info["beams_offset"] + 2880 + 10]}
    _write(root / "plain.fits", (12, 16, 14), {"bitpix": -32}, beams=False)
    objects["plain.fits"] = (root / "plain.fits").read_bytes()
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=f"survey/{key}", Body=body)
    return {"bucket": bucket, "path": str(root / "cube.fits"), **{k: f"s3://{bucket}/survey/{k}" for k in objects}}


def test_a_cube_read_through_s3_carries_its_table_and_a_missing_one_is_named(stored, s3_env):
    timings = {}
    for key in ("cube.fits", "plain.fits"):
        timings[key] = []
        with open_transport(stored[key], "s3") as transport:
            layout, _ = read_layout_timed(transport, 0, timings=timings[key])
        if key == "cube.fits":
            assert layout.beams is not None and (layout.beams.nchan, layout.beams.npol) == (12, 1)
            assert np.array_equal(layout.beams.rows["BMAJ"], beam_rows(12, 1)["BMAJ"])
        else:
            assert layout.beams is None
    assert len(timings["plain.fits"]) == 1  # no CASAMBM: the header's one block, no extra request
    assert len(timings["cube.fits"]) == 2  # CASAMBM: and the BEAMS header (its rows in one more read)
    for key, message in (("no-table.fits", "no BEAMS table follows"), ("cut-table.fits", "truncated")):
        with open_transport(stored[key], "s3") as transport, pytest.raises(FitsFormatError) as caught:
            read_any_layout(transport)
        assert message in str(caught.value) and key in str(caught.value) and "CASAMBM" in str(caught.value)


def _beams_of(path):
    with fits.open(path) as f:
        return f[0].header.get("CASAMBM"), f["BEAMS"].header["NCHAN"], np.array(f["BEAMS"].data)


def test_run_output_dir_cuts_the_table_per_rank(stored, s3_server, tmp_path):
    out_dir, report_path = tmp_path / "out", tmp_path / "r.json"
    proc, _ = mpiexec(2, ["run", "--source", stored["cube.fits"], "--grid", "1x1x2", "--output-dir", out_dir,
                          "--report", report_path, "--no-progress", "--threads", "2"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    layout = _layout(stored["path"], 0)
    for rank in report["ranks"]:
        box = tuple(tuple(b) for b in rank["box"])
        assert box[0] != (0, 12)  # each rank has some of the channels
        check_cutout(rank["output_path"], stored["path"], layout, box, np.random.default_rng(0))


@pytest.mark.parametrize("layout_name", ["subcubes", "frame"])
def test_prestage_outputs_carry_the_table(stored, s3_server, tmp_path, layout_name):
    out_dir = tmp_path / "stage"
    proc, _ = mpiexec(2, ["prestage", "--source", stored["cube.fits"], "--output-dir", out_dir, "--layout",
                          layout_name, "--grid", "1x2x2", "--no-progress", "--threads", "2"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out_dir / "manifest.json").read_text())
    layout = _layout(stored["path"], 0)
    if layout_name == "subcubes":
        for region in manifest["regions"]:
            box = tuple(tuple(b) for b in region["box"])
            check_cutout(region["files"]["data"], stored["path"], layout, box, np.random.default_rng(2))
        return
    staged = out_dir / "cube.fits"  # the whole cube: the full table after its data
    casambm, nchan, rows = _beams_of(staged)
    assert casambm is True and nchan == 12 and np.array_equal(rows["BMAJ"], beam_rows(12, 1)["BMAJ"])
    assert np.array_equal(fits.getdata(staged), fits.getdata(stored["path"]))


def _attrs_header(attrs, shape) -> fits.Header:
    """An HDF5 dataset's attributes read back into a FITS header (what a tool reading them does)."""
    header = fits.Header()
    header["NAXIS"] = len(shape)
    for n in range(1, len(shape) + 1):
        header[f"NAXIS{n}"] = shape[len(shape) - n]
    for key, value in attrs.items():
        value = value.item() if isinstance(value, np.generic) else value
        value = value.decode() if isinstance(value, bytes) else value
        if len(key) <= 8 and key == key.upper() and isinstance(value, (int, float, str)) and key not in header:
            header[key] = value
    return header


@pytest.mark.parametrize("idia", [False, True])
def test_hdf5_attributes_give_the_cubes_world_coordinates(tmp_path, idia):
    path, shape = tmp_path / "cube.h5", (10, 12, 9)
    if idia:  # CARTA's layout: /0/DATA (1, z, y, x), the FITS header's keys as attributes
        write_hdf5_cube(path, shape, idia=True)
    else:  # a contiguous dataset with a primary and an alternate ('A', pixel-linear) WCS
        with h5py.File(path, "w") as f:
            dset = f.create_dataset("/cube", data=np.arange(math.prod(shape), dtype=">f4").reshape(shape))
            for key, value in build_header(shape).items():
                if key.startswith(("CTYPE", "CRPIX", "CRVAL", "CDELT", "CUNIT", "RADESYS", "SPECSYS")):
                    dset.attrs[key] = value
            for n in range(1, 4):
                dset.attrs.update({f"CTYPE{n}A": f"PIX{n}", f"CRPIX{n}A": 1.0, f"CRVAL{n}A": 0.0, f"CDELT{n}A": 1.0})
    layout = _layout(path, 0)
    box = ((0, 1), (3, 8), (2, 11), (4, 9)) if idia else ((3, 8), (2, 11), (4, 9))
    with h5py.File(path, "r") as f:
        raw = f[layout.dataset][tuple(slice(a, b) for a, b in box)]
    out = tmp_path / "cut.h5"
    assert write_cutout(out, box, raw, layout, object_name="J1") == os.path.getsize(out)
    with h5py.File(path, "r") as f, h5py.File(out, "r") as g:
        source, cut = f[layout.dataset], g[layout.dataset]
        assert np.array_equal(cut[...], raw) and cut.attrs["OBJECT"] == "J1"
        cube_header, cut_header = _attrs_header(source.attrs, source.shape), _attrs_header(cut.attrs, cut.shape)
    ndim = len(box)
    start = np.array([box[ndim - n][0] for n in range(1, ndim + 1)], dtype=float)
    pix = np.random.default_rng(3).uniform(0, 4, size=(15, ndim))
    for key in ([" ", "A"] if not idia else [" "]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wcs_cut, wcs_cube = WCS(cut_header, key=key), WCS(cube_header, key=key)
        world = wcs_cut.wcs_pix2world(pix, 0)
        np.testing.assert_allclose(world, wcs_cube.wcs_pix2world(pix + start, 0), rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(wcs_cube.wcs_world2pix(world, 0) - start, pix, rtol=0, atol=1e-6)


def test_synth_command_writes_a_cube_with_beams(tmp_path):
    out = tmp_path / "askap.fits"
    proc = cli(["synth", out, "--shape", "10x9x6", "--beams", "--restfrq", "1.420405752e9"], child_env())
    assert proc.returncode == 0, proc.stderr
    assert "BEAMS table" in proc.stdout
    with fits.open(out) as f:
        assert f[0].header["RESTFRQ"] == RESTFRQ_HZ and f[0].header["CASAMBM"] is True
        assert np.array_equal(f["BEAMS"].data["BMIN"], beam_rows(6, 1)["BMIN"])
    proc = cli(["synth", tmp_path / "x.h5", "--shape", "10x9x6", "--beams", "--format", "hdf5"], child_env())
    assert proc.returncode != 0 and "--beams" in proc.stderr
    with pytest.raises(ConfigError, match="spectral axis"):
        write_cube(tmp_path / "image.fits", (9, 10), beams=True)


def _astropy_header(path, hdu, box, object_name) -> fits.Header:
    """The oracle, from astropy alone: the cube's HDU header as astropy reads it, made primary
    (XTENSION -> SIMPLE, no PCOUNT/GCOUNT, EXTEND since a BEAMS table follows), NAXISn the box's
    extents, CRPIXn less the box's start along FITS axis n, OBJECT the name; rendered by astropy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        header = fits.getheader(path, hdu)
    ndim = header["NAXIS"]
    if "XTENSION" in header:
        del header["XTENSION"]
        header.insert(0, ("SIMPLE", True, "conforms to FITS standard"))
        del header["PCOUNT"], header["GCOUNT"]
        header.insert(f"NAXIS{ndim}", ("EXTEND", True), after=True)
    for n in range(1, ndim + 1):
        start, stop = box[ndim - n]
        header[f"NAXIS{n}"] = stop - start
        header[f"CRPIX{n}"] = header[f"CRPIX{n}"] - start
    if object_name is not None:
        header["OBJECT"] = object_name
    return fits.Header.fromstring(header.tostring())


def _cards(header: fits.Header) -> list[tuple]:
    """(keyword, value) in order, HISTORY aside (it names the file and the box in prose)."""
    return [(card.keyword, card.value) for card in header.cards if card.keyword != "HISTORY"]


@pytest.mark.parametrize("name", list(CASES))
def test_patched_headers_equal_the_ones_astropy_builds(cubes, name):
    """CutoutHeaders (cards re-rendered from a template per header shape), for random boxes, with
    and without OBJECT, long names included: the cards astropy gives when it takes the cube's
    header and sets NAXISn and CRPIXn itself, each shifted card as astropy renders it; and the very
    bytes subcube_header gives (the patched path and the slow one agree)."""
    from ingest.outputs.cutout_headers import CutoutHeaders
    from ingest.outputs.subcubes import subcube_header

    path, layout = cubes[name]
    headers = CutoutHeaders(layout)
    names = st.one_of(st.none(), st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=90))

    @settings(max_examples=60, deadline=None)
    @given(box=_boxes(layout.shape), object_name=names)
    def check(box, object_name):
        got = headers.head(box, object_name)
        parsed = fits.Header.fromstring(got.decode("ascii"))
        want = _astropy_header(path, layout.hdu, box, object_name)
        assert _cards(parsed) == _cards(want)
        for n in range(1, len(box) + 1):
            for key in (f"NAXIS{n}", f"CRPIX{n}"):
                assert parsed.cards[key].image == want.cards[key].image, key
        assert got == subcube_header(layout, box, object_name=object_name).tostring().encode("ascii")

    check()
    box = tuple((0, n) for n in layout.shape)
    headers.head(box, "a name")  # the template with OBJECT made: the next header is patched
    for bad in ("M\u00e9n", "tab\there"):  # astropy's own refusal, from the patched path too
        with pytest.raises(ConfigError, match="object_name: .*printable ASCII"):
            subcube_header(layout, box, object_name=bad)
        with pytest.raises(ConfigError, match="object_name: .*printable ASCII"):
            headers.head(box, bad)


def test_a_wcs_axis_beyond_naxis_keeps_its_reference_pixel_in_every_header(tmp_path):
    """A 3-D image whose WCS describes a 4th, degenerate axis (WCSAXES = 4, CRPIX4) as a Stokes
    plane dropped from NAXIS: no box moves that axis, so CRPIX4 stays the cube's in every header,
    the patched ones of CutoutHeaders as in subcube_header's (the patched path once shifted it by
    the x start, read as FITS axis ndim - 4)."""
    from ingest.outputs.cutout_headers import CutoutHeaders
    from ingest.outputs.subcubes import subcube_header

    path = tmp_path / "degenerate.fits"
    write_cube(path, (6, 8, 10), -32)
    with warnings.catch_warnings(), fits.open(path, mode="update") as f:
        warnings.simplefilter("ignore")
        f[0].header.update({"WCSAXES": 4, "CTYPE4": "STOKES", "CRPIX4": 1.0, "CRVAL4": 1.0, "CDELT4": 1.0})
    layout = _layout(path, 0)
    headers = CutoutHeaders(layout)
    for box in (((0, 6), (0, 8), (2, 10)), ((1, 6), (2, 8), (3, 10)), ((1, 6), (2, 8), (4, 9))):
        got = headers.head(box)
        assert got == subcube_header(layout, box).tostring().encode("ascii")
        parsed = fits.Header.fromstring(got.decode("ascii"))
        assert parsed["CRPIX4"] == 1.0 and parsed["CRPIX1"] != 0
