"""RunConfig: precedence, validation messages, TOML problems, secrets, CLI generation, redaction."""
from __future__ import annotations

import argparse
import dataclasses
import pickle

import pytest

from ingest.core import decompose
from ingest.config import (
    RunConfig,
    add_run_arguments,
    check_field,
    config_from_args,
    load_config,
    read_config_file,
)
from ingest.errors import ConfigError

SRC = {"source": "s3://bucket/cube.fits"}
PRESIGNED = "https://acacia.example/bucket/cube.fits?X-Amz-Credential=AKIAXXX%2F2024&X-Amz-Signature=deadbeef"


def write_toml(tmp_path, text: str, name: str = "run.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def parse_cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(argv)


# ---------------------------------------------------------------- precedence


def test_defaults(tmp_path):
    cfg = load_config(SRC, None)
    # threads and chunk_bytes default to auto (None): tuned by the probe, else 4 and 16 MiB
    assert (cfg.threads, cfg.chunk_bytes, cfg.strategy, cfg.grid, cfg.probe) == (None, None, "auto", "auto", True)
    explicit = load_config({**SRC, "threads": "auto", "chunk_bytes": "AUTO"}, None)
    assert (explicit.threads, explicit.chunk_bytes) == (None, None)
    assert cfg.max_gap_bytes is None and cfg.progress is True and cfg.verify_tls is True
    assert cfg.resolved_method == "s3"


def test_file_overrides_defaults_and_cli_overrides_file(tmp_path):
    path = write_toml(tmp_path, '[run]\nsource = "cube.fits"\nthreads = 8\nchunk_bytes = "1GiB"\nhalo = 2\n')
    from_file = load_config({}, path)
    assert (from_file.source, from_file.threads, from_file.chunk_bytes, from_file.halo) == ("cube.fits", 8, 2**30, 2)
    cli = load_config({"threads": "16", "halo": None, "source": None}, path)  # None = not given
    assert (cli.threads, cli.halo, cli.source) == (16, 2, "cube.fits")


def test_cli_parser_round_trip(tmp_path):
    path = write_toml(tmp_path, "[run]\nprogress = false\nverify_tls = false\n")
    args = parse_cli(["--config", path, "--source", "https://h/b/k", "--chunk-bytes", "500kB",
                      "--progress", "--grid", "5x5x1", "--max-gap-bytes", "0"])
    assert args.threads is None and args.native_byteorder is None  # not given is detectable
    cfg = config_from_args(args)
    assert cfg.chunk_bytes == 500_000 and cfg.progress is True and cfg.verify_tls is False
    assert cfg.grid == "5x5x1" and cfg.max_gap_bytes == 0 and cfg.resolved_method == "presigned"
    assert config_from_args(parse_cli(["--source", "x.fits", "--no-progress"])).progress is False


def test_every_field_has_an_option_and_help():
    """Every field has help and is an option of exactly the commands its metadata names (a config
    file may set any field): the pre-stage ones only on `prestage`, `--stage-with` on `run` and
    `stage`, where a whole-file copy is made."""
    dests = {}
    for command in ("run", "stage", "prestage"):
        parser = argparse.ArgumentParser()
        add_run_arguments(parser, command)
        dests[command] = {a.dest for a in parser._actions}
    for f in dataclasses.fields(RunConfig):
        assert f.metadata["help"], f.name
        assert f.metadata["commands"], f.name
        for command, offered in dests.items():
            assert (f.name in offered) == (command in f.metadata["commands"]), (f.name, command)
    assert "stage_with" in dests["stage"] and "stage_with" not in dests["prestage"]
    assert "companions" in dests["prestage"] and "companions" not in dests["run"]


def test_prestage_options_validate():
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, "prestage")
    args = parser.parse_args(["--source", "c.fits", "--output-dir", "o", "--companion", "weights=w.fits",
                              "--companion", "noise=s3://bucket/n.fits", "--region-shape", "20x20x10",
                              "--min-overlap", "4,2", "--layout", "subcubes"])
    cfg = config_from_args(args)
    assert cfg.companions == (("weights", "w.fits"), ("noise", "s3://bucket/n.fits"))
    assert (cfg.region_shape, cfg.min_overlap, cfg.layout) == ("20x20x10", "4,2", "subcubes")
    for bad, match in [(["--companion", "weights"], "companions: expected NAME=SOURCE"),
                       (["--companion", "Weights=w.fits"], "companion name 'Weights'"),
                       (["--companion", "w=a.fits", "--companion", "w=b.fits"], "used twice"),
                       (["--region-shape", "20x20"], "region_shape"),
                       (["--region-shape", "20x20x10", "--grid", "2x1x1"], "region_shape: .* give one of them"),
                       (["--min-overlap", "4,2"], "min_overlap: .* only applies with region_shape"),
                       (["--layout", "tiles"], "layout: expected one of frame, frame-per-rank, subcubes")]:
        with pytest.raises(ConfigError, match=match):
            config_from_args(parser.parse_args(["--source", "c.fits"] + bad))


