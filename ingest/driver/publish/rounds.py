"""Two-phase aggregation for `publish`: in each round every rank gathers at most one part from the
ranks that hold its pieces (MPI), then uploads it on a thread while the next round's bytes move.

Per round j, on every rank, in this order (so no rank ever waits on a peer before it has posted
its own receives, and the rounds cannot deadlock):
1. the part it aggregates, if any: take a free part buffer (at most `parts_in_flight` exist, so
   a rank whose uploads lag waits here), post one receive per contributor and 64 MiB message,
   each an MPI hindexed type that lands the bytes straight at their places in the buffer, and
   copy in its own pieces and the metadata (header, padding) the part holds;
2. its pieces of the other parts of round j: packed 64 MiB at a time into one send buffer
   (converted to the output's byte order on the way) and sent to each part's aggregator;
   a piece is an owned box's items in the part, copied as at most 2 x ndim - 1 numpy blocks;
3. wait for its receives, then hand the part to an upload slot (checksum, PUT, retries);
4. a status exchange: every rank says whether anything of its own failed (an upload of an
   earlier round included); if one did, every rank stops after the same round.
Waits poll (Test, then short sleeps) instead of blocking in MPI, so rank 0 can act on SIGTERM
(a peer died and the launcher is ending the job) and abort the upload before SIGKILL.

Memory per rank: parts_in_flight x part_bytes of part buffers plus one MESSAGE_BYTES send
buffer; the regions themselves are the caller's arrays or maps of files, never copied whole.
"""
from __future__ import annotations

import math
import mmap
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from ingest import buffers
from ingest.core.byteruns import box_item_range, box_runs, cube_item, range_blocks
from ingest.driver.quiet import quiet_allgather, quiet_wait
from ingest.staging.integrity import md5_hex
from ingest.staging.multipart import part_matches
from ingest.units import MiB

MESSAGE_BYTES = 64 * MiB  # one MPI message at most: bounded send buffer, far from MPI's 2 GiB count limit
_SPINS = 200  # Test calls before a wait starts sleeping between them
TRANSFER_POLL_MAX_S = 0.002  # the longest sleep between looks at a transfer in flight


@dataclass
class Holding:
    """A region this rank holds: its data and the boxes of it this rank writes."""

    region: object  # outputs.publish_inputs.RegionData
    array: np.ndarray  # C-contiguous, region.array_shape, any byte order of the output's type
    mapping: object = None  # the file map under `array`, if any: its pages are dropped once sent


@dataclass
class RankStats:
    """What one rank did in the rounds (bytes, parts, seconds)."""

    parts_uploaded: int = 0
    parts_verified: int = 0  # resume: already stored with the same bytes, not sent again
    bytes_uploaded: int = 0
    bytes_sent: int = 0  # over MPI to other aggregators
    bytes_received: int = 0  # over MPI from other ranks
    upload_s: float = 0.0  # summed over upload slots
    wait_s: float = 0.0  # main thread waiting on MPI or a free buffer
    throttled: int = 0  # part attempts that asked for fewer in flight (503 SlowDown, 429, refused, unanswered in time)
    # Parts in flight the rank's limiter allowed (staging.multipart.PartUploader): its ceiling
    # (parts_in_flight), the level it settled on and its fewest; None before the rounds end.
    concurrency_ceiling: int | None = None
    concurrency_settled: float | None = None
    concurrency_min: int | None = None
    # Part attempts that failed other than by a throttle (timeouts, resets, bad digests) and were
    # retried or given up on, the bytes they had carried, and their kinds (staging.multipart.PartFailures).
    failed_attempts: int = 0
    failed_bytes: int = 0
    failure_kinds: dict = field(default_factory=dict)
    # When this rank reached each step (time.time(), seconds since the epoch: comparable across
    # nodes whose clocks agree), its first part's request and its last part's end; the report shows them
    # from rank 0's start (driver.publish.job.timeline).
    marks: dict = field(default_factory=dict)
    records: list = field(default_factory=list)  # staging.multipart.PartRecord of the parts it aggregated
    errors: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("parts_uploaded", "parts_verified", "bytes_uploaded", "bytes_sent",
                                              "bytes_received", "upload_s", "wait_s", "throttled",
                                              "concurrency_ceiling", "concurrency_settled", "concurrency_min",
                                              "failed_attempts", "failed_bytes", "failure_kinds", "marks")}

    def note_throttling(self, seen) -> None:
        """Take the uploader's ThrottleStats (ingest.engine.throttle) into these stats."""
        self.throttled = seen.throttled
        self.concurrency_ceiling, self.concurrency_settled = seen.concurrency_ceiling, seen.concurrency_settled
        self.concurrency_min = seen.concurrency_min

    def note_failures(self, seen: dict) -> None:
        """Take the uploader's failures (staging.multipart.PartUploader.failures) into these stats."""
        self.failed_attempts, self.failed_bytes = seen["failed_attempts"], seen["failed_bytes"]
        self.failure_kinds = dict(seen["kinds"])


