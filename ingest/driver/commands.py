"""`python -m ingest run` and `stage`, and `ingest.run(comm, config)` for in-process pipelines.

Config is validated once on rank 0 and broadcast; rank 0 gathers every rank's record into
the JSON report, writes it, then prints the table drawn from it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ingest.api.read import apply_scaling, to_native
from ingest.config import RunConfig, load_config
from ingest.driver.job import Job, prepare_job, remember_job
from ingest.driver.read import read_rank_regions
from ingest.driver.mpi import all_agree_or_raise, root_step, topology
from ingest.driver.probe_rounds import root_step_with_crew
from ingest.driver.rootwork import building_report, gather_to_root, ledger, preload, start_ledger
from ingest.errors import ConfigError
from ingest.driver.source import ready_to_read
from ingest.staging.tools import check_stage_with
from ingest.api.options import refuse_unknown


@dataclass
class RankResult:
    """What `run` hands back on each rank: the regions it read, each with its box and data (the
    values as astropy returns them), its per-rank record, and on rank 0 the report."""

    regions: list  # of driver.read.RegionRead, .data converted as astropy would
    record: dict
    report: dict | None  # rank 0 only

    @property
    def box(self) -> tuple:
        """The box of this rank's one region (the usual case: one region per rank)."""
        return self._only().box

    @property
    def data(self) -> np.ndarray | None:
        """The data of this rank's one region."""
        return self._only().data

    def _only(self):
        if len(self.regions) != 1:
            raise ValueError(f"this rank read {len(self.regions)} regions; use .regions")
        return self.regions[0]


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
        "prediction": job.prediction.as_dict() if job.prediction is not None else None,
        "shared_rounds": [r.as_dict() for r in job.shared_rounds],
        "tuning": s.report_dict(),
    }


def _grid_facts(cfg: RunConfig, job: Job) -> dict:
    return {"grid_fits": list(job.grid_fits), "reason": job.grid_reason, "halo": cfg.halo,
            "regions": len(job.regions), "world_region": job.world_region}


@dataclass(frozen=True)
class ReportFacts:
    """What every report of a job shares (config, cube, grid, settings); `build` adds the records."""

    cfg: RunConfig
    job: Job

    def build(self, records: list, *, mode: str, baseline=None, regions=None, extra=None) -> dict:
        from ingest.outputs import report as reports

        return reports.build_report(config=self.cfg.to_report_dict(), cube=reports.cube_from_layout(self.job.layout),
                                    grid=_grid_facts(self.cfg, self.job), ranks=records, mode=mode,
                                    baseline=baseline, settings=_settings_facts(self.job), regions=regions,
                                    extra=extra, store=self.job.store)


def config_for(cfg: RunConfig | Mapping | None, options: dict, entry_point: str) -> RunConfig:
    """The RunConfig a Python caller means: `cfg` (a RunConfig, or a dict of settings, or None)
    with keyword `options` (RunConfig fields) on top. An unknown name is a TypeError naming the
    closest field, before any MPI call; a bad value is the ConfigError naming its unit."""
    from dataclasses import fields, replace

    if isinstance(cfg, Mapping):
        cfg, options = None, {**cfg, **options}
    refuse_unknown(entry_point, options, [f.name for f in fields(RunConfig)])
    if cfg is None:
        return load_config(options)
    return replace(cfg, **options) if options else cfg


