"""Under mpiexec: `ingest.publish(comm, dest, regions, header=...)` from arrays in memory, then rank 0
reads the object back (astropy, h5py) and prints one JSON line per scenario (test-only script).

usage: python tests/publish_child.py BUCKET [SCENARIO ...]
Scenarios: fits_halo (native byte order, poisoned halos, S3 API), presigned (ranks other than 0 have
no credentials, so auto hands them presigned part URLs), fits_4d (int16, big-endian as stored), hdf5
(the header from an HDF5 cube: dataset path and attributes).
"""
import io
import json
import os
import sys
import tempfile
import warnings

import h5py
import numpy as np
from astropy.io import fits
from mpi4py import MPI

import ingest
from ingest.core.decompose import grid_boxes
from ingest.core.ownership import owned_boxes

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
bucket = sys.argv[1]
scenarios = sys.argv[2:] or ["fits_halo", "presigned", "fits_4d", "hdf5"]


def cube_of(shape, dtype):
    """Every voxel computable: a different value per position (exact in float32 and int16)."""
    return ((np.arange(np.prod(shape)) * 7919) % 30011 - 15000).astype(dtype).reshape(shape)


def my_regions(cube, grid_fits, halo, dtype):
    """This rank's regions (i % size == rank), in `dtype`, their halos poisoned: a halo voxel in
    the object would show as -1."""
    boxes = grid_boxes(cube.shape, grid_fits, halo)
    owned = owned_boxes(boxes, cube.shape)
    out = []
    for i, box in enumerate(boxes):
        if i % size != rank:
            continue
        values = cube[tuple(slice(a, b) for a, b in box)].astype(dtype)
        mask = np.ones(values.shape, bool)
        for b in owned[i]:
            mask[tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(b, box))] = False
        values[mask] = -1
        out.append((box, values))
    return out


def fits_header(shape, bitpix):
    header = fits.Header()
    header["SIMPLE"], header["BITPIX"], header["NAXIS"] = True, bitpix, len(shape)
    for n, v in enumerate(reversed(shape), 1):
        header[f"NAXIS{n}"] = v
    header["CTYPE1"], header["CRPIX1"], header["CDELT1"], header["CRVAL1"] = "RA---SIN", 10.0, -0.001, 150.0
    header["OBJECT"] = "publish test"
    return header


def read_back(key):
    from ingest.transports.s3client import s3_client

    return s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()


def fits_equal(key, cube):
    with warnings.catch_warnings(), fits.open(io.BytesIO(read_back(key))) as f:
        warnings.simplefilter("ignore")
        data, header = f[0].data, f[0].header
        return {"equal": bool(data.dtype == cube.dtype.newbyteorder(">") and np.array_equal(data, cube)),
                "object": header.get("OBJECT"), "crpix1": header.get("CRPIX1"), "bitpix": header["BITPIX"]}


def run(name):
    key = f"api/{name}.{'h5' if name == 'hdf5' else 'fits'}"
    options = dict(part_bytes="5MiB", progress=False)
    if name in ("fits_halo", "presigned"):
        cube = cube_of((64, 200, 210), "<f4")
        regions = my_regions(cube, (2, 2, 1), 3, "<f4")  # native order: converted to FITS's big-endian
        header = fits_header(cube.shape, -32)
        if name == "presigned" and rank != 0:
            for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                os.environ.pop(var, None)
    elif name == "fits_4d":
        cube = cube_of((4, 40, 170, 160), ">i2")
        regions = my_regions(cube, (2, 2, 1, 2), 1, ">i2")
        header = fits_header(cube.shape, 16)
    else:
        cube = cube_of((48, 200, 160), "<f4")
        regions = my_regions(cube, (1, 3, 2), 2, "<f4")
        header = os.path.join(tempfile.gettempdir(), f"publish-header-{os.getppid()}.h5")
        if rank == 0:
            with h5py.File(header, "w") as f:
                d = f.create_dataset("/0/DATA", shape=cube.shape, dtype="<f4")
                d.attrs["CRPIX1"], d.attrs["BUNIT"] = 10.0, "Jy/beam"
        comm.Barrier()
    result = ingest.publish(comm, f"s3://{bucket}/{key}", regions, header=header, **options)
    if rank != 0:
        return
    line = {"scenario": name, "method": result["report"]["method"], "parts": result["parts"],
            "memory_bound_bytes": result["memory_bound_bytes"], "part_bytes": result["part_bytes"]}
    if name == "hdf5":
        with h5py.File(io.BytesIO(read_back(key)), "r") as f:
            d = f["/0/DATA"]
            line.update(equal=bool(np.array_equal(d[...], cube)), dtype=d.dtype.str, layout=d.id.get_create_plist()
                        .get_layout(), bunit=str(d.attrs["BUNIT"]), crpix1=float(d.attrs["CRPIX1"]))
        os.unlink(header)
    else:
        line.update(fits_equal(key, cube))
    print("RESULT " + json.dumps(line), flush=True)


keys = {var: os.environ.get(var) for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
for scenario in scenarios:
    run(scenario)
    os.environ.update({k: v for k, v in keys.items() if v is not None})  # presigned took them from ranks > 0
