"""One read in a fresh process, so its peak RSS (VmHWM) is that read's alone (bench/reads/memory.py).

    INGEST_BENCH_SOURCE=URL python bench/reads/_read_once.py --region 0:256,500:564,500:564 \
        --threads 8 --chunk-bytes 67108864 --strategy large
    python bench/reads/_read_once.py --baseline     # imports ingest, numpy and boto3, reads nothing

The source comes from the environment, not argv: a presigned URL is a credential, and every
user of the machine can read a process's command line. Prints one JSON object on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import boto3  # noqa: F401 - part of the baseline: every read process has it loaded
import numpy as np  # noqa: F401

import ingest
from bench._rank_record import status_bytes as _status_bytes

SOURCE_ENV = "INGEST_BENCH_SOURCE"


def parse_region(text: str) -> tuple:
    """'a:b,c:d,e' -> (slice(a, b), slice(c, d), e); '' -> () (the whole cube)."""
    region = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if ":" in part:
            start, stop = part.split(":", 1)
            region.append(slice(int(start) if start else None, int(stop) if stop else None))
        else:
            region.append(int(part))
    return tuple(region)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", action="store_true", help="import only; read nothing")
    parser.add_argument("--region", default="", help="comma-separated slices in numpy order ('' = whole cube)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--chunk-bytes", type=int, default=16 << 20)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--method", default="auto")
    args = parser.parse_args(argv)

    result = {"rss_after_import_bytes": _status_bytes("VmRSS"), "output_bytes": 0, "elapsed_s": 0.0}
    if not args.baseline:
        source = os.environ[SOURCE_ENV]
        t0 = time.perf_counter()
        data = ingest.read_subcube(source, parse_region(args.region), threads=args.threads,
                                   chunk_bytes=args.chunk_bytes, strategy=args.strategy, method=args.method)
        result["elapsed_s"] = time.perf_counter() - t0
        result["output_bytes"] = int(data.nbytes)
    # VmHWM is the peak RSS of this process's own address space. ru_maxrss is not: exec keeps
    # the high-water mark of the address space it replaces, and subprocess forks with vfork, so
    # a child's ru_maxrss starts at its PARENT's peak (seen here: 100 MiB for a 61 MiB child).
    ru_maxrss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    result["peak_rss_bytes"] = _status_bytes("VmHWM") or ru_maxrss_bytes
    result["ru_maxrss_bytes"] = ru_maxrss_bytes
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
