"""Issue 4 part 7: no secret is printed, logged, reported or raised; TLS is verified by default;
no secret is ever taken on the command line.

The leak tests run whole jobs through the real CLI (mpiexec -n 4 for run and stage) against the
loopback S3 server and scan everything they leave: stdout, stderr, the JSON reports, every
output FITS file, the staged directory. `presign` alone may print a URL: that is its job.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import traceback
import uuid
import warnings
from urllib.parse import parse_qsl, quote, urlsplit

import numpy as np
import pytest
from astropy.io import fits

from ingest.api.read import read_subcube
from ingest.cli.main import build_parser
from ingest.config import RunConfig, read_config_file
from ingest.errors import ConfigError, IngestError, TransportError
from ingest.transports.presign import presign_url
from ingest.transports.retry import RetryPolicy, read_with_retries
from ingest.testbed.synth import write_cube
from ingest.transports.http import HttpTransport
from tests.mpitools import ROOT, child_env, cli, mpiexec
from tests.tlsserver import TlsServer, make_ca_and_cert

SHAPE = (20, 128, 128)  # numpy order (z, y, x), float32: 1.25 MiB, enough for the link probe to run
N_RANKS = 4
KEY = "survey/secret-cube.fits"
# Shaped like a real STS token: '/', '+' and '=' also show whether a URL-encoded copy leaks.
SESSION_TOKEN = "FwoGZXIvYXdzEIngestTestToken/" + uuid.uuid4().hex + "+Zm9v=="
FAKE_SIGNATURE = "5ec2e7" * 10 + "abcd"  # 64 hex digits, the shape of a SigV4 signature

# Anything shaped like a presigned query or a SigV4 signature, whoever's it is.
_LEAK_PATTERNS = {
    "X-Amz-Signature parameter": re.compile(r"x-amz-signature=", re.I),
    "X-Amz-Credential parameter": re.compile(r"x-amz-credential=", re.I),
    "X-Amz-Security-Token parameter": re.compile(r"x-amz-security-token=", re.I),
    "SigV2 AWSAccessKeyId/Signature parameter": re.compile(r"[?&](awsaccesskeyid|signature)=", re.I),
    "64-hex-digit signature": re.compile(r"(?<![0-9a-fA-F])[0-9a-fA-F]{64}(?![0-9a-fA-F])"),
}


# ------------------------------------------------------------------ helpers


def url_secrets(url: str) -> dict[str, str]:
    """The secret parts of a presigned URL: signature, credential, security token (raw values)."""
    params = dict(parse_qsl(urlsplit(url).query))
    names = {"X-Amz-Signature": "signature", "X-Amz-Credential": "credential",
             "X-Amz-Security-Token": "security token", "Signature": "signature", "AWSAccessKeyId": "access key"}
    return {f"URL {label}": params[name] for name, label in names.items() if params.get(name)}


def leaks(text: str, secrets: dict[str, str], patterns=True) -> list[str]:
    """What in `text` is a known secret (raw or URL-encoded) or shaped like one."""
    found = []
    for name, value in secrets.items():
        for form in {value, quote(value, safe=""), quote(value, safe="/")}:
            if form and form in text:
                found.append(f"{name} ({form[:12]}...)")
                break
    if patterns:
        for name, pattern in _LEAK_PATTERNS.items():
            m = pattern.search(text)
            if m:
                found.append(f"{name}: ...{text[max(0, m.start() - 60):m.end() + 20]!r}...")
    return found


def assert_no_leaks(artifacts: dict[str, str], secrets: dict[str, str]) -> None:
    problems = {label: found for label, text in artifacts.items() if (found := leaks(text, secrets))}
    assert not problems, "secrets leaked:\n" + "\n".join(f"  {label}: {found}" for label, found in problems.items())


def test_the_leak_scanner_finds_what_it_looks_for():
    """The scan is only worth its silence if it fires on real leaks (raw, URL-encoded, unknown)."""
    url = (f"http://h/b/k?X-Amz-Credential=AKIAEXAMPLEKEY%2F2025&X-Amz-Security-Token={quote(SESSION_TOKEN, safe='')}"
           f"&X-Amz-Signature={FAKE_SIGNATURE}")
    secrets = url_secrets(url)
    assert set(secrets) == {"URL signature", "URL credential", "URL security token"}
    assert len(leaks(url, secrets)) == 3 + 4
    assert leaks(f"token {SESSION_TOKEN} in a log", {"t": SESSION_TOKEN}, patterns=False)
    assert leaks(f"token {quote(SESSION_TOKEN, safe='')} encoded", {"t": SESSION_TOKEN}, patterns=False)
    assert leaks(f"somebody else's signature {'ab' * 32}.", {})
    assert leaks("http://h/b/k?Signature=xyz&AWSAccessKeyId=AKIA", {})
    assert not leaks("http://h/b/k?<redacted>  etag 0123456789abcdef0123456789abcdef", {})


def process_artifacts(label: str, proc: subprocess.CompletedProcess) -> dict[str, str]:
    return {f"{label} stdout": proc.stdout, f"{label} stderr": proc.stderr}


def tree_artifacts(label: str, root) -> dict[str, str]:
    """Every name under root (hidden ones too) and every file's content (as latin-1 text)."""
    out = {}
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        names += [os.path.join(dirpath, n) for n in dirnames + filenames]
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as fh:
                out[f"{label} file {name}"] = fh.read().decode("latin-1")
    out[f"{label} listing"] = "\n".join(names)
    return out


