"""The sky: regions in world coordinates and source catalogues, turned into pixel boxes.

Astronomers ask by where things are on the sky (a centre and radius, an RA/Dec range, a
polygon, a frequency or velocity range) and by catalogue (SoFiA-2's, or any table astropy
reads). This package turns both into the numpy-order pixel boxes the pure core plans with,
using the cube's FITS WCS. astropy lives here, above the core: `ingest.core` never sees a
world coordinate.

Regions to boxes: `regions` holds the region types (SkyCircle, SkyRange, SkyPolygon, and
SpectralRange, ChannelRange from `bands`) and their parsers (SODA's syntax and a readable one
with units); `pixels` states the rule from region to pixel box and answers one request
(`world_box`) or many (`world_boxes`), with `sphere` (membership on the sphere, frame links),
`skyplane` (sky regions to boxes without testing every pixel of the plane) and `spectral`
(bands to channels) beneath it.
"""
