"""The driver's `cutouts` room: every source of a catalogue cut out of one cube or a collection of
tiles, one file each (`python -m ingest cutouts`, `ingest.cutouts(...)`).

- `command`: the job on every rank: rank 0's prepare (header, catalogue, what an earlier run left,
  the split over ranks) as a root step, each rank's cut, the manifest and the report.
- `sources`: a catalogue's sources, their boxes in the cube and the request each file records.
- `job`: what every rank is handed (`CutoutJob`, `Catalogue`) and the gap one request reads over.
- `rank`: one rank's stripe read band by band, its cut-outs written and published in durable groups.
- `sinks`: where files go (a directory or a store), their journal and the manifest.
- `progress`: rank 0's bar, and a signal that stops the job with what it cut kept.
- `tiles`: a collection's sources placed on their tiles and split over the ranks by bytes.
- `plan`: `plan --catalogue`'s pricing of the same decisions, before any data moves.

What it may import (.importlinter, contract `driver-rooms`): the driver's shared modules (`mpi`,
`quiet`, `rootwork`, `source`, `tune`, ...) and the layers below the driver; no other driver module
imports it, and it imports no other room. This package imports nothing itself, so that a caller
can take `progress`'s signal handling before `command` brings in MPI.
"""
