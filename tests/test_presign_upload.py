"""Presigned URLs, part-size choice, upload and byte-size parsing, against the real versitygw."""
from __future__ import annotations

import math
import os
import time
from datetime import datetime, timedelta, timezone

import pytest
import urllib3
from botocore.config import Config
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import cli
from ingest.errors import ConfigError, IngestError, TransportError
from ingest.transports.presign import parse_s3_uri, presign_url, url_expiry
from ingest.redact import redact_url
from ingest.units import GiB, MiB, TiB, format_bytes, parse_bytes
from ingest.staging.upload import (MAX_PART_BYTES, MAX_PARTS, MIN_PART_BYTES, choose_part_bytes,
                           upload_file)

HTTP = urllib3.PoolManager(retries=False)


@pytest.fixture
def obj(s3_server, s3_bucket):
    """(bucket, key, data): a 1000-byte object with distinct bytes at every offset mod 251."""
    data = bytes(i % 251 for i in range(1000))
    s3_server.client().put_object(Bucket=s3_bucket, Key="cube.fits", Body=data)
    return s3_bucket, "cube.fits", data


# -- presigned URLs against the real server --------------------------------------------------
def test_presigned_range_get_gives_206_and_content_range(s3_server, obj):
    bucket, key, data = obj
    url = presign_url(bucket, key, expires_s=60, client=s3_server.client())
    reply = HTTP.request("GET", url, headers={"Range": "bytes=100-199"})
    assert reply.status == 206
    assert reply.headers["Content-Range"] == f"bytes 100-199/{len(data)}"
    assert reply.data == data[100:200]


def test_tampered_signature_is_refused(s3_server, obj):
    bucket, key, _ = obj
    url = presign_url(bucket, key, expires_s=60, client=s3_server.client())
    last = url[-1]
    tampered = url[:-1] + ("0" if last != "0" else "1")
    assert HTTP.request("GET", tampered, headers={"Range": "bytes=0-9"}).status == 403


def test_expired_url_is_refused(s3_server, obj):
    bucket, key, _ = obj
    url = presign_url(bucket, key, expires_s=1, client=s3_server.client())
    time.sleep(2)
    assert HTTP.request("GET", url, headers={"Range": "bytes=0-9"}).status == 403


def test_sigv2_client_is_refused_before_handing_out_a_url(s3_server, obj):
    bucket, key, _ = obj
    v2 = s3_server.client(config=Config(signature_version="s3"))
    raw = v2.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=60)
    assert "Signature=" in raw and "X-Amz-Signature" not in raw
    assert HTTP.request("GET", raw).status == 400  # what versitygw does with SigV2 (INFRA.md)
    with pytest.raises(ConfigError, match="SigV2"):
        presign_url(bucket, key, client=v2)


def test_presign_cli_uses_boto3_chain(s3_env, obj, capsys):
    bucket, key, data = obj
    assert cli.main(["presign", f"s3://{bucket}/{key}", "--expires-s", "120"]) == 0
    url = capsys.readouterr().out.strip()
    assert url.startswith(s3_env["AWS_ENDPOINT_URL"]) and "X-Amz-Expires=120" in url
    assert HTTP.request("GET", url).data == data


@pytest.mark.parametrize("bad", [0, -5, 604801, 1.5, "60", True, None])
def test_expires_s_out_of_range_names_field(bad):
    with pytest.raises(ConfigError, match="expires_s"):
        presign_url("b", "k", expires_s=bad, client=object())


def test_presign_cli_bad_expiry_is_user_error(capsys):
    assert cli.main(["presign", "s3://bucket/key", "--expires-s", "0"]) == 1
    assert "expires_s" in capsys.readouterr().err


# -- expiry and redaction (no server needed) ---------------------------------------------------
def test_url_expiry_sigv4(s3_server):
    before = datetime.now(timezone.utc).replace(microsecond=0)
    url = presign_url("bucket", "a/b.fits", expires_s=3600, client=s3_server.client())
    expiry = url_expiry(url)
    assert before + timedelta(seconds=3600) <= expiry <= datetime.now(timezone.utc) + timedelta(seconds=3600)


def test_url_expiry_sigv4_by_hand():
    url = ("https://acacia.example/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240102T030405Z"
           "&X-Amz-Expires=86400&X-Amz-Signature=ab")
    assert url_expiry(url) == datetime(2024, 1, 3, 3, 4, 5, tzinfo=timezone.utc)


