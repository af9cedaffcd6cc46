"""ingest: read exactly your subcube of a FITS datacube out of an object store.

`read_subcube(source, region)` reads one box in one process; `python -m ingest run` (and
`ingest.driver.run(comm, config)`) gives every MPI rank its own box and reports the timings.
"""
from ingest.api import read_subcube
from ingest.errors import ConfigError, FitsFormatError, IngestError, RegionError, TransportError

__all__ = ["read_subcube", "IngestError", "ConfigError", "FitsFormatError", "RegionError", "TransportError"]
__version__ = "0.1.0"
