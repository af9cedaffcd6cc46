"""Allocate one fresh buffer and write every byte of it once, in a new process; print JSON.

    python bench/reads/_touch_once.py --allocator numpy|ingest --mib 256

The imports happen before the clock starts, so the time is the allocation and its first touch
alone: what a rank pays to fill its output, before counting any network.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np

from ingest import buffers

ALLOCATORS = {"numpy": np.empty, "ingest": buffers.empty}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocator", choices=sorted(ALLOCATORS), required=True)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args(argv)
    nbytes = args.mib << 20
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu0, wall0 = time.process_time(), time.perf_counter()
    array = ALLOCATORS[args.allocator](nbytes, np.uint8)
    array.fill(1)  # every page, once, as a read's bytes would land
    wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    print(json.dumps({"fill_wall_s": wall_s, "fill_cpu_s": cpu_s, "minor_faults": faults, "bytes": nbytes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
