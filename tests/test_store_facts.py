"""What each store of the matrix really does (conftest's `any_store`: versitygw and Ceph RGW, over
HTTP and HTTPS), found by asking it: ingest.transports.storefacts' three facts (Server header,
stored CRC32, a ranged GET past the end) as `info` prints them and the run report carries them,
each also checked by a request of the test's own; and the write-side behaviours docs/stores.md
tabulates (CRC32 and Content-MD5 checked or not, CompleteMultipartUpload's ETag, If-None-Match on
completion, the completed object's CRC32, boto3's aws-chunked uploads over HTTPS).

The expected values are the findings: a store that changes its answer fails here by name.
"""
from __future__ import annotations

import base64
import json
import zlib

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from ingest.testbed.synth import write_cube
from ingest.transports import open_transport
from ingest.transports.presign import presign_url
from ingest.transports.s3client import s3_client
from ingest.transports.storefacts import NOT_ASKED_PRESIGNED, NOT_ASKED_PROBE, learn_store_facts
from tests.mpitools import child_env, cli

pytestmark = pytest.mark.timeout(240)

BODY = bytes(range(256)) * 40  # 10240 bytes
PART_BYTES = 5 << 20  # S3's least part size but the last


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


# What each store answered here (versitygw 1.8.0, Ceph RGW 16.2.15 Pacific): the Server header
# ("" = none sent), whether a CRC32 given on upload is kept for a HEAD with ChecksumMode=ENABLED,
# and the reply to a 1-byte ranged GET at the object's size.
EXPECTED = {
    "versitygw": {"server": "VERSITYGW", "crc32_kept": True, "past_end_status": 416, "past_end": "416 InvalidRange"},
    "ceph": {"server": "", "crc32_kept": False, "past_end_status": 416, "past_end": "416 InvalidRange"},
}


def family(store) -> str:
    return store.name.split("-")[0]


@pytest.fixture
def crc_object(any_store):
    """BODY stored with its CRC32 given as a header: (s3 URI, presigned URL)."""
    any_store.client.put_object(Bucket=any_store.bucket, Key="facts/body.bin", Body=BODY, ChecksumCRC32=crc32_b64(BODY))
    return (f"s3://{any_store.bucket}/facts/body.bin",
            presign_url(any_store.bucket, "facts/body.bin", 600, client=any_store.client))


# ------------------------------------------------------------------ the three facts

@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_facts_are_what_the_store_answers(any_store, crc_object, engine, method):
    want = EXPECTED[family(any_store)]
    source = crc_object[0] if method == "s3" else crc_object[1]
    with open_transport(source, engine=engine) as transport:
        facts = learn_store_facts(transport)
    where = f"{any_store.name} {method} {engine}"
    assert facts.server == want["server"], f"{where}: Server header"
    assert facts.past_end_status == want["past_end_status"] and facts.past_end == want["past_end"], \
        f"{where}: ranged GET past the end answered {facts.past_end!r}"
    if method == "s3":
        assert facts.requests == 2, f"{where}: a HEAD and the GET past the end, nothing more"
        assert facts.crc32 == (crc32_b64(BODY) if want["crc32_kept"] else None), f"{where}: stored CRC32"
        assert want["crc32_kept"] or facts.checksums == {}, f"{where}: checksums stored {facts.checksums}"
    else:
        assert facts.requests == 1, f"{where}: the GET past the end alone (the Server header is the open's)"
        assert facts.checksums is None and facts.checksums_from == NOT_ASKED_PRESIGNED

    # The same answers to the test's own requests (boto3, not ingest's code).
    client, bucket = any_store.client, any_store.bucket
    head = client.head_object(Bucket=bucket, Key="facts/body.bin", ChecksumMode="ENABLED")
    assert head["ResponseMetadata"]["HTTPHeaders"].get("server", "") == want["server"]
    assert (head.get("ChecksumCRC32") is not None) == want["crc32_kept"]
    with pytest.raises(ClientError) as refused:
        client.get_object(Bucket=bucket, Key="facts/body.bin", Range=f"bytes={len(BODY)}-{len(BODY)}")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == want["past_end_status"]


