"""Issue 25, part 1: what a user's environment already says reaches every engine and method.

Each test is a new user at a site with a private CA: versitygw serves HTTPS with a certificate
from a CA made here, tinyproxy is the site's forward proxy, and the user's settings are
variables and AWS config files under a HOME of the test's own (nothing from outside leaks in,
nothing leaks out). Reads go through open_transport, as every command's do, on both engines
(native: libcurl; urllib3: urllib3 and boto3) and both methods (s3, presigned); one test runs
`python -m ingest run` the way the user in the issue did.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import warnings
from urllib.parse import urlsplit

import numpy as np
import pytest
from astropy.io import fits

from ingest.errors import ConfigError, RetryableError, TransportError
from ingest.testbed.synth import write_cube
from ingest.transports import describe_environment, open_transport
from ingest.transports.base import BULK_READ_BYTES, ObjectInfo
from ingest.transports.environment import resolve
from ingest.transports.presign import presign_url
from ingest.transports.retry import RetryPolicy, read_with_retries, retry_call
from tests.envservers import TinyProxy, TlsS3Server, free_port, make_pki
from tests.mpitools import ROOT, cli

ENGINES = ("native", "urllib3")
BUCKET = "cubes"  # fixed: its virtual-host name, cubes.localhost, is in the server certificate
BLOB_KEY = "blob.bin"
CUBE_KEY = "survey/cube.fits"
BLOB = np.random.default_rng(25).integers(0, 256, BULK_READ_BYTES + (1 << 20), dtype=np.uint8).tobytes()
SMALL_READ = (123_457, 4096)  # (offset, bytes): libcurl's path on the native engine
BULK_READ = (1000, BULK_READ_BYTES)  # the native engine's bulk reads go through its urllib3 pool
RETRY = RetryPolicy(retries=3, total_s=10.0, backoff_s=0.01, backoff_max_s=0.05)
# Everything outside the test that could steer a client: cleared for every test.
_STEERING = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUEST_METHOD")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), dns_names=[f"{BUCKET}.localhost"])


@pytest.fixture(scope="module")
def store(pki, tmp_path_factory):
    """versitygw over TLS (the private CA's certificate) holding a blob and a small FITS cube."""
    cube_path = tmp_path_factory.mktemp("cube") / "cube.fits"
    write_cube(cube_path, (4, 24, 20), -32)
    with warnings.catch_warnings(), fits.open(cube_path) as f:
        warnings.simplefilter("ignore")
        cube = np.array(f[0].data)
    with TlsS3Server(pki, str(tmp_path_factory.mktemp("vgw-root"))) as server:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        client.put_object(Bucket=BUCKET, Key=BLOB_KEY, Body=BLOB)
        client.upload_file(str(cube_path), BUCKET, CUBE_KEY)
        server.cube = cube
        yield server


@pytest.fixture(autouse=True)
def home(monkeypatch, tmp_path):
    """A fresh user: no AWS, proxy or CA variable from outside; HOME and the AWS files under tmp_path."""
    for name in list(os.environ):
        if name.startswith("AWS_") or name.lower().endswith("_proxy") or name in _STEERING:
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / ".aws" / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / ".aws" / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # traffic to loopback only
    return home


@pytest.fixture
def proxy(tmp_path):
    with TinyProxy(tmp_path) as server:
        yield server


@pytest.fixture
def localhost_resolver(monkeypatch):
    """Resolve BUCKET.localhost to loopback in this process, as libcurl and systemd-resolved do
    (RFC 6761) and glibc here does not; records the names asked for."""
    asked = []
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kw):
        if isinstance(host, str) and host.endswith(".localhost"):
            asked.append(host)
            host = "127.0.0.1"
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def aws_files(home, config: str = "", credentials: str = "") -> str:
    """Write the user's ~/.aws/config and credentials; returns the config file's path."""
    (home / ".aws" / "config").write_text(textwrap.dedent(config))
    (home / ".aws" / "credentials").write_text(textwrap.dedent(credentials))
    return str(home / ".aws" / "config")


