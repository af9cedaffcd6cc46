"""`info` and `plan`: look at a cube and at how ingest would read it, before reading it."""
from __future__ import annotations

import json
from dataclasses import replace

from ingest.api.read import plan_with
from ingest.cli.inspect_tiles import collection_info, collection_plan
from ingest.collection.spec import is_collection
from ingest.config import add_run_arguments, config_from_args
from ingest.config.settings import (configured_cost, read_options, resolve_settings, retry_policy, settings_for_job,
                                    transport_options)
from ingest.config.site import load_site
from ingest.config.site_pricing import egress_warning, job_topology, price_job, starting_cost
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.core.selection import box_to_region, normalize, parse_region
from ingest.core.sharing import Topology
from ingest.core.tuning import Tuning
from ingest.driver.job import assign, box_bytes, decompose_job, largest_selection, predict, world_job_box
from ingest.engine import linkcache
from ingest.engine.autotune import hinted_cost
from ingest.errors import ConfigError
from ingest.formats.hdf5 import list_datasets
from ingest.formats.reader import read_any_layout, read_any_layout_timed
from ingest.sky.footprint import cube_footprint, footprint_text
from ingest.sky.header import wcs_header
from ingest.transports import describe_environment, open_transport
from ingest.transports.storefacts import describe as describe_store, learn_store_facts
from ingest.units import format_bytes


def _fits_facts(layout) -> dict:
    return {
        "source": layout.source, "format": "fits", "hdu": layout.hdu, "shape": list(layout.shape),
        "fits_naxis": list(reversed(layout.shape)), "bitpix": layout.bitpix, "stored_dtype": layout.raw_dtype.str,
        "dtype": layout.out_dtype.str, "bscale": layout.bscale, "bzero": layout.bzero, "blank": layout.blank,
        "header_offset": layout.header_offset, "data_offset": layout.data_offset, "data_bytes": layout.data_bytes,
        "object_bytes": layout.object_bytes,
    }


def _hdf5_facts(layout, datasets: list[dict]) -> dict:
    index = layout.chunks
    return {
        "source": layout.source, "format": "hdf5", "dataset": layout.dataset, "shape": list(layout.shape),
        "dtype": layout.dtype.str, "storage": layout.storage,
        "chunk_shape": list(index.chunk_shape) if index is not None else None,
        "chunks_stored": index.n_chunks if index is not None else None,
        "stored_bytes": int(index.sizes.sum()) if index is not None else None,
        "filters": ", ".join(f"{f.id} {f.name}".strip() for f in layout.filters) or "none",
        "fill_value": layout.fill_value.item(), "data_offset": layout.data_offset, "data_bytes": layout.data_bytes,
        "object_bytes": layout.object_bytes, "open_requests": layout.open_requests, "open_bytes": layout.open_bytes,
        "datasets": datasets,
    }


def _print_datasets(datasets: list[dict]) -> None:
    print("datasets:")
    for d in datasets:
        chunks = "x".join(map(str, d["chunks"])) if d["chunks"] else "-"
        filters = ",".join(f["name"] or str(f["id"]) for f in d["filters"]) or "-"
        mark = "*" if d["candidate"] else " "
        print(f" {mark} {d['path']:<24} {str(d['shape']):<22} {d['dtype']:<8} {d['storage']:<10} "
              f"chunks {chunks:<14} filters {filters}")


