"""What each capped link of the emulated cluster carried during one study run, phase by phase.

The study's limit lines (summary.limit_lines) divide the bytes each link actually carried by its
rate, not the bytes the job asked for: a staged read through sshfs moves more bytes than it
asks of the file (its read-ahead), and a copy tool moves headers and retries. A LinkMeter samples
the servers' counters (with their per-node leaves) while the run goes; afterwards each phase's
bytes are taken over the stretch of the phase's length (as the job timed it) in which its own
link carried the most: the store's egress for a direct read and for the staging copy, the
filesystem's for the staged read.
"""
from __future__ import annotations

from contextlib import nullcontext

# Twenty readings a second (four netlink dumps each, ~0.1 ms of CPU): a phase's edges within 50 ms.
SAMPLE_INTERVAL_S = 0.05


def meter_for(cluster):
    """A LinkMeter over the cluster's server links for one run, or a do-nothing context off a cluster."""
    if cluster is None:
        return nullcontext()
    from ingest.testbed.cluster.meter import LinkMeter

    return LinkMeter(cluster, cluster.server_links(), interval_s=SAMPLE_INTERVAL_S)


def short_names(cluster, counts: dict) -> dict:
    """Node names as n0, n1, ... (their order on the cluster), so rows of a resumed study (a new
    cluster, a new prefix) name the same nodes alike; links that carried nothing left out."""
    index = {node: f"n{i}" for i, node in enumerate(cluster.nodes)}
    out = {}
    for link, nbytes in counts.items():
        if nbytes:
            for node, short in index.items():
                link = link.replace(node, short)
            out[link] = nbytes
    return out


def phase_bytes(meter, cluster, *, staged: bool, read_s: float, stage_s: float | None = None) -> dict:
    """{"read": {link: bytes}} (and "copy" for a staging run): every link's bytes over the stretch
    of each phase's length in which its own link carried the most (LinkMeter.busiest); a phase
    whose link carried nothing is left out."""
    phases = {"read": ("fs_read" if staged else "store", read_s)}
    if staged and stage_s is not None:
        phases["copy"] = ("store", stage_s)
    out = {}
    for name, (link, seconds) in phases.items():
        span = meter.busiest(link, seconds)
        if span is not None:
            out[name] = short_names(cluster, meter.carried_between(meter.links, *span))
    return out