# ---------------------------------------------------------------- validation names the field


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("threads", 0, r"threads: expected an integer in 1\.\.1024 \(threads\), got 0"),
        ("threads", "four", r"threads: .*got 'four'"),
        ("threads", True, r"threads: "),
        ("chunk_bytes", 0, r"chunk_bytes: expected a byte count in 1\.\..* \(bytes; e\.g\. 16MiB"),
        ("chunk_bytes", "16 furlongs", r"chunk_bytes: unknown unit"),
        ("chunk_bytes", "3GiB", r"chunk_bytes: .*got '3GiB'"),
        ("max_gap_bytes", -1, r"max_gap_bytes: "),
        ("latency_s", -0.1, r"latency_s: expected a number >= 0.0 \(s\)"),
        ("bandwidth_bytes_per_s", 0, r"bandwidth_bytes_per_s: expected a number > 0.0 \(bytes/s"),
        ("halo", -2, r"halo: .*\(pixels\), got -2"),
        ("hdu", -1, r"hdu: "),
        ("presign_expires_s", 604801, r"presign_expires_s: expected an integer in 1\.\.604800 \(s\)"),
        ("presign_expires_s", 0, r"presign_expires_s: "),
        ("retries", -1, r"retries: "),
        ("retry_total_s", 0, r"retry_total_s: expected a number > 0.0 \(s\)"),
        ("connect_timeout_s", "soon", r"connect_timeout_s: "),
        ("read_timeout_s", float("inf"), r"read_timeout_s: "),
        ("method", "ftp", r"method: expected one of auto, presigned, s3, posix, got 'ftp'"),
        ("strategy", "huge", r"strategy: expected one of auto, large, intermediate, small"),
        ("compare", "yes", r"compare: expected one of none, staging"),
        ("grid", "5x0", r"grid: "),
        ("grid", "5by5", r"grid: "),
        ("region", "0:10,a:b", r"region: "),
        ("progress", "maybe", r"progress: expected true or false"),
        ("native_byteorder", 2, r"native_byteorder: "),
        ("source", "", r"source: "),
        ("source", "s3://bucket", r"source: .*no object key"),
        ("endpoint_url", "projects.pawsey.org.au", r"endpoint_url: expected an http\(s\):// URL"),
    ],
)
def test_bad_values_name_field_value_and_unit(name, value, expected):
    with pytest.raises(ConfigError, match=rf"^{expected}"):
        load_config({**SRC, name: value}, None)


def test_source_is_required(tmp_path):
    with pytest.raises(ConfigError, match=r"^source: required .*--source"):
        load_config({}, None)
    path = write_toml(tmp_path, "[run]\nthreads = 2\n")
    with pytest.raises(ConfigError, match=r"source: required .*run\.toml"):
        load_config({}, path)


