"""`python -m ingest publish` and `ingest.publish(comm, dest, regions)`: the ranks' regions written
back as one FITS object (or one contiguous HDF5 dataset) by a multipart upload.

Protocol. Rank 0 plans (ingest.driver.publish.plan) and creates the upload; the ranks run the
two-phase rounds (ingest.driver.publish.rounds); rank 0 gathers the parts' ETags and checksums
and completes the upload with them in order, then checks the stored object by a HEAD: its size,
its ETag against the MD5s of the parts sent, and the composite CRC32 where the store returns one
(ingest.staging.integrity); a mismatch deletes it. Nothing is visible at the key until that
completion. The report's `integrity` says what was checked, by whom, and whether the key was
guarded against a concurrent writer; its `etag` is the HEAD's (RGW's completion gives none).

Failures. A failure on any rank (an upload that gave up, a refused checksum) is known to every
rank at the next round's status exchange; all stop, and rank 0 aborts the multipart upload, so
no partial object and no orphan upload remains, unless `resume` was asked for: then the upload
is kept and the same command with --resume lists its parts, checks each against the bytes it
would upload (CRC32, or the ETag as MD5) and uploads only the others. A rank that dies outright
makes the launcher end the job: rank 0 catches the SIGTERM that comes before the SIGKILL (about
1 s with Open MPI) and aborts the upload then (unless resume), while the other ranks ignore it.
If rank 0 itself is killed, the upload stays unfinished; the next publish of the key says so
(--resume or --overwrite).
Every message names the rank, the part and the key.

One module: the failure handling (abort, resume, SIGTERM, the status exchange) wraps every step of
_publish and _upload, so they read together; the planning and the rounds are already
ingest.driver.publish.plan and .rounds.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from ingest.config import RunConfig
from ingest.driver.commands import config_for
from ingest.core.sharing import Topology
from ingest.driver.mpi import RootStepFailed, all_agree_or_raise, placement, root_step
from ingest.driver.quiet import quiet_allgather, quiet_barrier, quiet_bcast, quiet_wait
from ingest.driver.rootwork import building_report, gather_to_root, ledger, start_ledger
from ingest.driver.publish.plan import Plan, make_plan, options_for_store, uses_presigned
from ingest.driver.publish.rounds import Holding, Rounds
from ingest.config.settings import retry_policy
from ingest.core.regions import assign_regions
from ingest.errors import ConfigError, IngestError, RegionError
from ingest.outputs.publish_inputs import RegionData, open_array, regions_in
from ingest.staging.multipart import PartUploader, upload_client
from ingest.units import format_bytes

MEMORY_SOURCE = "(regions in memory)"  # RunConfig.source of a publish whose regions are arrays


class PublishError(IngestError):
    """A publish failed; the message names the rank, the part, the key and what became of the upload."""


class _Interrupted(IngestError):
    """SIGTERM on rank 0 during the rounds: a peer died (or the job was cancelled)."""


def _memory_regions(regions, rank: int) -> tuple[list[Holding], Exception | None]:
    """This rank's (box, array) pairs (or objects with .box and .data) as holdings, checked."""
    holdings = []
    try:
        for i, item in enumerate(regions):
            box, array = (item.box, item.data) if hasattr(item, "box") else item
            box = tuple((int(s.start), int(s.stop)) if isinstance(s, slice) else (int(s[0]), int(s[1])) for s in box)
            array = np.ascontiguousarray(array)  # a copy only for a strided view
            extents = tuple(b - a for a, b in box)
            if array.shape != extents:
                raise RegionError(f"rank {rank}: region {i}: array shape {array.shape} is not its box's extents "
                                  f"{extents} (box {box}, numpy order)")
            region = RegionData(-1, box, tuple(a for a, _ in box), extents, array.dtype.str)
            holdings.append(Holding(region, array))
    except (TypeError, ValueError, AttributeError) as exc:
        return [], RegionError(f"rank {rank}: regions: expected (box, array) pairs with box ((start, stop), ...) in "
                               f"numpy order, got {exc}")
    except IngestError as exc:
        return [], exc
    return holdings, None


def _file_regions(cfg: RunConfig, n_ranks: int):
    """Rank 0: the regions in cfg.source and which rank maps each (balanced by bytes)."""
    regions, header_source, what = regions_in(cfg.source, cfg.region_files, cfg.dataset)
    held_by = assign_regions([r.nbytes for r in regions], n_ranks)
    return regions, held_by, header_source, what