def _info(args) -> int:
    cfg = config_from_args(args)
    if is_collection(cfg.source):
        return collection_info(cfg, args)
    with open_transport(cfg.source, cfg.method, threads=1, **transport_options(cfg)) as transport:
        layout = read_any_layout(transport, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg))
        if layout.kind == "hdf5":
            facts = _hdf5_facts(layout, list_datasets(transport))
        else:
            facts = _fits_facts(layout)
        facts["engine"] = transport.engine
        if transport.name != "posix":  # what the store answers (docs/stores.md): 1-2 small requests
            facts["store"] = learn_store_facts(transport, past_end=cfg.probe).as_dict()
    # Where the cube is: its sky footprint, spectral range and beam, from the header just read.
    facts["footprint"] = cube_footprint(wcs_header(layout), layout.shape, getattr(layout, "beams", None))
    world = world_job_box(cfg, layout)  # `info --pos ...`: which box of this cube the region is
    if world is not None:
        facts["world_region"] = world.as_dict()
    # What the user's environment (AWS_*, profiles, proxies) set, and from where; a local file has none.
    environment = ([{"setting": s, "value": v, "source": src} for s, v, src in describe_environment(transport_options(cfg))]
                   if cfg.resolved_method != "posix" else [])
    if args.json:
        print(json.dumps({**facts, "environment": environment}, indent=2))
        return 0
    datasets = facts.pop("datasets", None)
    store = facts.pop("store", None)
    footprint = facts.pop("footprint")
    width = max(map(len, facts))
    for key, value in facts.items():
        extra = f"  ({format_bytes(value)})" if key.endswith("_bytes") and value is not None else ""
        print(f"{key:<{width}}  {value}{extra}")
    print(footprint_text(footprint))
    if datasets is not None:
        _print_datasets(datasets)
    if store is not None:
        _print_store(store)
    if environment:
        _print_environment(environment)
    if args.header:
        for pos in range(0, len(layout.header_text), 80):
            card = layout.header_text[pos : pos + 80].rstrip()
            if card:
                print(card)
    return 0


def _print_store(store: dict) -> None:
    print(f"store at {store['endpoint']} (what it answered; {store['requests']} request(s) made to ask):")
    lines = describe_store(store)
    width = max(len(label) for label, _ in lines)
    for label, text in lines:
        print(f"  {label:<{width}}  {text}")


def _print_environment(rows: list[dict]) -> None:
    print("settings (secrets redacted):")
    width = max(len(r["setting"]) for r in rows)
    shown = [str(r["value"]) for r in rows]
    value_width = min(60, max(map(len, shown)))
    for r, value in zip(rows, shown):
        print(f"  {r['setting']:<{width}}  {value:<{value_width}}  from {r['source']}")


# A cost model option typed on the command line is the model to plan with: the header request's
# timing then does not replace it.
_MODEL_OPTIONS = ("latency_s", "bandwidth_bytes_per_s", "cpu_per_request_s")