def use_store(monkeypatch, store, **extra) -> None:
    """Keys and endpoint in the environment, as `export` lines would give them."""
    for name, value in {**store.env(), "AWS_ENDPOINT_URL": store.endpoint_url, **extra}.items():
        monkeypatch.setenv(name, value)


def source_for(method: str) -> str:
    """An s3:// URI, or a URL presigned by ingest itself (endpoint and style from the environment)."""
    return f"s3://{BUCKET}/{BLOB_KEY}" if method == "s3" else presign_url(BUCKET, BLOB_KEY, 600)


def read_back(source: str, method: str, engine: str, **options) -> str:
    """Open, stat, one small and one bulk read, each checked byte for byte; returns the URL read.
    Retried as the engine retries: tinyproxy closes a client connection after each reply without
    saying so, and a pool that reuses it in that instant sees a reset (a retryable fault)."""
    faults = []
    with open_transport(source, method, engine=engine, threads=2, **options) as transport:
        assert transport.engine == ("native" if engine == "native" else {"s3": "boto3"}.get(method, "urllib3"))
        assert retry_call(lambda: transport.object_bytes, RETRY, "stat") == len(BLOB)
        for offset, nbytes in (SMALL_READ, BULK_READ):
            buffer = bytearray(nbytes)
            read_with_retries(transport, memoryview(buffer), offset, RETRY, lambda error, *_: faults.append(error))
            assert bytes(buffer) == BLOB[offset:offset + nbytes]
    assert all(error.kind in ("reset", "connect") for error in faults), faults
    return transport.source


def assert_every_path_needs_the_proxy(source: str, method: str, engine: str) -> None:
    """With the proxy down, stat, a small read and a bulk read each fail to connect: no pool of
    any engine (libcurl's, the native engine's urllib3 pool for bulk reads, boto3's) goes direct."""
    with open_transport(source, method, engine=engine, threads=2) as transport:
        with pytest.raises(RetryableError):
            transport.object_bytes
        transport.adopt(ObjectInfo(len(BLOB)))
        for offset, nbytes in (SMALL_READ, BULK_READ):
            with pytest.raises(RetryableError) as failed:
                transport.read_into(memoryview(bytearray(nbytes)), offset)
            assert failed.value.kind == "connect", (nbytes, failed.value)


def sources(environment) -> dict[str, str]:
    return {setting.name: setting.source for setting in environment.provenance}


# == CA bundles ==================================================================================
@pytest.mark.parametrize("method", ["s3", "presigned"])
@pytest.mark.parametrize("engine", ENGINES)
def test_aws_ca_bundle_reaches_every_engine_and_method(store, pki, monkeypatch, engine, method):
    use_store(monkeypatch, store)
    with pytest.raises(TransportError, match="TLS failed") as refused:
        read_back(source_for(method), method, engine)
    assert "AWS_CA_BUNDLE" in str(refused.value)  # the hint names the setting the user would use
    monkeypatch.setenv("AWS_CA_BUNDLE", pki["ca"])
    read_back(source_for(method), method, engine)
    assert sources(resolve())["ca_bundle"] == "AWS_CA_BUNDLE"


@pytest.mark.parametrize("engine", ENGINES)
def test_ca_bundle_in_a_profile_of_the_config_file(store, pki, home, monkeypatch, engine):
    config = aws_files(home, f"[profile site]\nca_bundle = {pki['ca']}\n")
    use_store(monkeypatch, store, AWS_PROFILE="site")
    for method in ("s3", "presigned"):
        read_back(source_for(method), method, engine)
    assert sources(resolve())["ca_bundle"] == f"profile 'site' in {config}"


