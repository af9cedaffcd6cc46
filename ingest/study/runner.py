"""`python -m ingest study --config STUDY.toml --out DIR`: the objectstore study as real jobs.

Each cell of the matrix (matrix.py) is a real `python -m ingest run|stage` under the launcher
(mpiexec, or srun steps inside a SLURM allocation), or for the HTTP-libraries table one plain
process. Each finished (cell, repeat) is a row of DIR/study.sqlite, committed at once, with its
report kept in DIR/reports/; a failed cell is a row and the study goes on. Run it again and it
resumes at the first missing row. At the end (and any time after, from the database alone)
`study-report` renders DIR/STUDY.md and its figures.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import socket
import sys
import time
from datetime import datetime, timezone

from ingest.errors import ConfigError, IngestError
from ingest.study import db, links
from ingest.study.config import StudyConfig, load_config
from ingest.study.matrix import Cell, build_cells, default_boxes, schedule
from ingest.study.setting import Setting, launcher_template, open_setting, staging_tools
from ingest.study.children import StopFlag, refuse_if_launched, report_facts, run_child, stderr_excerpt
from ingest.redact import redact_text
from ingest.units import format_bytes, parse_bytes


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def cube_facts(setting: Setting) -> dict:
    """Shape, item size, data offset and size of the study's cube, read once from its header."""
    from ingest.formats.reader import read_any_layout
    from ingest.transports import open_transport

    if setting.local_cube:  # the cluster's store is reachable from its nodes only: the same bytes here
        with open_transport(setting.local_cube, "posix") as transport:
            layout = read_any_layout(transport)
            object_bytes = transport.info.object_bytes
        return {"source": setting.source, "shape": list(layout.shape), "itemsize": layout.itemsize,
                "dtype": str(layout.raw_dtype), "data_offset": int(getattr(layout, "data_offset", 0) or 0),
                "object_bytes": int(object_bytes), "format": layout.kind}
    endpoint = setting.env.get("AWS_ENDPOINT_URL_S3") or setting.env.get("AWS_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update({k: setting.env[k] for k in saved if k in setting.env})  # boto3's chain reads these
    try:
        with open_transport(setting.source, "s3", **({"endpoint_url": endpoint} if endpoint else {})) as transport:
            layout = read_any_layout(transport)
            object_bytes = transport.info.object_bytes
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"source": setting.source, "shape": list(layout.shape), "itemsize": layout.itemsize,
            "dtype": str(layout.raw_dtype), "data_offset": int(getattr(layout, "data_offset", 0) or 0),
            "object_bytes": int(object_bytes), "format": layout.kind}


def split_grid(cfg: StudyConfig, cube: dict, boxes: int) -> str:
    """The grid of the B boxes (FITS order): study.grid, else the automatic split into B parts."""
    from ingest.core.decompose import format_grid, grid_boxes, parse_grid, resolve_grid

    if cfg.study["grid"] != "auto":
        grid = parse_grid(cfg.study["grid"], len(cube["shape"]))
        n = len(grid_boxes(tuple(cube["shape"]), grid))
        if n < boxes:
            raise ConfigError(f"study.grid: {cfg.study['grid']} makes {n} boxes; the study needs {boxes}")
        return format_grid(grid)
    grid, _ = resolve_grid(tuple(cube["shape"]), "auto", boxes, cube["itemsize"])
    return format_grid(grid)


