"""`info` and `plan`: look at a cube and at how ingest would read it, before reading it."""
from __future__ import annotations

import json

from ingest.api.read import plan_read
from ingest.formats.reader import read_any_layout, read_any_layout_timed
from ingest.core.lattice import DEFAULT_CHUNK_BYTES, DEFAULT_THREADS, STRATEGIES
from ingest.core.cost import CostModel
from ingest.config import source_argument
from ingest.errors import ConfigError
from ingest.core.linkprobe import LATENCY_THREADS
from ingest.core.selection import normalize, parse_region
from ingest.transports import engine_name, open_transport
from ingest.units import format_bytes, parse_bytes


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
    args.source = source_argument(args.source)
    with open_transport(args.source, args.method, threads=1, **_transport_options(args)) as transport:
        layout = read_any_layout(transport, hdu=args.hdu, dataset=args.dataset)
        if layout.kind == "hdf5":
            from ingest.formats.hdf5 import list_datasets

            facts = _hdf5_facts(layout, list_datasets(transport))
        else:
            facts = _fits_facts(layout)
        facts["engine"] = engine_name(transport)
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    datasets = facts.pop("datasets", None)
    width = max(map(len, facts))
    for key, value in facts.items():
        extra = f"  ({format_bytes(value)})" if key.endswith("_bytes") and value is not None else ""
        print(f"{key:<{width}}  {value}{extra}")
    if datasets is not None:
        _print_datasets(datasets)
    if args.header:
        for pos in range(0, len(layout.header_text), 80):
            card = layout.header_text[pos : pos + 80].rstrip()
            if card:
                print(card)
    return 0


def _plan(args) -> int:
    args.source = source_argument(args.source)
    if args.max_in_flight is not None and args.max_in_flight < 1:
        raise ConfigError(f"max_in_flight: expected a whole number >= 1, got {args.max_in_flight}")
    if args.cpu_per_request_s is not None and not args.cpu_per_request_s >= 0:
        raise ConfigError(f"cpu_per_request_s: expected seconds >= 0, got {args.cpu_per_request_s!r}")
    given = {name: value for name, value in (("latency_s", args.latency_s),
                                             ("bandwidth_bytes_per_s", args.bandwidth_bytes_per_s),
                                             ("cpu_per_request_s", args.cpu_per_request_s)) if value is not None}
    cost = CostModel(**given)
    chunk_bytes = None if args.chunk_bytes == "auto" else parse_bytes(args.chunk_bytes, "chunk_bytes")
    max_gap = None if args.max_gap_bytes is None else parse_bytes(args.max_gap_bytes, "max_gap_bytes")
    threads = None if args.threads == "auto" else _positive_int(args.threads, "threads")
    region = parse_region(args.region)
    tuning = None
    with open_transport(args.source, args.method, threads=LATENCY_THREADS, **_transport_options(args)) as transport:
        layout, header = read_any_layout_timed(transport, hdu=args.hdu, dataset=args.dataset)
        from ingest.engine.autotune import tune_read, worth_probing

        if args.strategy == "auto" and worth_probing(layout):
            # A model given on the command line is the one to plan with, not the header's timing.
            tuning, _ = tune_read(transport, layout, normalize(region, layout.shape), cost, probe=args.probe,
                                  chunk_bytes=chunk_bytes, threads=threads, gap_bytes=max_gap,
                                  header=None if given else header, in_flight_max=args.max_in_flight)
            cost, chunk_bytes, threads = tuning.cost, tuning.chunk_bytes, tuning.threads
            args.strategy, max_gap = tuning.strategy, tuning.max_gap_bytes
    chunk_bytes = chunk_bytes or DEFAULT_CHUNK_BYTES
    threads = threads or DEFAULT_THREADS
    args.threads = threads
    sel, plan = plan_read(layout, region, strategy=args.strategy, chunk_bytes=chunk_bytes, max_gap_bytes=max_gap, cost=cost)
    summary = plan.describe(cost, args.threads)
    if tuning is not None:
        summary["tuning"] = tuning.as_dict()
    summary["box"] = [list(b) for b in sel.box]
    summary["threads"] = args.threads
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"cube {_describe_cube(layout)}")
    print(f"box (numpy order, half-open): {summary['box']}")
    if tuning is not None:
        print(f"tuned by {tuning.reason}")
    print(
        f"strategy {plan.strategy}: {plan.n_requests} requests of up to {format_bytes(summary['request_bytes_max'])} "
        f"(chunk {format_bytes(chunk_bytes)}, gap merged up to {format_bytes(min(plan.max_gap_bytes, 1 << 60))})"
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
        f"predicted {summary['predicted_s']:.3f} s with {args.threads} in flight "
        f"(model: {cost.latency_s * 1e3:.2f} ms per request, {format_bytes(cost.bandwidth_bytes_per_s)}/s, "
        f"client CPU {cost.cpu_per_request_s * 1e6:.0f} µs per request)"
    )
    if args.regions_for is not None:
        _print_regions(args, layout, tuning)
    for i in range(min(args.requests, plan.n_requests)):
        req = plan.request(i)
        print(f"  request {i}: bytes [{req.offset}, {req.offset + req.nbytes})  {format_bytes(req.nbytes)}")
    if plan.n_requests > args.requests > 0:
        print(f"  ... {plan.n_requests - args.requests} more")
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


