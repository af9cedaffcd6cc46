"""`python -m ingest soak`: seed 000's stability experiment for `ingest run`.

Repeat one configured run N times or for a duration, each as a subprocess (a crash, hang or
MPI abort of one run cannot take the soak down), and log every run as one row of an SQLite
table, committed at once, so a soak killed on day three keeps days one and two. The summary
is drawn from the database, never from live state, in the shape of the study's tables:
attempts, failed attempts, %, and runtime min/avg/max per script (here: per label or soak).

Several soaks may share one database file (the study ran four scripts into one for 4 days);
rows carry a soak_id and a label. Nothing secret is stored: URLs lose their query strings and
user:password, and the values of credential variables in the environment are blanked.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sqlite3
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from ingest.errors import ConfigError, IngestError
from ingest.study.children import StopFlag, refuse_if_launched, report_facts, run_child, stderr_excerpt
from ingest.redact import redact_text
from ingest.units import format_bytes

DEFAULT_DB = "soak.sqlite"
DEFAULT_LABEL = "soak"
DEFAULT_RUN_TIMEOUT_S = 3600.0  # seed 000 saw single runs stall for 40 min: longer is a hang
DB_BUSY_TIMEOUT_S = 60.0  # another soak sharing the file may hold the write lock briefly
OUTCOMES = ("ok", "failed", "timeout", "interrupted")

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS soak_runs (
    soak_id       TEXT    NOT NULL,  -- one invocation of `soak`: UTC start time + random suffix
    label         TEXT    NOT NULL,  -- what the user calls this configuration (--label)
    run           INTEGER NOT NULL,  -- 1, 2, ... within the soak
    started_utc   TEXT    NOT NULL,  -- ISO 8601, milliseconds
    host          TEXT    NOT NULL,  -- where the soak (and its launcher) ran
    exit_status   INTEGER,           -- the launcher's return code; < 0: killed by that signal
    outcome       TEXT    NOT NULL CHECK (outcome IN ('ok', 'failed', 'timeout', 'interrupted')),
    runtime_s     REAL    NOT NULL,  -- wall time of the whole subprocess, startup included
    ranks         INTEGER,           -- the rest come from the run's JSON report (NULL without one)
    makespan_s    REAL,
    bytes_needed  INTEGER,
    bytes_wire    INTEGER,
    requests      INTEGER,
    retries       INTEGER,
    resumed_bytes INTEGER,
    faults        TEXT,              -- JSON {fault kind: count}, summed over ranks
    command       TEXT    NOT NULL,  -- shell-quoted, redacted
    stderr_head   TEXT,              -- first (and last) lines of stderr when not ok, redacted
    report_path   TEXT,              -- kept report (--reports-dir), else NULL
    PRIMARY KEY (soak_id, run)
);
"""
_COLUMNS = ("soak_id", "label", "run", "started_utc", "host", "exit_status", "outcome", "runtime_s", "ranks",
            "makespan_s", "bytes_needed", "bytes_wire", "requests", "retries", "resumed_bytes", "faults",
            "command", "stderr_head", "report_path")


@dataclass(frozen=True)
class SoakConfig:
    """One soak, validated. Exactly one of runs / duration_s is set."""

    run_args: tuple[str, ...]  # arguments of `ingest run` (never --report: soak sets it)
    runs: int | None = None  # stop after this many runs
    duration_s: float | None = None  # start no run after this many seconds
    pause_s: float = 0.0  # between the end of one run and the start of the next
    run_timeout_s: float = DEFAULT_RUN_TIMEOUT_S  # kill a run after this long, outcome "timeout"
    db_path: str = DEFAULT_DB
    launcher: tuple[str, ...] = ()  # e.g. ("mpiexec", "-n", "4"); empty: one rank
    label: str = DEFAULT_LABEL
    reports_dir: str | None = None  # keep each run's JSON report here


# ------------------------------------------------------------------ validation


def number_option(option: str, text, *, integer: bool = False, low: float = 0.0, low_open: bool = False):
    """Parse an option's value; ConfigError naming the option, its unit and the bound."""
    unit = "" if integer else " s"
    bound = f"{'>' if low_open else '>='} {low:g}{unit}"
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        kind = "a whole number" if integer else "seconds"
        raise ConfigError(f"{option}: expected {kind} {bound}, got {text!r}") from None
    if value != value or value < low or (low_open and value == low):  # value != value: NaN
        raise ConfigError(f"{option}: {text} is out of range, expected {bound}")
    return value


