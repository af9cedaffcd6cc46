"""Which source strings name a collection of tiles, and what each form selects. Pure: no listing here.

A source names a collection when it is
- `@FILE`: the objects FILE lists, one a line (blank lines and lines starting with `#` skipped;
  a relative local path is taken from FILE's directory; s3:// and http(s):// entries as they are);
- a prefix, ending in `/`: every object under it, at any depth (`s3://bucket/field/`,
  `/scratch/tiles/`);
- a glob, a `*`, `?` or `[` in the key or path: the objects whose key (or path) the pattern
  matches as a shell does, segment by segment: `*` and `?` never match a `/`, and no wildcard
  matches a name's leading `.` (`s3://survey/field/*.fits`, `/scratch/tiles/tile_[0-9]*.fits`).

In every form a name starting with `.` is left out (hidden files, and the collection's own index,
`.ingest-index.json`). An http(s) URL is never a collection: its `?` starts a query string, and
HTTP has no listing. A key that holds `*`, `?` or `[` itself is named with the character in
brackets, as in a shell (`[*]`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ingest.errors import ConfigError

WILDCARDS = "*?["
FORMS = ("glob", "prefix", "list")


def is_collection(source) -> bool:
    """Does `source` name a collection (a leading `@`, a trailing `/`, or a wildcard in the key
    or path) rather than one object?"""
    if not isinstance(source, str) or not source:
        return False
    if source.startswith("@"):
        return True
    if source.startswith(("http://", "https://")):
        return False
    if source.startswith("s3://"):
        return source.endswith("/") or any(c in source for c in WILDCARDS)  # one in the bucket is refused by name
    return source.endswith(("/", os.sep)) or any(c in source for c in WILDCARDS)


@dataclass(frozen=True)
class CollectionSpec:
    """A collection's source string, parsed: `form` (glob, prefix or list) and where its objects
    are (`bucket` for S3, else local paths), with `pattern` the key or path pattern (glob), the
    prefix (prefix) or the list file's path (list)."""

    text: str
    form: str
    store: str  # "s3", "local", or "list" (a list file's entries say their own store)
    pattern: str
    bucket: str | None = None

    @property
    def literal_prefix(self) -> str:
        """The key or path up to its first wildcard: what an S3 listing asks for."""
        if self.form != "glob":
            return self.pattern
        cut = min((self.pattern.index(c) for c in WILDCARDS if c in self.pattern), default=len(self.pattern))
        return self.pattern[:cut]

    @property
    def base_dir(self) -> str:
        """The deepest directory (or key prefix) that holds every object: the local index's home."""
        if self.form == "list":
            return os.path.dirname(os.path.abspath(self.pattern))
        head = self.literal_prefix
        return head[: head.rfind("/") + 1] if "/" in head else ""

    def matches(self, key: str) -> bool:
        """Is `key` (an S3 key, or a local path as listed) one of this collection's objects?"""
        if self.form == "list":
            return True
        if any(part.startswith(".") for part in key[len(self.base_dir):].split("/")):
            return False
        if self.form == "prefix":
            return key.startswith(self.pattern) and len(key) > len(self.pattern)
        return _glob_regex(self.pattern).fullmatch(key) is not None

    def source_of(self, key: str) -> str:
        """The source string that opens object `key` of this collection."""
        return f"s3://{self.bucket}/{key}" if self.store == "s3" else key


def parse_collection(source: str) -> CollectionSpec:
    """The CollectionSpec of a collection's source string; ConfigError, naming it, when it is not one."""
    if not is_collection(source):
        raise ConfigError(f"source {source!r} is one object, not a collection; a collection is a glob "
                          f"(s3://bucket/field/*.fits), a prefix ending in '/' or @FILE listing one object a line")
    if source.startswith("@"):
        path = source[1:]
        if not path:
            raise ConfigError("source '@': name the file that lists the tiles, one a line (@tiles.txt)")
        return CollectionSpec(source, "list", "list", path)
    if source.startswith("s3://"):
        bucket, _, key = source[len("s3://"):].partition("/")
        if not bucket or any(c in bucket for c in WILDCARDS):
            raise ConfigError(f"source {source!r}: the bucket must be named in full; wildcards go in the key "
                              f"(s3://bucket/field/*.fits)")
        form = "prefix" if source.endswith("/") and not any(c in key for c in WILDCARDS) else "glob"
        if form == "glob":
            _glob_regex(key)  # a malformed class is refused here, naming the source
        return CollectionSpec(source, form, "s3", key, bucket)
    path = os.path.abspath(os.path.expanduser(source)).replace(os.sep, "/")  # keys are absolute paths
    path += "/" if source.endswith(("/", os.sep)) and not path.endswith("/") else ""
    form = "prefix" if path.endswith("/") and not any(c in path for c in WILDCARDS) else "glob"
    if form == "glob":
        _glob_regex(path)
    return CollectionSpec(source, form, "local", path)


def _glob_regex(pattern: str) -> re.Pattern:
    """A shell glob as a regex over a whole key: `*` and `?` within one segment, `[...]` a class
    (`[!...]` negated), no wildcard matching a segment's leading dot."""
    out, i, n = [], 0, len(pattern)
    at_start = True  # at the start of a segment: a wildcard there must not match a '.'
    while i < n:
        c = pattern[i]
        if c == "*":
            while i + 1 < n and pattern[i + 1] == "*":
                i += 1  # '**' is '*': no recursive match (a prefix ending in '/' lists every depth)
            out.append(r"(?!\.)[^/]*" if at_start else r"[^/]*")
        elif c == "?":
            out.append(r"(?!\.)[^/]" if at_start else r"[^/]")
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1: i + 2] in ("!", "]") else i + 1)
            if j < 0:
                raise ConfigError(f"source pattern {pattern!r}: '[' at {i} opens a class no ']' closes; "
                                  f"write '[[]' for a literal '['")
            body = pattern[i + 1: j]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            chars = body.replace("\\", "\\\\").replace("^", "\\^")
            klass = f"[^/{chars}]" if negate else f"[{chars}]"
            out.append(r"(?!\.)" + klass if at_start else klass)
            i = j
        else:
            out.append(re.escape(c))
        at_start = c == "/"
        i += 1
    try:
        return re.compile("".join(out))
    except re.error as exc:
        raise ConfigError(f"source pattern {pattern!r}: {exc}") from None