class Study:
    """One study directory: its config, database, setting and the cells still to run."""

    def __init__(self, cfg: StudyConfig, out_dir: str, setting: Setting, log=None):
        self.cfg, self.out_dir, self.setting = cfg, out_dir, setting
        self.log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        # absolute: on a cluster the ranks write their reports from the nodes' working directories
        self.reports_dir = os.path.join(os.path.abspath(out_dir), "reports")
        os.makedirs(self.reports_dir, exist_ok=True)
        self.conn = db.connect(os.path.join(out_dir, db.DB_NAME))
        self.cube = cube_facts(setting)
        self.boxes = default_boxes(cfg)
        self.grid = split_grid(cfg, self.cube, self.boxes)
        self.launcher = launcher_template(cfg.study["launcher"])
        if setting.cluster is not None:
            spec = cfg.cluster
            self.launcher = (f"cluster {setting.cluster.prefix}: mpiexec -n {{ranks}} over {spec.nodes} nodes "
                             f"x {spec.ranks_per_node} slots (ingest.testbed.cluster)")
        tools = cfg.experiments.get("processes", {}).get("stage_with", ["auto"])
        self.stage_tools = staging_tools(tools)
        self.cells = build_cells(cfg, grid=self.grid, boxes=self.boxes, stage_tools=self.stage_tools)
        self.tiled_source: str | None = None

    # -- bookkeeping ------------------------------------------------------------------------
    def check_same_config(self) -> None:
        """A resumed study must be the same study: rows of two configs would mix in one figure."""
        before = db.get_meta(self.conn, "config")
        if before is not None and before != self.cfg.raw:
            raise ConfigError(f"--out {self.out_dir}: this study was started with a different config; "
                              "use another --out, or --fresh to start it again")

    def write_meta(self) -> None:
        from ingest.staging.tools import tool_version
        from ingest.transports import resolved_engine

        for key, value in (("config", self.cfg.raw), ("cube", self.cube), ("launcher", self.launcher),
                           ("boxes", {"count": self.boxes, "grid": self.grid}), ("host", socket.gethostname()),
                           ("staging_tools", [{**tool_version(t), "stage_with": t} for t in self.stage_tools]),
                           ("links", sorted(self.setting.links) or ["loopback"]),
                           ("engines", {m: resolved_engine(m, "auto") for m in ("presigned", "s3")})):
            db.set_meta(self.conn, key, value)
        if self.cfg.cluster is not None:  # the topology and its rates: the figures' limit lines need them
            db.set_meta(self.conn, "cluster", dataclasses.asdict(self.cfg.cluster))
        if db.get_meta(self.conn, "started_utc") is None:
            db.set_meta(self.conn, "started_utc", _utc_now())

    # -- one cell ---------------------------------------------------------------------------
    def argv(self, cell: Cell, report_path: str, stage_dir: str) -> list[str]:
        if cell.kind == "libraries":
            p = self.cfg.experiments["libraries"]
            nbytes = parse_bytes(p["bytes"], "libraries.bytes") if p["bytes"] else self._box_bytes()
            nbytes = min(nbytes, self.cube["object_bytes"] - self.cube["data_offset"])
            return [sys.executable, "-m", "ingest.study.libraries", "--source", self.setting.source,
                    "--library", cell.params["library"], "--chunk-bytes", str(cell.params["chunk_bytes"]),
                    "--bytes", str(nbytes), "--offset", str(self.cube["data_offset"]),
                    "--threads", str(self.cfg.study["threads"]), "--cache", cell.params["cache"],
                    "--json", report_path]
        source = self.tiled_source if cell.params.get("layout") == "tiled" else self.setting.source
        extra = ["--stage-dir", stage_dir] if cell.kind == "stage" else []
        return self.setting.launch(self.launcher, cell.ranks, [
            sys.executable, "-m", "ingest", *cell.args, "--source", source, *extra, *self.cfg.study["run_args"],
            "--report", report_path, "--no-progress"])

    def _box_bytes(self) -> int:
        """Bytes of one of the B boxes (the libraries table's default download, as seed 001's 32 GB)."""
        from ingest.core.decompose import grid_boxes, parse_grid

        box = grid_boxes(tuple(self.cube["shape"]), parse_grid(self.grid, len(self.cube["shape"])))[0]
        n = self.cube["itemsize"]
        for a, b in box:
            n *= b - a
        return n

    def run_cell(self, seq: int, cell: Cell, repeat: int, stop: StopFlag) -> dict:
        stem = f"{cell.name.replace('/', '_').replace('@', '_')}-r{repeat}"
        report_path = os.path.join(self.reports_dir, stem + ".json")
        stage_dir, stage_here = self.setting.stage_dirs(self.out_dir, stem)
        if os.path.exists(report_path):
            os.remove(report_path)  # a killed earlier attempt's leftovers are not this run's
        if cell.kind == "stage":
            os.makedirs(stage_here, exist_ok=True)
        argv = self.argv(cell, report_path, stage_dir)
        stderr_path = os.path.join(self.out_dir, ".stderr.txt")
        row = {"cell": cell.name, "experiment": cell.experiment, "params": dict(cell.params), "method": cell.method,
               "ranks": cell.ranks, "threads": cell.params.get("threads"), "link": cell.link, "repeat": repeat,
               "seq": seq, "started_utc": _utc_now(), "host": socket.gethostname(),
               "command": redact_text(shlex.join(argv))}
        meter = links.meter_for(self.setting.cluster)  # what each capped link carried (a cluster's runs)
        try:
            with meter:
                outcome, row["exit_status"], row["runtime_s"] = run_child(
                    argv, timeout_s=self.cfg.study["run_timeout_s"], stop=stop, stderr_path=stderr_path,
                    env=self.setting.env_for(cell.link))
        finally:
            shutil.rmtree(stage_here, ignore_errors=True)  # a staged copy per cell would fill the disk
        note = ""
        if outcome is None and row["exit_status"] == 0:
            try:
                row.update(self._facts(cell, report_path))
                if self.setting.cluster is not None:
                    row["link_bytes"] = links.phase_bytes(meter, self.setting.cluster, staged=cell.kind == "stage",
                                                          read_s=row["elapsed_s"], stage_s=row.get("stage_s"))
                outcome = "ok"
            except (IngestError, KeyError, TypeError, ValueError, OSError) as exc:
                outcome, note = "failed", f"study: exit status 0 but no usable report: {exc}\n"
        row["status"] = "ok" if outcome == "ok" else ("timeout" if outcome == "timeout" else "failed")
        if row["status"] != "ok":
            row["stderr_head"] = redact_text(note) + stderr_excerpt(stderr_path)
        if os.path.exists(report_path):
            row["report_path"] = os.path.relpath(report_path, self.out_dir)
        return row

    def _facts(self, cell: Cell, report_path: str) -> dict:
        """Row columns from the cell's report (ingest's JSON report, or the libraries JSON)."""
        if cell.kind == "libraries":
            with open(report_path, encoding="utf-8") as fh:
                rep = json.load(fh)
            return {"elapsed_s": rep["elapsed_s"], "total_s": rep["elapsed_s"], "bytes_needed": rep["bytes"],
                    "bytes_wire": rep["bytes"], "requests": rep["requests"],
                    "tool": f"{rep['library']} {rep.get('version', '')}".strip(),
                    "params": {**cell.params, "cache_result": rep["cache"], "cache_reason": rep.get("cache_reason"),
                               "crc32": rep.get("crc32")}}
        facts = report_facts(report_path)
        out = {k: facts[k] for k in ("bytes_needed", "bytes_wire", "requests", "retries", "faults", "nodes")}
        if cell.kind != "stage":
            return {**out, "elapsed_s": facts["makespan_s"], "total_s": facts["makespan_s"]}
        from ingest.outputs.report import load_report

        base = load_report(report_path)["baseline"]
        tool = base.get("stage_tool") or {"name": cell.params["stage_with"], "version": ""}
        return {**out, "elapsed_s": base["read_makespan_s"], "stage_s": base["stage_s"], "total_s": base["total_s"],
                "tool": f"{tool['name']} {tool.get('version') or ''}".strip()}

    # -- tiles for the layout table -----------------------------------------------------------
    def ensure_tiles(self, stop: StopFlag) -> None:
        """Write the per-box objects the layout table reads (once; their index is written last)."""
        if "layout" not in self.cfg.experiments:
            return
        bucket, key = self.setting.source[len("s3://"):].split("/", 1)
        prefix = self.cfg.experiments["layout"]["prefix"].strip("/")
        dest = f"s3://{bucket}/{prefix}/{os.path.splitext(os.path.basename(key))[0]}-{self.grid}/"
        self.tiled_source = dest + "index.json"
        if db.get_meta(self.conn, "tiles") == self.tiled_source:
            return
        argv = [sys.executable, "-m", "ingest", "tile", self.setting.source, dest, "--grid", self.grid]
        self.log(f"study: tiling {self.setting.source} into {dest} (grid {self.grid}) for the layout table")
        stderr_path = os.path.join(self.out_dir, ".stderr.txt")
        outcome, status, _ = run_child(argv, timeout_s=self.cfg.study["run_timeout_s"], stop=stop,
                                       stderr_path=stderr_path, env=self.setting.env)
        if outcome or status != 0:
            raise IngestError(f"study: `ingest tile` failed ({outcome or f'exit status {status}'}): "
                              f"{stderr_excerpt(stderr_path)}")
        db.set_meta(self.conn, "tiles", self.tiled_source)

    # -- the whole study ----------------------------------------------------------------------
    def run(self) -> int:
        self.check_same_config()
        self.write_meta()
        plan = schedule(self.cells)
        done = db.done_keys(self.conn)
        todo = [(seq, cell, rep) for seq, cell, rep in plan if (cell.name, rep) not in done]
        self.log(f"study: {len(self.cells)} cells, {len(plan)} runs; {len(plan) - len(todo)} already recorded, "
                 f"{len(todo)} to run; cube {self.cube['shape']} ({format_bytes(self.cube['object_bytes'])}), "
                 f"{self.boxes} boxes (grid {self.grid}), launcher `{self.launcher}`")
        failed = 0
        t0 = time.monotonic()
        with StopFlag() as stop:
            self.ensure_tiles(stop)
            for k, (seq, cell, repeat) in enumerate(todo):
                if stop.requested:
                    break
                row = self.run_cell(seq, cell, repeat, stop)
                if stop.requested and row["status"] != "ok":
                    break  # an interrupted run is not a result: it runs again on resume
                db.record(self.conn, row)
                failed += row["status"] != "ok"
                self.log(progress_line(k + 1, len(todo), time.monotonic() - t0, cell.name, repeat, row))
        if stop.requested:
            self.log(f"study: stopped; {len(db.done_keys(self.conn))} of {len(plan)} runs recorded, "
                     "run the same command again to resume")
            return 130
        db.set_meta(self.conn, "finished_utc", _utc_now())
        return 1 if failed else 0


