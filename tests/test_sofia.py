"""SoFiA-2 parameter files, SoFiA-X config.ini, input.region text, and the `sofia` stand-in."""
from __future__ import annotations

import configparser
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from astropy.io import fits

from ingest.errors import ConfigError
from ingest.outputs import sofia
from tests import sofia_checker

CHECKER = os.path.join(os.path.dirname(__file__), "sofia_checker.py")
TEMPLATE = (
    "# SoFiA-2 template\n"
    "pipeline.verbose   =  false\n"
    "\n"
    "input.data         =  old.fits   # replaced\n"
    "input.region       =\n"
    "input.gain         =  \n"
    "  # indented comment\n"
    "scfind.kernelsXY   =  0, 3, 6\n"
    "output.filename    =  old\n"
)


def write(path, text, mode="w"):
    with open(path, mode) as fh:
        fh.write(text)
    return str(path)


def sofiax_reads(text):
    """The parameters as SoFiA-X parses them (configparser under a dummy section)."""
    parser = configparser.RawConfigParser()
    parser.read_string("[dummy_section]\n" + text)
    return dict(parser["dummy_section"])


def render(template, **over):
    kw = dict(data_path="/d/cube.fits", companions={}, region_text="0, 9, 0, 9, 0, 4",
              output_directory="/d/out", output_filename="run_001")
    kw.update(over)
    return sofia.render_par(template, **kw)


def test_round_trip_keeps_comments_order_and_replaces_in_place(tmp_path):
    template = sofia.read_template(write(tmp_path / "t.par", TEMPLATE))
    assert template.text == TEMPLATE and template.value("input.data") == "old.fits"
    text = render(template, companions={"weights": "/d/w.fits"})
    lines = text.splitlines()
    assert lines[:9] == ["# SoFiA-2 template", "pipeline.verbose   =  false", "",
                         "input.data         =  /d/cube.fits", "input.region       = 0, 9, 0, 9, 0, 4",
                         "input.gain         =  ", "  # indented comment", "scfind.kernelsXY   =  0, 3, 6",
                         "output.filename    =  run_001"]
    assert lines[9].startswith("# Set by ingest") and lines[10:] == [
        "input.weights = /d/w.fits", "output.directory = /d/out"]
    again = sofia.read_template(write(tmp_path / "r.par", text))
    parsed = sofia_checker.read_par(again.path)  # as SoFiA-2 reads it
    assert parsed["input.data"] == "/d/cube.fits" and parsed["scfind.kernelsXY"] == "0, 3, 6"
    assert sofiax_reads(text)["input.region"] == "0, 9, 0, 9, 0, 4"
    assert sofiax_reads(render(template, region_text=None))["input.region"] == ""


def test_crlf_and_missing_final_newline_are_kept(tmp_path):
    template = sofia.read_template(write(tmp_path / "t.par", b"input.data = a.fits\r\nx.y = 1", "wb"))
    text = render(template)
    assert text.startswith("input.data = /d/cube.fits\r\nx.y = 1\r\n# Set by ingest")
    assert "input.region = 0, 9, 0, 9, 0, 4\r\n" in text


@pytest.mark.parametrize("content, message", [
    (b"\x00\x01binary", "binary"),
    (b"input.data = caf\xe9\n", "not UTF-8"),
    (b"SIMPLE  =                    T" + b" " * 50, "FITS file"),
    (b"input.data = a\njust words\n", "line 2: 'just words' is not 'key = value'"),
    (b"input.data = a\nbad key = 1\n", "line 2: invalid key 'bad key'"),
    (b"input.data = a\n  x.y = 1\n", "line 2: indented setting"),
    (b"input.data = a\n-x.y = 1\n", "line 2: starts with '-'"),
    ("\ufeffinput.data = a\n".encode(), "line 1: starts with '\\ufeff' (a byte-order mark)"),
    (b"input.data = a\nx.y = 1\nX.Y = 2\n", "line 3: key 'X.Y' is set again (first on line 2)"),
    (b"x.y = 1\n", "no input.data key"),
    (b"input.data = " + b"a" * 1010 + b"\n", "line 1: longer than 1022 bytes"),
])
def test_template_errors_name_file_line_and_key(tmp_path, content, message):
    path = write(tmp_path / "bad.par", content, "wb")
    with pytest.raises(ConfigError, match="bad.par") as info:
        sofia.read_template(path)
    assert message in str(info.value)


