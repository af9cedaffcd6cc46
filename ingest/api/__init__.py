"""The Python API: `ingest.open(source)` (a RemoteCube, cube.py) and `read_subcube` (read.py).

Strict keyword options (options.py), numpy basic indexing (indexing.py) and WCS labels for
xarray (labels.py) live beside them. The MPI driver and the command line are built on these.
"""
from ingest.api.cube import RemoteCube, open
from ingest.api.read import read_subcube

__all__ = ["open", "RemoteCube", "read_subcube"]
