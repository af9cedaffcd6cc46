"""What the user's environment already says about reaching the store, resolved once for every engine.

A site with a private CA, a proxy or a profile has already told boto3, the AWS CLI, s5cmd and
curl: AWS_CA_BUNDLE, ~/.aws/config, AWS_ENDPOINT_URL_S3, https_proxy... `resolve(options)`
reads all of it in one place, with botocore's own precedence (botocore does the reading: a
botocore Session's config chain and its endpoint provider), and every transport takes the
result: urllib3's pools, libcurl's handles and boto3's clients are all given the endpoint, CA,
addressing style and proxy from it explicitly (none reads those from the environment on its own),
so two engines cannot disagree about where to connect, whom to trust or which proxy to use.
Credentials stay with boto3's own chain. An explicit ingest option always wins.

PRECEDENCE lists, per setting, where it is looked for (first found wins); `describe_environment`
says which one each setting came from, with secrets redacted.

One module: PRECEDENCE and the _Resolver that follows it are the one place every engine's settings
are read, by design; split, the precedence table and the code applying it would sit apart and could
disagree.
"""
from __future__ import annotations

import ipaddress
import os
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from ingest.errors import ConfigError
from ingest.redact import redact_url
from ingest.transports.retry import RetryPolicy

PRECEDENCE: dict[str, tuple[str, ...]] = {
    "profile": ("option", "AWS_DEFAULT_PROFILE", "AWS_PROFILE", "'default'"),
    "endpoint_url": ("option", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "[services NAME] s3 endpoint_url",
                     "profile endpoint_url", "AWS's own endpoint (none of these)"),
    "ca_bundle": ("option", "AWS_CA_BUNDLE", "profile ca_bundle", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                  "SSL_CERT_FILE", "system trust store"),
    "verify_tls": ("option", "true"),
    "region": ("AWS_DEFAULT_REGION", "profile region", "AWS_REGION", "botocore's default"),
    "addressing_style": ("option", "profile s3 addressing_style", "ingest's default: path"),
    "proxy for http://": ("http_proxy (lower case only, as curl)", "all_proxy", "ALL_PROXY", "none"),
    "proxy for https://": ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "none"),
    "no_proxy": ("no_proxy", "NO_PROXY", "none"),
    "max_attempts": ("AWS_MAX_ATTEMPTS", "profile max_attempts", "none: ingest's default retries"),
}
# Consulted after botocore's own chain: each is honoured by a tool users configure (requests and
# botocore's endpoint, the curl tool, OpenSSL/Go/s5cmd), and a bundle found by one engine only
# would make engines disagree.
_LATER_CA_VARS = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE")
_ADDRESSING_STYLES = ("auto", "path", "virtual")
_PROXY_SCHEMES = ("http", "https")
_CACHE_ENTRIES = 32


