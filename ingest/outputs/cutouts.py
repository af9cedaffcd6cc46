"""What a cut-out job leaves: one file per source, a journal per rank, DIR/manifest.json.

Every cut-out is complete or absent (written under a temporary name, then renamed). As a rank
finishes a file it appends a line to its journal (`.cutouts-rank{R}.jsonl`, flushed and fsynced),
so a job killed midway still knows which files are whole. At the end rank 0 merges the journals
and the skipped sources into `manifest.json` (schema ingest.cutouts/2: the cube's identity, the
job's part of the request, and per source its name, row, box, file, bytes, CRC-32 of the file, the
digest of its request, requests and wire bytes, or the reason it was skipped) and removes the
journals. A re-run keeps a file only when its CRC-32 still matches what the manifest or a journal
recorded and it was made for the same request (`resume`: the same cube, size, region, frame,
convention, rest frequency, name and output format); it cuts the rest. A manifest of
ingest.cutouts/1 recorded no request: its files are cut again, not trusted.

A file's OBJECT card is the source's name as a FITS header value can hold it
(`outputs.subcubes.fits_text`: printable ASCII, accents dropped, so "Mén" is "Men", any other
character `?`); the manifest keeps the name as the catalogue has it. A name is not a reason to
lose a source's cut-out.
"""
from __future__ import annotations

import glob
import json
import os
import zlib

from ingest.atomic import atomic_write, remove_quietly
from ingest.errors import ConfigError
from ingest.outputs.manifest import load_json

SCHEMA = "ingest.cutouts/2"
OLDER_SCHEMAS = ("ingest.cutouts/1",)  # read, but its entries have no request: every file is re-cut
NAME = "manifest.json"
_JOURNAL = ".cutouts-rank{rank}.jsonl"
_READ_BYTES = 8 << 20


def file_crc32(path: str) -> int | None:
    """CRC-32 of a file's bytes, or None when it is missing."""
    crc = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(_READ_BYTES):
                crc = zlib.crc32(chunk, crc)
    except FileNotFoundError:
        return None
    return crc


class Journal:
    """One rank's record of the cut-outs it finished, a JSON line each, durable as it goes."""

    def __init__(self, out_dir: str, rank: int):
        self.path = os.path.join(out_dir, _JOURNAL.format(rank=rank))
        self._fh = open(self.path, "a", encoding="utf-8")

    def add(self, entries: list[dict]) -> None:
        """Record finished cut-outs (one flush and fsync for all of them)."""
        self._fh.write("".join(json.dumps(entry) + "\n" for entry in entries))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def _journal_entries(out_dir: str) -> list[dict]:
    entries = []
    for path in sorted(glob.glob(os.path.join(out_dir, _JOURNAL.format(rank="*")))):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a crash: its file is cut again
    return entries


def load(out_dir: str) -> dict | None:
    """DIR/manifest.json, or None; an unreadable one is an error naming the file."""
    return load_json(os.path.join(out_dir, NAME), SCHEMA, "cut-out manifest",
                     "remove it or choose another --output-dir", older=OLDER_SCHEMAS)


def finished(out_dir: str, cube: dict) -> dict[str, dict]:
    """Cut-outs an earlier run of this cube left whole, by file name: entries of the manifest and
    the journals whose file is still there with the CRC-32 they recorded; where both match, the
    journal's, which is newer. A manifest of another cube (size or version changed) is an error:
    its files would be mixed with this cube's."""
    manifest = load(out_dir)
    entries = []
    if manifest is not None:
        check_cube(manifest, cube, os.path.join(out_dir, NAME))
        entries = [e for e in manifest.get("sources", []) if e.get("status") == "done"]
    entries += _journal_entries(out_dir)
    _remove_leftover_temps(out_dir)
    kept, crcs = {}, {}
    for entry in entries:
        name = entry["file"]
        if name not in crcs:
            crcs[name] = file_crc32(os.path.join(out_dir, name))
        if crcs[name] == entry["crc32"]:
            kept[name] = entry  # a later entry for the same bytes wins: a journal over the manifest
    return kept


