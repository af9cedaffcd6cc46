"""Where the bytes come from: presign an s3:// source for the presigned method, and make sure a
URL outlives the run (re-sign when this process has credentials, refuse when already expired,
warn otherwise), on rank 0; meanwhile, every other rank readies what its first read needs.
"""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from importlib import import_module

from ingest.config import RunConfig
from ingest.config.settings import transport_options
from ingest.errors import ConfigError, ExpiredURLError
from ingest.transports import warm_up


def ready_to_read(cfg: RunConfig, *modules: str) -> None:
    """A rank waiting while rank 0 prepares: import `modules` (what it writes with) and ready its
    method's client (ingest.transports.warm_up), so that they cost no one a wait later."""
    for name in modules:
        import_module(name)
    warm_up(cfg.source, cfg.resolved_method, **transport_options(cfg))


def resolve_source(cfg: RunConfig) -> tuple[str, str, tuple | None]:
    """(method, source to read, signer args). An s3:// source read as 'presigned' is signed here;
    a user's presigned URL can be re-signed later only if it is path-style S3 and this process
    has credentials."""
    from ingest.transports.presign import parse_s3_uri, url_object, url_signer

    method = cfg.resolved_method
    if method != "presigned":
        return method, cfg.source, None
    if cfg.source.startswith("s3://"):
        bucket, key = parse_s3_uri(cfg.source)
        args = (bucket, key, cfg.presign_expires_s, cfg.endpoint_url)
        from ingest.transports.presign import presign_url
        from ingest.transports.s3client import shared_s3_client

        client = shared_s3_client(**({"endpoint_url": cfg.endpoint_url} if cfg.endpoint_url else {}))
        return method, presign_url(bucket, key, expires_s=cfg.presign_expires_s, client=client), args
    target = url_object(cfg.source)
    if target is not None and url_signer(target[1], target[2], cfg.presign_expires_s, target[0]) is not None:
        return method, cfg.source, (target[1], target[2], cfg.presign_expires_s, target[0])
    return method, cfg.source, None


def job_source(cfg: RunConfig) -> tuple[str, str, tuple | None]:
    """Phase (ingest.driver.job.prepare_job): (method, source to read, signer args), a URL
    living long enough for the header and the probe (60 s); the job's own lifetime is checked
    once its makespan is predicted."""
    method, source, signer_args = resolve_source(cfg)
    if method == "presigned":
        source = ensure_lifetime(source, signer_args, 60.0)
    return method, source, signer_args


def ensure_lifetime(url: str, signer_args: tuple | None, needed_s: float, cfg: RunConfig | None = None) -> str:
    """Rank 0, before any rank reads: a URL that will not outlive the run is re-signed when we
    can, refused when already expired, and warned about otherwise (the estimate may be pessimistic).
    A re-signed URL lives as long as the signer's presign_expires_s (signer_args[2], the config's);
    `cfg` is not read and may be left out."""
    from ingest.transports.presign import url_expiry, url_signer
    from ingest.redact import redact_url

    expiry = url_expiry(url)
    if expiry is None:
        return url
    left_s = (expiry - datetime.now(timezone.utc)).total_seconds()
    if left_s >= needed_s:
        return url
    if signer_args is not None:
        expires_s = signer_args[2]
        if expires_s < needed_s:
            raise ConfigError(f"presign_expires_s: {expires_s} s is shorter than the run's "
                              f"estimated {needed_s:.0f} s (with margin); raise it (at most 604800)")
        return url_signer(*signer_args)()
    if left_s <= 0:
        raise ExpiredURLError(f"{redact_url(url)}: the presigned URL expired at {expiry:%Y-%m-%d %H:%M:%S} UTC, "
                              f"{-left_s:.0f} s ago; get a new URL (no credentials here to sign one)")
    print(f"ingest: warning: the presigned URL expires in {left_s:.0f} s but the run may take "
          f"{needed_s:.0f} s (estimate x 2 + 60 s); reads after expiry will fail", file=sys.stderr, flush=True)
    return url


def resolve_tile_sources(cfg: RunConfig, keys) -> tuple[tuple[str, tuple | None], ...]:
    """Rank 0, for a tiled source: (source to read, signer args) per tile key, beside the index
    (cfg.source). Read as 'presigned', each tile of an s3:// index is signed here (a local
    signature per tile, no request); a tile beside a presigned index URL is signed when this
    process has credentials for its path-style S3 URL, else read as the bare URL (a public bucket)."""
    from ingest.core.tiles import tile_location
    from ingest.transports.environment import have_credentials
    from ingest.transports.presign import parse_s3_uri, presign_url, url_object

    locations = [tile_location(cfg.source, key) for key in keys]
    if cfg.resolved_method != "presigned":
        return tuple((location, None) for location in locations)
    endpoint = cfg.endpoint_url
    if not cfg.source.startswith("s3://"):
        target = url_object(locations[0])
        if target is None or not have_credentials():  # looked up once, not per tile
            return tuple((location, None) for location in locations)
        endpoint = target[0]
    from ingest.transports.s3client import shared_s3_client

    client = shared_s3_client(**({"endpoint_url": endpoint} if endpoint else {}))
    signed = []
    for location in locations:
        if location.startswith("s3://"):
            bucket, key = parse_s3_uri(location)
        else:
            _, bucket, key = url_object(location)
        signed.append((presign_url(bucket, key, expires_s=cfg.presign_expires_s, client=client),
                       (bucket, key, cfg.presign_expires_s, endpoint)))
    return tuple(signed)
