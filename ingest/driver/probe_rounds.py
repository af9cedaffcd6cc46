"""Probe rounds in which many ranks read at once (MPI): what the ranks on one node, and the ranks on
every node, get together.

Rank 0's probe (ingest.engine.autotune) sees one rank's link: its latency, its streams, whether
they add up. The pipes the job's ranks share - a node's NIC (or, on one machine, its cores) and
the store's egress - show only when several ranks read at once. While rank 0 prepares the job
(`root_step_with_crew`), the other ranks wait in `serve` for rounds it hands them; each round is
a barrier, every participant's timed read of its own small range, and a gather. The rounds and
their sizes are rank 0's choice (ingest.driver.job), within the probe's budget.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from ingest.core.cost import CostModel
from ingest.core.rounds import carried_window, overlap_s, requests_inside, steady_window
from ingest.core.sharing import SharedCapacity, SharedRound, Topology, alone_from_rounds, shared_from_rounds
from ingest.core.tuning import streams_add_up
from ingest.driver.mpi import cpus, root_step
from ingest.driver.quiet import quiet_barrier, quiet_bcast, quiet_gather
from ingest.engine.probe import MIN_PROBE_READ_BYTES, timed_parallel_read, timed_small_reads, warm_connections
from ingest.transports import ObjectInfo, open_transport

_DONE = "done"


@dataclass(frozen=True)
class RoundOrder:
    """What rank 0 asks of the ranks in one round."""

    name: str
    participants: tuple[int, ...]
    source: str
    method: str
    options: dict  # open_transport's keyword arguments (transport_options of the config)
    info: ObjectInfo  # size and identity, adopted: no HEAD per rank
    offsets: tuple[int, ...]  # participant k reads [offsets[k], offsets[k] + bytes_per_rank)
    bytes_per_rank: int
    streams: int
    small_reads: int = 0  # then this many small reads each, `streams` at a time (the request rate)
    small_bytes: int = 4096
    flows_capped: bool = False  # rank 0's streams added up: timed over the round's core (core.rounds)
    # Take the requests made inside the round's window out of its time (core.rounds.requests_inside)?
    # Not in a look across nodes: half a megabyte a node, started over a skew of tens of ms on
    # shared cores, has most streams begin inside the window, and taking their requests out priced
    # a 25 MB/s egress at 32.
    requests_out: bool = True


def _take_part(comm, order: RoundOrder) -> dict | None:
    """Every rank: the barriers, and a participant's timed reads (its transport opened before
    the first barrier, so a client's start-up is not timed). Every rank reaches every barrier
    whatever fails; errors are returned: the round is dropped, the job goes on."""
    rank = comm.Get_rank()
    transport = None
    result: dict | None = None
    if rank in order.participants:
        try:
            transport = open_transport(order.source, order.method, threads=order.streams, **order.options)
            transport.adopt(order.info)
            warm_connections(transport, order.offsets[order.participants.index(rank)], order.streams)
        except Exception as exc:  # noqa: BLE001 - reported with the round
            result = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        # Ranks wait for each other quietly (a spinning rank takes a core from those still
        # reading), then start together.
        quiet_barrier(comm)
        comm.Barrier()
        if transport is not None:
            result = _timed(lambda: _bulk(transport, order, order.participants.index(rank)))
        if order.small_reads:
            quiet_barrier(comm)
            comm.Barrier()  # every participant's small requests at once, as the job's will be
            if transport is not None and "error" not in result:
                small = _timed(lambda: dict(zip(("small_n", "small_s"),
                                                _small(transport, order, order.participants.index(rank)))))
                result.update(small)
    finally:
        if transport is not None:
            transport.close()
    quiet_barrier(comm)
    return result


def _timed(fn) -> dict:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - reported with the round
        return {"error": f"{type(exc).__name__}: {exc}"}


def _bulk(transport, order: RoundOrder, k: int) -> dict:
    started_s = time.time()  # where this rank's spans start, on a clock the ranks share (on_one_clock)
    read = timed_parallel_read(transport, order.offsets[k], order.bytes_per_rank, order.streams)
    return {"host": socket.gethostname(), "wall_s": read.wall_s, "cpu_s": read.cpu_s, "small_s": 0.0,
            "spans": read.spans, "cores": len(cpus()), "started_s": started_s}


def on_one_clock(results: list[dict]) -> tuple[list[float], bool]:
    """Each rank's start, in seconds after the first rank's, and whether they could be told.

    A rank times its streams from its own start, and ranks leave the round's barrier together
    only on idle cores: on a loaded machine one starts up to tens of ms after another. Laid on
    one axis by each rank's own clock, a late rank's bytes would seem to cross the pipe while
    the others' did, and the window would be shorter than the time the pipe carried them. So
    every rank notes its start on the wall clock, one clock on a machine and NTP's on a cluster,
    and its spans are moved by its start's offset from the first rank's. Clocks that disagree by
    more than the round lasted do not time one round: then every rank is taken to have started
    at once (offsets 0, False), as before."""
    starts_s = [r.get("started_s") for r in results]
    if any(s is None for s in starts_s):
        return [0.0] * len(results), False
    offsets_s = [s - min(starts_s) for s in starts_s]
    if max(offsets_s) > max(r["wall_s"] for r in results):
        return [0.0] * len(results), False
    return offsets_s, True


def _small(transport, order: RoundOrder, k: int) -> tuple[int, float]:
    spread = max(order.small_bytes, order.bytes_per_rank - order.small_bytes) // order.small_reads
    return timed_small_reads(transport, [order.offsets[k] + i * spread for i in range(order.small_reads)],
                             order.small_bytes, order.streams)


class Crew:
    """Rank 0's handle on the other ranks while it prepares the job."""

    def __init__(self, comm):
        self.comm = comm

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def run_round(self, order: RoundOrder) -> SharedRound | None:
        """Run one round on every rank; None when a participant failed (the job does not need it)."""
        _order(self.comm, order)
        results = [r for r in _hand_in(self.comm, _take_part(self.comm, order)) if r is not None]
        if not results or any("error" in r for r in results):
            return None
        hosts = {r["host"]: r["cores"] for r in results}
        # Every rank's spans moved to the first rank's start: the window is when the pipe carried the bytes.
        offsets_s, _ = on_one_clock(results)
        wall_s = max(offset_s + r["wall_s"] for offset_s, r in zip(offsets_s, results))
        busy = sum(r["cpu_s"] for r in results) / max(wall_s * sum(hosts.values()), 1e-9)
        spans = [span.later(offset_s) for offset_s, r in zip(offsets_s, results) for span in r["spans"]]
        return SharedRound(order.name, len(results), len(hosts), order.streams,
                           order.bytes_per_rank * len(results), wall_s, busy, sum(r.get("small_n", 0) for r in results),
                           max(r["small_s"] for r in results), *steady_window(spans, order.flows_capped),
                           overlap_s=overlap_s(spans),
                           steady_requests=requests_inside(spans, order.flows_capped) if order.requests_out else 0,
                           start_skew_s=max(offsets_s), carried=carried_window(spans))


