"""What both publish benches share (bench/publish/local.py on one machine, bench/publish/cluster.py on
the emulated cluster): the ranks, their grid, the baselines, the cut-outs the ranks publish, and the
machine's load recorded beside each run."""
from __future__ import annotations

import os

from bench import common

N_RANKS = 4
GRID = (2, 2, 1)  # FITS order: four regions, one per rank
BASELINES = ("s5cmd", "boto3")


def loadavg() -> list[float]:
    """/proc/loadavg's 1, 5 and 15 minute figures: the machine is shared, the record says how busy."""
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def make_cutouts(cube: common.Cube, out_dir: str) -> list[tuple]:
    """The four ranks' products: the grid's cut-outs as `run --output-dir` names them; [(box, path)]."""
    import numpy as np

    from ingest.core.decompose import grid_boxes
    from ingest.formats.reader import read_any_layout
    from ingest.outputs.subcubes import output_name, write_subcube
    from ingest.transports import open_transport

    with open_transport(cube.path, "posix") as transport:
        layout = read_any_layout(transport)
    data = np.memmap(cube.path, dtype=layout.raw_dtype, mode="r", offset=layout.data_offset, shape=layout.shape)
    out = []
    for rank, box in enumerate(grid_boxes(cube.shape, GRID, 0)):
        path = os.path.join(out_dir, output_name(rank, box))
        if not os.path.exists(path):
            write_subcube(out_dir, rank, box, data[tuple(slice(a, b) for a, b in box)], layout)
        out.append((box, path))
    return out
