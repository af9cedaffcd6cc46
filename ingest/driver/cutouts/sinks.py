"""Where a cut-out job's files go: a directory (`output_dir`), the store (`dest`), or both.

In a directory each cut-out is renamed into place whole and journalled (ingest.outputs.cutouts).
With `dest = s3://bucket/prefix/` each is written to a local scratch file (in output_dir when
given, else a temporary directory of the rank's), uploaded as PREFIX/NAME with the checksum the
store verifies, and the scratch copy removed when output_dir was not given; the manifest goes to
PREFIX/manifest.json. A re-run keeps a stored cut-out when its size and ETag are those recorded
and it was made for the same request (`outputs.cutouts.resume`).
"""
from __future__ import annotations

import os
import shutil
import tempfile

from ingest.config import RunConfig
from ingest.errors import ConfigError
from ingest.outputs import cutouts as outputs

MANIFEST = outputs.NAME


def check_outputs(cfg: RunConfig) -> None:
    """Refuse a job with nowhere to put its cut-outs, before anything is read."""
    if not cfg.output_dir and not cfg.dest:
        raise ConfigError("output_dir: required for cutouts unless dest (s3://bucket/prefix/) is given")
    if cfg.dest:
        from ingest.staging.objects import prefix_of

        prefix_of(cfg.dest)  # a malformed URI is an error naming it


def _store(cfg: RunConfig):
    from ingest.staging.objects import PrefixStore

    return PrefixStore(cfg.dest)


def kept(cfg: RunConfig, cube: dict) -> dict[str, dict]:
    """Rank 0: the cut-outs an earlier run of this cube left whole, by file name (whether each was
    made for this run's request is `outputs.cutouts.resume`'s to say)."""
    if not cfg.dest:
        os.makedirs(cfg.output_dir, exist_ok=True)
        return outputs.finished(cfg.output_dir, cube)
    store = _store(cfg)
    manifest = store.get_json(MANIFEST)
    if manifest is None:
        return {}
    outputs.check_cube(manifest, cube, store.uri(MANIFEST))
    found = {}
    for entry in manifest.get("sources", []):
        if entry.get("status") == "done" and store.stored(entry["file"]) == (entry["bytes"], entry.get("etag")):
            found[entry["file"]] = entry
    return found


def write_manifest(cfg: RunConfig, manifest: dict) -> str:
    """Rank 0: the manifest in output_dir and/or at PREFIX/manifest.json; where it went."""
    where = []
    if cfg.output_dir:
        os.makedirs(cfg.output_dir, exist_ok=True)
        where.append(outputs.write_manifest(cfg.output_dir, manifest))
    if cfg.dest:
        where.append(_store(cfg).put_json(MANIFEST, manifest))
    return ", ".join(where)


class RankSink:
    """One rank's way of putting its cut-outs where they go."""

    def __init__(self, cfg: RunConfig, rank: int):
        self.keep_local = bool(cfg.output_dir)
        self.directory = cfg.output_dir or tempfile.mkdtemp(prefix=f"ingest-cutouts-{rank}-")
        os.makedirs(self.directory, exist_ok=True)
        self.journal = outputs.Journal(self.directory, rank) if self.keep_local else None
        self.store = _store(cfg) if cfg.dest else None

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def done(self, path: str, entry: dict) -> dict:
        """A cut-out written whole at `path`: uploaded (with dest); its manifest entry."""
        if self.store is not None:
            entry.update(self.store.put_file(path, os.path.basename(path)))
            if not self.keep_local:
                os.unlink(path)
        return entry

    def journal_many(self, entries: list[dict]) -> None:
        """Journal a batch's finished cut-outs (in output_dir; a store's are found by their ETags)."""
        if self.journal is not None and entries:
            self.journal.add(entries)

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        if not self.keep_local:
            shutil.rmtree(self.directory, ignore_errors=True)
