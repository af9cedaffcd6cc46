"""The files a throwaway one-node Ceph needs, and reading its logs back: pure text, no processes.

ingest.testbed.ceph runs the daemons; this module writes what they read (ceph.conf, the keyring,
cephx secrets) so that every path a daemon or tool would use points into the test bed's own dir,
and picks out of a daemon's log the lines that say why it stopped.
"""
from __future__ import annotations

import base64
import re
import secrets
import struct
import time

RGW_NAME = "ingest"  # the radosgw instance: client.rgw.ingest
# Ceph prefixes a log line with "DATE THREAD LEVEL"; level -1 is an error.
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+[+-]\d{4} [0-9a-f]+ +(-?\d+) (.*)$")


def cephx_key() -> str:
    """A new cephx secret in Ceph's keyring spelling: base64 of (type 1 = AES, created s, ns, 16, 16 random bytes)."""
    now_ns = time.time_ns()
    header = struct.pack("<HIIH", 1, now_ns // 10**9, now_ns % 10**9, 16)
    return base64.b64encode(header + secrets.token_bytes(16)).decode()


def keyring_text() -> str:
    """A keyring with new secrets for the monitor, the admin and radosgw (the OSD's is added once
    `ceph osd new` has made it: the monitor's mkfs would import it with the wrong caps)."""
    entities = {"mon.": {"mon": "allow *"},
                "client.admin": {"mon": "allow *", "osd": "allow *", "mgr": "allow *"},
                f"client.rgw.{RGW_NAME}": {"mon": "allow rw", "osd": "allow rwx"}}
    lines = []
    for name, caps in entities.items():
        lines.append(f"[{name}]\n\tkey = {cephx_key()}\n")
        lines.extend(f'\tcaps {service} = "{cap}"\n' for service, cap in caps.items())
    return "".join(lines)


def conf_text(root: str, fsid: str, ports: dict[str, int], tls: dict[str, str], memstore_bytes: int,
              request_log: bool) -> str:
    """ceph.conf for a cluster living in `root`: ports by name (mon_v2, mon_v1, http, https), the
    TLS certificate and key (tls["server"], tls["key"]), the OSD's RAM for objects in bytes."""
    # Debian's default beast frontend, without tcp_nodelay=1: its small replies wait on Nagle's
    # algorithm against the client's delayed ACK (a 1-16 KiB ranged GET ~46 ms here, 2 ms with
    # it; BENCHMARKS 'Both stores'). Kept as shipped: what stores run unless tuned.
    frontend = (f"beast endpoint=127.0.0.1:{ports['http']} ssl_endpoint=127.0.0.1:{ports['https']} "
                f"ssl_certificate={tls['server']} ssl_private_key={tls['key']}")
    return f"""[global]
fsid = {fsid}
mon host = [v2:127.0.0.1:{ports['mon_v2']},v1:127.0.0.1:{ports['mon_v1']}]
mon initial members = a
public addr = 127.0.0.1
ms bind ipv6 = false
# Every path a daemon or a tool uses, in the test bed's dir (none in /etc, /var/lib, /var/run, /var/log).
keyring = {root}/keyring
run dir = {root}/run
admin socket = {root}/run/$name.asok
pid file = {root}/run/$name.pid
log file = {root}/log/$name.log
mon cluster log file = {root}/log/cluster.log
crash dir = {root}/crash
log to syslog = false
err to syslog = false
# One OSD holds every copy: size 1 pools, PGs on one host, few PGs (RGW makes 8 pools).
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
osd crush chooseleaf type = 0
osd crush initial weight = 1
# A throwaway cluster in a temp dir: no free-space alarms, map changes committed at once.
mon data avail warn = 1
mon data avail crit = 0
paxos propose interval = 0.05
[mon]
mon data = {root}/mon
[osd]
osd data = {root}/osd
osd objectstore = memstore
memstore device bytes = {memstore_bytes}
[client.rgw.{RGW_NAME}]
rgw data = {root}/rgw
rgw frontends = {frontend}
debug rgw = {'1' if request_log else '0/5'}
"""


def log_tail(lines: list[str], n_lines: int = 5) -> str:
    """What a daemon's log says went wrong, on one line: its last n_lines errors (level -1; a
    crash's backtrace after them says less), else its last lines; each once (a daemon writes an
    error to its log and to stderr alike), without Ceph's prefix, joined with ' | '."""
    parsed = [(m.group(1), m.group(2)) if m else (None, line) for line, m in ((s, _LOG_LINE.match(s)) for s in lines)]
    errors = [text for level, text in parsed if level == "-1"]
    seen, unique = set(), []
    for line in (text.strip() for text in errors or [text for _, text in parsed]):
        if line and line not in seen:
            seen.add(line)
            unique.append(line)
    return " | ".join(unique[-n_lines:]) or "(no log output)"
