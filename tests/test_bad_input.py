"""Issue 4 part 8: bad input everywhere gives exit status 1 (not a traceback), a message naming
the field, file or object at fault, and loses nothing (no partial outputs, reports or staged
files; existing files untouched).

Through the real CLI (`python -m ingest ...` in a subprocess, one rank) wherever the user would
meet the problem, with direct calls where they are quicker and just as telling.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
import warnings

import numpy as np
import pytest
from astropy.io import fits

import ingest.config.run
import ingest.staging.stage
from ingest.cli.main import main
from ingest.config import read_config_file
from ingest.errors import ConfigError, IngestError
from ingest.transports.presign import presign_url
from ingest.testbed.synth import write_cube
from ingest.transports.base import MemoryTransport
from tests.mpitools import ROOT, child_env
from tests.badhttp import BadHttpServer

SHAPE = (8, 40, 36)  # numpy order (z, y, x), float32: one header block + 46 KiB of data
KEY = "bad/cube.fits"


# ------------------------------------------------------------------ helpers


def ingest_cli(args, env=None, cwd=ROOT, timeout_s=60) -> subprocess.CompletedProcess:
    """`python -m ingest ARGS` as one process (a one-rank MPI world for run/stage)."""
    return subprocess.run([sys.executable, "-m", "ingest", *map(str, args)], env=env or child_env(),
                          capture_output=True, text=True, timeout=timeout_s, cwd=cwd)


def assert_clear_error(proc: subprocess.CompletedProcess, *names: str) -> str:
    """Exit status 1, one error line on stderr naming every one of `names`, no traceback."""
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    err = proc.stderr
    assert "Traceback" not in err, err
    assert "error" in err.lower(), err
    for name in names:
        assert str(name) in err, f"{name!r} not named in: {err}"
    return err


def assert_nothing_written(*paths) -> None:
    """Neither a report file nor any output/staged file (hidden temporaries included) exists."""
    for path in paths:
        if os.path.isdir(path):
            assert os.listdir(path) == [], f"{path} holds {os.listdir(path)}"
        else:
            assert not os.path.exists(path), f"{path} was written"


def snapshot(directory) -> dict:
    """name -> (bytes, mtime_ns) of every file in directory."""
    out = {}
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        with open(path, "rb") as fh:
            out[name] = (fh.read(), os.stat(path).st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bad-input")
    path = directory / "cube.fits"
    write_cube(path, SHAPE, -32)
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        data = np.array(f[0].data)
    return {"path": str(path), "dir": directory, "data": data}


@pytest.fixture(scope="module")
def s3_cube(cube, s3_server):
    bucket = s3_server.make_bucket(f"bad-{uuid.uuid4().hex[:10]}")
    client = s3_server.client()
    client.upload_file(cube["path"], bucket, KEY)
    client.put_object(Bucket=bucket, Key="bad/not-fits.fits", Body=os.urandom(5000))
    return {"bucket": bucket, "s3": f"s3://{bucket}/{KEY}"}


@pytest.fixture
def run_outputs(tmp_path):
    """--output-dir and --report options for a run, and a check that neither was written."""
    out, report = tmp_path / "out", tmp_path / "report.json"
    yield ["--output-dir", out, "--report", report, "--no-progress"], lambda: assert_nothing_written(out, report)


# ------------------------------------------------------------------ config file


def test_invalid_toml_names_file_and_line(cube, tmp_path, run_outputs):
    options, nothing_written = run_outputs
    config = tmp_path / "broken.toml"
    config.write_text('[run]\nthreads = 2\nchunk_bytes = "16MiB\nhalo = 1\n')  # unterminated string, line 3
    err = assert_clear_error(ingest_cli(["run", "--source", cube["path"], "--config", config, *options]),
                             config, "line 3")
    assert "TOML" in err
    nothing_written()


def test_missing_config_file(cube, tmp_path, run_outputs):
    options, nothing_written = run_outputs
    config = tmp_path / "nowhere.toml"
    err = assert_clear_error(ingest_cli(["run", "--source", cube["path"], "--config", config, *options]), config)
    assert "No such file" in err
    nothing_written()


def test_config_file_that_is_not_text(cube, tmp_path, run_outputs):
    """A binary or wrongly-encoded file (TOML must be UTF-8) is an unreadable config, not a crash."""
    options, nothing_written = run_outputs
    config = tmp_path / "latin1.toml"
    config.write_bytes('[run]\n# r\xe9glage\nthreads = 2\n'.encode("latin-1"))
    assert_clear_error(ingest_cli(["run", "--source", cube["path"], "--config", config, *options]), config)
    nothing_written()


def test_config_path_that_is_a_directory(tmp_path):
    with pytest.raises(ConfigError, match=r"config file .*: cannot read it \(Is a directory\)"):
        read_config_file(str(tmp_path))


def test_config_file_without_permission(tmp_path, monkeypatch):
    """As root chmod 000 does not stop a read, so the PermissionError is injected at open()."""
    config = tmp_path / "locked.toml"
    config.write_text("[run]\nthreads = 2\n")

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ingest.config.run, "open", denied, raising=False)
    with pytest.raises(ConfigError) as info:
        read_config_file(str(config))
    assert str(config) in str(info.value) and "Permission denied" in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("[run]\nthred = 2\n", ["unknown key run.thred", "did you mean threads"]),
    ("[run]\nchunk-bytes = '4MiB'\n", ["chunk-bytes", "did you mean chunk_bytes"]),
    ("[runn]\nthreads = 2\n", ["'runn'", "did you mean [run]"]),
    ("threads = 2\n", ["'threads' must go inside the [run] table"]),
    ("[run]\nthreads = 'four'\n", ["threads", "'four'", "integer"]),
    ("[run]\nchunk_bytes = '12XB'\n", ["chunk_bytes", "XB"]),
])
def test_config_file_key_errors_name_the_key(tmp_path, text, expected):
    config = tmp_path / "job.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_config_file(str(config))
    for part in [str(config), *expected]:
        assert part in str(info.value)


def test_unknown_key_through_the_cli(cube, tmp_path, run_outputs):
    options, nothing_written = run_outputs
    config = tmp_path / "typo.toml"
    config.write_text("[run]\nthred = 2\n")
    assert_clear_error(ingest_cli(["run", "--source", cube["path"], "--config", config, *options]),
                       config, "run.thred", "did you mean threads")
    nothing_written()


# ------------------------------------------------------------------ option values


@pytest.mark.parametrize("args, field, detail", [
    (["--chunk-bytes", "12XB"], "chunk_bytes", "XB"),
    (["--threads", "0"], "threads", "1..1024"),
    (["--halo", "-1"], "halo", ">= 0"),
    (["--grid", "3x"], "grid", "'3x'"),
    (["--compare", "staging"], "stage_dir", "staging"),
])
def test_bad_option_values_name_the_field(cube, run_outputs, args, field, detail):
    options, nothing_written = run_outputs
    err = assert_clear_error(ingest_cli(["run", "--source", cube["path"], *args, *options]), field, detail)
    assert err.count(f"{field}:") == 1, err
    nothing_written()


def test_bad_input_to_single_process_commands(cube, tmp_path, capsys):
    """info, plan, report and presign, called in-process through ingest.cli.main.main."""
    assert main(["plan", cube["path"], "--chunk-bytes", "12XB"]) == 1
    assert "chunk_bytes" in capsys.readouterr().err
    assert main(["plan", cube["path"], "--region", "0:999"]) == 1
    err = capsys.readouterr().err
    assert "region" in err and "outside" in err
    assert main(["plan", cube["path"], "--max-in-flight", "0"]) == 1
    assert "max_in_flight: expected an integer in 1..1024 (requests), got '0'" in capsys.readouterr().err
    assert main(["plan", cube["path"], "--cpu-per-request-s", "-1"]) == 1
    assert "cpu_per_request_s: expected a number >= 0.0 (s), got '-1'" in capsys.readouterr().err
    assert main(["info", cube["path"] + ".missing"]) == 1
    assert cube["path"] + ".missing" in capsys.readouterr().err
    assert main(["info", cube["path"], "--hdu", "5"]) == 1
    err = capsys.readouterr().err
    assert "HDU 5" in err and cube["path"] in err
    missing = tmp_path / "no-report.json"
    assert main(["report", str(missing)]) == 1
    assert str(missing) in capsys.readouterr().err
    not_report = tmp_path / "other.json"
    not_report.write_text('{"schema": "something/else"}')
    assert main(["report", str(not_report)]) == 1
    err = capsys.readouterr().err
    assert str(not_report) in err and "schema" in err
    assert main(["presign", "s3://bucket/key.fits", "--expires-s", "0"]) == 1
    assert "expires_s" in capsys.readouterr().err
    assert main(["presign", "s3://bucket"]) == 1
    assert "s3://bucket" in capsys.readouterr().err


def test_output_dir_that_is_a_file(tmp_path):
    from ingest.outputs.subcubes import check_output_dir

    target = tmp_path / "out"
    target.write_text("not a directory")
    with pytest.raises(IngestError, match=rf"output dir {re.escape(str(target))}: exists and is not a directory"):
        check_output_dir(target, ["rank0000_x0-1.fits"])
    assert target.read_text() == "not a directory"


def test_region_outside_the_cube(cube, run_outputs):
    options, nothing_written = run_outputs
    err = assert_clear_error(ingest_cli(["run", "--source", cube["path"], "--region", "0:999", *options]), "region")
    assert "outside" in err and str(SHAPE[0]) in err
    nothing_written()


def test_hdu_that_does_not_exist(cube, run_outputs):
    options, nothing_written = run_outputs
    assert_clear_error(ingest_cli(["run", "--source", cube["path"], "--hdu", "5", *options]), cube["path"], "HDU 5")
    nothing_written()


# ------------------------------------------------------------------ stage dir without room


@contextlib.contextmanager
def small_tmpfs(directory, size="1m"):
    """A tmpfs of `size` mounted at directory (root only); skips the caller if mounting fails."""
    os.makedirs(directory, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}); "
                    "test_stage_object_checks_space_before_any_request covers the check directly")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)


@pytest.fixture(scope="module")
def big_cube(tmp_path_factory):
    """A 2 MiB cube: more than the 1 MiB tmpfs holds."""
    path = tmp_path_factory.mktemp("big") / "big.fits"
    write_cube(path, (32, 128, 128), -32)
    return path


@pytest.mark.parametrize("command", [["stage"], ["run", "--compare", "staging"]])
def test_stage_dir_without_room_is_refused_before_the_download(big_cube, counting_source, tmp_path, command):
    """The refusal comes before any data moves: the server sent no byte past the header (the
    size request and the header block), and the small filesystem holds nothing, not even a
    temporary file. For `run --compare staging` that includes the direct read, which would
    otherwise run to the end before the staging half found out it cannot work."""
    with small_tmpfs(tmp_path / "small") as small, counting_source(big_cube) as server:
        report = tmp_path / "report.json"
        err = assert_clear_error(
            ingest_cli([*command, "--source", server.url, "--stage-dir", small / "stage", "--report", report,
                        "--no-progress"]),
            "stage_dir", small / "stage", str(server.object_bytes))
        assert "nothing was downloaded" in err
        server.assert_no_data_moved()
        assert_nothing_written(small, report)


def test_stage_object_checks_space_before_any_request(tmp_path, monkeypatch):
    """Direct call: a filesystem reporting 1 MiB free refuses a 2 MiB object with no read made
    and no temporary file created."""
    free = os.statvfs(tmp_path)

    class Tiny:
        f_bavail, f_frsize = 256, 4096  # 1 MiB
        f_bsize, f_blocks, f_bfree = free.f_bsize, free.f_blocks, 256

    monkeypatch.setattr(ingest.staging.stage.os, "statvfs", lambda path: Tiny)
    transport = MemoryTransport(bytes(2 << 20), "s3://bucket/big.fits")
    with pytest.raises(IngestError) as info:
        ingest.staging.stage.stage_object(transport, str(tmp_path / "stage"), chunk_bytes=1 << 20, threads=1)
    message = str(info.value)
    assert "stage_dir" in message and str(tmp_path / "stage") in message and str(2 << 20) in message
    assert transport.requests == 0
    assert not (tmp_path / "stage").exists() or os.listdir(tmp_path / "stage") == []


# ------------------------------------------------------------------ output dir from another run


def test_output_dir_from_another_grid_is_refused_untouched(cube, tmp_path):
    """A directory holding rank*.fits files of a 2-rank run (z split in two) is refused by a
    1-rank run, which would write a whole-cube file beside them: the pipeline would see three
    overlapping pieces. The message names the directory and a stray file; nothing changes."""
    out = tmp_path / "out"
    out.mkdir()
    z_half = SHAPE[0] // 2
    for rank, (z0, z1) in enumerate([(0, z_half), (z_half, SHAPE[0])]):
        name = f"rank{rank:04d}_x0-{SHAPE[2]}_y0-{SHAPE[1]}_z{z0}-{z1}.fits"
        (out / name).write_bytes(f"previous run, rank {rank}".encode().ljust(2880, b" "))
    (out / "notes.txt").write_text("the user's own file\n")
    before = snapshot(out)
    report = tmp_path / "report.json"
    err = assert_clear_error(ingest_cli(["run", "--source", cube["path"], "--output-dir", out, "--report", report,
                                         "--no-progress"]), out, f"rank0000_x0-{SHAPE[2]}_y0-{SHAPE[1]}_z0-{z_half}.fits")
    assert "another run" in err or "grid" in err
    assert snapshot(out) == before
    assert not report.exists()


# ------------------------------------------------------------------ sources


def test_local_source_that_does_not_exist(cube, run_outputs):
    options, nothing_written = run_outputs
    missing = os.path.join(str(cube["dir"]), "no-such-cube.fits")
    err = assert_clear_error(ingest_cli(["run", "--source", missing, *options]), missing)
    assert "No such file" in err
    nothing_written()


@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_s3_key_that_does_not_exist(s3_server, s3_cube, run_outputs, method):
    options, nothing_written = run_outputs
    uri = f"s3://{s3_cube['bucket']}/bad/no-such-key.fits"
    err = assert_clear_error(ingest_cli(["run", "--source", uri, "--method", method, *options],
                                        child_env(s3_server)), "bad/no-such-key.fits")
    assert "404" in err or "not found" in err.lower()
    nothing_written()


def test_s3_bucket_that_does_not_exist(s3_server, run_outputs):
    options, nothing_written = run_outputs
    uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/cube.fits"
    err = assert_clear_error(ingest_cli(["run", "--source", uri, *options], child_env(s3_server)), uri)
    assert "404" in err or "not found" in err.lower()
    nothing_written()


def test_object_that_is_not_fits(s3_server, s3_cube, run_outputs):
    options, nothing_written = run_outputs
    uri = f"s3://{s3_cube['bucket']}/bad/not-fits.fits"
    err = assert_clear_error(ingest_cli(["run", "--source", uri, *options], child_env(s3_server)), uri)
    assert "not a FITS file" in err
    nothing_written()


def test_tampered_presigned_url_is_a_403_in_words(s3_server, s3_cube, run_outputs):
    options, nothing_written = run_outputs
    url = presign_url(s3_cube["bucket"], KEY, 900, s3_server.client())
    head, sig = url.split("X-Amz-Signature=")
    bad = f"{head}X-Amz-Signature={'1' if sig[0] == '0' else '0'}{sig[1:]}"
    err = assert_clear_error(ingest_cli(["run", "--source", bad, *options]), KEY, "403")
    assert "denied" in err.lower() or "invalid" in err.lower()
    assert sig[1:] not in err and "X-Amz-Signature" not in err
    nothing_written()


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:99999/bucket/cube.fits?X-Amz-Signature=0123",
    "http://[::1/bucket/cube.fits?X-Amz-Signature=0123",
    "https:///bucket/cube.fits?X-Amz-Signature=0123",
], ids=["port", "ipv6", "no-host"])
def test_malformed_url_source(run_outputs, url):
    """A URL that cannot be parsed is refused at once as a bad source, not retried as a
    network fault, and never a traceback."""
    options, nothing_written = run_outputs
    err = assert_clear_error(ingest_cli(["run", "--source", url, "--retries", "3", *options]))
    assert "source" in err or "URL" in err, err
    assert re.search(r"invalid|not a valid|cannot parse|malformed", err, re.I), err
    assert "X-Amz-Signature" not in err and "retries" not in err
    nothing_written()


def test_tiny_cube_over_http_is_read_exactly(tmp_path):
    """A cube smaller than the link probe's reads (1 KiB of data) is still valid input: every
    request must stay inside the object, and the data must be exact."""
    path = tmp_path / "tiny.fits"
    write_cube(path, (2, 8, 16), -32)
    out = tmp_path / "out"
    with BadHttpServer(path.read_bytes()) as server:
        proc = ingest_cli(["run", "--source", server.url, "--output-dir", out, "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    (name,) = os.listdir(out)
    with fits.open(out / name) as got, fits.open(path) as want:
        assert np.array_equal(got[0].data, want[0].data)


# ------------------------------------------------------------------ prestage


def test_prestage_output_dir_without_room_is_refused_before_any_data(big_cube, counting_source, tmp_path):
    """A frame needs room for its regions' bytes: refused before a data byte is sent, nothing left."""
    with small_tmpfs(tmp_path / "small") as small, counting_source(big_cube) as server:
        err = assert_clear_error(
            ingest_cli(["prestage", "--source", server.url, "--output-dir", small / "stage", "--no-progress"]),
            "output_dir", small / "stage", "the regions to stage")
        assert "nothing was" in err
        server.assert_no_data_moved()
        assert_nothing_written(small)


