"""A private certificate authority for a test bed's HTTPS endpoint, made with the `openssl` tool.

A store behind a site's own CA is what users meet (Acacia's clients are handed a bundle), so a
test bed serves HTTPS with a CA of its own, made at start, and clients trust it through
AWS_CA_BUNDLE or `ca_bundle`, exactly as they would a site's. The openssl command line is used,
not a Python package: it is on every Debian machine that has the stores installed, and the
package must not need its test extras to start a store.

Keys are EC P-256 (every TLS library in the path, Boost.Asio's OpenSSL in Ceph's beast frontend
included, takes them); certificates live a day: a test bed is thrown away long before.
"""
from __future__ import annotations

import os
import shutil
import subprocess

from ingest.errors import IngestError

HOST = "127.0.0.1"
VALID_DAYS = 1
_OPENSSL_TIMEOUT_S = 60.0


def make_ca_and_cert(directory: str, host: str = HOST) -> dict[str, str]:
    """Write ca.pem (a self-signed CA), server.pem and server.key (a certificate for `host`,
    127.0.0.1 by default, and localhost, signed by that CA) into `directory`; return their paths
    by name ("ca", "server", "key"). IngestError naming the step when openssl is missing or fails."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise IngestError("openssl not found: a test bed's HTTPS needs it (apt: openssl)")
    directory = os.fspath(directory)
    paths = {"ca": os.path.join(directory, "ca.pem"), "server": os.path.join(directory, "server.pem"),
             "key": os.path.join(directory, "server.key")}
    ca_key = os.path.join(directory, "ca.key")
    csr = os.path.join(directory, "server.csr")
    extensions = os.path.join(directory, "server.ext")
    alt_name = f"IP:{host}" if _is_ip(host) else f"DNS:{host}"
    with open(extensions, "w") as fh:
        fh.write(f"subjectAltName={alt_name},DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                 "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    ec_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _run(openssl, "CA certificate", "req", "-x509", *ec_key, "-keyout", ca_key, "-out", paths["ca"],
         "-days", str(VALID_DAYS), "-subj", "/CN=ingest test bed CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _run(openssl, "server key", "req", *ec_key, "-keyout", paths["key"], "-out", csr, "-subj", f"/CN={host}")
    _run(openssl, "server certificate", "x509", "-req", "-in", csr, "-CA", paths["ca"], "-CAkey", ca_key,
         "-CAcreateserial", "-out", paths["server"], "-days", str(VALID_DAYS), "-extfile", extensions)
    os.chmod(paths["key"], 0o600)
    return paths


def _run(openssl: str, what: str, *args: str) -> None:
    try:
        done = subprocess.run([openssl, *args], capture_output=True, timeout=_OPENSSL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise IngestError(f"openssl: making the {what} took over {_OPENSSL_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["(no output)"]
        raise IngestError(f"openssl: making the {what} failed (status {done.returncode}): {tail[0]}")


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
