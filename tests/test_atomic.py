"""ingest.atomic's batches: one sync per filesystem the batch's files are on (syncfs, not the
node's every mount), and a failed sync publishes nothing; and a cut-out rank's finisher, which
publishes its batches on a worker thread."""
from __future__ import annotations

import errno
import os
import threading
import zlib

import pytest

from ingest import atomic


def _batch_of(tmp_path, names):
    batch = atomic.DurableBatch()
    for name in names:
        final = tmp_path / name
        final.parent.mkdir(parents=True, exist_ok=True)
        with batch.write(str(final), str(final) + ".tmp") as fh:
            fh.write(name.encode())
    return batch


def test_a_batch_syncs_each_filesystem_once_then_renames(tmp_path, monkeypatch):
    synced = []

    def syncfs(fd):
        synced.append(os.fstat(fd).st_dev)
        return 0

    monkeypatch.setattr(atomic, "_SYNCFS", syncfs)
    monkeypatch.setattr(os, "sync", lambda: pytest.fail("the whole node synced"))
    batch = _batch_of(tmp_path, ["a.fits", "sub/b.fits", "sub/c.fits"])
    done = batch.publish()
    assert sorted(os.path.basename(p) for p in done) == ["a.fits", "b.fits", "c.fits"]
    assert synced == [os.stat(tmp_path).st_dev]  # two directories, one filesystem: one sync
    assert (tmp_path / "sub" / "c.fits").read_bytes() == b"sub/c.fits"
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_failed_sync_publishes_nothing_and_names_the_directory(tmp_path, monkeypatch):
    def syncfs(fd):
        atomic.ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(atomic, "_SYNCFS", syncfs)
    batch = _batch_of(tmp_path, ["a.fits", "b.fits"])
    with pytest.raises(OSError, match=f"syncfs of {tmp_path}") as caught:
        batch.publish()
    assert caught.value.errno == errno.EIO
    assert not (tmp_path / "a.fits").exists() and not (tmp_path / "b.fits").exists()
    batch.discard()  # what the cut-out rank does on its way out
    assert list(tmp_path.iterdir()) == []


def test_without_syncfs_the_batch_falls_back_to_sync(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(atomic, "_SYNCFS", None)
    monkeypatch.setattr(os, "sync", lambda: calls.append("sync"))
    assert len(_batch_of(tmp_path, ["a.fits"]).publish()) == 1 and calls == ["sync"]


def test_the_real_syncfs_runs_here(tmp_path):
    assert atomic._SYNCFS is not None  # Linux's C library has it
    assert len(_batch_of(tmp_path, ["a.fits"]).publish()) == 1
    assert (tmp_path / "a.fits").read_bytes() == b"a.fits"


def test_a_batch_knows_each_binary_files_crc32_without_reading_it_back(tmp_path):
    import numpy as np

    batch = atomic.DurableBatch()
    parts = [b"SIMPLE", np.arange(1000, dtype=">f4").view(np.uint8), memoryview(b"\0" * 17)]
    with batch.write(str(tmp_path / "a.fits"), str(tmp_path / "a.tmp")) as fh:
        for part in parts:
            fh.write(part)
    with batch.write(str(tmp_path / "b.txt"), str(tmp_path / "b.tmp"), mode="w") as fh:
        fh.write("text")  # a text file: written as it is, no sum
    batch.publish()
    assert batch.crc32_of(str(tmp_path / "a.fits")) == zlib.crc32((tmp_path / "a.fits").read_bytes())
    assert batch.crc32_of(str(tmp_path / "a.fits")) is None  # taken once
    assert batch.crc32_of(str(tmp_path / "b.txt")) is None and (tmp_path / "b.txt").read_text() == "text"


class _Source:
    def __init__(self, name):
        self.name = name

    def entry(self, file, nbytes, crc32, **extra):
        return {"name": self.name, "file": file, "bytes": nbytes, "crc32": crc32, **extra}


class _Sink:
    """Records what was journalled and the thread that did each publish step."""

    def __init__(self):
        self.journalled = []
        self.threads = set()

    def done(self, path, entry):
        self.threads.add(threading.get_ident())
        return entry

    def journal_many(self, entries):
        self.threads.add(threading.get_ident())
        self.journalled += [e["name"] for e in entries]


def _finisher_files(tmp_path, finisher, durable, names):
    for name in names:
        path = str(tmp_path / f"{name}.fits")
        with durable.write(path, path + ".tmp") as fh:
            fh.write(name.encode())
        finisher.add(_Source(name), path, 1.0, 10)


def test_groups_are_published_in_the_background_in_order(tmp_path, monkeypatch):
    """A cut-out rank's finisher: a group of PUBLISH_FILES goes to the worker while the next is
    written; flush publishes the rest; entries, journal and progress come back in order."""
    from ingest.driver.cutouts import rank as cutout_rank

    monkeypatch.setattr(cutout_rank, "PUBLISH_FILES", 3)
    durable, entries, sink, progress = atomic.DurableBatch(), [], _Sink(), []
    progress_threads = set()

    def note_progress(n, b):
        progress_threads.add(threading.get_ident())
        progress.append((n, b))

    finisher = cutout_rank._Finisher(sink, durable, entries, note_progress)
    names = [f"s{i}" for i in range(8)]
    try:
        _finisher_files(tmp_path, finisher, durable, names)
        finisher.flush()
    finally:
        finisher.close()
    assert [e["name"] for e in entries] == names == sink.journalled
    # published on a worker, never on the rank's thread; the progress taken back on the rank's own
    rank_thread = threading.get_ident()
    assert sink.threads and rank_thread not in sink.threads, "a group was published on the rank's thread"
    assert progress_threads == {rank_thread}
    assert progress == [(3, 30), (3, 30), (2, 20)]
    assert all(e["crc32"] == zlib.crc32(e["name"].encode()) for e in entries)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.fits" for n in names)


def test_a_group_that_fails_to_publish_raises_on_the_ranks_thread_and_leaves_no_file(tmp_path, monkeypatch):
    from ingest.driver.cutouts import rank as cutout_rank

    def syncfs(fd):
        atomic.ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(cutout_rank, "PUBLISH_FILES", 2)
    monkeypatch.setattr(atomic, "_SYNCFS", syncfs)
    durable, entries = atomic.DurableBatch(), []
    finisher = cutout_rank._Finisher(_Sink(), durable, entries, None)
    with pytest.raises(OSError, match="syncfs of"):
        try:
            _finisher_files(tmp_path, finisher, durable, ["a", "b", "c"])  # "c" waits for a and b's group
            finisher.flush()
        finally:
            finisher.close()
            durable.discard()
    assert entries == [] and list(tmp_path.iterdir()) == []
