"""One way to make a boto3 S3 client, shared by presign, upload and the S3 transport.

Endpoint, TLS trust, region, addressing style and proxies come from
ingest.transports.environment (boto3's own chain, read by botocore, plus curl's proxy rules), the
same resolution every other engine uses; credentials come from boto3's standard chain unless given.
"""
from __future__ import annotations

import os
import threading

import boto3
from botocore.config import Config

from ingest.transports.environment import Environment, resolve


def s3_config(max_pool_connections: int = 10, **config_kw) -> Config:
    """botocore Config with SigV4 and path-style addressing unless config_kw's s3 names another
    (a profile's s3.addressing_style reaches it through s3_client); max_pool_connections default 10."""
    # SigV4: without it boto3 still presigns in the old SigV2 form, which versitygw (and
    # newer AWS regions) answer with 400. Path style by default: a loopback or on-site
    # endpoint has no wildcard DNS for bucket.host names.
    options = {"signature_version": "s3v4", "max_pool_connections": max_pool_connections, **config_kw}
    options["s3"] = {"addressing_style": "path", **(config_kw.get("s3") or {})}
    return Config(**options)


def s3_client(max_pool_connections: int = 10, *, config: Config | None = None,
              session: boto3.session.Session | None = None, environment: Environment | None = None, **kw):
    """boto3 S3 client (SigV4) configured from `environment` (default: resolved from kw's
    endpoint_url and verify); kw: client args (endpoint_url, verify, keys, region_name) or
    Config options (read_timeout, ...). Explicit kw win over the environment."""
    # One flat keyword list for callers: Config options (timeouts, retries) go to Config,
    # the rest (endpoint_url, keys, region_name, verify) to session.client.
    config_kw = {name: kw.pop(name) for name in list(kw) if name in Config.OPTION_DEFAULTS}
    if environment is None:
        environment = resolve(_options_from_client_kw(kw))
    endpoint = kw.get("endpoint_url") or environment.endpoint_url
    if endpoint:
        kw["endpoint_url"] = endpoint
    if "verify" not in kw and environment.botocore_verify(endpoint) is not None:
        kw["verify"] = environment.botocore_verify(endpoint)
    if environment.region and "region_name" not in kw:
        kw["region_name"] = environment.region
    if environment.addressing_style:
        config_kw["s3"] = {"addressing_style": environment.addressing_style, **(config_kw.get("s3") or {})}
    if "proxies" not in config_kw:
        # Explicit, even when empty: botocore would otherwise read the proxy variables itself,
        # by Python's rules, not the ones every other engine follows.
        config_kw["proxies"] = environment.botocore_proxies(endpoint or _aws_endpoint(environment.region))
    merged = s3_config(max_pool_connections, **config_kw)
    if config is not None:
        merged = merged.merge(config)
    # A private Session: boto3's module-level default session is not thread-safe to create.
    if session is None:
        session = boto3.session.Session(profile_name=environment.profile if environment.profile_from_option else None)
    return session.client("s3", config=merged, **kw)


def _options_from_client_kw(kw: dict) -> dict:
    """Environment options from boto3 client arguments (endpoint_url, verify)."""
    options = {"endpoint_url": kw.get("endpoint_url")}
    verify = kw.get("verify")
    if verify is False:
        options["verify_tls"] = False
    elif isinstance(verify, str):
        options["ca_bundle"] = verify
    return options


def _aws_endpoint(region: str | None) -> str:
    """Where a client without an endpoint connects (for its proxy decision)."""
    return f"https://s3.{region or 'us-east-1'}.amazonaws.com"


_CLIENTS: dict = {}
_CLIENTS_LOCK = threading.Lock()


def shared_s3_client(max_pool_connections: int = 10, *, environment: Environment | None = None, **kw):
    """A process-wide cached s3_client for the same options, AWS_* variables and environment.

    Making a boto3 client costs 0.1-0.2 s (measured here), more than a small read; clients are
    thread-safe, so repeated reads in one process share one. The resolved environment and the
    AWS_* variables (credentials) are part of the key, so a changed endpoint, CA, proxy or key
    never reuses a stale client.
    """
    if environment is None:
        environment = resolve(_options_from_client_kw(kw))
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    key = (max_pool_connections, repr(sorted(kw.items())), env, environment)  # repr: values may be dicts
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = s3_client(max_pool_connections, environment=environment, **kw)
    return client


def have_credentials() -> bool:
    """True when boto3's standard chain finds keys (environment, profile, instance role)."""
    return boto3.session.Session().get_credentials() is not None
