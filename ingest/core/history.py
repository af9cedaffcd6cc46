"""What earlier jobs of the same shape took on an endpoint, and the prediction they give (pure).

The rule. A job is priced by the model (core/sharing.py) from a probe of a few tens of
milliseconds, which samples the link; an earlier job of the same shape on the same endpoint
(`JobShape.similar`: the same ranks on the same nodes, about the same streams, bytes and
requests per rank) measured the whole read, every rank at once, for its full length. So once an
endpoint has such records:
- the predicted makespan is the median of the NEWEST similar records, each scaled to this job's
  bytes (or requests, where those bind); the model's own figure is kept beside it;
- where a probe ran for this job, its model is one more vote in that median: it measured today's
  link, and with one or two records one slow job would otherwise set the prediction alone (with
  NEWEST records the vote moves the median by at most one place);
- where the probe's model and the records disagree by more than MODEL_AGREES, the link has
  changed since the records were made, and the model's figure stands;
- where no probe ran (a read too small to repay one), the model is a cached measurement or the
  configured default, and the records of this very shape stand whatever the model says.
The runs that chose these rules and their scores are in BENCHMARKS.md ("Predicted against
measured", bench.cluster.predictions).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from ingest.core.cost import CostModel
from ingest.core.sharing import (LATENCY, REQUESTS, JobPrediction, RankLoad, SharedCapacity, Topology,
                                   rank_at_least)
from ingest.units import format_age

SIMILAR = 1.5  # the busiest rank's bytes and requests within this factor: the same job, resized
THREADS_SIMILAR = 2.0  # and its streams within this one
NEWEST = 5  # the median of at most this many of the newest similar jobs
# Further apart than this, the link changed: the probe's model stands. Wider than the model's own
# miss from one job to the next (BENCHMARKS.md, bench.cluster.predictions); a smaller change the median
# follows within a few jobs, as new jobs are kept.
MODEL_AGREES = 3.0
KEEP = 32  # records per endpoint: enough for a few shapes' NEWEST
REQUEST_TERMS = (REQUESTS, LATENCY)  # terms whose time grows with requests, not bytes


@dataclass(frozen=True)
class JobShape:
    """What makes two jobs on one endpoint the same job: how it is spread and planned, and the
    busiest rank's load."""

    method: str
    ranks_per_node: tuple[int, ...]
    threads: int
    chunk_bytes: int  # for the record: `similar` compares the requests, which show the size
    rank_wire_bytes: int  # the busiest rank's wire bytes
    rank_requests: int  # and its requests
    node_wire_bytes: int = 0  # the busiest node's wire bytes, all its ranks together (0: not recorded)

    @classmethod
    def of(cls, method: str, topology: Topology, loads, chunk_bytes: int) -> "JobShape":
        loads = list(loads) or [RankLoad(0, 0, 1)]
        busiest = max(loads, key=lambda load: (load.wire_bytes, load.n_requests))
        node_wire = [0] * topology.n_nodes
        for rank, load in enumerate(loads[:topology.n_ranks]):
            node_wire[topology.node_of_rank[rank]] += load.wire_bytes
        return cls(method, topology.ranks_per_node, busiest.threads, chunk_bytes, busiest.wire_bytes,
                   busiest.n_requests, max(node_wire, default=0))

    @property
    def streams_per_node(self) -> int:
        """The most streams one node had open: its ranks' threads."""
        return max(self.ranks_per_node, default=1) * self.threads

    def similar(self, other: "JobShape") -> bool:
        """The same method on the same ranks per node, and about the same load: bytes and requests
        within SIMILAR, streams within THREADS_SIMILAR (the request size shows in the requests).
        A plan priced from a header request's timing may pick 4 threads one run and 8 the next,
        and on a shared pipe both take its time."""
        if (self.method, self.ranks_per_node) != (other.method, other.ranks_per_node):
            return False
        return _within(self.threads, other.threads, THREADS_SIMILAR) and all(
            _within(a, b, SIMILAR) for a, b in ((self.rank_wire_bytes, other.rank_wire_bytes),
                                                (self.rank_requests, other.rank_requests)))

    def scale_from(self, other: "JobShape", binding: str) -> float:
        """This job's size over `other`'s, in what binds: requests for the request terms, else bytes."""
        if binding in REQUEST_TERMS:
            return self.rank_requests / max(1, other.rank_requests)
        return self.rank_wire_bytes / max(1, other.rank_wire_bytes)

    def as_dict(self) -> dict:
        return {"method": self.method, "ranks_per_node": list(self.ranks_per_node), "threads": self.threads,
                "chunk_bytes": self.chunk_bytes, "rank_wire_bytes": self.rank_wire_bytes,
                "rank_requests": self.rank_requests, "node_wire_bytes": self.node_wire_bytes}

    @classmethod
    def from_dict(cls, d: dict) -> "JobShape":
        # node_wire_bytes: absent from records kept before it was (they then give no floor)
        return cls(str(d["method"]), tuple(int(n) for n in d["ranks_per_node"]), int(d["threads"]),
                   int(d["chunk_bytes"]), int(d["rank_wire_bytes"]), int(d["rank_requests"]),
                   int(d.get("node_wire_bytes", 0)))


