"""The MPI driver: the only package that talks MPI. `run(comm, config)` for pipelines."""
from ingest.driver.commands import RankResult, add_parser, run, stage

__all__ = ["RankResult", "add_parser", "run", "stage"]