def test_prestage_frame_refuses_a_cube_in_an_extension(tmp_path):
    """SoFiA-2 reads the primary HDU: a frame cannot carry an extension's header verbatim."""
    path = tmp_path / "ext.fits"
    write_cube(path, (4, 8, 8), -32, extension=True)
    out_dir = tmp_path / "stage"
    assert_clear_error(ingest_cli(["prestage", "--source", path, "--hdu", "1", "--output-dir", out_dir,
                                   "--no-progress"]), "layout", "HDU 1", "--layout subcubes")
    assert not out_dir.exists() or os.listdir(out_dir) == []
    proc = ingest_cli(["prestage", "--source", path, "--hdu", "1", "--output-dir", out_dir, "--layout", "subcubes",
                       "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    # The suggested rerun's files hold the extension's data: every voxel, once, as astropy reads it.
    want = fits.getdata(path, 1)
    hits = np.zeros(want.shape, np.int32)
    regions = json.loads((out_dir / "manifest.json").read_text())["regions"]
    for region in regions:
        box = tuple(slice(a, b) for a, b in region["box"])
        got = fits.getdata(region["files"]["data"])
        assert np.array_equal(got, want[box]) and got.dtype == want.dtype, region["box"]
        hits[box] += 1
    assert regions and (hits == 1).all()


@pytest.mark.parametrize("template, names", [
    (b"\x89PNG\r\n\x1a\n\0\0binary", ["SoFiA-2 template", "template.par", "not a parameter file"]),
    (b"input.weights = w.fits\noutput.filename = x\n", ["template.par", "input.data"]),
    (b"input.data = c.fits\nthis line has no equals sign\n", ["template.par", "line 2"]),
])
def test_prestage_refuses_a_bad_sofia_template_before_any_data(tmp_path, counting_source, template, names):
    cube = tmp_path / "cube.fits"
    write_cube(cube, (4, 8, 8), -32)
    (tmp_path / "template.par").write_bytes(template)
    out_dir = tmp_path / "stage"
    with counting_source(cube) as source:
        assert_clear_error(ingest_cli(["prestage", "--source", source.url, "--output-dir", out_dir, "--no-progress",
                                       "--sofia-template", tmp_path / "template.par"]), *names)
    source.assert_no_data_moved()
    assert not out_dir.exists()


def test_prestage_refuses_more_than_999_regions_with_a_template(tmp_path):
    cube = tmp_path / "cube.fits"
    write_cube(cube, (10, 10, 100), 8)  # a grid of 10 x 10 x 10 regions
    (tmp_path / "t.par").write_text("input.data =\n")
    out_dir = tmp_path / "stage"
    err = assert_clear_error(ingest_cli(["prestage", "--source", cube, "--output-dir", out_dir, "--no-progress",
                                         "--grid", "10x10x10", "--sofia-template", tmp_path / "t.par"]),
                             "sofia_template", "1000 regions", "999")
    assert "s2p_setup" in err
    assert not out_dir.exists()
