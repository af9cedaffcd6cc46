"""SoFiA-2 parameter files and the SoFiA-X config.ini for staged regions, laid out as s2p_setup
lays them out (`sofia_NNN.par`, 1-based; `output.filename = {run}_{NNN}`; `[SoFiAX]` config).

Parsing follows SoFiA-2's Parameter_load: a line is trimmed (C isspace); empty lines and lines
whose first character is not a letter or digit are skipped; the key is the text before the
first '=', the value the text after it up to the next '#', both trimmed; a later duplicate
replaces an earlier one; a boolean is true only for the exact value `true`. The files must also
parse as SoFiA-X parses them (Python configparser under a dummy section), so templates SoFiA-2
would read differently from SoFiA-X (duplicate keys, indented settings, stray lines) are refused.
"""
from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass, field

from ingest.errors import ConfigError
from ingest.atomic import atomic_write
from ingest.sky.sofia_files import read_par_text, split_setting

MAX_REGIONS = 999  # s2p_setup refuses more: its file names carry a 3-digit index
COMPANION_KEYS = {"weights": "input.weights", "noise": "input.noise", "mask": "input.mask", "gain": "input.gain"}
OUTPUTS_SUBDIR = "outputs"  # default output.directory, inside the parameter files' directory

_WS = " \t\n\v\f\r"  # C isspace() in the C locale: what SoFiA-2's trim_string removes
# fgets() with PARAMETER_MAX_LINE_SIZE = 1024 reads 1022 bytes + '\n' + NUL; a longer line is
# read in pieces and its tail parsed as a line of its own.
_MAX_LINE_BYTES = 1022
_MAX_TEMPLATE_BYTES = 1 << 20  # SoFiA-2's full template is ~10 KB; bigger is not a parameter file
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.]*\Z")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # names files and SoFiA-X's database run
_REGION = re.compile(r"\s*\d+\s*(,\s*\d+\s*){5}\Z")
_PAR_NAME = re.compile(r"sofia_\d{3}\.par\Z")
_TMP_MARK = ".tmp-"
_MANAGED = ("input.data", *COMPANION_KEYS.values(), "input.region", "output.directory", "output.filename")


@dataclass(frozen=True)
class ParTemplate:
    """A SoFiA-2 parameter file: its lines exactly as read (endings kept) and, per key, the index
    of the line that sets it."""
    path: str
    lines: tuple[str, ...]
    index: dict[str, int] = field(compare=False)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    @property
    def newline(self) -> str:
        return "\r\n" if self.lines and self.lines[0].endswith("\r\n") else "\n"

    def value(self, key: str) -> str | None:
        """The value SoFiA-2 reads for `key`, or None when the template does not set it."""
        i = self.index.get(key)
        return None if i is None else split_setting(self.lines[i].strip(_WS))[1]


def _refuse(where: str, number: int, why: str) -> ConfigError:
    return ConfigError(f"SoFiA-2 template {where} line {number}: {why}")


def read_template(path) -> ParTemplate:
    """Read and check a SoFiA-2 parameter file (see the module docstring); ConfigError if it is
    not one or lacks `input.data`."""
    path = os.fspath(path)
    text = read_par_text(path, "SoFiA-2 template", _MAX_TEMPLATE_BYTES)
    parts = text.split("\n")  # fgets splits at '\n' only, unlike str.splitlines
    lines = tuple(p + "\n" for p in parts[:-1]) + ((parts[-1],) if parts[-1] else ())
    index: dict[str, int] = {}
    folded: dict[str, int] = {}  # SoFiA-2 keys are case-sensitive, SoFiA-X's (configparser) are not
    for i, line in enumerate(lines):
        number, body = i + 1, line.rstrip("\n")
        if len(body.encode()) > _MAX_LINE_BYTES:
            raise _refuse(path, number, f"longer than {_MAX_LINE_BYTES} bytes; SoFiA-2 would read its tail as a line")
        stripped = body.strip(_WS)
        if not stripped or stripped[0] in "#;":
            continue
        if not (stripped[0].isascii() and stripped[0].isalnum()):
            hint = " (a byte-order mark)" if stripped[0] == "\ufeff" else ""
            raise _refuse(path, number, f"starts with {stripped[0]!r}{hint}; SoFiA-2 silently skips "
                                        "such a line and SoFiA-X cannot parse it: make it a '#' comment")
        if body[0] in _WS:
            raise _refuse(path, number, "indented setting; SoFiA-X's parser reads it as part of the previous value")
        if "=" not in stripped:
            raise _refuse(path, number, f"{stripped[:40]!r} is not 'key = value'")
        key = split_setting(stripped)[0]
        if not _KEY.match(key):
            raise _refuse(path, number, f"invalid key {key!r} (letters, digits, '.', '_')")
        # SoFiA-2 would keep the last one; SoFiA-X stops on the duplicate.
        if key.casefold() in folded:
            first = folded[key.casefold()] + 1
            raise _refuse(path, number, f"key {key!r} is set again (first on line {first}); keep one")
        if key.casefold() in _MANAGED and key not in _MANAGED:  # ingest would add a SoFiA-X duplicate
            raise _refuse(path, number, f"key {key!r}: SoFiA-2 keys are case-sensitive; write {key.lower()}")
        folded[key.casefold()] = i
        index[key] = i
    if "input.data" not in index:
        raise ConfigError(f"SoFiA-2 template {path}: no input.data key; not a SoFiA-2 parameter file")
    return ParTemplate(path, lines, index)