@pytest.mark.parametrize("engine", ENGINES)
def test_explicit_options_beat_the_environment(store, pki, home, tmp_path, monkeypatch, engine):
    other_ca = make_pki(tmp_path, ())["ca"]  # a real CA, but not the server's
    use_store(monkeypatch, store, AWS_CA_BUNDLE=other_ca, AWS_ENDPOINT_URL=f"https://127.0.0.1:{free_port()}")
    with pytest.raises(TransportError, match="TLS failed"):
        read_back(f"s3://{BUCKET}/{BLOB_KEY}", "s3", engine, endpoint_url=store.endpoint_url)
    read_back(f"s3://{BUCKET}/{BLOB_KEY}", "s3", engine, endpoint_url=store.endpoint_url, ca_bundle=pki["ca"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # urllib3's InsecureRequestWarning is the point here
        read_back(f"s3://{BUCKET}/{BLOB_KEY}", "s3", engine, endpoint_url=store.endpoint_url, verify_tls=False)
    chosen = sources(resolve({"endpoint_url": store.endpoint_url, "ca_bundle": pki["ca"]}))
    assert chosen["endpoint_url"] == "option" and chosen["ca_bundle"] == "option"


# == profiles and endpoints ======================================================================
@pytest.mark.parametrize("engine", ENGINES)
def test_aws_profile_chooses_credentials_endpoint_region_and_ca(store, pki, home, monkeypatch, engine):
    dead = f"https://127.0.0.1:{free_port()}"
    config = aws_files(home, f"""\
        [default]
        endpoint_url = {dead}
        [profile site]
        endpoint_url = {store.endpoint_url}
        region = us-east-1
        ca_bundle = {pki['ca']}
        """, f"""\
        [default]
        aws_access_key_id = AKIAWRONGWRONGWRONG
        aws_secret_access_key = wrong-secret
        [site]
        aws_access_key_id = {store.access_key}
        aws_secret_access_key = {store.secret_key}
        """)
    monkeypatch.setenv("AWS_PROFILE", "site")
    for method in ("s3", "presigned"):
        read_back(source_for(method), method, engine)
    chosen = sources(resolve())
    assert chosen["profile"] == "AWS_PROFILE"
    assert chosen["endpoint_url"] == chosen["region"] == chosen["ca_bundle"] == f"profile 'site' in {config}"
    rows = {setting: (value, source) for setting, value, source in describe_environment()}
    assert rows["credentials"] == ("found", "botocore's chain: shared-credentials-file")
    assert store.secret_key not in repr(rows) and store.access_key not in repr(rows)


def test_endpoint_precedence_is_botocores(store, pki, home, monkeypatch):
    """AWS_ENDPOINT_URL_S3 > AWS_ENDPOINT_URL > [services] s3 endpoint_url > the profile's, the
    option above all; at each step the winner is the live store and every loser a dead port."""
    def dead():
        return f"https://127.0.0.1:{free_port()}"

    use_store(monkeypatch, store, AWS_CA_BUNDLE=pki["ca"], AWS_PROFILE="site")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    services = "[services site-store]\ns3 =\n  endpoint_url = {}\n"
    steps = [  # (config, variables, the source that must win), each step on top of the last's variables
        (f"[profile site]\nendpoint_url = {store.endpoint_url}\n", {}, "profile 'site' in"),
        (f"[profile site]\nservices = site-store\nendpoint_url = {dead()}\n" + services.format(store.endpoint_url),
         {}, "[services site-store] s3 endpoint_url in"),
        (f"[profile site]\nservices = site-store\nendpoint_url = {dead()}\n" + services.format(dead()),
         {"AWS_ENDPOINT_URL": store.endpoint_url}, "AWS_ENDPOINT_URL"),
        (None, {"AWS_ENDPOINT_URL": dead(), "AWS_ENDPOINT_URL_S3": store.endpoint_url}, "AWS_ENDPOINT_URL_S3"),
    ]
    for i, (config, variables, winner) in enumerate(steps):
        if config is not None:
            aws_files(home, config)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        environment = resolve()
        assert environment.endpoint_url == store.endpoint_url, winner
        assert sources(environment)["endpoint_url"].startswith(winner)
        engine = ENGINES[i % 2]
        for method in ("s3", "presigned"):
            read_back(source_for(method), method, engine)
    assert sources(resolve({"endpoint_url": dead()}))["endpoint_url"] == "option"
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert resolve().endpoint_url is None  # as botocore: AWS's own endpoint


def test_services_section_without_its_section_names_the_profile(home, monkeypatch):
    config = aws_files(home, "[default]\nservices = nowhere\n")
    with pytest.raises(ConfigError, match="endpoint_url") as err:
        resolve()
    assert f"profile 'default' in {config}" in str(err.value) and "nowhere" in str(err.value)


@pytest.mark.parametrize("engine", ENGINES)
def test_addressing_style_from_the_config_file(store, pki, home, monkeypatch, localhost_resolver, engine):
    """s3 = / addressing_style = virtual: ingest's own presigned URLs and the S3 method both name the
    bucket in the host (versitygw serves it as BUCKET.localhost); the option overrides the file."""
    config = aws_files(home, "[default]\ns3 =\n  addressing_style = virtual\n")
    use_store(monkeypatch, store, AWS_CA_BUNDLE=pki["ca"], AWS_ENDPOINT_URL=store.host_endpoint_url)
    url = read_back(source_for("presigned"), "presigned", engine)
    assert urlsplit(url).hostname == f"{BUCKET}.localhost"
    read_back(f"s3://{BUCKET}/{BLOB_KEY}", "s3", engine)
    assert set(localhost_resolver) == {f"{BUCKET}.localhost"}  # the S3 method asked for it too
    assert sources(resolve())["addressing_style"] == f"profile 'default' in {config} (s3 addressing_style)"
    with open_transport(f"s3://{BUCKET}/{BLOB_KEY}", "s3", engine="native", addressing_style="path") as transport:
        assert urlsplit(transport.source).hostname == "localhost"


# == proxies =====================================================================================
@pytest.mark.parametrize("engine", ENGINES)
def test_https_proxy_carries_every_engine_and_no_proxy_bypasses_it(store, pki, proxy, monkeypatch, engine):
    use_store(monkeypatch, store, AWS_CA_BUNDLE=pki["ca"])
    tunnel = f"CONNECT 127.0.0.1:{store.port} "
    for variable in ("https_proxy", "HTTPS_PROXY"):  # curl reads both cases for https
        monkeypatch.setenv(variable, proxy.url)
        for method in ("s3", "presigned"):
            before = len(proxy.requests())
            read_back(source_for(method), method, engine)
            through = proxy.requests()[before:]
            assert through and all(line.startswith(tunnel) for line in through), (variable, method, through)
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{free_port()}")  # a proxy that is down
    for method in ("s3", "presigned"):
        assert_every_path_needs_the_proxy(source_for(method), method, engine)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    for no_proxy in ("127.0.0.1", "127.0.0.0/8"):  # a host, and curl's CIDR form
        monkeypatch.setenv("NO_PROXY", no_proxy)
        before = len(proxy.requests())
        for method in ("s3", "presigned"):
            read_back(source_for(method), method, engine)
        assert proxy.requests()[before:] == [], no_proxy


@pytest.mark.parametrize("engine", ENGINES)
def test_http_proxy_is_read_in_lower_case_only_as_curl(s3_server, s3_bucket, proxy, monkeypatch, engine):
    s3_server.client().put_object(Bucket=s3_bucket, Key=BLOB_KEY, Body=BLOB)
    for name, value in {**s3_server.env(), "HTTP_PROXY": proxy.url}.items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{s3_bucket}/{BLOB_KEY}"

    def read_all() -> list[str]:
        before = len(proxy.requests())
        read_back(uri, "s3", engine)
        read_back(presign_url(s3_bucket, BLOB_KEY, 600), "presigned", engine)
        return proxy.requests()[before:]

    assert read_all() == []  # upper-case HTTP_PROXY: ignored, as curl ignores it (httpoxy)
    rows = {setting: source for setting, _value, source in describe_environment()}
    assert rows["HTTP_PROXY"] == "HTTP_PROXY" and rows["proxy for http://"] == "default"
    monkeypatch.setenv("http_proxy", proxy.url)
    through = read_all()
    assert through and all(line.startswith(f"GET {s3_server.endpoint_url}/{s3_bucket}/") or
                           line.startswith(f"HEAD {s3_server.endpoint_url}/{s3_bucket}/") for line in through), through
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    assert read_all() == []


# == bad settings, retries, what `info` shows ====================================================
def test_a_bad_setting_names_itself_and_where_it_came_from(store, home, monkeypatch):
    use_store(monkeypatch, store, AWS_CA_BUNDLE=str(home / "no-such-ca.pem"))
    for method in ("s3", "presigned"):
        with pytest.raises(ConfigError, match="AWS_CA_BUNDLE"):
            open_transport(source_for(method), method, engine="urllib3")
    monkeypatch.delenv("AWS_CA_BUNDLE")
    monkeypatch.setenv("all_proxy", "socks5://127.0.0.1:1")
    with pytest.raises(ConfigError, match="all_proxy"):
        open_transport(f"s3://{BUCKET}/{BLOB_KEY}", "s3", engine="native")
    monkeypatch.delenv("all_proxy")
    cases = [  # (config file, variables, what the message must name)
        ("", {"AWS_PROFILE": "nowhere"}, "AWS_PROFILE"),
        ("[default]\nendpoint_url = ftp://store.example\n", {"AWS_ENDPOINT_URL": ""}, "profile 'default' in"),
        ("[default]\ns3 =\n  addressing_style = sideways\n", {}, "profile 'default' in"),
        ("", {"AWS_MAX_ATTEMPTS": "many"}, "AWS_MAX_ATTEMPTS"),
        ("[default]\nmax_attempts = 0\n", {}, "profile 'default' in"),
    ]
    for config, variables, named in cases:
        aws_files(home, config)
        with monkeypatch.context() as scoped:
            for name, value in variables.items():
                scoped.setenv(name, value) if value else scoped.delenv(name)
            with pytest.raises(ConfigError, match=named):
                resolve()


def test_aws_max_attempts_goes_to_ingests_retries_not_boto3s(store, pki, home, monkeypatch):
    use_store(monkeypatch, store, AWS_CA_BUNDLE=pki["ca"], AWS_MAX_ATTEMPTS="3")
    environment = resolve()
    assert environment.max_attempts == 3 and sources(environment)["max_attempts"] == "AWS_MAX_ATTEMPTS"
    with open_transport(f"s3://{BUCKET}/{BLOB_KEY}", "s3", engine="urllib3") as transport:
        # botocore would retry inside one call, hidden from ingest's count and its resuming
        assert transport._client.meta.config.retries["total_max_attempts"] == 1
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    config = aws_files(home, "[default]\nmax_attempts = 7\nretry_mode = adaptive\n")
    chosen = sources(resolve())
    assert resolve().max_attempts == 7 and chosen["max_attempts"] == f"profile 'default' in {config}"
    shown = {setting: value for setting, value, _source in describe_environment()}
    assert shown["max_attempts"] == "7 (ingest retries: 6, unless ingest's retries is set)"
    assert "retry_mode" in chosen  # shown as not followed


def attempts_against_a_dead_store(source: str, engine: str, retries=None) -> tuple[int, object]:
    """(attempts one 4 KiB read made, its RunConfig) against an endpoint that refuses every
    connection, retrying as a job's RunConfig says (the command line's --retries, if given)."""
    from ingest.config import load_config
    from ingest.config.settings import retry_policy, transport_options

    cfg = load_config({"source": source, "engine": engine, "retries": retries, "retry_backoff_s": 0.001})
    faults = []
    with open_transport(cfg.source, cfg.resolved_method, **transport_options(cfg)) as transport:
        transport.adopt(ObjectInfo(len(BLOB)))  # no stat: the read alone counts
        with pytest.raises(TransportError, match="gave up"):
            read_with_retries(transport, memoryview(bytearray(4096)), 0, retry_policy(cfg),
                              lambda error, *_: faults.append(error))
    assert {error.kind for error in faults} == {"connect"}, faults
    return len(faults), cfg


@pytest.mark.parametrize("method", ["s3", "presigned"])
@pytest.mark.parametrize("engine", ENGINES)
def test_max_attempts_becomes_ingests_retries_unless_retries_is_set(home, monkeypatch, engine, method):
    """botocore's max_attempts counts the first attempt: AWS_MAX_ATTEMPTS=3 is 2 ingest retries, 3
    attempts per request, on every engine and method; the variable beats the profile's, as in
    botocore; an explicit retries setting beats both; neither set: ingest's 5 retries."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # refuses connections
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    source = source_for(method) if method == "presigned" else f"s3://{BUCKET}/{BLOB_KEY}"
    config = aws_files(home, "[default]\nmax_attempts = 4\n")
    attempts, cfg = attempts_against_a_dead_store(source, engine)
    assert attempts == 4 and cfg.resolved_retries == (3, f"max_attempts 4 from profile 'default' in {config}, "
                                                         "less the first attempt")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    attempts, cfg = attempts_against_a_dead_store(source, engine)
    assert attempts == 3 and cfg.to_report_dict()["resolved_retries"] == 2
    assert cfg.resolved_retries[1].startswith("max_attempts 3 from AWS_MAX_ATTEMPTS")
    attempts, cfg = attempts_against_a_dead_store(source, engine, retries="0")  # as `--retries 0` arrives
    assert attempts == 1 and cfg.resolved_retries == (0, "retries setting")
    aws_files(home)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    assert attempts_against_a_dead_store(source, engine, retries=None)[1].resolved_retries == (5, "default")


def test_read_subcube_follows_max_attempts_as_run_does(home, monkeypatch):
    """ingest.read_subcube without a retry= resolves its retries where run and ingest.open do:
    AWS_MAX_ATTEMPTS=2 is one retry, two attempts, against a store that refuses connections."""
    import ingest

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with pytest.raises(TransportError, match=r"after 2 attempt\(s\)"):
        ingest.read_subcube(f"s3://{BUCKET}/{CUBE_KEY}", (0, 0, 0))


def test_max_attempts_on_the_command_line_and_in_info(home, tmp_path):
    """`info`: AWS_MAX_ATTEMPTS=3 alone gives 3 attempts, --retries 1 gives 2; unset, `info` says
    ingest's default applies; a local file never consults the AWS settings (a missing profile
    does not fail it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    env.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}", AWS_ACCESS_KEY_ID="AKIAEXAMPLEEXAMPLE",
               AWS_SECRET_ACCESS_KEY="not-a-real-secret", AWS_MAX_ATTEMPTS="3", PYTHONPATH=ROOT)
    uri = f"s3://{BUCKET}/{CUBE_KEY}"
    for extra, attempts in (([], 3), (["--retries", "1"], 2)):
        proc = cli(["info", uri, "--engine", "native", "--retry-backoff-s", "0.001", *extra], env)
        assert proc.returncode == 1 and f"gave up after {attempts} attempt(s)" in proc.stderr, proc.stderr
    rows = {setting: (value, source) for setting, value, source in describe_environment()}
    assert rows["max_attempts"][1] == "default" and "else 5" in rows["max_attempts"][0]
    cube = tmp_path / "cube.fits"
    write_cube(cube, (2, 8, 8), 16)
    proc = cli(["info", cube], {**env, "AWS_PROFILE": "no-such-profile"})
    assert proc.returncode == 0, proc.stderr


