"""`python -m ingest prestage`: every rank stages exactly its regions, for a pipeline to read unchanged.

Rank 0 reads the headers (cube and companions), plans the output files by layout, checks room
and templates, and compares with DIR/manifest.json from an earlier run. Then every rank checks
the CRC of the completed regions it is given, the bad ones join the regions to do, and each rank
reads its regions straight from the wire into the output files (one mapped window per request,
so memory is bounded by the plan, not the region). As each region completes its rank tells
rank 0, whose listener thread rewrites the manifest; rank 0 publishes a file once every region
in it is done, then writes the SoFiA-2 parameter files and the report.

One module: its private helpers are the steps of the one prestage protocol (rank 0 prepares, ranks
verify and write, rank 0's listener rewrites the manifest and publishes), which reads top to bottom
in prestage(); none is used elsewhere.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace

from ingest.config import RunConfig
from ingest.config.settings import retry_policy, transport_options
from ingest.driver.job import Job, assign, plan_box, prepare_job
from ingest.driver.mpi import all_agree_or_raise, root_step, topology
from ingest.driver.quiet import quiet_allgather
from ingest.driver.probe_rounds import root_step_with_crew
from ingest.driver.rootwork import building_report, gather_to_root, ledger, preload, start_ledger
from ingest.driver.read import read_rank_regions
from ingest.driver.source import ensure_lifetime, ready_to_read, resolve_source
from ingest.errors import ConfigError, IngestError
from ingest.formats.reader import read_any_layout
from ingest.transports.retry import read_with_retries
from ingest.staging.stage import check_space
from ingest.core.lattice import Plan
from ingest.core.plan import box_lattice
from ingest.engine.destination import compact_file, crc32_of, mirror_file
from ingest.transports import open_transport
from ingest.outputs import manifest as manifests
from ingest.outputs import prestage_files as files

_TAG = 77  # completion messages to rank 0's manifest listener


@dataclass(frozen=True)
class Cube:
    """The data cube or a companion, as every rank reads it."""

    label: str  # "data" or the companion's name (weights, noise, ...)
    job: Job  # the job with this cube's source, layout and identity
    outputs: tuple  # per region: the files.OutFile it writes into
    frame: tuple | None = None  # frame layouts: the source's metadata pieces, fetched once


@dataclass(frozen=True)
class Stage:
    """What rank 0 decides for the pre-stage and broadcasts."""

    cubes: tuple  # of Cube, data first
    manifest: dict  # as it will be written (old regions' records kept for verification)
    verify: tuple  # per rank: region indices whose CRCs it checks


def _companion_job(cfg: RunConfig, job: Job, label: str, source: str) -> Job:
    """Rank 0: the job for a companion cube, which must have the data cube's shape."""
    ccfg = replace(cfg, source=source)
    method, read_source, signer_args = resolve_source(ccfg)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 2 * job.estimate_s + 60.0, ccfg)
    with open_transport(read_source, method, threads=1, **transport_options(cfg)) as transport:
        layout = read_any_layout(transport, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg))
        info = transport.info
    if layout.shape != job.layout.shape:
        raise ConfigError(f"companions: {label} ({layout.source}) has shape {tuple(reversed(layout.shape))} but the "
                          f"cube has {tuple(reversed(job.layout.shape))} (FITS order); a companion is cut to the "
                          f"same regions, so it must have the same shape")
    return replace(job, read_source=read_source, method=method, layout=layout, info=info, signer_args=signer_args)


def _new_manifest(cfg: RunConfig, cubes) -> dict:
    job = cubes[0].job
    return {
        "schema": manifests.SCHEMA,
        "cubes": {c.label: manifests.identity(c.job.layout.source, c.job.info) for c in cubes},
        "layout": cfg.layout,
        "split": {"region": cfg.region, "grid": None if cfg.region_shape else list(job.grid_fits),
                  "halo": cfg.halo, "region_shape": cfg.region_shape, "min_overlap": cfg.min_overlap},
        "run_name": cfg.run_name,
        "regions": [{"index": i, "box": [list(b) for b in box], "halo": cfg.halo, "status": "pending",
                     "files": {c.label: c.outputs[i].path for c in cubes}, "checksum": {}}
                    for i, box in enumerate(job.regions)],
    }