def par_file_name(index0: int) -> str:
    """`sofia_NNN.par` for the 0-based region index (NNN is 1-based, as s2p_setup names them)."""
    index0 = operator.index(index0)
    if not 0 <= index0 < MAX_REGIONS:
        raise ConfigError(f"parameter file index {index0}: must be 0..{MAX_REGIONS - 1} "
                          f"(s2p_setup's limit of {MAX_REGIONS} regions, 3-digit names)")
    return f"sofia_{index0 + 1:03d}.par"


def _checked_value(value, key: str, where: str) -> str:
    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key} must be a non-empty string, got {value!r}")
    if value != value.strip(_WS) or any(c in value for c in "\n\r\0"):
        raise ConfigError(f"{where}: {key} = {value!r} has surrounding whitespace or a line break, which SoFiA-2 "
                          "would trim or split")
    if "#" in value:
        raise ConfigError(f"{where}: {key} = {value!r} contains '#', where SoFiA-2 ends the value")
    return value


def _replaced(line: str, key: str, value: str) -> str:
    """`line` (which sets `key`) with the new value; the alignment around '=' is kept and an
    inline comment is dropped (SoFiA-X would read it as part of the value)."""
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    after_key = body.lstrip(_WS)[len(key):]  # e.g. "   =  old.fits   # comment"
    eq = after_key.index("=") + 1
    rest = after_key[eq:]
    gap = rest[: len(rest) - len(rest.lstrip(" \t"))]
    gap = gap or ("" if rest.strip(_WS) else " ")  # "k=v" stays tight; "k =" gets one space
    new = f"{key}{after_key[:eq]}{gap}{value}"
    return (new if value else new.rstrip(" \t")) + ending


def render_par(template: ParTemplate, *, data_path, companions: dict[str, str], region_text: str | None,
               output_directory, output_filename: str) -> str:
    """The template's text with input.data, the companions' keys, input.region (None: empty, the
    whole file), output.directory and output.filename set. Keys the template has are replaced in
    place; the others are appended under a comment. Values are written as given."""
    where = f"SoFiA-2 parameters from {template.path}"
    unknown = sorted(set(companions) - set(COMPANION_KEYS))
    if unknown:
        valid = ", ".join(f"{n} ({k})" for n, k in COMPANION_KEYS.items())
        raise ConfigError(f"{where}: unknown companion(s) {', '.join(map(repr, unknown))}; valid: {valid}")
    settings = {"input.data": _checked_value(data_path, "input.data", where)}
    for name, key in COMPANION_KEYS.items():
        if name in companions:
            settings[key] = _checked_value(companions[name], key, where)
        elif template.value(key):
            # SoFiA-2 applies input.region to every companion: one not staged with the data
            # would be read at the wrong place.
            raise ConfigError(f"{where}: template sets {key} = {template.value(key)} but no {name} "
                              f"companion was staged; stage it or leave {key} empty in the template")
    if region_text is None:
        settings["input.region"] = ""
    elif not isinstance(region_text, str) or not _REGION.match(region_text):
        raise ConfigError(f"{where}: input.region = {region_text!r} is not six comma-separated "
                          "pixel numbers x_min, x_max, y_min, y_max, z_min, z_max")
    else:
        bounds = [int(v) for v in region_text.split(",")]
        if any(lo > hi for lo, hi in zip(bounds[::2], bounds[1::2])):
            raise ConfigError(f"{where}: input.region = {region_text!r} has a minimum above its "
                              "maximum (both ends are inclusive)")
        settings["input.region"] = _checked_value(region_text, "input.region", where)
    settings["output.directory"] = _checked_value(output_directory, "output.directory", where)
    settings["output.filename"] = _checked_value(output_filename, "output.filename", where)
    if "/" in settings["output.filename"]:
        raise ConfigError(f"{where}: output.filename = {output_filename!r} contains '/'; SoFiA-2 "
                          "refuses it (the directory goes in output.directory)")

    nl, out, appended = template.newline, list(template.lines), []
    for key, value in settings.items():
        i = template.index.get(key)
        line = _replaced(out[i], key, value) if i is not None else f"{key} = {value}{nl}"
        if len(line.rstrip("\r\n").encode()) > _MAX_LINE_BYTES:
            raise ConfigError(f"{where}: the {key} line would exceed SoFiA-2's {_MAX_LINE_BYTES}-byte "
                              f"line limit ({len(value)} characters); use a shorter path")
        if i is None:
            appended.append(line)
        else:
            out[i] = line
    if appended:
        if out and not out[-1].endswith("\n"):
            out[-1] += nl
        out.append(f"# Set by ingest (not in the template {os.path.basename(template.path)}):{nl}")
        out.extend(appended)
    return "".join(out)


