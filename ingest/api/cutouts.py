"""The cut-out methods of a RemoteCube (`world_box`, `cutout`, `cutouts`): sky and spectral
regions to boxes, read together by one plan, returned as ingest.api.sky.Cutouts.

A mixin rather than functions so `help(cube.cutout)` shows the options where a user looks; it
uses the cube's opening (`_connect`), tuning (`_settings`) and counting (`_count`), and keeps no
state of its own.
"""
from __future__ import annotations

import numpy as np

from ingest.api.read import apply_scaling, plan_with, read_selection, to_native
from ingest.core.cutplan import box_selection, gather_box, plan_spans, rank_share_box
from ingest.core.plan import storage_of
from ingest.core.selection import box_to_region
from ingest.engine.executor import run_requests


class CutoutMethods:
    """RemoteCube's cut-outs: a box from world coordinates, and the boxes' bytes read at once."""

    def world_box(self, pos=None, band=None, channels=None, **options):
        """The box (ingest.sky.pixels.WorldBox) a sky region, spectral range or channels select:
        see `cutout`. Nothing is read."""
        from ingest.api.sky import world_box_of

        return world_box_of(self._connect()[1], pos, band, channels, **options)

    def cutout(self, center=None, radius=None, spectral=None, *, pos=None, channels=None, convention="radio",
               rest=None, frame="icrs"):
        """Read every pixel whose centre lies within `radius` (an angular Quantity) of `center` (a
        SkyCoord of one position: ICRS, FK5 or Galactic) and, with `spectral=(lo, hi)` (Quantities
        of frequency, vacuum wavelength or velocity; velocities by `convention` about `rest`,
        default the header's RESTFRQ), in that range. `pos` takes any other sky region (SODA text,
        a SkyRange, a SkyPolygon) instead of center and radius. Returns an ingest.api.sky.Cutout:
        data, WCS shifted to the box (every axis, as cube.wcs), the box, what the cube's edges
        clipped, and the file the command line writes for that box (header, beams, writeto,
        to_hdulist, to_spectral_cube). Many positions (an array SkyCoord): `cutouts`."""
        from ingest.api.sky import one_position

        options = dict(frame=frame, convention=convention, rest=rest)
        return self._cutouts([one_position(center, radius, pos)], [spectral], channels, options)[0]

    def cutouts(self, center=None, radius=None, spectral=None, *, pos=None, channels=None, convention="radio",
                rest=None, frame="icrs") -> list:
        """`cutout` for many positions, read by one plan: a list of Cutouts, one per position of
        `center` (a SkyCoord of any shape, flattened in C order) within `radius` (one angle, or an
        array of one per position), or one per region of the list `pos`. `spectral` is one (lo, hi)
        for all or a list of one per position. Every box's bytes are asked for once, in one set
        of requests (neighbours' shared and nearby bytes merged, as the cutouts command reads a
        catalogue); each cut-out equals what `cutout` gives for its position alone."""
        from ingest.api.sky import many_positions, per_position

        regions = many_positions(center, radius, pos)
        options = dict(frame=frame, convention=convention, rest=rest)
        return self._cutouts(regions, per_position(spectral, len(regions), "spectral"), channels, options)

    def _cutouts(self, regions, bands, channels, options) -> list:
        """The Cutouts of (sky region, spectral range) pairs, their boxes read together."""
        from ingest.api.sky import Cutout, shifted_wcs

        found = []
        for index, (pos, band) in enumerate(zip(regions, bands)):
            try:
                found.append(self.world_box(pos, band, channels, **options))
            except Exception as exc:
                if len(regions) > 1:
                    exc.add_note(f"cutouts: position {index} of {len(regions)}")
                raise
        raws = self._read_boxes([box.box for box in found])
        wcs, layout = self.wcs, self._layout
        return [Cutout(self._as_read(raw), shifted_wcs(wcs, box.box), box.box, box.clipped, box.region_text,
                       layout=layout, raw=raw) for box, raw in zip(found, raws)]

    def _as_read(self, raw: np.ndarray) -> np.ndarray:
        """Stored values as `read` returns them (astropy's scaling, the byte order asked for);
        never `raw` changed in place (a cut-out writes it)."""
        data = apply_scaling(raw, self._layout)
        if self._spec.cfg.native_byteorder:
            data = to_native(data.copy() if data is raw else data)
        return data

    def _read_boxes(self, boxes) -> list:
        """The RAW stored values of each box (numpy-order half-open pairs). Contiguous data: ONE
        plan for them all, as the cutouts command reads a band (ingest.core.cutplan.plan_spans:
        every box's runs merged where the gap between them costs less than a request, cut into
        requests of the settings' chunk_bytes), each box gathered from the one buffer. Chunked
        HDF5: each box through its chunks. Settings are those of the boxes' bounding box."""
        transport, layout = self._connect()
        reader, spec = self._reader or transport, self._spec
        settings = self._settings(transport, layout, box_selection(rank_share_box(boxes, 1), layout.shape))
        if storage_of(layout) != "contiguous":
            raws = []
            for box in boxes:
                sel, plan = plan_with(layout, box_to_region(box), settings)
                raw, stats = read_selection(reader, layout, sel, plan, convert=False, threads=settings.threads,
                                            retry=spec.retry)
                self._count(stats, reader)
                raws.append(raw)
            return raws
        gap = settings.cost.gap_bytes if settings.max_gap_bytes is None else settings.max_gap_bytes
        plan = plan_spans(layout, boxes, max_gap_bytes=gap, chunk_bytes=settings.chunk_bytes)
        buffer = np.empty(plan.buffer_bytes, np.uint8)
        at = plan.request_buffer_offsets()

        def one(i, worker):
            start, n = int(plan.request_starts[i]), int(plan.request_stops[i] - plan.request_starts[i])
            yield memoryview(buffer)[int(at[i]): int(at[i]) + n], start
            return n

        stats = run_requests(plan.n_requests, one, reader, needed_bytes=plan.needed_bytes,
                             buffer_bytes=settings.chunk_bytes, wire_bytes=plan.wire_bytes, threads=settings.threads,
                             retry=spec.retry)
        self._count(stats, reader)
        raws = []
        for box in boxes:
            raw = gather_box(plan, buffer, layout, box)
            if len(boxes) > 1 and np.may_share_memory(raw, buffer):
                raw = raw.copy()  # else one kept cut-out keeps every box's bytes alive
            raws.append(raw)
        return raws