def _order(comm, order=None):
    """Rank 0 hands the next order to the other ranks, who wait for it quietly: rank 0 probes and
    tunes meanwhile, on cores they would otherwise spin on."""
    return quiet_bcast(comm, order)


def _hand_in(comm, part):
    """Every rank's part of a round, gathered on rank 0 once the last rank has read: a rank done
    early waits asleep (driver.quiet), not spinning in the gather (Open MPI busy-polls) on a core
    that a rank still reading needs where ranks outnumber cores."""
    return quiet_gather(comm, part)


def serve(comm) -> None:
    """Every rank but 0: take part in rank 0's rounds until it says it is done."""
    while (order := _order(comm)) != _DONE:
        _hand_in(comm, _take_part(comm, order))


def root_step_with_crew(comm, fn, *args, **kwargs):
    """root_step (rank 0 runs fn and broadcasts its result, errors raised on every rank), where fn
    also gets `crew=` to run probe rounds on the other ranks meanwhile."""
    if comm.Get_size() == 1:
        return root_step(comm, fn, *args, crew=None, **kwargs)
    if comm.Get_rank() != 0:
        serve(comm)
        return root_step(comm, fn, *args, crew=None, **kwargs)

    def lead(*a, **kw):
        try:
            return fn(*a, crew=Crew(comm), **kw)
        finally:
            _order(comm, _DONE)

    return root_step(comm, lead, *args, **kwargs)


# The shared rounds' own budget, beside the probe's (ingest.engine.autotune): what the ranks share
# decides the plan for all of them and the predicted makespan, so it may cost a little more.
SHARED_BUDGET_FRACTION = 0.06
ROUND_BYTES_MIN = MIN_PROBE_READ_BYTES  # below this a round measures start-up, not a pipe
ROUND_BYTES_MAX = 16 << 20
ROUND_STREAMS_MAX = 8
# Small requests per stream in the request-rate waves; the first warms its connection up. One
# timed request per stream measures a latency (and the streams' skew), not a rate: a rate needs
# several back to back.
SMALL_WAVES = 6