def fits_headers(directory) -> dict[str, str]:
    """Every header card of every FITS file in directory, as text."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".fits"):
            with fits.open(os.path.join(directory, name)) as hdul:
                out[f"header of {name}"] = "\n".join(hdu.header.tostring(sep="\n") for hdu in hdul)
    return out


def tamper(url: str) -> str:
    """The URL with one hex digit of its signature changed."""
    sig = dict(parse_qsl(urlsplit(url).query))["X-Amz-Signature"]
    return url.replace(sig, ("1" if sig[0] == "0" else "0") + sig[1:])


def exception_text(exc: BaseException) -> str:
    """str, repr, and the whole formatted traceback with every chained cause."""
    return "\n".join([str(exc), repr(exc), "".join(traceback.format_exception(exc))])


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    """A cube in a fresh bucket, its data as astropy reads it, and the server's own keys."""
    path = tmp_path_factory.mktemp("sec") / "secret-cube.fits"
    write_cube(path, SHAPE, -32)
    bucket = s3_server.make_bucket(f"sec-{uuid.uuid4().hex[:10]}")
    s3_server.client().upload_file(str(path), bucket, KEY)
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        data = np.array(f[0].data)
    return {"path": str(path), "bucket": bucket, "s3": f"s3://{bucket}/{KEY}", "data": data}


def server_secrets(s3_server) -> dict[str, str]:
    return {"access key": s3_server.access_key, "secret key": s3_server.secret_key}


# ------------------------------------------------------------------ full jobs