def wait_all(requests, stats: RankStats | None = None) -> None:
    """Wait for the exchange's MPI requests by polling, so signal handlers run in between. A
    transfer over TCP moves only while polled, so the sleeps between looks stay short
    (TRANSFER_POLL_MAX_S); they still back off, since on shared cores every look takes CPU
    from the ranks being waited for and from the store."""
    from mpi4py import MPI

    waited_s = quiet_wait(lambda: MPI.Request.Testall(requests), spins=_SPINS, max_sleep_s=TRANSFER_POLL_MAX_S)
    if stats is not None:
        stats.wait_s += waited_s


def spans(plan, rank: int, part: int) -> list[tuple[int, tuple, int, int]]:
    """Rank's pieces of `part` as (region index, owned box, first, stop): item ranges in the
    box's own C order, region by region. The rank that sends them and the one that receives
    them compute the same list, and the sender's bytes follow it exactly (its message stream)."""
    image = plan.image
    lo, hi = plan.parts[part]
    lo_item = max(lo - image.data_offset, 0) // image.itemsize  # parts never cut an item: checked in the plan
    hi_item = max(min(hi - image.data_offset, image.data_bytes), 0) // image.itemsize
    out = []
    if lo_item < hi_item:
        for index in plan.held_by[rank]:
            for box in plan.owned[index]:
                first, stop = box_item_range(box, image.shape, lo_item, hi_item)
                if first < stop:
                    out.append((index, box, first, stop))
    return out


def chunks(pieces, limit_items: int) -> list[list[tuple[int, tuple, int, int]]]:
    """The stream of `pieces` cut every limit_items items: one list of pieces per message."""
    out, current, room = [], [], limit_items
    for index, box, first, stop in pieces:
        while first < stop:
            take = min(stop - first, room)
            current.append((index, box, first, first + take))
            first, room = first + take, room - take
            if room == 0:
                out.append(current)
                current, room = [], limit_items
    if current:
        out.append(current)
    return out


def _merged(positions: np.ndarray, lengths: np.ndarray):
    """Runs that continue one another become one block (fewer entries in an MPI type)."""
    if positions.size < 2:
        return positions, lengths
    breaks = np.flatnonzero(positions[1:] != positions[:-1] + lengths[:-1]) + 1
    starts = np.concatenate(([0], breaks))
    return positions[starts], np.add.reduceat(lengths, starts)


def _extents(box) -> tuple[int, ...]:
    return tuple(b - a for a, b in box)