@dataclass(frozen=True)
class Setting:
    """One resolved setting: its name, the value as it may be shown (redacted), and where it came from."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class Environment:
    """The effective connection settings for every engine; hashable, so a client cache can key on it."""

    endpoint_url: str | None  # None: AWS's own endpoint for the region
    verify_tls: bool
    ca_bundle: str | None  # a PEM file; None: the engine's default trust store
    ca_bundle_source: str
    profile: str | None  # None: botocore's 'default'
    profile_from_option: bool
    region: str | None
    addressing_style: str | None  # None: ingest's default, path
    proxies: tuple[tuple[str, str, str], ...]  # (scheme, proxy URL, setting it came from)
    no_proxy: str | None
    no_proxy_source: str
    max_attempts: int | None  # AWS_MAX_ATTEMPTS or the profile's: attempts per request, first included
    provenance: tuple[Setting, ...]

    def retries(self) -> tuple[int, str] | None:
        """(ingest retries, where from) that the user's max_attempts means, or None when unset.
        botocore counts the first attempt in max_attempts; ingest's `retries` counts only the
        attempts after it, so AWS_MAX_ATTEMPTS=5 is 4 retries, as boto3 would make at most 5 calls."""
        if self.max_attempts is None:
            return None
        source = next(s.source for s in self.provenance if s.name == "max_attempts")
        return self.max_attempts - 1, f"max_attempts {self.max_attempts} from {source}, less the first attempt"

    def tls_for(self, url: str | None) -> tuple[bool, str | None]:
        """(verify, CA file or None for the default store) for a connection to `url`; a configured
        bundle that cannot be read is an error naming the setting, but only when TLS is used."""
        if not self.verify_tls:
            return False, None
        if self.ca_bundle and _is_tls(url) and not os.path.isfile(self.ca_bundle):
            raise ConfigError(f"ca_bundle: {self.ca_bundle!r} (from {self.ca_bundle_source}) is not a readable file; "
                              "it should be a PEM file of the CA certificates to trust")
        return True, self.ca_bundle

    def botocore_verify(self, url: str | None):
        """boto3's `verify` for an endpoint: False, a CA file, or None (botocore's default, which
        finds nothing this resolution did not already find)."""
        verify, ca_file = self.tls_for(url)
        return ca_file if verify and ca_file else (None if verify else False)

    def proxy_for(self, url: str) -> str | None:
        """The proxy URL a connection to `url` goes through, or None (no proxy, or no_proxy matches)."""
        try:
            parts = urlsplit(url)
        except ValueError:  # a malformed URL: the transport refuses it, without quoting it
            return None
        chosen = next(((proxy, source) for s, proxy, source in self.proxies if s == parts.scheme.lower()), None)
        if chosen is None:
            return None
        if self.no_proxy and _bypasses(parts.netloc, self.no_proxy):
            return None
        proxy, source = chosen
        proxy_scheme = urlsplit(proxy).scheme.lower()
        if proxy_scheme not in _PROXY_SCHEMES:
            raise ConfigError(f"{source}: proxy {redact_url(proxy)!r} has scheme {proxy_scheme!r}; ingest's engines "
                              "(urllib3, boto3, libcurl) share http:// and https:// proxies only")
        return proxy

    def botocore_proxies(self, url: str) -> dict[str, str]:
        """botocore's `proxies` for an endpoint: explicit, so botocore does not read the environment
        itself (it would take upper-case HTTP_PROXY, which curl ignores)."""
        proxy = self.proxy_for(url)
        return {urlsplit(url).scheme.lower(): proxy} if proxy else {}

    def tls_hint(self) -> str:
        """What a TLS failure message should add: which CAs were trusted, and from where."""
        trusted = (f"{self.ca_bundle} from {self.ca_bundle_source}, which lacks the server's CA?" if self.ca_bundle
                   else "the system's")
        return (f"trusted CAs: {trusted}; give the server's CA with --ca-bundle or AWS_CA_BUNDLE; "
                "--no-verify-tls only for test servers")

    def describe(self) -> list[tuple[str, str, str]]:
        """(setting, value, source) rows, secrets redacted."""
        return [(s.name, s.value, s.source) for s in self.provenance]


def _is_tls(url: str | None) -> bool:
    return url is None or url.lower().startswith("https:")  # None: AWS's own endpoint, always https


def _bypasses(netloc: str, no_proxy: str) -> bool:
    """no_proxy as botocore reads it (urllib: '*', host and domain-suffix entries, host:port),
    plus curl's address and CIDR entries (10.0.0.0/8), common at HPC sites."""
    # Imported here: urllib.request loads http.client and email, which a rank that reads through
    # no proxy never needs.
    import urllib.request

    if urllib.request.proxy_bypass_environment(netloc, {"no": no_proxy}):
        return True
    host = urlsplit(f"//{netloc}").hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for entry in no_proxy.split(","):
        try:
            if address in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


# -- resolution ---------------------------------------------------------------------------------
def resolve(options: dict | None = None) -> Environment:
    """The effective settings for `options` (endpoint_url, ca_bundle, verify_tls, profile,
    addressing_style; others are ignored) in this process's environment and AWS config files.
    Cached on those inputs: a repeated open costs a dict lookup, a changed file or variable
    resolves again."""
    chosen = {k: v for k, v in (options or {}).items()
              if k in ("endpoint_url", "ca_bundle", "verify_tls", "profile", "addressing_style") and v is not None}
    key = (tuple(sorted(chosen.items())), _environment_key())
    with _CACHE_LOCK:
        found = _CACHE.get(key)
    if found is None:
        found = _Resolver(chosen).environment()
        with _CACHE_LOCK:
            if len(_CACHE) >= _CACHE_ENTRIES:
                _CACHE.clear()
            _CACHE[key] = found
    return found


