"""The MPI driver: the only package that talks MPI. `run(comm, config)` for pipelines, and
`publish(comm, dest, regions)` to write the ranks' regions back as one object."""
from ingest.driver.commands import RankResult, run, stage
from ingest.driver.publish import publish

__all__ = ["RankResult", "run", "stage", "publish"]
