"""What was measured of an endpoint's link, kept between runs in one small JSON file.

A read too small to repay a probe is priced with what an earlier run on this machine measured of
the same endpoint (named with its age in the tuner's reason), before any configured default:
the first small read of a session guesses, the ones after it know. Per endpoint, each with its
own time: rank 0's probe (one rank's link), the shared pipes a job's ranks measured together
(ingest.driver.probe_rounds), and the makespans of the last KEEP jobs with their shapes, which
predict the next job of the same shape (ingest.core.history).

Where: $INGEST_LINK_CACHE (a file path, or "off"), else $XDG_CACHE_HOME/ingest/links.json, else
~/.cache/ingest/links.json. A record older than MAX_AGE_S is not used; a file that cannot be
read or written is ignored (a cache never stops a read).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, fields

from ingest.atomic import atomic_write
from ingest.core.history import KEEP, PastJob
from ingest.core.linkprobe import LinkProbe
from ingest.core.sharing import SharedCapacity
from ingest.units import format_age

MAX_AGE_S = 7 * 24 * 3600  # links change (a new NIC, a busier store); a week-old figure is stale
CACHE_ENV = "INGEST_LINK_CACHE"


def cache_path() -> str | None:
    """The cache file, or None when caching is off."""
    chosen = os.environ.get(CACHE_ENV, "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ingest", "links.json")


@dataclass(frozen=True)
class Recalled:
    """A record of an endpoint and how old it is."""

    endpoint: str
    age_s: float
    probe: LinkProbe | None
    shared: SharedCapacity | None

    def describe(self) -> str:
        return described(self.endpoint, self.age_s)


def described(endpoint: str, age_s: float) -> str:
    """How the tuner's reason names a cached measurement: the endpoint and the age."""
    return f"cached measurement of {endpoint} from {format_age(age_s)} ago"


def _load(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _probe_from(record: dict) -> LinkProbe | None:
    names = {f.name for f in fields(LinkProbe)}
    try:
        values = {k: v for k, v in record.items() if k in names}
        values["measured"] = tuple(values.get("measured", ()))
        return LinkProbe(**values)
    except TypeError:
        return None  # written by another version of ingest


def _entry(endpoint: str | None) -> dict:
    """What the cache holds of `endpoint` (empty when caching is off or nothing is kept)."""
    path = cache_path()
    entry = _load(path).get(endpoint) if endpoint and path is not None else None
    return entry if isinstance(entry, dict) else {}


def _fresh(at_s, now_s: float) -> bool:
    """Taken within MAX_AGE_S before `now_s` (not after it: a clock set back)."""
    return isinstance(at_s, (int, float)) and 0 <= now_s - at_s <= MAX_AGE_S


def recall(endpoint: str | None, now_s: float | None = None) -> Recalled | None:
    """What was measured of `endpoint` within MAX_AGE_S, or None."""
    now_s = time.time() if now_s is None else now_s
    fresh = {k: v for k, v in _entry(endpoint).items() if isinstance(v, dict) and _fresh(v.get("at_s"), now_s)}
    if not fresh:
        return None
    probe = _probe_from(fresh["probe"]) if "probe" in fresh else None
    age_s = now_s - max(v["at_s"] for v in fresh.values())
    shared = None
    if "shared" in fresh:
        s = fresh["shared"]
        shared = SharedCapacity.from_dict(s, described(endpoint, now_s - s["at_s"]))
    return Recalled(endpoint, age_s, probe, shared)


def recall_jobs(endpoint: str | None, now_s: float | None = None) -> list[PastJob]:
    """The jobs that ran on `endpoint` within MAX_AGE_S, oldest first."""
    records = _entry(endpoint).get("jobs")
    now_s = time.time() if now_s is None else now_s
    jobs = []
    for record in records if isinstance(records, list) else []:
        try:
            job = PastJob.from_dict(record)
        except (KeyError, TypeError, ValueError):
            continue  # written by another version of ingest
        if _fresh(job.at_s, now_s):
            jobs.append(job)
    return jobs


def remember(endpoint: str | None, *, probe: LinkProbe | None = None, shared: SharedCapacity | None = None,
             job: PastJob | None = None, now_s: float | None = None) -> None:
    """Keep what was just measured of `endpoint`: a probe, the shared pipes, a finished job."""
    path = cache_path()
    if not endpoint or path is None or (probe is None and shared is None and job is None):
        return
    now_s = time.time() if now_s is None else now_s
    data = _load(path)
    entry = data.get(endpoint) if isinstance(data.get(endpoint), dict) else {}
    if probe is not None:
        entry["probe"] = {**probe.as_dict(), "at_s": now_s}
    if shared is not None:
        entry["shared"] = {**shared.as_dict(), "at_s": now_s}
    if job is not None:
        jobs = entry.get("jobs") if isinstance(entry.get("jobs"), list) else []
        entry["jobs"] = (jobs + [job.as_dict()])[-KEEP:]
    data[endpoint] = entry
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with atomic_write(path, f"{path}.{os.getpid()}.tmp", "w") as f:  # concurrent jobs: last one wins
            f.write(json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only home: the next run probes again
