"""Transport registry: a method name -> the class that reads with it, imported when first used.

A rank imports only the client its method needs: `open_transport("s3://...")` loads boto3,
a presigned URL loads urllib3 (and libcurl's pycurl on the native engine), a local file neither.
So the registry names each class by module and imports it on first use; importing this package
loads no HTTP or S3 client (tests/test_startup.py keeps that so).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module

from ingest.errors import ConfigError
from ingest.transports.base import MemoryTransport, ObjectInfo, Transport

ENGINES = ("auto", "native", "urllib3")  # urllib3: the reference transports (urllib3 and boto3)


class _LazyClasses(Mapping):
    """method -> Transport class, each imported from its module on first lookup."""

    def __init__(self, where: dict[str, tuple[str, str]]):
        self._where = where

    def __getitem__(self, method: str) -> type[Transport]:
        module, name = self._where[method]
        return getattr(import_module(module), name)

    def __contains__(self, method) -> bool:  # a name's presence, without importing its class
        return method in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


TRANSPORTS: Mapping[str, type[Transport]] = _LazyClasses({
    "posix": ("ingest.transports.posix", "PosixTransport"),
    "presigned": ("ingest.transports.http", "HttpTransport"),
    "s3": ("ingest.transports.s3", "S3Transport"),
})


def native_transport(method: str, engine: str) -> type[Transport] | None:
    """The native engine's class for `method`, when `engine` asks for it and it can run here.

    auto: native when pycurl is installed and working, else the reference transports. native:
    the native engine or a ConfigError saying why not. Local files have no engine to choose."""
    if engine not in ENGINES:
        raise ConfigError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "urllib3" or method == "posix":
        return None
    from ingest.transports.curl import CurlS3Transport, CurlTransport, native_engine_error

    problem = native_engine_error()
    if problem:
        if engine == "native":
            raise ConfigError(f"engine: 'native' cannot run here: {problem}; use engine = 'urllib3'")
        return None
    return CurlS3Transport if method == "s3" else CurlTransport


def method_modules(method: str, engine: str = "auto") -> tuple[str, ...]:
    """The modules opening `method` on `engine` imports: its class's, and for s3 the client
    module every S3 engine signs or reads with (boto3 and botocore). A rank that waits while rank
    0 prepares imports them meanwhile (ingest.driver.rootwork.preload), instead of at its first
    open, where the ranks reading with it would wait for its imports."""
    if method == "auto" or method not in TRANSPORTS:
        return ()
    try:
        cls = native_transport(method, engine) or TRANSPORTS[method]
    except ConfigError:  # said where the transport is opened, inside the job's shared error handling
        return ()
    return (cls.__module__,) + (("ingest.transports.s3client",) if method == "s3" else ())


def warm_up(source: str, method: str, **options) -> None:
    """Pay now what the first open of `method` costs a process: its modules, and for s3 the shared
    boto3 client (loading botocore's service model: 0.1-0.15 s, where a second open takes under a
    millisecond). A rank that waits while rank 0 prepares does it meanwhile, so that neither rank
    0's probe rounds nor the ranks' first reads wait for it. Opens nothing on the network; an
    error here is left to the job's own open, which every rank learns of."""
    for name in method_modules(method, options.get("engine", "auto")):
        import_module(name)
    if method != "s3":
        return
    try:
        with open_transport(source, method, **options):
            pass
    except Exception:  # noqa: BLE001 - said where the job opens it, inside its shared error handling
        return


def resolved_engine(method: str, engine: str) -> str:
    """What will carry `method`'s requests on `engine`, for info and reports: native (libcurl),
    urllib3, boto3 or posix."""
    if native_transport(method, engine) is not None:
        return "native"
    return {"presigned": "urllib3", "s3": "boto3"}.get(method, method)


def method_for(source: str) -> str:
    """The natural method for a source: s3:// -> s3, http(s):// -> presigned, else posix."""
    if source.startswith("s3://"):
        return "s3"
    if source.startswith(("http://", "https://")):
        return "presigned"
    return "posix"


def open_transport(source: str, method: str = "auto", *, threads: int = 1, engine: str = "auto",
                   **options) -> Transport:
    """Open `source` with `method` ("auto" picks from the source's form) on `engine` (ENGINES).

    options: the transports' keywords (timeouts, TLS, endpoint_url, ...); `environment`, an
    Environment already resolved for the same options (rank 0's, broadcast with the job), is
    taken as it is instead of being resolved again here."""
    if method == "auto":
        method = method_for(source)
    if method not in TRANSPORTS:
        raise ConfigError(f"method: {method!r} is not one of auto, {', '.join(TRANSPORTS)}")
    natural = method_for(source)
    if natural != method:
        raise ConfigError(
            f"method: {method!r} cannot read {source if natural != 'presigned' else 'an http(s) URL'} "
            f"(that needs {natural!r}; for an s3:// source the driver presigns it for 'presigned')"
        )
    if method != "posix":
        from ingest.transports.environment import effective_options

        # Once per open, for every engine alike: what the user's environment says (AWS_CA_BUNDLE,
        # profiles, AWS_ENDPOINT_URL*, proxies), under the explicit options.
        options, _provenance = effective_options(options)
    return (native_transport(method, engine) or TRANSPORTS[method])(source, threads=threads, **options)


def describe_environment(options: dict | None = None) -> list[tuple[str, str, str]]:
    """(setting, value, source) for `info` (ingest.transports.environment.describe_environment)."""
    from ingest.transports.environment import describe_environment as describe

    return describe(options)


__all__ = ["MemoryTransport", "ObjectInfo", "Transport", "TRANSPORTS", "ENGINES", "open_transport", "method_for",
           "native_transport", "resolved_engine", "describe_environment", "warm_up"]