def _check_run_args(run_args: list[str]) -> None:
    """Validate the run arguments now, with run's own parser: a typo should fail in a second,
    not in every one of 30,000 runs."""
    from ingest.config import add_run_arguments
    from ingest.config import config_from_args as run_config_from_args

    if not run_args:
        raise ConfigError("run arguments: none given; put `ingest run` options after `--` "
                          "(e.g. -- --config configs/soak.toml)")
    parser = argparse.ArgumentParser(prog="ingest run", add_help=False)
    add_run_arguments(parser)
    parsed, unknown = parser.parse_known_args(run_args)
    if unknown:
        raise ConfigError(f"run arguments: not `ingest run` options: {redact_text(shlex.join(unknown))}")
    if parsed.report is not None:
        raise ConfigError("run arguments: --report is set by soak for every run; use --reports-dir to keep them")
    try:
        run_config_from_args(parsed)
    except ConfigError as exc:
        raise ConfigError(f"run arguments: {exc}") from None


def _check_db_writable(path: str) -> None:
    """Open (creating if needed) the database and its table, or ConfigError naming --db."""
    directory = os.path.dirname(os.path.abspath(path))
    # The rollback journal is a file beside the database: its directory must be writable too.
    for where in (directory, path):
        if os.path.exists(where) and not os.access(where, os.W_OK):
            raise ConfigError(f"--db {path}: {where} is not writable")
    try:
        conn = _connect(path)
        try:
            conn.executescript(SCHEMA_SQL)
            have = {row[1] for row in conn.execute("PRAGMA table_info(soak_runs)")}
        finally:
            conn.close()
    except (sqlite3.Error, OSError) as exc:
        raise ConfigError(f"--db {path}: cannot create or write the database ({exc})") from None
    missing = [c for c in _COLUMNS if c not in have]
    if missing:
        raise ConfigError(f"--db {path}: its soak_runs table lacks {', '.join(missing)}; not a soak database")


