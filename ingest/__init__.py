"""ingest: read exactly your subcube of a FITS or HDF5 datacube out of an object store.

`open(source)` opens a cube once and reads it many times, sliced like numpy, from threads, dask
or xarray; `read_subcube(source, region)` reads one box in one call; `python -m ingest run` (and
`ingest.driver.run(comm, config)`) gives every MPI rank its own box and reports the timings;
`publish(comm, dest, regions)` (and `python -m ingest publish`) writes the ranks' regions back as one object.
"""
from ingest.api import RemoteCube, open, read_subcube
from ingest.errors import ConfigError, FitsFormatError, IngestError, RegionError, TransportError
from ingest.version import __version__


def publish(comm, dest=None, regions=None, *, header=None, config=None, **options) -> dict:
    """Collective: write every rank's regions (this rank's (box, array) pairs, numpy order, halos
    included) as one object at dest (s3://bucket/key) by a multipart upload; see
    ingest.driver.publish.publish. The driver (and MPI) is imported only when this is called."""
    from ingest.driver.publish import publish as publish_regions

    return publish_regions(comm, dest, regions, header=header, config=config, **options)


__all__ = ["open", "RemoteCube", "read_subcube", "publish", "IngestError", "ConfigError", "FitsFormatError",
           "RegionError", "TransportError", "__version__"]