def _open_files(regions, mine) -> tuple[dict, Exception | None]:
    arrays: dict = {}  # one map per file and place: a frame holds every region
    try:
        holdings = {}
        for index in mine:
            r = regions[index]
            key = (r.path, r.data_offset, r.array_shape, r.dtype)
            if key not in arrays:
                arrays[key] = open_array(r)
            holdings[index] = Holding(r, *arrays[key])
        return holdings, None
    except (OSError, ValueError) as exc:
        return {}, IngestError(f"region file: cannot map it ({exc})")


# Ranks per core above which a machine's ranks make their upload clients in turn, after the plan.
# Made all at once, N clients of about 0.3 s of CPU are all ready after N x 0.3 s / cores; in turn
# (cores at a time) the first is ready 0.3 s after the plan and the last later than all at
# once would have been. At a few ranks per core all at once, beside rank 0's plan, is done within
# about a second and in turn gains nothing; at tens, the parts of the first ranks going up while
# the others wait is what saves seconds (BENCHMARKS: publish at 64 ranks, step by step).
CROWDED_RANKS_PER_CORE = 4


def crowded(topology: Topology, rank: int) -> bool:
    """Does `rank`'s machine run more than CROWDED_RANKS_PER_CORE ranks per core?"""
    ranks, cores = topology.ranks_sharing_cores(rank)
    return ranks > CROWDED_RANKS_PER_CORE * cores


TURN_TAG = 32000  # the clients' turns (_client_in_turn): above every part's tag (part + 1 <= 10,000)


def _client_in_turn(comm, topology: Topology, make):
    """make() in this rank's turn among the ranks other than 0 on its machine, in rank order, as
    many at a time as the machine has cores: a rank waits (asleep) for the one that many places
    before it to finish, then lets the one that many places after it start. A client that cannot
    be made is left to the rank's first part, whose failure the rounds report (None here)."""
    rank = comm.Get_rank()
    machine = topology.machine_of_rank[rank]
    line = [r for r in range(1, topology.n_ranks) if topology.machine_of_rank[r] == machine]
    at_once = max(1, int(topology.cores_of_machine[machine]))
    place = line.index(rank)
    if place >= at_once:
        token = np.zeros(1, np.int32)
        quiet_wait(comm.Irecv(token, source=line[place - at_once], tag=TURN_TAG).Test)
    try:
        return make()
    except IngestError:
        return None
    finally:
        if place + at_once < len(line):
            comm.Send(np.ones(1, np.int32), dest=line[place + at_once], tag=TURN_TAG)


def _have_credentials() -> bool:
    from ingest.transports.environment import have_credentials

    return have_credentials()


def publish(comm, dest: str | None = None, regions=None, *, header=None, config: RunConfig | Mapping | None = None,
            **options) -> dict:
    """Write the regions of every rank of `comm` as one object at `dest` (s3://bucket/key).

    regions: this rank's (box, array) pairs (box: ((start, stop), ...) in numpy order, halo
    included; array: the box's values as stored, either byte order), or None to read them from
    the directory in config `source` (a pre-stage, region files, `run --output-dir` cut-outs).
    header: an astropy Header or FITS card text, or the path/URL of a cube whose header (HDF5:
    dataset and attributes) the object takes. options: RunConfig fields (part_bytes, resume,
    overwrite, upload_method, ...). Collective; returns this rank's result (rank 0's has 'report')."""
    if dest is not None:
        options["dest"] = dest
    header_obj = None
    if isinstance(header, str) and not header.startswith(("SIMPLE  ", "XTENSION")):
        options["header_from"] = header
    elif header is not None:
        header_obj = header
    if regions is not None and not (isinstance(config, RunConfig) or (isinstance(config, Mapping)
                                                                       and "source" in config)):
        options.setdefault("source", MEMORY_SOURCE)
    cfg = config_for(config, options, "ingest.publish")
    if not cfg.dest:
        raise ConfigError("dest: required (s3://bucket/key, the object to write)")
    own = comm.Dup()  # the rounds' tags never meet the caller's messages
    try:
        return _publish(own, cfg, regions, header_obj)
    finally:
        own.Free()