def _write_text(path: str, text: str) -> None:
    directory, name = os.path.split(path)
    with atomic_write(path, os.path.join(directory, f".{name}{_TMP_MARK}{os.getpid()}")) as fh:
        fh.write(text.encode("utf-8"))


def _make_dir(path: str, what: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot create it ({exc.strerror or exc})") from None


def _check_run_name(run_name, where: str) -> str:
    if not isinstance(run_name, str) or not _RUN_NAME.match(run_name):
        raise ConfigError(f"{where}: run_name {run_name!r} must be letters, digits, '.', '_', '-' "
                          "(it names SoFiA-2's output files and SoFiA-X's database run)")
    return run_name


def write_par_files(out_dir, template: ParTemplate, regions, *, output_directory=None) -> list[str]:
    """Write `out_dir/sofia_NNN.par` per region (dicts with index0, data_path, companions,
    region_text, run_name) atomically; returns their paths in the order given.

    Paths are written absolute: SoFiA-2 opens a relative path from its working directory, which
    is the parameter file's directory under SoFiA-X but the job's directory under a direct
    `sofia` call, and SoFiA-X itself reduces a relative path to its base name. output.directory
    is `output_directory`, default `out_dir/outputs`, created here (SoFiA-2 does not create it).
    Refuses more than 999 regions and sofia_NNN.par files in out_dir this call would not write
    (a run with another grid: SoFiA-X would merge them too). Nothing is written if any is bad.
    """
    out_dir = os.path.abspath(os.fspath(out_dir))
    where = f"SoFiA-2 parameter files in {out_dir}"
    regions = list(regions)
    if not regions:
        raise ConfigError(f"{where}: no regions to write")
    if len(regions) > MAX_REGIONS:
        raise ConfigError(f"{where}: {len(regions)} regions; s2p_setup's limit is {MAX_REGIONS} "
                          "(3-digit file names); use bigger regions")
    products = os.path.abspath(os.fspath(output_directory)) if output_directory else \
        os.path.join(out_dir, OUTPUTS_SUBDIR)
    rendered: dict[str, str] = {}
    for n, region in enumerate(regions):
        try:
            index0, data_path, companions = region["index0"], region["data_path"], region["companions"]
            region_text, run_name = region["region_text"], region["run_name"]
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{where}: region #{n} lacks {exc}; needs index0, data_path, companions, "
                              "region_text, run_name") from None
        name = par_file_name(index0)
        if name in rendered:
            raise ConfigError(f"{where}: region #{n} repeats index0 {index0} ({name})")
        absolute = {k: os.path.abspath(_checked_value(v, COMPANION_KEYS.get(k, k), where))
                    for k, v in dict(companions or {}).items()}
        rendered[name] = render_par(template, data_path=os.path.abspath(_checked_value(data_path, "input.data", where)),
                                    companions=absolute, region_text=region_text, output_directory=products,
                                    output_filename=f"{_check_run_name(run_name, where)}_{index0 + 1:03d}")
    _make_dir(out_dir, "parameter file directory")
    stray = sorted(f for f in os.listdir(out_dir) if _PAR_NAME.match(f) and f not in rendered)
    if stray:
        shown = ", ".join(stray[:5]) + (f", ... ({len(stray) - 5} more)" if len(stray) > 5 else "")
        raise ConfigError(f"{where}: holds {len(stray)} parameter file(s) this run would not write: "
                          f"{shown}; empty the directory or choose another")
    _make_dir(products, "SoFiA-2 output.directory")
    for name, text in rendered.items():
        _write_text(os.path.join(out_dir, name), text)
    return [os.path.join(out_dir, name) for name in rendered]


