"""What rank 0 decides for a publish, once, before any byte moves (then broadcast as a `Plan`).

In order, so that a refusal leaves the store untouched: the header and the object's image; the
regions' type; who writes which voxel (core.ownership); the part size (core.parts, or the size
of the unfinished upload being resumed) and the parts; the bytes each rank holds of each part
and so each part's aggregator; then the store: an object already at the key (refused without
overwrite), unfinished uploads of it (resumed with resume, discarded with overwrite, refused
otherwise), whether the store honours If-None-Match on completion (a probe on a key beside the
destination, unless overwrite: the report's `guard` says only what was seen; it runs on a thread,
off the path to the first part, and the completion waits for it), and last the one call that
changes anything at the key, CreateMultipartUpload.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ingest.config import RunConfig
from ingest.config.settings import retry_policy, transport_options
from ingest.core.byteruns import ObjectImage, box_bytes_before
from ingest.core.ownership import owned_boxes
from ingest.core.parts import assign_aggregators, choose_part_bytes, plan_part_bytes, rounds, split_parts
from ingest.errors import ConfigError
from ingest.formats.reader import read_any_layout
from ingest.outputs.publish_image import object_image
from ingest.staging.multipart import PartRecord, Upload, upload_client
from ingest.transports import open_transport
from ingest.transports.presign import parse_s3_uri
from ingest.units import format_bytes


@dataclass(frozen=True)
class Plan:
    """Everything every rank needs for the rounds; no credentials in it."""

    uri: str
    image: ObjectImage
    format: str  # "fits" | "hdf5"
    dtype: str  # the data's stored dtype in the object, e.g. '>f4'
    regions: tuple  # RegionData per region index
    held_by: tuple  # per rank: the region indices it holds
    owned: tuple  # per region: the boxes of voxels it writes
    parts: tuple  # (start, stop) per part; part number = index + 1
    part_bytes: int  # every part's size but the last's
    part_reason: str
    held: np.ndarray  # [part, rank]: bytes of the part the rank holds
    aggregators: tuple  # per part: the rank that uploads it
    rounds: tuple  # per round, per rank: the part it aggregates or None
    upload_id: str
    checksum: str | None  # "CRC32" or None (Content-MD5)
    presigned: bool
    existing: dict  # resume: part number -> PartRecord already stored
    resumed: bool

    @property
    def object_bytes(self) -> int:
        return self.image.object_bytes



def uses_presigned(upload_method: str, credentials) -> bool:
    """Do the parts go through presigned URLs, given every rank's `credentials` (have keys)?
    Every rank can tell from the allgathered credentials, before rank 0's plan says so."""
    return upload_method == "presigned" or (upload_method == "auto" and not all(credentials))


def options_for_store(cfg: RunConfig) -> dict:
    """Connection options for the upload clients, from the config."""
    return {"endpoint_url": cfg.endpoint_url, "verify_tls": cfg.verify_tls, "ca_bundle": cfg.ca_bundle,
            "connect_timeout": cfg.connect_timeout_s, "read_timeout": cfg.read_timeout_s,
            "request_checksum_calculation": cfg.request_checksum_calculation}


def _header_layout(cfg: RunConfig, source: str):
    """The layout (FITS header or HDF5 dataset) of the cube whose header the object takes."""
    with open_transport(source, "auto", threads=1, **transport_options(cfg)) as transport:
        return read_any_layout(transport, hdu=cfg.hdu, dataset=cfg.dataset, retry=retry_policy(cfg))


def _header_shape(header) -> tuple[int, ...]:
    from astropy.io import fits

    header = fits.Header.fromstring(header) if isinstance(header, str) else header
    n = int(header.get("NAXIS", 0))
    return tuple(int(header.get(f"NAXIS{k}", 0)) for k in range(n, 0, -1))


def _output_dtype(regions, fmt: str, header_layout) -> np.dtype:
    """The object's stored dtype: the regions' type (all must share kind and size), big-endian for
    FITS; for HDF5 the header dataset's byte order when its type matches."""
    kinds = {(np.dtype(r.dtype).kind, np.dtype(r.dtype).itemsize) for r in regions}
    if len(kinds) != 1:
        first = {k: next(r.index for r in regions if (np.dtype(r.dtype).kind, np.dtype(r.dtype).itemsize) == k)
                 for k in kinds}
        shown = ", ".join(f"region {i}: {np.dtype(regions[i].dtype)}" for i in sorted(first.values()))
        raise ConfigError(f"regions: they hold different types ({shown}); one object has one type")
    dtype = np.dtype(regions[0].dtype)
    if dtype.kind not in "iuf":
        raise ConfigError(f"regions: type {dtype} is not an integer or float type")
    if fmt == "fits":
        return dtype.newbyteorder(">")
    if header_layout is not None and (header_layout.dtype.kind, header_layout.dtype.itemsize) == (dtype.kind,
                                                                                                  dtype.itemsize):
        return header_layout.dtype
    return dtype


def _held_bytes(image: ObjectImage, parts, regions, owned, held_by, n_ranks: int) -> np.ndarray:
    """[part, rank]: bytes of each part's data each rank holds (owned boxes only), counted, not listed."""
    holder = {index: rank for rank, mine in enumerate(held_by) for index in mine}
    bounds = np.array([lo for lo, _ in parts] + [parts[-1][1]], np.int64) - image.data_offset
    bounds = np.clip(bounds, 0, image.data_bytes)
    held = np.zeros((len(parts), n_ranks), np.int64)
    for index, boxes in enumerate(owned):
        for box in boxes:
            held[:, holder[index]] += np.diff(box_bytes_before(box, image.shape, image.itemsize, bounds))
    if int(held.sum()) != image.data_bytes:  # owned boxes tile the cube: a mismatch is a bug, not bad input
        raise AssertionError(f"publish plan: {int(held.sum())} data bytes owned, the cube has {image.data_bytes}")
    return held


