"""ingest: read exactly your subcube of a FITS or HDF5 datacube out of an object store.

`open(source)` opens a cube once and reads it many times, sliced like numpy, from threads, dask
or xarray; `read_subcube(source, region)` reads one box in one call; `python -m ingest run` (and
`ingest.driver.run(comm, config)`) gives every MPI rank its own box and reports the timings.
"""
from ingest.api import RemoteCube, open, read_subcube
from ingest.errors import ConfigError, FitsFormatError, IngestError, RegionError, TransportError
from ingest.version import __version__

__all__ = ["open", "RemoteCube", "read_subcube", "IngestError", "ConfigError", "FitsFormatError", "RegionError",
           "TransportError", "__version__"]
