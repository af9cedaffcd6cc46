"""`python -m ingest cutouts`: every source of a catalogue cut out of one cube, by all the ranks.

Rank 0 reads the header and the catalogue, turns each source into a pixel box (its world region
through the cube's WCS, or SoFiA-2's bounding box plus a margin), drops the cut-outs an earlier
run left whole, and splits the rest over the ranks in contiguous stretches along the axis the
boxes reach least far, balanced by bytes (`core.cutplan`). Each rank then reads its sources in
batches (`cutout_rank`): one batch is one set of requests whose bytes shared by neighbouring or
overlapping cut-outs are read once, and each cut-out is written whole or not at all. Rank 0
gathers the records into manifest.json and the report.
"""
from __future__ import annotations

from dataclasses import dataclass

from mpi4py import MPI

from ingest.config import RunConfig
from ingest.config.settings import configured_settings, resolve_settings, retry_policy, transport_options, tunable
from ingest.core.cutplan import box_bytes, box_selection, source_order, split_axis, split_by_bytes
from ingest.core.lattice import UNLIMITED_GAP, make_plan
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.driver import cutout_sinks as sinks
from ingest.driver.cutout_progress import Progress, Reporter
from ingest.driver.cutout_rank import cut_rank
from ingest.driver.cutout_sources import cube_sources
from ingest.driver.mpi import all_agree_or_raise, root_step
from ingest.driver.source import ensure_lifetime, resolve_source
from ingest.formats.reader import read_any_layout_timed
from ingest.outputs import cutouts as outputs
from ingest.outputs.report import cube_from_layout, write_report
from ingest.transports import open_transport

REPORT_SCHEMA = "ingest.cutouts-report/1"


@dataclass(frozen=True)
class CutoutJob:
    """What rank 0 decides once and broadcasts."""

    read_source: str
    method: str
    layout: object
    info: object
    signer_args: tuple | None
    settings: object
    sources: tuple  # CutoutSource, every row of the catalogue
    todo: tuple  # indices of the sources to cut now, in object order
    assignment: tuple  # per rank: a contiguous stretch of `todo`, as indices into `sources`
    kept: tuple  # manifest entries of cut-outs an earlier run left whole
    max_gap_bytes: int
    plan_choice: str  # the read plan, and why, in words

    @property
    def ext(self) -> str:
        return ".h5" if self.layout.kind == "hdf5" else ".fits"


def _choice_text(gap_bytes: int, axis: int, n_ranks: int, n_sources: int) -> str:
    """How the job reads, and why, for the report (what it read is in the ranks' records)."""
    split = (f"ranks split by numpy axis {axis} (the axis the cut-outs reach least far along, so ranks share "
             f"the fewest bytes), balanced by bytes; " if n_ranks > 1 else "")
    return (f"{split}each batch of a rank's {n_sources // max(1, n_ranks)}-odd cut-outs read as one set of spans: "
            f"their runs merged wherever the gap between them is at most {gap_bytes} bytes (where reading a gap "
            f"costs less than another request: latency x bandwidth, or max_gap_bytes), so shared bytes are read "
            f"once and dense cut-outs read long spans, up to the whole object")


def gap_bytes(cfg: RunConfig, settings) -> int:
    """The largest gap between two cut-outs' runs that one request reads over: the config's, else
    what its strategy implies (small: none; large and intermediate: any), else the cost model's
    break-even gap (a request's latency x bandwidth), whatever plan the tuner chose for one box."""
    if cfg.max_gap_bytes is not None:
        return cfg.max_gap_bytes
    return {"small": 0, "large": UNLIMITED_GAP, "intermediate": UNLIMITED_GAP}.get(cfg.strategy,
                                                                                  settings.cost.gap_bytes)


def prepare(cfg: RunConfig, n_ranks: int) -> CutoutJob:
    """Rank 0: header, catalogue, boxes, what is already done, and the split over ranks."""
    sinks.check_outputs(cfg)
    method, read_source, signer_args = resolve_source(cfg)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 60.0, cfg)
    with open_transport(read_source, method, threads=LATENCY_THREADS, **transport_options(cfg)) as transport:
        layout, header = read_any_layout_timed(transport, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg))
        info = transport.info
        sources = cube_sources(cfg, layout)  # catalogue errors come before anything is written
        kept = sinks.kept(cfg, outputs_cube(layout, info))
        ext = ".h5" if layout.kind == "hdf5" else ".fits"
        todo = [i for i, s in enumerate(sources) if s.box is not None and s.file_stem + ext not in kept]
        settings = configured_settings(cfg)
        if todo and tunable(cfg, layout):
            largest = max(todo, key=lambda i: box_bytes(sources[i].box, layout.itemsize))
            settings = resolve_settings(cfg, transport, layout, box_selection(sources[largest].box, layout.shape),
                                        header=header)
    gap = gap_bytes(cfg, settings)
    boxes = [sources[i].box for i in todo]
    axis = split_axis(boxes, layout.shape) if todo else 0
    todo = [todo[k] for k in source_order(layout, boxes, axis)] if todo else []
    parts = split_by_bytes([box_bytes(sources[i].box, layout.itemsize) for i in todo], n_ranks)
    assignment = tuple(tuple(todo[a:b]) for a, b in parts)
    choice = _choice_text(gap, axis, n_ranks, len(todo)) if todo else "nothing to read"
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 3600.0, cfg)
    return CutoutJob(read_source, method, layout, info, signer_args, settings, tuple(sources), tuple(todo),
                     assignment, tuple(kept.values()), gap, choice)