@dataclass(frozen=True)
class PastJob:
    """A finished job on an endpoint: its shape, its measured makespan, and when it ran."""

    shape: JobShape
    makespan_s: float
    at_s: float  # time.time() at its end

    def as_dict(self) -> dict:
        return {**self.shape.as_dict(), "makespan_s": self.makespan_s, "at_s": self.at_s}

    @classmethod
    def from_dict(cls, d: dict) -> "PastJob":
        return cls(JobShape.from_dict(d), float(d["makespan_s"]), float(d["at_s"]))


def _within(a: float, b: float, factor: float) -> bool:
    if a <= 0 or b <= 0:
        return a == b
    return 1 / factor <= a / b <= factor


def with_history(model: JobPrediction, shape: JobShape, past, now_s: float, endpoint: str,
                 probed: bool = True) -> JobPrediction:
    """The job's prediction given the endpoint's `past` jobs: the median of the NEWEST similar
    ones (or fewer: those of this job's streams where any ran them; where none did, the others
    only for a job not probed), with this job's own probed model (`probed`) as one more vote,
    unless there are none, or that model differs from the jobs' median by more than MODEL_AGREES."""
    similar = sorted((p for p in past if p.shape.similar(shape) and p.at_s <= now_s), key=lambda p: p.at_s)
    # Jobs that ran this very plan (its streams) measured it; a job of half or twice the streams
    # measured a neighbour, which on a per-connection cap or a rank's own CPU takes another time
    # (twice the streams on a per-connection cap take well under the half-as-many jobs' time,
    # as the plan's own probe says). So the neighbours count only where no job ran
    # this plan and no probe measured it: a read too small to repay a probe on a shared pipe,
    # where a plan flips between 4 and 8 streams and both take the pipe's time. Counting the
    # neighbours beside this plan's own jobs kept fewer predictions within 0.8-1.25 of the job
    # and none more (BENCHMARKS: Predicted against measured).
    same_plan = [p for p in similar if p.shape.threads == shape.threads]
    similar = (same_plan or ([] if probed else similar))[-NEWEST:]
    if not similar or model.makespan_s <= 0:
        return model
    jobs_s = [p.makespan_s * shape.scale_from(p.shape, model.binding) for p in similar]
    measured_s = statistics.median(jobs_s)
    newest, oldest = (format_age(now_s - p.at_s) for p in (similar[-1], similar[0]))
    ages = f"{newest} to {oldest} ago" if len(similar) > 1 else f"{newest} ago"
    what = f"{len(similar)} earlier job(s) of this shape on {endpoint} ({ages}) took {measured_s:.3g} s"
    if not probed:
        return replace(model, makespan_s=measured_s, model_s=model.makespan_s, history=what)
    if not _within(model.makespan_s, measured_s, MODEL_AGREES):
        return replace(model, history=f"{what}; the model differs by over {MODEL_AGREES:g}x (the link changed?), "
                                      f"so its {model.makespan_s:.3g} s stands")
    voted_s = statistics.median([*jobs_s, model.makespan_s])
    return replace(model, makespan_s=voted_s, model_s=model.makespan_s,
                   history=f"{what}; with this job's probed model ({model.makespan_s:.3g} s) as one more vote, "
                           f"{voted_s:.3g} s")


