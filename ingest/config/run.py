"""The one configuration of `python -m ingest run`: defaults < TOML file < command line.

`RunConfig` is frozen, validated on construction and picklable, so rank 0 resolves it once and
broadcasts it. Each field's metadata (help, unit, kind, limits) drives the command-line
options, the TOML keys and the error messages, so the field list is written exactly once.

TOML file (`--config PATH`): settings go in a `[run]` table, keys spelled like the fields
(`chunk_bytes = "16MiB"`); a table keeps room for other commands' sections later. Relative
paths are relative to the working directory, as on the command line.

Secrets are never settings: access keys come from the environment or boto3's chain
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE), and a config file that holds
something that looks like one is refused.

This module reads the file and resolves the three levels (`read_config_file`, `load_config`); the
field table is ingest.config.fields and the checks of a value ingest.config.checks, whose names
are importable from here as before.
"""
from __future__ import annotations

import difflib

from ingest.config.checks import shown_source, source_form as _source_form
from ingest.config.fields import (_FIELDS, CUTOUTS, JOBS, LAYOUTS, OPENERS, PLANNERS, REGION_TAKERS, TUNERS, RunConfig,
                                  check_field, did_you_mean)
from ingest.errors import ConfigError
from ingest.redact import looks_secret

__all__ = ["RunConfig", "check_field", "did_you_mean", "shown_source", "read_config_file", "load_config", "SECTIONS",
           "JOBS", "PLANNERS", "REGION_TAKERS", "CUTOUTS", "OPENERS", "TUNERS", "LAYOUTS"]

SECTIONS = ("run",)  # TOML tables ingest reads; add one when another command reads the file


# ------------------------------------------------------------------ TOML file


def _secret_error(path: str, key: str) -> ConfigError:
    return ConfigError(
        f"{path}: key {key!r} looks like a credential; ingest never takes secrets from its config "
        "file or command line. Use the environment instead (AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or AWS_PROFILE), which boto3 reads itself."
    )


def read_config_file(path: str) -> dict:
    """The checked settings of the file's [run] table; errors name the file (and line, for syntax)."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            document = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:  # the message carries "(at line N, column M)"
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path}: not a UTF-8 TOML text file") from None
    for key, value in document.items():
        if looks_secret(key):
            raise _secret_error(path, key)
        if key in _FIELDS:
            raise ConfigError(f"config file {path}: {key!r} must go inside the [run] table")
        if key not in SECTIONS:
            close = difflib.get_close_matches(key, SECTIONS, n=1)
            hint = f" (did you mean [{close[0]}]?)" if close else ""
            raise ConfigError(f"config file {path}: unknown table or key {key!r}{hint}; settings go in [run]")
    run = document.get("run", {})
    if not isinstance(run, dict):
        raise ConfigError(f"config file {path}: 'run' must be a table ([run]), not a value")
    settings = {}
    for key, value in run.items():
        if looks_secret(key):
            raise _secret_error(path, f"run.{key}")
        if key not in _FIELDS:
            raise ConfigError(f"config file {path}: unknown key run.{key}{did_you_mean(key)}")
        try:
            settings[key] = check_field(key, value)
        except ConfigError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
    return settings


# ------------------------------------------------------------------ resolution and CLI


def load_config(cli_values: dict, config_path: str | None = None, defaults: dict | None = None) -> RunConfig:
    """Resolve defaults < a command's own defaults < TOML file < command line. `cli_values` maps
    field names to what the user typed; None (or absent) means not given."""
    values = {**(defaults or {}), **(read_config_file(config_path) if config_path is not None else {})}
    for key, value in cli_values.items():
        if key not in _FIELDS:
            raise ConfigError(f"{key}: not a run option{did_you_mean(key)}")
        if value is not None:
            values[key] = value
    if "source" not in values:
        where = f" or set source in the [run] table of {config_path}" if config_path else ""
        raise ConfigError(f"source: required (local path, http(s) presigned URL or s3://bucket/key); "
                          f"give --source{where}")
    return RunConfig(**values)
