"""The tuning phase of a job (ingest.driver.job.prepare_job), on rank 0: the link probed and the
read tuned for the job's largest region, then, with the other ranks at hand, what they share
when they read at once measured and the read tuned again for that.

Takes the config's read options whole (ingest.config.settings.ReadOptions), never the config.
"""
from __future__ import annotations

from dataclasses import replace

from ingest.config.settings import ReadOptions, Settings, resolve_settings, settings_for_job
from ingest.core.layout import Layout
from ingest.core.sharing import Topology
from ingest.driver.rootwork import Clock, note_measuring
from ingest.engine import linkcache
from ingest.engine.autotune import data_span, first_look_bytes
from ingest.transports import Transport
from ingest.transports.environment import Environment


def tune(options: ReadOptions, transport: Transport, layout: Layout, header, topology: Topology, crew,
         read_source: str, method: str, sel) -> tuple[Settings, tuple]:
    """Phase, rank 0: probe its link and tune for `sel` (the grid depends on the link too); then,
    with other ranks at hand (`crew`), measure what they share when they read at once and tune
    again for that. (settings, the shared rounds)."""
    settings = resolve_settings(options, transport, layout, sel, header=header, topology=topology)
    if settings.probe is not None:  # measuring the link, not rank 0's own work (ingest.driver.rootwork)
        # Its CPU is not known apart from the tuning around it, so stays charged to rank 0's own.
        note_measuring(settings.probe.probe_s, 0.0)
    # --no-probe means no read before the job's own: not a look across nodes either.
    look_bytes = across_nodes_bytes(settings, layout, sel, topology) if options.probe else 0
    # No ranks at hand, or a read too small to repay a probe, and no nodes to look across.
    if crew is None or (settings.probe is None and not look_bytes):
        return settings, ()
    from ingest.driver.probe_rounds import SHARED_BUDGET_FRACTION, measure_shared

    # What the ranks share was measured on this endpoint before, and measuring it again costs
    # more than its budget of this job (the rounds' start-up and barriers, which sizing their
    # bytes does not count): the job is priced with what was measured (tune_read took it from the cache).
    # (Only rounds set rounds_s, and only the cache brings one back before this job's own rounds.)
    budget_s = SHARED_BUDGET_FRACTION * settings.tuning.predicted_s
    if not look_bytes and settings.shared is not None and settings.shared.rounds_s > budget_s:
        return settings, ()
    rank_options = with_environment(options.transport, method, transport.environment)
    clock = Clock()
    measured = measure_shared(crew, topology, settings, source=read_source, method=method,
                              options=rank_options, info=transport.info, span=data_span(layout),
                              predicted_s=settings.tuning.predicted_s, look_bytes=look_bytes)
    wall_s, cpu_s = clock.elapsed()
    note_measuring(wall_s, cpu_s)
    if measured is None:
        return settings, ()
    shared, alone, rounds = measured
    shared = replace(shared, rounds_s=wall_s)
    linkcache.remember(transport.endpoint, shared=shared)
    return settings_for_job(options, settings, layout, sel, shared, topology, alone=alone), rounds


def across_nodes_bytes(settings: Settings, layout: Layout, sel, topology: Topology) -> int:
    """What one rank on each node reads in a look across nodes (ingest.driver.probe_rounds.
    measure_shared): as much as a first look at the endpoint would; 0 for a job on one node, one
    whose nodes a round has already had reading at once, or one the config planned."""
    if topology.n_nodes < 2 or settings.tuning is None or settings.shared.nodes_seen >= topology.n_nodes:
        return 0
    return first_look_bytes(settings.tuning, settings.cost, layout, sel, topology.n_ranks)


def with_environment(options: dict, method: str, environment: Environment | None) -> dict:
    """open_transport's `options` on a rank other than 0, and for a URL the connection settings
    rank 0 resolved (CA, proxy), so the rank reads no AWS file and loads no botocore.
    A rank of the S3 method loads botocore anyway and resolves its own, as a user expects of
    boto3: a site may point each node at its nearest gateway (AWS_ENDPOINT_URL per node)."""
    options = dict(options)
    if environment is not None and method != "s3":
        options["environment"] = environment
    return options