def _plan(args) -> int:
    cfg = config_from_args(args)
    n_ranks = None if args.ranks is None else _whole("ranks", args.ranks)
    if args.nodes is not None and n_ranks is None:
        raise ConfigError("nodes: give --ranks too (the job's ranks are spread over --nodes as srun's block "
                          "distribution places them)")
    n_nodes = None if args.nodes is None else _whole("nodes", args.nodes)
    if args.cores_per_node is not None and n_ranks is None:
        raise ConfigError("cores-per-node: give --ranks too (the cores the job's ranks share on each node)")
    cores = None if args.cores_per_node is None else _whole("cores-per-node", args.cores_per_node)
    site = None if args.site is None else load_site(args.site)
    given = frozenset(name for name in _MODEL_OPTIONS if getattr(args, name) is not None)
    # The site's latency beats the header request's time: one request from wherever plan runs is
    # not the compute nodes' path to the store (its client CPU is still this client's).
    use_header = not given and not (site is not None and site.latency_s.known)
    if is_collection(cfg.source):  # tiles' footprints, sources per tile, the cut-out job's makespan
        return collection_plan(cfg, args, job_topology(n_ranks or 1, n_nodes, cores, site)[0])
    region = parse_region(cfg.region or "")
    with open_transport(cfg.source, cfg.method, threads=LATENCY_THREADS, **transport_options(cfg)) as transport:
        layout, header = read_any_layout_timed(transport, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg))
        world = world_job_box(cfg, layout)
        if world is not None:
            region = box_to_region(world.box)
        base = hinted_cost(configured_cost(cfg), header) if not given and not use_header else configured_cost(cfg)
        settings = resolve_settings(read_options(cfg), transport, layout, normalize(region, layout.shape),
                                    cost=starting_cost(base, site, given), header=header if use_header else None)
    cost, tuning = settings.cost, settings.tuning
    sel, plan = plan_with(layout, region, settings)
    summary = plan.describe(cost, settings.threads)
    if tuning is not None:
        summary["tuning"] = tuning.as_dict()
    summary["box"] = [list(b) for b in sel.box]
    if world is not None:
        summary["world_region"] = world.as_dict()
    summary["threads"] = settings.threads
    job = None
    if n_ranks is not None:
        topology, placement = job_topology(n_ranks, n_nodes, cores, site)
        pricing = price_job(settings.alone, settings.shared, topology, site,
                            link_measured=_link_measured(settings, transport.endpoint), given=given,
                            header_latency=use_header and header is not None and header.request_s > 0)
        job = _job(cfg, settings, layout, topology, transport.endpoint, pricing, placement)
        job["summary"]["site"] = site.as_dict() if site is not None else None
    if job is not None:
        summary["job"] = job["summary"]
    if cfg.catalogue:  # the cut-out job of a catalogue, priced on the job's ranks (one by default)
        from ingest.driver.cutouts.plan import plan_catalogue

        topology = job["topology"] if job is not None else job_topology(1, None, cores, site)[0]
        priced = job["priced"] if job is not None else settings
        summary["catalogue"] = plan_catalogue(cfg, layout, priced, topology, priced.shared)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"cube {_describe_cube(layout)}")
    print(f"box (numpy order, half-open): {summary['box']}")
    if world is not None:
        clipped = f"; clipped to the cube on {', '.join(world.clipped)}" if world.clipped else ""
        print(f"world region {world.region_text}{clipped}")
    if tuning is not None:
        print(f"tuned by {tuning.reason}")
    print(
        f"strategy {plan.strategy}: {plan.n_requests} requests of up to {format_bytes(summary['request_bytes_max'])} "
        f"(chunk {format_bytes(settings.chunk_bytes)}, gap merged up to {format_bytes(min(plan.max_gap_bytes, 1 << 60))})"
    )
    if summary.get("bytes_stored") is not None:  # chunked: whole chunks travel, compressed
        print(f"chunks needed {summary['chunks']} ({summary['chunks_missing']} never written: fill value), stored "
              f"{format_bytes(summary['bytes_stored'])}; on the wire {format_bytes(plan.wire_bytes)}, "
              f"read amplification {plan.amplification:.3f} (wire / needed chunks); the box decodes to "
              f"{format_bytes(plan.needed_bytes)}")
    else:
        print(f"bytes needed {format_bytes(plan.needed_bytes)}, on the wire {format_bytes(plan.wire_bytes)}, "
              f"read amplification {plan.amplification:.3f}")
    print(
        f"predicted {summary['predicted_s']:.3f} s with {settings.threads} in flight "
        f"(model: {cost.latency_s * 1e3:.2f} ms per request, {format_bytes(cost.bandwidth_bytes_per_s)}/s, "
        f"client CPU {cost.cpu_per_request_s * 1e6:.0f} µs per request)"
    )
    if job is not None:
        _print_job(job, layout)
    elif site is not None:
        print(f"site file {site.path}: its latency and link priced the read; give --ranks N to price a job's "
              f"shared pipes with it")
    for i in range(min(args.requests, plan.n_requests)):
        req = plan.request(i)
        print(f"  request {i}: bytes [{req.offset}, {req.offset + req.nbytes})  {format_bytes(req.nbytes)}")
    if plan.n_requests > args.requests > 0:
        print(f"  ... {plan.n_requests - args.requests} more")
    if "catalogue" in summary:
        _print_catalogue(summary["catalogue"])
    return 0