def test_stage_dir_required_with_compare_staging(tmp_path):
    with pytest.raises(ConfigError, match=r"^stage_dir: required when compare = 'staging'"):
        load_config({**SRC, "compare": "staging"}, None)
    cfg = load_config({**SRC, "compare": "staging", "stage_dir": str(tmp_path)}, None)
    assert cfg.stage_dir == str(tmp_path)


@pytest.mark.parametrize("method, source", [("s3", "cube.fits"), ("posix", "s3://bucket/k"), ("s3", PRESIGNED)])
def test_method_must_fit_source(method, source):
    with pytest.raises(ConfigError, match=r"^method: ") as info:
        load_config({"source": source, "method": method}, None)
    assert "deadbeef" not in str(info.value)


def test_method_auto_and_presigning_s3():
    assert load_config({"source": "/data/cube.fits"}, None).resolved_method == "posix"
    assert load_config({"source": PRESIGNED}, None).resolved_method == "presigned"
    assert load_config({**SRC, "method": "presigned"}, None).resolved_method == "presigned"


def test_ca_bundle_with_verification_off_is_refused():
    with pytest.raises(ConfigError, match=r"^ca_bundle: "):
        load_config({**SRC, "ca_bundle": "ca.pem", "verify_tls": False}, None)


def test_direct_construction_validates_too():
    with pytest.raises(ConfigError, match=r"^threads: "):
        RunConfig(source="x.fits", threads=0)
    assert RunConfig(source="x.fits", chunk_bytes="1MiB").chunk_bytes == 2**20


def test_unknown_cli_key():
    with pytest.raises(ConfigError, match=r"^thread: not a run option \(did you mean threads"):
        load_config({**SRC, "thread": 3}, None)


# ---------------------------------------------------------------- byte sizes


@pytest.mark.parametrize("text, n_bytes", [("16MiB", 16 * 2**20), ("1GiB", 2**30), ("500kB", 500_000),
                                           ("4096", 4096), (8192, 8192), ("1.5MiB", 3 * 2**19)])
def test_byte_fields_accept_suffixes(text, n_bytes):
    assert load_config({**SRC, "chunk_bytes": text}, None).chunk_bytes == n_bytes
    assert load_config({**SRC, "max_gap_bytes": text}, None).max_gap_bytes == n_bytes


def test_byte_suffixes_in_toml_and_bandwidth_forms(tmp_path):
    path = write_toml(tmp_path, '[run]\nsource = "c.fits"\nmax_gap_bytes = "150kB"\nbandwidth_bytes_per_s = "75MB"\n')
    cfg = load_config({}, path)
    assert cfg.max_gap_bytes == 150_000 and cfg.bandwidth_bytes_per_s == 75e6
    assert load_config({**SRC, "bandwidth_bytes_per_s": "1.25e8"}, None).bandwidth_bytes_per_s == 1.25e8


# ---------------------------------------------------------------- TOML problems


def test_unknown_toml_key_suggests_close_matches(tmp_path):
    path = write_toml(tmp_path, "[run]\nchunk_byte = 10\n")
    with pytest.raises(ConfigError, match=r"run\.toml: unknown key run\.chunk_byte \(did you mean chunk_bytes"):
        load_config(SRC, path)
    path = write_toml(tmp_path, "[run]\nchunk-bytes = 10\n")
    with pytest.raises(ConfigError, match=r"did you mean chunk_bytes"):
        load_config(SRC, path)


def test_settings_outside_run_table_and_unknown_tables(tmp_path):
    with pytest.raises(ConfigError, match=r"'threads' must go inside the \[run\] table"):
        load_config(SRC, write_toml(tmp_path, "threads = 3\n"))
    with pytest.raises(ConfigError, match=r"unknown table or key 'rnu' \(did you mean \[run\]\?\)"):
        load_config(SRC, write_toml(tmp_path, "[rnu]\nthreads = 3\n"))


def test_invalid_toml_names_file_and_line(tmp_path):
    path = write_toml(tmp_path, '[run]\nsource = "c.fits"\nthreads = = 3\n', name="broken.toml")
    with pytest.raises(ConfigError, match=r"config file .*broken\.toml: invalid TOML: .*line 3"):
        load_config({}, path)