def _prepare(cfg: RunConfig, job: Job, n_ranks: int) -> Stage:
    """Rank 0, before any data moves: companions, output files, template, manifest, room."""
    if cfg.sofia_template:
        from ingest.outputs import sofia

        sofia.read_template(cfg.sofia_template)  # refuse a bad template now, not after hours of staging
        if len(job.regions) > 999:
            raise ConfigError(f"sofia_template: {len(job.regions)} regions, but SoFiA parameter files are numbered "
                              f"sofia_001..sofia_999 (s2p_setup's limit); use larger regions")
        if job.layout.kind != "fits":
            raise ConfigError(f"sofia_template: SoFiA-2 reads FITS, and {job.layout.source} is {job.layout.kind}; "
                              f"stage it without a template")
    jobs = [("data", job)] + [(label, _companion_job(cfg, job, label, src)) for label, src in cfg.companions]
    cubes = []
    for label, j in jobs:
        frame = _frame_pieces(cfg, j) if cfg.layout != "subcubes" else None
        cubes.append(Cube(label, j, tuple(files.plan_files(cfg.layout, cfg.output_dir, label, j.layout, j.regions,
                                                           j.assignment, frame)), frame))
    cubes = tuple(cubes)
    paths = [c.outputs[0].path for c in cubes]
    if len(set(paths)) != len(paths):
        raise ConfigError(f"companions: two cubes would be staged to the same file {paths}; they need distinct names")
    manifest = _new_manifest(cfg, cubes)
    old = None if cfg.fresh else manifests.load(cfg.output_dir)
    if old is not None:
        manifests.check_same_job(cfg.output_dir, old, manifest)
        for region, before in zip(manifest["regions"], old["regions"]):
            if before["status"] == manifests.DONE:
                region.update(status=manifests.DONE, files=before["files"], checksum=before["checksum"])
    elif not cfg.fresh:
        _refuse_foreign(cubes)
    done = manifests.done_regions(manifest)
    verify = tuple(tuple(done[r::n_ranks]) for r in range(n_ranks))
    return Stage(cubes, manifest, verify)


def _frame_pieces(cfg: RunConfig, job: Job) -> tuple:
    """Rank 0: the metadata a frame copies verbatim (a FITS header is in the layout already; an
    HDF5 file's metadata around its data is fetched here, or the frame is refused)."""
    with open_transport(job.read_source, job.method, threads=1, **transport_options(cfg)) as transport:
        transport.adopt(job.info)

        def read_range(offset: int, nbytes: int) -> bytes:
            buf = bytearray(nbytes)
            read_with_retries(transport, memoryview(buf), offset, retry_policy(cfg), lambda *fault: None)
            return bytes(buf)

        return files.frame_pieces(job.layout, read_range)


def _refuse_foreign(cubes) -> None:
    """Without a manifest, an output file already there belongs to someone else: never overwrite it."""
    for cube in cubes:
        for out in set(cube.outputs):
            if os.path.exists(out.path):
                raise ConfigError(f"output_dir: {out.path} exists and no manifest.json says ingest wrote it; "
                                  f"remove it, choose another --output-dir, or pass --fresh to replace it")


def _verify(stage: Stage, rank: int) -> list[int]:
    """Every rank: the completed regions given to it whose bytes no longer match their CRC."""
    bad = []
    for index in stage.verify[rank]:
        region = stage.manifest["regions"][index]
        for cube in stage.cubes:
            path = region["files"].get(cube.label)
            out = next((o for o in set(cube.outputs) if o.path == path), None) or replace(cube.outputs[index], path=path)
            current = out.current_path()
            if current is None or _region_crc(cube, index, out, current) != region["checksum"].get(cube.label):
                bad.append(index)
                break
    return bad


def _destination(cube: Cube, index: int, plan, fd: int, writable: bool = True):
    out = cube.outputs[index]
    if out.mirror:  # frame layouts: only lattice plans (chunked HDF5 frames are refused up front)
        return mirror_file(fd, plan.lattice, writable=writable)
    lattice = plan.lattice if isinstance(plan, Plan) else box_lattice(cube.job.regions[index], cube.job.layout.itemsize)
    return compact_file(fd, lattice, out.data_offset, writable=writable)