def effective_options(options: dict) -> tuple[dict, tuple[Setting, ...]]:
    """(options with endpoint_url, ca_bundle and verify_tls made effective and `environment` added
    for the transports, the provenance record). An `environment` among the options, resolved
    already (rank 0's, broadcast with the job, for the same options), is kept as it is: a rank
    then reads no AWS file and imports no botocore to open a presigned URL."""
    environment = options.get("environment") or resolve(options)
    effective = dict(options, environment=environment, endpoint_url=environment.endpoint_url,
                     ca_bundle=environment.ca_bundle, verify_tls=environment.verify_tls)
    return effective, environment.provenance


def describe_environment(options: dict | None = None) -> list[tuple[str, str, str]]:
    """(setting, value, source) for `info`: every resolved setting and where it came from, plus
    which credentials botocore finds (their source only, never a key)."""
    rows = resolve(options).describe()
    rows.append(("credentials", *_credentials_row((options or {}).get("profile"))))
    return rows


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def _environment_key() -> tuple:
    """Everything resolution reads: the variables and the config files' identity (path, mtime, size)."""
    env = tuple(sorted((k, v) for k, v in os.environ.items()
                       if k.startswith("AWS_") or k.lower().endswith("_proxy") or k in _LATER_CA_VARS
                       or k in ("HOME", "REQUEST_METHOD")))
    files = []
    for var, default in (("AWS_CONFIG_FILE", "~/.aws/config"), ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")):
        path = os.path.expanduser(os.environ.get(var) or default)
        try:
            st = os.stat(path)
            files.append((path, st.st_mtime_ns, st.st_size))
        except OSError:
            files.append((path, None, None))
    return env, tuple(files)


def keys_in_environment() -> bool:
    """Do AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY both hold a value? botocore's chain asks its
    environment provider first, and for a session that names no profile (ingest's) it answers
    with these keys whatever AWS_PROFILE says; so where they are set, the chain finds keys, and
    a rank learns that without importing botocore (0.2 s of CPU, times every rank on a node)."""
    return bool(os.environ.get("AWS_ACCESS_KEY_ID")) and bool(os.environ.get("AWS_SECRET_ACCESS_KEY"))


def have_credentials() -> bool:
    """True when botocore's standard chain finds keys (environment, profile, instance role); the
    environment's keys are looked at first, without botocore (keys_in_environment)."""
    if keys_in_environment():
        return True
    import botocore.session

    return botocore.session.Session().get_credentials() is not None


def _credentials_row(profile: str | None) -> tuple[str, str]:
    import botocore.session

    try:
        credentials = botocore.session.Session(profile=profile).get_credentials()
    except Exception as exc:  # botocore: ProfileNotFound, PartialCredentialsError, ...
        return "error", f"botocore: {type(exc).__name__}"
    if credentials is None:
        return "none found", "botocore's chain (unsigned: presigned URLs only)"
    return "found", f"botocore's chain: {credentials.method}"


class _Resolver:
    """One resolution: a botocore Session reads the files and variables; this names the sources."""

    def __init__(self, options: dict):
        import botocore.session

        self.options = options
        self.session = botocore.session.Session(profile=options.get("profile"))
        self.env = os.environ
        self.provenance: list[Setting] = []
        self.config_file = os.path.expanduser(self.session.get_config_variable("config_file"))
        self.credentials_file = os.path.expanduser(self.session.get_config_variable("credentials_file"))

    def note(self, name: str, value, source: str) -> None:
        self.provenance.append(Setting(name, "" if value is None else str(value), source))

    def environment(self) -> Environment:
        profile, profile_source = self.profile()
        self.scoped = self._scoped_config(profile, profile_source)
        endpoint_url = self.endpoint_url()
        verify_tls, ca_bundle, ca_source = self.tls()
        region = self.region()
        addressing_style = self.addressing_style()
        proxies, no_proxy, no_proxy_source = self.proxies()
        max_attempts = self.max_attempts()
        return Environment(endpoint_url=endpoint_url, verify_tls=verify_tls, ca_bundle=ca_bundle,
                           ca_bundle_source=ca_source, profile=profile,
                           profile_from_option="profile" in self.options, region=region,
                           addressing_style=addressing_style, proxies=proxies, no_proxy=no_proxy,
                           no_proxy_source=no_proxy_source, max_attempts=max_attempts,
                           provenance=tuple(self.provenance))

    # -- where a value came from ----------------------------------------------------------------
    def profile(self) -> tuple[str | None, str]:
        if "profile" in self.options:
            name, source = self.options["profile"], "option"
        else:
            source = next((var for var in PRECEDENCE["profile"][1:3] if self.env.get(var)), "default")
            name = self.env.get(source) if source != "default" else None
        self.note("profile", name or "default", source)
        self.profile_name = name or "default"
        return name, source

    def _scoped_config(self, profile: str | None, source: str) -> dict:
        from botocore.exceptions import BotoCoreError

        try:
            return self.session.get_scoped_config()
        except BotoCoreError as exc:
            if type(exc).__name__ == "ProfileNotFound":
                raise ConfigError(f"profile: {profile!r} (from {source}) is not a profile in {self.config_file} "
                                  f"or {self.credentials_file}") from None
            raise ConfigError(f"AWS config {self.config_file}: {exc}") from None

    def in_profile(self, key: str) -> str:
        """Which file of the profile holds `key`: botocore merges the credentials file's sections
        into the config file's profiles, the credentials file winning."""
        from botocore.configloader import raw_config_parse
        from botocore.exceptions import BotoCoreError

        try:
            in_credentials = key in raw_config_parse(self.credentials_file).get(self.profile_name, {})
        except BotoCoreError:  # no credentials file
            in_credentials = False
        where = self.credentials_file if in_credentials else self.config_file
        return f"profile '{self.profile_name}' in {where}"

    # -- the settings -----------------------------------------------------------------------------
    def endpoint_url(self) -> str | None:
        if "endpoint_url" in self.options:
            value, source = self.options["endpoint_url"], "option"
        elif self.session.get_config_variable("ignore_configured_endpoint_urls"):
            value, source = None, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS / ignore_configured_endpoint_urls"
        else:
            value = self._botocore_endpoint()
            source = self._endpoint_source(value)
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"endpoint_url: {redact_url(value)!r} (from {source}) is not an http(s)://HOST URL")
        self.note("endpoint_url", redact_url(value) if value else "AWS's own endpoint", source)
        return value

    def _botocore_endpoint(self) -> str | None:
        """The endpoint a boto3 S3 client would use: botocore's own provider, as Session.create_client builds it."""
        from botocore.configprovider import ConfiguredEndpointProvider
        from botocore.exceptions import BotoCoreError

        try:
            return ConfiguredEndpointProvider(full_config=self.session.full_config, scoped_config=self.scoped,
                                              client_name="s3").provide()
        except BotoCoreError as exc:  # InvalidConfigError: `services = NAME` without its section
            raise ConfigError(f"endpoint_url: {self.in_profile('services')}: {exc}") from None

    def _endpoint_source(self, value: str | None) -> str:
        """Name the place botocore took `value` from, looking in its order (ConfiguredEndpointProvider)."""
        if value is None:
            return "default"
        for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
            if self.env.get(var) == value:
                return var
        services = self.scoped.get("services")
        if services:
            section = self.session.full_config.get("services", {}).get(services, {})
            if (section.get("s3") or {}).get("endpoint_url") == value:
                return f"[services {services}] s3 endpoint_url in {self.config_file} ({self.in_profile('services')})"
        if self.scoped.get("endpoint_url") == value:
            return self.in_profile("endpoint_url")
        return "botocore"

    def tls(self) -> tuple[bool, str | None, str]:
        if self.options.get("verify_tls") is False:
            self.note("verify_tls", False, "option")
            self.note("ca_bundle", "not used (verify_tls is false)", "option")
            return False, None, "option"
        self.note("verify_tls", True, "option" if "verify_tls" in self.options else "default")
        if self.options.get("ca_bundle"):
            value, source = self.options["ca_bundle"], "option"
        elif self.env.get("AWS_CA_BUNDLE"):
            value, source = self.env["AWS_CA_BUNDLE"], "AWS_CA_BUNDLE"
        elif self.session.get_config_variable("ca_bundle"):
            value, source = self.session.get_config_variable("ca_bundle"), self.in_profile("ca_bundle")
        else:
            source = next((var for var in _LATER_CA_VARS if self.env.get(var)), None)
            value = self.env.get(source) if source else None
        if value is None:
            self.note("ca_bundle", "the engine's default trust store", "default")
            return True, None, "default"
        value = os.path.expanduser(value)
        self.note("ca_bundle", value, source)
        return True, value, source

    def region(self) -> str | None:
        value = self.session.get_config_variable("region")
        if value:
            source = "AWS_DEFAULT_REGION" if self.env.get("AWS_DEFAULT_REGION") == value else self.in_profile("region")
        elif self.env.get("AWS_REGION"):  # botocore ignores it; s5cmd (aws-sdk-go) reads it
            value, source = self.env["AWS_REGION"], "AWS_REGION"
        else:
            source = "default"
        self.note("region", value or "botocore's default (us-east-1 for S3)", source)
        return value or None

    def addressing_style(self) -> str | None:
        if "addressing_style" in self.options:
            value, source = self.options["addressing_style"], "option"
        else:
            value = (self.session.get_config_variable("s3") or {}).get("addressing_style")
            source = self.in_profile("s3") + " (s3 addressing_style)" if value else "default"
        if value is not None and value not in _ADDRESSING_STYLES:
            raise ConfigError(f"addressing_style: {value!r} (from {source}) is not one of "
                              f"{', '.join(_ADDRESSING_STYLES)}")
        # Unset, ingest signs path style (s3client.s3_config): a site's store rarely has wildcard
        # DNS for BUCKET.host, and botocore's auto would pick virtual hosts for AWS's own endpoint.
        self.note("addressing_style", value or "path (ingest's default)", source)
        return value

    def proxies(self) -> tuple[tuple, str | None, str]:
        """Proxies as curl reads them (lower case first; upper-case HTTP_PROXY never, the
        "httpoxy" rule), applied alike to every engine."""
        found = []
        fallback = self._first("all_proxy", "ALL_PROXY")
        for scheme, names in (("http", ("http_proxy",)), ("https", ("https_proxy", "HTTPS_PROXY"))):
            var = self._first(*names) or fallback
            if var:
                proxy = _with_scheme(self.env[var])
                found.append((scheme, proxy, var))
                self.note(f"proxy for {scheme}://", redact_url(proxy), var)
            else:
                self.note(f"proxy for {scheme}://", "none", "default")
        if self.env.get("HTTP_PROXY") and not self.env.get("http_proxy"):
            self.note("HTTP_PROXY", "ignored: as curl, only lower-case http_proxy is read (httpoxy)", "HTTP_PROXY")
        no_var = self._first("no_proxy", "NO_PROXY")
        no_proxy = self.env[no_var] if no_var else None
        self.note("no_proxy", no_proxy or "none", no_var or "default")
        return tuple(found), no_proxy, no_var or "default"

    def _first(self, *names: str) -> str | None:
        return next((name for name in names if self.env.get(name)), None)

    def max_attempts(self) -> int | None:
        try:
            value = self.session.get_config_variable("max_attempts")
        except ValueError:
            source = "AWS_MAX_ATTEMPTS" if self.env.get("AWS_MAX_ATTEMPTS") else self.in_profile("max_attempts")
            raise ConfigError(f"max_attempts: not a whole number (from {source})") from None
        if self.env.get("AWS_RETRY_MODE") or self.scoped.get("retry_mode"):
            self.note("retry_mode", "not followed: ingest backs off with full jitter and counts every retry",
                      "AWS_RETRY_MODE" if self.env.get("AWS_RETRY_MODE") else self.in_profile("retry_mode"))
        if value is None:
            self.note("max_attempts", f"not set (ingest retries: its retries setting, else {RetryPolicy.retries})",
                      "default")
            return None
        source = "AWS_MAX_ATTEMPTS" if self.env.get("AWS_MAX_ATTEMPTS") else self.in_profile("max_attempts")
        if value < 1:
            raise ConfigError(f"max_attempts: {value} (from {source}) must be at least 1 "
                              "(attempts, the first included)")
        self.note("max_attempts", f"{value} (ingest retries: {value - 1}, unless ingest's retries is set)", source)
        return value


def _with_scheme(proxy: str) -> str:
    """A proxy given as HOST:PORT means http://HOST:PORT to curl and to botocore alike."""
    return proxy if "://" in proxy else f"http://{proxy}"
