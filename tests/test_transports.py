"""One contract, every transport: size, exact ranges, bounds, concurrency; plus the checks on
what a server answers (a Range ignored, the wrong Content-Range, a short body)."""
import os
import threading

import pytest

from ingest.errors import RangeNotSupportedError, TransportError
from ingest.transports.presign import presign_url
from ingest.transports import MemoryTransport, open_transport
from tests.badhttp import BadHttpServer

OBJECT = os.urandom(3 * 1024 * 1024 + 17)  # not a multiple of anything
pytestmark = pytest.mark.usefixtures("engine")  # every test over each HTTP engine (conftest)


@pytest.fixture(scope="module")
def stored(s3_server, tmp_path_factory):
    """The same object as a file, an S3 object and a presigned URL."""
    path = tmp_path_factory.mktemp("obj") / "object.bin"
    path.write_bytes(OBJECT)
    bucket = s3_server.make_bucket("contract-bucket")
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="dir/object.bin", Body=OBJECT)
    url = presign_url(bucket, "dir/object.bin", expires_s=3600, client=client)
    return {"posix": str(path), "s3": f"s3://{bucket}/dir/object.bin", "presigned": url}


@pytest.fixture(params=["memory", "posix", "presigned", "s3"])
def transport(request, stored, s3_env):
    if request.param == "memory":
        t = MemoryTransport(OBJECT, threads=4)
    else:
        t = open_transport(stored[request.param], request.param, threads=4)
    yield t
    t.close()


def test_size(transport):
    assert transport.object_bytes == len(OBJECT)


@pytest.mark.parametrize("offset, nbytes", [(0, 1), (0, 2880), (12345, 1 << 20), (len(OBJECT) - 1, 1), (0, len(OBJECT))])
def test_exact_ranges(transport, offset, nbytes):
    buf = bytearray(nbytes)
    transport.read_into(memoryview(buf), offset)
    assert bytes(buf) == OBJECT[offset : offset + nbytes]


def test_range_past_the_end_is_an_error(transport):
    with pytest.raises(TransportError):
        transport.read_into(memoryview(bytearray(10)), len(OBJECT) - 5)


def test_concurrent_reads_share_one_transport(transport):
    errors, pieces = [], {}

    def read(k):
        try:
            buf = bytearray(100_000)
            transport.read_into(memoryview(buf), k * 100_000)
            pieces[k] = bytes(buf)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(pieces[k] == OBJECT[k * 100_000 : (k + 1) * 100_000] for k in range(16))


def test_unknown_method_and_mismatched_source(stored):
    from ingest.errors import ConfigError

    with pytest.raises(ConfigError, match="method: 'ftp'"):
        open_transport(stored["posix"], "ftp")
    with pytest.raises(ConfigError, match="method: 's3' cannot read"):
        open_transport(stored["posix"], "s3")


def test_missing_objects_name_the_object(s3_env, stored):
    with pytest.raises(TransportError, match="nope.bin"):
        open_transport("/no/such/dir/nope.bin").object_bytes
    with pytest.raises(TransportError, match="contract-bucket/nope.bin.*404"):
        open_transport("s3://contract-bucket/nope.bin").object_bytes


def test_tampered_presigned_url_is_403_without_leaking_the_signature(stored):
    url = stored["presigned"].replace("X-Amz-Signature=", "X-Amz-Signature=0")
    with pytest.raises(TransportError, match="HTTP 403") as err:
        open_transport(url).object_bytes
    signature = url.rsplit("X-Amz-Signature=", 1)[1]
    assert signature not in str(err.value) and "X-Amz-Credential" not in str(err.value)
    assert "SignatureDoesNotMatch" in str(err.value)  # the server's reason, in words


BIG = os.urandom(32 << 20)


def test_server_ignoring_range_is_refused_before_streaming():
    with BadHttpServer(BIG) as server:
        server.mode = "ignore_range"
        t = open_transport(server.url)
        with pytest.raises(RangeNotSupportedError, match="ignored the Range header"):
            t.read_into(memoryview(bytearray(1000)), 0)
        t.close()
        # The client hung up on the 200: the server got nowhere near sending the whole object.
        assert server.bytes_sent < len(BIG) // 2


def test_wrong_content_range_is_refused():
    with BadHttpServer(BIG[:100_000]) as server:
        t = open_transport(server.url)
        assert t.object_bytes == 100_000
        server.mode = "wrong_range"
        with pytest.raises(TransportError, match="asked for bytes 10-19 but the server sent 11-20"):
            t.read_into(memoryview(bytearray(10)), 10)


def test_an_interim_replys_headers_do_not_count():
    with BadHttpServer(BIG[:100_000]) as server:
        server.mode, server.etag = "interim", '"final"'
        t = open_transport(server.url)
        assert t.object_bytes == 100_000 and t.info.etag == '"final"'
        buffer = bytearray(5000)
        t.read_into(memoryview(buffer), 700)
        assert buffer == BIG[700:5700]
        t.close()


def test_short_body_is_an_error_not_short_data():
    with BadHttpServer(BIG[:100_000]) as server:
        t = open_transport(server.url)
        t.object_bytes
        server.mode = "short_body"
        with pytest.raises(TransportError, match="of 5000 bytes"):
            t.read_into(memoryview(bytearray(5000)), 0)