def test_unreadable_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match=r"config file .*missing\.toml: cannot read it"):
        load_config(SRC, str(tmp_path / "missing.toml"))


def test_bad_value_in_file_names_file_and_field(tmp_path):
    path = write_toml(tmp_path, "[run]\nthreads = 0\n")
    with pytest.raises(ConfigError, match=r"config file .*run\.toml: threads: expected an integer in 1\.\.1024"):
        load_config(SRC, path)


@pytest.mark.parametrize("key", ["aws_secret_access_key", "secret_key", "session_token", "access_key",
                                 "aws_access_key_id", "AWS_SESSION_TOKEN", "password"])
@pytest.mark.parametrize("where", ["[run]\n", ""])
def test_secret_looking_keys_are_refused(tmp_path, key, where):
    path = write_toml(tmp_path, f'{where}{key} = "AKIA-not-a-real-key"\n')
    with pytest.raises(ConfigError, match=r"looks like a credential.*environment") as info:
        load_config(SRC, path)
    assert "AKIA-not-a-real-key" not in str(info.value)


def test_no_setting_looks_like_a_secret():
    from ingest.redact import looks_secret as _looks_secret

    assert not [f.name for f in dataclasses.fields(RunConfig) if _looks_secret(f.name)]


def test_read_config_file_returns_checked_values(tmp_path):
    path = write_toml(tmp_path, '[run]\nchunk_bytes = "2MiB"\nlatency_s = 1\n')
    assert read_config_file(path) == {"chunk_bytes": 2 * 2**20, "latency_s": 1.0}


# ---------------------------------------------------------------- frozen, picklable, report


def test_frozen_and_picklable():
    cfg = load_config({**SRC, "region": "0:10, :, 5:9", "grid": "5X5"}, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.threads = 9
    clone = pickle.loads(pickle.dumps(cfg))
    assert clone == cfg and hash(clone) == hash(cfg)
    assert cfg.grid == "5x5"


def test_report_and_repr_redact_presigned_query():
    cfg = load_config({"source": PRESIGNED, "endpoint_url": "https://user:pw@s3.example"}, None)
    report = cfg.to_report_dict()
    assert report["source"] == "https://acacia.example/bucket/cube.fits?<redacted>"
    assert report["endpoint_url"] == "https://s3.example"
    assert report["resolved_method"] == "presigned" and report["chunk_bytes"] is None
    assert set(report) >= {f.name for f in dataclasses.fields(RunConfig)}
    for text in (str(report), repr(cfg)):
        assert "deadbeef" not in text and "AKIAXXX" not in text and "pw@" not in text
    assert cfg.source == PRESIGNED  # the transport still gets the real URL


def test_s3_source_kept_verbatim_in_report():
    key_with_query = "s3://bucket/odd?name.fits"
    assert load_config({"source": key_with_query}, None).to_report_dict()["source"] == key_with_query


def test_cost_model_defaults_agree_everywhere():
    from ingest.core import lattice as planner
    from ingest.core.cost import CostModel

    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert defaults["latency_s"] == CostModel().latency_s == decompose.DEFAULT_LATENCY_S
    assert defaults["bandwidth_bytes_per_s"] == CostModel().bandwidth_bytes_per_s == decompose.DEFAULT_BANDWIDTH_BYTES_PER_S
    # chunk_bytes and threads are auto (None) in the config; the one fallback lives in the planner
    assert defaults["chunk_bytes"] is None and defaults["threads"] is None
    assert decompose.DEFAULT_CHUNK_BYTES == planner.DEFAULT_CHUNK_BYTES == 16 * 2**20
    assert decompose.DEFAULT_THREADS == planner.DEFAULT_THREADS == 4


def test_check_field_unknown_name():
    with pytest.raises(ConfigError, match=r"^halos: not a run setting \(did you mean halo"):
        check_field("halos", 1)
