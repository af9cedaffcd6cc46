"""bench/cluster/collectives.py without a cluster: its step order, its table of the slowest ranks, and its
rank script run for real under mpiexec on this machine."""
from __future__ import annotations

import json

from bench.cluster import collectives
from tests.mpitools import child_env, mpiexec


def test_each_pair_alternates_which_variant_goes_first():
    order = collectives.step_order(2)
    assert order[:6] == ["allgather:mpi", "allgather:quiet", "bcast:mpi", "bcast:quiet", "gather:mpi", "gather:quiet"]
    assert order[6:8] == ["allgather:quiet", "allgather:mpi"] and len(order) == 18


def test_a_step_counts_its_slowest_rank_and_the_first_pair_apart():
    order = collectives.step_order(1)  # first pair, then one pair the other way round
    fast = [0.1] * len(order)
    slow = list(fast)
    slow[order.index("allgather:mpi")] = 2.0  # the first allgather opens the connections
    slow[len(order) - 1 - order[::-1].index("allgather:mpi")] = 0.8
    table = collectives.tabulate(order, [fast, slow])
    cell = table["cells"]["allgather:mpi"]
    assert cell["first_s"] == 2.0 and cell["later_s"] == [0.8]
    assert table["ratios"]["allgather mpi/quiet"]["median"] == 8.0
    assert table["ratios"]["bcast mpi/quiet"]["median"] == 1.0
    assert "| allgather mpi | 2.000 | 0.800 (0.800-0.800) |" in collectives.to_markdown(
        {"ranks": 2, "nodes": 1, "repeats": 1, **table})


def test_the_rank_script_times_every_step_on_every_rank():
    order = collectives.step_order(1)
    proc, _ = mpiexec(3, [collectives.RANK, ",".join(order)], child_env(), python_args=())
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    assert got["order"] == order and len(got["seconds"]) == 3
    assert all(len(rank) == len(order) and all(s >= 0 for s in rank) for rank in got["seconds"])
