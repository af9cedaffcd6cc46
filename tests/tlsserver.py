"""An HTTPS server on a free loopback port, with a CA and a server certificate made at test time.

`make_ca_and_cert(dir)` writes ca.pem (a self-signed CA) and server.pem/server.key (a
certificate for 127.0.0.1 signed by it), with the `cryptography` package when installed and
`openssl req` otherwise. `TlsServer(data, certdir)` serves `data` at any path with Range
support (206 + Content-Range), as a presigned-URL endpoint would. The TLS handshake happens
in each connection's own thread, so a client that refuses the certificate cannot stall the
accept loop for the next one.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
import subprocess
import threading
from http.server import ThreadingHTTPServer

from tests.badhttp import handler_for

_RANGE = re.compile(r"bytes=(\d+)-(\d+)")
HOST = "127.0.0.1"


def make_ca_and_cert(directory, dns_names=()) -> dict[str, str]:
    """Write ca.pem, server.pem, server.key into `directory`; return their paths by name. The
    certificate names 127.0.0.1, localhost and `dns_names` (virtual-host buckets)."""
    directory = os.fspath(directory)
    paths = {name: os.path.join(directory, f"{name}.pem" if name != "key" else "server.key")
             for name in ("ca", "server", "key")}
    try:
        import cryptography  # noqa: F401
    except ImportError:
        _make_with_openssl(directory, paths)
    else:
        _make_with_cryptography(paths, dns_names)
    return paths


def _make_with_cryptography(paths: dict[str, str], dns_names=()) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = {"not_valid_before": now - datetime.timedelta(minutes=5),
             "not_valid_after": now + datetime.timedelta(days=1)}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ingest test CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(valid["not_valid_before"]).not_valid_after(valid["not_valid_after"])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(valid["not_valid_before"]).not_valid_after(valid["not_valid_after"])
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost"),
                                                    *(x509.DNSName(name) for name in dns_names)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    with open(paths["ca"], "wb") as fh:
        fh.write(ca_cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["server"], "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["key"], "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def _make_with_openssl(directory: str, paths: dict[str, str]) -> None:
    ca_key = os.path.join(directory, "ca.key")
    csr = os.path.join(directory, "server.csr")
    ext = os.path.join(directory, "server.ext")
    with open(ext, "w") as fh:
        fh.write(f"subjectAltName=IP:{HOST}\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n")

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", ca_key, "-out", paths["ca"], "-days", "1", "-subj", "/CN=ingest test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", paths["key"], "-out", csr, "-subj", f"/CN={HOST}")
    openssl("x509", "-req", "-in", csr, "-CA", paths["ca"], "-CAkey", ca_key, "-CAcreateserial",
            "-out", paths["server"], "-days", "1", "-extfile", ext)


class TlsServer:
    """Serves `data` over HTTPS at any path, honouring `Range: bytes=a-b` with 206 replies.

    `.url(path)` is the https URL for a path (a query may be added by the caller); `.requests`
    counts requests that completed the handshake and `.handshake_failures` those that did not.
    """

    def __init__(self, data: bytes, certs: dict[str, str]):
        self.data = data
        self.requests = 0
        self.handshake_failures = 0
        self._lock = threading.Lock()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs["server"], certs["key"])
        outer = self
        Handler = handler_for(self._serve)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request, client_address):
                try:
                    request = context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    with outer._lock:
                        outer.handshake_failures += 1
                    return
                super().finish_request(request, client_address)

            def handle_error(self, request, client_address):
                pass  # a client hanging up mid-reply is not the server's failure

        self._httpd = Server((HOST, 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, path: str = "/bucket/cube.fits") -> str:
        return f"https://{HOST}:{self.port}{path}"

    def __enter__(self) -> "TlsServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _serve(self, handler) -> None:
        with self._lock:
            self.requests += 1
        total = len(self.data)
        m = _RANGE.match(handler.headers.get("Range", ""))
        if not m:
            handler.send_response(200)
            handler.send_header("Content-Length", str(total))
            handler.end_headers()
            handler.wfile.write(self.data)
            return
        first, last = int(m.group(1)), min(int(m.group(2)), total - 1)
        if first >= total or first > last:
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{total}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        body = self.data[first : last + 1]
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {first}-{last}/{total}")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("ETag", '"tls-test-object"')
        handler.end_headers()
        handler.wfile.write(body)
