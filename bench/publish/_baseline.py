"""The staging-in-reverse baseline of bench/publish/cluster.py, as processes on the cluster's nodes.

    mpiexec ... python bench/publish/_baseline.py assemble PLAN.json OUT.fits TIMING.json
    ip netns exec NODE python bench/publish/_baseline.py boto3 FILE BUCKET KEY TIMING.json

assemble: every rank writes its cut-out (local disk: a node's scratch) into one FITS file on
the shared filesystem with MPI-IO: rank 0 writes the header, the file is sized (the padding
after the data is zeros), then one collective Write_all through a subarray view, Sync, Close.
Not numpy memmaps: each node's sshfs has its own page cache, and a page that holds two ranks'
rows would be written back whole by both, one of them stale. TIMING gets the job's seconds from
a barrier before the open to a barrier after the close (start-up excluded, as publish's report).
boto3: client.upload_file with boto3's defaults; TIMING gets the upload's seconds (imports and
the client excluded, as bench/publish/local.py times it in-process).
"""
from __future__ import annotations

import json
import os
import sys
import time


def _write_json(path: str, record: dict) -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(record, fh)
    os.replace(path + ".tmp", path)


def assemble(plan_path: str, out_path: str, timing_path: str) -> int:
    import numpy as np
    from astropy.io import fits
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with open(plan_path) as fh:
        plan = json.load(fh)
    (box, cut_path), = plan["cutouts"][rank::size]  # one cut-out per rank: the grid has `size` boxes
    with open(plan["cube_path"], "rb") as fh:
        header = fh.read(plan["data_offset"]) if rank == 0 else b""
    with fits.open(cut_path, memmap=True, do_not_scale_image_data=True) as f:
        # the cut-out's bytes as they go into the file (FITS big-endian), as 4-byte words for MPI
        data = np.ascontiguousarray(f[0].data).view(np.uint32)
    word = MPI.UINT32_T
    view = word.Create_subarray(plan["shape"], [b - a for a, b in box], [a for a, _ in box]).Commit()
    comm.Barrier()
    t0 = MPI.Wtime()
    fh = MPI.File.Open(comm, out_path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
    fh.Set_size(plan["object_bytes"])
    if rank == 0:
        fh.Write_at(0, header)
    fh.Set_view(plan["data_offset"], word, view)
    fh.Write_all([data, word])
    fh.Sync()
    fh.Close()
    comm.Barrier()
    elapsed_s = MPI.Wtime() - t0
    view.Free()
    if rank == 0:
        _write_json(timing_path, {"elapsed_s": elapsed_s, "ranks": size})
    return 0


def upload_boto3(path: str, bucket: str, key: str, timing_path: str) -> int:
    from ingest.transports.s3client import s3_client

    client = s3_client()  # AWS_ENDPOINT_URL and keys from the cluster's environment
    t0 = time.perf_counter()
    client.upload_file(path, bucket, key)  # boto3's defaults
    _write_json(timing_path, {"elapsed_s": time.perf_counter() - t0})
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make `ingest` importable from this checkout
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    what, *rest = sys.argv[1:]
    sys.exit({"assemble": assemble, "boto3": upload_boto3}[what](*rest))
