"""driver.quiet's collectives give what mpi4py's own give, on real ranks under mpiexec: the same
objects in the same order, from any root, small and past the eager limit (a payload that moves
only while its ranks look)."""
from __future__ import annotations

import json

import pytest

from ingest.driver.quiet import quiet_scatter
from tests.mpitools import child_env, mpiexec

_SAME_AS_MPI4PY = """
import json, time
from mpi4py import MPI
from ingest.driver.quiet import quiet_allgather, quiet_bcast, quiet_gather, quiet_scatter

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
checks = []
for payload_bytes in (0, 10, 3 * 2**20):  # 3 MiB: past every transport's eager limit
    mine = {"rank": rank, "blob": bytes([rank]) * (payload_bytes + rank)}
    time.sleep(0.05 * rank)  # ranks arrive apart, as they do at scale
    checks.append(quiet_allgather(comm, mine) == comm.allgather(mine))
    for root in range(size):
        sent = {"from": root, "blob": b"x" * payload_bytes} if rank == root else None
        checks.append(quiet_bcast(comm, sent, root=root) == comm.bcast(sent, root=root))
        checks.append(quiet_gather(comm, mine, root=root) == comm.gather(mine, root=root))
        parts = [[r, b"y" * (payload_bytes // (r + 1))] for r in range(size)] if rank == root else None
        checks.append(quiet_scatter(comm, parts, root=root) == comm.scatter(parts, root=root))
answers = comm.gather(checks, root=0)
if rank == 0:
    print(json.dumps(answers), flush=True)
"""


def test_quiet_collectives_give_what_mpi4pys_own_give():
    proc, _ = mpiexec(3, [_SAME_AS_MPI4PY], child_env(), python_args=("-c",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    answers = json.loads(line)
    assert len(answers) == 3 and all(len(checks) == 3 * (1 + 3 * 3) for checks in answers)
    assert all(all(checks) for checks in answers), answers


class _RootOfTwo:
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2


def test_a_scatter_of_the_wrong_count_is_refused_on_the_root_before_any_message():
    with pytest.raises(ValueError, match="quiet_scatter: 1 objects for 2 ranks"):
        quiet_scatter(_RootOfTwo(), [1])