def test_unreadable_template(tmp_path):
    for path in (tmp_path / "missing.par", tmp_path):
        with pytest.raises(ConfigError, match=f"{path}: cannot read it"):
            sofia.read_template(path)


@pytest.mark.parametrize("over, message", [
    (dict(companions={"flags": "/f"}), "unknown companion(s) 'flags'; valid: weights (input.weights), "
                                       "noise (input.noise), mask (input.mask), gain (input.gain)"),
    (dict(data_path="/d/a#b.fits"), "input.data = '/d/a#b.fits' contains '#'"),
    (dict(data_path=" /d/a.fits"), "input.data = ' /d/a.fits' has surrounding whitespace"),
    (dict(companions={"noise": "/d/n\n.fits"}), "input.noise = '/d/n\\n.fits' has surrounding"),
    (dict(output_filename="a/b"), "output.filename = 'a/b' contains '/'"),
    (dict(region_text="0, 9, 0, 9"), "input.region = '0, 9, 0, 9' is not six"),
    (dict(region_text="5, 4, 0, 9, 0, 1"), "has a minimum above its maximum"),
    (dict(data_path="/" + "d" * 1010), "input.data line would exceed SoFiA-2's 1022-byte"),
])
def test_render_errors(tmp_path, over, message):
    template = sofia.read_template(write(tmp_path / "t.par", TEMPLATE))
    with pytest.raises(ConfigError, match="t.par") as info:
        render(template, **over)
    assert message in str(info.value)


def test_template_companion_without_staged_companion_is_refused(tmp_path):
    template = sofia.read_template(write(tmp_path / "t.par", TEMPLATE + "input.mask = m.fits\n"))
    with pytest.raises(ConfigError, match="sets input.mask = m.fits but no mask companion"):
        render(template)


def test_region_text():
    assert sofia.region_text([(2, 5), (10, 20), (0, 7)]) == "0, 6, 10, 19, 2, 4"
    assert sofia.region_text([(0, 1), (2, 5), (10, 20), (0, 7)]) == "0, 6, 10, 19, 2, 4"
    assert sofia.region_text([(2, 5), (0, 1), (10, 20), (0, 7)]) == "0, 6, 10, 19, 2, 4"  # NAXIS3 = 1
    for box, message in [([(0, 2), (1, 3), (0, 4), (0, 4)], "NAXIS3 or NAXIS4 = 1"),
                         ([(0, 4), (0, 4)], "has 2 axes"), ([(0, 1), (3, 3), (0, 1)], "axis 1 [3, 3)"),
                         ([(0, 1), (0, 1), (-1, 1)], "negative"), ([(0, 1.5)] * 3, "integer")]:
        with pytest.raises(ConfigError, match="input.region") as info:
            sofia.region_text(box)
        assert message in str(info.value)


def test_par_file_names_and_the_999_limit(tmp_path):
    assert sofia.par_file_name(0) == "sofia_001.par" and sofia.par_file_name(998) == "sofia_999.par"
    for bad in (-1, 999):
        with pytest.raises(ConfigError, match="s2p_setup's limit of 999"):
            sofia.par_file_name(bad)
    template = sofia.read_template(write(tmp_path / "t.par", TEMPLATE))
    regions = [dict(index0=i, data_path="/c.fits", companions={}, region_text=None, run_name="r")
               for i in range(1000)]
    with pytest.raises(ConfigError, match="1000 regions; s2p_setup's limit is 999"):
        sofia.write_par_files(tmp_path / "pars", template, regions)
    assert not (tmp_path / "pars").exists()


