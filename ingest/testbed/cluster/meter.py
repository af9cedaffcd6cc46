"""What the cluster's links carried, and when: their traffic counters sampled while a job runs.

A cap's rate is bytes over time at the cap, so that is where a rate is measured: tc's counter of
the capped class (every frame the cap metered, headers included) read every `interval_s` on a
thread. A rank's own clock is no such measure: a rank scheduled late on a loaded machine starts
its clock late, and its bytes then seem to have crossed in less time than the link took.

Each sample brackets its reading between two clock readings (a loaded machine may deschedule
the meter's thread in between), and every rate below takes the longest interval the readings
allow: it never exceeds what the link carried, so a cap that holds is never seen to leak.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass


# A link that carried no more than this in an interval was idle then: a connection's closing
# frames, a keep-alive's, an ACK (a server's pipe carries ACKs of uploads), not a transfer.
IDLE_BYTES = 4096


@dataclass(frozen=True)
class Sample:
    """The counters (link name -> bytes so far) read between before_s and after_s (monotonic)."""

    before_s: float
    after_s: float
    counts: dict


class LinkMeter:
    """`with LinkMeter(cluster, ["store", node]) as meter: cluster.launch(...)`, then
    meter.carried(link), meter.busy_rate(link), meter.peak_rate(link, window_s) and
    meter.shares(links): what each link carried and at what rate. Links are Cluster.link_bytes's
    names ("store", "store_in", "fs_read", "fs_write", a node's name)."""

    def __init__(self, cluster, links, interval_s: float = 0.05, idle_bytes: int = IDLE_BYTES):
        self.cluster, self.links, self.interval_s, self.idle_bytes = cluster, list(links), interval_s, idle_bytes
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        before_s = time.monotonic()
        counts = self.cluster.link_bytes(self.links)
        self.samples.append(Sample(before_s, time.monotonic(), counts))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> "LinkMeter":
        self._sample()
        self._thread = threading.Thread(target=self._run, name="link-meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    # -- what the samples say --------------------------------------------------------------------
    def carried(self, link: str) -> int:
        """Bytes the link carried from the first sample to the last."""
        return self.samples[-1].counts[link] - self.samples[0].counts[link]

    def busy(self, link: str) -> tuple[int, int] | None:
        """(i, j): the samples just before the link's counter first grew and just after it last
        did, so that the link was idle outside them; None when it carried nothing."""
        counts = [s.counts[link] for s in self.samples]
        grew = [k for k in range(1, len(counts)) if counts[k] - counts[k - 1] > self.idle_bytes]
        return (grew[0] - 1, grew[-1]) if grew else None

    def busiest(self, link: str, seconds: float) -> tuple[int, int] | None:
        """(i, j): the samples around the `seconds` in which the link carried the most bytes, at
        most two intervals longer (a phase starts and ends between samples). A phase timed by the
        job's own clock, its bytes taken from the link's: whatever else the link carried before
        or after (a probe, a header, a connection's closing frames) moved less in that time. None
        when the link carried nothing."""
        if self.busy(link) is None:
            return None
        mid = [(x.before_s + x.after_s) / 2 for x in self.samples]
        counts = [x.counts[link] for x in self.samples]
        best, i = None, 0
        for j in range(1, len(self.samples)):
            while mid[j] - mid[i] > seconds + 2 * self.interval_s:
                i += 1
            i_ = min(i, j - 1)
            if best is None or counts[j] - counts[i_] > counts[best[1]] - counts[best[0]]:
                best = (i_, j)
        return best

    def carried_between(self, links, i: int, j: int) -> dict:
        """{link: bytes it carried between samples i and j}."""
        return {link: self.samples[j].counts[link] - self.samples[i].counts[link] for link in links}

    def rate_between(self, link: str, i: int, j: int) -> float:
        """Bytes/s the link carried between samples i < j, over the longest time the readings allow."""
        a, b = self.samples[i], self.samples[j]
        return (b.counts[link] - a.counts[link]) / (b.after_s - a.before_s)

    def busy_rate(self, link: str) -> float:
        """The link's rate over the time it was carrying bytes (0.0 when it carried none)."""
        span = self.busy(link)
        return self.rate_between(link, *span) if span else 0.0

    def busy_s(self, link: str) -> float:
        """How long the link was carrying bytes, at most (0.0 when it carried none)."""
        span = self.busy(link)
        return self.samples[span[1]].after_s - self.samples[span[0]].before_s if span else 0.0

    def peak_rate(self, link: str, window_s: float) -> float:
        """The highest rate the link carried over any window of at least window_s: a cap holds
        over every window longer than its burst."""
        best = 0.0
        for i, a in enumerate(self.samples):
            for j in range(i + 1, len(self.samples)):
                if self.samples[j].before_s - a.after_s >= window_s:
                    best = max(best, self.rate_between(link, i, j))
        return best

    def shares(self, links) -> tuple[dict, float]:
        """({link: bytes carried}, seconds) over the sampling intervals in which every one of
        `links` carried bytes: what a fair queue divides equally among them. ({}, 0.0) when they
        never all did at once."""
        carried = {link: 0 for link in links}
        seconds = 0.0
        for a, b in zip(self.samples, self.samples[1:]):
            grown = {link: b.counts[link] - a.counts[link] for link in links}
            if all(n > self.idle_bytes for n in grown.values()):
                carried = {link: carried[link] + grown[link] for link in links}
                seconds += b.after_s - a.before_s
        return (carried, seconds) if seconds else ({}, 0.0)
