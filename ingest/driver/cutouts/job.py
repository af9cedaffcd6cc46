"""What rank 0 decides for a cut-out job and broadcasts (`CutoutJob`), what it keeps for itself
(`Catalogue`), and the gap one request reads over: shared by one cube's job (driver.cutouts) and a
collection's (driver.cutouts.tiles), each tile of which is cut as one cube's job.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.config import RunConfig
from ingest.core.lattice import UNLIMITED_GAP
from ingest.outputs.report import cube_from_layout


@dataclass(frozen=True)
class CutoutJob:
    """What rank 0 decides once and broadcasts. Each rank's own sources are scattered beside it
    and the catalogue stays on rank 0 (`Catalogue`): a rank holds its share of the sources, not
    every row (BENCHMARKS, "Where the 10,000-source cut-outs' memory goes")."""

    read_source: str
    method: str
    layout: object
    info: object
    signer_args: tuple | None
    settings: object
    n_todo: int  # cut-outs to make now, over all ranks
    max_gap_bytes: int
    split_axis: int  # numpy axis the ranks' stripes are cut along
    plan_choice: str  # the split over ranks, and why, in words (each rank adds its bands')
    topology: object  # the ranks' nodes and machines, which the prediction prices

    @property
    def ext(self) -> str:
        return ".h5" if self.layout.kind == "hdf5" else ".fits"

    @property
    def data_bytes(self) -> int:
        return self.layout.data_bytes

    def report_cube(self) -> dict:
        return cube_from_layout(self.layout)

    def manifest_cube(self) -> dict:
        return outputs_cube(self.layout, self.info)


@dataclass(frozen=True)
class Catalogue:
    """Rank 0's own part of the job: what the manifest and the report need of the rows no rank
    cuts now. The cut-outs' own rows are the ranks' (rank 0's share among them), not kept twice."""

    n_sources: int  # rows of the catalogue
    n_clipped: int  # sources whose box the cube's edge clipped
    skipped: tuple  # manifest entries of the sources with no box, with their reasons
    kept: tuple  # manifest entries of cut-outs an earlier run left whole for the same request
    n_recut: int  # cut-outs an earlier run left whole, cut again because their request changed
    request: dict  # the job's part of every source's request, as the manifest's head records it


def gap_bytes(cfg: RunConfig, settings) -> int:
    """The largest gap between two cut-outs' runs that one request reads over: the config's, else
    what its strategy implies (small: none; large and intermediate: any), else the cost model's
    break-even gap (a request's latency x bandwidth), whatever plan the tuner chose for one box."""
    if cfg.max_gap_bytes is not None:
        return cfg.max_gap_bytes
    return {"small": 0, "large": UNLIMITED_GAP, "intermediate": UNLIMITED_GAP}.get(cfg.strategy,
                                                                                  settings.cost.gap_bytes)


def outputs_cube(layout, info) -> dict:
    """The cube's identity as the manifest records it."""
    return {"name": layout.source, "object_bytes": info.object_bytes, "etag": info.etag,
            "last_modified": info.last_modified}