def _store_state(upload: Upload, cfg: RunConfig) -> tuple[dict | None, list]:
    """(the unfinished upload to resume or None, the unfinished uploads to discard); refusals here."""
    size = upload.existing_bytes()
    if size is not None and not cfg.overwrite:
        raise ConfigError(f"dest: {upload.uri} already exists ({format_bytes(size)}); nothing was changed. Pass "
                          f"--overwrite (overwrite=True) to replace it")
    unfinished = upload.unfinished()
    if cfg.resume and unfinished:
        return unfinished[0], []
    if unfinished and not cfg.overwrite:
        newest = unfinished[0]
        raise ConfigError(f"dest: {upload.uri} has {len(unfinished)} unfinished multipart upload(s) (newest "
                          f"{newest['UploadId']}, started {newest.get('Initiated')}); --resume continues it, "
                          f"--overwrite discards it and starts over")
    return None, unfinished


def _part_size(cfg: RunConfig, object_bytes: int, n_ranks: int, existing: dict) -> tuple[int, str]:
    if existing and cfg.part_bytes is None:
        adopted = max(r.size_bytes for r in existing.values())
        try:
            return choose_part_bytes(object_bytes, adopted), f"{format_bytes(adopted)}: the unfinished upload's"
        except ConfigError:
            pass  # only a short last part is stored, or another object's sizes: plan afresh
    return plan_part_bytes(object_bytes, n_ranks, cfg.parts_in_flight, cfg.latency_s, cfg.bandwidth_bytes_per_s,
                           cfg.part_bytes)


def make_plan(cfg: RunConfig, regions, held_by, header, header_source: str | None, credentials: list[bool],
              keep: dict) -> Plan:
    """Rank 0: the plan (see the module docstring). `header`: an astropy Header or card text given
    by a caller, else the object takes cfg.header_from's or header_source's; credentials: per rank,
    whether boto3's chain finds keys there. The Upload handle is left in keep['upload']."""
    bucket, key = parse_s3_uri(cfg.dest)
    layout = None
    if header is None:
        source = cfg.header_from or header_source
        layout = _header_layout(cfg, source) if source else None
    shape = _header_shape(header) if header is not None else (tuple(layout.shape) if layout else None)
    fmt = "hdf5" if layout is not None and layout.kind == "hdf5" else "fits"
    dtype = _output_dtype(regions, fmt, layout)
    if shape is None:
        raise ConfigError("header: none given and none found (a pre-stage frame or the manifest's source cube); "
                          "give --header-from CUBE (header=...): a FITS or HDF5 file or object whose header the output takes")
    owned = owned_boxes([r.box for r in regions], shape)
    image, fmt = object_image(layout, header, shape, dtype)

    n_ranks = len(held_by)
    presigned = uses_presigned(cfg.upload_method, credentials)
    if not credentials[0]:
        raise ConfigError("upload_method: rank 0 has no credentials (boto3's chain finds no keys); it creates, "
                          "signs and completes the upload, so it needs them")
    if cfg.upload_method == "s3" and not all(credentials):
        missing = [r for r, ok in enumerate(credentials) if not ok]
        raise ConfigError(f"upload_method: s3, but rank(s) {missing[:8]} have no credentials; use --upload-method "
                          f"presigned (rank 0 hands out part URLs) or auto")
    upload = Upload(upload_client(cfg.parts_in_flight + 2, options_for_store(cfg)), bucket, key, retry_policy(cfg))
    resume_from, discard = _store_state(upload, cfg)
    existing: dict[int, PartRecord] = {}
    if resume_from is not None:
        upload.adopt(resume_from)
        if presigned and upload.checksum:
            raise ConfigError(f"resume: the unfinished upload of {upload.uri} checks parts by {upload.checksum}, which "
                              f"a presigned part upload cannot send; resume it with --upload-method s3")
        existing = upload.parts()
    part_bytes, reason = _part_size(cfg, image.object_bytes, n_ranks, existing)
    if part_bytes % image.itemsize or image.data_offset % image.itemsize:
        # A part boundary inside a value would leave a rank half a value to convert and send.
        raise ConfigError(f"part_bytes: {part_bytes} is not a whole number of {image.itemsize}-byte values "
                          f"(data at byte {image.data_offset}); use whole MiB, e.g. 64MiB")
    parts = split_parts(image.object_bytes, part_bytes)
    held = _held_bytes(image, parts, regions, owned, held_by, n_ranks)
    aggregators = assign_aggregators(held)
    for stale in discard:  # overwrite: earlier runs' unfinished uploads of this key go
        upload.abort(stale["UploadId"])
    if not cfg.overwrite:
        upload.probe_guard()
    if resume_from is None:
        upload.create(None if presigned else "CRC32")
    keep["upload"] = upload
    return Plan(upload.uri, image, fmt, dtype.str, tuple(regions), tuple(tuple(m) for m in held_by), owned, parts,
                part_bytes, reason, held, aggregators, rounds(aggregators, n_ranks), upload.upload_id, upload.checksum, presigned,
                existing, resume_from is not None)
