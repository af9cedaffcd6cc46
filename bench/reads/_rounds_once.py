"""One mpiexec launch of bench.reads.rounds: rank 0 runs probe rounds (ingest.driver.probe_rounds) of
every rank at once, of several sizes and stream counts, interleaved; the other ranks serve them.

    mpiexec -n N python bench/reads/_rounds_once.py --source s3://B/K --streams 2,4 --stream-mib 2,4,8 \
        --repeats 5 --out rounds.json

A size of 0 MiB a stream is the job's whole share (the object's data over N ranks), the rate a
real read of it gets. The sized rounds then time small requests too, as a job's last round does.
Prints nothing; writes every round's (bytes, seconds) to --out.
"""
from __future__ import annotations

import argparse
import json
import random
import time

from mpi4py import MPI

from ingest.driver import probe_rounds
from ingest.transports import open_transport


def _run_cells(args, n: int, *, crew) -> list[dict]:
    """Rank 0, while the other ranks serve: every cell `repeats` times, in a new order each time
    (drift falls on every cell alike)."""
    with open_transport(args.source, args.method) as transport:
        info = transport.info
    cells = [(int(s), int(m)) for s in args.streams.split(",") for m in args.stream_mib.split(",")]
    rounds = []
    rng = random.Random(0)
    share = args.data_bytes // n
    for repeat in range(args.repeats):
        rng.shuffle(cells)
        for streams, stream_mib in cells:
            nbytes = min(share, streams * stream_mib << 20) if stream_mib else share
            offsets = tuple(args.data_offset + k * nbytes for k in range(n))
            # A sized round also times its ranks' small requests, as the job's last round does: the
            # rate its requests are priced at (SharedRound.steady_requests_s). The whole share needs none.
            small = probe_rounds.SMALL_WAVES * streams if stream_mib else 0
            got = crew.run_round(probe_rounds.RoundOrder("node", tuple(range(n)), args.source, args.method, {},
                                                         info, offsets, nbytes, streams, small))
            if got is None:
                raise RuntimeError(f"a round of {n} ranks x {streams} streams, {nbytes} bytes each, failed")
            rounds.append({"ranks": n, "streams": streams, "stream_mib": stream_mib, "repeat": repeat,
                           **got.as_dict()})
            time.sleep(args.pause_s)
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--method", default="s3")
    parser.add_argument("--data-offset", type=int, default=0)
    parser.add_argument("--data-bytes", type=int, required=True)
    parser.add_argument("--streams", default="2,4")
    parser.add_argument("--stream-mib", default="0,2,4,8")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pause-s", type=float, default=0.2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rounds = probe_rounds.root_step_with_crew(comm, _run_cells, args, comm.Get_size())
    if comm.Get_rank() != 0:
        return 0
    with open(args.out, "w") as f:
        json.dump(rounds, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