def test_full_job_prints_writes_and_reports_no_secret(cube, s3_server, tmp_path):
    """run (rank 0 signs an s3:// source; then a user's URL), stage, info, plan, report, presign:
    every byte they print or write is free of keys, tokens and signatures."""
    env = child_env(s3_server)
    env_token = child_env(s3_server, AWS_SESSION_TOKEN=SESSION_TOKEN)  # present, but never needed
    secrets = {**server_secrets(s3_server), "session token": SESSION_TOKEN}
    artifacts = {}

    # upload (credentials from the environment) prints nothing secret either.
    # (versitygw refuses any session token: this upload fails, and its error text is scanned)
    proc = cli(["upload", cube["path"], f"s3://{cube['bucket']}/survey/uploaded.fits", "--no-progress"], env_token)
    artifacts.update(process_artifacts("upload with token", proc))
    proc = cli(["upload", cube["path"], f"s3://{cube['bucket']}/survey/uploaded.fits"], env)
    assert proc.returncode == 0, proc.stderr
    artifacts.update(process_artifacts("upload", proc))

    # presign may print its URL on stdout (its job), nothing secret on stderr.
    proc = cli(["presign", cube["s3"], "--expires-s", "900"], env)
    assert proc.returncode == 0, proc.stderr
    url = proc.stdout.strip()
    assert "X-Amz-Signature=" in url and s3_server.access_key in url
    secrets.update(url_secrets(url))
    artifacts["presign stderr"] = proc.stderr

    # 1. presigned method from an s3:// source: rank 0 signs and broadcasts the URL.
    out1, st1, rep1 = tmp_path / "out1", tmp_path / "stage1", tmp_path / "r1.json"
    proc, _ = mpiexec(N_RANKS, ["run", "--source", cube["s3"], "--method", "presigned", "--output-dir", out1,
                             "--report", rep1, "--compare", "staging", "--stage-dir", st1, "--threads", "2",
                             "--chunk-bytes", "64KiB"], env)
    assert proc.returncode == 0, proc.stderr
    artifacts.update(process_artifacts("run s3->presigned", proc))

    # 2. the user's presigned URL as --source, with a session token in the environment.
    out2, rep2 = tmp_path / "out2", tmp_path / "r2.json"
    proc, _ = mpiexec(N_RANKS, ["run", "--source", url, "--output-dir", out2, "--report", rep2, "--threads", "2"],
                   env_token)
    assert proc.returncode == 0, proc.stderr
    artifacts.update(process_artifacts("run URL", proc))

    # 3. stage alone, from the URL (the staged name comes from the URL's path).
    st3, rep3 = tmp_path / "stage3", tmp_path / "r3.json"
    proc, _ = mpiexec(2, ["stage", "--source", url, "--stage-dir", st3, "--report", rep3], env_token)
    assert proc.returncode == 0, proc.stderr
    artifacts.update(process_artifacts("stage URL", proc))

    # 4. the single-process commands.
    for label, args in {
        "info URL": ["info", url, "--header"],
        "plan URL": ["plan", url, "--region", "0:6,:,10:20", "--requests", "50"],
        "info s3": ["info", cube["s3"], "--json"],
        "report r1": ["report", rep1],
    }.items():
        proc = cli(args, env_token if "URL" in label else env)
        assert proc.returncode == 0, f"{label}: {proc.stderr}"
        artifacts.update(process_artifacts(label, proc))

    for rep in (rep1, rep2, rep3):
        artifacts[f"report {rep.name}"] = rep.read_text()
    for out in (out1, out2):
        assert len([n for n in os.listdir(out) if n.endswith(".fits")]) == N_RANKS
        artifacts.update(fits_headers(out))
        artifacts.update(tree_artifacts(out.name, out))
    for st in (st1, st3):
        assert [n for n in os.listdir(st) if not n.startswith(".")] == ["secret-cube.fits"]
        assert not [n for n in os.listdir(st) if n.startswith(".")], "a temporary file was left in the stage dir"
        artifacts.update(tree_artifacts(st.name, st))

    # The outputs are right (a job that wrote nothing would leak nothing).
    report = json.loads(rep2.read_text())
    rebuilt = np.zeros(SHAPE, dtype=cube["data"].dtype)
    for rank in report["ranks"]:
        with fits.open(rank["output_path"]) as f:
            rebuilt[tuple(slice(a, b) for a, b in rank["box"])] = f[0].data
    assert np.array_equal(rebuilt, cube["data"])
    assert report["config"]["source"].endswith("?<redacted>")

    # The URL was shown, redacted: the scan looked at text that had every chance to leak.
    assert "secret-cube.fits?<redacted>" in artifacts["run URL stdout"] + artifacts["run URL stderr"]
    assert_no_leaks(artifacts, secrets)


def test_failing_jobs_do_not_leak(cube, s3_server, tmp_path):
    """403 from a tampered URL, 404 from an object deleted after signing, a session token the
    server rejects: each fails with exit 1 and an error naming the object, and no secret."""
    env = child_env(s3_server)
    client = s3_server.client()
    url = presign_url(cube["bucket"], KEY, 900, client)
    bad = tamper(url)
    gone_key = "survey/gone.fits"
    client.upload_file(cube["path"], cube["bucket"], gone_key)
    gone_url = presign_url(cube["bucket"], gone_key, 900, client)
    client.delete_object(Bucket=cube["bucket"], Key=gone_key)
    secrets = {**server_secrets(s3_server), **url_secrets(url), **{f"tampered {k}": v for k, v in url_secrets(bad).items()},
               **{f"gone {k}": v for k, v in url_secrets(gone_url).items()}, "session token": SESSION_TOKEN}
    artifacts = {}

    proc, _ = mpiexec(2, ["run", "--source", bad, "--no-progress", "--output-dir", tmp_path / "o1"], env)
    assert proc.returncode == 1, proc.stderr
    assert "403" in proc.stderr and "denied" in proc.stderr.lower() and KEY in proc.stderr
    artifacts.update(process_artifacts("tampered run", proc))

    proc = cli(["run", "--source", gone_url, "--no-progress"], env)
    assert proc.returncode == 1, proc.stderr
    assert "404" in proc.stderr and gone_key in proc.stderr
    artifacts.update(process_artifacts("deleted-object run", proc))

    env_token = child_env(s3_server, AWS_SESSION_TOKEN=SESSION_TOKEN)  # versitygw refuses any token
    for method in ("presigned", "s3"):
        proc = cli(["run", "--source", cube["s3"], "--method", method, "--no-progress",
                    "--report", tmp_path / f"{method}.json"], env_token)
        assert proc.returncode == 1, proc.stderr
        assert KEY in proc.stderr
        assert "Traceback" not in proc.stderr
        artifacts.update(process_artifacts(f"token run {method}", proc))
        assert not (tmp_path / f"{method}.json").exists()
    proc = cli(["stage", "--source", bad, "--stage-dir", tmp_path / "st"], env_token)
    assert proc.returncode == 1, proc.stderr
    artifacts.update(process_artifacts("stage tampered", proc))
    assert not (tmp_path / "st").exists() or not os.listdir(tmp_path / "st")
    assert not (tmp_path / "o1").exists() or not os.listdir(tmp_path / "o1")
    assert_no_leaks(artifacts, secrets)