def _region_crc(cube: Cube, index: int, out, path: str) -> str:
    _, plan = plan_box(None, cube.job.settings, cube.job.layout, cube.job.regions[index])
    fd = os.open(path, os.O_RDONLY)
    try:
        return crc32_of(_destination(cube, index, plan, fd, writable=False))
    finally:
        os.close(fd)


def _to_do(comm, cfg: RunConfig, stage: Stage, job: Job):
    """Collective: verify completed regions; return (regions to read, regions to redo)."""
    bad = sorted(i for mine in quiet_allgather(comm, _verify(stage, comm.Get_rank())) for i in mine)
    done = set(manifests.done_regions(stage.manifest)) - set(bad)
    return [i for i in range(len(job.regions)) if i not in done], bad


class _Listener:
    """Rank 0: receives each completed region from every rank and rewrites the manifest."""

    def __init__(self, comm, cfg: RunConfig, manifest: dict, n_cubes: int):
        self.comm, self.cfg, self.manifest, self.n_cubes = comm, cfg, manifest, n_cubes
        self.lock = threading.Lock()
        self.parts: dict[int, set] = {}
        self.thread = threading.Thread(target=self._run, name="ingest-manifest", daemon=True)

    def region_done(self, index: int, label: str, checksum: str, path: str) -> None:
        with self.lock:
            region = self.manifest["regions"][index]
            region["checksum"][label] = checksum
            region["files"][label] = path
            self.parts.setdefault(index, set()).add(label)
            if len(self.parts[index]) == self.n_cubes:
                region["status"] = manifests.DONE
            manifests.write(self.cfg.output_dir, self.manifest)

    def _run(self) -> None:
        from mpi4py import MPI

        finished = 0
        while finished < self.comm.Get_size() - 1:
            message = self.comm.recv(source=MPI.ANY_SOURCE, tag=_TAG)  # Open MPI spells it -1, MPICH -2
            if message is None:
                finished += 1
            else:
                self.region_done(*message)


def _open_files(cfg: RunConfig, stage: Stage, assignment, todo) -> Stage:
    """Rank 0: this run's files for the regions to do (per-rank files follow this run's
    assignment), room for them, their temporary files, and the manifest saying what is pending."""
    manifest = stage.manifest
    cubes = []
    for cube in stage.cubes:
        planned = files.plan_files(cfg.layout, cfg.output_dir, cube.label, cube.job.layout, cube.job.regions,
                                   assignment, cube.frame)
        outputs = [planned[i] if i in todo else replace(planned[i], path=manifest["regions"][i]["files"][cube.label])
                   for i in range(len(planned))]
        cubes.append(replace(cube, outputs=tuple(outputs)))
    needed = 0
    for cube in cubes:
        by_file: dict = {}
        for i in todo:
            by_file.setdefault(cube.outputs[i], []).append(cube.job.regions[i])
        needed += sum(files.disk_bytes_needed(out, boxes, cube.job.layout.itemsize) for out, boxes in by_file.items())
    check_space(cfg.output_dir, needed, field="output_dir", purpose="the regions to stage")
    for i in todo:
        region = manifest["regions"][i]
        region.update(status="pending", checksum={},
                      files={c.label: c.outputs[i].path for c in cubes})
    for out in {c.outputs[i] for c in cubes for i in todo}:
        files.create(out)
    manifests.write(cfg.output_dir, manifest)
    return replace(stage, cubes=tuple(cubes))


@contextmanager
def _writing(cube: Cube, index: int, plan, checksums: dict):
    """Where a region's bytes go: its output file, mapped a window at a time; on success the
    region's CRC is read back from the file (what the pipeline will read is what is checked)."""
    out = cube.outputs[index]
    fd = os.open(out.tmp_path, os.O_RDWR)
    try:
        dest = _destination(cube, index, plan, fd)
        yield dest
        os.fsync(fd)  # durable before the manifest says done
        checksums[index] = crc32_of(dest)
    finally:
        os.close(fd)


