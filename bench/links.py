"""Link profiles for the benchmarks: Toxiproxy in front of the bench's S3 server, one proxy per profile.

`loopback` talks to the server directly (no proxy: nothing emulated, nothing in the way);
`acacia` and `wan` go through a Toxiproxy proxy carrying the toxics of
ingest.testbed.toxiproxy.PROFILES. Toxiproxy's bandwidth cap applies PER CONNECTION, so N parallel
range requests get N times one stream's rate: these profiles emulate a per-stream limit (a
TCP window over a long path, a per-connection shaper), not a shared pipe of that capacity.
The proxy also costs CPU on the same two cores as client and server.

Presigned URLs are signed for the address the client connects to (the proxy's host:port), and
the s3 transport gets that address as its endpoint_url.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.transports.presign import presign_url
from ingest.transports.s3client import s3_client
from ingest.testbed.toxiproxy import ToxiproxyServer

PROFILE_NAMES = ("loopback", "acacia", "wan")


@dataclass(frozen=True)
class Link:
    """One way to reach the bench server: a profile name and the endpoint clients connect to."""

    profile: str
    endpoint_url: str  # http://HOST:PORT of the server (loopback) or of the profile's proxy
    toxics: tuple  # the toxics applied (empty for loopback), for the record

    def describe(self) -> dict:
        return {"profile": self.profile, "proxied": self.profile != "loopback",
                "toxics": [dict(t) for t in self.toxics]}


class Links:
    """Lazily started Toxiproxy and one proxy per profile in front of `server` (a LocalS3Server)."""

    def __init__(self, server):
        self.server = server
        self._toxiproxy: ToxiproxyServer | None = None
        self._links: dict[str, Link] = {}
        self._signers: dict[str, object] = {}

    def get(self, profile: str) -> Link:
        """The Link of `profile` (one of PROFILE_NAMES); starts Toxiproxy on first use."""
        if profile not in PROFILE_NAMES:
            raise ValueError(f"profile: {profile!r} is not one of {', '.join(PROFILE_NAMES)}")
        if profile in self._links:
            return self._links[profile]
        if profile == "loopback":
            link = Link(profile, self.server.endpoint_url, ())
        else:
            if self._toxiproxy is None:
                self._toxiproxy = ToxiproxyServer().start()
            listen = self._toxiproxy.create_proxy(f"bench_{profile}", f"127.0.0.1:{self.server.port}")
            toxics = self._toxiproxy.apply_profile(f"bench_{profile}", profile)
            link = Link(profile, f"http://{listen}", tuple(
                {"type": t["type"], "stream": t["stream"], "attributes": t["attributes"]} for t in toxics))
        self._links[profile] = link
        return link

    def presign(self, profile: str, bucket: str, key: str, expires_s: int = 3600) -> str:
        """SigV4 presigned GET URL valid through `profile`'s endpoint (a credential: never record it)."""
        link = self.get(profile)
        client = self._signers.get(profile)
        if client is None:
            client = self.server.client() if profile == "loopback" else s3_client(
                endpoint_url=link.endpoint_url, aws_access_key_id=self.server.access_key,
                aws_secret_access_key=self.server.secret_key, region_name=self.server.region)
            self._signers[profile] = client
        return presign_url(bucket, key, expires_s, client=client)

    def close(self) -> None:
        if self._toxiproxy is not None:
            self._toxiproxy.stop()
            self._toxiproxy = None
        self._links.clear()
        self._signers.clear()


def parse_profiles(text: str) -> list[str]:
    """'loopback,acacia' -> ['loopback', 'acacia'], checked against PROFILE_NAMES."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PROFILE_NAMES]
    if bad or not names:
        raise SystemExit(f"--profiles: {text!r}: choose from {', '.join(PROFILE_NAMES)}")
    return names
