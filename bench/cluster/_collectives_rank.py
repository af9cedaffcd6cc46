"""One rank of bench.cluster.collectives: each variant of each collective in the given order, timed on
every rank; rank 0 prints one JSON line of every rank's seconds per step.

Variants: "mpi" is a barrier that sleeps (driver.quiet.quiet_barrier) then mpi4py's own blocking
collective, which Open MPI busy-polls (what driver.mpi did before driver.quiet); "quiet" is
driver.quiet's collective. Between steps every rank sleeps, so each step starts from idle ranks.
"""
import json
import sys
import time

from ingest.driver.mpi import world
from ingest.driver.quiet import quiet_allgather, quiet_barrier, quiet_bcast, quiet_gather

PAUSE_S = 0.2


def _mpi(call):
    def run(comm, obj):
        quiet_barrier(comm)
        return call(comm, obj)
    return run


STEPS = {
    ("allgather", "mpi"): _mpi(lambda comm, obj: comm.allgather(obj)),
    ("allgather", "quiet"): quiet_allgather,
    ("bcast", "mpi"): _mpi(lambda comm, obj: comm.bcast(obj, root=0)),
    ("bcast", "quiet"): lambda comm, obj: quiet_bcast(comm, obj),
    ("gather", "mpi"): _mpi(lambda comm, obj: comm.gather(obj, root=0)),
    ("gather", "quiet"): lambda comm, obj: quiet_gather(comm, obj),
}


def main() -> None:
    order = [tuple(step.split(":")) for step in sys.argv[1].split(",")]
    comm = world()
    rank = comm.Get_rank()
    # what publish's ranks send round: a placement (allgather), a plan (bcast), a record (gather)
    objects = {"allgather": ("node-00", ("boot-id", tuple(range(2)))), "bcast": list(range(3000)),
               "gather": {"rank": rank, "parts": list(range(3)), "marks": {"start": 0.0}}}
    seconds = []
    for collective, variant in order:
        time.sleep(PAUSE_S)
        t0 = time.perf_counter()
        STEPS[collective, variant](comm, objects[collective])
        seconds.append(time.perf_counter() - t0)
    every = quiet_gather(comm, seconds)
    if rank == 0:
        print(json.dumps({"order": [":".join(s) for s in order], "seconds": every}), flush=True)


if __name__ == "__main__":
    main()
