"""How the run settings are spelled on a command line: one option per RunConfig field.

Generated from each field's metadata (help, unit, kind, the commands that offer it), so a
command never declares an option of its own for a setting: `run`, `stage`, `prestage`, `plan`
and `info` (ingest/cli/) and the soak runner's checks all take them from here.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import MISSING, fields

from ingest.config.run import _FIELDS, RunConfig, _source_form, check_field, load_config
from ingest.errors import ConfigError
from ingest.units import format_bytes


def _default_text(f, command: str) -> str:
    if command in f.metadata["command_defaults"]:
        return str(f.metadata["command_defaults"][command]).lower()
    if f.metadata["shown_default"]:
        return f.metadata["shown_default"]
    if f.default is MISSING:
        return "required"
    if f.default is None:
        return "none"
    if f.metadata["kind"] == "bytes":
        return format_bytes(f.default)
    if isinstance(f.default, bool):
        return str(f.default).lower()
    if isinstance(f.default, float):
        return f"{f.default:g}"
    return str(f.default)


def add_run_arguments(parser: argparse.ArgumentParser, command: str = "run", *, positional_source: bool = False) -> None:
    """Add --config and one option per RunConfig field that `command` offers (--chunk-bytes,
    --progress/--no-progress...), all defaulting to None so that 'not given' can be told from
    'given the default'. With `positional_source` the source is the first argument (info, plan)
    instead of --source."""
    parser.add_argument("--config", metavar="PATH", default=None,
                        help="TOML file with a [run] table; command-line options override it")
    parser.set_defaults(run_command=command)
    for f in fields(RunConfig):
        if command not in f.metadata["commands"]:
            continue
        if f.name == "source" and positional_source:
            parser.add_argument("source", help=f"{f.metadata['help'].replace(' (required)', '')}, "
                                               "or env:VARIABLE holding one")
        else:
            _add_field(parser, f, command)


def add_setting_arguments(parser: argparse.ArgumentParser, flags: dict[str, str | None], command: str) -> None:
    """Options for some RunConfig fields in a command that is not a run (tile, upload, presign):
    `flags` maps a field name to its flag (None: the field's own, e.g. --endpoint-url). Read them
    back with `setting_values`, which checks them as the config does."""
    for name, flag in flags.items():
        _add_field(parser, _FIELDS[name], command, flag)


def setting_values(args: argparse.Namespace, flags: dict[str, str | None]) -> dict:
    """The checked values of `add_setting_arguments` options; None where not given."""
    return {name: None if getattr(args, name) is None else check_field(name, getattr(args, name)) for name in flags}


def _add_field(parser, f, command: str, flag: str | None = None) -> None:
    meta = f.metadata
    unit = f"{meta['unit']}; " if meta["unit"] else ""
    text = f"{meta['help']} [{unit}default {_default_text(f, command)}]".replace("%", "%%")
    flag = flag or "--" + f.name.replace("_", "-")
    if meta["kind"] == "bool":
        parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=text)
    elif meta["kind"] == "companions":  # repeatable: --companion weights=... --companion noise=...
        parser.add_argument("--companion", dest=f.name, action="append", default=None, metavar="NAME=SOURCE",
                            help=text)
    else:
        # Strings go straight to check_field so CLI and TOML errors read the same.
        metavar = "{" + ",".join(meta["choices"]) + "}" if meta["choices"] else f.name.upper()
        parser.add_argument(flag, dest=f.name, default=None, metavar=metavar, help=text)


def source_argument(text: str, field: str = "source") -> str:
    """A source given on the command line: `env:NAME` reads it from that environment variable,
    which keeps a presigned URL (a bearer credential) out of `ps`. A signed URL typed on the
    command line itself still works, with a warning saying how to avoid it."""
    if text.startswith("env:"):
        name = text[4:]
        value = os.environ.get(name)
        if not name or not value:
            raise ConfigError(f"{field}: environment variable {name or '(empty name)'} is not set (from {text!r})")
        return value
    if _source_form(text) == "http" and re.search(r"(?i)(signature|x-amz-credential|x-amz-security-token)=", text):
        print(f"ingest: warning: {field} is a presigned URL on the command line, where `ps` shows it to other "
              f"users; pass it as --{field.replace('_', '-')} env:VARIABLE or in the config file's [run] table",
              file=sys.stderr, flush=True)
    return text


def _companion_argument(item: str):
    """NAME=SOURCE from the command line, its SOURCE read like --source (env:VAR allowed)."""
    if "=" not in item:
        return item  # check_field names the mistake
    label, source = item.split("=", 1)
    return label, source_argument(source, "companion")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig for parsed `add_run_arguments` options."""
    cli_values = {name: getattr(args, name, None) for name in _FIELDS}
    if cli_values.get("source") is not None:
        cli_values["source"] = source_argument(cli_values["source"])
    if cli_values.get("companions"):  # NAME=env:VAR keeps a companion's presigned URL out of ps too
        cli_values["companions"] = [_companion_argument(item) for item in cli_values["companions"]]
    command = getattr(args, "run_command", "run")
    defaults = {name: f.metadata["command_defaults"][command] for name, f in _FIELDS.items()
                if command in f.metadata["command_defaults"]}
    return load_config(cli_values, getattr(args, "config", None), defaults)