def _publish(comm, cfg: RunConfig, regions, header) -> dict:
    from mpi4py import MPI

    start_ledger()
    t0 = MPI.Wtime()
    marks = {"start": time.time()}  # this rank's steps (RankStats.marks)
    rank, size = comm.Get_rank(), comm.Get_size()
    if regions is None:
        all_regions, held_by, header_source, what = root_step(comm, _file_regions, cfg, size)
        holdings, error = _open_files(all_regions, held_by[rank])
    else:
        local, error = _memory_regions(regions, rank)
        all_agree_or_raise(comm, error)
        per_rank = quiet_allgather(comm, [h.region for h in local])
        all_regions, held_by, header_source, what = [], [], None, "regions in memory"
        for r, mine in enumerate(per_rank):
            held_by.append(tuple(range(len(all_regions), len(all_regions) + len(mine))))
            all_regions += [replace(m, index=len(all_regions) + i) for i, m in enumerate(mine)]
        holdings = {index: Holding(all_regions[index], h.array) for index, h in zip(held_by[rank], local)}
    all_agree_or_raise(comm, error)
    marks["regions"] = time.time()
    credentials, placements = zip(*quiet_allgather(comm, (_have_credentials(), placement())))
    credentials = list(credentials)
    topology = Topology.of_hosts(*zip(*placements))
    marks["credentials"] = time.time()
    # The other ranks' upload clients (0.2-0.3 s of CPU each: botocore's import and service model).
    # Where each rank has a core (or a few share one), they are made while rank 0 plans. Where a
    # machine's ranks outnumber its cores many times (crowded), they are made after the plan, as
    # many at once as the machine has cores (_client_in_turn): rank 0's plan, which every rank
    # waits for, has the cores first, and the first ranks' parts go up while the others still make
    # their clients. Made all at once they would all be ready together, at the end.
    def make_client():
        client = upload_client(cfg.parts_in_flight + 1, options_for_store(cfg))
        marks["client"] = time.time()
        return client

    client = None
    needs_client = rank != 0 and not uses_presigned(cfg.upload_method, credentials)
    in_turn = needs_client and crowded(topology, rank)
    if needs_client and not in_turn:
        client = make_client()
    keep: dict = {}
    plan = root_step(comm, make_plan, cfg, all_regions, held_by, header, header_source, credentials, keep)
    marks["plan"] = time.time()
    if in_turn:
        client = _client_in_turn(comm, topology, make_client)
    if rank == 0:
        upload_text = (f"resuming upload {plan.upload_id} ({len(plan.existing)} part(s) stored)" if plan.resumed
                       else f"upload {plan.upload_id}")
        print(f"ingest publish: {plan.uri}: {format_bytes(plan.object_bytes)} {plan.format} from {what}, "
              f"{len(plan.parts)} part(s) of {plan.part_reason}, {size} rank(s), {upload_text}", flush=True)
    return _upload(comm, cfg, plan, holdings, keep.get("upload"), client, t0, what, marks)


