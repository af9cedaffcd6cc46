"""What an upload's integrity claim rests on, checked on the store it ran against.

Three facts, each recorded as what was observed, never as what was asked for (the `integrity`
record of `upload` and `publish`):
- parts: the checksum each part carried and whether the store is known to verify it.
  Content-MD5 is verified by every store ingest meets (a wrong one is BadDigest on versitygw,
  Ceph RGW and AWS); a CRC32 header is verified by AWS and versitygw but stored unchecked by
  Ceph RGW Pacific. Whatever the store did, ingest compares each part's ETag with the MD5 of the
  bytes it sent (on these stores a part's ETag is its MD5), so a part damaged on the way is caught
  by the store or by ingest, and the error names the part.
- object: after completion a HEAD of the object: its ETag must be the multipart ETag of the
  parts ingest sent (the MD5 of their MD5s, "-N"), and the composite CRC32 where the store
  returns one. This holds on stores that return an empty ETag on completion (RGW) and on stores
  that never checked a part's checksum. Where the ETag is not an MD5 (SSE-KMS, SSE-C) it is
  reported as not checked rather than claimed.
- guard: whether an object appearing at the key meanwhile would have been refused. ingest sends
  `If-None-Match: *` on completion, but RGW Pacific ignores it; the record says "honoured" only
  when this store was seen to refuse a conditional completion over an existing object (a probe).
"""
from __future__ import annotations

import base64
import hashlib
import uuid

from ingest.errors import RetryableError, TransportError

CONTENT_MD5 = "Content-MD5 (store-verified)"
CRC32_ONLY = "CRC32 (verified by AWS and versitygw, not by every store: Ceph RGW Pacific stores it unchecked)"
GUARD_NONE_OVERWRITE = "none: overwrite asked to replace any object at the key"
GUARD_NONE_UPLOAD = "none: upload replaces any object at the key"
_HONOURED = "If-None-Match honoured (probe: the store refused a conditional completion over an existing object)"
_IGNORED = ("unguarded: the store ignored If-None-Match on completion (probe); the key was checked by HEAD "
            "before the upload only")


def md5_hex(buffer) -> str:
    """The MD5 of a part's bytes, hex (what the stores above give as a part's ETag)."""
    return hashlib.md5(buffer, usedforsecurity=False).hexdigest()


def b64_to_hex(md5_b64: str) -> str:
    """A Content-MD5 (base64) as the hex an ETag spells."""
    return base64.b64decode(md5_b64).hex()


def multipart_etag(part_md5s: list[str]) -> str:
    """The ETag S3 gives a completed multipart object: MD5 of the parts' binary MD5s, '-N'."""
    joined = b"".join(bytes.fromhex(m) for m in part_md5s)
    return f"{md5_hex(joined)}-{len(part_md5s)}"


def etag_is_not_md5(reply: dict) -> str | None:
    """Why a reply's (or HEAD's) ETag is not an MD5 of the bytes, or None: SSE-KMS and SSE-C
    objects get other ETags on AWS, so comparing them would fail every honest upload."""
    sse = str(reply.get("ServerSideEncryption") or reply.get("x-amz-server-side-encryption") or "")
    if sse.startswith("aws:kms"):
        return f"encrypted with {sse}, whose ETag is not an MD5"
    if reply.get("SSECustomerAlgorithm") or reply.get("x-amz-server-side-encryption-customer-algorithm"):
        return "encrypted with a customer key (SSE-C), whose ETag is not an MD5"
    return None


def check_part_etag(what: str, etag: str, md5: str, reply: dict) -> None:
    """Raise when a stored part's ETag is not the MD5 of the bytes sent (damaged on the way, on a
    store that did not verify the checksum it was given); nothing when the ETag is not an MD5."""
    got = (etag or "").strip('"')
    if got != md5 and etag_is_not_md5(reply) is None:
        raise RetryableError(f"{what}: the store's ETag {got or '(none)'} is not {md5}, the MD5 of the bytes sent: "
                             f"the part was damaged on the way", kind="BadDigest")


def parts_record(sent: list[str | None]) -> str:
    """The record's `parts`: what the store was given to verify, per kind of part (`sent` per part:
    "Content-MD5", "CRC32", or None for a part found stored by a resumed upload)."""
    names = {"Content-MD5": CONTENT_MD5, "CRC32": CRC32_ONLY,
             None: "stored by an earlier run: checked against the bytes by ingest on resume"}
    counts = {kind: sent.count(kind) for kind in dict.fromkeys(sent)}
    if len(counts) == 1:
        return names[next(iter(counts))]
    return "; ".join(f"{n} part(s): {names[kind]}" for kind, n in counts.items())


