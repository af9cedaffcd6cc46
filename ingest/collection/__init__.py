"""A survey as a source: a collection of tile cubes, its index, and the rule that picks a tile.

A collection is named where a source is taken, in one of three forms (`spec`): a glob over S3
keys or local paths (`s3://bucket/field/*.fits`, `/scratch/tiles/*.fits`), a prefix ending in
`/` (every object under it), or `@FILE` (one object per line). `listing` lists it (the S3 list
API, a local glob, the file's lines), `tiles` reads every tile's header concurrently into a
`Tile` (identity, shape, WCS header, footprint), `index` keeps those records in a JSON file and
reuses each one while its object's size and ETag (or mtime) are unchanged. `rule` states, as a
pure function, which tile a source's cut-out comes from; `place` answers it for many requests
through each tile's WCS (ingest.sky.pixels). Each tile keeps its own geometry: nothing here
reprojects or stitches tiles.

`ingest.collection.open.open_collection` is the entry point: spec in, a `Collection` (its
tiles in key order, the objects it could not read with their reasons, and what the index saved)
out. This module imports nothing, so that a caller asking only `spec.is_collection` loads no
astropy.
"""