def _describe_cube(layout) -> str:
    """One line: where the data is and how it is stored."""
    what = f"{layout.source}: shape {layout.shape} {layout.raw_dtype.str}"
    if layout.kind != "hdf5":
        return f"{what}, data at byte {layout.data_offset}"
    what = f"{layout.source} {layout.dataset}: shape {layout.shape} {layout.raw_dtype.str}, {layout.storage}"
    if layout.chunks is not None:
        filters = ", ".join(f.name or str(f.id) for f in layout.filters) or "no filters"
        return (f"{what} in {layout.chunks.n_chunks} chunks of {'x'.join(map(str, layout.chunks.chunk_shape))} "
                f"({filters}); metadata read in {layout.open_requests} requests, {format_bytes(layout.open_bytes)}")
    return f"{what}, data at byte {layout.data_offset}"


def _link_measured(settings, endpoint: str | None) -> str | None:
    """What measured one rank's link, if anything did: this plan's probe (plan --probe) or the
    link cache's record of the endpoint (which the tuner used), else None."""
    if settings.probe is not None:
        return "this plan's probe of the link (--probe)"
    recalled = linkcache.recall(endpoint) if settings.tuning is not None else None
    return recalled.describe() if recalled is not None and recalled.probe is not None else None


def _job(cfg, settings, layout, topology: Topology, endpoint: str | None, pricing, placement) -> dict:
    """The job `run` would make of --region on topology's ranks: its settings (chosen again for
    each rank's share of what the ranks share, as `pricing` has it: measured, the site file's,
    assumed), regions, who reads which, its prediction and each figure's source."""
    n_ranks = topology.n_ranks
    alone, shared = settings.alone, pricing.shared
    if layout.kind != "tiles":
        largest = largest_selection(cfg, settings, layout, n_ranks)
        settings = settings_for_job(read_options(cfg), settings, layout, largest, shared, topology)
    grid_fits, reason, regions = decompose_job(cfg, settings, layout, n_ranks)
    assignment = assign(regions, layout.itemsize, n_ranks)
    prediction, _ = predict(cfg, _priced_with(settings, alone, shared), layout, regions, assignment, topology,
                            endpoint, cfg.resolved_method)
    job_bytes = sum(box_bytes(box, layout.itemsize) for box in regions)
    warnings = ([egress_warning(n_ranks, job_bytes, prediction.makespan_s)]
                if pricing.egress_unknown and n_ranks > 1 else [])
    summary = {**prediction.as_dict(), "strategy": settings.strategy, "threads": settings.threads,
               "chunk_bytes": settings.chunk_bytes, "max_gap_bytes": settings.max_gap_bytes,
               "grid_fits": list(grid_fits), "regions": len(regions),
               "tuning": settings.tuning.reason if settings.tuning is not None else None,
               "job_bytes": job_bytes, "figures": [f.as_dict() for f in (*pricing.facts, *placement)],
               "warnings": warnings}
    return {"summary": summary, "prediction": prediction, "reason": reason, "regions": regions,
            "assignment": assignment, "settings": settings, "facts": (*pricing.facts, *placement),
            "warnings": warnings, "topology": topology, "priced": _priced_with(settings, alone, shared)}


def _print_catalogue(c: dict) -> None:
    p = c["prediction"]
    print(f"catalogue: {c['cut']} cut-outs ({c['skipped']} skipped) of {c['sources']} sources: {c['requests']} requests, "
          f"{format_bytes(c['bytes_wire'])} on the wire for {format_bytes(c['bytes_needed'])} of cut-outs "
          f"({c['read_share_of_data']:.1%} of the data; {c['requests_per_source']:.2f} requests and "
          f"{format_bytes(c['bytes_wire_per_source'])} a source); predicted makespan {p['makespan_s']:.3g} s "
          f"on {p['ranks']} rank(s), bound by {p['binding']}")