def resume(sources, found: dict[str, dict], ext: str) -> tuple[list[int], list[dict], int]:
    """Which of `sources` (CutoutSource) to cut now, given `found`, the files an earlier run left
    whole by name: (their indices, the entries kept, how many are cut again because their request
    changed). A source is kept when its file is whole and was made for the same request; a file
    whose request differs, or was never recorded (ingest.cutouts/1), is cut again and replaced. A
    file no source of this catalogue asks for is left where it is, and not listed as kept."""
    todo, kept, n_recut = [], [], 0
    for i, source in enumerate(sources):
        if source.box is None:
            continue
        entry = found.get(source.file_stem + ext)
        if entry is not None and source.request is not None and entry.get("request") == source.request:
            kept.append({**entry, "row": source.row})  # the same request; the row may have moved
            continue
        n_recut += entry is not None
        todo.append(i)
    return todo, kept, n_recut


def check_cube(manifest: dict, cube: dict, where: str) -> None:
    """Refuse a manifest cut from another version of the cube (size, ETag or mtime changed): its
    cut-outs would be mixed with this cube's."""
    old = manifest.get("cube", {})
    for key in ("object_bytes", "etag", "last_modified"):
        if old.get(key) != cube.get(key):
            raise ConfigError(f"{where}: cut from another version of the cube ({key} was {old.get(key)!r}, "
                              f"now {cube.get(key)!r}); choose another destination or remove the old cut-outs")


def _remove_leftover_temps(out_dir: str) -> None:
    """Cut-outs a killed run left under their temporary names (`.NAME.tmp-PID`): never renamed,
    so never whole; rank 0 removes them before any rank of this run writes."""
    for path in glob.glob(os.path.join(out_dir, ".*.tmp-*")):
        name = os.path.basename(path)
        if name[1:].rpartition(".tmp-")[0].endswith((".fits", ".h5")):
            remove_quietly(path)


def write_manifest(out_dir: str, manifest: dict) -> str:
    """manifest.json, atomically; then the journals it replaces are removed."""
    path = os.path.join(out_dir, NAME)
    with atomic_write(path, f"{path}.tmp-{os.getpid()}", "w", encoding="utf-8") as fh:
        fh.write(manifest_text(manifest))
    for journal in glob.glob(os.path.join(out_dir, _JOURNAL.format(rank="*"))):
        remove_quietly(journal)
    return path


def manifest_text(manifest: dict) -> str:
    """The manifest as JSON, one line per source: json.dumps without indent runs in C, and
    json.dump with an indent in Python, a second for ten thousand sources."""
    head = json.dumps({k: v for k, v in manifest.items() if k != "sources"}, indent=1)
    sources = ",\n".join("  " + json.dumps(entry) for entry in manifest.get("sources", ()))
    opening = head[:-2] + ",\n" if head != "{}" else "{\n"
    return f'{opening} "sources": [\n{sources}\n ]\n}}\n'


def summary_text(report: dict) -> str:
    """The human lines drawn from a cut-out report."""
    t = report["totals"]
    why = f" ({t['recut']} re-cut: request changed, {t['new']} new)" if "recut" in t else ""
    lines = [f"cutouts: {t['done']} cut{why}, {t['kept']} kept from an earlier run, {t['skipped']} skipped "
             f"of {t['sources']} sources in {report['makespan_s']:.3f} s on {len(report['ranks'])} ranks",
             f"  read: {t['requests']} requests, {t['bytes_wire']} bytes on the wire for {t['bytes_needed']} "
             f"needed ({t['requests_per_source']:.2f} requests, {t['bytes_wire_per_source']:.0f} bytes per source)",
             f"  plan: {report['plan']['choice']}"]
    reasons = {}
    for entry in report.get("skipped", []):
        reasons[entry["reason"]] = reasons.get(entry["reason"], 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1])[:5]:
        lines.append(f"  skipped {count}: {reason}")
    if report.get("clipped"):
        lines.append(f"  clipped to the cube: {report['clipped']} cut-outs")
    return "\n".join(lines)