def test_url_expiry_sigv2():
    url = "https://acacia.example/b/k.fits?AWSAccessKeyId=AKIDEXAMPLE&Expires=1700000000&Signature=abc%2Bd%3D"
    assert url_expiry(url) == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)


def test_url_expiry_none_and_malformed():
    assert url_expiry("https://host/b/k") is None
    with pytest.raises(ConfigError, match="X-Amz-Date"):
        url_expiry("https://host/b/k?X-Amz-Date=yesterday&X-Amz-Expires=60")
    with pytest.raises(ConfigError, match="Expires"):
        url_expiry("https://host/b/k?Expires=soon&Signature=x")


def test_redact_url_hides_signature_and_credentials(s3_server):
    url = presign_url("bucket", "dir/cube.fits", expires_s=60, client=s3_server.client())
    redacted = redact_url(url)
    assert redacted == f"{s3_server.endpoint_url}/bucket/dir/cube.fits?<redacted>"
    for secret in ("Signature", "Credential", s3_server.access_key, url.rsplit("=", 1)[1]):
        assert secret not in redacted
    assert redact_url("https://user:pw@host:9000/b/k?Expires=1&Signature=s") == "https://host:9000/b/k?<redacted>"
    assert redact_url("https://host/b/k") == "https://host/b/k"


