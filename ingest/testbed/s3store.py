"""What every S3 store the tests and benchmarks start on loopback offers its clients, whoever serves
it (versitygw: ingest.testbed.localserver; Ceph RGW: ingest.testbed.ceph).

`with store:` starts it and stops it. `client()` is a boto3 client made once per endpoint per
start: a client costs 0.1-0.2 s (it loads the service model) and is thread-safe, and the keys and
ports change with every start, so `start`/`stop` forget the clients made before. `env()` gives the
AWS_* variables that point boto3's standard chain (a subprocess's) at the store.

A store sets `access_key`, `secret_key` and `region`, and has `start()`, `stop()` and
`endpoint_url`; one that serves HTTPS too has `https_endpoint` and `ca_bundle` (a client of an
https endpoint verifies against that CA).
"""
from __future__ import annotations

from ingest.errors import IngestError, TransportError


class LoopbackStore:
    """The client surface shared by the loopback stores (see the module's docstring)."""

    access_key: str | None
    secret_key: str | None
    region: str

    def start(self):
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        raise NotImplementedError

    @property
    def https_endpoint(self) -> str:
        raise IngestError(f"{type(self).__name__}: serves no HTTPS endpoint")

    @property
    def ca_bundle(self) -> str:
        raise IngestError(f"{type(self).__name__}: serves no HTTPS endpoint, so has no CA")

    def forget_clients(self) -> None:
        """Drop the clients made so far (the keys or the ports they hold are about to change)."""
        self._clients: dict = {}

    def client(self, https: bool = False, **kw):
        """A boto3 S3 client (SigV4, path style) with this store's endpoint (https: its TLS one) and
        keys; kw go to ingest.transports.s3client.s3_client, and a client made with kw is not kept."""
        from ingest.transports.s3client import s3_client

        url = kw.pop("endpoint_url", None) or (self.https_endpoint if https else self.endpoint_url)
        args = dict(endpoint_url=url, aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                    region_name=self.region, **({"verify": self.ca_bundle} if url.startswith("https") else {}))
        if kw:
            return s3_client(**args, **kw)
        clients = self.__dict__.setdefault("_clients", {})
        if url not in clients:
            clients[url] = s3_client(**args)
        return clients[url]

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` and return it; a TransportError naming it and the store otherwise."""
        try:
            self.client().create_bucket(Bucket=name)
        except Exception as exc:  # ClientError (InvalidBucketName, BucketAlreadyExists), ...
            raise TransportError(f"bucket {name!r} on {self.endpoint_url}: cannot create: {exc}") from exc
        return name

    def env(self, https: bool = False) -> dict[str, str]:
        """AWS_* variables that point boto3's standard chain at this store (https: its TLS endpoint
        and the CA that signed it)."""
        out = {"AWS_ENDPOINT_URL": self.https_endpoint if https else self.endpoint_url,
               "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
               "AWS_DEFAULT_REGION": self.region}
        if https:
            out["AWS_CA_BUNDLE"] = self.ca_bundle
        return out
