"""The demo's sweep: direct ingest (presigned and s3) and the staging baseline at 1, 2 and 4
ranks, a few repeats each, every one a real `ingest.driver.run` job writing its own report.

    mpiexec -n 4 python scripts/demo_sweep.py --source s3://survey/cube.fits --out DIR \
        --stage-dir STAGE --config configs/demo.toml [--ranks 1,2,4] [--repeats 3]

One launch instead of one mpiexec per run: on a small machine starting 4 Pythons costs more
than reading the demo's cube, so the world is split into a communicator of the first n ranks
for each run (the others sleep, not spin, until it ends). Rank 0 of a run is world rank 0, which
writes DIR/METHOD-nN-rK.json; the per-run summaries go to DIR/sweep.log. Runs are interleaved
(round 1 runs every cell, then round 2), so drift hits every cell alike, as in the study.
The presigned runs carry `compare = "staging"`: the copy to --stage-dir and the read from it,
timed in the same job. The figure is drawn from the reports alone: analysis/demo_figure.py.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from mpi4py import MPI

import ingest.driver
from ingest.config import load_config


def _wait(comm) -> None:
    """A barrier that sleeps: ranks left out of a run must not take the cores it reads with."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.005)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--stage-dir", required=True)
    parser.add_argument("--config", default=None, metavar="TOML")
    parser.add_argument("--ranks", default="1,2,4", help="rank counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default="presigned,s3")
    parser.add_argument("--publish", default=None, metavar="S3_URI",
                        help="then every rank reads its box once more and the ranks publish them back as one "
                             "object here, checked byte for byte against the source")
    args = parser.parse_args(argv)

    world = MPI.COMM_WORLD
    me = world.Get_rank()
    counts = [int(n) for n in args.ranks.split(",")]
    if max(counts) > world.Get_size():
        if me == 0:
            print(f"demo_sweep: --ranks {args.ranks} needs {max(counts)} ranks, launched with "
                  f"{world.Get_size()}", file=sys.stderr)
        return 2
    if me == 0:
        os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "sweep.log"), "a") if me == 0 else open(os.devnull, "w")
    with log:
        for repeat in range(1, args.repeats + 1):
            for n in counts:
                for method in args.methods.split(","):
                    name = f"{method}-n{n}-r{repeat}"
                    sub = world.Split(0 if me < n else MPI.UNDEFINED, me)
                    if sub != MPI.COMM_NULL:
                        settings = {"source": args.source, "method": method, "progress": False,
                                    "report": os.path.join(args.out, f"{name}.json")}
                        if method == "presigned":
                            settings.update(compare="staging", stage_dir=args.stage_dir)
                        with contextlib.redirect_stdout(log):
                            result = ingest.driver.run(sub, load_config(settings, args.config))
                        sub.Free()
                        if me == 0:
                            agg, base = result.report["aggregate"], result.report.get("baseline") or {}
                            line = f"   {name:<16} makespan {agg['makespan_s']:6.3f} s"
                            if base:
                                line += (f"   staging: copy {base['stage_s']:.3f} s + read "
                                         f"{base['read_makespan_s']:.3f} s = {base['total_s']:.3f} s")
                            print(line, flush=True)
                    _wait(world)
    if args.publish:
        return _publish_back(world, args)
    return 0


def _publish_back(world, args) -> int:
    """Write back: the ranks' boxes as one object (a multipart upload with two-phase
    aggregation), then rank 0 compares the object with the source, byte for byte."""
    cfg = load_config({"source": args.source, "method": "s3", "progress": False}, args.config)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the sweep printed the tables
        result = ingest.driver.run(world, cfg)
        t0 = time.perf_counter()
        ingest.publish(world, args.publish, [(r.box, r.data) for r in result.regions], header=args.source,
                       config={"progress": False, "overwrite": True})
        elapsed_s = time.perf_counter() - t0
    if world.Get_rank() != 0:
        return 0
    same = _same_bytes(args.source, args.publish)
    print(f"   published {args.publish} from {world.Get_size()} ranks in {elapsed_s:.2f} s; "
          f"identical to {args.source}: {same}", flush=True)
    return 0 if same else 1


def _same_bytes(a: str, b: str) -> bool:
    """Do two s3:// objects hold the same bytes? (SHA-256 of each, streamed.)"""
    import hashlib

    from ingest.transports.presign import parse_s3_uri
    from ingest.transports.s3client import s3_client

    client = s3_client()
    digests = []
    for uri in (a, b):
        bucket, key = parse_s3_uri(uri)
        digest = hashlib.sha256()
        for chunk in client.get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(8 << 20):
            digest.update(chunk)
        digests.append(digest.digest())
    return digests[0] == digests[1]


if __name__ == "__main__":
    sys.exit(main())
