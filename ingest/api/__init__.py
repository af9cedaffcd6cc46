"""The Python API: `ingest.open(source)` (a RemoteCube, cube.py) and `read_subcube` (read.py).

Strict keyword options (options.py), numpy basic indexing (indexing.py) and WCS labels for
xarray (labels.py) live beside them. The MPI driver and the command line are built on these.
The names below are imported on first use (PEP 562), so a rank that imports one module of the
API (the driver's ranks use read.py) does not load the others.
"""
from __future__ import annotations

__all__ = ["open", "RemoteCube", "read_subcube"]


def __getattr__(name: str):
    """`open` and `RemoteCube` from cube.py, `read_subcube` from read.py, imported on first use."""
    if name in ("open", "RemoteCube"):
        from ingest.api import cube as module
    elif name == "read_subcube":
        from ingest.api import read as module
    else:
        raise AttributeError(f"module 'ingest.api' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