def config_from_args(args) -> SoakConfig:
    """The SoakConfig for parsed `soak` options; ConfigError naming the first bad option."""
    if (args.runs is None) == (args.duration_s is None):
        raise ConfigError("--runs / --duration-s: give exactly one (a run count or a time budget in s)")
    runs = number_option("--runs", args.runs, integer=True, low=1) if args.runs is not None else None
    duration_s = (number_option("--duration-s", args.duration_s, low=0, low_open=True)
                  if args.duration_s is not None else None)
    pause_s = number_option("--pause-s", args.pause_s, low=0)
    run_timeout_s = number_option("--run-timeout-s", args.run_timeout_s, low=0, low_open=True)
    try:
        launcher = tuple(shlex.split(args.launcher or ""))
    except ValueError as exc:
        raise ConfigError(f"--launcher: cannot split {args.launcher!r} ({exc})") from None
    if not args.label.strip():
        raise ConfigError("--label: empty; name the configuration this soak measures")
    refuse_if_launched("soak")
    if args.reports_dir:
        try:
            os.makedirs(args.reports_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--reports-dir {args.reports_dir}: cannot create it ({exc.strerror})") from None
    run_args = list(args.run_args)
    if run_args[:1] == ["--"]:
        run_args = run_args[1:]
    _check_run_args(run_args)
    _check_db_writable(args.db)
    return SoakConfig(tuple(run_args), runs, duration_s, pause_s, run_timeout_s, args.db, launcher,
                      args.label, args.reports_dir)


# ------------------------------------------------------------------ redaction, database


def _connect(path: str) -> sqlite3.Connection:
    # Rollback journal, not WAL: WAL needs shared memory that Lustre/NFS homes do not give.
    return sqlite3.connect(path, timeout=DB_BUSY_TIMEOUT_S)


def insert_row(conn: sqlite3.Connection, row: dict) -> None:
    """Append one run and commit at once: an interrupted soak keeps every finished run."""
    conn.execute(f"INSERT INTO soak_runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                 [row.get(c) for c in _COLUMNS])
    conn.commit()


# ------------------------------------------------------------------ one run


def run_once(cfg: SoakConfig, soak_id: str, run_no: int, work_dir: str, stop: StopFlag) -> dict:
    """Run `ingest run` once as a subprocess in its own process group; the row for it."""
    report_path = os.path.join(cfg.reports_dir or work_dir, f"{soak_id}-run{run_no:05d}.json")
    stderr_path = os.path.join(work_dir, "stderr.txt")
    argv = [*cfg.launcher, sys.executable, "-m", "ingest", "run", *cfg.run_args,
            "--report", report_path, "--no-progress"]
    row = {"soak_id": soak_id, "label": cfg.label, "run": run_no, "host": socket.gethostname(),
           "started_utc": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
           "command": redact_text(shlex.join(argv))}
    outcome, row["exit_status"], row["runtime_s"] = run_child(argv, timeout_s=cfg.run_timeout_s, stop=stop,
                                                               stderr_path=stderr_path)
    note = ""
    if outcome is None and row["exit_status"] == 0:
        try:
            row.update(report_facts(report_path))
            row["faults"] = json.dumps(row["faults"], sort_keys=True)
            outcome = "ok"
        except (IngestError, KeyError, TypeError, ValueError) as exc:
            outcome, note = "failed", f"soak: exit status 0 but no usable report: {exc}\n"
    row["outcome"] = outcome or "failed"
    if row["outcome"] != "ok":
        if outcome == "timeout":
            note = f"soak: killed after --run-timeout-s {cfg.run_timeout_s:g} s\n"
        elif outcome == "interrupted":
            note = "soak: stopped by SIGINT/SIGTERM\n"
        row["stderr_head"] = redact_text(note) + stderr_excerpt(stderr_path)
    if cfg.reports_dir and os.path.exists(report_path):
        row["report_path"] = report_path
    elif os.path.exists(report_path):
        os.remove(report_path)
    return row


def _run_line(row: dict) -> str:
    text = f"run {row['run']}: {row['outcome']} in {row['runtime_s']:.2f} s"
    if row["outcome"] == "ok":
        text += (f" (makespan {row['makespan_s']:.3f} s, {format_bytes(row['bytes_wire'] or 0)} on the wire, "
                 f"requests {row['requests']}, retries {row['retries']})")
    elif row.get("stderr_head"):
        text += f": {row['stderr_head'].splitlines()[0] if row['stderr_head'].strip() else ''}"
    return text


def soak(cfg: SoakConfig, out=None, group: str = "label", slow_s: float | None = None) -> int:
    """Run the soak; 0 if every run was ok, 1 if any failed or timed out, 130 if interrupted."""
    out = out or sys.stdout
    soak_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    t_start = time.monotonic()
    deadline = t_start + cfg.duration_s if cfg.duration_s is not None else None
    print(f"soak {soak_id} ({cfg.label}): "
          + (f"{cfg.runs} run(s)" if cfg.runs else f"runs for {cfg.duration_s:g} s")
          + f", pause {cfg.pause_s:g} s, timeout {cfg.run_timeout_s:g} s per run -> {cfg.db_path}", file=out, flush=True)
    conn = _connect(cfg.db_path)
    # The reports directory sits beside the database: under srun, rank 0 may write its report on
    # another node, and the database's directory is the one place both surely share.
    work_dir = tempfile.mkdtemp(prefix=".soak-", dir=os.path.dirname(os.path.abspath(cfg.db_path)))
    outcomes = []
    try:
        with StopFlag() as stop:
            run_no = 0
            while not stop.requested and (cfg.runs is None or run_no < cfg.runs):
                if run_no and cfg.pause_s:
                    if deadline is not None and time.monotonic() + cfg.pause_s >= deadline:
                        break  # the next run would begin after the deadline
                    stop.sleep(cfg.pause_s)
                if stop.requested or (deadline is not None and time.monotonic() >= deadline):
                    break
                run_no += 1
                row = run_once(cfg, soak_id, run_no, work_dir, stop)
                try:
                    insert_row(conn, row)
                except sqlite3.Error as exc:  # disk full, file replaced: the rows so far are kept
                    raise IngestError(f"--db {cfg.db_path}: cannot record run {run_no} ({exc})") from None
                outcomes.append(row["outcome"])
                print(_run_line(row), file=out, flush=True)
    finally:
        conn.close()
        for name in os.listdir(work_dir):
            os.remove(os.path.join(work_dir, name))
        os.rmdir(work_dir)
    print(file=out)
    print(render_summary(summarize(cfg.db_path, group=group, slow_s=slow_s)), file=out, flush=True)
    failed = sum(o in ("failed", "timeout") for o in outcomes)
    print(f"\nthis soak: {soak_id}, {len(outcomes)} run(s), {failed} failed, {time.monotonic() - t_start:.1f} s"
          + (", interrupted" if stop.requested else ""), file=out, flush=True)
    if stop.requested:
        return 130
    return 1 if failed else 0


# ------------------------------------------------------------------ summary


def summarize(db_path: str, label: str | None = None, group: str = "label", slow_s: float | None = None) -> dict:
    """Seed 000's tables from the database: per label (or per soak) attempts, failures (exit
    status != 0, timeout, or runtime over slow_s), runtime min/avg/max. Interrupted runs are
    no attempt of the system's and are only counted."""
    if not os.path.isfile(db_path):
        raise ConfigError(f"--db {db_path}: no such database file")
    keys = "label" if group == "label" else "label, soak_id"
    where, params = ("WHERE label = ?", [label]) if label is not None else ("", [])
    slow = "OR (outcome = 'ok' AND runtime_s > ?)" if slow_s is not None else ""
    sql = f"""SELECT {keys}, COUNT(DISTINCT soak_id), MIN(started_utc),
                     SUM(outcome != 'interrupted'), SUM(outcome IN ('failed', 'timeout') {slow}),
                     SUM(outcome = 'timeout'), SUM(outcome = 'interrupted'),
                     MIN(CASE WHEN outcome != 'interrupted' THEN runtime_s END),
                     AVG(CASE WHEN outcome != 'interrupted' THEN runtime_s END),
                     MAX(CASE WHEN outcome != 'interrupted' THEN runtime_s END),
                     SUM(bytes_wire), SUM(retries)
              FROM soak_runs {where} GROUP BY {keys} ORDER BY MIN(started_utc)"""
    try:
        with _connect(db_path) as conn:
            rows = conn.execute(sql, ([slow_s] if slow_s is not None else []) + params).fetchall()
        conn.close()
    except sqlite3.Error as exc:
        raise ConfigError(f"--db {db_path}: not a soak database ({exc})") from None
    names = ["label"] + (["soak_id"] if group != "label" else []) + [
        "soaks", "first_start_utc", "runs", "failed", "timeouts", "interrupted",
        "runtime_min_s", "runtime_avg_s", "runtime_max_s", "bytes_wire", "retries"]
    groups = []
    for values in rows:
        g = dict(zip(names, values))
        g["failed_pct"] = 100.0 * g["failed"] / g["runs"] if g["runs"] else None
        groups.append(g)
    return {"db": db_path, "group": group, "slow_s": slow_s, "groups": groups}


def _pct(value) -> str:
    if value is None:
        return "-"
    return "<0.01" if 0 < value < 0.01 else f"{value:.2f}"


def render_summary(summary: dict) -> str:
    """A pipe table like seed 000's (Script | Total attempts | Failed attempts | % | runtimes)."""
    groups = summary["groups"]
    if not groups:
        return f"{summary['db']}: no runs recorded"
    by_soak = summary["group"] != "label"
    head = ["label"] + (["soak"] if by_soak else ["soaks"]) + [
        "runs", "failed", "%", "timeouts", "min(runtime), s", "avg(runtime), s", "max(runtime), s",
        "bytes on wire", "retries"]
    lines = []
    for g in groups:
        sec = (lambda v: "-" if v is None else f"{v:.2f}")
        lines.append([g["label"], g["soak_id"] if by_soak else str(g["soaks"]), str(g["runs"]), str(g["failed"]),
                      _pct(g["failed_pct"]), str(g["timeouts"]), sec(g["runtime_min_s"]), sec(g["runtime_avg_s"]),
                      sec(g["runtime_max_s"]), "-" if g["bytes_wire"] is None else format_bytes(g["bytes_wire"]),
                      "-" if g["retries"] is None else str(g["retries"])])
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head))]
    fmt = lambda cells: "| " + " | ".join(  # noqa: E731 - text left, numbers right
        c.ljust(w) if i == 0 or (by_soak and i == 1) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    text = [fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, lines)]
    failed_is = "exit status != 0 or timeout" + (
        f" or runtime > {summary['slow_s']:g} s" if summary["slow_s"] is not None else "")
    text.append(f"failed = {failed_is}; runtime = wall time of the whole run, launcher and startup included")
    interrupted = sum(g["interrupted"] or 0 for g in groups)
    if interrupted:
        text.append(f"{interrupted} interrupted run(s) not counted")
    return "\n".join(text)


# ------------------------------------------------------------------ command line
