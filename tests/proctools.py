"""Finding this machine's processes by their command line, for tests that check what a run left
running (a zombie's command line is empty: a process that ended and was not yet reaped is gone)."""
from __future__ import annotations

import os


def processes(marker: str, parent: int | None = None) -> list[int]:
    """Pids whose command line contains `marker` (and whose parent is `parent`, when given)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() not in fh.read():
                    continue
            if parent is not None:
                with open(f"/proc/{pid}/stat") as fh:  # "pid (comm) state ppid ...": comm may hold spaces
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) != parent:
                        continue
        except OSError:
            continue
        found.append(int(pid))
    return found