def _publish_complete(cfg: RunConfig, stage: Stage, manifest: dict) -> list[str]:
    """Rank 0: rename every file whose regions are all done; return the files still partial."""
    status: dict = {}
    for region in manifest["regions"]:
        for path in region["files"].values():
            status[path] = status.get(path, True) and region["status"] == manifests.DONE
    partial = []
    for cube in stage.cubes:
        for out in set(cube.outputs):
            if status.get(out.path):
                files.finish(out)
            else:
                partial.append(out.path)
    return partial


def _sofia_files(cfg: RunConfig, manifest: dict, job: Job) -> list[str]:
    """Rank 0, once every region is done: sofia_NNN.par per region and SoFiA-X's config.ini."""
    from ingest.outputs import sofia

    template = sofia.read_template(cfg.sofia_template)
    mirror = cfg.layout != "subcubes"  # a frame holds the whole cube: the region says where to look
    regions = [{"index0": r["index"], "data_path": os.path.abspath(r["files"]["data"]),
                "companions": {k: os.path.abspath(v) for k, v in r["files"].items() if k != "data"},
                "region_text": sofia.region_text(job.regions[r["index"]]) if mirror else None,
                "run_name": _run_name(cfg, job)} for r in manifest["regions"]]
    written = sofia.write_par_files(cfg.output_dir, template, regions)
    written.append(sofia.write_sofiax_config(cfg.output_dir, n_processes=len(regions), run_name=_run_name(cfg, job)))
    return written


def _virtual_cubes(cfg: RunConfig, stage: Stage, manifest: dict) -> list[str]:
    """Rank 0, once every region is done: for HDF5 subcubes, one virtual dataset per cube that
    stitches its region files into the source's full shape (DIR/<stem>_virtual.h5)."""
    if cfg.layout != "subcubes":
        return []
    from ingest.outputs.h5files import write_vds

    written = []
    for cube in stage.cubes:
        layout = cube.job.layout
        if layout.kind != "hdf5":
            continue
        region_files = [r["files"][cube.label] for r in manifest["regions"]]
        path = os.path.join(cfg.output_dir, f"{files.stem_of(layout.source)}_virtual.h5")
        write_vds(path, layout, cube.job.regions, region_files)
        written.append(path)
    return written


def _run_name(cfg: RunConfig, job: Job) -> str:
    if cfg.run_name:
        return cfg.run_name
    name = os.path.basename(files.staged_path(cfg.output_dir, job.layout.source))
    return name[:-5] if name.lower().endswith(".fits") else name


def _merge_regions(per_cube: list[list[dict]], redone: set) -> list[dict]:
    """One record per region over all its cubes (bytes and times add up)."""
    merged: dict = {}
    for records in per_cube:
        for r in records:
            m = merged.setdefault(r["index"], {**r, "faults": dict(r["faults"]), "cubes": 0, "elapsed_s": 0.0,
                                               **{k: 0 for k in ("bytes_needed", "bytes_wire", "requests", "retries")}})
            for key in ("bytes_needed", "bytes_wire", "requests", "retries", "elapsed_s"):
                m[key] += r[key]
            m["cubes"] += 1
            m["stop_s"] = max(m["stop_s"], r["stop_s"])
            m["status"] = "redone" if r["index"] in redone else "read"
    return list(merged.values())


def _merge_rank(records: list[dict]) -> dict:
    """A rank's record over its reads of every cube (they ran one after another)."""
    out = dict(records[0])
    for r in records[1:]:
        for key in ("bytes_needed", "bytes_wire", "requests", "retries", "resumed_bytes", "elapsed_s", "stop_s"):
            out[key] = (out.get(key) or 0) + (r.get(key) or 0)
    out["throughput_bytes_per_s"] = out["bytes_needed"] / out["elapsed_s"] if out["elapsed_s"] > 0 else 0.0
    return out


def _room_before_data(cfg: RunConfig, job_bytes: int) -> None:
    """Rank 0, before the probe reads a data byte: room for the least this run writes, the job
    box once (its regions tile it; overlaps, frames and companions only add). _open_files checks
    the exact figure once the regions are known. Not when resuming or taking the first regions:
    then less may be left to write than the box."""
    if cfg.take_regions is not None or (not cfg.fresh and manifests.load(cfg.output_dir) is not None):
        return
    check_space(cfg.output_dir, job_bytes, field="output_dir", purpose="the regions to stage")