class Rounds:
    """One rank's side of the rounds (see the module docstring)."""

    def __init__(self, comm, plan, holdings: dict, uploader, parts_in_flight: int, next_urls, on_round=None):
        self.comm, self.plan, self.holdings, self.uploader = comm, plan, holdings, uploader
        self.rank = comm.Get_rank()
        self.out_dtype = np.dtype(plan.dtype)
        self.next_urls = next_urls  # round -> {part: url} (a collective in presigned mode), or None
        self.on_round = on_round
        self.stats = RankStats()
        self.free: queue.Queue = queue.Queue()
        n_buffers = min(parts_in_flight, max(1, len(plan.rounds)))
        part_bytes = max(hi - lo for lo, hi in plan.parts)
        for _ in range(n_buffers):
            self.free.put(buffers.empty(part_bytes, np.uint8))
        self.pool = ThreadPoolExecutor(max_workers=n_buffers, thread_name_prefix="ingest-publish")
        self.send_buffer = None  # made on first use: a rank that only aggregates never needs it
        itemsize = self.out_dtype.itemsize
        self.message_items = max(1, min(MESSAGE_BYTES, part_bytes) // itemsize)
        self.cube_strides = tuple(itemsize * math.prod(plan.image.shape[axis + 1:])
                                  for axis in range(len(plan.image.shape)))

    # ---------------------------------------------------------------- copying out of the regions
    def _blocks(self, index: int, box, first: int, stop: int):
        """(block in the cube, the region's values for it) for items [first, stop) of an owned box:
        at most 2 x ndim - 1 blocks, each one numpy copy."""
        region, array = self.plan.regions[index], self.holdings[index].array
        for sub in range_blocks(_extents(box), first, stop):
            block = tuple((a + s0, b + s0) for (a, b), (s0, _) in zip(sub, box))
            yield block, array[tuple(slice(a - o, b - o) for (a, b), o in zip(block, region.origin))]

    def _pack(self, pieces, out: np.ndarray) -> int:
        """Write `pieces` (one message) into `out` in stream order, in the output's byte order; returns bytes."""
        items = out.view(self.out_dtype)
        at = 0
        for index, box, first, stop in pieces:
            for block, values in self._blocks(index, box, first, stop):
                n = values.size
                np.copyto(items[at:at + n].reshape(values.shape), values)  # converts byte order if needed
                at += n
        return at * self.out_dtype.itemsize

    def _place(self, pieces, buffer: np.ndarray, part_start: int) -> None:
        """Write `pieces` straight to their places in a part buffer (the aggregator's own pieces)."""
        image = self.plan.image
        for index, box, first, stop in pieces:
            for block, values in self._blocks(index, box, first, stop):
                flat = int(np.ravel_multi_index(tuple(a for a, _ in block), image.shape))
                view = np.ndarray(values.shape, self.out_dtype, buffer=buffer, strides=self.cube_strides,
                                  offset=image.data_offset + flat * image.itemsize - part_start)
                np.copyto(view, values)

    def _runs(self, pieces, part_start: int):
        """(positions in the part buffer, lengths) of one message's bytes, in stream order."""
        image, itemsize = self.plan.image, self.plan.image.itemsize
        found = []
        for _, box, first, stop in pieces:
            lo, hi = cube_item(box, image.shape, first), cube_item(box, image.shape, stop - 1) + 1
            starts, lengths = box_runs(box, image.shape, itemsize, lo * itemsize, hi * itemsize)
            found.append((starts + image.data_offset - part_start, lengths))
        positions, lengths = (np.concatenate(x) for x in zip(*found))
        return _merged(positions, lengths)

    # ---------------------------------------------------------------- one part, both sides
    def _post_receives(self, part: int, buffer: np.ndarray) -> list:
        """Receives for every other contributor's pieces of `part`, straight into place; this
        rank's own pieces and the part's metadata are copied in directly."""
        from mpi4py import MPI

        plan = self.plan
        lo, hi = plan.parts[part]
        requests = []
        for rank in np.flatnonzero(plan.held[part]).tolist():
            pieces = spans(plan, rank, part)
            if rank == self.rank:
                self._place(pieces, buffer, lo)
                continue
            for message in chunks(pieces, self.message_items):
                positions, blocks = self._runs(message, lo)
                dtype = MPI.BYTE.Create_hindexed(blocks.tolist(), positions.tolist()).Commit()
                requests.append(self.comm.Irecv([buffer, 1, dtype], source=rank, tag=part + 1))
                dtype.Free()  # MPI keeps it until the receive completes
                self.stats.bytes_received += int(blocks.sum())
        for offset, piece in plan.image.pieces:
            a, b = max(offset, lo), min(offset + len(piece), hi)
            if a < b:
                buffer[a - lo:b - lo] = np.frombuffer(piece, np.uint8)[a - offset:b - offset]
        return requests

    def _send(self, part: int, aggregator: int) -> None:
        for message in chunks(spans(self.plan, self.rank, part), self.message_items):
            if self.send_buffer is None:
                self.send_buffer = np.empty(self.message_items * self.out_dtype.itemsize, np.uint8)
            size = self._pack(message, self.send_buffer)
            wait_all([self.comm.Isend([self.send_buffer[:size], size, _byte()], dest=aggregator, tag=part + 1)],
                     self.stats)
            self.stats.bytes_sent += size

    # ---------------------------------------------------------------- uploads
    def _upload(self, part: int, buffer: np.ndarray, url: str | None) -> None:
        lo, hi = self.plan.parts[part]
        body = memoryview(buffer)[:hi - lo]
        number = part + 1
        t0 = time.perf_counter()
        try:
            stored = self.plan.existing.get(number)
            if stored is not None and part_matches(stored, body):
                # The MD5 of the bytes meant for it: what the completed object's ETag is checked against.
                record, verified = replace(stored, md5=md5_hex(body)), True
            else:
                record, verified = self.uploader.put(number, body, url), False
            with self.stats.lock:
                self.stats.records.append(record)
                if verified:
                    self.stats.parts_verified += 1
                else:
                    self.stats.parts_uploaded += 1
                    self.stats.bytes_uploaded += hi - lo
                self.stats.upload_s += time.perf_counter() - t0
                self.stats.marks["last_upload_end"] = time.time()
        except Exception as exc:  # noqa: BLE001 - reported at the next status exchange, by rank and part
            with self.stats.lock:
                self.stats.errors.append(f"rank {self.rank}: part {number} (bytes {lo}..{hi}) of {self.plan.uri}: "
                                         f"{exc}")
        finally:
            self.free.put(buffer)

    def _drop_pages(self) -> None:
        """Mapped region files: drop the pages just read from this process (the page cache keeps
        them), so a rank's resident memory stays its buffers, not the files it has sent."""
        for mapping in {id(h.mapping): h.mapping for h in self.holdings.values() if h.mapping is not None}.values():
            mapping.madvise(mmap.MADV_DONTNEED)

    def _take_buffer(self) -> np.ndarray:
        t0 = time.perf_counter()
        while True:
            try:
                buffer = self.free.get(timeout=0.05)  # wakes for signals
                break
            except queue.Empty:
                continue
        self.stats.wait_s += time.perf_counter() - t0
        return buffer

    # ---------------------------------------------------------------- the rounds
    def run(self) -> RankStats:
        """Every round; returns this rank's stats, with `errors` set on every rank when any failed
        (the first failure's message is everyone's to raise; rank 0 aborts the upload). On a
        failure every rank stops after the same round and lets its running uploads finish, so
        none lands after rank 0's abort; an exception (a signal) leaves at once."""
        plan = self.plan
        try:
            stopped = False
            for j, by_rank in enumerate(plan.rounds):
                urls = self.next_urls(j) if self.next_urls else {}
                mine = by_rank[self.rank]
                requests, buffer = [], None
                if mine is not None:
                    buffer = self._take_buffer()
                    requests = self._post_receives(mine, buffer)
                    self._drop_pages()
                for aggregator, part in enumerate(by_rank):
                    if part is not None and aggregator != self.rank and plan.held[part][self.rank]:
                        self._send(part, aggregator)
                        self._drop_pages()
                wait_all(requests, self.stats)
                if buffer is not None:
                    self.pool.submit(self._upload, mine, buffer, urls.get(mine))
                stopped = self._stop_after_round()
                if stopped:
                    break
                if self.on_round:
                    self.on_round(j)
            self.pool.shutdown(wait=True, cancel_futures=stopped)
            if hasattr(self.uploader, "throttle_stats"):
                self.stats.note_throttling(self.uploader.throttle_stats())
            if hasattr(self.uploader, "failures"):
                self.stats.note_failures(self.uploader.failures())
            if getattr(self.uploader, "first_sent_at", None) is not None:
                self.stats.marks["first_upload"] = self.uploader.first_sent_at
            if not stopped:
                self._stop_after_round()  # the last rounds' uploads
        except BaseException:
            self.pool.shutdown(wait=False, cancel_futures=True)
            raise
        return self.stats

    def _stop_after_round(self) -> bool:
        """Collective: did any rank fail? Each rank's first error (or None) goes to every rank at
        once, so a rank that did not fail takes the first failed rank's as its own. Ranks whose
        uploads ended early wait here for the last upload, for seconds, asleep (driver.quiet)."""
        messages = quiet_allgather(self.comm, self.stats.errors[0] if self.stats.errors else None)
        failed = [m for m in messages if m is not None]
        if not failed:
            return False
        if not self.stats.errors:
            self.stats.errors.append(failed[0])
        return True


def _byte():
    from mpi4py import MPI

    return MPI.BYTE
