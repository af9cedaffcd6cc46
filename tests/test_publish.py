"""`publish` against the real versitygw the tests start: regions from every rank written back as one
object, read back by astropy and h5py bit for bit; refusals that leave the store as it was; a
corrupted part refused by the store; a rank killed mid-upload (nothing visible; --resume completes
it); a connection cut behind Toxiproxy. MPI jobs run as real `mpiexec` children.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import sys
import uuid
import warnings

import numpy as np
import pytest
from astropy.io import fits

from tests.mpitools import ROOT, check_root_ledger, child_env, cli, mpiexec, upload_float_cube

pytestmark = pytest.mark.timeout(240)

SHAPE = (64, 256, 320)  # float32, 20 MiB: five 5 MiB parts over three or four ranks
HALO = 4


def _objects(client, bucket, key):
    """(object size or None, unfinished upload ids) at bucket/key."""
    uploads = [u["UploadId"] for u in client.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", [])
               if u["Key"] == key]
    try:
        size = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
    except client.exceptions.ClientError:
        size = None
    return size, uploads


def _body(client, bucket, key) -> bytes:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


@pytest.fixture(scope="module")
def store(s3_server, tmp_path_factory):
    """A bucket, a synthetic cube uploaded to it, and that cube pre-staged (frame, 2x2 grid, halo) by 4 ranks."""
    cube = upload_float_cube(s3_server, tmp_path_factory.mktemp("publish"), "publish", SHAPE)
    staged = cube["work"] / "staged"
    proc, _ = mpiexec(4, ["prestage", "--source", cube["s3"], "--output-dir", staged,
                          "--grid", "2x2x1", "--halo", HALO, "--no-probe", "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {**cube, "staged": str(staged), "client": s3_server.client()}


def publish_job(s3_server, n, args, harness=None, timeout_s=120):
    python_args = ("-m", "ingest") if harness is None else harness
    return mpiexec(n, ["publish", "--no-progress", *args], child_env(s3_server), timeout_s=timeout_s,
                   python_args=python_args)[0]


# ------------------------------------------------------------------ in memory, through the Python API

@pytest.fixture(scope="module")
def api_results(s3_server, store):
    """tests/publish_child.py under mpiexec -n 3: every scenario's read-back, by name."""
    env = child_env(s3_server, AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
    proc, _ = mpiexec(3, [store["bucket"]], env, python_args=(os.path.join(ROOT, "tests", "publish_child.py"),))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return {line["scenario"]: line for line in lines}


def test_api_fits_halo_regions_in_native_order(api_results):
    r = api_results["fits_halo"]
    assert r["equal"] and r["method"] == "s3" and r["parts"] == 3  # poisoned halos: owners' voxels only
    assert (r["object"], r["crpix1"], r["bitpix"]) == ("publish test", 10.0, -32)
    assert r["memory_bound_bytes"] == 2 * r["part_bytes"]  # 2 parts in flight + a send buffer of at most one part


def test_api_presigned_when_ranks_have_no_credentials(api_results):
    assert api_results["presigned"]["method"] == "presigned" and api_results["presigned"]["equal"]


def test_api_four_dimensional_cube(api_results):
    assert api_results["fits_4d"]["equal"] and api_results["fits_4d"]["bitpix"] == 16


def test_api_hdf5_dataset_contiguous_with_its_attributes(api_results):
    r = api_results["hdf5"]
    assert r["equal"] and r["layout"] == 1 and r["dtype"] == "<f4"  # h5d.CONTIGUOUS
    assert (r["bunit"], r["crpix1"]) == ("Jy/beam", 10.0)


# ------------------------------------------------------------------ from files, on the command line

def _check_timeline(facts: dict) -> None:
    """Every rank passed every step, in order, within the job; the summary is the ranks' spread."""
    from ingest.driver.publish import STEPS

    for r in facts["ranks"]:
        at = r["timeline_s"]  # each rank uploaded a part: every step is there
        in_order = [at[name] for name in STEPS if name != "client"]  # made before the plan or after it
        assert in_order == sorted(in_order) and -1.0 < in_order[0] and in_order[-1] <= facts["elapsed_s"] + 1.0, at
        assert at["credentials"] <= at["client"] <= at["first_upload"], at
    for name in STEPS:
        each = sorted(r["timeline_s"][name] for r in facts["ranks"])
        summary = facts["timeline_s"][name]
        assert (summary["first"], summary["last"]) == (each[0], each[-1]) and summary["first"] <= summary["median"] <= summary["last"]
        assert facts["ranks"][summary["last_rank"]]["timeline_s"][name] == summary["last"]
    assert facts["ranks"][0]["timeline_s"]["start"] == 0.0  # counted from rank 0's start


def test_frame_prestage_publishes_the_source_byte_for_byte_then_refuses_to_overwrite(s3_server, store, tmp_path):
    bucket, client = store["bucket"], store["client"]
    report = tmp_path / "publish.json"
    proc = publish_job(s3_server, 4, ["--source", store["staged"], "--dest", f"s3://{bucket}/out/frame.fits",
                                      "--report", report])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _body(client, bucket, "out/frame.fits") == store["bytes"]
    facts = json.loads(report.read_text())
    assert facts["method"] == "s3" and facts["parts"] == 4  # 5 MiB parts made 5; whole waves: one each
    # versitygw verifies Content-MD5 and returns the composite CRC32; tests/test_upload_integrity.py has RGW's record.
    assert facts["integrity"]["parts"] == "Content-MD5 (store-verified)"
    assert facts["integrity"]["object"] == ("ETag matched the MD5 of the parts sent (ingest-checked); "
                                            "composite CRC32 matched")
    assert sum(r["parts_uploaded"] for r in facts["ranks"]) == 4 and all(r["parts_uploaded"] == 1 for r in facts["ranks"])
    check_root_ledger(facts["root"], facts["elapsed_s"], gathers=2)  # the parts' records and the ranks' stats
    _check_timeline(facts)
    etag = client.head_object(Bucket=bucket, Key="out/frame.fits")["ETag"]

    again = cli(["publish", "--source", store["staged"], "--dest", f"s3://{bucket}/out/frame.fits", "--no-progress"],
                child_env(s3_server))  # one process, no mpiexec
    assert again.returncode == 1 and "already exists" in again.stderr and "--overwrite" in again.stderr
    assert client.head_object(Bucket=bucket, Key="out/frame.fits")["ETag"] == etag
    assert _objects(client, bucket, "out/frame.fits")[1] == []  # refused before any upload began


def test_pipeline_region_files_become_one_mask_cube_through_presigned_urls(s3_server, store):
    """A pipeline's per-region outputs (SoFiA-2 style int32 masks, region-sized, halos poisoned)
    published with boxes from the pre-stage manifest, the header from the frame, BITPIX from the masks."""
    from tests.ownership_oracle import owner_labels

    manifest = json.loads(open(os.path.join(store["staged"], "manifest.json")).read())
    boxes = [tuple(tuple(p) for p in r["box"]) for r in manifest["regions"]]
    owner = owner_labels(boxes, SHAPE)  # voxel by voxel, not by the code under test: halos are the neighbours'
    expected = (np.arange(np.prod(SHAPE)) % 7 + 1).astype(">i4").reshape(SHAPE)
    os.makedirs(os.path.join(store["staged"], "masks"), exist_ok=True)
    for i, box in enumerate(boxes):
        region = tuple(slice(a, b) for a, b in box)
        values = expected[region].copy()
        values[owner[region] != i] = -1
        fits.PrimaryHDU(values).writeto(os.path.join(store["staged"], "masks", f"run_{i + 1:03d}_mask.fits"))
    bucket, client = store["bucket"], store["client"]
    proc = publish_job(s3_server, 3, ["--source", store["staged"], "--region-files", "masks/run_{index:03d}_mask.fits",
                                      "--dest", f"s3://{bucket}/out/mask.fits", "--upload-method", "presigned"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    with warnings.catch_warnings(), fits.open(io.BytesIO(_body(client, bucket, "out/mask.fits"))) as f:
        warnings.simplefilter("ignore")
        assert f[0].header["BITPIX"] == 32 and np.array_equal(f[0].data, expected)
        source = fits.getheader(store["path"])
        assert all(f[0].header[k] == source[k] for k in ("CRPIX1", "CTYPE3", "CDELT2"))


def test_unfinished_upload_is_refused_then_discarded_with_overwrite(s3_server, store):
    bucket, client, key = store["bucket"], store["client"], "out/stale.fits"
    stale = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    args = ["publish", "--source", store["staged"], "--dest", f"s3://{bucket}/{key}", "--no-progress"]
    refused = cli(args, child_env(s3_server))
    assert refused.returncode == 1 and stale in refused.stderr and "--resume" in refused.stderr
    assert _objects(client, bucket, key) == (None, [stale])
    done = cli(args + ["--overwrite"], child_env(s3_server))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _objects(client, bucket, key) == (len(store["bytes"]), [])
    assert _body(client, bucket, key) == store["bytes"]


def test_bad_input_names_the_field_and_writes_nothing(s3_server, store, tmp_path):
    bucket = store["bucket"]
    bad_dest = cli(["publish", "--source", store["staged"], "--dest", f"{bucket}/x.fits"], child_env(s3_server))
    assert bad_dest.returncode == 1 and "dest: S3 URI" in bad_dest.stderr
    empty = cli(["publish", "--source", tmp_path, "--dest", f"s3://{bucket}/x.fits"], child_env(s3_server))
    assert empty.returncode == 1 and "nothing to publish" in empty.stderr
    assert _objects(store["client"], bucket, "x.fits") == (None, [])


# ------------------------------------------------------------------ a per-channel beam table

def test_a_cube_with_a_beam_table_is_published_with_it(s3_server, s3_bucket, tmp_path):
    """CASAMBM = T in the header means a BEAMS extension follows the data: publish copies the
    header's cube's table whole (the object is the whole cube), so the claim stays true."""
    from ingest.testbed.synth import beam_rows, write_cube

    shape = (12, 40, 48)
    cutouts = tmp_path / "cutouts"
    cutouts.mkdir()
    cube = cutouts / f"rank0000_x0-{shape[2]}_y0-{shape[1]}_z0-{shape[0]}.fits"
    write_cube(cube, shape, -32, beams=True)
    proc = cli(["publish", "--source", cutouts, "--header-from", cube, "--dest", f"s3://{s3_bucket}/beams.fits",
                "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = _body(s3_server.client(), s3_bucket, "beams.fits")
    with warnings.catch_warnings(), fits.open(io.BytesIO(body)) as got, fits.open(cube) as want:
        warnings.simplefilter("ignore")
        assert got[0].header["CASAMBM"] is True and got[0].header["EXTEND"] is True
        assert np.array_equal(got[0].data, want[0].data)
        assert len(got) == 2 and got[1].header["EXTNAME"] == "BEAMS" and got[1].header["NCHAN"] == shape[0]
        rows = beam_rows(shape[0], 1)
        assert all(np.array_equal(got[1].data[name], rows[name]) for name in rows.dtype.names)
    assert len(body) % 2880 == 0


def test_a_header_claiming_a_beam_table_it_cannot_carry_loses_the_claim():
    """A caller's header (no table at hand) that says CASAMBM = T: the object must not promise it."""
    from ingest.outputs.publish_image import fits_image

    header = fits.Header([("SIMPLE", True), ("BITPIX", -32), ("NAXIS", 3), ("NAXIS1", 4), ("NAXIS2", 3),
                          ("NAXIS3", 2), ("CASAMBM", True)])
    image, text = fits_image(header, (2, 3, 4), np.dtype(">f4"))
    parsed = fits.Header.fromstring(text)
    assert "CASAMBM" not in parsed and parsed["NAXIS3"] == 2
    assert image.object_bytes == 2 * 2880  # header block, data padded to one block: no table


def test_on_a_crowded_machine_the_ranks_make_their_clients_in_turn_and_publish_exactly(s3_server, store, tmp_path):
    """The harness takes this machine as crowded: ranks 1-3 make their clients after the plan, as
    many at a time as the machine has cores, a rank's after the one that many places before it."""
    bucket, key = store["bucket"], "out/crowded.fits"
    report = tmp_path / "crowded.json"
    proc = publish_job(s3_server, 4, ["--source", store["staged"], "--dest", f"s3://{bucket}/{key}", "--report", report],
                       harness=(os.path.join(ROOT, "tests", "mpi_harness_publish.py"), "crowded"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _body(store["client"], bucket, key) == store["bytes"]
    facts = json.loads(report.read_text())
    _check_timeline(facts)
    at = [r["timeline_s"] for r in facts["ranks"]]
    assert all(t["client"] >= t["plan"] for t in at[1:])  # after the plan
    cores = len(os.sched_getaffinity(0))
    for rank in range(1 + cores, 4):  # e.g. on 2 cores rank 3 waits for rank 1
        assert at[rank - cores]["client"] <= at[rank]["client"], at


def test_ranks_make_their_clients_after_the_plan_where_they_outnumber_the_cores_many_times():
    from ingest.core.sharing import Topology
    from ingest.driver.publish import CROWDED_RANKS_PER_CORE, crowded

    def topology(placements):  # each rank's driver.mpi.placement()
        return Topology.of_hosts(*zip(*placements))

    two_cores = ("boot-a", (0, 1))
    many = 2 * CROWDED_RANKS_PER_CORE + 1
    on_two = [(f"n{r % 16}", two_cores) for r in range(many)]  # emulated nodes, one machine
    assert crowded(topology(on_two), 1) and crowded(topology(on_two), many - 1)
    assert not crowded(topology(on_two[:2 * CROWDED_RANKS_PER_CORE]), 1)  # a few ranks a core: all at once
    own_machines = [(f"n{r}", (f"boot-{r}", (0, 1))) for r in range(many)]  # a node each, 2 cores each
    assert not crowded(topology(own_machines), many - 1)


# ------------------------------------------------------------------ the store verifies every part

@pytest.mark.parametrize("presigned", [False, True], ids=["crc32", "content-md5"])
def test_a_corrupted_part_is_refused_by_the_store(s3_env, store, monkeypatch, presigned):
    import ingest.staging.multipart as multipart
    from ingest.transports.retry import RetryPolicy

    bucket, key = store["bucket"], f"corrupt/{presigned}.bin"
    upload = multipart.Upload(multipart.upload_client(2), bucket, key, RetryPolicy(retries=1, backoff_s=0.01))
    upload.create(None if presigned else "CRC32")
    body = np.frombuffer(os.urandom(5 << 20), np.uint8)
    url = upload.presign_part(1, 600) if presigned else None
    uploader = multipart.PartUploader(bucket, key, upload.upload_id, upload.checksum, upload.policy,
                                      presigned=presigned, slots=1, options={})
    real = multipart.md5_b64 if presigned else multipart.crc32_b64
    # The checksum of other bytes: what the store sees when the part is damaged after it was summed.
    monkeypatch.setattr(multipart, "md5_b64" if presigned else "crc32_b64", lambda b: real(bytes(b)[::-1]))
    with pytest.raises(multipart.TransportError, match=rf"s3://{bucket}/{key}: part 1.*BadDigest"):
        uploader.put(1, body, url)
    monkeypatch.undo()
    # Both attempts (the first and its one retry) are counted as failures, with the part's bytes.
    assert uploader.failures() == {"failed_attempts": 2, "failed_bytes": 2 * len(body), "kinds": {"BadDigest": 2}}
    assert uploader.throttle_stats().throttled == 0
    assert upload.parts() == {}  # nothing stored
    record = uploader.put(1, body, url)  # the honest checksum passes
    assert multipart.part_matches(record, body) and list(upload.parts()) == [1]
    upload.abort()


def _fails_once_as_congestion(uploader, body, url, said: str) -> None:
    """A 2-slot uploader with no retries gives the part up after one attempt that ran out of time
    (`said`), counts it as one failure of kind UPLOAD_TIMEOUT and halves its parts in flight."""
    import ingest.staging.multipart as multipart
    from ingest.transports.retry import UPLOAD_TIMEOUT

    with pytest.raises(multipart.TransportError, match=rf"part 1: gave up after 1 attempt.*{said}"):
        uploader.put(1, body, url)
    assert uploader.failures() == {"failed_attempts": 1, "failed_bytes": len(body), "kinds": {UPLOAD_TIMEOUT: 1}}
    seen = uploader.throttle_stats()
    assert (seen.throttled, seen.concurrency_ceiling, seen.concurrency_min) == (1, 2, 1)


@pytest.mark.parametrize("presigned", [False, True], ids=["s3", "presigned"])
def test_a_part_the_store_does_not_answer_in_time_lowers_the_parts_in_flight(s3_env, store, s3_server, toxiproxy,
                                                                             presigned):
    """The body goes, the answer comes after the read timeout (a delay on the way back): the
    attempt is a failure counted as one, and the rank's limiter halves its parts in flight, as for a
    throttle; once answers come in time the same part is stored."""
    import ingest.staging.multipart as multipart
    from ingest.transports.retry import RetryPolicy

    name = f"slow_{uuid.uuid4().hex[:8]}"
    endpoint = f"http://{toxiproxy.create_proxy(name, f'127.0.0.1:{s3_server.port}')}"
    try:
        bucket, key = store["bucket"], f"late/{presigned}.bin"
        upload = multipart.Upload(multipart.upload_client(2, {"endpoint_url": endpoint}), bucket, key,
                                  RetryPolicy(retries=0, backoff_s=0.01))
        upload.create(None if presigned else "CRC32")
        url = upload.presign_part(1, 600) if presigned else None
        uploader = multipart.PartUploader(bucket, key, upload.upload_id, upload.checksum, upload.policy,
                                          presigned=presigned, slots=2,
                                          options={"endpoint_url": endpoint, "read_timeout": 1.0})
        body = np.frombuffer(os.urandom(1 << 20), np.uint8)
        toxiproxy.add_toxic(name, "latency", {"latency": 2500, "jitter": 0}, stream="downstream")
        _fails_once_as_congestion(uploader, body, url, r"no answer came within the read timeout")
        toxiproxy.remove_toxic(name, "latency_downstream")
        record = uploader.put(1, body, url)
        assert multipart.part_matches(record, body) and list(upload.parts()) == [1]
        upload.abort()
    finally:
        toxiproxy.delete_proxy(name)


@contextlib.contextmanager
def _deaf_listener():
    """The URL of a TCP listener nobody reads from: the kernel completes the handshake, a small
    receive buffer fills, and a body sent to it stops in the sockets' buffers, as on an uplink
    shared by more parts than it carries in time."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("presigned", [False, True], ids=["s3", "presigned"])
def test_a_part_whose_body_cannot_be_sent_in_time_lowers_the_parts_in_flight(s3_env, presigned):
    """The socket's send times out with the body half sent (urllib3: ProtocolError; botocore:
    ConnectionClosedError; both libraries time a body's send by the connect timeout): the uplink's
    congestion as much as a late answer is, so the rank's limiter halves its parts in flight, and
    the attempt counts as one failure."""
    import ingest.staging.multipart as multipart
    from ingest.transports.retry import RetryPolicy

    with _deaf_listener() as endpoint:
        url = f"{endpoint}/bucket/key?partNumber=1&uploadId=u"  # the listener answers nothing: no signature needed
        uploader = multipart.PartUploader("bucket", "key", "u", None, RetryPolicy(retries=0, backoff_s=0.01),
                                          presigned=presigned, slots=2,
                                          options={"endpoint_url": endpoint, "connect_timeout": 1.0, "read_timeout": 1.0})
        body = np.zeros(32 << 20, np.uint8)  # more than loopback's socket buffers hold
        _fails_once_as_congestion(uploader, body, url, r"could not be sent within the timeout")


# ------------------------------------------------------------------ failures mid-upload

KILL = (os.path.join(ROOT, "tests", "mpi_harness_publish.py"), "1")


def test_rank_killed_mid_upload_leaves_nothing(s3_server, store):
    bucket, client, key = store["bucket"], store["client"], "out/killed.fits"
    proc = publish_job(s3_server, 3, ["--source", store["staged"], "--dest", f"s3://{bucket}/{key}"], harness=KILL)
    assert proc.returncode != 0
    assert _objects(client, bucket, key) == (None, [])  # rank 0 aborted the upload on the launcher's SIGTERM


def test_rank_killed_with_resume_keeps_the_upload_and_resume_completes_it(s3_server, store, tmp_path):
    bucket, client, key = store["bucket"], store["client"], "out/resumed.fits"
    args = ["--source", store["staged"], "--dest", f"s3://{bucket}/{key}", "--resume"]
    proc = publish_job(s3_server, 3, args, harness=KILL)
    assert proc.returncode != 0
    size, uploads = _objects(client, bucket, key)
    assert size is None and len(uploads) == 1
    stored = client.list_parts(Bucket=bucket, Key=key, UploadId=uploads[0]).get("Parts", [])
    assert len(stored) >= 1  # the killed rank's first part at least
    report = tmp_path / "resume.json"
    again = publish_job(s3_server, 3, args + ["--report", report])
    assert again.returncode == 0, again.stderr[-3000:]
    facts = json.loads(report.read_text())
    assert facts["resumed"] and facts["parts_stored_before"] == len(stored)
    assert sum(r["parts_verified"] for r in facts["ranks"]) == len(stored)
    assert sum(r["parts_uploaded"] for r in facts["ranks"]) == facts["parts"] - len(stored)
    assert _objects(client, bucket, key) == (len(store["bytes"]), [])
    assert _body(client, bucket, key) == store["bytes"]


def test_cut_connection_aborts_then_resume_finishes_after_the_link_heals(s3_server, store, toxiproxy, tmp_path):
    bucket, client, key = store["bucket"], store["client"], "out/cut.fits"
    name = f"publish_{uuid.uuid4().hex[:8]}"
    listen = toxiproxy.create_proxy(name, f"127.0.0.1:{s3_server.port}")
    harness = (os.path.join(ROOT, "tests", "mpi_harness_fault.py"), "1", f"http://{listen}")  # rank 1 via the proxy
    toxiproxy.add_toxic(name, "limit_data", {"bytes": 1 << 20}, stream="upstream")  # every PUT cut at 1 MiB
    args = ["--source", store["staged"], "--dest", f"s3://{bucket}/{key}", "--retries", "1",
            "--retry-backoff-s", "0.05"]
    try:
        failed = publish_job(s3_server, 3, args, harness=harness)
        assert failed.returncode == 1
        assert "rank 1: part" in failed.stderr and f"s3://{bucket}/{key}" in failed.stderr
        assert "the upload was aborted" in failed.stderr
        assert _objects(client, bucket, key) == (None, [])
        kept = publish_job(s3_server, 3, args + ["--resume"], harness=harness)
        assert kept.returncode == 1 and "--resume continues it" in kept.stderr
        assert _objects(client, bucket, key)[0] is None and len(_objects(client, bucket, key)[1]) == 1
        toxiproxy.remove_toxic(name, "limit_data_upstream")
        report = tmp_path / "healed.json"
        healed = publish_job(s3_server, 3, args + ["--resume", "--report", report], harness=harness)
        assert healed.returncode == 0, healed.stderr[-3000:]
        facts = json.loads(report.read_text())
        assert facts["resumed"] and facts["ranks"][1]["parts_uploaded"] >= 1  # the healed rank uploaded its parts
        assert _body(client, bucket, key) == store["bytes"]
    finally:
        toxiproxy.delete_proxy(name)
    assert sys.version_info >= (3, 11)