def part_etags_record(etags: list[str], md5s: list[str]) -> str:
    """The record's `part_etags`: how many parts' ETags matched the MD5 ingest computed."""
    matched = sum((e or "").strip('"') == m for e, m in zip(etags, md5s))
    if matched == len(md5s):
        return f"all {len(md5s)} matched the MD5 of the bytes sent (ingest-checked)"
    return f"{matched} of {len(md5s)} matched; the others are not MD5s (encrypted object)"


def check_object(client, bucket: str, key: str, part_md5s: list[str] | None, object_bytes: int, *,
                 composite: tuple[str, str] | None = None, single_put: bool = False) -> tuple[dict, str]:
    """HEAD the completed object and check it: size, ETag against the parts ingest sent, and the
    composite CRC32 (given, want) where the store returned one. Returns (HEAD reply, the record's
    `object`). A mismatch deletes the object (it is not what was uploaded) and raises, naming it."""
    uri = f"s3://{bucket}/{key}"
    head = client.head_object(Bucket=bucket, Key=key)
    etag = head.get("ETag", "").strip('"')
    problems, checks = [], []
    if head.get("ContentLength") != object_bytes:
        problems.append(f"it is {head.get('ContentLength')} bytes, ingest sent {object_bytes}")
    hidden = etag_is_not_md5(head)
    if part_md5s is None:
        checks.append("ETag not checked: the parts' MD5s were not seen")
    elif hidden:
        checks.append(f"ETag not checked: {hidden}")
    else:
        want = part_md5s[0] if single_put else multipart_etag(part_md5s)
        if etag != want:
            problems.append(f"its ETag is {etag or '(none)'}, the parts ingest sent make {want}")
        else:
            checks.append("ETag matched the MD5 of the parts sent (ingest-checked)")
    if composite is not None:
        given, want = composite
        if given != want:
            problems.append(f"its composite CRC32 is {given}, the parts' is {want}")
        else:
            checks.append("composite CRC32 matched")
    if problems:
        try:
            client.delete_object(Bucket=bucket, Key=key)
            fate = "it was deleted"
        except Exception as exc:  # noqa: BLE001 - the mismatch is the error; the failed delete is told with it
            fate = f"deleting it failed too ({exc}): delete it by hand"
        raise TransportError(f"{uri}: the stored object is not what was uploaded: {'; '.join(problems)}; {fate}")
    return head, "; ".join(checks)


def probe_guard(client, bucket: str, key: str) -> str:
    """Does this store honour `If-None-Match: *` on CompleteMultipartUpload? Tried on a probe key
    beside `key` (an empty object, then a one-byte upload completed over it with the condition),
    which is deleted afterwards: RGW honours the condition on PutObject but not on completion, so
    only the completion itself tells. Returns the record's `guard`; a failing probe says unguarded."""
    from botocore.exceptions import ClientError

    probe = f"{key}.ingest-guard-probe-{uuid.uuid4().hex[:12]}"
    upload_id = None
    try:
        client.put_object(Bucket=bucket, Key=probe, Body=b"")
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=probe)["UploadId"]
        part = client.upload_part(Bucket=bucket, Key=probe, UploadId=upload_id, PartNumber=1, Body=b"p")
        try:
            client.complete_multipart_upload(Bucket=bucket, Key=probe, UploadId=upload_id, IfNoneMatch="*",
                                             MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
            upload_id, guard = None, _IGNORED
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = exc.response.get("Error", {}).get("Code", "")
            guard = _HONOURED if status == 412 else f"unguarded: the store answered the probe's conditional " \
                                                    f"completion with {code or status}; HEAD before the upload only"
    except Exception as exc:  # noqa: BLE001 - a probe that cannot run proves nothing: unguarded, said so
        guard = f"unguarded: the If-None-Match probe failed ({type(exc).__name__}: {exc}); HEAD before the upload only"
    finally:
        for cleanup in ((lambda: client.abort_multipart_upload(Bucket=bucket, Key=probe, UploadId=upload_id))
                        if upload_id else None, lambda: client.delete_object(Bucket=bucket, Key=probe)):
            try:
                if cleanup:
                    cleanup()
            except Exception:  # noqa: BLE001 - best effort; the probe key names itself
                pass
    return guard
