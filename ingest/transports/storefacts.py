"""What a store does where ingest depends on it, found out rather than assumed: the Server header
it sends, whether the object carries a checksum the store kept (CRC32 and its kin), and what a
ranged GET starting at the object's end answers.

S3-compatible stores agree on reading and differ at the edges (docs/stores.md has the table):
Ceph RGW Pacific takes an `x-amz-checksum-crc32` header without checking or keeping it, and
sends no Server header; versitygw checks and keeps it. `info` and the run report name what the
store at hand answered, so a reader can tell which store a figure came from and whether a
stored checksum could vouch for the object.

Cost, paid once (rank 0 at prepare, or `info`), on the object being read and read-only:
- the S3 method: one HEAD with ChecksumMode=ENABLED (a store returns stored checksums only when
  asked) and one 1-byte ranged GET at the object's size;
- a presigned URL: that GET alone (the URL is signed for GET, so no HEAD; checksums "not asked"),
  the Server header taken from the transport's own first reply (ObjectInfo.server);
- `past_end=False` (--no-probe) skips the GET: "not asked".
A fact that cannot be learned (a refusal, a timeout) is recorded as "not learned: why": the facts
describe the store, they never fail the job that gathers them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ingest.errors import IngestError
from ingest.transports.httpbody import s3_error_code
from ingest.transports.presign import parse_s3_uri

# boto3's names of the checksums a HEAD with ChecksumMode=ENABLED can return, by algorithm.
_CHECKSUM_FIELDS = {"CRC32": "ChecksumCRC32", "CRC32C": "ChecksumCRC32C", "CRC64NVME": "ChecksumCRC64NVME",
                    "SHA1": "ChecksumSHA1", "SHA256": "ChecksumSHA256"}
_ERROR_DETAIL_BYTES = 1024  # of a refused reply's body: enough for its S3 error code
NOT_ASKED_PROBE = "not asked (--no-probe)"
NOT_ASKED_PRESIGNED = "not asked (a presigned URL is signed for GET only: no HEAD)"
NOT_ASKED_LOCAL = "not asked (a local file has no store)"


@dataclass(frozen=True)
class StoreFacts:
    """What the store answered. Each fact has its value and `*_from`: the request that showed it,
    or why it is unknown ("not asked (...)", "not learned: ...")."""

    method: str  # s3, presigned or posix
    endpoint: str | None
    server: str | None  # the Server header; "" when the store sent none; None when not seen
    server_from: str
    checksums: dict | None  # algorithm -> stored value (base64), {} when none; None when not asked
    checksum_type: str | None  # FULL_OBJECT or COMPOSITE, when the store says
    checksums_from: str
    past_end_status: int | None  # HTTP status of a 1-byte ranged GET at the object's size
    past_end: str  # e.g. "416 InvalidRange", "200 whole object (1200 bytes)"
    past_end_from: str
    requests: int = 0  # requests made to learn these (the transport's own first reply not counted)

    @property
    def crc32(self) -> str | None:
        """The object's stored CRC32 (base64), or None (none stored, or not asked)."""
        return (self.checksums or {}).get("CRC32")

    def as_dict(self) -> dict:
        return {**asdict(self), "crc32": self.crc32}


def learn_store_facts(transport, *, past_end: bool = True) -> StoreFacts:
    """The store's facts as seen through `transport` (open, on the object being read); past_end:
    make the 1-byte GET at the object's size (False with --no-probe)."""
    if transport.name == "s3":
        return _s3_facts(transport, past_end)
    if transport.name == "presigned":
        return _presigned_facts(transport, past_end)
    return StoreFacts(transport.name, None, None, NOT_ASKED_LOCAL, None, None, NOT_ASKED_LOCAL, None,
                      NOT_ASKED_LOCAL, NOT_ASKED_LOCAL)


# ------------------------------------------------------------------ the S3 API

def _s3_facts(transport, past_end: bool) -> StoreFacts:
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = parse_s3_uri(getattr(transport, "s3_uri", transport.source))  # the native engine's holds a URL
    client = _client_of(transport)
    size = transport.object_bytes
    requests, checksum_type = 1, None
    try:
        head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        headers = head["ResponseMetadata"].get("HTTPHeaders", {})
        checksums = {name: head[boto_name] for name, boto_name in _CHECKSUM_FIELDS.items() if head.get(boto_name)}
        checksum_type = head.get("ChecksumType")
        server, server_from = headers.get("server", ""), "HEAD of the object"
        checksums_from = "HEAD with ChecksumMode=ENABLED"
    except ClientError as exc:
        checksums, server, server_from = None, _client_error_server(exc), "HEAD of the object (refused)"
        checksums_from = f"not learned: HEAD with ChecksumMode=ENABLED answered {_client_error_text(exc)}"
    except BotoCoreError as exc:
        checksums, server, server_from = None, None, f"not learned: HEAD failed: {type(exc).__name__}"
        checksums_from = server_from
    status, answer, answer_from = None, NOT_ASKED_PROBE, NOT_ASKED_PROBE
    if past_end:
        requests += 1
        rng = f"bytes={size}-{size}"
        answer_from = f"GET Range: {rng} (the object is {size} bytes)"
        try:
            resp = client.get_object(Bucket=bucket, Key=key, Range=rng)
            status = resp["ResponseMetadata"]["HTTPStatusCode"]
            resp["Body"].close()  # never stream what a store that ignores the range would send
            answer = _answer_text(status, "", resp.get("ContentRange"), resp.get("ContentLength"))
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            answer = _client_error_text(exc)
        except BotoCoreError as exc:
            answer, answer_from = f"not learned: {type(exc).__name__}", f"{answer_from}, failed"
    return StoreFacts("s3", transport.endpoint, server, server_from, checksums, checksum_type, checksums_from,
                      status, answer, answer_from, requests)