def run(comm, cfg: RunConfig | Mapping | None = None, **options) -> RankResult:
    """Direct ingest: every rank of `comm` reads its box of `cfg.source` (callable from Python
    for in-process pipelines). Rank 0 writes/prints the report; with compare='staging' the
    staging baseline is measured in the same job.

    cfg: a RunConfig (ingest.config.load_config), a dict of settings or None; keyword options
    are RunConfig fields on top of it, e.g. run(comm, source="s3://survey/cube.fits", threads=8).
    An unknown option is a TypeError naming the closest field."""
    cfg = config_for(cfg, options, "ingest.driver.run")
    from mpi4py import MPI

    start_ledger()
    rank = comm.Get_rank()
    if cfg.compare == "staging":
        root_step(comm, check_stage_with, cfg.stage_with, cfg.source)  # before the direct read, not after
    preload(rank, (), lambda: ready_to_read(cfg))  # the others' client, while rank 0 prepares
    job = root_step_with_crew(comm, prepare_job, cfg, topology(comm), cfg.compare == "staging")
    if rank == 0:
        print(f"ingest: {job.layout.source}: shape {job.layout.shape} {job.layout.raw_dtype.str}, "
              f"{comm.Get_size()} rank(s); {job.grid_reason}", flush=True)
    regions, record, error = read_rank_regions(comm, cfg, job, job.read_source, job.method, "direct")
    if job.one_file is not None:
        t_write = MPI.Wtime()
        write_one_file(comm, job.one_file, regions, error)
        record["phase_s"]["write"] = MPI.Wtime() - t_write
    elif cfg.output_dir and error is None:
        t_write = MPI.Wtime()
        try:
            from ingest.outputs.subcubes import write_subcube

            paths = [write_subcube(cfg.output_dir, rank, r.box, r.data, job.layout) for r in regions]
            record["output_path"] = paths[0] if len(paths) == 1 else paths
        except Exception as exc:  # noqa: BLE001
            error = exc
        record["phase_s"]["write"] = MPI.Wtime() - t_write
    all_agree_or_raise(comm, error)
    for region in regions:
        region.data = apply_scaling(region.data, job.layout)
        if cfg.native_byteorder:
            region.data = to_native(region.data)
    records = gather_to_root(comm, record)
    region_records = gather_to_root(comm, [r.record for r in regions])
    baseline = None
    if cfg.compare == "staging":
        from ingest.driver.baseline import measure_staging

        baseline = measure_staging(comm, cfg, job)["baseline"]
    elif cfg.baseline and rank == 0:
        from ingest.outputs.report import baseline_from_report

        baseline = baseline_from_report(cfg.baseline)
    report = None
    if rank == 0:
        with building_report():
            report = ReportFacts(cfg, job).build(records, mode="direct", baseline=baseline,
                                                  regions=_flat(region_records))
        report["root"] = ledger().as_dict(report["aggregate"]["makespan_s"])
        if job.one_file is not None:  # the ranks' outputs are one file: named once, not per rank
            one = job.one_file
            report["output_file"] = {"path": one.path, "box": [list(b) for b in one.box], "bytes": one.size_bytes}
        remember_job(job, report["aggregate"]["makespan_s"])
        publish_report(cfg, report)
    return RankResult(regions, record, report)


def write_one_file(comm, one, regions, error: BaseException | None) -> None:
    """Collective, `run --output-dir` of one named region (ingest.outputs.onefile): once every rank
    has read, rank 0 makes the file under its temporary name; every rank writes its regions at
    their offsets and syncs them; once every rank has, rank 0 renames it into place. A failure on
    any rank is raised on every rank, and rank 0 removes the temporary file: nothing appears
    under the final name."""
    from ingest.outputs import onefile

    all_agree_or_raise(comm, error)  # a rank's read failed: no file was made
    try:
        root_step(comm, onefile.create_one_file, one)
        error = None
        try:
            for region in regions:
                onefile.write_box(one, region.box, region.data)
        except Exception as exc:  # noqa: BLE001 - raised on every rank below
            error = exc
        all_agree_or_raise(comm, error)
        root_step(comm, onefile.publish_one_file, one)
    except BaseException:
        if comm.Get_rank() == 0:
            onefile.discard_one_file(one)
        raise


def _flat(per_rank: list[list[dict]]) -> list[dict]:
    """Rank 0: every rank's region records as one list, by region index."""
    return sorted((r for rank in per_rank for r in rank), key=lambda r: r["index"])


def publish_report(cfg: RunConfig, report: dict) -> None:
    """Rank 0: write the JSON (data first), then print the table drawn from it."""
    from ingest.outputs import report as reports

    if cfg.report:
        reports.write_report(cfg.report, report)
    print(reports.render_summary(report), flush=True)
    if cfg.report:
        print(f"report written to {cfg.report}", flush=True)


def stage(comm, cfg: RunConfig | Mapping | None = None, **options) -> dict | None:
    """The staging baseline alone (seed 001 s2-4): copy the object to stage_dir, then every rank
    reads its box from the copy. Returns the report on rank 0. cfg and options as for `run`."""
    cfg = config_for(cfg, options, "ingest.driver.stage")
    from ingest.driver.baseline import measure_staging

    if not cfg.stage_dir:
        raise ConfigError("stage_dir: required for `stage` (a directory on the shared filesystem)")
    start_ledger()
    root_step(comm, check_stage_with, cfg.stage_with, cfg.source)  # a bad tool fails before any data moves
    preload(comm.Get_rank(), (), lambda: ready_to_read(cfg))
    job = root_step_with_crew(comm, prepare_job, cfg, topology(comm), True)
    result = measure_staging(comm, cfg, job)
    if comm.Get_rank() != 0:
        return None
    with building_report():
        report = ReportFacts(cfg, job).build(result["records"], mode="staging", baseline=result["baseline"])
    report["root"] = ledger().as_dict(report["aggregate"]["makespan_s"])
    publish_report(cfg, report)
    return report
