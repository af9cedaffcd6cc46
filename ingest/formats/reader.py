"""Fetch an HDU's header through a transport, 2880-byte block by block until END."""
from __future__ import annotations

import time
from dataclasses import dataclass

from ingest.errors import FitsFormatError
from ingest.formats.fits import BLOCK_BYTES, Layout, check_first_block, hdu_data_span, header_end, image_layout, parse_header
from ingest.io.retry import RetryPolicy, read_with_retries, retry_call
from ingest.io.transports.base import Transport


@dataclass(frozen=True)
class HeaderTiming:
    """The fastest header request: a free first look at the link for the tuner."""

    first_byte_s: float  # its time to first byte (the size request before it opened the connection)
    cpu_s: float  # this process's CPU time for it


def _read_header(transport: Transport, offset: int, hdu: int, retry: RetryPolicy,
                 timings: list[HeaderTiming]) -> tuple[bytes, int]:
    """Header bytes starting at `offset` and the offset of the data after it.

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
        buf = bytearray(BLOCK_BYTES)
        cpu0 = time.process_time()
        first_byte_s = read_with_retries(transport, memoryview(buf), pos, retry, lambda *fault: None)
        timings.append(HeaderTiming(first_byte_s, time.process_time() - cpu0))
        if not blocks:
            check_first_block(bytes(buf), name, hdu, offset)
        blocks.append(bytes(buf))
        pos += BLOCK_BYTES
        end = header_end(buf)
        if end is not None:
            return b"".join(blocks), pos


def read_layout(transport: Transport, hdu: int = 0, retry: RetryPolicy = RetryPolicy()) -> Layout:
    """Walk the HDUs up to `hdu` by their headers alone and describe its data (header reads are
    retried like data reads: the first request of a job meets the same network)."""
    return read_layout_timed(transport, hdu, retry)[0]


def read_layout_timed(transport: Transport, hdu: int = 0,
                      retry: RetryPolicy = RetryPolicy()) -> tuple[Layout, HeaderTiming]:
    """read_layout, and the timing of its fastest header request."""
    timings: list[HeaderTiming] = []
    if hdu < 0:
        raise FitsFormatError(f"{transport.display_name}: hdu {hdu} must be >= 0")
    retry_call(lambda: transport.info, retry, transport.display_name)  # size and identity, once
    if transport.object_bytes == 0:
        raise FitsFormatError(f"{transport.display_name}: object is empty (0 bytes); not a FITS file")
    offset = 0
    for index in range(hdu + 1):
        if offset >= transport.object_bytes:
            raise FitsFormatError(f"{transport.display_name}: has only {index} HDUs, no HDU {hdu}")
        raw, data_offset = _read_header(transport, offset, index, retry, timings)
        header = parse_header(raw, transport.display_name, index)
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
            return layout, min(timings, key=lambda t: t.first_byte_s)
        offset = data_offset + hdu_data_span(header)
    raise AssertionError("unreachable")
