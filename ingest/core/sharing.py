"""What a job's ranks share, and the whole job's predicted makespan (pure).

The cost model (core/cost.py) prices one rank's read: its requests' latency, its streams (each
capped per connection), its own CPU. A job of N ranks on M nodes also shares pipes that no one
rank sees alone:

- a node's pipe (its NIC, or on one machine its cores), which the ranks on that node share;
- the store's egress (or a WAN link), which every node shares;
- a machine's cores, which every rank on it shares (with more ranks than cores, a rank's CPU
  time stretches; nodes emulated on one machine share its cores too).

A rank's bytes go at the slowest of what its own streams get, its node's pipe and the egress,
each of the shared ones carrying every byte of the ranks behind it. Its waits for replies hide
behind a shared pipe (while one stream waits, the others' bytes keep the pipe busy) but not
behind a capped connection of its own. So a rank takes the longer of its busiest thread's chain
of waits and bytes and one wait plus the largest of those byte times; the job, its slowest
rank; and the term that is largest binds: no plan moves the job faster than that pipe carries
the wire bytes it needs.

One module: the job prediction (predict_job, share_cost) and the fits that feed it from measured
rounds (SharedRound, shared_from_rounds, alone_from_rounds) are the two directions of one model,
each SharedCapacity term's fit kept beside the formula that reads it, so a change to a term is made
and reviewed in one file.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from ingest.core.cost import CostModel
from ingest.core.linkprobe import SCALING_FRACTION

# The names of the terms, as reports and `plan` print them.
LATENCY, CPU, CONNECTION, RANK_LINK, NODE_PIPE, NODE_CPU, EGRESS, REQUESTS, CORES, STARTUP = (
    "latency", "CPU", "per-connection cap", "rank's link", "node pipe", "node's cores", "egress", "request rate",
    "shared cores", "start-up")


@dataclass(frozen=True)
class Topology:
    """Which node each rank runs on (nodes numbered by their first rank: rank 0's node is 0), and
    which machine: the cores each machine's ranks share (empty when unknown, as for `plan`)."""

    node_of_rank: tuple[int, ...]
    machine_of_rank: tuple[int, ...] = ()
    cores_of_machine: tuple[int, ...] = ()

    @classmethod
    def of_hosts(cls, hosts, machines=None) -> "Topology":
        """From each rank's host name, in rank order; `machines`, if given, each rank's (machine
        id, the CPUs it may run on): ranks of one machine share the union of their CPUs."""
        index: dict[str, int] = {}
        nodes = tuple(index.setdefault(h, len(index)) for h in hosts)
        if not machines:
            return cls(nodes)
        ids: dict[str, int] = {}
        cpus: list[set] = []
        of_rank = []
        for machine, rank_cpus in machines:
            k = ids.setdefault(machine, len(ids))
            if k == len(cpus):
                cpus.append(set())
            cpus[k] |= set(rank_cpus)
            of_rank.append(k)
        return cls(nodes, tuple(of_rank), tuple(max(1, len(c)) for c in cpus))

    @classmethod
    def block(cls, n_ranks: int, n_nodes: int, cores_per_node: int | None = None) -> "Topology":
        """n_ranks over n_nodes as srun's default (block) distribution places them: consecutive
        ranks fill a node, the counts differing by at most one; each node a machine of
        `cores_per_node` cores, if given (else the cores are unknown: no cores term)."""
        n_nodes = max(1, min(n_nodes, n_ranks))
        base, extra = divmod(n_ranks, n_nodes)
        nodes = tuple(node for node in range(n_nodes) for _ in range(base + (node < extra)))
        if cores_per_node is None:
            return cls(nodes)
        return cls(nodes, nodes, (max(1, cores_per_node),) * n_nodes)

    @property
    def n_ranks(self) -> int:
        return len(self.node_of_rank)

    @property
    def n_nodes(self) -> int:
        return max(self.node_of_rank, default=-1) + 1

    @property
    def ranks_per_node(self) -> tuple[int, ...]:
        return tuple(self.node_of_rank.count(node) for node in range(self.n_nodes))

    @property
    def most_per_node(self) -> int:
        return max(self.ranks_per_node, default=1)

    def ranks_sharing_cores(self, rank: int) -> tuple[int, float]:
        """(ranks on `rank`'s machine, its cores); (1, 1.0) when unknown."""
        if not self.cores_of_machine:
            return 1, 1.0
        machine = self.machine_of_rank[rank]
        return self.machine_of_rank.count(machine), float(self.cores_of_machine[machine])

    def describe(self) -> str:
        counts = self.ranks_per_node
        per = f"{counts[0]} per node" if len(set(counts)) == 1 else "/".join(map(str, counts)) + " per node"
        return f"{self.n_ranks} rank(s) on {self.n_nodes} node(s), {per}"


@dataclass(frozen=True)
class SharedCapacity:
    """The shared pipes' capacities in bytes/s; None where nothing showed one binding (unknown, or
    more than the ranks behind it can use). `source` says where the figures came from."""

    node_bytes_per_s: float | None = None
    egress_bytes_per_s: float | None = None
    node_cpu_bound: bool = False  # the node's ranks kept its cores busy: its "pipe" is CPU
    source: str = "nothing measured: ranks assumed not to share a pipe"
    requests_per_s: float | None = None  # small requests per second the store serves all ranks together
    startup_s: float = 0.0  # what the ranks starting at once cost before their bytes flow at the rates
    # The node's pipe and the egress's seconds per request where a round's requests were taken out
    # of its window (SharedRound.pipe_s_per_request): a job's requests are charged them back.
    node_request_s: float = 0.0
    egress_request_s: float = 0.0
    # The most nodes a round had reading at once: an egress that binds only beyond them is unseen.
    nodes_seen: int = 0
    # What the rounds that measured these took rank 0, its ranks' start-up and barriers included:
    # whether measuring again repays a job (ingest.driver.job.tune_for_job).
    rounds_s: float = 0.0

    @property
    def node_term(self) -> str:
        return NODE_CPU if self.node_cpu_bound else NODE_PIPE

    def as_dict(self) -> dict:
        return {"node_bytes_per_s": self.node_bytes_per_s, "egress_bytes_per_s": self.egress_bytes_per_s,
                "node_cpu_bound": self.node_cpu_bound, "requests_per_s": self.requests_per_s,
                "startup_s": self.startup_s, "node_request_s": self.node_request_s,
                "egress_request_s": self.egress_request_s, "nodes_seen": self.nodes_seen, "rounds_s": self.rounds_s,
                "source": self.source}

    @classmethod
    def from_dict(cls, record: dict, source: str) -> "SharedCapacity":
        """as_dict's record back (the link cache's), named `source`; a field an older version did not
        write takes its default."""
        return cls(record.get("node_bytes_per_s"), record.get("egress_bytes_per_s"),
                   bool(record.get("node_cpu_bound")), source, record.get("requests_per_s"),
                   record.get("startup_s") or 0.0, record.get("node_request_s") or 0.0,
                   record.get("egress_request_s") or 0.0, int(record.get("nodes_seen") or 0),
                   float(record.get("rounds_s") or 0.0))


def share_cost(cost: CostModel, shared: SharedCapacity, topology: Topology) -> CostModel:
    """The cost model of one rank on the busiest node when every rank reads at once: its link is
    its fair share of the node's pipe and of the egress, if those are less than it gets alone.
    Plans chosen with it fill the bottleneck and no more (a thin box behind a slow shared pipe
    is not worth reading 8x its bytes for)."""
    link = cost.bandwidth_bytes_per_s
    if shared.node_bytes_per_s:
        link = min(link, shared.node_bytes_per_s / topology.most_per_node)
    if shared.egress_bytes_per_s:
        link = min(link, shared.egress_bytes_per_s / max(1, topology.n_ranks))
    # A request rate the store serves all ranks together is, for each rank, a time per request
    # that no depth of requests in flight hides: the share of it.
    per_request_s = topology.n_ranks / shared.requests_per_s if shared.requests_per_s else 0.0
    # Where the shared pipes' figures had the rounds' requests taken out, each of the rank's
    # requests takes its share of their time back, as its bytes take their share of the rate
    # (on one node the same small requests' time as the request rate's: the larger counts).
    pipe_per_request_s = (shared.node_request_s * topology.most_per_node
                          + shared.egress_request_s * topology.n_ranks)
    # More ranks than cores on a machine: each rank's CPU time stretches by the ratio.
    ranks, cores = topology.ranks_sharing_cores(0)
    stretch = max(1.0, ranks / cores)
    if (link >= cost.bandwidth_bytes_per_s and per_request_s <= cost.cpu_per_request_s and stretch == 1.0
            and not pipe_per_request_s):
        return cost
    # The cores' stretch is the CPU's own terms' (a throughput the ranks share), not a wait that
    # every request sees: the latency grows only by the store's shared request rate.
    return replace(cost, bandwidth_bytes_per_s=link, stream_bandwidth_bytes_per_s=min(cost.stream_bytes_per_s, link),
                   cpu_per_request_s=max(cost.cpu_per_request_s * stretch, per_request_s, pipe_per_request_s),
                   cpu_per_byte_s=cost.cpu_per_byte_s * stretch, latency_s=max(cost.latency_s, per_request_s))


@dataclass(frozen=True)
class RankLoad:
    """What one rank reads: its requests and wire bytes in all, on `threads` in flight."""

    n_requests: int
    wire_bytes: int
    threads: int


@dataclass(frozen=True)
class JobPrediction:
    """The whole job's predicted makespan, the term that binds it, and every term's time (each
    the slowest rank's or pipe's; predict_job says how they make the makespan)."""

    makespan_s: float
    binding: str
    terms_s: dict
    topology: Topology
    source: str  # where the shared capacities came from
    model_s: float | None = None  # the model's own makespan, where earlier jobs' (core/history.py) replaced it
    history: str = ""  # what the endpoint's earlier jobs of this shape said, if any

    @property
    def model_makespan_s(self) -> float:
        return self.makespan_s if self.model_s is None else self.model_s

    def as_dict(self) -> dict:
        return {"makespan_s": self.makespan_s, "model_makespan_s": self.model_makespan_s, "binding": self.binding,
                "terms_s": {k: round(v, 6) for k, v in self.terms_s.items()},
                "ranks": self.topology.n_ranks, "nodes": self.topology.n_nodes,
                "ranks_per_node": list(self.topology.ranks_per_node), "shared_source": self.source,
                "history": self.history or None}

    def describe(self) -> str:
        others = ", ".join(f"{k} {v:.3g} s" for k, v in self.terms_s.items() if k != self.binding and v > 0)
        model = (f"predicted makespan {self.model_makespan_s:.3g} s for {self.topology.describe()}, bound by "
                 f"{self.binding} ({self.terms_s[self.binding]:.3g} s){f'; {others}' if others else ''}")
        if self.model_s is None:
            return model + (f" ({self.history})" if self.history else "")
        return f"predicted makespan {self.makespan_s:.3g} s, as {self.history}; the model: {model}"


class _RankParts(NamedTuple):
    """One rank's own parts, as CostModel.predict_s weighs them."""

    waits_s: float  # its requests' waits, as far as its requests in flight overlap them
    cpu_requests_s: float  # its CPU per request, which adds whatever the threads
    chain_bytes_s: float  # its busiest thread's bytes at one connection's rate (CostModel.chain_bytes_s)
    bytes_terms: dict  # what its threads share: its link (or its capped connections) and its CPU's copy


def _rank_parts(cost: CostModel, load: RankLoad) -> _RankParts:
    n, wire, threads = load.n_requests, load.wire_bytes, load.threads
    link_s = cost.link_s(n, wire, threads)
    streams_bind = link_s * cost.bandwidth_bytes_per_s > wire * (1 + 1e-9)  # slower than the rank's link
    return _RankParts(cost.waits_s(n, threads), n * cost.cpu_per_request_s, cost.chain_bytes_s(n, wire, threads),
                      {CPU: wire * cost.cpu_per_byte_s, CONNECTION if streams_bind else RANK_LINK: link_s})


def predict_job(cost: CostModel, shared: SharedCapacity, topology: Topology, loads) -> JobPrediction:
    """The makespan of every rank reading its load at once (`loads` in rank order; ranks past the
    end read nothing). `cost` is one rank's model as it reads alone. For one rank and nothing
    shared this is CostModel.predict_s.

    A rank takes the longer of its busiest thread's chain (its waits and its bytes at one
    connection's rate) and one wait plus the busiest of what it shares: its link, its CPU's
    copy, its node's pipe, the egress (each carrying every byte behind it), the machine's cores
    and the store's request rate. The waits hide behind a shared pipe: while one of its streams
    waits for a reply, the others' bytes keep the pipe busy."""
    loads = list(loads)[:topology.n_ranks]
    parts = [_rank_parts(cost, load) for load in loads]
    node_wire = [0] * topology.n_nodes
    node_requests = [0] * topology.n_nodes
    machine_cpu_s = [0.0] * len(topology.cores_of_machine)
    for rank, (load, part) in enumerate(zip(loads, parts)):
        node_wire[topology.node_of_rank[rank]] += load.wire_bytes
        node_requests[topology.node_of_rank[rank]] += load.n_requests
        if topology.cores_of_machine:
            machine_cpu_s[topology.machine_of_rank[rank]] += part.cpu_requests_s + part.bytes_terms[CPU]
    all_requests = sum(node_requests)
    # A shared pipe carries every byte behind it and, where the rounds priced its rate without
    # their requests, every request's time as well (SharedCapacity.node_request_s).
    egress_s = (sum(node_wire) / shared.egress_bytes_per_s + all_requests * shared.egress_request_s
                if shared.egress_bytes_per_s else 0.0)
    requests_s = all_requests / shared.requests_per_s if shared.requests_per_s else 0.0
    terms: dict[str, float] = {}
    best = (0.0, LATENCY)
    for rank, (load, part) in enumerate(zip(loads, parts)):
        if load.n_requests == 0:
            continue
        bytes_terms = dict(part.bytes_terms)
        node = topology.node_of_rank[rank]
        bytes_terms[shared.node_term] = (node_wire[node] / shared.node_bytes_per_s
                                         + node_requests[node] * shared.node_request_s
                                         if shared.node_bytes_per_s else 0.0)
        bytes_terms[EGRESS] = egress_s
        name, bytes_s = max(bytes_terms.items(), key=lambda kv: kv[1])
        # The machine's cores run every rank on it: their CPU seconds over its cores, whatever
        # the pipes do (on one machine the server's share is in the pipes the rounds measured).
        cores_s = 0.0
        if topology.cores_of_machine:
            machine = topology.machine_of_rank[rank]
            cores_s = machine_cpu_s[machine] / topology.cores_of_machine[machine]
        # What each term would take on its own: the CPU's requests and bytes together.
        # The store's shared request rate and the machine's cores are throughputs every rank's
        # requests pass through, alongside the rank's own work (not after it): the largest binds.
        own = {**bytes_terms, LATENCY: part.waits_s, CPU: part.cpu_requests_s + bytes_terms[CPU], CORES: cores_s,
               REQUESTS: requests_s}
        for key, value in own.items():
            terms[key] = max(terms.get(key, 0.0), value)
        busiest, busy_s = max(((name, part.cpu_requests_s + bytes_s), (CORES, cores_s), (REQUESTS, requests_s)),
                              key=lambda kv: kv[1])
        chain_s = part.waits_s + part.cpu_requests_s + part.chain_bytes_s
        piped_s = cost.waiting_s + busy_s
        if chain_s > piped_s:  # its own waits and connections bind: name the larger of the two
            binding = LATENCY if part.waits_s >= part.chain_bytes_s else next(k for k in part.bytes_terms if k != CPU)
        else:
            binding = max(((CPU, own[CPU]), (busiest, own[busiest])), key=lambda kv: kv[1])[0]
        total_s = shared.startup_s + max(chain_s, piped_s)
        if total_s > best[0]:
            best = (total_s, binding)
    if shared.startup_s and best[0] > 0:
        terms[STARTUP] = shared.startup_s
    return JobPrediction(best[0], best[1], terms, topology, shared.source)


# The ranks' CPU time over the round's wall time and the cores of the nodes they ran on: above
# this the round measured the cores, not a pipe (on one machine, client and server share them).
CPU_BOUND_BUSY = 0.85
# The most of a round's steady window its requests are taken to have used (SharedRound.steady_requests_s).
REQUESTS_SHARE_MAX = 0.35
# A round's requests took its pipe's time only where that pipe is the machine's cores: its ranks'
# CPU kept them at least this busy. Below it the pipe is a network one, where a stream's wait
# leaves the pipe to the others, so taking the requests' time out of the round would price the
# pipe too fast; 0.25 lies between the two kinds of round (BENCHMARKS: Rounds).
REQUESTS_ON_CORES_BUSY = 0.25


@dataclass(frozen=True)
class SharedRound:
    """One probe round in which several ranks read at once (MPI: ingest.driver.probe_rounds)."""

    name: str  # "node": the ranks on rank 0's node; "nodes": every rank, on every node
    ranks: int
    nodes: int
    streams: int  # each rank's concurrent streams
    total_bytes: int
    wall_s: float  # the slowest rank's time, barrier to last byte
    cpu_busy: float  # the ranks' CPU seconds / (wall_s x the cores of their nodes)
    small_requests: int = 0  # then small requests, every rank's at once
    small_wall_s: float = 0.0  # the slowest rank's time for its small requests
    steady_bytes: int = 0  # the bytes that crossed once the ranks were under way (core.rounds.steady_window)
    steady_s: float = 0.0  # their time, the first stream's first body byte to the last stream's last
    overlap_s: float = 0.0  # how long every stream's body flowed at once (core.rounds.overlap_s): < 0, not at all
    steady_requests: int = 0  # requests made inside the steady window (core.rounds.requests_inside)
    start_skew_s: float = 0.0  # how long after the first rank the last one started reading
    carried: tuple = (0, 0.0)  # (bytes, seconds) the pipe was certainly seen to carry (core.rounds.carried_window)

    @property
    def requests_per_s(self) -> float | None:
        return self.small_requests / self.small_wall_s if self.small_requests and self.small_wall_s > 0 else None

    @property
    def steady_requests_s(self) -> float:
        """The steady window's requests at the rate the round's own small requests got: time the
        pipe gave to serving requests, not to bytes, where the pipe was the cores (cpu_busy of at
        least REQUESTS_ON_CORES_BUSY); else, or where it made none, 0. At most REQUESTS_SHARE_MAX of
        the window, so that a noisy rate cannot make a pipe of a sliver."""
        if not (self.steady_requests and self.requests_per_s and self.steady_s > 0
                and self.cpu_busy >= REQUESTS_ON_CORES_BUSY):
            return 0.0
        return min(self.steady_requests / self.requests_per_s, REQUESTS_SHARE_MAX * self.steady_s)

    @property
    def pipe_s_per_request(self) -> float:
        """The pipe's seconds each of the window's requests took (steady_requests_s over them; 0
        where none was taken out). A job's requests take as much of it: predict_job charges them
        back, so a job read as the round was is priced at the window as measured."""
        return self.steady_requests_s / self.steady_requests if self.steady_requests else 0.0

    @property
    def window_bytes_per_s(self) -> float:
        """What the ranks got together once under way, over the window as measured (all of the
        round where it was not timed apart): the requests' time still in it."""
        if self.steady_bytes and self.steady_s > 0:
            return self.steady_bytes / self.steady_s
        return self.total_bytes / max(self.wall_s, 1e-9)

    @property
    def carried_bytes_per_s(self) -> float:
        """What the round's shared pipe was certainly seen to carry (no byte counted outside its
        window); bytes_per_s where the round did not time it so."""
        nbytes, seconds = self.carried
        return nbytes / seconds if nbytes and seconds > 0 else self.bytes_per_s

    @property
    def bytes_per_s(self) -> float:
        """window_bytes_per_s less the time the window's requests took (steady_requests_s)."""
        if self.steady_bytes and self.steady_s > 0:
            return self.steady_bytes / (self.steady_s - self.steady_requests_s)
        return self.window_bytes_per_s

    def startup_s(self, latency_s: float) -> float:
        """What the round took beyond its bytes at that rate, its requests and one latency (which
        the model counts apart): threads, buffers, and ranks getting going together on their cores."""
        return max(0.0, self.wall_s - self.total_bytes / self.bytes_per_s - self.steady_requests_s - latency_s)

    def as_dict(self) -> dict:
        return {"name": self.name, "ranks": self.ranks, "nodes": self.nodes, "streams": self.streams,
                "total_bytes": self.total_bytes, "wall_s": round(self.wall_s, 6),
                "bytes_per_s": round(self.bytes_per_s), "cpu_busy": round(self.cpu_busy, 3),
                "small_requests": self.small_requests, "small_wall_s": round(self.small_wall_s, 6),
                "steady_bytes": self.steady_bytes, "steady_s": round(self.steady_s, 6),
                "overlap_s": round(self.overlap_s, 6), "steady_requests": self.steady_requests,
                "start_skew_s": round(self.start_skew_s, 6), "carried_bytes_per_s": round(self.carried_bytes_per_s),
                "window_bytes_per_s": round(self.window_bytes_per_s)}


def assumed_shared(alone: CostModel, measured_streams: bool, streams_add_up: bool,
                   probe_streams: int = 1, ranks_per_node: int = 1) -> SharedCapacity:
    """What rank 0's probe alone suggests: when its streams shared one link, the ranks on a node
    share what it got (the pipe is assumed to be the node's; an egress behind it is unseen).
    When only one stream was measured, the rank's link is that stream's rate for all its
    threads, and the node's ranks are taken to share it too, until a round shows more: assumed
    apart, N ranks on one node are each priced at the node's whole rate, N times fast, and a
    prediction that fast leaves the next job's rounds no budget to find out."""
    # Several ranks on a node sharing rank 0's link share the requests it served too: each of
    # theirs takes the pipe a request's latency over what rank 0's probe streams overlapped.
    # Without it, the ranks of a crowded node choose thousands of requests of only their needed
    # bytes and take longer than the gap-merged plan they passed over (BENCHMARKS: Rounds).
    # A node round that runs replaces it; a rank alone keeps its own overlap (its latency term).
    if measured_streams and streams_add_up:
        return SharedCapacity(source="assumed: nothing shared (rank 0's streams did not share a link)")
    what = "the link rank 0's streams shared" if measured_streams else "the one stream rank 0 measured"
    request_s = alone.latency_s / alone.overlap(probe_streams) if ranks_per_node > 1 else 0.0
    return SharedCapacity(node_bytes_per_s=alone.bandwidth_bytes_per_s, node_request_s=request_s,
                          source=f"assumed: a node's ranks share {what}")


def rank_at_least(alone: CostModel, bytes_per_s: float, streams: int) -> CostModel:
    """One rank's link, raised where a rank was seen to get `bytes_per_s` on `streams` streams:
    its link carries at least that, and each of its connections at least its share."""
    if bytes_per_s <= alone.bandwidth(streams):
        return alone
    return replace(alone, bandwidth_bytes_per_s=max(alone.bandwidth_bytes_per_s, bytes_per_s),
                   stream_bandwidth_bytes_per_s=max(alone.stream_bytes_per_s, bytes_per_s / max(1, streams)))


def alone_from_rounds(alone: CostModel, rounds) -> CostModel:
    """One rank's link, raised to what each rank got in a round where many read at once: a rank
    gets at least that alone. Rank 0's probe may have had no time to try parallel streams and
    assumed they share one link; ranks whose streams together got more showed they do not (a
    cap per connection, as Toxiproxy's or a long path's TCP window)."""
    for r in rounds:
        alone = rank_at_least(alone, r.bytes_per_s / max(1, r.ranks), r.streams)
    return alone


def shared_from_rounds(alone: CostModel, rounds, fallback: SharedCapacity) -> SharedCapacity:
    """The shared pipes the rounds showed. Ranks that got less than SCALING of what each gets
    alone were sharing a pipe, whose capacity is what they got together. Where the ranks of one
    node added up, its pipe is what they got (the most it was seen to carry); where the nodes
    added up, no egress binds at that count. A pipe no round loaded keeps `fallback`'s figure.

    A node's pipe carries at least what one rank got through it alone: a short round that got
    less measured its own start-up (threads, first requests, ranks scheduled late on busy
    cores), not the pipe, so rank 0's probe is its floor. The egress is what the nodes round
    was certainly seen to carry, alone (its ranks on one clock: probe_rounds.on_one_clock)."""
    node, egress, cpu_bound = fallback.node_bytes_per_s, fallback.egress_bytes_per_s, fallback.node_cpu_bound
    requests = fallback.requests_per_s
    node_request_s, egress_request_s = fallback.node_request_s, fallback.egress_request_s
    by_name = {r.name: r for r in rounds}
    if "node" in by_name:
        r = by_name["node"]
        alone_bps = alone.bandwidth(r.streams)
        shared = r.bytes_per_s < SCALING_FRACTION * r.ranks * alone_bps
        # Ranks that added up still showed only what the node carried at the round's streams: a
        # plan of more streams is priced at that, not at ranks x streams x a connection's cap that
        # no round saw (on one machine, the cores under the proxy and the server stop it first).
        node, cpu_bound = (max(r.bytes_per_s, alone_bps), r.cpu_busy >= CPU_BOUND_BUSY) if shared else (
            r.bytes_per_s, False)
        node_request_s = r.pipe_s_per_request if node == r.bytes_per_s else 0.0  # not where the floor set it
    if "nodes" in by_name:
        # The egress is what every node reading at once was certainly seen to get through it
        # (carried_bytes_per_s: no byte counted outside its window), with no floor from rank 0's
        # probe: that read one node's path over short windows, which a first flight (bytes that
        # arrive with the reply's headers) or two streams served one after the other (each timed
        # from its own first byte) make faster than the pipe; a floor above the pipe is no floor.
        r = by_name["nodes"]
        per_node = min(alone.bandwidth(r.streams) * r.ranks / r.nodes, node or float("inf"))
        seen = r.carried_bytes_per_s
        egress = seen if seen < SCALING_FRACTION * r.nodes * per_node else None
        # The carried figure kept its requests' time in its window: none to charge back.
        egress_request_s = r.pipe_s_per_request if egress is not None and not r.carried[0] else 0.0
    for r in rounds:
        # Ranks whose small requests took longer together than one rank's alone would (its
        # latency, overlapped as far as its probe saw) were waiting on a shared request rate.
        alone_rate = r.ranks * alone.overlap(r.streams) / max(alone.latency_s, 1e-9)
        if r.requests_per_s is not None:
            requests = r.requests_per_s if r.requests_per_s < SCALING_FRACTION * alone_rate else None
    # The start-up of the round with the most ranks: the job's ranks get going as they did.
    startup_s = max(rounds, key=lambda r: r.ranks).startup_s(alone.latency_s) if rounds else fallback.startup_s
    names = " and ".join(f"{r.name} round ({r.ranks} ranks on {r.nodes} node(s))" for r in rounds)
    nodes_seen = max([fallback.nodes_seen, *(r.nodes for r in rounds)])
    return SharedCapacity(node, egress, cpu_bound, f"measured: {names}", requests, startup_s, node_request_s,
                          egress_request_s, nodes_seen)
