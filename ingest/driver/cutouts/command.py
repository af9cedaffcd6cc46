"""`python -m ingest cutouts`: every source of a catalogue cut out of one cube, by all the ranks.

Rank 0 reads the header and the catalogue, turns each source into a pixel box (its world region
through the cube's WCS, or SoFiA-2's bounding box plus a margin), drops the cut-outs an earlier
run left whole for the same request (`outputs.cutouts.resume`), and splits the rest over the
ranks in contiguous stretches balanced by bytes, along the axis whose stripes the cost model
predicts streamed soonest (`core.cutstripes.choose_split`). Each rank then streams its stripe
once, band by band (`rank`), handing on each cut-out as the read passes its last plane,
written whole or not at all. Rank 0 gathers the records into manifest.json and the report, with
which reading each rank chose and why. A collection of tile cubes as the source (a glob, a prefix
ending in '/', @FILE) is prepared and cut by `tiles`: each source from the tile the rule picks.
"""
from __future__ import annotations

from mpi4py import MPI

from ingest.buffers import resident_bytes, return_freed_heap
from ingest.collection.spec import is_collection
from ingest.config import RunConfig
from ingest.config.settings import configured_settings, retry_policy, transport_options, tunable
from ingest.core.cutplan import box_selection, rank_share_box
from ingest.core.cutstripes import choose_split, rank_budget_bytes
from ingest.core.sharing import RankLoad, predict_job
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.driver.cutouts import sinks
from ingest.driver.cutouts.progress import Progress, Reporter
from ingest.driver.cutouts.job import Catalogue, CutoutJob, gap_bytes, outputs_cube
from ingest.driver.cutouts.rank import cut_rank
from ingest.driver.cutouts.sources import sources_and_request
from ingest.driver.cutouts.tiles import TilesJob, cut_tiles, prepare_tiles
from ingest.driver.job import tune_for_job
from ingest.driver.mpi import Handout, all_agree_or_raise, root_step, topology
from ingest.driver.probe_rounds import root_step_with_crew
from ingest.driver.quiet import quiet_allgather
from ingest.driver.rootwork import building_report, gather_to_root, ledger, preload, start_ledger
from ingest.driver.source import ensure_lifetime, ready_to_read, resolve_source
from ingest.formats.reader import read_any_layout_timed
from ingest.outputs import cutouts as outputs
from ingest.outputs.report import write_report
from ingest.transports import open_transport

REPORT_SCHEMA = "ingest.cutouts-report/1"
# What rank 0's prepare imports for any catalogue (the header's parser, the table reader, the
# sky's WCS and frames), and what it writes its own cut-outs with.
ROOT_MODULES = ("astropy.io.fits", "astropy.table", "astropy.wcs", "astropy.coordinates",
                "ingest.outputs.cutout_headers")


