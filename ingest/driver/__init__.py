"""The MPI driver: the only package that talks MPI. `run(comm, config)` for pipelines."""
from ingest.driver.commands import RankResult, run, stage

__all__ = ["RankResult", "run", "stage"]