def test_describe_environment_names_every_source_and_hides_secrets(home, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:hunter2-secret@127.0.0.1:3128")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://store.site.example:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-key-value")
    rows = describe_environment({"verify_tls": True})
    text = repr(rows)
    for secret in ("hunter2-secret", "alice", "AKIAEXAMPLEEXAMPLE", "very-secret-key-value"):
        assert secret not in text
    table = {setting: (value, source) for setting, value, source in rows}
    assert table["endpoint_url"] == ("https://store.site.example:9000", "AWS_ENDPOINT_URL_S3")
    assert table["proxy for https://"] == ("http://127.0.0.1:3128", "HTTPS_PROXY")
    assert table["credentials"] == ("found", "botocore's chain: env")
    assert {"profile", "ca_bundle", "verify_tls", "region", "addressing_style", "no_proxy",
            "max_attempts"} <= set(table)


# == the user's own command ======================================================================
@pytest.mark.parametrize("engine", ENGINES)
def test_cli_run_trusts_aws_ca_bundle(store, pki, home, tmp_path, engine):
    """The issue's report, as the user ran it: `python -m ingest run --source s3://...` with
    AWS_CA_BUNDLE set and no --ca-bundle."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    env.update(store.env(), AWS_ENDPOINT_URL=store.endpoint_url, AWS_CA_BUNDLE=pki["ca"], PYTHONPATH=ROOT)
    out = tmp_path / "out"
    proc = cli(["run", "--source", f"s3://{BUCKET}/{CUBE_KEY}", "--engine", engine, "--no-probe", "--no-progress",
                "--output-dir", out], env)
    assert proc.returncode == 0, proc.stderr
    (name,) = os.listdir(out)
    with fits.open(out / name) as f:
        assert np.array_equal(f[0].data, store.cube)


def test_cli_info_says_which_setting_came_from_where(store, pki, home):
    """`info` prints every resolved setting with its source; no key or secret appears."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    env.update(store.env(), AWS_ENDPOINT_URL=store.endpoint_url, AWS_CA_BUNDLE=pki["ca"], PYTHONPATH=ROOT)
    proc = cli(["info", f"s3://{BUCKET}/{CUBE_KEY}", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    rows = {r["setting"]: r for r in json.loads(proc.stdout)["environment"]}
    assert rows["ca_bundle"]["value"] == pki["ca"] and rows["ca_bundle"]["source"] == "AWS_CA_BUNDLE"
    assert rows["endpoint_url"]["source"] == "AWS_ENDPOINT_URL"
    text = cli(["info", f"s3://{BUCKET}/{CUBE_KEY}"], env)
    assert text.returncode == 0 and "from AWS_CA_BUNDLE" in text.stdout, text.stderr
    for secret in (store.env()["AWS_SECRET_ACCESS_KEY"], store.env()["AWS_ACCESS_KEY_ID"]):
        assert secret not in proc.stdout + text.stdout


@pytest.mark.parametrize("keys, profile_keys, expected", [
    ({"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "secret"}, False, True),
    ({"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_PROFILE": "other"}, False, True),
    ({}, True, True),
    ({}, False, False),
    ({"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"}, False, False),
])
def test_have_credentials_answers_as_botocores_chain_does(home, monkeypatch, keys, profile_keys, expected):
    """Keys in the environment are found without botocore; anything else is botocore's chain's
    answer (here: a default profile's keys in the credentials file, or nothing)."""
    import botocore.session

    from ingest.transports.environment import have_credentials, keys_in_environment

    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    if profile_keys:
        (home / ".aws" / "credentials").write_text("[default]\naws_access_key_id = AKIDFILE\n"
                                                  "aws_secret_access_key = secret\n")
    if "AWS_PROFILE" in keys:
        (home / ".aws" / "config").write_text("[profile other]\nregion = us-east-1\n")
    assert have_credentials() is expected
    assert (botocore.session.Session().get_credentials() is not None) is expected
    assert keys_in_environment() is (bool(keys.get("AWS_ACCESS_KEY_ID")) and bool(keys.get("AWS_SECRET_ACCESS_KEY")))


def test_keys_in_the_environment_are_known_without_importing_botocore(home):
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "secret"}
    code = ("import sys; from ingest.transports.environment import have_credentials; "
            "print(have_credentials(), 'botocore' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["True", "False"]