def prestage(comm, cfg: RunConfig) -> dict | None:
    """Stage every region of cfg.source (and its companions) into cfg.output_dir by cfg.layout;
    resume from manifest.json. Returns the report on rank 0."""
    from ingest.driver.commands import ReportFacts, publish_report

    if not cfg.output_dir:
        raise ConfigError("output_dir: required for `prestage` (the directory the pipeline reads from)")
    start_ledger()
    rank, size = comm.Get_rank(), comm.Get_size()
    preload(rank, (), lambda: ready_to_read(cfg))  # the others' client, while rank 0 prepares
    job = root_step_with_crew(comm, prepare_job, cfg, topology(comm), cfg.compare == "staging", False,
                              room=lambda job_bytes: _room_before_data(cfg, job_bytes))
    stage = root_step(comm, _prepare, cfg, job, size)
    todo, bad = _to_do(comm, cfg, stage, job)
    assignment = assign(job.regions, job.layout.itemsize, size, todo)
    stage = root_step(comm, _open_files, cfg, stage, assignment, set(todo))
    manifest = stage.manifest
    listener = None
    if rank == 0:
        listener = _Listener(comm, cfg, manifest, len(stage.cubes))
        if size > 1:
            listener.thread.start()
    per_cube_regions, rank_records, error = [], [], None
    try:
        for cube in stage.cubes:
            checksums: dict = {}
            cube_job = replace(cube.job, assignment=assignment)

            def done(region, cube=cube, checksums=checksums):
                message = (region.index, cube.label, checksums[region.index], cube.outputs[region.index].path)
                if rank == 0:
                    listener.region_done(*message)
                else:
                    comm.send(message, dest=0, tag=_TAG)

            regions, record, error = read_rank_regions(
                comm, cfg, cube_job, cube_job.read_source, cube_job.method, f"prestage {cube.label}",
                destination=lambda index, plan, cube=cube, checksums=checksums: _writing(cube, index, plan, checksums),
                on_region=done)
            per_cube_regions.append([r.record for r in regions])
            rank_records.append(record)
            if error is not None:
                break
    finally:
        if rank != 0:
            comm.send(None, dest=0, tag=_TAG)  # this rank is finished (or failed): the listener stops counting it
        elif size > 1:
            listener.thread.join()
    # Every rank learns whether any failed before rank 0 publishes (a collective all must reach).
    partial = None if any(quiet_allgather(comm, error is not None)) else root_step(comm, _publish_complete, cfg, stage,
                                                                           manifest)
    all_agree_or_raise(comm, error)
    region_records = gather_to_root(comm, _merge_regions(per_cube_regions, set(bad)))
    records = gather_to_root(comm, _merge_rank(rank_records))
    baseline = None
    if cfg.compare == "staging":
        from ingest.driver.baseline import measure_staging

        baseline = measure_staging(comm, cfg, job)["baseline"]
    if rank != 0:
        return None
    if partial:
        raise IngestError(f"output_dir: {len(partial)} file(s) still have regions to stage, e.g. {partial[0]}")
    with building_report():  # the pipeline's files count as rank 0's work: only it writes them
        written = _sofia_files(cfg, manifest, job) if cfg.sofia_template else []
        stitched = _virtual_cubes(cfg, stage, manifest)
        regions = sorted((r for rs in region_records for r in rs), key=lambda r: r["index"])
        staged = {r["index"] for r in regions}
        regions += [{"index": r["index"], "rank": None, "box": r["box"], "status": "skipped"}
                    for r in manifest["regions"] if r["index"] not in staged]
        facts = ReportFacts(cfg, replace(job, assignment=assignment))
        report = facts.build(records, mode="prestage", baseline=baseline, regions=regions,
                             extra={"layout": cfg.layout, "manifest": manifests.path_in(cfg.output_dir),
                                    "files": sorted({p for r in manifest["regions"] for p in r["files"].values()}),
                                    "sofia_files": written, "virtual_datasets": stitched})
    report["root"] = ledger().as_dict(report["aggregate"]["makespan_s"])
    publish_report(cfg, report)
    return report