def test_write_par_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    template = sofia.read_template(write(tmp_path / "t.par", TEMPLATE))
    regions = [dict(index0=i, data_path="cube.fits", companions={"weights": "w.fits"},
                    region_text=sofia.region_text([(0, 5), (0, 4), (3 * i, 3 * i + 4)]), run_name="wal")
               for i in range(2)]
    paths = sofia.write_par_files("pars", template, regions)
    assert [os.path.basename(p) for p in paths] == ["sofia_001.par", "sofia_002.par"]
    params = sofia_checker.read_par(paths[1])
    assert params["input.data"] == str(tmp_path / "cube.fits")  # absolute: same for any cwd
    assert params["input.weights"] == str(tmp_path / "w.fits")
    assert params["input.region"] == "3, 6, 0, 3, 0, 4" and params["output.filename"] == "wal_002"
    assert params["output.directory"] == str(tmp_path / "pars" / "outputs")
    assert os.path.isdir(params["output.directory"])
    assert sorted(os.listdir(tmp_path / "pars")) == ["outputs", "sofia_001.par", "sofia_002.par"]
    assert sofia.write_par_files("pars", template, regions) == paths  # same grid again: fine
    with pytest.raises(ConfigError, match="holds 1 parameter file.*: sofia_002.par"):
        sofia.write_par_files("pars", template, regions[:1])
    for bad, message in [(dict(regions[0], run_name="a b"), "run_name 'a b'"),
                         (dict(regions[0], index0=1), "repeats index0 1"),
                         ({"index0": 0}, "lacks 'data_path'")]:
        with pytest.raises(ConfigError, match="parameter files in") as info:
            sofia.write_par_files("pars", template, [regions[1], bad])
        assert message in str(info.value)


def test_sofiax_config_parses_back(tmp_path):
    path = sofia.write_sofiax_config(tmp_path / "cfg", n_processes=12, run_name="wal_1", sofia_path="/bin/sofia")
    conf = configparser.ConfigParser()  # as SoFiA-X reads it (with interpolation)
    assert conf.read(path) == [path]
    section = conf["SoFiAX"]
    assert section["sofia_processes"] == "12" and section["run_name"] == "wal_1"
    assert section["sofia_execute"] == "0" and section["sofia_path"] == "/bin/sofia"
    for key in ("db_hostname", "db_name", "db_username", "db_password"):
        assert section[key] == "CHANGE_ME"
    assert [int(v) for v in section["spatial_extent"].split(",")] == [10, 10]
    assert int(section["flux"]) == 10 and int(section["uncertainty_sigma"]) == 5
    assert section["spectral_extent"] == "10,10"
    assert "fill in" in open(path).read() and os.listdir(tmp_path / "cfg") == ["config.ini"]
    for kw, message in [(dict(n_processes=0), "sofia_processes = 0"), (dict(n_processes=1000), "1..999"),
                        (dict(run_name="x/y"), "run_name 'x/y'"), (dict(sofia_path="/a%b"), "'%'")]:
        args = dict(n_processes=1, run_name="r")
        args.update(kw)
        with pytest.raises(ConfigError, match="config.ini") as info:
            sofia.write_sofiax_config(tmp_path, **args)
        assert message in str(info.value)


# --- the `sofia` stand-in -------------------------------------------------------------------

def cube(path, shape, seed, dtype=">f4"):
    data = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    fits.PrimaryHDU(data).writeto(path)
    return str(path), data


def run_checker(par, cwd=None, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SOFIA_CHECK_")}
    full.update(env)
    return subprocess.run([sys.executable, CHECKER, par], cwd=cwd, env=full, capture_output=True, text=True)


def flip_byte(path, z, y, x, shape):
    with fits.open(path) as hdul:
        start = hdul.fileinfo(0)["datLoc"]
    with open(path, "r+b") as fh:
        fh.seek(start + ((z * shape[1] + y) * shape[2] + x) * 4)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x01]))