def _priced_with(settings, alone, shared):
    """`settings` whose prediction uses `alone` and `shared` (predict reads them from the tuning):
    a configured read (no tuning) is priced with the site's pipes too."""
    tuning = settings.tuning or Tuning(settings.cost, settings.strategy, settings.chunk_bytes, settings.threads,
                                       settings.max_gap_bytes, 0.0, "configured")
    return replace(settings, tuning=replace(tuning, alone=tuning.alone or alone, shared=shared))


def _print_job(job: dict, layout) -> None:
    """The job's regions (as `run`/`prestage` would split them), who reads which, and the whole
    job's predicted makespan with the term that binds it."""
    prediction, settings, regions = job["prediction"], job["settings"], job["regions"]
    rank_of = {i: r for r, mine in enumerate(job["assignment"]) for i in mine}
    print(f"regions on {prediction.topology.n_ranks} rank(s): {job['reason']}")
    print("  region  rank  x_min, x_max, y_min, y_max, z_min, z_max (0-based, inclusive)  bytes")
    for i, box in enumerate(regions):
        inclusive = ", ".join(f"{a}, {b - 1}" for a, b in reversed(box))
        print(f"  {i + 1:6d}  {rank_of[i]:4d}  {inclusive:<50}  {format_bytes(box_bytes(box, layout.itemsize))}")
    print(f"job: each rank {settings.strategy}, {settings.threads} in flight, requests up to "
          f"{format_bytes(settings.chunk_bytes)}; {prediction.describe()}")
    for line in job["warnings"]:
        print(f"  {line}")
    print(f"  shared pipes: {prediction.source}")
    print("  figures (measured: a probe or the link cache; command line; site file; assumed):")
    width, value_width = (max(len(text) for text in column) for column in zip(
        *((f.term, f.value_text()) for f in job["facts"])))
    for fact in job["facts"]:
        lost = f"; not used: {fact.not_used}" if fact.not_used else ""
        print(f"    {fact.term:<{width}}  {fact.value_text():<{value_width}}  {fact.origin}: {fact.source}{lost}")


def _whole(name: str, text: str) -> int:
    """--ranks N, --nodes M, --cores-per-node C: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{name}: expected a whole number >= 1, got {text!r}")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="shape, dtype, header and data offsets, object size; where the cube is on the sky "
                                    "and in frequency/velocity, its beam; an HDF5 file's datasets")
    add_run_arguments(p, "info", positional_source=True)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--header", action="store_true", help="also print the header cards")
    p.add_argument("--no-probe", dest="probe", action="store_const", const=False, default=None,
                   help="ask the store nothing beyond the header's reads: no ranged GET past the object's end "
                        "(its answer is then 'not asked')")
    p.set_defaults(func=_info)

    p = sub.add_parser("plan", help="the requests a read would make, amplification and predicted time")
    add_run_arguments(p, "plan", positional_source=True)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--requests", type=int, default=5, help="list the first N requests (default 5)")
    p.add_argument("--ranks", default=None, metavar="N",
                   help="also list the regions a job on N ranks splits --region (default the cube) into, and "
                        "which rank reads each (--grid, --halo, --region-shape, --min-overlap as for run), and the "
                        "whole job's predicted makespan with the term that binds it")
    p.add_argument("--nodes", default=None, metavar="M",
                   help="with --ranks: the nodes the ranks run on (srun's block distribution), so the prediction "
                        "counts what each node's ranks share (default: as many as the site file's ranks_per_node "
                        "needs, else 1)")
    p.add_argument("--cores-per-node", default=None, metavar="C",
                   help="with --ranks: each node's cores, so the prediction counts the ranks' CPU seconds on them "
                        "(run learns them; default the site file's, else unknown: no cores term)")
    p.add_argument("--site", default=None, metavar="FILE",
                   help="a site file (configs/sites/*.toml): the node's NIC, the store's egress and request "
                        "ceiling, latency and ranks per node, each with its source; they price the job wherever "
                        "nothing measured that term (docs/sites.md)")
    p.set_defaults(func=_plan)