def test_no_probe_asks_nothing_past_the_end(any_store, crc_object):
    with open_transport(crc_object[1]) as transport:
        facts = learn_store_facts(transport, past_end=False)
    assert facts.requests == 0 and facts.past_end == NOT_ASKED_PROBE and facts.past_end_status is None
    assert facts.server == EXPECTED[family(any_store)]["server"], f"{any_store.name}: the open's reply names it"


def test_a_local_file_has_no_store(tmp_path):
    path = tmp_path / "body.bin"
    path.write_bytes(BODY)
    with open_transport(str(path)) as transport:
        facts = learn_store_facts(transport)
    assert facts.requests == 0 and facts.server is None and facts.past_end_status is None
    assert facts.past_end.startswith("not asked") and facts.checksums_from.startswith("not asked")


# ------------------------------------------------------------------ info and the report

# A command's output over HTTPS is the same facts (test_facts_are_what_the_store_answers runs
# every store of the matrix): the commands run once per store.
HTTP_ONLY = pytest.mark.parametrize("any_store", ["versitygw-http", "ceph-http"], indirect=True)


@pytest.fixture
def cube_object(any_store, tmp_path):
    path = tmp_path / "cube.fits"
    write_cube(path, (4, 24, 24), -32)
    any_store.client.put_object(Bucket=any_store.bucket, Key="cube.fits", Body=path.read_bytes())
    return f"s3://{any_store.bucket}/cube.fits", path.stat().st_size


@HTTP_ONLY
def test_info_prints_the_store_facts(any_store, cube_object):
    want = EXPECTED[family(any_store)]
    uri, size = cube_object
    env = child_env(**any_store.env)
    proc = cli(["info", uri], env)
    assert proc.returncode == 0, proc.stderr
    server = want["server"] or "none sent"
    assert f"server header            {server}  [HEAD of the object]" in proc.stdout, proc.stdout
    assert f"ranged GET past the end  {want['past_end']}  [GET Range: bytes={size}-{size}" in proc.stdout, proc.stdout
    assert "2 request(s) made to ask" in proc.stdout
    proc = cli(["info", uri, "--no-probe", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    store = json.loads(proc.stdout)["store"]
    assert store["server"] == want["server"] and store["requests"] == 1, store
    assert store["past_end"] == NOT_ASKED_PROBE and store["past_end_status"] is None, store


@HTTP_ONLY
@pytest.mark.parametrize("probe", [True, False], ids=["probe", "no-probe"])
def test_the_report_carries_the_store_facts(any_store, cube_object, tmp_path, probe):
    want = EXPECTED[family(any_store)]
    uri, size = cube_object
    report_path = tmp_path / "report.json"
    proc = cli(["run", "--source", uri, "--report", report_path, "--no-progress", *([] if probe else ["--no-probe"])],
               child_env(**any_store.env))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    store = report.get("store")
    assert store is not None, f"{any_store.name}: the report has no `store` record: {sorted(report)}"
    assert store["server"] == want["server"] and store["method"] == "s3", store
    assert store["crc32"] is None, f"{any_store.name}: ingest uploads with Content-MD5 off AWS, so no CRC32: {store}"
    if probe:
        assert (store["past_end_status"], store["past_end"]) == (want["past_end_status"], want["past_end"]), store
        assert store["requests"] == 2, store
    else:
        assert store["past_end"] == NOT_ASKED_PROBE and store["requests"] == 1, store
    assert "store: server header " in proc.stdout, "the summary names the store's answers"


# ------------------------------------------------------------------ the write side (docs/stores.md)

def _multipart(client, bucket: str, key: str, **complete_kw) -> dict:
    """A two-part upload with a CRC32 header on each part; the completion's reply."""
    parts_body = (b"\x01" * PART_BYTES, b"\x02" * 1000)
    upload = client.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32")
    parts = []
    for number, body in enumerate(parts_body, 1):
        reply = client.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=number, Body=body,
                                   ChecksumCRC32=crc32_b64(body))
        parts.append({"PartNumber": number, "ETag": reply["ETag"], "ChecksumCRC32": crc32_b64(body)})
    return client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"],
                                            MultipartUpload={"Parts": parts}, **complete_kw)


