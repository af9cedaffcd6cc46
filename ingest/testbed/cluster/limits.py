"""The physical limit of a read on the emulated cluster: the fastest any reader could move the
bytes through the pipes the topology gives (cluster.py's picture), one pure function.

A read's bytes cross two pipes in series: the server's (the store's egress, or the shared
filesystem's NIC), shared by everyone, and each node's NIC, shared by that node's ranks. The
slower of the two is the bottleneck; the limit is its time plus one request's latency (the
first byte cannot come sooner). A staging run is a copy through one node (store -> node 0 ->
filesystem, each pipe once) followed by a read from the filesystem.

The study's figures (ingest.study.summary) and the benchmark (bench/cluster/makespan.py) both call
these, so a figure's limit line and a benchmark's "x the limit" are the same number.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# The bottleneck names every caller prints (bench/cluster/makespan.py adds "client CPU" from measurement).
NODE_NIC, STORE_EGRESS, FILESYSTEM, LATENCY = "node NIC", "store egress", "filesystem", "latency"

# The cluster's veths keep Linux's default MTU, and HTB meters each frame with its Ethernet
# header. A full TCP segment is MTU bytes of IP packet, of which the IP and TCP headers and the
# timestamp option (on by default) take 52: 1448 bytes of payload in every 1514 metered, so a
# node's cap counts a body at 1514 / 1448 of its size. Each response's HTTP headers (about 700 B)
# come on top, and are the plan's to spend: more requests, more headers.
MTU_BYTES = 1500
ETHERNET_HEADER_BYTES = 14
TCP_IP_HEADER_BYTES = 20 + 20 + 12  # IPv4, TCP, the timestamp option
PAYLOAD_PER_FRAME_BYTE = (MTU_BYTES - TCP_IP_HEADER_BYTES) / (MTU_BYTES + ETHERNET_HEADER_BYTES)


@dataclass(frozen=True)
class Limit:
    """A lower bound on a read's time and what sets it."""

    seconds: float  # max(pipe terms) + latency_s
    binding: str  # NODE_NIC, STORE_EGRESS, FILESYSTEM or LATENCY (latency exceeds every pipe's time)
    terms_s: dict  # pipe name -> its seconds alone, and "latency" -> latency_s


def busiest_node_ranks(ranks: int, nodes: int, ranks_per_node: int) -> int:
    """Ranks on the fullest node when mpiexec fills node 0's slots first, then node 1's, ...
    (the hostfile's `slots=ranks_per_node`); ranks beyond every slot oversubscribe evenly."""
    if ranks <= nodes * ranks_per_node:
        return min(ranks, ranks_per_node)
    return math.ceil(ranks / nodes)


def physical_limit(wire_bytes: float, *, server_rate_bytes_per_s: float, nic_rate_bytes_per_s: float,
                   ranks: int, nodes: int, ranks_per_node: int, latency_s: float = 0.0,
                   server: str = STORE_EGRESS) -> Limit:
    """Seconds to move wire_bytes (the payload: response bodies), split evenly over `ranks` placed
    node by node, through one shared server pipe (server_rate, named `server`) and each node's NIC
    (nic_rate). Rates in bytes/s of the frames the caps meter, of which a reader's payload gets
    PAYLOAD_PER_FRAME_BYTE; latency_s once (a request's round trip)."""
    if ranks < 1 or nodes < 1 or ranks_per_node < 1:
        raise ValueError(f"ranks {ranks}, nodes {nodes}, ranks_per_node {ranks_per_node}: each must be >= 1")
    share = busiest_node_ranks(ranks, nodes, ranks_per_node) / ranks
    terms = {server: wire_bytes / payload_rate(server_rate_bytes_per_s),
             NODE_NIC: wire_bytes * share / payload_rate(nic_rate_bytes_per_s)}
    return _limit(terms, latency_s)


def payload_rate(metered_bytes_per_s: float) -> float:
    """The most payload bytes/s a TCP reader gets through a cap of this rate of frames."""
    return metered_bytes_per_s * PAYLOAD_PER_FRAME_BYTE


def staging_limit(object_bytes: float, read_bytes: float, *, store_rate_bytes_per_s: float,
                  nic_rate_bytes_per_s: float, fs_rate_bytes_per_s: float, ranks: int, nodes: int,
                  ranks_per_node: int, store_latency_s: float = 0.0, fs_latency_s: float = 0.0) -> Limit:
    """Copy the whole object through node 0 (one tool on rank 0: s5cmd, rclone) into the shared
    filesystem, then read read_bytes from there: the two limits added. The binding term is the
    bigger half's."""
    pipes = {STORE_EGRESS: store_rate_bytes_per_s, NODE_NIC: nic_rate_bytes_per_s, FILESYSTEM: fs_rate_bytes_per_s}
    slowest = min(pipes, key=pipes.get)
    copy = _limit({slowest: object_bytes / payload_rate(pipes[slowest])}, store_latency_s)
    read = physical_limit(read_bytes, server_rate_bytes_per_s=fs_rate_bytes_per_s,
                          nic_rate_bytes_per_s=nic_rate_bytes_per_s, ranks=ranks, nodes=nodes,
                          ranks_per_node=ranks_per_node, latency_s=fs_latency_s, server=FILESYSTEM)
    binding = copy.binding if copy.seconds >= read.seconds else read.binding
    return Limit(copy.seconds + read.seconds, binding, {"copy": copy.seconds, "read": read.seconds})