def _fastest_like(past, shape: JobShape, now_s: float, count) -> tuple[PastJob, float] | None:
    """Of the earlier jobs of the same method whose (streams, bytes), as `count` takes them per
    rank or per node, were at most this job's, the one that moved those bytes fastest, and its
    bytes per second (start-up and waits included: less than the pipe carries, never more)."""
    rated = [(p, count(p.shape)[1] / p.makespan_s) for p in past
             if p.at_s <= now_s and p.makespan_s > 0 and p.shape.method == shape.method
             and all(0 < a <= b for a, b in zip(count(p.shape), count(shape)))]
    return max(rated, key=lambda job_rate: job_rate[1], default=None)


def with_floors(alone: CostModel, shared: SharedCapacity, shape: JobShape, past,
                now_s: float) -> tuple[CostModel, SharedCapacity]:
    """One rank's link and the node's pipe, each raised to what an earlier job on the endpoint
    moved through it where that is more: (alone, shared), with the jobs named in shared.source.

    The probe and its rounds last tens of milliseconds, and on 2 shared cores they see less than
    the pipes carry (their threads' start-up, their first pages); a finished job moved its bytes
    for the whole length of a read, start-up and waits included, so a rank's link carried at
    least its busiest rank's bytes over its makespan, and a node's pipe its busiest node's.
    Only jobs of the same method with at most this job's streams and bytes count, per rank for
    the link and per node for the pipe: under a per-connection cap more streams move more (a
    job of 16 streams says nothing of what 8 get), and a larger job's rate hides the start-up
    that a smaller one spreads over fewer bytes, so a small job priced at a large one's rate is
    predicted too fast. A floor never makes a pipe where
    none was seen to bind, and one over MODEL_AGREES x what the probe saw means the link
    changed since: the probe stands."""
    notes = []
    fastest = _fastest_like(past, shape, now_s, lambda sh: (sh.threads, sh.rank_wire_bytes))
    if fastest is not None:
        rank, rate = fastest
        seen = alone.bandwidth(shape.threads)
        if seen < rate <= MODEL_AGREES * seen:
            alone = rank_at_least(alone, rate, rank.shape.threads)
            notes.append(f"a rank's link at least {rate / 1e6:.0f} MB/s, as a rank of {rank.shape.threads} "
                         f"stream(s) moved {format_age(now_s - rank.at_s)} ago")
    fastest = _fastest_like(past, shape, now_s, lambda sh: (sh.streams_per_node, sh.node_wire_bytes))
    if fastest is not None and shared.node_bytes_per_s:
        node, rate = fastest
        # Compared with the pipe's figure as the rounds left it, without this job's requests
        # (SharedCapacity.node_request_s) charged: with them charged the fastest earlier job
        # floored most loopback jobs, and priced them about 15 % fast (bench.cluster.predictions,
        # 2026-11-26). A floor, a finished job's rate, has its requests in it: none are charged.
        if shared.node_bytes_per_s < rate <= MODEL_AGREES * shared.node_bytes_per_s:
            notes.append(f"the node's pipe at least {rate / 1e6:.0f} MB/s, as a job of "
                         f"{max(node.shape.ranks_per_node, default=1)} rank(s) x {node.shape.threads} stream(s) "
                         f"on one node moved {format_age(now_s - node.at_s)} ago")
            shared = replace(shared, node_bytes_per_s=rate, node_request_s=0.0)
    if notes:
        shared = replace(shared, source="; ".join([shared.source, *notes]))
    return alone, shared