def round_participants(topology: Topology) -> list[tuple[str, tuple[int, ...]]]:
    """The rounds worth running: the ranks on rank 0's node (when it has several), then every rank
    (when there are several nodes)."""
    rounds = []
    on_first = tuple(r for r, node in enumerate(topology.node_of_rank) if node == 0)
    if len(on_first) > 1:
        rounds.append(("node", on_first))
    if topology.n_nodes > 1:
        rounds.append(("nodes", tuple(range(topology.n_ranks))))
    return rounds


def first_of_each_node(topology: Topology) -> tuple[int, ...]:
    """The lowest rank on each node, in node order."""
    return tuple(topology.node_of_rank.index(node) for node in range(topology.n_nodes))


def measure_shared(crew: Crew, topology: Topology, settings, *, source: str, method: str, options: dict,
                   info: ObjectInfo, span: tuple[int, int], predicted_s: float,
                   look_bytes: int = 0) -> tuple[SharedCapacity, CostModel, tuple[SharedRound, ...]] | None:
    """Rank 0: run the rounds that tell what the ranks share, within SHARED_BUDGET_FRACTION of the
    job's predicted time (where rank 0's probe ran for this job): (what they share, one rank's link
    as the rounds showed it, the rounds), or None when no round fits (or one failed: the job goes
    on with what rank 0's probe suggested). `settings` are rank 0's (its probe, its link alone, the
    plan's threads); `span` the (offset, bytes) rounds read in.

    Where no `nodes` round fits, one rank on each node reads `look_bytes`, all at once (a look
    across nodes; the driver's `across_nodes_bytes`, 0 where the job's nodes were seen reading at
    once before): the store's egress behind the nodes shows nowhere else, and a job priced without
    it is predicted too fast wherever a few nodes' NICs together fill that egress."""
    rounds = round_participants(topology) if settings.probe is not None else []
    streams = max(1, min(settings.threads, ROUND_STREAMS_MAX))
    # Where rank 0's streams added up, each connection is capped and a flow keeps its rate when
    # others finish: the round is timed over its core. Where they shared the link, over its span.
    probe = settings.probe
    flows_capped = probe is not None and "streams" in probe.measured and streams_add_up(probe)
    round_s = SHARED_BUDGET_FRACTION * predicted_s / max(1, len(rounds))

    def order_of(name: str, participants, nbytes: int, small: int, requests_out: bool = True) -> RoundOrder:
        offsets = tuple(span[0] + k * nbytes for k in range(len(participants)))
        return RoundOrder(name, participants, source, method, options, info, offsets, nbytes, streams, small,
                          flows_capped=flows_capped, requests_out=requests_out)

    orders = []
    for name, participants in rounds:
        # Sized by each rank's share of the pipes when all read, as the plan was priced: the least a
        # participant gets, so the round takes at most about round_s.
        nbytes = int(min(ROUND_BYTES_MAX, round_s * settings.cost.bandwidth(streams), span[1] // len(participants)))
        if nbytes < ROUND_BYTES_MIN:
            continue
        # The last round (every rank) also issues waves of small requests each: the request rate
        # all of them get from the store, which plans of many small requests lean on.
        orders.append(order_of(name, participants, nbytes, SMALL_WAVES * streams if name == rounds[-1][0] else 0))
    look_bytes = min(look_bytes, ROUND_BYTES_MAX, span[1] // max(1, topology.n_nodes))
    if all(order.name != "nodes" for order in orders) and look_bytes >= ROUND_BYTES_MIN:
        # With the waves of small requests the last round makes: priced with the egress and no
        # request rate, a job of many ranks chooses thousands of small requests of only the bytes
        # it needs, which take several times the gap-merged plan's time (BENCHMARKS: Rounds).
        orders.append(order_of("nodes", first_of_each_node(topology), look_bytes, SMALL_WAVES * streams,
                               requests_out=False))
    done = []
    for order in orders:
        measured = crew.run_round(order)
        if measured is None:
            return None
        done.append(measured)
    if not done:
        return None
    alone = alone_from_rounds(settings.alone, done)
    return shared_from_rounds(alone, done, settings.shared), alone, tuple(done)