def spec_limit(spec, wire_bytes: float, ranks: int, *, source: str = "store", object_bytes: float | None = None,
               nodes: int | None = None, ranks_per_node: int | None = None) -> Limit:
    """physical_limit (source "store" or "fs") or staging_limit (source "staging", which needs
    object_bytes) with the caps of a ClusterSpec; nodes and ranks_per_node default to the spec's."""
    nodes = nodes or spec.nodes
    rpn = ranks_per_node or spec.ranks_per_node
    nic = spec.node.nic_rate_bytes_per_s
    if source == "store":
        return physical_limit(wire_bytes, server_rate_bytes_per_s=spec.store.egress_rate_bytes_per_s,
                              nic_rate_bytes_per_s=nic, ranks=ranks, nodes=nodes, ranks_per_node=rpn,
                              latency_s=spec.store.latency_s, server=STORE_EGRESS)
    if source == "fs":
        return physical_limit(wire_bytes, server_rate_bytes_per_s=spec.fs.rate_bytes_per_s, nic_rate_bytes_per_s=nic,
                              ranks=ranks, nodes=nodes, ranks_per_node=rpn, latency_s=spec.fs.latency_s,
                              server=FILESYSTEM)
    if source == "staging":
        if object_bytes is None:
            raise ValueError("spec_limit(source='staging'): object_bytes is required (the copy moves it all)")
        return staging_limit(object_bytes, wire_bytes, store_rate_bytes_per_s=spec.store.egress_rate_bytes_per_s,
                             nic_rate_bytes_per_s=nic, fs_rate_bytes_per_s=spec.fs.rate_bytes_per_s, ranks=ranks,
                             nodes=nodes, ranks_per_node=rpn, store_latency_s=spec.store.latency_s,
                             fs_latency_s=spec.fs.latency_s)
    raise ValueError(f"spec_limit: source {source!r} is not store, fs or staging")


def _limit(pipe_s: dict, latency_s: float) -> Limit:
    binding = max(pipe_s, key=pipe_s.get)
    slowest_s = pipe_s[binding]
    if latency_s > slowest_s:
        binding = LATENCY
    return Limit(slowest_s + latency_s, binding, {**pipe_s, LATENCY: latency_s})


def carried_limit(carried: dict, spec, phase: str) -> Limit:
    """The least time the pipes needed to carry what their counters counted during one phase of
    a run (ingest.study.links: {link: bytes}, node n<i>'s leaves as "store>n<i>", "fs>n<i>",
    "n<i>>fs"): each pipe's bytes, frames as its cap meters them, over its rate; the largest binds,
    plus one latency. Read-ahead and retries count, as the pipes carried them.

    phase "direct": the store's egress and each node's NIC (what the store sent it); "staged":
    the filesystem's pipe and each node's NIC (what the filesystem sent it); "copy": the store's
    egress, the filesystem's ingress and node 0's NIC in both directions (each direction its own
    cap). With queue "fifo" the servers have no leaf per node: no NIC term is counted."""
    def most(prefix: str = "", suffix: str = "") -> float:
        return max((n for link, n in carried.items() if link.startswith(prefix) and link.endswith(suffix)
                    and link != prefix + suffix), default=0)

    nic = spec.node.nic_rate_bytes_per_s
    if phase == "direct":
        terms = {STORE_EGRESS: carried.get("store", 0) / spec.store.egress_rate_bytes_per_s,
                 NODE_NIC: most("store>") / nic}
        latency_s = spec.store.latency_s
    elif phase == "staged":
        terms = {FILESYSTEM: carried.get("fs_read", 0) / spec.fs.rate_bytes_per_s, NODE_NIC: most("fs>") / nic}
        latency_s = spec.fs.latency_s
    elif phase == "copy":
        terms = {STORE_EGRESS: carried.get("store", 0) / spec.store.egress_rate_bytes_per_s,
                 FILESYSTEM: carried.get("fs_write", 0) / spec.fs.rate_bytes_per_s,
                 NODE_NIC: max(most("store>"), most(suffix=">fs")) / nic}
        latency_s = spec.store.latency_s
    else:
        raise ValueError(f"carried_limit: phase {phase!r} is not direct, staged or copy")
    return _limit(terms, latency_s)


def spec_from_record(record: dict):
    """A ClusterSpec back from dataclasses.asdict(spec) (the study's meta "cluster")."""
    from ingest.testbed.cluster.spec import ClusterSpec, CubeSpec, FsSpec, NodeSpec, StoreSpec

    cube = record.get("cube")
    return ClusterSpec(record["nodes"], record["ranks_per_node"], StoreSpec(**record["store"]),
                       NodeSpec(**record["node"]), FsSpec(**record["fs"]),
                       CubeSpec(**{**cube, "shape": tuple(cube["shape"])}) if cube else None)
