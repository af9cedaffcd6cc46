"""Regions: what part of a cube to read, with the meaning of astropy's `section[...]`.

A region is normalised into a `Selection`: per numpy axis a (start, count, step) triple and
whether the axis is dropped from the result (an integer index). Unlike numpy, a slice that
reaches past the cube is an error rather than silently clipped, because for an ingest job a
box that falls off the cube is nearly always a mistake in the box, not a wish for less data.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.errors import RegionError


@dataclass(frozen=True)
class Selection:
    """A normalised region: per axis start, count and step (> 0), plus axes to drop."""

    starts: tuple[int, ...]
    counts: tuple[int, ...]
    steps: tuple[int, ...]
    dropped: tuple[bool, ...]  # axes indexed by an integer, removed from the result

    @property
    def box_shape(self) -> tuple[int, ...]:
        """Shape including dropped (length-1) axes."""
        return self.counts

    @property
    def out_shape(self) -> tuple[int, ...]:
        """Shape of the array returned to the user."""
        return tuple(c for c, d in zip(self.counts, self.dropped) if not d)

    @property
    def box(self) -> tuple[tuple[int, int], ...]:
        """Half-open (start, stop) per axis of the bounding box (for step 1 this is exact)."""
        return tuple((s, s + (c - 1) * st + 1) for s, c, st in zip(self.starts, self.counts, self.steps))


def _axis(index, n: int, axis: int) -> tuple[int, int, int, bool]:
    if isinstance(index, slice):
        step = 1 if index.step is None else int(index.step)
        if step <= 0:
            raise RegionError(f"region axis {axis}: step {step} is not supported (steps must be positive)")
        start, stop = index.start, index.stop
        start = 0 if start is None else int(start)
        stop = n if stop is None else int(stop)
        start = start + n if start < 0 else start
        stop = stop + n if stop < 0 else stop
        if not (0 <= start <= n) or not (0 <= stop <= n):
            raise RegionError(
                f"region axis {axis}: {index.start}:{index.stop} is outside the cube (axis length {n})"
            )
        count = max(0, -(-(stop - start) // step))
        if count == 0:
            raise RegionError(f"region axis {axis}: {index.start}:{index.stop} selects nothing (empty region)")
        return start, count, step, False
    if isinstance(index, (int,)) or hasattr(index, "__index__"):
        i = int(index)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise RegionError(f"region axis {axis}: index {i} is outside the cube (axis length {n})")
        return j, 1, 1, True
    raise RegionError(f"region axis {axis}: {index!r} is not a slice or an integer")


def normalize(region, shape: tuple[int, ...]) -> Selection:
    """Turn `region` (slices/ints/Ellipsis, numpy axis order) into a Selection for `shape`."""
    if region is None:
        region = ()
    if not isinstance(region, tuple):
        region = (region,)
    if sum(r is Ellipsis for r in region) > 1:
        raise RegionError("region: more than one Ellipsis (...)")
    if Ellipsis in region:
        i = region.index(Ellipsis)
        fill = len(shape) - (len(region) - 1)
        region = region[:i] + (slice(None),) * fill + region[i + 1 :]
    if len(region) > len(shape):
        raise RegionError(f"region has {len(region)} axes but the cube has {len(shape)} (shape {shape})")
    region = region + (slice(None),) * (len(shape) - len(region))
    parts = [_axis(r, n, a) for a, (r, n) in enumerate(zip(region, shape))]
    starts, counts, steps, dropped = (tuple(p[k] for p in parts) for k in range(4))
    return Selection(starts, counts, steps, dropped)


def parse_region(text: str) -> tuple:
    """Parse "0:10, 5, ::2, ..." (numpy axis order) into a tuple of slices and ints."""
    if text is None or not text.strip():
        return ()
    out = []
    for k, part in enumerate(text.split(",")):
        part = part.strip()
        try:
            if part == "...":
                out.append(Ellipsis)
            elif ":" in part:
                fields = [f.strip() for f in part.split(":")]
                if len(fields) > 3:
                    raise ValueError(part)
                vals = [int(f) if f else None for f in fields]
                out.append(slice(*vals))
            else:
                out.append(int(part))
        except ValueError:
            raise RegionError(f"region: cannot parse axis {k} {part!r} (expected start:stop[:step] or an index)") from None
    return tuple(out)


def box_to_region(box) -> tuple[slice, ...]:
    """(start, stop) pairs -> a tuple of slices."""
    return tuple(slice(int(a), int(b)) for a, b in box)