def test_presigned_url_can_come_from_the_config_file(cube, s3_server, tmp_path):
    """A presigned URL is a bearer credential: `ps` shows argv, so the config file must be able to
    carry it (source in [run]), and nothing may echo it back."""
    url = presign_url(cube["bucket"], KEY, 900, s3_server.client())
    config = tmp_path / "job.toml"
    config.write_text(f'[run]\nsource = "{url}"\nthreads = 2\n')
    proc = cli(["run", "--config", config, "--no-progress", "--report", tmp_path / "r.json"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    assert_no_leaks({**process_artifacts("run --config", proc), "report": (tmp_path / "r.json").read_text()},
                    {**server_secrets(s3_server), **url_secrets(url)})


# ------------------------------------------------------------------ exceptions


def test_runconfig_repr_and_report_hide_the_url():
    url = ("https://user:hunter2@store.example.org/bucket/cube.fits?X-Amz-Algorithm=AWS4-HMAC-SHA256"
           f"&X-Amz-Credential=AKIAEXAMPLEKEY%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20990101T000000Z"
           f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token={quote(SESSION_TOKEN, safe='')}"
           f"&X-Amz-Signature={FAKE_SIGNATURE}")
    cfg = RunConfig(source=url, endpoint_url="https://key:pass-word@store.example.org")
    secrets = {"signature": FAKE_SIGNATURE, "access key": "AKIAEXAMPLEKEY", "session token": SESSION_TOKEN,
               "URL password": "hunter2", "endpoint password": "pass-word"}
    shown = {"repr": repr(cfg), "str": str(cfg), "report dict": json.dumps(cfg.to_report_dict())}
    assert_no_leaks(shown, secrets)
    assert "store.example.org/bucket/cube.fits" in shown["repr"]
    try:
        RunConfig(source=url, method="s3")
    except ConfigError as exc:
        assert_no_leaks({"config error": exception_text(exc)}, secrets)
    else:
        pytest.fail("method s3 with an https source was accepted")


def test_http_403_exception_hides_the_signature(cube, s3_server):
    bad = tamper(presign_url(cube["bucket"], KEY, 900, s3_server.client()))
    with pytest.raises(TransportError) as info:
        with HttpTransport(bad) as transport:
            transport.info
    text = exception_text(info.value)
    assert "403" in str(info.value) and KEY in str(info.value)
    assert_no_leaks({"403 from info": text}, {**server_secrets(s3_server), **url_secrets(bad)})
    with pytest.raises(IngestError) as info:
        read_subcube(bad, (slice(0, 2),))
    assert_no_leaks({"403 from read_subcube": exception_text(info.value)},
                    {**server_secrets(s3_server), **url_secrets(bad)})


def test_expired_url_exception_hides_the_signature(cube, s3_server):
    url = presign_url(cube["bucket"], KEY, 1, s3_server.client())
    time.sleep(1.2)
    with pytest.raises(TransportError) as info:
        read_subcube(url)
    assert "expired" in str(info.value)
    assert_no_leaks({"expired": exception_text(info.value)}, {**server_secrets(s3_server), **url_secrets(url)})


def _presigned_looking(port: int) -> str:
    return (f"http://127.0.0.1:{port}/bucket/cube.fits?X-Amz-Credential=AKIAEXAMPLEKEY%2F20250101"
            f"&X-Amz-Security-Token={quote(SESSION_TOKEN, safe='')}&X-Amz-Signature={FAKE_SIGNATURE}")


_FAKE_SECRETS = {"signature": FAKE_SIGNATURE, "access key": "AKIAEXAMPLEKEY", "session token": SESSION_TOKEN}


def test_http_timeout_exceptions_hide_the_signature():
    """A server that accepts the connection and never answers: the read timeout, and the
    give-up error after retries, carry no part of the URL's query (nor do their causes)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever reads
        url = _presigned_looking(silent.getsockname()[1])
        transport = HttpTransport(url, connect_timeout_s=0.5, read_timeout_s=0.3)
        with pytest.raises(TransportError) as first:
            transport.info
        with pytest.raises(TransportError) as gave_up:
            read_with_retries(transport, memoryview(bytearray(16)), 0, RetryPolicy(retries=1, backoff_s=0.01),
                              lambda *a: None)
        transport.close()
    assert "timeout" in exception_text(first.value).lower()
    assert "gave up" in str(gave_up.value)
    assert_no_leaks({"read timeout": exception_text(first.value), "gave up": exception_text(gave_up.value)},
                    _FAKE_SECRETS)


def test_connection_refused_exception_hides_the_signature():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        url = _presigned_looking(port)
        with pytest.raises(TransportError) as info:
            read_subcube(url, connect_timeout_s=1.0, retry=RetryPolicy(retries=1, backoff_s=0.01))
    text = exception_text(info.value)
    assert f"127.0.0.1:{port}/bucket/cube.fits" in str(info.value)
    assert_no_leaks({"connection refused": text}, _FAKE_SECRETS)


@pytest.mark.parametrize("url", [
    f"http://127.0.0.1:99999/bucket/cube.fits?X-Amz-Signature={FAKE_SIGNATURE}",  # port out of range
    f"http://[::1/bucket/cube.fits?X-Amz-Signature={FAKE_SIGNATURE}",  # unclosed IPv6 bracket
], ids=["bad-port", "bad-ipv6"])
def test_malformed_url_errors_hide_the_signature(url):
    """A mangled URL (a paste gone wrong) is a clear, permanent IngestError whose text and
    chained causes do not repeat the URL: urllib3's LocationParseError quotes it whole."""
    with pytest.raises(IngestError) as info:
        read_subcube(url, connect_timeout_s=1.0, retry=RetryPolicy(retries=0))
    assert_no_leaks({"malformed URL": exception_text(info.value)}, {"signature": FAKE_SIGNATURE})
    proc = cli(["info", url], {**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert_no_leaks(process_artifacts("info malformed URL", proc), {"signature": FAKE_SIGNATURE})


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """An HTTPS server for a small cube, with a CA made for this test session."""
    directory = tmp_path_factory.mktemp("tls")
    certs = make_ca_and_cert(directory)
    path = directory / "tls-cube.fits"
    write_cube(path, (6, 40, 36), 16, bzero=32768, bscale=1)
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        data = np.array(f[0].data)
    with TlsServer(path.read_bytes(), certs) as server:
        url = server.url("/bucket/tls-cube.fits") + f"?X-Amz-Signature={FAKE_SIGNATURE}"
        yield {"server": server, "url": url, "ca": certs["ca"], "data": data}


def test_tls_verification_is_on_by_default(tls):
    served_before = tls["server"].requests
    with pytest.raises(TransportError) as info:
        read_subcube(tls["url"])
    message = str(info.value)
    assert "TLS" in message and "/bucket/tls-cube.fits" in message
    assert "--ca-bundle" in message  # says what to do about it
    assert tls["server"].requests == served_before, "a request was sent over an unverified connection"
    assert_no_leaks({"TLS error": exception_text(info.value)}, {"signature": FAKE_SIGNATURE})


def test_tls_with_ca_bundle_reads_exact_data(tls):
    assert np.array_equal(read_subcube(tls["url"], ca_bundle=tls["ca"]), tls["data"])
    region = (slice(1, 5), slice(3, 17), slice(2, 9))
    got = read_subcube(tls["url"], region, ca_bundle=tls["ca"], threads=3, chunk_bytes=256)
    assert got.dtype == tls["data"].dtype and np.array_equal(got, tls["data"][region])


def test_tls_without_verification_reads_exact_data(tls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # urllib3's InsecureRequestWarning is the point here
        got = read_subcube(tls["url"], verify_tls=False)
    assert np.array_equal(got, tls["data"])


def test_tls_cli_options_reach_the_transport_in_run(tls, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OMPI_", "PMIX_", "SLURM_"))}
    env.update(PYTHONPATH=ROOT)
    proc = cli(["run", "--source", tls["url"], "--no-progress"], env)
    assert proc.returncode == 1, proc.stderr
    assert "TLS" in proc.stderr and "tls-cube.fits" in proc.stderr and "Traceback" not in proc.stderr
    for opts in (["--ca-bundle", tls["ca"]], ["--no-verify-tls"]):
        out = tmp_path / opts[0].strip("-")
        proc = cli(["run", "--source", tls["url"], "--no-progress", "--output-dir", out, *opts], env)
        assert proc.returncode == 0, f"{opts}: {proc.stderr}"
        (name,) = os.listdir(out)
        with fits.open(out / name) as f:
            assert np.array_equal(f[0].data, tls["data"])
        assert_no_leaks(process_artifacts(f"run {opts[0]}", proc), {"signature": FAKE_SIGNATURE})


def test_tls_cli_options_reach_the_transport_in_info(tls):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OMPI_", "PMIX_", "SLURM_"))}
    env.update(PYTHONPATH=ROOT)
    proc = cli(["info", tls["url"]], env)
    assert proc.returncode == 1, proc.stderr
    assert "TLS" in proc.stderr and "tls-cube.fits" in proc.stderr and "Traceback" not in proc.stderr
    for opts in (["--ca-bundle", tls["ca"]], ["--no-verify-tls"]):
        proc = cli(["info", tls["url"], "--json", *opts], env)
        assert proc.returncode == 0, f"info {opts}: {proc.stderr}"
        assert json.loads(proc.stdout)["shape"] == list(tls["data"].shape)


# ------------------------------------------------------------------ no secrets on the command line

_SECRET_OPTION_WORDS = ("secret", "password", "passwd", "token", "access-key", "access_key", "accesskey",
                        "credential", "private-key", "private_key", "api-key", "session-key")


def _subparsers():
    parser = build_parser()
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return parser, dict(action.choices)


def test_no_command_takes_a_secret_option():
    parser, commands = _subparsers()
    assert {"run", "stage", "info", "plan", "report", "synth", "upload", "presign"} <= set(commands)
    offenders = []
    for name, sub in [("(top)", parser), *commands.items()]:
        for action in sub._actions:
            for option in action.option_strings + [action.dest or ""]:
                if any(word in option.lower() for word in _SECRET_OPTION_WORDS):
                    offenders.append(f"{name} {option}")
        help_text = sub.format_help()
        for option in re.findall(r"--[\w-]+", help_text):
            if any(word in option.lower() for word in _SECRET_OPTION_WORDS):
                offenders.append(f"{name} --help offers {option}")
    assert not offenders, f"options that would put a secret on the command line (visible in ps): {offenders}"


@pytest.mark.parametrize("text", [
    '[run]\nsource = "cube.fits"\naws_secret_access_key = "{value}"\n',
    'aws_secret_access_key = "{value}"\n[run]\nsource = "cube.fits"\n',
    '[run]\nsource = "cube.fits"\naws_session_token = "{value}"\n',
    '[run]\nsource = "cube.fits"\nAWS-Access-Key-Id = "{value}"\n',
    '[run]\nsource = "cube.fits"\npassword = "{value}"\n',
])
def test_config_file_with_a_secret_is_refused_without_echoing_it(tmp_path, text):
    value = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + uuid.uuid4().hex
    path = tmp_path / "secret.toml"
    path.write_text(text.format(value=value))
    with pytest.raises(ConfigError) as info:
        read_config_file(str(path))
    message = str(info.value)
    assert str(path) in message and "environment" in message
    assert value not in exception_text(info.value)


def test_cli_refuses_secret_config_without_echoing_it(tmp_path):
    value = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + uuid.uuid4().hex
    path = tmp_path / "job.toml"
    path.write_text(f'[run]\nsource = "x.fits"\naws_secret_access_key = "{value}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    proc = cli(["run", "--config", path], {**env, "PYTHONPATH": ROOT})
    assert proc.returncode == 1
    assert "aws_secret_access_key" in proc.stderr and str(path) in proc.stderr
    assert value not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
