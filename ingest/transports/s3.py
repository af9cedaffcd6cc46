"""The S3 API: boto3 `get_object` with a Range; endpoint, TLS and proxy from ingest.transports.environment,
keys from boto3's own chain."""
from __future__ import annotations

import time

from ingest.errors import ObjectChangedError, RangeNotSupportedError, RetryableError, TransportError
from ingest.transports.presign import parse_s3_uri
from ingest.transports.base import ObjectInfo, Transport
from ingest.transports.environment import Environment, resolve
from ingest.transports.httpbody import RETRYABLE_STATUS, check_content_range, range_header, read_body_into

_RETRYABLE_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling"}


class S3Transport(Transport):
    """Ranged get_object calls; the client's pool holds at least one connection per thread."""

    name = "s3"
    engine = "boto3"

    def __init__(
        self,
        source: str,
        *,
        threads: int = 1,
        client=None,
        endpoint_url: str | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        verify_tls: bool = True,
        ca_bundle: str | None = None,
        environment: Environment | None = None,
        **_ignored,
    ):
        super().__init__(source, threads=threads)
        self.bucket, self.key = parse_s3_uri(source)
        # open_transport passes the resolved environment; a transport made directly resolves its own.
        self.environment = environment or resolve({"endpoint_url": endpoint_url, "verify_tls": verify_tls,
                                                   "ca_bundle": ca_bundle})
        if client is None:
            from ingest.transports.s3client import shared_s3_client

            client = shared_s3_client(
                max_pool_connections=max(10, threads),
                environment=self.environment,
                connect_timeout=connect_timeout_s,
                read_timeout=read_timeout_s,
                # One attempt per call: ingest.transports.retry owns retrying, so every retry is
                # counted and resumes; AWS_MAX_ATTEMPTS is offered to ingest's own retry setting
                # instead (environment.max_attempts), never multiplied with it.
                retries={"total_max_attempts": 1},
            )
        self._client = client

    @property
    def endpoint(self) -> str:
        return self.environment.endpoint_url or f"s3 of AWS {self.environment.region or 'us-east-1'}"

    def _call(self, what: str, **kw):
        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, SSLError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        try:
            return getattr(self._client, what)(Bucket=self.bucket, Key=self.key, **kw)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = err.get("Code", "")
            text = f"{self.source}: {what} failed: HTTP {status} {code} {err.get('Message', '')}".rstrip()
            if status in RETRYABLE_STATUS or code in _RETRYABLE_CODES:
                raise RetryableError(text, kind="slowdown" if code == "SlowDown" else f"http_{status}") from None
            if status == 412 or code == "PreconditionFailed":
                raise ObjectChangedError(f"{text}: the object changed since the run started; stopping rather "
                                         "than mixing versions") from None
            raise TransportError(text) from None
        except SSLError as exc:
            raise TransportError(f"{self.source}: TLS failed: {exc} ({self.environment.tls_hint()})") from None
        except (BotoConnectionError, HTTPClientError) as exc:
            kind = "timeout" if "Timeout" in type(exc).__name__ else "connect"
            raise RetryableError(f"{self.source}: {what} failed: {type(exc).__name__}", kind=kind) from exc
        except BotoCoreError as exc:
            raise TransportError(f"{self.source}: {what} failed: {exc}") from exc

    def _stat(self) -> ObjectInfo:
        head = self._call("head_object")
        headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return ObjectInfo(head["ContentLength"], head.get("ETag"), str(head.get("LastModified")),
                          server=headers.get("server", ""))

    def read_into(self, buffer: memoryview, offset: int) -> float:
        n = len(buffer)
        pin = {"IfMatch": self._info.etag} if self._info is not None and self._info.etag else {}
        t0 = time.perf_counter()
        resp = self._call("get_object", Range=range_header(offset, n), **pin)
        ttfb_s = time.perf_counter() - t0
        body = resp["Body"]
        raw = getattr(body, "_raw_stream", body)
        ok = False
        try:
            if "ContentRange" not in resp:
                raise RangeNotSupportedError(
                    f"{self.source}: server ignored the Range header (no Content-Range); refusing to stream the object"
                )
            check_content_range(resp["ContentRange"], offset, n, self.source)
            read_body_into(raw, buffer, self.source, offset)
            ok = True
        finally:
            if ok:
                raw.release_conn() if hasattr(raw, "release_conn") else body.close()
            else:
                body.close()
        return ttfb_s
