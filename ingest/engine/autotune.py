"""Tune a read: probe the link for as long as the probe repays itself, then let the tuner pick
the plan the cost model predicts fastest. Used by the driver (rank 0, once per job), `plan
--probe` and the benchmarks.

The probe runs round by round (ingest.engine.probe), and a round runs only while the probe's time so
far plus the round's own cost stays within PROBE_BUDGET_FRACTION of the read's predicted time,
predicted with everything measured so far. Before the first round the model is the configured
one with the latency and client CPU the header request showed, which cost nothing: on a 100 ms
link that alone shows that a small box cannot repay a probe, and on a fast link the first
round's bandwidth shows how short the read will be (and, when the link is faster than the
configured model, that a longer stream read still fits: a read cut to under a millisecond
under-measures a stream). The exceptions to the budget: a round runs whenever the choice hangs
on what it would measure by more than the round costs - the latency round when the plan chosen
leans on overlap nobody measured (overlap_at_stake_s), the streams round when streams adding up
would make another plan faster (streams_at_stake_s).
"""
from __future__ import annotations

from dataclasses import replace

from ingest.core.layout import Layout
from ingest.formats.reader import HeaderTiming
from ingest.core.cost import CostModel
from ingest.core.plan import plan_selection, storage_of
from ingest.engine.probe import LinkProber
from ingest.core.linkprobe import ASSUMED_CPU_PER_BYTE_S, PROBE_MIN_DATA_BYTES, MiB, LinkProbe
from ingest.core.selection import Selection
from ingest.transports.base import Transport
from ingest.core.tuning import IN_FLIGHT_MAX, THREADS_MAX, Tuning, choose, cost_from_probe, describe_probe

# The benchmarks' target is auto within 5 % of the best plan, probe included.
PROBE_BUDGET_FRACTION = 0.04
PROBE_READ_MAX_BYTES = 8 * MiB
PROBE_READ_MIN_BYTES = 1 * MiB  # shrunk (to probe.MIN_PROBE_READ_BYTES) when the budget has no room


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
    plan = plan_selection(layout, sel, strategy=tuning.strategy, chunk_bytes=tuning.chunk_bytes,
                          max_gap_bytes=tuning.max_gap_bytes, cost=cost)
    return plan.predicted_s(world, tuning.threads) - tune(world).predicted_s


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
    measured it: the chosen plan's regret were streams to add up (a per-connection cap, as on
    Acacia, where 16 threads read a box 2-3x faster than 4). Under the assumption every thread
    count moves bytes equally fast, so the tuner's preference for 4 threads may have decided."""
    adding = replace(cost, bandwidth_bytes_per_s=max(cost.bandwidth_bytes_per_s, cost.stream_bytes_per_s * in_flight_max))
    return regret_s(tuning, cost, adding, layout, sel, tune)


def tune_read(transport: Transport, layout: Layout, sel: Selection, fallback: CostModel, *,
              probe: bool = True, chunk_bytes: int | None = None, threads: int | None = None,
              gap_bytes: int | None = None, ranks_sharing: int = 1, header: HeaderTiming | None = None,
              budget_fraction: float = PROBE_BUDGET_FRACTION,
              in_flight_max: int | None = None) -> tuple[Tuning, LinkProbe | None]:
    """(the chosen plan's settings, the probe or None when no round repaid itself). `sel` is the
    (largest) box to read; `header` how the header request went; `in_flight_max` the most
    requests to keep in flight (default: what the transport's engine affords)."""
    needed = layout.itemsize
    for n in sel.counts:
        needed *= n
    cost = hinted_cost(fallback, header)
    hinted = cost is not fallback  # the header's figures are measurements; the configured ones are not
    how = "as the header request took" if hinted else "configured"
    model = (f"configured cost model ({cost.latency_s * 1e3:.3g} ms per request, {how}; "
             f"{cost.bandwidth_bytes_per_s / 1e6:g} MB/s)")

    # Deeper than THREADS_MAX in flight only on evidence (unless the caller set the limit): the
    # latency round saw overlap reach its wave. An assumed overlap at 64 is an extrapolation.
    depth_on_evidence = in_flight_max is None
    in_flight_max = in_flight_max or in_flight_limit(transport)

    def tune(cost: CostModel, model: str, measured: tuple[str, ...] = ()) -> Tuning:
        depth = in_flight_max
        if depth_on_evidence and not ("latency" in measured and cost.latency_concurrency is None):
            depth = min(depth, THREADS_MAX)
        return choose(cost, layout, sel, chunk_bytes=chunk_bytes, threads=threads, gap_bytes=gap_bytes, model=model,
                      threads_max=depth)

    tuning = tune(cost, model)
    if not probe:
        return tuning, None
    span_offset, span_bytes = data_span(layout)
    prober = LinkProber(transport, span_offset, span_bytes, large_bytes=probe_read_bytes(needed),
                        latency_s=cost.latency_s if hinted else None,
                        cpu_per_request_s=cost.cpu_per_request_s)

    def past_budget_repays() -> bool:
        """Past the budget, a round still runs when the choice hangs on what it would measure by
        more than it costs: the rounds up to the latency round when the plan leans on unmeasured
        overlap; the streams round when streams adding up would make another plan faster."""
        if prober.next_round != "streams":
            # Priced as the stake is, with latencies that do not overlap: the round's own waves
            # then take a latency per request (the case in which the round is worth running).
            return (overlap_at_stake_s(tuning, cost, layout, sel, lambda c: tune(c, model))
                    > prober.until_s("latency", cost.latency_s, cost.stream_bytes_per_s, overlap=1.0))
        return (streams_at_stake_s(tuning, cost, in_flight_max, layout, sel,
                                   lambda c: tune(c, model, tuple(prober.measured)))
                > prober.next_round_s(cost.latency_s, cost.stream_bytes_per_s))

    def retune() -> tuple[CostModel, Tuning]:
        link = prober.result()
        probed = cost_from_probe(link, threads_max=in_flight_max, ranks_sharing=ranks_sharing)
        return probed, tune(probed, describe_probe(link, probed, ranks_sharing), link.measured)

    def budget_left_s() -> float:
        return budget_fraction * tuning.predicted_s - prober.spent_s

    while prober.next_round:
        left_s = budget_left_s()
        prober.fit_large_bytes(left_s, cost.latency_s, cost.stream_bytes_per_s)
        if prober.next_round_s(cost.latency_s, cost.stream_bytes_per_s) > left_s and not past_budget_repays():
            if prober.next_round != "latency":  # the streams round needs the stream round's figure
                break
            prober.skip_round()  # the streams round may still be worth its time
            continue
        prober.run_round()
        prober.skipped.clear()  # the plan may have changed: a round passed over may repay itself now
        cost, tuning = retune()
        if prober.measured[-1] == "stream":  # a longer read, if the link proved faster than assumed
            room_s = budget_left_s() - prober.until_s("latency", cost.latency_s, cost.stream_bytes_per_s)
            if prober.grow_stream(room_s, cost.latency_s, cost.stream_bytes_per_s, PROBE_READ_MAX_BYTES):
                cost, tuning = retune()
    return tuning, (prober.result() if prober.measured else None)