def progress_line(done: int, total: int, elapsed_s: float, name: str, repeat: int, row: dict) -> str:
    """`[12/40] processes/s3/p4 r2: ok in 3.2 s · 28 left, ETA 1m30s` (ETA from this session's pace)."""
    left = total - done
    eta_s = elapsed_s / done * left if done else 0.0
    what = f"{row['status']} in {row['runtime_s']:.1f} s"
    if row["status"] == "ok" and row.get("elapsed_s") is not None:
        what += f" (measured {row['elapsed_s']:.3f} s)"
    elif row["status"] != "ok":
        what += f" (exit status {row['exit_status']}): {_why(row.get('stderr_head'))}"
    return f"[{done}/{total}] {name} r{repeat}: {what} · {left} left, ETA {_duration(eta_s)}"


def _why(text: str | None, max_chars: int = 300) -> str:
    """The stderr line that says why, for the progress log: the last naming an error (ingest's,
    a traceback's, srun's), not the launcher's banner after it; else the last with words."""
    lines = [line.strip() for line in (text or "").splitlines() if any(c.isalpha() for c in line)]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["(no stderr)"])[-1][:max_chars]


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def run_study(config_path: str, out_dir: str, *, fresh: bool = False, report: bool = True, log=None) -> int:
    cfg = load_config(config_path)
    refuse_if_launched("study")
    if fresh and os.path.exists(os.path.join(out_dir, db.DB_NAME)):
        os.remove(os.path.join(out_dir, db.DB_NAME))
    os.makedirs(out_dir, exist_ok=True)
    with open_setting(cfg, out_dir) as setting:
        status = Study(cfg, out_dir, setting, log).run()
    if report and status != 130:
        from ingest.study.report import render_study

        render_study(out_dir)
    return status
