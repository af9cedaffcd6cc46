"""Redaction, in one place: what may be shown of a URL, a message or a setting.

A presigned URL is a bearer credential until it expires, and an access key or session token is
one for good: neither may reach a log, a report, an error message or a table. Every module that
shows text it did not write itself passes it through here.
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit

# URLs anywhere in free text (a message may quote one); whitespace and quotes end them.
_URL = re.compile(r"""https?://[^\s'"<>]+""", re.IGNORECASE)
# NAME=VALUE arguments (mpiexec -x, env) whose name says the value is a credential.
_SECRET_ASSIGNMENT = re.compile(r"\b([A-Za-z_]*(?:SECRET|TOKEN|PASSWORD|ACCESS_KEY)[A-Za-z_]*)=\S+", re.IGNORECASE)
# Environment values that are credentials wherever they turn up in text.
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ACCESS_KEY_ID")
# Setting names that say their value is a credential: refused in config files.
_SECRET_WORDS = ("secret", "password", "passwd", "token", "access_key", "credential", "private_key")
REDACTED = "<redacted>"


def redact_url(url: str) -> str:
    """The URL with any user:password and the whole query (signature, credential) removed.
    Never raises: a URL too malformed to parse is shown by its scheme alone."""
    try:
        return _redact(url)
    except ValueError:
        scheme = url.split(":", 1)[0] if ":" in url else "url"
        return f"{scheme}://<unparseable URL, redacted>"


def _redact(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal: urlsplit strips the brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    # The whole query goes: besides the signature, X-Amz-Credential names the access key and
    # X-Amz-Security-Token is a credential of its own.
    query = REDACTED if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + (f"?{query}" if query else "")


def scrub(text: str) -> str:
    """Remove query strings from free text (an error message that may quote a URL)."""
    return re.sub(r"\?[^\s'\")]*", "?" + REDACTED, text)


def redact_urls(text: str) -> str:
    """Every URL in `text` that carries a query or user info, redacted; other URLs as they are,
    so redacting twice changes nothing."""
    return _URL.sub(_redact_match, text)


def _redact_match(match: re.Match) -> str:
    url = match.group(0)
    parts = urlsplit(url)
    return redact_url(url) if parts.query or "@" in parts.netloc else url


def redact_text(text: str) -> str:
    """`text` (a child's command line or stderr) with URL credentials, NAME=secret arguments and
    the values of credential environment variables removed."""
    text = redact_urls(text)
    text = _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    for name in _SECRET_ENV:
        value = os.environ.get(name, "")
        if len(value) >= 4:  # a 1-3 character "secret" would blank ordinary words
            text = text.replace(value, REDACTED)
    return text


def looks_secret(key: str) -> bool:
    """True when a setting's name says its value is a credential (secret_key, session-token...)."""
    k = key.lower().replace("-", "_")
    return any(word in k for word in _SECRET_WORDS)
