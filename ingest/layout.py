"""Fetch an HDU's header through a transport, 2880-byte block by block until END."""
from __future__ import annotations

from ingest.errors import FitsFormatError
from ingest.geometry import BLOCK_BYTES, Layout, check_first_block, hdu_data_span, header_end, image_layout, parse_header
from ingest.retry import RetryPolicy, read_with_retries, retry_call
from ingest.transports.base import Transport


def _read_header(transport: Transport, offset: int, hdu: int, retry: RetryPolicy) -> tuple[bytes, int]:
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
        read_with_retries(transport, memoryview(buf), pos, retry, lambda *fault: None)
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
    if hdu < 0:
        raise FitsFormatError(f"{transport.display_name}: hdu {hdu} must be >= 0")
    retry_call(lambda: transport.info, retry, transport.display_name)  # size and identity, once
    if transport.object_bytes == 0:
        raise FitsFormatError(f"{transport.display_name}: object is empty (0 bytes); not a FITS file")
    offset = 0
    for index in range(hdu + 1):
        if offset >= transport.object_bytes:
            raise FitsFormatError(f"{transport.display_name}: has only {index} HDUs, no HDU {hdu}")
        raw, data_offset = _read_header(transport, offset, index, retry)
        header = parse_header(raw, transport.display_name, index)
        if index == hdu:
            return image_layout(
                header,
                source=transport.display_name,
                hdu=hdu,
                header_offset=offset,
                data_offset=data_offset,
                object_bytes=transport.object_bytes,
                header_text=raw.decode("ascii"),
            )
        offset = data_offset + hdu_data_span(header)
    raise AssertionError("unreachable")
