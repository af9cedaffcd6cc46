"""DIR/manifest.json: what a pre-stage wrote, so a re-run can verify, skip and resume.

Data first, like the report: a JSON document (schema ingest.prestage/1) written atomically by
rank 0 and rewritten as regions complete. It records the source (redacted) and its identity
(size, ETag or mtime), the companions, the layout, the regions (index, box, halo, the files each
wrote, a CRC-32 per cube of the region's bytes, status). A re-run refuses to mix versions: a
changed object, another layout or other regions is an error naming the difference.
"""
from __future__ import annotations

import json
import os

from ingest.errors import ConfigError
from ingest.atomic import atomic_write

SCHEMA = "ingest.prestage/1"
NAME = "manifest.json"
DONE = "done"


def path_in(out_dir: str) -> str:
    return os.path.join(out_dir, NAME)


def identity(name: str, info) -> dict:
    """A cube's identity: its (redacted) name, size and version tag."""
    return {"name": name, "object_bytes": info.object_bytes, "etag": info.etag, "last_modified": info.last_modified}


def load(out_dir: str) -> dict | None:
    """The manifest in out_dir, or None; an unreadable one is an error naming the file."""
    return load_json(path_in(out_dir), SCHEMA, "pre-stage manifest", "use --fresh to start over")


def load_json(path: str, schema: str, what: str, remedy: str, older: tuple[str, ...] = ()) -> dict | None:
    """A JSON manifest of `schema` (or one of the `older` schemas its reader still takes) at path,
    or None when there is none; an unreadable one, or one of another schema, is an error naming
    the file and saying what to do (`remedy`)."""
    try:
        with open(path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable {what} ({exc}); {remedy}") from None
    if not isinstance(manifest, dict) or manifest.get("schema") not in (schema, *older):
        raise ConfigError(f"{path}: not a {schema} manifest; {remedy}")
    return manifest


def write(out_dir: str, manifest: dict) -> None:
    path = path_in(out_dir)
    with atomic_write(path, f"{path}.tmp-{os.getpid()}", "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)


def difference(old: dict, new: dict) -> str | None:
    """What makes `old` another version of the job than `new`, in words; None when they match."""
    for label in ("data",) + tuple(sorted(set(old["cubes"]) | set(new["cubes"]) - {"data"})):
        a, b = old["cubes"].get(label), new["cubes"].get(label)
        if a is None or b is None:
            return f"companion {label!r} is {'new' if a is None else 'gone'}"
        for key in ("name", "object_bytes", "etag", "last_modified"):
            if a.get(key) != b.get(key):
                return f"{label} {key} was {a.get(key)!r}, now {b.get(key)!r} (the object changed)"
    if old["layout"] != new["layout"]:
        return f"layout was {old['layout']!r}, now {new['layout']!r}"
    if old["split"] != new["split"]:
        return f"the split was {old['split']}, now {new['split']}"
    if [r["box"] for r in old["regions"]] != [r["box"] for r in new["regions"]]:
        return f"the regions differ ({len(old['regions'])} before, {len(new['regions'])} now)"
    return None


def check_same_job(out_dir: str, old: dict, new: dict) -> None:
    """Refuse to resume a manifest written for another version of the job."""
    diff = difference(old, new)
    if diff is not None:
        raise ConfigError(f"{path_in(out_dir)}: written for another pre-stage: {diff}. Nothing was changed; "
                          f"use --fresh to start over, or another --output-dir")


def done_regions(manifest: dict) -> list[int]:
    return [r["index"] for r in manifest["regions"] if r["status"] == DONE]
