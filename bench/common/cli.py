"""What every bench's command line shares: the common options, --quick's sizes, and `python -m bench.GROUP.NAME`'s main."""
from __future__ import annotations

import argparse
import os
import sys

from bench.common.results import RESULTS_DIR_DEFAULT, write_results
from bench.common.servers import STORES, BenchEnv
from ingest.testbed.signals import unwind_on_signals


# Sizes and repetitions of a full run and of --quick (a minute or two for the whole suite).
FULL = {"size_mib": 1024, "repeats": 3, "warmup": 1}
QUICK = {"size_mib": 64, "repeats": 1, "warmup": 0}


def counts(option: str, text: str, empty_ok: bool = False) -> list[int]:
    """'2,4' -> [2, 4]: whole numbers >= 1 (none at all only if `empty_ok`), or an error naming
    the option."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = [0]
    if (not values and not empty_ok) or min(values, default=1) < 1:
        raise SystemExit(f"{option}: expected whole numbers >= 1 separated by commas, got {text!r}")
    return values


def add_common_arguments(parser: argparse.ArgumentParser, size_mib: int = FULL["size_mib"]) -> None:
    """Options every benchmark takes: cube size, repetitions, --quick, where cubes and results go."""
    parser.add_argument("--quick", action="store_true",
                        help=f"small cubes and one round (defaults become {QUICK}); given values still win")
    parser.add_argument("--size-mib", type=int, default=None,
                        help=f"cube size in MiB (default {size_mib}, --quick {QUICK['size_mib']}; "
                             "float32 planes of 1024^2 from 256 MiB)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"interleaved repetitions per candidate (default {FULL['repeats']}, --quick {QUICK['repeats']})")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"unrecorded rounds before the repetitions (default {FULL['warmup']}, --quick {QUICK['warmup']})")
    parser.add_argument("--results-dir", default=None,
                        help="where NAME.json goes (default $INGEST_BENCH_RESULTS_DIR or bench/results; "
                             "--quick: bench/results/quick)")
    parser.add_argument("--cache-dir", default=None,
                        help="keep synthetic cubes here and reuse them (default: a temp dir of the run)")
    parser.add_argument("--quiet", action="store_true", help="no per-repetition lines on stderr")


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    """--store: the store the benchmark runs against; its results go to NAME-STORE.json (NAME.json
    for versitygw, the default, as before)."""
    parser.add_argument("--store", choices=STORES, default="versitygw",
                        help="the store to start on loopback (ingest.testbed): versitygw (default) or ceph "
                             "(a one-node Ceph RGW, objects in RAM; needs Debian's ceph packages)")


def results_name(name: str, args) -> str:
    """The results file's name: NAME, or NAME-STORE for a store other than versitygw."""
    store = getattr(args, "store", "versitygw")
    return name if store == "versitygw" else f"{name}-{store}"


def settle(args, **full_quick) -> argparse.Namespace:
    """Fill options left at None: the common ones from FULL/QUICK, others from name=(full, quick)."""
    quick = getattr(args, "quick", False)
    table = {name: (FULL[name], QUICK[name]) for name in FULL}
    table.update(full_quick)
    for name, (full_value, quick_value) in table.items():
        if getattr(args, name, None) is None:
            setattr(args, name, quick_value if quick else full_value)
    # A quick run must not overwrite the full run's results that BENCHMARKS.md quotes.
    if quick and getattr(args, "results_dir", None) is None and not os.environ.get("INGEST_BENCH_RESULTS_DIR"):
        args.results_dir = str(RESULTS_DIR_DEFAULT / "quick")
    return args


def logger(args):
    """A print to stderr, or None with --quiet."""
    if getattr(args, "quiet", False):
        return None
    return lambda text: print(text, file=sys.stderr, flush=True)


def bench_main(module, argv=None, server: bool = True, **settle_kw) -> int:
    """`python -m bench.GROUP.NAME`: parse the module's options (settle_kw: its full/quick sizes), run it
    on a fresh server (server=False: with env None, for a benchmark that reads no object), write
    its JSON, print its markdown. Every bench module's main() is this."""
    unwind_on_signals()  # killed, it still stops its server and Toxiproxy (ingest.testbed.signals)
    args = settle(module.build_parser().parse_args(argv), **settle_kw)
    if server:
        with BenchEnv(cache_dir=args.cache_dir, store=getattr(args, "store", "versitygw")) as env:
            results = module.run(env, args)
            results["store"] = env.describe_store()
    else:
        results = module.run(None, args)
    path = write_results(results_name(module.NAME, args), results, args.results_dir)
    print(module.to_markdown(results))
    print(f"\nwrote {path}")
    return 0
