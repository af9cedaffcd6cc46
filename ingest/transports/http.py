"""Presigned URLs: HTTP Range GETs with urllib3, one pooled connection per thread."""
from __future__ import annotations

import time

import urllib3

from ingest.errors import RangeNotSupportedError, TransportError
from ingest.presign import redact_url
from ingest.transports.base import ObjectInfo, Transport
from ingest.transports.httpbody import check_content_range, range_header, read_body_into


class HttpTransport(Transport):
    """Range GETs against a presigned URL (the URL is the only credential: never log it whole)."""

    name = "presigned"

    def __init__(
        self,
        source: str,
        *,
        threads: int = 1,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        verify_tls: bool = True,
        ca_bundle: str | None = None,
        **_ignored,
    ):
        super().__init__(source, threads=threads)
        tls = {"cert_reqs": "CERT_REQUIRED" if verify_tls else "CERT_NONE"}
        if ca_bundle:
            tls["ca_certs"] = ca_bundle
        # One connection per worker thread; block=True makes a thread wait rather than open
        # (and then throw away) an extra connection.
        self._pool = urllib3.PoolManager(
            num_pools=2,
            maxsize=max(1, threads),
            block=True,
            retries=False,
            timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s),
            **tls,
        )

    @property
    def display_name(self) -> str:
        return redact_url(self.source)

    def _get(self, offset: int, nbytes: int):
        try:
            return self._pool.request(
                "GET",
                self.source,
                headers={"Range": range_header(offset, nbytes)},
                preload_content=False,
                decode_content=False,
                redirect=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError(f"{self.display_name}: request for bytes at {offset} failed: {exc}") from exc

    def _refuse(self, resp, offset: int) -> None:
        """Turn a non-206 reply into a clear error without streaming its body."""
        status = resp.status
        detail = ""
        if status != 200:
            detail = resp.read(512, decode_content=True).decode("utf-8", "replace")
        resp.close()  # never return a half-read connection to the pool
        if status == 200:
            raise RangeNotSupportedError(
                f"{self.display_name}: server ignored the Range header and started sending the whole "
                f"object (status 200); refusing to stream it"
            )
        code = _s3_error_code(detail)
        hint = ""
        if status == 403:
            hint = " (the presigned URL is invalid or has expired)" if "expired" not in detail.lower() else " (the presigned URL has expired)"
        raise TransportError(f"{self.display_name}: HTTP {status}{' ' + code if code else ''} at offset {offset}{hint}")

    def _stat(self) -> ObjectInfo:
        # A presigned GET URL is signed for GET only, so a 1-byte ranged GET stands in for HEAD.
        resp = self._get(0, 1)
        if resp.status != 206:
            self._refuse(resp, 0)
        total = check_content_range(resp.headers.get("Content-Range"), 0, 1, self.display_name)
        resp.read()
        resp.release_conn()
        if total is None:
            raise TransportError(f"{self.display_name}: server did not report the object size")
        return ObjectInfo(total, resp.headers.get("ETag"), resp.headers.get("Last-Modified"))

    def read_into(self, buffer: memoryview, offset: int) -> float:
        n = len(buffer)
        t0 = time.perf_counter()
        resp = self._get(offset, n)
        ttfb_s = time.perf_counter() - t0
        ok = False
        try:
            if resp.status != 206:
                self._refuse(resp, offset)
            check_content_range(resp.headers.get("Content-Range"), offset, n, self.display_name)
            read_body_into(resp, buffer, self.display_name, offset)
            ok = True
        finally:
            if ok:
                resp.release_conn()
            else:
                resp.close()
        return ttfb_s

    def close(self) -> None:
        self._pool.clear()


def _s3_error_code(body: str) -> str:
    """The <Code> of an S3 XML error body, if any (e.g. AccessDenied, SignatureDoesNotMatch)."""
    start = body.find("<Code>")
    end = body.find("</Code>")
    return body[start + 6 : end] if 0 <= start < end else ""
