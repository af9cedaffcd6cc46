"""The floor of bench.cutouts.catalogue's `ingest` candidate, in a process of its own: what any cut-out job
that converts the sky with astropy and reads over HTTP cannot do without, and nothing else.

    python bench/cutouts/_floor.py --url PRESIGNED_URL --bytes N [--threads 4]

1. the imports: numpy, astropy.wcs (the sky to pixels) and urllib3 (with ingest's HTTP reader);
   no botocore: the URL comes presigned, and the reader is given a default environment instead
   of resolving the user's AWS files;
2. the first N bytes of the object read in 16 MiB ranges on --threads threads into one reused
   buffer per thread, and dropped: no catalogue, no WCS, no plan, no cut, no file written.

The parent times it from launch to exit, as it times ingest. Prints one JSON line: the imports'
and the reads' seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: make `ingest` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CHUNK_BYTES = 16 << 20


def main(argv=None) -> None:
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python bench/cutouts/_floor.py", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a presigned URL of the cube")
    parser.add_argument("--bytes", type=int, required=True, help="bytes to read from offset 0 (at most the object)")
    parser.add_argument("--threads", type=int, default=4, help="reading threads (default 4)")
    args = parser.parse_args(argv)

    from concurrent.futures import ThreadPoolExecutor

    import astropy.wcs  # noqa: F401 - the import is what is measured
    import numpy as np

    from ingest.transports.environment import Environment
    from ingest.transports.http import HttpTransport

    plain = Environment(endpoint_url=None, verify_tls=True, ca_bundle=None, ca_bundle_source="", profile=None,
                        profile_from_option=False, region=None, addressing_style=None, proxies=(), no_proxy=None,
                        no_proxy_source="", max_attempts=None, provenance=())
    with HttpTransport(args.url, threads=args.threads, environment=plain) as transport:
        transport.read_into(memoryview(bytearray(1)), 0)  # the object's size known, as a job knows it before reading
        t_read = time.perf_counter()
        n_bytes = min(args.bytes, transport.object_bytes)
        offsets = range(0, n_bytes, CHUNK_BYTES)

        def read_share(first: int) -> None:
            buffer = memoryview(np.empty(CHUNK_BYTES, np.uint8))
            for offset in offsets[first::args.threads]:
                transport.read_into(buffer[:min(CHUNK_BYTES, n_bytes - offset)], offset)

        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(read_share, range(args.threads)))
        t_end = time.perf_counter()
    print(json.dumps({"imports_s": t_read - t_start, "read_s": t_end - t_read, "bytes_read": n_bytes}), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no teardown of astropy's and botocore's modules: ingest's commands end so too (ingest.cli.ending)


if __name__ == "__main__":
    main()
