"""The study's record: DIR/study.sqlite, one row per (cell, repeat), committed as each finishes.

A study killed halfway keeps every row it wrote, and a re-run starts at the first (cell,
repeat) without one; a failed cell is a row too (status failed/timeout), so it is not retried
by accident and the study-report can count it. Everything the report and the figures show is
read back from here, never from live state.

Columns that every experiment fills: cell (its name, e.g. processes/presigned/p4), experiment,
params (JSON: the cell's settings), repeat, seq (position in the interleaved schedule), status,
times. elapsed_s is the quantity the experiment measures (a run's read makespan; for staging,
the read from the staged copy, seed 001 Fig. 1), stage_s the staging copy alone, total_s their
sum (Fig. 3/7's staging total).
"""
from __future__ import annotations

import json
import sqlite3
from contextlib import closing

DB_NAME = "study.sqlite"
STATUSES = ("ok", "failed", "timeout")
BUSY_TIMEOUT_S = 60.0

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS runs (
    cell          TEXT    NOT NULL,  -- experiment/axis values, e.g. processes/s3/p8
    experiment    TEXT    NOT NULL,  -- processes, threads, strategies, libraries, order, layout, stability
    params        TEXT    NOT NULL,  -- JSON: method, ranks, threads, strategy, library, link, ...
    method        TEXT,              -- presigned, s3, staging, or NULL where it does not apply
    ranks         INTEGER,
    threads       INTEGER,
    link          TEXT,              -- link profile (loopback unless the study has a links axis)
    repeat        INTEGER NOT NULL,  -- 1, 2, ... (cells are interleaved across repeats)
    seq           INTEGER NOT NULL,  -- position in the study's schedule
    status        TEXT    NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
    exit_status   INTEGER,           -- the launcher's return code; < 0: killed by that signal
    started_utc   TEXT    NOT NULL,
    host          TEXT,
    runtime_s     REAL    NOT NULL,  -- wall time of the whole subprocess, startup included
    elapsed_s     REAL,              -- what the cell measures (see the module docstring)
    stage_s       REAL,              -- staging: the copy to the filesystem
    total_s       REAL,              -- elapsed_s + stage_s (staging), else elapsed_s
    bytes_needed  INTEGER,
    bytes_wire    INTEGER,
    requests      INTEGER,
    retries       INTEGER,
    faults        TEXT,              -- JSON {fault kind: count}, summed over ranks
    tool          TEXT,              -- staging: the copy tool and its version; libraries: the library
    report_path   TEXT,              -- relative to the study directory
    command       TEXT    NOT NULL,  -- shell-quoted, redacted
    stderr_head   TEXT,              -- first and last lines of stderr when not ok, redacted
    nodes         TEXT,              -- JSON [host of each rank's node], from the report
    link_bytes    TEXT,              -- JSON {phase: {link: bytes}}: what each capped link carried (cluster)
    PRIMARY KEY (cell, repeat)
);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,          -- config, cube, launcher, staging_tools, started_utc, ...
    value TEXT NOT NULL              -- JSON
);
"""
COLUMNS = ("cell", "experiment", "params", "method", "ranks", "threads", "link", "repeat", "seq", "status",
           "exit_status", "started_utc", "host", "runtime_s", "elapsed_s", "stage_s", "total_s", "bytes_needed",
           "bytes_wire", "requests", "retries", "faults", "tool", "report_path", "command", "stderr_head", "nodes",
           "link_bytes")
# Columns later versions added, with their types: a study database an older version made gets them
# (empty) when opened, so a resumed study records them and the report reads old and new rows alike.
ADDED_COLUMNS = {"nodes": "TEXT", "link_bytes": "TEXT"}


def connect(path: str) -> sqlite3.Connection:
    """Open (creating if needed) a study database; rows come back as sqlite3.Row."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    conn.row_factory = sqlite3.Row
    conn.executescript(SCHEMA_SQL)
    have = {r["name"] for r in conn.execute("PRAGMA table_info(runs)")}
    for name, kind in ADDED_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
    conn.commit()
    return conn


def record(conn: sqlite3.Connection, row: dict) -> None:
    """Insert one finished (cell, repeat) and commit at once (a kill loses at most the running cell)."""
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"study row: unknown columns {sorted(unknown)}")
    if row.get("status") not in STATUSES:
        raise ValueError(f"study row: status {row.get('status')!r} is not one of {STATUSES}")
    values = {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v) for k, v in row.items()}
    names = ", ".join(values)
    conn.execute(f"INSERT OR REPLACE INTO runs ({names}) VALUES ({', '.join('?' * len(values))})",
                 tuple(values.values()))
    conn.commit()


def done_keys(conn: sqlite3.Connection) -> set[tuple[str, int]]:
    """(cell, repeat) pairs already recorded, whatever their status."""
    return {(r["cell"], r["repeat"]) for r in conn.execute("SELECT cell, repeat FROM runs")}


def rows(conn: sqlite3.Connection, experiment: str | None = None) -> list[dict]:
    """Every row (of one experiment), params decoded, in schedule order."""
    sql, args = "SELECT * FROM runs", ()
    if experiment is not None:
        sql, args = sql + " WHERE experiment = ?", (experiment,)
    out = []
    for r in conn.execute(sql + " ORDER BY seq, repeat", args):
        d = dict(r)
        d["params"] = json.loads(d["params"])
        d["faults"] = json.loads(d["faults"]) if d["faults"] else {}
        d["nodes"] = json.loads(d["nodes"]) if d["nodes"] else []
        d["link_bytes"] = json.loads(d["link_bytes"]) if d["link_bytes"] else {}
        out.append(d)
    return out


def set_meta(conn: sqlite3.Connection, key: str, value) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value, sort_keys=True)))
    conn.commit()


def get_meta(conn: sqlite3.Connection, key: str, default=None):
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return json.loads(row["value"]) if row else default


def load(path: str) -> tuple[list[dict], dict]:
    """(rows, meta) of a finished or partial study, read-only use."""
    with closing(connect(path)) as conn:
        meta = {r["key"]: json.loads(r["value"]) for r in conn.execute("SELECT key, value FROM meta")}
        return rows(conn), meta