def _client_of(transport):
    """The boto3 client the transport reads (or, for the native engine, signs) with: no new client
    (making one costs 0.1-0.2 s), the same endpoint, keys, CA and proxy."""
    client = getattr(transport, "_client", None)
    if client is not None:
        return client
    from ingest.transports.s3client import shared_s3_client

    return shared_s3_client(environment=transport.environment)  # the one the native engine signs with


def _client_error_text(exc) -> str:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return f"{status} {exc.response.get('Error', {}).get('Code', '')}".rstrip()


def _client_error_server(exc) -> str:
    return exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("server", "")


# ------------------------------------------------------------------ a presigned URL

def _presigned_facts(transport, past_end: bool) -> StoreFacts:
    info = transport.info
    server, server_from = info.server, "the transport's first ranged GET"
    size, requests = info.object_bytes, 0
    status, answer, answer_from = None, NOT_ASKED_PROBE, NOT_ASKED_PROBE
    if past_end:
        requests = 1
        answer_from = f"GET Range: bytes={size}-{size} (the object is {size} bytes)"
        try:
            # The transport's own request: its pool, CA, proxy and If-Match pin.
            resp = transport._get(transport.source, size, 1)
        except IngestError as exc:
            answer = f"not learned: {exc}"
        else:
            status = resp.status
            detail = ""
            if status not in (200, 206):  # an error's body names its code; a 200 is the whole object
                detail = resp.read(_ERROR_DETAIL_BYTES, decode_content=True).decode("utf-8", "replace")
            answer = _answer_text(status, s3_error_code(detail), resp.headers.get("Content-Range"),
                                  resp.headers.get("Content-Length"))
            if server is None:
                server, server_from = resp.headers.get("Server", ""), "the GET past the end"
            resp.close()  # not read to its end: the connection is not reused
            resp.release_conn()
    if server is None:
        server_from = "not seen (the object's size was adopted, and no request was made here)"
    return StoreFacts("presigned", transport.endpoint, server, server_from, None, None, NOT_ASKED_PRESIGNED,
                      status, answer, answer_from, requests)


def _answer_text(status: int, code: str, content_range: str | None, content_length) -> str:
    """A reply to the GET past the end, in words: what a reader of the report needs to know."""
    if status == 200:
        return f"200 whole object ({content_length} bytes; not read)"
    if status == 206:
        return f"206 {content_range or 'without Content-Range'}"
    return f"{status} {code}".rstrip()


# ------------------------------------------------------------------ words (pure)

def describe(facts: dict) -> list[tuple[str, str]]:
    """(label, text) lines of a facts record (StoreFacts.as_dict, or a report's `store`), for
    `info` and the report's summary; each text ends with the request that showed it, in [ ]."""
    server = facts.get("server")
    server_text = "unknown" if server is None else (server or "none sent")
    checksums = facts.get("checksums")
    if checksums is None:  # not asked, or not learned: the reason is the whole answer
        crc_text = facts.get("checksums_from", "")
    else:
        kind = f" ({facts['checksum_type']})" if facts.get("checksum_type") else ""
        others = ", ".join(f"{k} {v}" for k, v in checksums.items() if k != "CRC32")
        crc_text = f"yes: {checksums['CRC32']}" if "CRC32" in checksums else "none"
        crc_text += (f"; also stored: {others}" if others else "") + f"{kind}  [{facts.get('checksums_from')}]"
    past_end, past_end_from = facts.get("past_end", ""), facts.get("past_end_from", "")
    return [("server header", f"{server_text}  [{facts.get('server_from')}]"),
            ("stored CRC32", crc_text),
            ("ranged GET past the end", past_end if past_end == past_end_from else f"{past_end}  [{past_end_from}]")]


def summary_line(facts: dict) -> str:
    """One line for the run report's summary: the store's three answers."""
    return "store: " + "; ".join(f"{label} {text.split('  [')[0]}" for label, text in describe(facts))
