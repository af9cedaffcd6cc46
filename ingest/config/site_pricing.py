"""A planned job's figures, term by term, and where each came from: measured (a probe, the link
cache), given on the command line, from the site file (config/site.py), or assumed; and the
shared capacity (core/sharing.py) the plan prices the job with.

The rule for each term: a measurement of that very term beats the command line, which beats the
site file, which beats an assumption. A measurement of one term (a probe of one rank's link)
does not displace the site's figure for another (the store's egress): a probe of one rank cannot
see what a thousand ranks share. Where neither a measurement nor a site file knows the store's
egress, the job is still priced (as if each rank had the store to itself) and flagged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ingest.config.site import Figure, Site, rate_text
from ingest.core.cost import CostModel
from ingest.core.sharing import EGRESS, LATENCY, NODE_PIPE, RANK_LINK, REQUESTS, SharedCapacity, Topology

MEASURED, GIVEN, SITE, ASSUMED, UNKNOWN = "measured", "command line", "site file", "assumed", "unknown"
RANKS_PER_NODE, CORES_PER_NODE, STREAM = "ranks per node", "cores per node", "one connection"


@dataclass(frozen=True)
class Fact:
    """One figure a plan used: the term it prices, its value (None: unknown) in `unit`, where it
    came from (`origin`, one of MEASURED, GIVEN, SITE, ASSUMED, UNKNOWN) and the detail, and the
    figure it won over, if any."""

    term: str
    value: float | None
    unit: str  # "bytes/s", "s", "requests/s", "ranks", "cores"
    origin: str
    source: str
    not_used: str = ""  # e.g. "the site file's 12 MB/s (a measurement of this term beats it)"

    def value_text(self) -> str:
        if self.value is None:
            return UNKNOWN
        if self.unit == "bytes/s":
            return rate_text(self.value)
        if self.unit == "s":
            return f"{self.value * 1e3:.3g} ms"
        if self.unit in ("ranks", "cores"):  # the term names what is counted
            return f"{self.value:g}"
        return f"{self.value:g} {self.unit}"

    def as_dict(self) -> dict:
        return {"term": self.term, "value": self.value, "unit": self.unit, "origin": self.origin,
                "source": self.source, "not_used": self.not_used or None}


@dataclass(frozen=True)
class Pricing:
    """What the plan prices a job with: the shared capacity, each figure's fact, and whether the
    store's egress is unknown (no site figure, nothing measured across the job's nodes)."""

    shared: SharedCapacity
    facts: tuple[Fact, ...]
    egress_unknown: bool


def _site_text(site: Site, figure: Figure, unit: str) -> str:
    shown = Fact("", figure.value, unit, SITE, "").value_text()
    return f"the site file's {shown} ({figure.source})"


def job_topology(n_ranks: int, nodes: int | None, cores: int | None, site: Site | None
                 ) -> tuple[Topology, tuple[Fact, ...]]:
    """The job's ranks on their nodes (srun's block distribution): --nodes if given, else as many
    nodes as the site's ranks_per_node needs, else one; each node's cores likewise (--cores-per-node,
    else the site's, else unknown: no cores term)."""
    rpn = site.ranks_per_node if site is not None else None
    if nodes is not None:
        origin, source = GIVEN, f"--nodes {nodes}"
    elif rpn is not None and rpn.known:
        nodes, origin, source = math.ceil(n_ranks / rpn.value), SITE, rpn.source
    else:
        nodes, origin, source = 1, ASSUMED, "every rank on one node (give --nodes, or a site file's ranks_per_node)"
    site_cores = site.cores_per_node if site is not None else None
    if cores is not None:
        core_fact = Fact(CORES_PER_NODE, cores, "cores", GIVEN, f"--cores-per-node {cores}",
                         _site_text(site, site_cores, "cores") if site_cores and site_cores.known else "")
    elif site_cores is not None and site_cores.known:
        cores = int(site_cores.value)
        core_fact = Fact(CORES_PER_NODE, cores, "cores", SITE, site_cores.source)
    else:
        core_fact = Fact(CORES_PER_NODE, None, "cores", UNKNOWN, "not given: the ranks' CPU seconds are not "
                                                                 "counted against a node's cores")
    topology = Topology.block(n_ranks, nodes, cores)
    not_used = ""
    if origin == GIVEN and rpn is not None and rpn.known and rpn.value != topology.most_per_node:
        not_used = _site_text(site, rpn, "ranks")
    rpn_fact = Fact(RANKS_PER_NODE, topology.most_per_node, "ranks", origin, source, not_used)
    return topology, (rpn_fact, core_fact)


def starting_cost(cost: CostModel, site: Site | None, given=frozenset()) -> CostModel:
    """One rank's link before anything is measured: `cost` (the configuration's), with the site's
    latency and link where the command line (`given`, the cost model options typed) did not set
    them. A rank alone has its node's NIC; one connection gets the site's stream rate, if given
    (without a NIC figure, that rate is the rank's link: its streams are not known to add up)."""
    if site is None:
        return cost
    changes = {}
    if "latency_s" not in given and site.latency_s.known:
        changes["latency_s"] = site.latency_s.value
    stream = site.stream_bytes_per_s
    if stream is not None and stream.known:
        changes["stream_bandwidth_bytes_per_s"] = stream.value
    if "bandwidth_bytes_per_s" not in given:
        link = site.nic_bytes_per_s if site.nic_bytes_per_s.known else stream
        if link is not None and link.known:
            changes["bandwidth_bytes_per_s"] = link.value
    return replace(cost, **changes) if changes else cost


def _link_facts(alone: CostModel, site: Site | None, link_measured: str | None, given, header_latency: bool):
    """Latency, the rank's link and one connection's rate: measured, given, the site's, assumed."""
    latency = site.latency_s if site is not None else None
    nic = site.nic_bytes_per_s if site is not None else None
    stream = site.stream_bytes_per_s if site is not None else None
    facts = []
    if link_measured:
        lost = [_site_text(site, f, u) for f, u in ((latency, "s"), (stream, "bytes/s")) if f is not None and f.known]
        facts.append(Fact(LATENCY, alone.latency_s, "s", MEASURED, link_measured, "; ".join(lost)))
        facts.append(Fact(RANK_LINK, alone.bandwidth_bytes_per_s, "bytes/s", MEASURED, link_measured))
        facts.append(Fact(STREAM, alone.stream_bytes_per_s, "bytes/s", MEASURED, link_measured))
        return facts
    if "latency_s" in given:
        lost = _site_text(site, latency, "s") if latency is not None and latency.known else ""
        facts.append(Fact(LATENCY, alone.latency_s, "s", GIVEN, "--latency-s", lost))
    elif latency is not None and latency.known:
        facts.append(Fact(LATENCY, alone.latency_s, "s", SITE, latency.source,
                          "the header request's time (one request from where plan ran)" if header_latency else ""))
    elif header_latency:
        facts.append(Fact(LATENCY, alone.latency_s, "s", MEASURED, "the header request (one request, from where "
                                                                   "plan ran: not a probe of the compute nodes)"))
    else:
        facts.append(Fact(LATENCY, alone.latency_s, "s", ASSUMED, "the configuration's latency_s"))
    if "bandwidth_bytes_per_s" in given:
        facts.append(Fact(RANK_LINK, alone.bandwidth_bytes_per_s, "bytes/s", GIVEN, "--bandwidth-bytes-per-s"))
    elif nic is not None and nic.known:
        facts.append(Fact(RANK_LINK, alone.bandwidth_bytes_per_s, "bytes/s", SITE,
                          f"a rank alone has its node's NIC: {nic.source}"))
    elif stream is not None and stream.known:
        facts.append(Fact(RANK_LINK, alone.bandwidth_bytes_per_s, "bytes/s", SITE,
                          f"one connection's rate (its streams not known to add up): {stream.source}"))
    else:
        facts.append(Fact(RANK_LINK, alone.bandwidth_bytes_per_s, "bytes/s", ASSUMED,
                          "the configuration's bandwidth_bytes_per_s"))
    if stream is not None and stream.known:
        facts.append(Fact(STREAM, alone.stream_bytes_per_s, "bytes/s", SITE, stream.source))
    return facts


def price_job(alone: CostModel, shared: SharedCapacity, topology: Topology, site: Site | None, *,
              link_measured: str | None = None, given=frozenset(), header_latency: bool = False) -> Pricing:
    """The job's shared capacity with the site's figures wherever nothing measured that term, and
    a fact for each term. `alone` is one rank's link as the plan has it (starting_cost, or what
    `link_measured` names: a probe or the link cache); `shared` what was measured or assumed of
    the pipes the ranks share (Settings.shared); `given` the cost model options typed."""
    measured = shared.source.startswith(("measured", "cached"))
    facts = _link_facts(alone, site, link_measured, given, header_latency)
    changes: dict = {}
    used: list[str] = []

    def pipe(term: str, field: str, figure: Figure | None, unit: str, absent: str) -> Fact:
        value = getattr(shared, field)
        site_known = figure is not None and figure.known
        if measured and value is not None:
            lost = _site_text(site, figure, unit) if site_known else ""
            return Fact(term, value, unit, MEASURED, shared.source, lost)
        if site_known:
            changes[field] = figure.value
            used.append(term)
            return Fact(term, figure.value, unit, SITE, figure.source,
                        f"{shared.source} ({Fact('', value, unit, ASSUMED, '').value_text()})"
                        if value is not None else "")
        if value is not None:
            return Fact(term, value, unit, ASSUMED, shared.source)
        why = figure.source if figure is not None else absent
        return Fact(term, None, unit, UNKNOWN, why)

    nic = site.nic_bytes_per_s if site is not None else None
    node = pipe(NODE_PIPE, "node_bytes_per_s", nic, "bytes/s",
                "no site file, not measured: the ranks on a node are not priced as sharing its NIC")
    if node.origin == SITE:  # the node's pipe is the NIC, not rank 0's link as assumed with its requests
        changes.update(node_cpu_bound=False, node_request_s=0.0)
    egress = site.egress_bytes_per_s if site is not None else None
    egress_fact = pipe(EGRESS, "egress_bytes_per_s", egress, "bytes/s",
                       "no site file, not measured across the job's nodes: the ranks are priced as if each had the "
                       "store to itself")
    seen_all = measured and shared.nodes_seen >= topology.n_nodes
    if egress_fact.origin == UNKNOWN and seen_all:  # the rounds had every node reading and none was bound
        egress_fact = replace(egress_fact, origin=MEASURED, source=f"{shared.source}: no egress bound with "
                                                                    f"{shared.nodes_seen} node(s) reading at once")
    ceiling = site.requests_per_s if site is not None else None
    requests = pipe(REQUESTS, "requests_per_s", ceiling, "requests/s",
                    "no site file, not measured: no request ceiling binds")
    if used:
        kept = f"{shared.source}; " if measured else ""
        changes["source"] = f"{kept}site file {site.path} ({', '.join(used)})"
    priced = replace(shared, **changes) if changes else shared
    facts = [egress_fact, node, requests, *facts]
    return Pricing(priced, tuple(facts), egress_fact.origin == UNKNOWN)


def egress_warning(n_ranks: int, job_bytes: int, makespan_s: float) -> str:
    """The one line `plan` prints when the store's egress is unknown: what the job would draw."""
    rate = rate_text(job_bytes / makespan_s) if makespan_s > 0 else "?"
    return (f"warning: the store's egress is unknown (no site file, nothing measured across the nodes): "
            f"{n_ranks} rank(s) priced as if each had the store to itself, drawing {rate} out of one store; "
            f"give --site FILE (configs/sites/)")