def outputs_cube(layout, info) -> dict:
    """The cube's identity as the manifest records it."""
    return {"name": layout.source, "object_bytes": info.object_bytes, "etag": info.etag,
            "last_modified": info.last_modified}


def _alone_wire_bytes(layout, box, settings, gap_bytes: int) -> int:
    """Bytes one cut-out would put on the wire read alone (the lattice plan's closed form)."""
    if layout.storage != "contiguous":
        return box_bytes(box, layout.itemsize)
    return make_plan(layout, box_selection(box, layout.shape), strategy="auto", chunk_bytes=settings.chunk_bytes,
                     max_gap_bytes=gap_bytes, cost=settings.cost).wire_bytes


def cutouts(comm, cfg: RunConfig) -> dict | None:
    """The whole job on every rank of `comm`; rank 0 returns the report, the others None."""
    rank, size = comm.Get_rank(), comm.Get_size()
    t_start = MPI.Wtime()
    job = root_step(comm, prepare, cfg, size)
    prep_s = MPI.Wtime() - t_start
    bar = Progress(cfg, comm, len(job.todo)) if rank == 0 else None
    reporter = Reporter(comm) if rank != 0 else None
    error, entries, record = None, [], None
    comm.Barrier()
    t0 = MPI.Wtime()
    try:
        entries, record = cut_rank(comm, cfg, job, progress=(bar.mine if bar else reporter.send))
    except Exception as exc:  # noqa: BLE001 - every rank learns of it below
        error = exc
    if reporter is not None:
        reporter.close()
    if bar is not None:
        bar.drain_until_done(size)
    all_agree_or_raise(comm, error)
    makespan_s = comm.reduce(MPI.Wtime() - t0, op=MPI.MAX, root=0)
    gathered = comm.gather((entries, record), root=0)
    if rank != 0:
        return None
    t_root = MPI.Wtime()
    done = [e for es, _ in gathered for e in es]
    report = _report(cfg, job, done, [r for _, r in gathered], makespan_s, prep_s)
    manifest = {"schema": outputs.SCHEMA, "cube": outputs_cube(job.layout, job.info),
                "sources": sorted(done + list(job.kept) + report["skipped"], key=lambda e: e["row"])}
    report["manifest"] = sinks.write_manifest(cfg, manifest)
    report["rank0_gather_s"] = MPI.Wtime() - t_root
    if cfg.report:
        write_report(cfg.report, report)
    print(outputs.summary_text(report), flush=True)
    return report


def _report(cfg, job: CutoutJob, done, records, makespan_s: float, prep_s: float) -> dict:
    skipped = [s.entry(None, 0, None) for s in job.sources if s.box is None]
    requests = sum(r["requests"] for r in records)
    wire = sum(r["bytes_wire"] for r in records)
    n = max(1, len(done))
    return {
        "schema": REPORT_SCHEMA, "config": cfg.to_report_dict(), "cube": cube_from_layout(job.layout),
        "makespan_s": makespan_s, "rank0_prepare_s": prep_s,
        "settings": {"threads": job.settings.threads, "chunk_bytes": job.settings.chunk_bytes,
                     "max_gap_bytes": job.max_gap_bytes, "batch_bytes": cfg.cutout_batch_bytes,
                     "memory_bound_bytes": _memory_bound_bytes(cfg, job)},
        "plan": {"choice": job.plan_choice, "spans": sum(r.get("spans", 0) for r in records),
                 "read_share_of_data": wire / max(1, job.layout.data_bytes),
                 "buffer_bytes_max": max((r.get("buffer_bytes_max", 0) for r in records), default=0)},
        "totals": {"sources": len(job.sources), "done": len(done), "kept": len(job.kept), "skipped": len(skipped),
                   "requests": requests, "bytes_wire": wire, "bytes_needed": sum(r["bytes_needed"] for r in records),
                   "requests_per_source": requests / n, "bytes_wire_per_source": wire / n},
        "clipped": sum(1 for s in job.sources if s.box is not None and s.clipped),
        "skipped": skipped, "ranks": records,
    }


def _memory_bound_bytes(cfg: RunConfig, job: CutoutJob) -> int:
    """A rank holds one batch's buffer (at most batch_bytes, or one larger cut-out's own plan) and
    one cut-out gathered from it at a time; requests land in the buffer with no copy beside it."""
    largest = max((box_bytes(job.sources[i].box, job.layout.itemsize) for i in job.todo), default=0)
    alone = max((_alone_wire_bytes(job.layout, job.sources[i].box, job.settings, job.max_gap_bytes) for i in job.todo),
                default=0)
    return max(cfg.cutout_batch_bytes, alone) + largest


def cutouts_api(source, catalogue, output_dir=None, *, comm=None, config=None, **settings) -> dict | None:
    """`ingest.cutouts`: the job from Python, on `comm` (default COMM_SELF)."""
    from ingest.config import load_config

    comm = MPI.COMM_SELF if comm is None else comm
    given = {"source": source, "catalogue": catalogue, "progress": False, **settings}
    if output_dir is not None:
        given["output_dir"] = output_dir
    cfg = root_step(comm, load_config, given, config)
    return cutouts(comm, cfg)
