"""Checking "before any data moves": a FITS file served over HTTP by tests/badhttp.py, which
counts the body bytes it sends, and the one assertion every such claim makes.

A command that refuses (or only prices) a job may read the cube's headers, its size (one byte)
and tables beside the data such as a BEAMS extension; it must not read the data. So: bytes of the
object sent at most every byte outside the data unit plus one, and no reply reaching into the data.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

from astropy.io import fits

from tests.badhttp import BadHttpServer

_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


class CountingSource:
    """`path` served at `.url` (a presigned-looking HTTP URL) while the `with` block runs."""

    def __init__(self, path, hdu: int = 0):
        body = Path(path).read_bytes()
        with warnings.catch_warnings(), fits.open(path) as f:
            warnings.simplefilter("ignore")
            info = f[hdu].fileinfo()
        self.data_span = (info["datLoc"], info["datLoc"] + info["datSpan"])
        self.object_bytes = len(body)
        self.header_bytes = self.object_bytes - info["datSpan"]  # headers and tables: all but the data
        self.server = BadHttpServer(body)

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self):
        self.server.__enter__()
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)

    def _served(self) -> list[tuple[int, int]]:
        """Each reply's half-open byte range of the object (a 200 is the whole object; an error
        reply, such as a 416 for a probe past the end, carries none of it)."""
        out = []
        for entry in self.server.log:
            match = _RANGE.match(entry["range"] or "")
            if entry["status"] == 206 and match:
                out.append((int(match[1]), min(int(match[2]) + 1, self.object_bytes)))
            elif entry["status"] == 200:
                out.append((0, self.object_bytes))
        return out

    def assert_no_data_moved(self) -> None:
        served, (lo, hi) = self._served(), self.data_span
        sent = sum(b - a for a, b in served)
        into_data = [(a, b) for a, b in served if a < hi and lo < b]
        assert sent <= self.header_bytes + 1 and not into_data, (
            f"{sent} bytes of the object sent in {self.server.requests} requests (headers: {self.header_bytes} "
            f"bytes); replies reaching into the data [{lo}, {hi}): {into_data}")
        assert sent <= self.server.bytes_sent  # what the replies carried was written: real bytes, counted
