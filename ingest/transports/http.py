"""Presigned URLs: HTTP Range GETs with urllib3, one pooled connection per thread; CA and proxy from
ingest.transports.environment."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from urllib.parse import urlsplit

import urllib3

from ingest.errors import ExpiredURLError, ObjectChangedError, RangeNotSupportedError, RetryableError, TransportError
from ingest.transports.presign import url_expiry
from ingest.redact import redact_url, scrub
from ingest.transports.base import ObjectInfo, Transport
from ingest.transports.environment import Environment, resolve
from ingest.transports.httpbody import (
    RETRYABLE_STATUS,
    check_content_range,
    range_header,
    read_body_into,
    s3_error_code,
)


class HttpTransport(Transport):
    """Range GETs against a presigned URL (the URL is the only credential: never log it whole).

    refresh_url: optional callable returning a freshly signed URL for the same object; when
    given, a 403 from an expired URL is retried with a new URL instead of failing.
    """

    name = "presigned"
    engine = "urllib3"

    @property
    def endpoint(self) -> str:
        parts = urlsplit(self.source)
        return f"{parts.scheme}://{parts.netloc}"

    def __init__(
        self,
        source: str,
        *,
        threads: int = 1,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        verify_tls: bool = True,
        ca_bundle: str | None = None,
        refresh_url=None,
        environment: Environment | None = None,
        **_ignored,
    ):
        super().__init__(source, threads=threads)
        self._shown: tuple[str | None, str] = (None, "")  # (source, its redacted form)
        # open_transport passes the resolved environment; a transport made directly resolves its own.
        self.environment = environment or resolve({"verify_tls": verify_tls, "ca_bundle": ca_bundle})
        verify, ca_file = self.environment.tls_for(source)
        tls = {"cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE"}
        if ca_file:
            tls["ca_certs"] = ca_file
        pool = dict(
            # One connection per worker thread; block=True makes a thread wait rather than open
            # (and then throw away) an extra connection.
            num_pools=2,
            maxsize=max(1, threads),
            block=True,
            retries=False,  # ingest.transports.retry owns retrying, so every retry is counted and bounded
            timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s),
            **tls,
        )
        # urllib3 never reads proxy variables itself: the resolved proxy (or none, when no_proxy
        # matches) is the one libcurl and boto3 are given too. A re-signed URL keeps the host.
        proxy = self.environment.proxy_for(source)
        self._pool = urllib3.ProxyManager(proxy, **pool) if proxy else urllib3.PoolManager(**pool)
        self._refresh_url = refresh_url
        self._refresh_lock = threading.Lock()

    @property
    def display_name(self) -> str:
        # Every checked reply names the source (for the message it may raise), so the redaction
        # is kept until a refresh changes the URL: it cost ~5 µs of each ~100 µs native request.
        source = self.source
        if self._shown[0] is not source:
            self._shown = (source, redact_url(source))
        return self._shown[1]

    def _get(self, url: str, offset: int, nbytes: int):
        headers = {"Range": range_header(offset, nbytes)}
        if self._info is not None and self._info.etag:
            headers["If-Match"] = self._info.etag  # never mix two versions of the object
        try:
            return self._pool.request("GET", url, headers=headers, preload_content=False,
                                      decode_content=False, redirect=False)
        except urllib3.exceptions.SSLError as exc:
            raise TransportError(f"{self.display_name}: TLS failed: {scrub(str(exc.__context__ or exc))} "
                                 f"({self.environment.tls_hint()})") from None
        except (urllib3.exceptions.LocationValueError, ValueError):
            raise TransportError(f"{self.display_name}: not a usable URL") from None
        except urllib3.exceptions.HTTPError as exc:
            # `from None` throughout: urllib3's messages can quote the whole URL, signature included.
            kind = ("timeout" if "Timeout" in type(exc).__name__
                    else "reset" if isinstance(exc, urllib3.exceptions.ProtocolError) else "connect")
            raise RetryableError(f"{self.display_name}: request for bytes at {offset} failed: "
                                 f"{type(exc).__name__}: {scrub(str(exc))}", kind=kind) from None

    def _refuse(self, resp, url: str, offset: int) -> None:
        """Turn a non-206 reply into the right error without streaming its body."""
        status = resp.status
        detail = "" if status == 200 else resp.read(1024, decode_content=True).decode("utf-8", "replace")
        _discard(resp)
        self._refusal(status, detail, url, offset)

    def _refusal(self, status: int, detail: str, url: str, offset: int) -> None:
        """Raise the error a non-206 reply means (`detail`: the start of its body)."""
        if status == 200:
            raise RangeNotSupportedError(
                f"{self.display_name}: server ignored the Range header and started sending the whole "
                f"object (status 200); refusing to stream it"
            )
        code = s3_error_code(detail)
        what = f"{self.display_name}: HTTP {status}{' ' + code if code else ''} at offset {offset}"
        if status in RETRYABLE_STATUS:
            raise RetryableError(what, kind="slowdown" if code == "SlowDown" else f"http_{status}")
        if status == 412:
            raise ObjectChangedError(f"{what}: the object changed since the run started (ETag "
                                     f"{self._info.etag if self._info else '?'}); stopping rather than mixing versions")
        if status == 403:
            self._on_forbidden(url, what)
        raise TransportError(what)

    def _on_forbidden(self, url: str, what: str) -> None:
        """A 403 from an expired URL says so, and is re-signed when we can."""
        expiry = url_expiry(url)
        now = datetime.now(timezone.utc)
        if expiry is None or expiry > now:
            raise TransportError(f"{what} (access denied: the presigned URL is invalid or lacks permission)")
        if self._refresh_url is None:
            raise ExpiredURLError(
                f"{what}: the presigned URL expired at {expiry:%Y-%m-%d %H:%M:%S} UTC "
                f"({(now - expiry).total_seconds():.0f} s ago); get a new URL, or give an s3:// source "
                "with credentials so ingest can sign its own"
            )
        with self._refresh_lock:
            if self.source == url:  # another thread may have refreshed it already
                self.source = self._refresh_url()
        raise RetryableError(f"{what}: presigned URL expired; signed a new one", kind="expired_url")

    def _stat(self) -> ObjectInfo:
        # A presigned GET URL is signed for GET only, so a 1-byte ranged GET stands in for HEAD.
        url = self.source
        resp = self._get(url, 0, 1)
        if resp.status != 206:
            self._refuse(resp, url, 0)
        total = check_content_range(resp.headers.get("Content-Range"), 0, 1, self.display_name)
        resp.read()
        resp.release_conn()
        if total is None:
            raise TransportError(f"{self.display_name}: server did not report the object size")
        return ObjectInfo(total, resp.headers.get("ETag"), resp.headers.get("Last-Modified"),
                          server=resp.headers.get("Server", ""))

    def read_into(self, buffer: memoryview, offset: int) -> float:
        n = len(buffer)
        url = self.source
        t0 = time.perf_counter()
        resp = self._get(url, offset, n)
        ttfb_s = time.perf_counter() - t0
        ok = False
        try:
            if resp.status != 206:
                self._refuse(resp, url, offset)
            check_content_range(resp.headers.get("Content-Range"), offset, n, self.display_name)
            self._check_etag(resp.headers.get("ETag"))
            read_body_into(resp, buffer, self.display_name, offset)
            ok = True
        finally:
            if ok:
                resp.release_conn()
            else:
                _discard(resp)
        return ttfb_s

    def _check_etag(self, etag: str | None) -> None:
        """Belt and braces for servers that ignore If-Match."""
        pinned = self._info.etag if self._info is not None else None
        if pinned and etag and etag != pinned:
            raise ObjectChangedError(f"{self.display_name}: ETag changed from {pinned} to {etag} mid-run; "
                                     "stopping rather than mixing two versions of the object")

    def close(self) -> None:
        self._pool.clear()


def _discard(resp) -> None:
    """Close a reply we will not read to the end, and give its slot back to the pool.

    Closing alone would keep the slot: with block=True and maxsize=threads, a few broken
    replies would then leave every worker waiting for a connection forever.
    """
    resp.close()  # never reuse a half-read connection
    resp.release_conn()  # but return its slot; the pool opens a fresh connection in it
