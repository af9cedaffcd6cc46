"""A transport that keeps what it read: ranges asked again come from memory, and the store is
asked only for the bytes no earlier read brought (`ingest.open`'s cache).

It wraps any transport behind the same interface, so the executor, the chunked reader and
retries run unchanged above it. What is held, what a range lacks and what is dropped first is the
pure `ingest.core.rangecache`; this module only moves bytes. One read becomes: its held pieces
copied from memory, then each missing run read from the store straight into the caller's buffer
(one request per run: a held byte is never asked for again) and kept. The object is one version
(the inner transport pins it), so held bytes stay exact.

A read that fails part way says how much of the caller's buffer it filled (RetryableError's
`received`): the pieces before the failed run and what arrived of it, so a retry resumes after
them. Two reads of the same missing bytes at the same moment (two threads) may both fetch them;
reads one after the other never do.
"""
from __future__ import annotations

import threading

from ingest.core.rangecache import RangeCache
from ingest.errors import RetryableError
from ingest.transports.base import ObjectInfo, Session, Transport


class CachedTransport(Transport):
    """`inner`'s bytes, kept up to `budget_bytes` in memory. `on_served(from_cache_bytes,
    from_store_bytes)`, if given, hears what each read took from where."""

    def __init__(self, inner: Transport, budget_bytes: int, *, on_served=None):
        super().__init__(inner.source, threads=inner.threads)
        self.inner = inner
        self.name = inner.name
        self.concurrent = inner.concurrent
        self.environment = inner.environment
        self._cache = RangeCache(budget_bytes)
        self._lock = threading.Lock()
        self._on_served = on_served

    # -- what the inner transport says -----------------------------------------------------------
    @property
    def engine(self) -> str:
        return self.inner.engine

    @property
    def display_name(self) -> str:
        return self.inner.display_name

    @property
    def endpoint(self) -> str | None:
        return self.inner.endpoint

    @property
    def info(self) -> ObjectInfo:
        return self.inner.info

    def adopt(self, info: ObjectInfo) -> None:
        self.inner.adopt(info)

    def _stat(self) -> ObjectInfo:
        return self.inner.info

    @property
    def held_bytes(self) -> int:
        """Bytes held in memory now."""
        return self._cache.held_bytes

    def close(self) -> None:
        with self._lock:
            self._cache.clear()
        self.inner.close()

    # -- reading -----------------------------------------------------------------------------------
    def read_into(self, buffer: memoryview, offset: int) -> float:
        fill = self._begin(buffer, offset)
        first_byte_s = None
        for part, start in fill.missing:
            try:
                ttfb_s = self.inner.read_into(part, start)
            except RetryableError as exc:
                fill.failed(exc, start)
                raise
            fill.fetched(part, start)
            first_byte_s = ttfb_s if first_byte_s is None else first_byte_s
        return first_byte_s or 0.0

    def open_session(self, depth: int) -> "Session":
        return _CachedSession(self, self.inner.open_session(depth))

    def _begin(self, buffer: memoryview, offset: int) -> "_Fill":
        """Copy the held pieces of the range into `buffer` now; the missing runs, to fetch."""
        self._check_range(offset, len(buffer))
        with self._lock:
            pieces = self._cache.pieces(offset, offset + len(buffer))
        fill = _Fill(self, offset)
        for a, b, data in pieces:
            part = buffer[a - offset : b - offset]
            if data is None:
                fill.missing.append((part, a))
            else:
                part[:] = data
                fill.cached_bytes += b - a
        self._served(fill.cached_bytes, 0)
        return fill

    def _keep(self, start: int, data) -> None:
        with self._lock:
            self._cache.put(start, data)

    def _served(self, from_cache_bytes: int, from_store_bytes: int) -> None:
        if self._on_served is not None and (from_cache_bytes or from_store_bytes):
            self._on_served(from_cache_bytes, from_store_bytes)


class _Fill:
    """One read in progress: its missing runs (buffer part, offset) in order, and what failed."""

    __slots__ = ("owner", "offset", "missing", "cached_bytes")

    def __init__(self, owner: CachedTransport, offset: int):
        self.owner, self.offset = owner, offset
        self.missing: list[tuple[memoryview, int]] = []
        self.cached_bytes = 0

    def fetched(self, part: memoryview, start: int) -> None:
        """A missing run arrived whole: keep it and count it."""
        self.owner._keep(start, part)
        self.owner._served(0, len(part))

    def failed(self, exc: RetryableError, start: int) -> None:
        """The run at `start` broke after `exc.received` of its bytes: make `received` count from
        the read's own start (everything before the run is in the buffer), for the retry to
        resume there."""
        self.owner._served(0, max(0, exc.received))
        exc.received += start - self.offset


class _CachedSession(Session):
    """The inner session's reads, each read's missing runs one after another (so each read keeps
    one transfer in flight, as the caller's `depth` assumes); a read with none ends at once."""

    def __init__(self, owner: CachedTransport, inner: Session):
        self._owner, self._inner = owner, inner
        self._done: list = []  # (key, ttfb_s, error) to hand back at the next wait
        self._live: dict = {}  # key -> [fill, index of the run in flight, first ttfb_s]

    def start(self, key, buffer: memoryview, offset: int) -> None:
        fill = self._owner._begin(buffer, offset)
        if not fill.missing:
            self._done.append((key, 0.0, None))
            return
        self._live[key] = [fill, 0, None]
        self._inner.start(key, *fill.missing[0])

    def wait(self, timeout_s: float) -> list:
        done, self._done = self._done, []
        if self._live:
            for key, ttfb_s, error in self._inner.wait(0.0 if done else timeout_s):
                ended = self._advance(key, ttfb_s, error)
                if ended is not None:
                    done.append(ended)
        return done

    def _advance(self, key, ttfb_s: float, error):
        """A run of `key` ended: start its next, or say the read ended (key, ttfb_s, error)."""
        state = self._live[key]
        fill, i, first_s = state
        part, start = fill.missing[i]
        if error is not None:
            del self._live[key]
            if isinstance(error, RetryableError):
                fill.failed(error, start)
            return key, first_s if first_s is not None else ttfb_s, error
        fill.fetched(part, start)
        state[2] = first_s = ttfb_s if first_s is None else first_s
        if i + 1 < len(fill.missing):
            state[1] = i + 1
            self._inner.start(key, *fill.missing[i + 1])
            return None
        del self._live[key]
        return key, first_s, None

    def close(self) -> None:
        self._live.clear()
        self._inner.close()