def _print_regions(args, layout, tuning) -> None:
    """The job's regions (as `run`/`prestage` would split it on --ranks ranks), and who reads which."""
    from ingest.config import load_config
    from ingest.driver.job import _configured, assign, box_bytes, decompose_job

    cfg = load_config({"source": args.source, "grid": args.grid, "halo": args.halo, "region_shape": args.region_shape,
                       "min_overlap": args.min_overlap, "region": args.job_region})
    settings = _configured(cfg)
    n_ranks = _positive_int(args.regions_for, "ranks")
    grid_fits, reason, regions = decompose_job(cfg, settings, layout, n_ranks)
    rank_of = {i: r for r, mine in enumerate(assign(regions, layout.itemsize, n_ranks)) for i in mine}
    print(f"regions on {n_ranks} rank(s): {reason}")
    print("  region  rank  x_min, x_max, y_min, y_max, z_min, z_max (0-based, inclusive)  bytes")
    for i, box in enumerate(regions):
        inclusive = ", ".join(f"{a}, {b - 1}" for a, b in reversed(box))
        print(f"  {i + 1:6d}  {rank_of[i]:4d}  {inclusive:<50}  {format_bytes(box_bytes(box, layout.itemsize))}")


def _positive_int(text: str, field: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{field}: expected a whole number >= 1 or auto, got {text!r}")
    return value


def _common(p) -> None:
    p.add_argument("source", help="local path, presigned http(s) URL, s3://bucket/key, or env:VARIABLE holding one")
    p.add_argument("--hdu", type=int, default=0, help="FITS: HDU index (default 0, the primary)")
    p.add_argument("--dataset", default=None,
                   help="HDF5: dataset path, e.g. /0/DATA (default: the file's only 3-D or 4-D numeric dataset)")
    p.add_argument("--method", default="auto", help="posix | presigned | s3 | auto (from the source)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint for an s3:// source (default: boto3's chain)")
    p.add_argument("--ca-bundle", default=None, help="PEM file of CAs to trust for TLS")
    p.add_argument("--engine", default="auto", choices=("auto", "native", "urllib3"),
                   help="what issues the HTTP requests (auto: native libcurl when installed, else urllib3/boto3)")
    p.add_argument("--no-verify-tls", dest="verify_tls", action="store_false",
                   help="do not verify TLS certificates (test servers only)")


def _transport_options(args) -> dict:
    """The TLS and endpoint options of `info`/`plan`, as the transports take them."""
    if args.ca_bundle and not args.verify_tls:
        raise ConfigError("ca_bundle: given with --no-verify-tls; the bundle would be ignored")
    opts = {"verify_tls": args.verify_tls, "ca_bundle": args.ca_bundle, "engine": args.engine}
    if args.endpoint_url:
        opts["endpoint_url"] = args.endpoint_url
    return opts


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="shape, dtype, header and data offsets, object size; an HDF5 file's datasets")
    _common(p)
    p.add_argument("--header", action="store_true", help="also print the header cards")
    p.set_defaults(func=_info)

    p = sub.add_parser("plan", help="the requests a read would make, amplification and predicted time")
    _common(p)
    p.add_argument("--region", default="", help='numpy-order region, e.g. "0:100,200:300,:" (default: all)')
    p.add_argument("--strategy", default="auto", choices=STRATEGIES)
    p.add_argument("--chunk-bytes", default="auto", help="largest request, e.g. 16MiB (auto: tuned by --probe, else 16 MiB)")
    p.add_argument("--max-gap-bytes", default=None, help="coalescing gap (default: latency x bandwidth)")
    p.add_argument("--threads", default="auto", help="concurrent requests (auto: tuned by --probe, else 4)")
    p.add_argument("--probe", action="store_true",
                   help="measure the link's latency and bandwidth first and plan with the tuned settings")
    p.add_argument("--latency-s", type=float, default=None,
                   help=f"model: seconds per request (default {CostModel.latency_s}, or what the header request "
                        "took when no model option is given)")
    p.add_argument("--bandwidth-bytes-per-s", type=float, default=None,
                   help=f"model: link bytes/s (default {CostModel.bandwidth_bytes_per_s:g})")
    p.add_argument("--cpu-per-request-s", type=float, default=None,
                   help="model: client CPU seconds per request (BENCHMARKS.md: ~0.0001 native, ~0.0004 urllib3, "
                        "~0.001 boto3; default: what the header request took)")
    p.add_argument("--max-in-flight", type=int, default=None,
                   help="most requests the tuner may keep in flight (default: 64 on the native engine, else 16)")
    p.add_argument("--requests", type=int, default=5, help="list the first N requests (default 5)")
    p.add_argument("--ranks", dest="regions_for", default=None, metavar="N",
                   help="also list the regions a job on N ranks splits the cube into, and which rank reads each")
    p.add_argument("--grid", default="auto", help="with --ranks: regions per axis 'PXxPYxPZ' (default auto: one per rank)")
    p.add_argument("--halo", default=0, help="with --ranks and --grid: pixels each region grows into its neighbours")
    p.add_argument("--region-shape", default=None, help="with --ranks: s2p_setup regions of WxHxD pixels (FITS order)")
    p.add_argument("--min-overlap", default=None, help="with --region-shape: SPATIAL,SPECTRAL pixels")
    p.add_argument("--job-region", default=None, help='with --ranks: restrict the job, e.g. "0:100,:,:" (numpy order)')
    p.set_defaults(func=_plan)