def write_sofiax_config(out_dir, *, n_processes: int, run_name: str, sofia_path: str = "sofia",
                        sofia_execute: bool = False) -> str:
    """Write `out_dir/config.ini` for SoFiA-X with the keys s2p_setup writes; returns its path.

    The database settings are placeholders for the user to fill in; the merge tolerances are
    s2p_setup.ini's defaults. sofia_execute = 0 (s2p_setup's choice): the pipeline runs `sofia`
    per parameter file and SoFiA-X only merges; 1 lets SoFiA-X run `sofia_path` itself.
    """
    out_dir = os.path.abspath(os.fspath(out_dir))
    where = f"SoFiA-X config {os.path.join(out_dir, 'config.ini')}"
    if isinstance(n_processes, bool) or not isinstance(n_processes, int) or not 1 <= n_processes <= MAX_REGIONS:
        raise ConfigError(f"{where}: sofia_processes = {n_processes!r} must be an integer 1..{MAX_REGIONS}")
    run_name = _check_run_name(run_name, where)
    sofia_path = _checked_value(sofia_path, "sofia_path", where)
    if "%" in sofia_path:  # SoFiA-X reads config.ini with ConfigParser, which interpolates '%'
        raise ConfigError(f"{where}: sofia_path = {sofia_path!r} contains '%', which SoFiA-X's parser rejects")
    text = (
        "# SoFiA-X configuration written by ingest, with the keys s2p_setup writes.\n"
        "[SoFiAX]\n"
        "# Placeholders, not credentials: fill in your SoFiA-X database before running sofiax.\n"
        "db_hostname = CHANGE_ME\n"
        "db_name = CHANGE_ME\n"
        "db_username = CHANGE_ME\n"
        "db_password = CHANGE_ME\n\n"
        "# 0: SoFiA-X only merges the catalogues `sofia` wrote; 1: SoFiA-X runs sofia_path itself\n"
        f"sofia_execute = {int(bool(sofia_execute))}\n"
        f"sofia_path = {sofia_path}\n"
        f"sofia_processes = {n_processes}\n\n"
        f"run_name = {run_name}\n"
        "# Merge tolerances, s2p_setup.ini's defaults: percent; uncertainty_sigma: x position error\n"
        "spatial_extent = 10,10\n"
        "spectral_extent = 10,10\n"
        "flux = 10\n"
        "uncertainty_sigma = 5\n"
    )
    _make_dir(out_dir, "SoFiA-X config directory")
    path = os.path.join(out_dir, "config.ini")
    _write_text(path, text)
    return path


def region_text(box) -> str:
    """SoFiA-2's input.region for a numpy-order, 0-based, half-open box of a 3-D or 4-D cube:
    "x_min, x_max, y_min, y_max, z_min, z_max", 0-based, both ends inclusive, x = last axis.

    For 4-D, SoFiA-2 needs NAXIS4 = 1 (z = NAXIS3, numpy axis 1), or NAXIS3 = 1 and it swaps the
    two (z = NAXIS4, numpy axis 0); the box's (0, 1) axis says which.
    """
    try:
        pairs = [(operator.index(a), operator.index(b)) for a, b in box]
    except (TypeError, ValueError):
        raise ConfigError(f"input.region: box {box!r} is not a list of integer (start, stop) pairs") from None
    if len(pairs) not in (3, 4):
        raise ConfigError(f"input.region: box {box!r} has {len(pairs)} axes; SoFiA-2 regions need 3 or 4")
    for axis, (start, stop) in enumerate(pairs):
        if not 0 <= start < stop:
            raise ConfigError(f"input.region: box axis {axis} [{start}, {stop}) is empty or negative")
    if len(pairs) == 4:
        if pairs[0] == (0, 1):
            pairs = pairs[1:]
        elif pairs[1] == (0, 1):
            pairs = [pairs[0]] + pairs[2:]
        else:
            raise ConfigError(f"input.region: 4-D box {box!r} spans more than one plane of both outer "
                              "axes; SoFiA-2 reads 4-D cubes only with NAXIS3 or NAXIS4 = 1")
    (z0, z1), (y0, y1), (x0, x1) = pairs
    return f"{x0}, {x1 - 1}, {y0}, {y1 - 1}, {z0}, {z1 - 1}"