@pytest.mark.parametrize("uri, expected", [
    ("s3://bucket/key", ("bucket", "key")),
    ("s3://my.bucket/dir/sub/cube.fits", ("my.bucket", "dir/sub/cube.fits")),
    ("s3://bkt/odd?name#1", ("bkt", "odd?name#1")),
])
def test_parse_s3_uri(uri, expected):
    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize("uri, message", [
    ("https://host/b/k", "s3://bucket/key"), ("s3://", "no bucket"), ("s3:///key", "no bucket"),
    ("s3://bucket", "no object key"), ("s3://bucket/", "no object key"), ("s3://a b/k", "not a valid"),
])
def test_parse_s3_uri_errors_name_the_uri(uri, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_s3_uri(uri)
    assert repr(uri) in str(info.value)


# -- part size -------------------------------------------------------------------------------
@settings(max_examples=500)
@given(st.integers(min_value=0, max_value=5 * TiB))
def test_default_part_size_fits_every_limit(object_bytes):
    part = choose_part_bytes(object_bytes)
    assert MIN_PART_BYTES <= part <= MAX_PART_BYTES
    assert part % MiB == 0
    assert math.ceil(object_bytes / part) <= MAX_PARTS
    assert choose_part_bytes(object_bytes, part) == part  # the default passes its own check


@given(st.integers(min_value=0, max_value=5 * TiB), st.integers(min_value=0, max_value=6 * GiB))
def test_requested_part_size_is_kept_or_refused(object_bytes, requested):
    try:
        part = choose_part_bytes(object_bytes, requested)
    except ConfigError as exc:
        assert "part_bytes" in str(exc)
        assert (requested < MIN_PART_BYTES or requested > MAX_PART_BYTES
                or math.ceil(object_bytes / requested) > MAX_PARTS)
    else:
        assert part == requested and math.ceil(object_bytes / part) <= MAX_PARTS


def test_seed_001_tiny_chunks_for_800_gb_fail_before_upload(tmp_path):
    with pytest.raises(ConfigError, match=r"part_bytes.*minimum"):
        choose_part_bytes(800 * 10**9, 8800)  # MinIO's 8.8 kB default: ~910,000 parts
    with pytest.raises(ConfigError, match=r"part_bytes.*10000 parts"):
        choose_part_bytes(800 * 10**9, 5 * MiB)
    assert choose_part_bytes(800 * 10**9) == 77 * MiB  # 80 MB per part, rounded up to a MiB
    # upload_file checks before it touches the client (object() would fail on any call).
    path = tmp_path / "f"
    path.write_bytes(b"x")
    with pytest.raises(ConfigError, match="part_bytes"):
        upload_file(str(path), "s3://bkt/k", part_bytes=1 * MiB, client=object())


def test_part_size_limits():
    assert choose_part_bytes(0) == 64 * MiB
    assert choose_part_bytes(5 * TiB) == 525 * MiB
    with pytest.raises(ConfigError, match="object_bytes"):
        choose_part_bytes(5 * TiB + 1)
    with pytest.raises(ConfigError, match=r"part_bytes.*maximum"):
        choose_part_bytes(10 * GiB, 5 * GiB + 1)


# -- upload against the real server ----------------------------------------------------------
def test_upload_20_mib_multipart_round_trips(s3_server, s3_bucket, tmp_path):
    data = os.urandom(20 * MiB + 12345)
    path = tmp_path / "cube.fits"
    path.write_bytes(data)
    client = s3_server.client()
    result = upload_file(str(path), f"s3://{s3_bucket}/up/cube.fits", part_bytes=5 * MiB,
                         concurrency=4, progress=False, client=client)
    assert (result.object_bytes, result.part_bytes, result.n_parts) == (len(data), 5 * MiB, 5)
    assert result.etag.endswith("-5")  # multipart ETag: md5-of-part-md5s "-" part count
    assert result.integrity["object"] == "ETag matched the MD5 of the parts sent (ingest-checked)"  # ingest computed it
    assert client.get_object(Bucket=s3_bucket, Key="up/cube.fits")["Body"].read() == data


def test_upload_cli_with_suffix(s3_env, s3_server, s3_bucket, tmp_path, capsys):
    data = os.urandom(6 * MiB)
    path = tmp_path / "small.bin"
    path.write_bytes(data)
    uri = f"s3://{s3_bucket}/small.bin"
    assert cli.main(["upload", str(path), uri, "--part-bytes", "5MiB", "--no-progress"]) == 0
    assert "2 part(s) of 5 MiB" in capsys.readouterr().out
    head = s3_server.client().head_object(Bucket=s3_bucket, Key="small.bin")
    assert head["ContentLength"] == len(data) and head["ETag"].strip('"').endswith("-2")


def test_upload_errors_name_what_is_wrong(s3_server, tmp_path, capsys):
    with pytest.raises(IngestError, match="nowhere.bin"):
        upload_file(str(tmp_path / "nowhere.bin"), "s3://bkt/k", client=object())
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    with pytest.raises(ConfigError, match="concurrency"):
        upload_file(str(path), "s3://bkt/k", concurrency=0, client=object())
    with pytest.raises(TransportError, match="s3://no-such-bucket-here/k"):
        upload_file(str(path), "s3://no-such-bucket-here/k", progress=False, client=s3_server.client())
    assert cli.main(["upload", str(path), "s3://bkt/k", "--part-bytes", "64M"]) == 1
    assert "part_bytes" in capsys.readouterr().err


# -- byte sizes ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("100", 100), (100, 100), ("64MiB", 64 * MiB), ("1GiB", GiB), ("5 MiB", 5 * MiB), ("1.5KiB", 1536),
    ("500MB", 500 * 10**6), ("2tib", 2 * TiB), ("0", 0), ("7B", 7),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text, "part_bytes") == expected


@pytest.mark.parametrize("text", ["", "abc", "-5", -5, "64M", "1.3B", "12 XB", "1e6", True, "5 MiB extra"])
def test_parse_bytes_errors_name_the_field(text):
    with pytest.raises(ConfigError, match="^chunk_bytes: "):
        parse_bytes(text, "chunk_bytes")


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(5 * MiB) == "5 MiB"
    assert format_bytes(1.5 * GiB) == "1.5 GiB"
    assert format_bytes(5 * TiB) == "5 TiB"


def test_s3_client_routes_config_options_and_keeps_sigv4_path_style():
    from ingest.transports.s3client import s3_client

    client = s3_client(max_pool_connections=20, connect_timeout=3, read_timeout=7, verify=False,
                       region_name="ap-southeast-2", endpoint_url="http://127.0.0.1:9",
                       aws_access_key_id="a", aws_secret_access_key="b", s3={"use_accelerate_endpoint": False})
    cfg = client.meta.config
    assert (cfg.signature_version, cfg.s3["addressing_style"]) == ("s3v4", "path")
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.max_pool_connections) == (3, 7, 20)
    url = client.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "k"}, ExpiresIn=5)
    assert url.startswith("http://127.0.0.1:9/bkt/k?") and "ap-southeast-2" in url