def _upload(comm, cfg: RunConfig, plan: Plan, holdings: dict, upload, client, t0: float, what: str,
            marks: dict) -> dict:
    """The rounds, completion, and on any failure the abort (rank 0), in one guarded step."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    restore = _catch_sigterm(rank)
    abandoned = [False]

    def abandon() -> str:
        """Rank 0: what happens to the upload after a failure (aborted unless resume asked to keep it)."""
        if abandoned[0] or (upload is not None and upload.completed):
            return ""  # completed: the failure (a mismatch) already says what became of the object
        abandoned[0] = True
        if cfg.resume:
            return f"; the upload {plan.upload_id} is kept: the same command with --resume continues it"
        try:
            upload.abort()
            return f"; the upload was aborted, nothing was written at {plan.uri}"
        except IngestError as exc:
            return f"; aborting the upload {plan.upload_id} failed too ({exc}): abort it, or --resume it"

    try:
        uploader = PartUploader(*_bucket_key(plan), plan.upload_id, plan.checksum, retry_policy(cfg),
                                presigned=plan.presigned, slots=cfg.parts_in_flight, options=options_for_store(cfg),
                                client=upload.client if upload is not None else client)
        progress = _progress(cfg, plan) if rank == 0 else None
        urls = (lambda j: quiet_bcast(comm, _sign_round(upload, plan, j, cfg) if rank == 0 else None)) \
            if plan.presigned else None
        stats = Rounds(comm, plan, holdings, uploader, cfg.parts_in_flight, urls,
                       on_round=progress.round_done if progress else None).run()
        # When this rank's client was ready: made before the plan, by its first upload, or (rank 0's,
        # presigned URLs' pool) with the plan.
        client_at = marks.get("client") or uploader.client_ready_at or marks["plan"]
        stats.marks.update(marks, client=client_at, rounds=time.time())
        if progress:
            progress.close()
        if stats.errors:
            fate = quiet_bcast(comm, abandon() if rank == 0 else "")
            _raise_together(rank, stats.errors[0] + fate)
        quiet_barrier(comm)  # every rank alive before rank 0 waits in a gather
        records = gather_to_root(comm, stats.records)
        everyone = gather_to_root(comm, stats.as_dict())
        outcome = root_step(comm, _complete, cfg, plan, upload, records)
    except BaseException as exc:
        if rank == 0 and not abandoned[0]:
            fate = abandon()
            if isinstance(exc, IngestError) and fate:
                exc.args = (f"{exc.args[0] if exc.args else exc}{fate}",)
        raise
    finally:
        if restore:
            restore()
    result = {"uri": plan.uri, "object_bytes": plan.object_bytes, "format": plan.format, "part_bytes": plan.part_bytes,
              "parts": len(plan.parts), "elapsed_s": MPI.Wtime() - t0, "etag": outcome["etag"],
              "integrity": outcome["integrity"],
              "resumed": plan.resumed, "rank": rank, **stats.as_dict(),
              "memory_bound_bytes": _memory_bound(cfg, plan)}
    if rank == 0:
        with building_report():
            report = result["report"] = _report(cfg, plan, result, everyone, what)
        report["root"] = ledger().as_dict(result["elapsed_s"])
        if cfg.report:
            from ingest.outputs.report import write_report

            write_report(cfg.report, report)
    return result


def _raise_together(rank: int, message: str):
    """Every rank stops with the same message; rank 0 prints it (the message names the failed rank)."""
    if rank != 0:
        raise RootStepFailed(message)
    error = PublishError(message)
    error.collective = error.from_root_step = True  # run_or_abort: exit cleanly, no MPI Abort
    raise error


def _bucket_key(plan: Plan) -> tuple[str, str]:
    from ingest.transports.presign import parse_s3_uri

    return parse_s3_uri(plan.uri)


def _sign_round(upload, plan: Plan, j: int, cfg: RunConfig) -> dict:
    """Rank 0: presigned UploadPart URLs for round j's parts, fresh each round (they never age)."""
    return {part: upload.presign_part(part + 1, cfg.presign_expires_s) for part in plan.rounds[j] if part is not None}


def _complete(cfg: RunConfig, plan: Plan, upload, per_rank_records) -> dict:
    """Rank 0: complete the upload with every part in order, then check what the store holds."""
    records = sorted((r for mine in per_rank_records for r in mine), key=lambda r: r.number)
    numbers = [r.number for r in records]
    if numbers != list(range(1, len(plan.parts) + 1)):
        missing = sorted(set(range(1, len(plan.parts) + 1)) - set(numbers))
        raise PublishError(f"{plan.uri}: part(s) {missing[:10]} have no record after the rounds; not completing")
    return upload.complete(records, refuse_existing=not cfg.overwrite, object_bytes=plan.object_bytes)


def _memory_bound(cfg: RunConfig, plan: Plan) -> int:
    """A rank's buffers: parts_in_flight parts plus the one send buffer (publish.rounds)."""
    from ingest.driver.publish.rounds import MESSAGE_BYTES

    return min(cfg.parts_in_flight, len(plan.rounds)) * plan.part_bytes + min(MESSAGE_BYTES, plan.part_bytes)