def test_checker_matching_region_passes_and_flipped_byte_fails(tmp_path):
    shape = (6, 5, 7)
    original, data = cube(tmp_path / "orig.fits", shape, 1)
    staged = write(tmp_path / "staged.fits", open(original, "rb").read(), "wb")
    template = sofia.read_template(write(tmp_path / "t.par", TEMPLATE))
    box = [(1, 4), (2, 5), (3, 7)]
    [par] = sofia.write_par_files(tmp_path / "pars", template, [dict(
        index0=0, data_path=staged, companions={}, region_text=sofia.region_text(box), run_name="t")])
    result = run_checker(par, SOFIA_CHECK_ORIGINAL_DATA=original)
    assert result.returncode == 0, result.stderr
    report = json.load(open(tmp_path / "pars" / "outputs" / "t_001_check.json"))
    [entry] = report["checked"]
    assert entry["region"] == [3, 6, 2, 4, 1, 3] and entry["shape"] == [3, 3, 4]
    expected = np.ascontiguousarray(data[1:4, 2:5, 3:7], dtype=">f4").tobytes()
    assert entry["sha256"] == hashlib.sha256(expected).hexdigest()

    flip_byte(staged, 0, 0, 0, shape)  # outside the region: SoFiA-2 never reads it
    assert run_checker(par, SOFIA_CHECK_ORIGINAL_DATA=original).returncode == 0
    flip_byte(staged, 2, 3, 5, shape)
    result = run_checker(par, SOFIA_CHECK_ORIGINAL_DATA=original)
    assert result.returncode == 1
    assert "1 byte(s) of region [3, 6, 2, 4, 1, 3] differ" in result.stderr
    assert "first at pixel x=5, y=3, z=2" in result.stderr
    assert run_checker(par).returncode == 1  # no original named: cannot pass


def test_checker_empty_region_is_whole_cube_with_4d_companion_and_offset(tmp_path):
    original, data = cube(tmp_path / "orig.fits", (1, 6, 5, 7), 2)
    weights, wdata = cube(tmp_path / "origw.fits", (6, 1, 5, 7), 3)  # NAXIS3 = 1: SoFiA-2 swaps axes 3, 4
    staged, _ = cube(tmp_path / "cut.fits", (1, 4, 3, 5), 0)
    with fits.open(staged, mode="update") as hdul:
        hdul[0].data[...] = data[:, 2:6, 1:4, 2:7]
    staged_w = str(tmp_path / "cutw.fits")
    fits.PrimaryHDU(wdata[2:6, :, 1:4, 2:7]).writeto(staged_w)
    template = sofia.read_template(write(tmp_path / "t.par", TEMPLATE))
    [par] = sofia.write_par_files(tmp_path / "p", template, [dict(
        index0=4, data_path=staged, companions={"weights": staged_w}, region_text=None, run_name="c")])
    env = dict(SOFIA_CHECK_ORIGINAL_DATA=original, SOFIA_CHECK_ORIGINAL_WEIGHTS=weights,
               SOFIA_CHECK_ORIGINAL_OFFSET="2, 1, 2")
    result = run_checker(par, **env)
    assert result.returncode == 0, result.stderr
    report = json.load(open(tmp_path / "p" / "outputs" / "c_005_check.json"))
    assert [e["key"] for e in report["checked"]] == ["input.data", "input.weights"]
    assert report["checked"][1]["region"] == [0, 4, 0, 2, 0, 3]  # the whole staged cube
    assert report["checked"][1]["region_in_original"] == [2, 6, 1, 3, 2, 5]
    result = run_checker(par, **dict(env, SOFIA_CHECK_ORIGINAL_OFFSET="0, 0, 0"))
    assert result.returncode == 1 and "differ from the original" in result.stderr
    del env["SOFIA_CHECK_ORIGINAL_WEIGHTS"]
    result = run_checker(par, **env)
    assert result.returncode == 1 and "SOFIA_CHECK_ORIGINAL_WEIGHTS = ''" in result.stderr


def test_checker_reads_like_sofia2_relative_paths_defaults_duplicates(tmp_path):
    original, _ = cube(tmp_path / "orig.fits", (3, 4, 5), 4)
    write(tmp_path / "staged.fits", open(original, "rb").read(), "wb")
    # Relative input.data opens from the working directory; the later duplicate wins; empty
    # output.directory and output.filename default to the input's directory and name.
    par = write(tmp_path / "s.par", "input.data = wrong.fits\ninput.data = staged.fits # c\n"
                                    "input.region =  \noutput.directory =\n")
    result = run_checker(par, cwd=tmp_path, SOFIA_CHECK_ORIGINAL_DATA=original)
    assert result.returncode == 0, result.stderr
    assert json.load(open(tmp_path / "staged_check.json"))["checked"][0]["region"] == [0, 4, 0, 3, 0, 2]


def test_checker_does_not_import_ingest():
    source = open(CHECKER).read()
    assert "import ingest" not in source and "from ingest" not in source