def prepare(cfg: RunConfig, topology, crew=None) -> Handout:
    """Rank 0: header, catalogue, boxes, what is already done, the link (and, with `crew`, what
    the ranks share: as `run` measures it), and the split over ranks: the CutoutJob for all, each
    rank's contiguous stretch of sources in object order, and the Catalogue for rank 0. A
    collection of tiles (ingest.collection) goes to driver.cutouts.tiles.prepare_tiles."""
    if is_collection(cfg.source):
        return prepare_tiles(cfg, topology, crew)
    sinks.check_outputs(cfg)
    method, read_source, signer_args = resolve_source(cfg)
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 60.0, cfg)
    with open_transport(read_source, method, threads=LATENCY_THREADS, **transport_options(cfg)) as transport:
        layout, header = read_any_layout_timed(transport, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg))
        info = transport.info
        cube = outputs_cube(layout, info)
        sources, request = sources_and_request(cfg, layout, cube)  # catalogue errors before any write
        ext = ".h5" if layout.kind == "hdf5" else ".fits"
        todo, kept, n_recut = outputs.resume(sources, sinks.kept(cfg, cube), ext)
        settings = configured_settings(cfg)
        if todo and tunable(cfg, layout):
            share = rank_share_box([sources[i].box for i in todo], topology.n_ranks)
            settings, _ = tune_for_job(cfg, transport, layout, header, topology, crew, read_source, method,
                                       sel=box_selection(share, layout.shape))
    gap = gap_bytes(cfg, settings)
    n_ranks = topology.n_ranks
    axis, choice, parts = 0, "nothing to read", [(0, 0)] * n_ranks
    if todo:
        axis, order, parts, choice = choose_split(layout, [sources[i].box for i in todo], n_ranks, max_gap_bytes=gap,
                                                  chunk_bytes=settings.chunk_bytes, cost=settings.cost,
                                                  threads=settings.threads)
        todo = [todo[k] for k in order]
    per_rank = [[sources[i] for i in todo[a:b]] for a, b in parts]
    if method == "presigned":
        read_source = ensure_lifetime(read_source, signer_args, 3600.0, cfg)
    job = CutoutJob(read_source, method, layout, info, signer_args, settings, len(todo), gap, axis, choice, topology)
    catalogue = Catalogue(len(sources), sum(1 for s in sources if s.box is not None and s.clipped),
                          tuple(s.entry(None, 0, None) for s in sources if s.box is None), tuple(kept), n_recut,
                          request)
    return Handout(job, per_rank, catalogue)


def cutouts(comm, cfg: RunConfig) -> dict | None:
    """The whole job on every rank of `comm`; rank 0 returns the report, the others None."""
    rank, size = comm.Get_rank(), comm.Get_size()
    start_ledger()
    t_start = MPI.Wtime()
    # Rank 0 loads what reads the header, the catalogue and the sky (astropy), the others what
    # they write with (astropy's FITS cards) and read with (their method's client, which rank 0's
    # shared rounds would otherwise wait for): seconds of imports, all ranks at once.
    preload(rank, ROOT_MODULES, lambda: ready_to_read(cfg, "ingest.outputs.cutout_headers"))
    job, mine, catalogue = root_step_with_crew(comm, prepare, cfg, topology(comm))
    return_freed_heap()  # the catalogue's conversion on rank 0 leaves its freed heap behind
    prep_s = MPI.Wtime() - t_start
    bar = Progress(cfg, comm, job.n_todo) if rank == 0 else None
    reporter = Reporter(comm) if rank != 0 else None
    error, entries, record = None, [], None
    resident = quiet_allgather(comm, resident_bytes())  # (and the barrier the makespan starts at)
    budget_bytes = rank_budget_bytes(cfg.cutout_batch_bytes, resident, rank)
    t0 = MPI.Wtime()
    try:
        cut = cut_tiles if isinstance(job, TilesJob) else cut_rank
        entries, record = cut(comm, cfg, job, mine, progress=(bar.mine if bar else reporter.send),
                                   budget_bytes=budget_bytes)
    except Exception as exc:  # noqa: BLE001 - every rank learns of it below
        error = exc
    if reporter is not None:
        reporter.close()
    if bar is not None:
        bar.drain_until_done(size)
    all_agree_or_raise(comm, error)
    gathered = gather_to_root(comm, (entries, record, MPI.Wtime() - t0))  # and each rank's elapsed
    if rank != 0:
        return None
    makespan_s = max(elapsed_s for _, _, elapsed_s in gathered)
    t_root = MPI.Wtime()
    with building_report():  # the manifest too: rank 0 writes it for every rank
        done = [e for es, _, _ in gathered for e in es]
        report = _report(cfg, job, catalogue, done, [r for _, r, _ in gathered], makespan_s, prep_s)
        if catalogue.n_sources and len(catalogue.skipped) == catalogue.n_sources and not isinstance(job, TilesJob):
            # nothing cut: where the cube is (a collection's reasons name the nearest tiles)
            from ingest.sky.footprint import requests_footprint
            from ingest.sky.header import wcs_header

            report["footprint"] = requests_footprint(wcs_header(job.layout), job.layout.shape, getattr(
                job.layout, "beams", None), [e.get("region") for e in catalogue.skipped])
        manifest = {"schema": outputs.SCHEMA, "cube": job.manifest_cube(),
                    "request": catalogue.request,
                    "sources": sorted(done + list(catalogue.kept) + report["skipped"], key=lambda e: e["row"])}
        report["manifest"] = sinks.write_manifest(cfg, manifest)
    report["rank0_gather_s"] = MPI.Wtime() - t_root
    report["root"] = ledger().as_dict(makespan_s)
    if cfg.report:
        write_report(cfg.report, report)
    print(outputs.summary_text(report), flush=True)
    return report


