"""Results written as JSON (NAME.json, atomically) with the machine that produced them, and read back
(--summarize) to print a bench's tables."""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

from bench.common.machine import REPO_ROOT, command_line, machine_info
from ingest.units import MiB


SCHEMA_VERSION = 1
RESULTS_DIR_DEFAULT = REPO_ROOT / "bench" / "results"


def results_dir(given: str | None = None) -> Path:
    """--results-dir, else $INGEST_BENCH_RESULTS_DIR, else bench/results of this checkout."""
    return Path(given or os.environ.get("INGEST_BENCH_RESULTS_DIR") or RESULTS_DIR_DEFAULT)


def cluster_heading(title: str, results: dict, spec_text: str) -> str:
    """A cluster bench's table heading: its title, the cube, the spec's rates (`spec_text`), and a
    note when the run was stopped before its last cell."""
    head = f"### {title} ({results['object_bytes'] / MiB:.1f} MiB cube; {spec_text})"
    if not results.get("complete", True):
        head += "\n\nPartial: the run was stopped; these are the cells it finished."
    return head


def summarize_or_run(args, name: str, run, to_markdown, before_run=None) -> int:
    """A bench's main: with --summarize print the table of a results file and run nothing;
    otherwise (after `before_run`) run, write NAME.json and print its table."""
    if args.summarize:
        with open(args.summarize) as fh:
            print(to_markdown(json.load(fh)))
        return 0
    if before_run is not None:
        before_run()
    results = run(args)
    path = write_results(name, results, args.results_dir)
    print(to_markdown(results))
    print(f"\nwrote {path}")
    return 0


def write_results(name: str, results: dict, directory: str | None = None) -> Path:
    """Write results as DIR/NAME.json (atomically), with schema version, command and machine."""
    payload = {
        "schema_version": SCHEMA_VERSION,
        "bench": name,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "cwd": os.getcwd(),
        "machine": machine_info(),
        **results,
    }
    out_dir = results_dir(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = out_dir / f"{name}.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path
