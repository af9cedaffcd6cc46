"""numpy basic indexing (pure): `cube[key]` means exactly what `array[key]` means.

`ingest.core.selection.normalize` gives a region read_subcube's meaning: positive steps only, and a
slice that reaches past the cube or selects nothing is an error (for a job's box that is nearly
always a mistake). `RemoteCube.__getitem__` promises numpy's meaning instead, because dask,
xarray and users slicing interactively rely on it: slices are clipped, may be empty or step
backwards, `None` adds an axis. `basic_index` turns such a key into a region `normalize`
accepts (in-range, positive steps, nothing empty) plus the few cheap steps that make the array
read for that region into numpy's answer: reverse some axes, insert new ones.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass


@dataclass(frozen=True)
class BasicIndex:
    """A numpy basic index resolved against a shape."""

    region: tuple  # ints and positive-step, in-range, non-empty slices, one per cube axis
    out_shape: tuple[int, ...]  # the shape numpy's result has
    post: tuple  # applied to the array read for `region`: reversals, new axes (None), and `...` when
    # the key had one (numpy then returns a 0-d array where an all-integer key gives a scalar)
    empty: bool  # some axis selects nothing: no byte need be read


def _as_int(index) -> int | None:
    """An integer index as numpy takes one (Python or numpy int, 0-d integer array), else None.
    bool is refused: numpy reads True/False as a boolean mask, not as 1/0."""
    if isinstance(index, bool) or getattr(index, "dtype", None) is not None and index.dtype.kind == "b":
        return None
    try:
        return operator.index(index)
    except TypeError:
        return None


def _check_kinds(key: tuple) -> None:
    for k in key:
        if k is None or k is Ellipsis or isinstance(k, slice) or _as_int(k) is not None:
            continue
        raise IndexError(f"only basic indexing is supported (integers, slices, ..., None), not {type(k).__name__} "
                         f"{k!r:.60}; read a box and index the numpy array for fancy or boolean indexing")


def basic_index(key, shape: tuple[int, ...]) -> BasicIndex:
    """Resolve `key` as numpy resolves a basic index into an array of `shape` (same errors:
    IndexError for an integer out of bounds or too many indices, ValueError for a zero step)."""
    key = key if isinstance(key, tuple) else (key,)
    _check_kinds(key)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_axes = sum(k is not None and k is not Ellipsis for k in key)
    if n_axes > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but {n_axes} were indexed")
    fill = (slice(None),) * (len(shape) - n_axes)
    at = next((j for j, k in enumerate(key) if k is Ellipsis), None)  # by identity: `in` would compare arrays
    key = key + fill if at is None else key[:at] + fill + key[at + 1:]
    region, out_shape, post, axis = [], [], [], 0
    for k in key:
        if k is None:
            out_shape.append(1)
            post.append(None)
            continue
        n = shape[axis]
        i = _as_int(k)
        if i is not None:
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            region.append(i % n)
        else:
            start, stop, step = k.indices(n)  # numpy's clipping; ValueError on step 0, as numpy
            picked = range(start, stop, step)
            out_shape.append(len(picked))
            post.append(slice(None, None, -1) if step < 0 else slice(None))
            if len(picked) == 0:
                region.append(slice(0, 1))  # placeholder: an empty index is never read
            else:
                low = min(picked[0], picked[-1])
                region.append(slice(low, low + (len(picked) - 1) * abs(step) + 1, abs(step)))
        axis += 1
    if at is not None:  # numpy returns a 0-d array, not a scalar, when the key had an Ellipsis
        post.insert(0, Ellipsis)
    return BasicIndex(tuple(region), tuple(out_shape), tuple(post), 0 in out_shape)
