"""Tune a read: probe the link for as long as the probe repays itself, then let the tuner pick
the plan the cost model predicts fastest. Used by the driver (rank 0, once per job), `plan
--probe` and the benchmarks.

Before any round the model is the configured one with the latency and client CPU the header
request showed, which cost nothing: on a 100 ms link that alone shows that a small box cannot
repay a probe. The probe's rounds (ingest.engine.probe: stream, latency, streams) then run in
that order, each decided by its row of ROUND_RULES, one _TuningSession method per step:

- a round runs when the probe's time so far plus the round's own cost stays within
  `budget_fraction` of the read's time, predicted with everything measured so far (`fits`);
- past the budget, a round still runs when the choice hangs on what it would measure by more
  than it costs (`repays_past_budget`): the plan's overlap at stake pays for the rounds up to
  the latency round (overlap_at_stake_s), streams adding up for the streams round
  (streams_at_stake_s);
- when nothing was ever measured of the endpoint, the stream round runs if its read is a small
  part of the job's bytes (`first_look`): the budget is a fraction of a time priced with the
  configured bandwidth, which a slow link makes far too short (the default 75 MB/s prices a job
  on a 10 MB/s pipe several times fast, and so gives it no probe). The look and the job move bytes over the
  same unknown link, so their bytes weigh them where their times cannot yet;
- a round that neither fits nor repays stops the probe, except the latency round, which is
  passed over: the streams round does not need its figures;
- after a round the plan is chosen again (`retune`) and the rounds passed over are weighed
  again, since the plan they were weighed for may have changed;
- after the stream round, its read is taken again, longer, when the link proved faster than
  the budget sized it for (`regrow_stream`): a read cut to under a millisecond under-measures
  a stream.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

from ingest.core.layout import Layout
from ingest.formats.reader import HeaderTiming
from ingest.core.cost import CostModel
from ingest.core.plan import plan_selection, storage_of
from ingest.engine.probe import MIN_PROBE_READ_BYTES, LinkProber
from ingest.core.linkprobe import ASSUMED_CPU_PER_BYTE_S, PROBE_MIN_DATA_BYTES, MiB, LinkProbe
from ingest.core.selection import Selection
from ingest.transports.base import Transport
from ingest.core.sharing import SharedCapacity, Topology, assumed_shared, share_cost
from ingest.core.tuning import (IN_FLIGHT_MAX, THREADS_MAX, Tuning, choose, cost_from_probe, describe_probe,
                                said_first_look, streams_add_up)
from ingest.engine import linkcache

# The benchmarks' target is auto within 5 % of the best plan, probe included.
PROBE_BUDGET_FRACTION = 0.04
PROBE_READ_MAX_BYTES = 8 * MiB
PROBE_READ_MIN_BYTES = 1 * MiB  # shrunk (to probe.MIN_PROBE_READ_BYTES) when the budget has no room
# A first look at an endpoint nothing was measured of: the stream round, when the job's ranks
# read at least this many times its bytes. Measured once, it is kept (ingest.engine.linkcache):
# the endpoint's later jobs are priced with it and do not look again.
FIRST_LOOK_JOB_MULTIPLE = 8


def probe_read_bytes(needed_bytes: int) -> int:
    """Size of the probe's bandwidth reads: 1/32 of the read, within 1..8 MiB."""
    return max(PROBE_READ_MIN_BYTES, min(PROBE_READ_MAX_BYTES, needed_bytes // 32))


def hinted_cost(fallback: CostModel, header: HeaderTiming | None) -> CostModel:
    """The configured model with the latency and client CPU the header request showed (and the
    client CPU per byte assumed until a probe measures it)."""
    if header is None or header.request_s <= 0:
        return fallback
    return replace(fallback, latency_s=header.request_s, cpu_per_request_s=min(header.cpu_s, header.request_s),
                   cpu_per_byte_s=ASSUMED_CPU_PER_BYTE_S)


def in_flight_limit(transport: Transport) -> int:
    """The most requests worth keeping in flight: a concurrent engine's are free of threads."""
    return IN_FLIGHT_MAX if transport.concurrent else THREADS_MAX


def data_span(layout) -> tuple[int, int]:
    """(offset, bytes) of the object's range the probe may read: the data of a contiguous layout,
    or from a chunked dataset's first stored chunk to the end of its last."""
    index = layout.chunks
    if index is not None and index.n_chunks:
        first = int(index.offsets.min())
        return first, int((index.offsets + index.sizes).max()) - first
    return layout.data_offset, layout.data_bytes


def worth_probing(layout) -> bool:
    """Is there data to probe, and enough that probing repays itself? (Compact or never-written
    HDF5 data needs no request at all.)"""
    return storage_of(layout) in ("contiguous", "chunked") and data_span(layout)[1] >= PROBE_MIN_DATA_BYTES


def regret_s(tuning: Tuning, cost: CostModel, world: CostModel, layout: Layout, sel: Selection, tune) -> float:
    """How much slower the plan chosen under `cost` would be than the best plan, were the link
    `world` instead: what the choice stakes on the figures in which the two differ. `tune(cost)`
    chooses as the caller does."""
    return plan_of(tuning, cost, layout, sel).predicted_s(world, tuning.threads) - tune(world).predicted_s


def first_look_bytes(tuning: Tuning, cost: CostModel, layout: Layout, sel: Selection, n_ranks: int) -> int:
    """What a first look may read: 1/FIRST_LOOK_JOB_MULTIPLE of the job's wire bytes (n_ranks
    each reading a box like `sel` as `tuning` plans it), no more than the probe's own reads of
    `sel` (probe_read_bytes), or 0 where that share is under the least a round reads
    (MIN_PROBE_READ_BYTES)."""
    look_bytes = plan_of(tuning, cost, layout, sel).wire_bytes * n_ranks // FIRST_LOOK_JOB_MULTIPLE
    if look_bytes < MIN_PROBE_READ_BYTES:
        return 0
    return min(look_bytes, probe_read_bytes(needed_bytes(layout, sel)))


def plan_of(tuning: Tuning, cost: CostModel, layout: Layout, sel: Selection):
    """The plan `tuning` chose for `sel`, made again (its requests under `cost`)."""
    return plan_selection(layout, sel, strategy=tuning.strategy, chunk_bytes=tuning.chunk_bytes,
                          max_gap_bytes=tuning.max_gap_bytes, cost=cost)


def overlap_at_stake_s(tuning: Tuning, cost: CostModel, layout: Layout, sel: Selection, tune) -> float:
    """What trusting unmeasured overlap could cost: the chosen plan's regret were latencies not to
    overlap at all. The budget does not bound the latency round when this exceeds what the round
    costs: a plan of many requests in flight is only as good as the overlap it assumes (on two
    shared cores a loopback server's work does not overlap), and a few small reads settle it."""
    if cost.latency_concurrency is not None:
        return 0.0  # measured already (or configured)
    return regret_s(tuning, cost, replace(cost, latency_concurrency=1.0), layout, sel, tune)


def streams_at_stake_s(tuning: Tuning, cost: CostModel, in_flight_max: int, layout: Layout, sel: Selection,
                       tune) -> float:
    """What assuming one stream's bandwidth for every thread could cost before the streams round
    measured it: the chosen plan's regret were streams to add up (a per-connection cap, where
    16 threads read a box several times faster than 4). Under the assumption every thread
    count moves bytes equally fast, so the tuner's preference for 4 threads may have decided."""
    adding = replace(cost, bandwidth_bytes_per_s=max(cost.bandwidth_bytes_per_s, cost.stream_bytes_per_s * in_flight_max))
    return regret_s(tuning, cost, adding, layout, sel, tune)


class RoundRule(NamedTuple):
    """How the tuner decides one of the probe's rounds."""

    name: str  # the round (ingest.core.linkprobe.ROUNDS, in the order they run)
    past_budget: tuple[str, ...]  # what still pays for the round when the budget has no room for it
    if_not_worth: str  # "stop" the probe, or "pass over" the round (the later ones may still run)
    then: str  # what follows the round once it ran, beyond choosing the plan again


ROUND_RULES = (
    # Every plan is priced with one stream's bandwidth, which only this round measures: without
    # it no later round's figures can be used. The overlap at stake pays for it because the
    # latency round comes after it; a first look at an unmeasured endpoint, for the prediction.
    RoundRule("stream", past_budget=("overlap at stake", "first look"), if_not_worth="stop", then="regrow stream"),
    # The streams round does not need this round's figures, so it may still be worth its time.
    RoundRule("latency", past_budget=("overlap at stake",), if_not_worth="pass over", then=""),
    RoundRule("streams", past_budget=("streams at stake",), if_not_worth="stop", then=""),
)
_RULE_OF = {rule.name: rule for rule in ROUND_RULES}


class _TuningSession:
    """One read's tuning while the probe's rounds run: the cost model so far, the plan it
    chooses (`tuning`), and the prober whose next round each step decides."""

    def __init__(self, layout: Layout, sel: Selection, alone: CostModel, model: str, *, chunk_bytes: int | None,
                 threads: int | None, gap_bytes: int | None, topology: Topology, shared: SharedCapacity | None,
                 budget_fraction: float, in_flight_max: int, depth_on_evidence: bool,
                 known: LinkProbe | None = None):
        self.layout, self.sel = layout, sel
        self.chunk_bytes, self.threads, self.gap_bytes = chunk_bytes, threads, gap_bytes
        self.topology = topology
        self.given_shared = shared  # None: what rank 0's probe suggests (core/sharing.assumed_shared)
        self.budget_fraction = budget_fraction
        self.in_flight_max = in_flight_max
        self.depth_on_evidence = depth_on_evidence
        self.model = model  # where the configured (or header-hinted, or cached) cost came from
        self.known = known  # an earlier run's probe of this endpoint (`alone` is its model), or None
        # `alone` prices the probe's rounds (rank 0 reads alone); `cost`, its share of what the
        # job's ranks share, the plans. A cached probe suggests what is shared as a fresh one would.
        self.alone = alone
        self.shared = self.suggested_shared(known)
        self.cost = share_cost(alone, self.shared, topology)
        self.prober: LinkProber | None = None
        self.looked = False  # the stream round ran as a first look (`first_look`): the reason says so
        self.tuning = self.tune(self.cost, model)

    def tune(self, cost: CostModel, model: str, measured=()) -> Tuning:
        """The plan `cost` predicts fastest, `measured` the rounds behind it. Deeper than
        THREADS_MAX in flight only on evidence (unless the caller set the limit): the latency
        round saw overlap reach its wave. An assumed overlap at 64 is an extrapolation."""
        depth = self.in_flight_max
        if self.depth_on_evidence and not ("latency" in measured and cost.latency_concurrency is None):
            depth = min(depth, THREADS_MAX)
        tuning = choose(cost, self.layout, self.sel, chunk_bytes=self.chunk_bytes, threads=self.threads,
                        gap_bytes=self.gap_bytes, model=model, threads_max=depth)
        looked_bytes = self.prober.large_bytes if self.looked else 0
        return replace(tuning, alone=self.alone, shared=self.shared, first_look_bytes=looked_bytes)

    def tune_now(self, cost: CostModel) -> Tuning:
        """As `tune`, with the rounds run so far: how the stakes weigh another link."""
        return self.tune(cost, self.model, tuple(self.prober.measured))

    def budget_left_s(self) -> float:
        return self.budget_fraction * self.tuning.predicted_s - self.prober.spent_s

    # -- the steps -------------------------------------------------------------------------------
    def probe(self, prober: LinkProber) -> tuple[Tuning, LinkProbe | None]:
        """Decide and run the rounds in order; the plan, and the probe (None: no round ran)."""
        self.prober = prober
        while prober.next_round and self.step(_RULE_OF[prober.next_round]):
            pass
        return self.tuning, (prober.result() if prober.measured else None)

    def step(self, rule: RoundRule) -> bool:
        """Run the next round, or pass over it; False when the probe stops here."""
        if self.fits() or self.repays_past_budget(rule):
            self.run_round(rule)
        elif rule.if_not_worth == "pass over":
            self.prober.skip_round()
        else:
            return False
        return True

    def fits(self) -> bool:
        """Does the next round fit in the budget left? Before the first read, the chunk-sized
        reads shrink to what is left (see LinkProber.fit_large_bytes)."""
        left_s = self.budget_left_s()
        self.prober.fit_large_bytes(left_s, self.alone.latency_s, self.alone.stream_bytes_per_s)
        round_s = self.prober.next_round_s(self.alone.latency_s, self.alone.stream_bytes_per_s)
        return not round_s > left_s  # (an infinite fraction of a read predicted at 0 s is no limit)

    def repays_past_budget(self, rule: RoundRule) -> bool:
        """Does what the rule puts at stake exceed what the round costs?"""
        stakes = {"overlap at stake": self.overlap_repays, "streams at stake": self.streams_repay,
                  "first look": self.first_look}
        return any(stakes[stake]() for stake in rule.past_budget)

    def first_look(self) -> bool:
        """Nothing measured of this endpoint, and the job's ranks read at least
        FIRST_LOOK_JOB_MULTIPLE times the least a stream round reads? Then the round's read is
        sized to that share of the job's bytes (not past the size the probe asked for): a short
        read's first flight arrives with the reply's headers and overstates a capped link's rate,
        where a longer one comes closer to it."""
        if self.known is not None or self.prober.measured or self.budget_fraction <= 0:
            return False  # (a budget of nothing: the caller wants no probe at all)
        look_bytes = first_look_bytes(self.tuning, self.cost, self.layout, self.sel, self.topology.n_ranks)
        if not look_bytes:
            return False
        self.prober.size_first_read(look_bytes)
        self.looked = True
        return True

    def overlap_repays(self) -> bool:
        """Does the plan lean on unmeasured overlap by more than the rounds up to the latency
        round cost? They are priced as the stake is, with latencies that do not overlap: the
        latency round's waves then take a latency per request (the case in which it is worth
        running)."""
        at_stake_s = overlap_at_stake_s(self.tuning, self.cost, self.layout, self.sel, self.tune_now)
        return at_stake_s > self.prober.until_s("latency", self.alone.latency_s, self.alone.stream_bytes_per_s,
                                                overlap=1.0)

    def streams_repay(self) -> bool:
        """Would streams adding up make another plan faster by more than the streams round costs?"""
        at_stake_s = streams_at_stake_s(self.tuning, self.cost, self.in_flight_max, self.layout, self.sel,
                                        self.tune_now)
        return at_stake_s > self.prober.next_round_s(self.alone.latency_s, self.alone.stream_bytes_per_s)

    def run_round(self, rule: RoundRule) -> None:
        self.prober.run_round()
        self.prober.skipped.clear()  # the plan may have changed: a round passed over may repay itself now
        self.retune()
        if rule.then == "regrow stream":
            self.regrow_stream()

    def regrow_stream(self) -> None:
        """Read one stream again, longer, in the room the budget leaves beside the latency round
        (LinkProber.grow_stream: only when at least twice the bytes fit), and retune on it."""
        room_s = self.budget_left_s() - self.prober.until_s("latency", self.alone.latency_s,
                                                            self.alone.stream_bytes_per_s)
        if self.prober.grow_stream(room_s, self.alone.latency_s, self.alone.stream_bytes_per_s, PROBE_READ_MAX_BYTES):
            self.retune()

    def retune(self) -> None:
        """The cost model the probe so far gives, and the plan it chooses."""
        link = self.prober.result()
        self.alone = cost_from_probe(link, threads_max=self.in_flight_max)
        self.shared = self.suggested_shared(link)
        self.cost = share_cost(self.alone, self.shared, self.topology)
        model = said_first_look(describe_probe(link, self.alone, self.shared_text()), self.looked)
        self.tuning = self.tune(self.cost, model, link.measured)

    def suggested_shared(self, link: LinkProbe | None) -> SharedCapacity:
        """What the ranks share: the caller's (measured or cached), else what `link` (rank 0's
        probe of the link `alone` models, fresh or cached) suggests, else nothing known."""
        if self.given_shared is not None:
            return self.given_shared
        if link is None:
            return SharedCapacity()
        return assumed_shared(self.alone, "streams" in link.measured, streams_add_up(link), link.streams,
                              self.topology.most_per_node)

    def shared_text(self) -> str:
        """What the job's ranks share, for the reason (nothing, for a job of one rank)."""
        if self.topology.n_ranks == 1:
            return ""
        return f"{self.topology.describe()}, shared pipes {self.shared.source}"


def tune_read(transport: Transport, layout: Layout, sel: Selection, fallback: CostModel, *,
              probe: bool = True, chunk_bytes: int | None = None, threads: int | None = None,
              gap_bytes: int | None = None, topology: Topology | None = None, shared: SharedCapacity | None = None,
              header: HeaderTiming | None = None, budget_fraction: float = PROBE_BUDGET_FRACTION,
              in_flight_max: int | None = None) -> tuple[Tuning, LinkProbe | None]:
    """(the chosen plan's settings, the probe or None when no round repaid itself). `sel` is the
    (largest) box one rank reads; `topology` the job's ranks on their nodes (default: one rank);
    `shared` what they share, when the caller knows (default: a cached measurement of this
    endpoint, else what the probe suggests); `header` how the header request went;
    `in_flight_max` the most requests to keep in flight (default: what the engine affords).

    Before the probe the model is, in order: what an earlier run measured of this endpoint
    (ingest.engine.linkcache, with its age), the configured one with the header request's latency
    and CPU, the configured one. What the probe measures is kept for the next run."""
    in_flight = in_flight_max or in_flight_limit(transport)
    recalled = linkcache.recall(transport.endpoint)
    cost = hinted_cost(fallback, header)
    hinted = cost is not fallback  # the header's figures are measurements; the configured ones are not
    how = "as the header request took" if hinted else "configured"
    model = (f"configured cost model ({cost.latency_s * 1e3:.3g} ms per request, {how}; "
             f"{cost.bandwidth_bytes_per_s / 1e6:g} MB/s)")
    known = recalled.probe if recalled is not None else None
    if known is not None:
        cost = cost_from_probe(known, threads_max=in_flight)
        model = f"{recalled.describe()}: {describe_probe(known, cost)}"
    if shared is None and recalled is not None:
        shared = recalled.shared
    session = _TuningSession(layout, sel, cost, model, chunk_bytes=chunk_bytes, threads=threads, gap_bytes=gap_bytes,
                             topology=topology or Topology.block(1, 1), shared=shared, budget_fraction=budget_fraction,
                             in_flight_max=in_flight, depth_on_evidence=in_flight_max is None, known=known)
    if not probe:
        return session.tuning, None
    span_offset, span_bytes = data_span(layout)
    prober = LinkProber(transport, span_offset, span_bytes, large_bytes=probe_read_bytes(needed_bytes(layout, sel)),
                        latency_s=cost.latency_s if hinted else None, cpu_per_request_s=cost.cpu_per_request_s)
    tuning, link = session.probe(prober)
    if link is not None:
        linkcache.remember(transport.endpoint, probe=link)
    return tuning, link


def needed_bytes(layout: Layout, sel: Selection) -> int:
    return math.prod(sel.counts, start=layout.itemsize)
