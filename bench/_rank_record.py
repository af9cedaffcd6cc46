"""What a benchmark's per-rank wrapper (bench/engine/_rank_startup.py, bench/_rank_peak.py) shares: the
rank its launcher gave it, and its record written whole as DIR/rank<N>.json. Standard library
only: the start-up wrapper imports it before its clock has seen any of ingest's imports."""
from __future__ import annotations

import json
import os

_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launcher_rank() -> int:
    """This process's rank as mpiexec or srun set it (0 when launched alone)."""
    return next((int(os.environ[v]) for v in _RANK_VARS if os.environ.get(v, "").isdigit()), 0)


def write_rank_record(out_dir: str | None, record: dict) -> None:
    """DIR/rank<N>.json, written to a temporary name and renamed, so a reader never sees half a
    record; nothing when out_dir is unset."""
    if not out_dir:
        return
    path = os.path.join(out_dir, f"rank{record['rank']}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def read_rank_records(out_dir: str, n_ranks: int) -> list[dict]:
    """The records ranks 0 .. n_ranks-1 wrote in out_dir, in rank order; a rank that wrote none
    is an error (FileNotFoundError naming its file), not a missing figure."""
    records = []
    for rank in range(n_ranks):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
            records.append(json.load(f))
    return records


def status_bytes(field: str) -> int | None:
    """A '... kB' field of /proc/self/status (VmRSS, VmHWM) in bytes; None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
