"""Fetch an HDU's header through a transport, 2880-byte block by block until END; for a cube whose
header says CASAMBM = T, its BEAMS table too (ingest.formats.beams).

Rank 0 reads headers; the other ranks import this module (and its HeaderTiming) without reading
one, so astropy is imported where a header is parsed (ingest.formats.fits.parse_header), never
when this module is loaded."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ingest.core.tiles import MAX_INDEX_BYTES, SCHEMA, looks_like_json_object, parse_index_bytes
from ingest.errors import FitsFormatError
from ingest.formats.beams import is_beams_header, parse_beam_table
from ingest.formats.fits import (BLOCK_BYTES, FitsLayout, check_first_block, hdu_data_span, header_end, image_layout,
                                 parse_header, says_beams, with_beams)
from ingest.transports.retry import RetryPolicy, read_with_retries, retry_call
from ingest.transports.base import Transport

if TYPE_CHECKING:  # annotations only: see the module's docstring
    from astropy.io import fits


@dataclass(frozen=True)
class HeaderTiming:
    """The fastest header request: a free first look at the link for the tuner."""

    request_s: float  # its wall time, request to last byte (the size request before it opened the connection)
    cpu_s: float  # this process's CPU time for it


def _read_header(transport: Transport, offset: int, hdu: int, retry: RetryPolicy,
                 timings: list[HeaderTiming], first_block: bytes | None = None) -> tuple[bytes, int]:
    """Header bytes starting at `offset` and the offset of the data after it (`first_block`: the
    block at `offset`, if the caller already read it).

    One block per request: headers are a few blocks, and reading ahead could run into data
    we were not asked for.
    """
    size = transport.object_bytes
    name = transport.display_name
    blocks = []
    pos = offset
    while True:
        if pos + BLOCK_BYTES > size:
            if not blocks:
                check_first_block(b"\0" * max(0, size - pos), name, hdu, offset)
            raise FitsFormatError(f"{name}: object ends inside the header of HDU {hdu} before its END card")
        if first_block is not None and not blocks:
            buf = first_block
        else:
            buf = _timed_block(transport, pos, retry, timings)
        if not blocks:
            check_first_block(bytes(buf), name, hdu, offset)
        blocks.append(bytes(buf))
        pos += BLOCK_BYTES
        end = header_end(buf)
        if end is not None:
            return b"".join(blocks), pos


def _timed_block(transport: Transport, offset: int, retry: RetryPolicy, timings: list[HeaderTiming]) -> bytes:
    buf = bytearray(BLOCK_BYTES)
    cpu0, t0 = time.process_time(), time.perf_counter()
    read_with_retries(transport, memoryview(buf), offset, retry, lambda *fault: None)
    timings.append(HeaderTiming(time.perf_counter() - t0, time.process_time() - cpu0))
    return bytes(buf)


def read_layout(transport: Transport, hdu: int = 0, retry: RetryPolicy = RetryPolicy()) -> FitsLayout:
    """Walk the HDUs up to `hdu` by their headers alone and describe its data (header reads are
    retried like data reads: the first request of a job meets the same network)."""
    return read_layout_timed(transport, hdu, retry)[0]


def read_layout_timed(transport: Transport, hdu: int = 0, retry: RetryPolicy = RetryPolicy(),
                      first_block: bytes | None = None,
                      timings: list[HeaderTiming] | None = None) -> tuple[FitsLayout, HeaderTiming]:
    """read_layout, and the timing of its fastest header request (`first_block`: the object's
    first 2880 bytes, already read with the timing in `timings`)."""
    timings = [] if timings is None else timings
    if hdu < 0:
        raise FitsFormatError(f"{transport.display_name}: hdu {hdu} must be >= 0")
    retry_call(lambda: transport.info, retry, transport.display_name)  # size and identity, once
    if transport.object_bytes == 0:
        raise FitsFormatError(f"{transport.display_name}: object is empty (0 bytes); not a FITS file")
    offset = 0
    primary = None
    for index in range(hdu + 1):
        if offset >= transport.object_bytes:
            raise FitsFormatError(f"{transport.display_name}: has only {index} HDUs, no HDU {hdu}")
        raw, data_offset = _read_header(transport, offset, index, retry, timings,
                                        first_block if index == 0 else None)
        header = parse_header(raw, transport.display_name, index)
        primary = header if index == 0 else primary
        if index == hdu:
            layout = image_layout(
                header,
                source=transport.display_name,
                hdu=hdu,
                header_offset=offset,
                data_offset=data_offset,
                object_bytes=transport.object_bytes,
                header_text=raw.decode("ascii"),
            )
            if says_beams(header) or says_beams(primary):  # CASA writes it in the image's header
                layout = _attach_beams(transport, layout, header, retry, timings)
            return layout, min(timings, key=lambda t: t.request_s)
        offset = data_offset + hdu_data_span(header)
    raise AssertionError("unreachable")


def _attach_beams(transport: Transport, layout: FitsLayout, image_header: fits.Header, retry: RetryPolicy,
                  timings: list[HeaderTiming]) -> FitsLayout:
    """CASAMBM = T: walk the HDUs after the image's data by their headers (Range reads, a block
    at a time, as for the image's own) to the first BEAMS table, read it and attach it. A missing
    or malformed table is a FitsFormatError naming the object: a cut-out of such a cube would
    otherwise claim beams it does not carry."""
    name, size = transport.display_name, transport.object_bytes
    what = f"{name}: HDU {layout.hdu} says CASAMBM = T (a beam per channel)"
    offset = layout.data_offset + hdu_data_span(image_header)
    index = layout.hdu + 1
    while True:
        if offset >= size:
            raise FitsFormatError(f"{what} but no BEAMS table follows the image: the object ends after HDU {index - 1}")
        try:
            raw, data_offset = _read_header(transport, offset, index, retry, timings)
            header = parse_header(raw, name, index)
            span_bytes = hdu_data_span(header)
        except (FitsFormatError, KeyError, ValueError) as exc:
            raise FitsFormatError(f"{what}, but HDU {index} after the image, where its BEAMS table is looked "
                                  f"for, is malformed: {exc}") from None
        if is_beams_header(header):
            break
        offset = data_offset + span_bytes
        index += 1
    table_bytes = int(header["NAXIS1"]) * int(header["NAXIS2"]) + int(header.get("PCOUNT", 0))
    if data_offset + table_bytes > size:
        raise FitsFormatError(f"{what}, but its BEAMS table (HDU {index}) needs {table_bytes} bytes from byte "
                              f"{data_offset} and the object ends at {size}; it is truncated")
    data = bytearray(min(span_bytes, size - data_offset))  # with its padding, when the object has it
    if data:
        read_with_retries(transport, memoryview(data), data_offset, retry, lambda *fault: None)
    return with_beams(layout, parse_beam_table(raw + bytes(data), name))


def read_any_layout(transport: Transport, *, hdu: int = 0, dataset: str | None = None,
                    retry: RetryPolicy = RetryPolicy()):
    """The layout of a FITS HDU or an HDF5 dataset, told apart by the object's magic bytes (never
    its name). `hdu` applies to FITS, `dataset` to HDF5 (default: its only 3-D/4-D numeric one)."""
    return read_any_layout_timed(transport, hdu=hdu, dataset=dataset, retry=retry)[0]


def read_any_layout_timed(transport: Transport, *, hdu: int = 0, dataset: str | None = None,
                          retry: RetryPolicy = RetryPolicy(), tiles: bool = False):
    """read_any_layout, and the timing of its fastest header request. The first block is read
    once: it tells the formats apart (an HDF5 signature at byte 0, 512, 1024 or 2048; a JSON
    object, i.e. a tile index) and is the FITS reader's first header block, so a FITS source
    costs no extra request. HDF5 metadata is read through a block cache (`open_requests` on the
    layout), timed by its first block. A tile index (ingest.core.tiles) is returned as its
    validated TileIndex when the caller reads tiled sources (`tiles=True`, `run`), else refused."""
    from ingest.formats.hdf5 import looks_like_hdf5, read_hdf5_layout

    retry_call(lambda: transport.info, retry, transport.display_name)
    timings: list[HeaderTiming] = []
    first = None
    if transport.object_bytes >= BLOCK_BYTES:
        first = _timed_block(transport, 0, retry, timings)
    head = first if first is not None else (_head(transport, retry) if transport.object_bytes else b"")
    timing = timings[0] if timings else None
    if head and looks_like_hdf5(head):
        return read_hdf5_layout(transport, dataset, retry), timing
    if looks_like_json_object(head):
        return _read_tile_index(transport, head, retry, tiles), timing
    if dataset is not None:
        raise FitsFormatError(f"{transport.display_name}: dataset {dataset!r} given, but this is not an HDF5 file "
                              f"(no HDF5 signature); FITS cubes are chosen with hdu")
    return read_layout_timed(transport, hdu, retry, first_block=first, timings=timings)


def _read_tile_index(transport: Transport, head: bytes, retry: RetryPolicy, tiles: bool):
    """The whole (small) JSON object, validated as a tile index; refused unless `tiles`."""
    name = transport.display_name
    if transport.object_bytes > MAX_INDEX_BYTES:
        raise FitsFormatError(f"{name}: starts like JSON but is {transport.object_bytes:,} bytes, too large for a "
                              f"tile index ({SCHEMA}); not a FITS or HDF5 file either")
    raw = bytearray(transport.object_bytes)  # the first block is in hand: read only the rest
    raw[:len(head)] = head
    if len(head) < len(raw):
        read_with_retries(transport, memoryview(raw)[len(head):], len(head), retry, lambda *fault: None)
    index = parse_index_bytes(bytes(raw), name)
    if not tiles:
        raise FitsFormatError(f"{name}: is a tile index ({SCHEMA}: {len(index.tiles)} tiles of {index.source}), "
                              f"not one cube; `python -m ingest run --source {name}` reads it")
    return index


def _head(transport: Transport, retry: RetryPolicy) -> bytes:
    """The whole object: one shorter than a FITS block (not FITS, maybe a tiny HDF5 file), or a tile index."""
    buf = bytearray(transport.object_bytes)
    read_with_retries(transport, memoryview(buf), 0, retry, lambda *fault: None)
    return bytes(buf)


def whole_cube_layout(first_tile, index, name: str):
    """The cube's layout as its tiles describe it, for the report, scaling and cut-outs: tile 0's
    (its box starts at the origin, so its WCS is the source's) with the whole cube's shape.
    Offsets stay tile 0's; object_bytes is every tile's. Its BEAMS table is tile 0's when tile 0
    spans every channel and polarisation, else none."""
    from astropy.io import fits

    if first_tile.kind != "fits":
        return replace(first_tile, source=name, shape=index.shape, object_bytes=index.stored_bytes)
    header = fits.Header.fromstring(first_tile.header_text)
    for n, extent in enumerate(reversed(index.shape), start=1):
        header[f"NAXIS{n}"] = extent
    whole = replace(first_tile, source=name, shape=index.shape, object_bytes=index.stored_bytes,
                    header_text=header.tostring(), beams=None)
    if first_tile.beams is None:
        return whole
    try:  # tile 0's table is the cube's only when tile 0 spans every channel and polarisation
        return with_beams(whole, first_tile.beams)
    except FitsFormatError:
        return whole  # the other channels' beams are in other tiles: cut-outs carry none rather than wrong ones