def _report(cfg: RunConfig, plan: Plan, result: dict, ranks: list, what: str) -> dict:
    report = {"schema": "ingest.publish/1", "dest": plan.uri, "from": what, "format": plan.format,
              "object_bytes": plan.object_bytes, "part_bytes": plan.part_bytes, "part_reason": plan.part_reason,
              "parts": len(plan.parts), "method": "presigned" if plan.presigned else "s3",
              "integrity": result["integrity"], "resumed": plan.resumed, "parts_stored_before": len(plan.existing),
              "etag": result["etag"], "elapsed_s": result["elapsed_s"], "memory_bound_bytes": result["memory_bound_bytes"],
              "timeline_s": timeline(ranks),
              "ranks": [{"rank": r, **{k: v for k, v in stats.items() if k != "marks"},
                         "timeline_s": since(stats["marks"], ranks[0]["marks"]["start"])}
                        for r, stats in enumerate(ranks)]}
    uploaded = sum(r["bytes_uploaded"] for r in ranks)
    rate = plan.object_bytes / result["elapsed_s"] if result["elapsed_s"] > 0 else 0.0
    print(f"ingest publish: {plan.uri} complete: {format_bytes(plan.object_bytes)} in {len(plan.parts)} part(s), "
          f"{format_bytes(uploaded)} uploaded, {sum(r['parts_verified'] for r in ranks)} part(s) already stored, "
          f"{result['elapsed_s']:.2f} s ({format_bytes(rate)}/s), ETag {result['etag']}", flush=True)
    failures = report["upload_failures"] = _failures(ranks)
    if failures["failed_attempts"]:
        shown = ", ".join(f"{n} {kind}" for kind, n in sorted(failures["kinds"].items(), key=lambda kv: -kv[1]))
        print(f"  part attempts that failed (not throttles): {failures['failed_attempts']} ({shown}); their parts "
              f"hold {format_bytes(failures['failed_bytes'])}", flush=True)
    for name, finding in result["integrity"].items():  # what was checked, and by whom (ingest.staging.integrity)
        print(f"  {name}: {finding}", flush=True)
    return report


# The steps of a publish in the order every rank passes them (RankStats.marks), but `client`: when
# the rank's upload client was ready, before the plan or after it (see _publish).
STEPS = ("start", "regions", "credentials", "plan", "client", "first_upload", "last_upload_end", "rounds")


def since(marks: dict, start: float) -> dict:
    """A rank's marks as seconds after `start` (rank 0's start)."""
    return {name: round(marks[name] - start, 6) for name in STEPS if name in marks}


def timeline(ranks: list) -> dict:
    """When the ranks reached each step, in seconds after rank 0's start: the first, the median and
    the last rank, and which rank was last. Where the makespan goes, step by step, at any rank count."""
    each = [since(r["marks"], ranks[0]["marks"]["start"]) for r in ranks]
    out = {}
    for name in STEPS:
        at = sorted((t[name], i) for i, t in enumerate(each) if name in t)
        if at:
            out[name] = {"first": at[0][0], "median": at[len(at) // 2][0], "last": at[-1][0], "last_rank": at[-1][1]}
    return out


def _failures(ranks: list) -> dict:
    """Every rank's failed part attempts (not throttles), summed: attempts, their parts' bytes, kinds."""
    kinds: dict = {}
    for r in ranks:
        for kind, n in r["failure_kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    return {"failed_attempts": sum(r["failed_attempts"] for r in ranks),
            "failed_bytes": sum(r["failed_bytes"] for r in ranks), "kinds": kinds,
            "throttled": sum(r["throttled"] for r in ranks)}


class _Progress:
    def __init__(self, plan: Plan):
        from tqdm import tqdm

        self.plan = plan
        self.bar = tqdm(total=plan.object_bytes, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                        desc="publish", leave=False)

    def round_done(self, j: int) -> None:
        self.bar.update(sum(self.plan.parts[p][1] - self.plan.parts[p][0] for p in self.plan.rounds[j]
                            if p is not None))

    def close(self) -> None:
        self.bar.close()


def _progress(cfg: RunConfig, plan: Plan):
    return _Progress(plan) if cfg.progress and sys.stderr.isatty() else None


def _catch_sigterm(rank: int):
    """Rank 0: turn SIGTERM into an exception in the main thread, so the upload is aborted in the
    second the launcher leaves before SIGKILL. The other ranks ignore SIGTERM meanwhile: a rank
    that dies of it makes Open MPI's mpiexec kill the rest at once, rank 0 in the middle of its
    abort; they end at the SIGKILL, or at rank 0's MPI Abort. Returns the function that puts the
    old handler back."""
    if threading.current_thread() is not threading.main_thread():
        return None  # signals reach the main thread only; a caller on another thread keeps its own handling

    def interrupted(signum, frame):
        raise _Interrupted("rank 0: interrupted by SIGTERM (a rank died, or the job was cancelled)")

    previous = signal.signal(signal.SIGTERM, interrupted if rank == 0 else signal.SIG_IGN)
    return lambda: signal.signal(signal.SIGTERM, previous)
