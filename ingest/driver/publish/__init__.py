"""The driver's `publish` room: every rank's regions written back as one object by a multipart
upload (`python -m ingest publish`, `ingest.publish(comm, dest, regions)`).

- `job`: the command itself: regions, credentials, rank 0's plan as a root step, the upload
  clients, the rounds, completion or abort, the report.
- `plan`: what rank 0 decides once, before any byte moves, and broadcasts (`Plan`).
- `rounds`: the two-phase aggregation rounds every rank runs (`Rounds`, `Holding`).

What it may import (.importlinter, contract `driver-rooms`): the driver's shared modules
(`commands.config_for`, `mpi`, `quiet`, `rootwork`) and the layers below the driver; no other
driver module imports it, and it imports no other room. Callers import from here; the names
below are the ones they use.
"""
from ingest.driver.publish.job import (CROWDED_RANKS_PER_CORE, MEMORY_SOURCE, STEPS, PublishError, crowded, publish,
                                       since, timeline)

__all__ = ["publish", "PublishError", "MEMORY_SOURCE", "STEPS", "CROWDED_RANKS_PER_CORE", "crowded", "since",
           "timeline"]
