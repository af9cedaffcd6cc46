"""`python -m ingest run` and `stage`, and `ingest.run(comm, config)` for in-process pipelines.

Config is validated once on rank 0 and broadcast; rank 0 gathers every rank's record into
the JSON report, writes it, then prints the table drawn from it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ingest.api import apply_scaling, to_native
from ingest.config import RunConfig, add_run_arguments, config_from_args
from ingest.driver.job import Job, prepare_job
from ingest.driver.read import read_rank_box
from ingest.driver.mpi import all_agree_or_raise, ranks_per_node, root_step, run_or_abort, world
from ingest.errors import ConfigError


@dataclass
class RankResult:
    """What `run` hands back on each rank: its data (None when written to output_dir only)."""

    box: tuple
    data: np.ndarray | None
    record: dict
    report: dict | None  # rank 0 only


def _settings_facts(job: Job) -> dict:
    s = job.settings
    return {
        "strategy": s.strategy,
        "threads": s.threads,
        "chunk_bytes": s.chunk_bytes,
        "max_gap_bytes": s.max_gap_bytes if s.max_gap_bytes is not None else s.cost.gap_bytes,
        "latency_s": s.cost.latency_s,
        "bandwidth_bytes_per_s": s.cost.bandwidth_bytes_per_s,
        "stream_bandwidth_bytes_per_s": s.cost.stream_bytes_per_s,
        "predicted_makespan_s": job.estimate_s,
        "tuning": s.tuning,
    }


def _grid_facts(cfg: RunConfig, job: Job) -> dict:
    return {"grid_fits": list(job.grid_fits), "reason": job.grid_reason, "halo": cfg.halo}


def run(comm, cfg: RunConfig) -> RankResult:
    """Direct ingest: every rank of `comm` reads its box of `cfg.source` (callable from Python
    for in-process pipelines). Rank 0 writes/prints the report; with compare='staging' the
    staging baseline is measured in the same job."""
    from mpi4py import MPI

    from ingest.outputs import report as reports

    rank = comm.Get_rank()
    job = root_step(comm, prepare_job, cfg, comm.Get_size(), ranks_per_node(comm), cfg.compare == "staging")
    if rank == 0:
        print(f"ingest: {job.layout.source}: shape {job.layout.shape} {job.layout.raw_dtype.str}, "
              f"{comm.Get_size()} rank(s); {job.grid_reason}", flush=True)
    raw, record = read_rank_box(comm, cfg, job, job.read_source, job.method, "direct")
    error = None
    if cfg.output_dir:
        t_write = MPI.Wtime()
        try:
            from ingest.outputs.subcubes import write_subcube

            record["output_path"] = write_subcube(cfg.output_dir, rank, job.boxes[rank], raw, job.layout)
        except Exception as exc:  # noqa: BLE001
            error = exc
        record["phase_s"]["write"] = MPI.Wtime() - t_write
    all_agree_or_raise(comm, error)
    data = apply_scaling(raw, job.layout)
    if cfg.native_byteorder:
        data = to_native(data)
    records = comm.gather(record, root=0)
    baseline = None
    if cfg.compare == "staging":
        from ingest.driver.staging import measure_staging

        baseline = measure_staging(comm, cfg, job)["baseline"]
    elif cfg.baseline and rank == 0:
        baseline = reports.baseline_from_report(cfg.baseline)
    report = None
    if rank == 0:
        report = reports.build_report(config=cfg.to_report_dict(), cube=reports.cube_from_layout(job.layout),
                                      grid=_grid_facts(cfg, job),
                                      ranks=records, mode="direct", baseline=baseline,
                                      settings=_settings_facts(job))
        _publish(cfg, report)
    return RankResult(job.boxes[rank], data, record, report)


def _publish(cfg: RunConfig, report: dict) -> None:
    """Rank 0: write the JSON (data first), then print the table drawn from it."""
    from ingest.outputs import report as reports

    if cfg.report:
        reports.write_report(cfg.report, report)
    print(reports.render_summary(report), flush=True)
    if cfg.report:
        print(f"report written to {cfg.report}", flush=True)


def stage(comm, cfg: RunConfig) -> dict | None:
    """The staging baseline alone (seed 001 s2-4): copy the object to stage_dir, then every rank
    reads its box from the copy. Returns the report on rank 0."""
    from ingest.outputs import report as reports
    from ingest.driver.staging import measure_staging

    if not cfg.stage_dir:
        raise ConfigError("stage_dir: required for `stage` (a directory on the shared filesystem)")
    job = root_step(comm, prepare_job, cfg, comm.Get_size(), ranks_per_node(comm), True)
    result = measure_staging(comm, cfg, job)
    if comm.Get_rank() != 0:
        return None
    report = reports.build_report(config=cfg.to_report_dict(), cube=reports.cube_from_layout(job.layout),
                                  grid=_grid_facts(cfg, job),
                                  ranks=result["records"], mode="staging", baseline=result["baseline"],
                                  settings=_settings_facts(job))
    _publish(cfg, report)
    return report


def _cli(comm, args, command) -> int:
    cfg = root_step(comm, config_from_args, args)
    command(comm, cfg)
    return 0


def _run_cli(args) -> int:
    return run_or_abort(world(), _cli, args, run)


def _stage_cli(args) -> int:
    return run_or_abort(world(), _cli, args, stage)


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="every MPI rank reads its own subcube; rank 0 reports (the default)")
    add_run_arguments(p)
    p.set_defaults(func=_run_cli)
    p = sub.add_parser("stage", help="staging baseline: copy the object to --stage-dir, ranks read from the copy")
    add_run_arguments(p)
    p.set_defaults(func=_stage_cli)
