"""ingest: read exactly your subcube of a FITS or HDF5 datacube out of an object store.

`open(source)` opens a cube once and reads it many times, sliced like numpy, from threads, dask
or xarray; `read_subcube(source, region)` reads one box in one call; `python -m ingest run` (and
`ingest.driver.run(comm, config)`) gives every MPI rank its own box and reports the timings;
`publish(comm, dest, regions)` (and `python -m ingest publish`) writes the ranks' regions back as one object;
`cutouts(source, catalogue, output_dir)` (and `python -m ingest cutouts`) cuts every source of a catalogue.

`import ingest` loads only the errors and the version: `open`, `RemoteCube` and `read_subcube` are
imported on first use (PEP 562's module __getattr__), so an MPI rank that runs the driver imports
what its job uses and nothing for the API it does not call.
"""
from ingest.errors import ConfigError, FitsFormatError, IngestError, RegionError, TransportError
from ingest.version import __version__


def __getattr__(name: str):
    """The API's names, imported on first use (the module docstring says why)."""
    if name in ("open", "RemoteCube", "read_subcube"):
        from ingest import api

        value = getattr(api, name)
        globals()[name] = value  # once: later lookups do not come here
        return value
    raise AttributeError(f"module 'ingest' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def publish(comm, dest=None, regions=None, *, header=None, config=None, **options) -> dict:
    """Collective: write every rank's regions (this rank's (box, array) pairs, numpy order, halos
    included) as one object at dest (s3://bucket/key) by a multipart upload; see
    ingest.driver.publish.publish. The driver (and MPI) is imported only when this is called."""
    from ingest.driver.publish import publish as publish_regions

    return publish_regions(comm, dest, regions, header=header, config=config, **options)


def cutouts(source, catalogue, output_dir=None, *, comm=None, config=None, **settings) -> dict | None:
    """Cut every source of `catalogue` out of `source`, one FITS file each in `output_dir`, as
    `python -m ingest cutouts` does (settings: its options, e.g. size="5arcmin 300km/s",
    columns=..., threads=...). Collective over `comm` (default: this process alone); rank 0
    returns the report, the others None. MPI is imported only when this is called."""
    from ingest.driver.cutouts.command import cutouts_api

    return cutouts_api(source, catalogue, output_dir, comm=comm, config=config, **settings)


__all__ = ["open", "RemoteCube", "read_subcube", "publish", "cutouts", "IngestError", "ConfigError", "FitsFormatError",
           "RegionError", "TransportError", "__version__"]