def _report(cfg, job: CutoutJob, catalogue: Catalogue, done, records, makespan_s: float, prep_s: float) -> dict:
    skipped = list(catalogue.skipped)
    requests = sum(r["requests"] for r in records)
    wire = sum(r["bytes_wire"] for r in records)
    n = max(1, len(done))
    return {
        "schema": REPORT_SCHEMA, "config": cfg.to_report_dict(), "cube": job.report_cube(),
        "makespan_s": makespan_s, "rank0_prepare_s": prep_s,
        "settings": {"threads": job.settings.threads, "chunk_bytes": job.settings.chunk_bytes,
                     "max_gap_bytes": job.max_gap_bytes, "band_budget_bytes": cfg.cutout_batch_bytes,
                     "memory_bound_bytes": max((r["memory_bound_bytes"] for r in records), default=0),
                     "prediction": _prediction(job, records)},
        "plan": {"choice": _choice(job, records), "split_axis": job.split_axis,
                 "bands": sum(len(r.get("bands", ())) for r in records),
                 "modes": {m: sum(1 for r in records for b in r.get("bands", ()) if b["mode"] == m)
                           for m in ("stream", "spans")},
                 "read_share_of_data": wire / max(1, job.data_bytes),
                 "buffer_bytes_max": max((r.get("buffer_bytes_max", 0) for r in records), default=0)},
        "totals": {"sources": catalogue.n_sources, "done": len(done), "recut": catalogue.n_recut,
                   "new": len(done) - catalogue.n_recut, "kept": len(catalogue.kept), "skipped": len(skipped),
                   "requests": requests, "bytes_wire": wire, "bytes_needed": sum(r["bytes_needed"] for r in records),
                   "requests_per_source": requests / n, "bytes_wire_per_source": wire / n},
        "clipped": catalogue.n_clipped,
        "skipped": skipped, "ranks": records,
    }


def _prediction(job: CutoutJob, records) -> dict | None:
    """The cost model's makespan for the plans the ranks made before they read (their bands'
    requests and wire bytes), on the link and shared pipes rank 0 measured: priced on rank 0 after
    the read, from nothing the read measured, so that rank 0 need not plan every rank's stripe."""
    if not any(r.get("bands") for r in records):  # nothing left to cut: no plan to price
        return None
    loads = [RankLoad(sum(b["requests"] for b in r.get("bands", ())), sum(b["bytes_wire"] for b in r.get("bands", ())),
                      job.settings.threads) for r in sorted(records, key=lambda r: r["rank"])]
    return predict_job(job.settings.alone, job.settings.shared, job.topology, loads).as_dict()


def _choice(job: CutoutJob, records) -> str:
    """The split over ranks and each rank's bands, in words."""
    ranks = [f"rank {r['rank']}: {r['plan_choice']}" for r in records if r.get("plan_choice")]
    return "; ".join([job.plan_choice] + ranks)


def cutouts_api(source, catalogue, output_dir=None, *, comm=None, config=None, **settings) -> dict | None:
    """`ingest.cutouts`: the job from Python, on `comm` (default COMM_SELF)."""
    from ingest.config import load_config

    comm = MPI.COMM_SELF if comm is None else comm
    given = {"source": source, "catalogue": catalogue, "progress": False, **settings}
    if output_dir is not None:
        given["output_dir"] = output_dir
    cfg = root_step(comm, load_config, given, config)
    return cutouts(comm, cfg)