# store -> what it did: a wrong CRC32 header refused (BadDigest) or stored; the completion's ETag
# empty or the object's; the completed object's CRC32 returned; If-None-Match: * on completing
# over an existing key refused (412) or ignored; boto3's default aws-chunked upload over HTTPS.
WRITE_SIDE = {
    "versitygw": {"crc32_checked": True, "completion_etag_empty": False, "composite_crc32": True,
                  "if_none_match_honoured": True, "aws_chunked_accepted": True},
    "ceph": {"crc32_checked": False, "completion_etag_empty": True, "composite_crc32": False,
             "if_none_match_honoured": False, "aws_chunked_accepted": False},
}


def test_write_side_behaviour(any_store):
    want = WRITE_SIDE[family(any_store)]
    client, bucket, name = any_store.client, any_store.bucket, any_store.name
    # One attempt: botocore retries a BadDigest four times, with backoff (5 s a refusal).
    once = s3_client(endpoint_url=any_store.endpoint_url, aws_access_key_id=any_store.server.access_key,
                     aws_secret_access_key=any_store.server.secret_key, region_name=any_store.server.region,
                     retries={"total_max_attempts": 1}, **({"verify": any_store.ca_bundle} if any_store.ca_bundle else {}))

    with pytest.raises(ClientError, match="BadDigest"):  # every store checks Content-MD5
        once.put_object(Bucket=bucket, Key="md5", Body=b"some bytes", ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==")
    try:
        once.put_object(Bucket=bucket, Key="crc", Body=b"some bytes", ChecksumCRC32="AAAAAA==")  # wrong
        crc32_checked = False
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "BadDigest", f"{name}: {exc}"
        crc32_checked = True
    assert crc32_checked == want["crc32_checked"], f"{name}: a wrong x-amz-checksum-crc32"

    done = _multipart(client, bucket, "multi")
    head = client.head_object(Bucket=bucket, Key="multi", ChecksumMode="ENABLED")
    assert (done.get("ETag", "").strip('"') == "") == want["completion_etag_empty"], f"{name}: completion {done}"
    assert head["ETag"].strip('"'), f"{name}: HEAD gives the object's ETag"
    assert (head.get("ChecksumCRC32") is not None) == want["composite_crc32"], f"{name}: HEAD {head}"

    try:
        _multipart(client, bucket, "multi", IfNoneMatch="*")
        honoured = False
    except ClientError as exc:
        assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 412, f"{name}: {exc}"
        honoured = True
    assert honoured == want["if_none_match_honoured"], f"{name}: If-None-Match: * on completion over an existing key"

    if any_store.ca_bundle is not None:  # botocore sends aws-chunked bodies over HTTPS only
        raw = boto3.session.Session().client(
            "s3", endpoint_url=any_store.endpoint_url, verify=any_store.ca_bundle, region_name=any_store.server.region,
            aws_access_key_id=any_store.server.access_key, aws_secret_access_key=any_store.server.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
        assert raw.meta.config.request_checksum_calculation == "when_supported"  # boto3 >= 1.36's default
        try:
            raw.put_object(Bucket=bucket, Key="chunked", Body=b"a body with a CRC32 trailer")
            accepted = True
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "MissingContentLength", f"{name}: {exc}"
            accepted = False
        assert accepted == want["aws_chunked_accepted"], f"{name}: boto3's default upload over HTTPS"
