"""Where a cube is: its footprint on the sky, its spectral range and its beam, from its header.

Pure: a header, a shape (numpy order) and, when the cube has one, its BEAMS table in; a plain
JSON-able dict out (`cube_footprint`), with renderings for people (`footprint_text`, several
lines for `info`; `footprint_brief`, two lines for an error). Nothing here raises on a cube it
cannot describe: a part it cannot give is None, and its `*_problem` says why.

- Sky: the centre of the plane (0-based pixel ((nx-1)/2, (ny-1)/2)) and the centres of its four
  corner pixels (astropy's `calc_footprint` with center=True), the same pixel centres the region
  rule tests (ingest.sky.pixels); each in the cube's own frame (RADESYS/EQUINOX, or Galactic
  for GLON/GLAT) and in ICRS, in degrees and as text (sexagesimal for an equatorial frame,
  degrees to 1e-6 deg for Galactic). A corner where the WCS is undefined (SIN beyond its
  hemisphere) is None.
- Spectral: channels 0..n-1 in the axis's own kind and unit, in frequency where it converts,
  and, with a rest frequency (RESTFRQ/RESTFREQ, or RESTWAV), as radio and optical velocities;
  each as a range (low..high) and a channel width (the mean spacing over the axis). With
  `terms` (a SpectralRange: a request's or a catalogue's kind, unit and convention) the range
  is given in those terms too, so that an error speaks the request's language. Conversions are
  `SpectralAxis.in_band_terms`, the ones the band rule compares with.
- Beam: BMAJ/BMIN/BPA from the header (degrees there; arcsec and deg here), or the range of
  each over a BEAMS table's rows (its TUNITs, else CASA's arcsec and deg).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ingest.sky.bands import SpectralRange, readable

_EQUATORIAL = ("icrs", "fk5", "fk4")
_KM_S = {"radio": "velocity_radio", "optical": "velocity_optical"}
_BEAM_UNITS = {"BMAJ": "arcsec", "BMIN": "arcsec", "BPA": "deg"}  # CASA's, when a column names none


def cube_footprint(header, shape, beams=None, terms=None) -> dict:
    """The cube's sky footprint, spectral range and beam (see the module's docstring): a dict of
    `sky`, `spectral`, `beam` (each None where the cube has none) and `sky_problem`,
    `spectral_problem`, `beam_problem` (None, or why that part is missing)."""
    from ingest.errors import RegionError
    from ingest.sky.pixels import CubeAxes

    out = {"shape": [int(n) for n in shape], "sky": None, "sky_problem": None, "spectral": None,
           "spectral_problem": None}
    try:
        axes = CubeAxes(header, shape)
    except RegionError as exc:
        out["sky_problem"] = out["spectral_problem"] = str(exc)
    else:
        for key, part in (("sky", lambda: _sky(axes) if axes.plane is not None else None),
                          ("spectral", lambda: _spectral(axes.spectral, terms) if axes.spectral is not None else None)):
            try:
                out[key] = part()
            except Exception as exc:  # noqa: BLE001 - astropy's many reasons: this part is then not given
                out[f"{key}_problem"] = f"cannot be worked out from the header: {exc}"
        out["sky_problem"] = out["sky_problem"] or axes.sky_problem
        out["spectral_problem"] = out["spectral_problem"] or axes.spectral_problem
    try:
        out["beam"], out["beam_problem"] = _beam(header, beams)
    except Exception as exc:  # noqa: BLE001 - a BEAMS unit astropy does not know, say
        out["beam"], out["beam_problem"] = None, f"cannot be worked out: {exc}"
    return out


def _sky(axes) -> dict:
    from astropy.coordinates import ICRS, SkyCoord

    from ingest.sky.regions import frame_of

    plane = axes.plane
    nx, ny = plane.nx, plane.ny
    xs = np.array([(nx - 1) / 2, 0, nx - 1, nx - 1, 0], float)  # centre, then the corners anticlockwise in pixels
    ys = np.array([(ny - 1) / 2, 0, 0, ny - 1, ny - 1], float)
    lon, lat = plane.world(xs, ys)
    frame = plane.frame
    frame_name = frame_of(frame) or frame.name
    ok = np.isfinite(lon) & np.isfinite(lat)
    ra = np.full(len(xs), np.nan)
    dec = np.full(len(xs), np.nan)
    if ok.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ERFA's notes on dubious years
            icrs = SkyCoord(lon[ok], lat[ok], unit="deg", frame=frame).transform_to(ICRS())
        ra[ok], dec[ok] = icrs.ra.deg, icrs.dec.deg
    equatorial = frame.name in _EQUATORIAL
    points = []
    for k in range(len(xs)):
        if not ok[k]:
            points.append({"pixel": [float(xs[k]), float(ys[k])], "icrs_deg": None, "icrs_text": None,
                           "cube_deg": None, "cube_text": None})
            continue
        points.append({"pixel": [float(xs[k]), float(ys[k])],
                       "icrs_deg": [float(ra[k]), float(dec[k])], "icrs_text": _sexagesimal(ra[k], dec[k]),
                       "cube_deg": [float(lon[k]), float(lat[k])],
                       "cube_text": (_sexagesimal(lon[k], lat[k]) if equatorial
                                     else f"l={readable(lon[k], 'deg')} b={readable(lat[k], 'deg')}")})
    return {"frame": frame_name, "axes": [axes.ctypes[axes.lng], axes.ctypes[axes.lat]], "pixels": [nx, ny],
            "centre": points[0], "corners": points[1:]}


def _sexagesimal(ra_deg: float, dec_deg: float) -> str:
    """RA in hours to 1e-4 s (1.5 mas), Dec to 1 mas: finer than the 1e-6 deg (3.6 mas) of the degrees."""
    from astropy.coordinates import Angle

    ra = Angle(ra_deg, unit="deg").wrap_at("360d").to_string(unit="hourangle", sep="hms", precision=4, pad=True)
    dec = Angle(dec_deg, unit="deg").to_string(unit="deg", sep="dms", precision=3, alwayssign=True, pad=True)
    return f"{ra} {dec}"


def _spectral(axis, terms) -> dict:
    from ingest.sky.spectral import SpectralRefusal

    n = axis.n_channels
    out = {"ctype": axis.ctype, "n_channels": n, "unit": str(axis.unit),
           "axis": _range(axis.values, n), "rest_hz": axis.rest_hz, "frequency_hz": None,
           "velocity_radio_km_s": None, "velocity_optical_km_s": None, "terms": None, "problem": None}
    wanted = [("frequency_hz", SpectralRange(1.0, 2.0, "Hz", "frequency"))]
    if axis.rest_hz is not None or axis.code in ("VRAD", "VOPT", "VELO", "ZOPT", "BETA"):
        wanted += [(f"{_KM_S[c]}_km_s", SpectralRange(0.0, 1.0, "km/s", "velocity", c)) for c in _KM_S]
    if isinstance(terms, SpectralRange):
        wanted.append(("terms", terms))
    problems = []
    for key, band in wanted:
        try:
            values = axis.in_band_terms(band)
        except SpectralRefusal as exc:
            problems.append(str(exc))
            continue
        found = _range(values, n)
        if key == "terms":
            found.update(kind=band.kind, unit=band.unit, convention=band.convention,
                         rest_hz=band.rest_hz if band.rest_hz is not None else axis.rest_hz)
        out[key] = found
    out["problem"] = "; ".join(dict.fromkeys(problems)) or None
    return out


def _range(values, n: int) -> dict:
    """Channels 0..n-1 of `values` (centres of channels -1..n): low, high, first, last, and the mean
    spacing over the axis (channels -1..n, so one channel has a width too)."""
    values = np.asarray(values, float)
    inner = values[1:-1]
    return {"range": [float(np.nanmin(inner)), float(np.nanmax(inner))], "first": float(inner[0]),
            "last": float(inner[-1]), "channel_width": float(abs(values[-1] - values[0]) / (n + 1))}


def _beam(header, beams) -> tuple[dict | None, str | None]:
    import astropy.units as u

    if beams is not None and len(beams.rows):
        table = beams.header
        units = {}
        for i in range(1, int(table.get("TFIELDS", 0)) + 1):
            name = str(table.get(f"TTYPE{i}", "")).strip().upper()
            if name in _BEAM_UNITS:
                units[name] = str(table.get(f"TUNIT{i}", "") or _BEAM_UNITS[name]).strip()
        out = {"source": f"BEAMS table, {beams.nchan} channels x {beams.npol} polarisation(s)"}
        for name, (key, target) in {"BMAJ": ("bmaj_arcsec", "arcsec"), "BMIN": ("bmin_arcsec", "arcsec"),
                                    "BPA": ("bpa_deg", "deg")}.items():
            values = (np.asarray(beams.rows[name], float) * u.Unit(units.get(name, _BEAM_UNITS[name]))).to_value(target)
            out[key] = [float(values.min()), float(values.max())]
        return out, None
    cards = {k: header.get(k) for k in ("BMAJ", "BMIN", "BPA")}
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in cards.values()):
        return {"source": "header's BMAJ, BMIN, BPA", "bmaj_arcsec": float(cards["BMAJ"]) * 3600.0,
                "bmin_arcsec": float(cards["BMIN"]) * 3600.0, "bpa_deg": float(cards["BPA"])}, None
    return None, "no beam: the header has no BMAJ, BMIN and BPA and the cube no BEAMS table"


# ------------------------------------------------------------------------------------ text

_DECIMALS = {"km/s": 3, "arcsec": 3, "deg": 3}  # 1 m/s, 1 mas, 0.001 deg: below any cube's channel or beam


def _fixed(values, unit: str) -> str:
    """Velocities and beams for people: a fixed number of decimals (float32 tails go), '..' between
    a range's ends, one value when they are equal; anything else as `readable` writes it."""
    values = [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    if len(values) == 2 and values[0] == values[1]:
        values = values[:1]
    if unit not in _DECIMALS:
        return readable(values, unit)
    texts = [f"{v:.{_DECIMALS[unit]}f}".rstrip("0").rstrip(".") if math.isfinite(v) else str(v) for v in values]
    return "..".join("0" if t == "-0" else t for t in texts) + f" {unit}"


def _frame_text(name: str) -> str:
    """'fk5' means J2000 and 'fk4' B1950 (ingest.sky.regions): said for people."""
    return {"fk5": "fk5 J2000", "fk4": "fk4 B1950"}.get(name, name)


def _values(found: dict | None, unit: str) -> str:
    return _fixed(found["range"], unit) if found else "?"


def _width(found: dict, unit: str) -> str:
    return _fixed(found["channel_width"], unit)


def _beam_text(beam: dict) -> str:
    return (f"BMAJ {_fixed(beam['bmaj_arcsec'], 'arcsec')}, BMIN {_fixed(beam['bmin_arcsec'], 'arcsec')}, "
            f"BPA {_fixed(beam['bpa_deg'], 'deg')}, from the {beam['source']}")


def _terms_text(terms: dict) -> str:
    unit = terms["unit"].replace(" ", "")
    convention = f" ({terms['convention']})" if terms.get("convention") else ""
    return f"{_fixed(terms['range'], 'km/s' if unit == 'km/s' else unit)}{convention}"


def _spectral_lines(spectral: dict) -> list[str]:
    axis = spectral["axis"]
    unit = spectral["unit"].replace(" ", "")
    lines = [f"spectral: {spectral['n_channels']} channels of {spectral['ctype']}, "
             f"{_fixed(axis['range'], unit)} (channel {_fixed(axis['channel_width'], unit)})"]
    frequency = spectral["frequency_hz"]
    if frequency is not None and spectral["ctype"][:4].upper() != "FREQ":
        lines.append(f"  frequency {_values(frequency, 'Hz')} (channel {_width(frequency, 'Hz')})")
    if spectral["velocity_radio_km_s"] is not None:
        rest = (f"about rest frequency {readable(spectral['rest_hz'], 'Hz')}" if spectral["rest_hz"]
                else "as the axis gives them")
        lines.append(f"  velocity {rest}: radio {_values(spectral['velocity_radio_km_s'], 'km/s')} (channel "
                     f"{_width(spectral['velocity_radio_km_s'], 'km/s')}), optical "
                     f"{_values(spectral['velocity_optical_km_s'], 'km/s')} (channel "
                     f"{_width(spectral['velocity_optical_km_s'], 'km/s')})")
    elif spectral["rest_hz"] is None:
        lines.append("  no velocities: the header has no rest frequency (RESTFRQ/RESTFREQ)")
    if spectral["problem"]:
        lines.append(f"  ({spectral['problem']})")
    return lines


def footprint_text(fp: dict) -> str:
    """Several lines for people (`info`): the sky footprint, the spectral range, the beam."""
    lines = []
    sky = fp["sky"]
    if sky is None:
        lines.append(f"sky: none ({fp['sky_problem']})")
    else:
        own = sky["frame"] != "icrs"
        lines.append(f"sky: {sky['pixels'][0]} x {sky['pixels'][1]} px of {'/'.join(sky['axes'])} in "
                     f"{_frame_text(sky['frame'])}; corners are the corner pixels' centres")
        for label, point in [("centre", sky["centre"])] + [(f"corner {_pixel(p)}", p) for p in sky["corners"]]:
            if point["icrs_deg"] is None:
                lines.append(f"  {label:<16} undefined (the projection has no sky there)")
                continue
            text = f"  {label:<16} ICRS {point['icrs_text']} = {readable(point['icrs_deg'], 'deg', ' ')}"
            if own:
                text += f"; {_frame_text(sky['frame'])} {point['cube_text']} = {readable(point['cube_deg'], 'deg', ' ')}"
            lines.append(text)
    spectral = fp["spectral"]
    lines += _spectral_lines(spectral) if spectral is not None else [f"spectral: none ({fp['spectral_problem']})"]
    lines.append(f"beam: {_beam_text(fp['beam'])}" if fp["beam"] is not None else f"beam: none ({fp['beam_problem']})")
    return "\n".join(lines)


def _pixel(point: dict) -> str:
    return f"({point['pixel'][0]:g}, {point['pixel'][1]:g})"


def footprint_brief(fp: dict, whose: str = "the request's") -> str:
    """Two lines for an error: where the cube is on the sky (ICRS centre and corners) and its
    spectral range (in frequency, and in `whose` terms where the footprint has them)."""
    sky = fp["sky"]
    if sky is None:
        first = f"the cube has no sky footprint ({fp['sky_problem']})"
    else:
        corners = " ".join(f"({readable(p['icrs_deg'], 'deg', ' ')[:-len(' deg')]})" if p["icrs_deg"] else "(undefined)"
                           for p in sky["corners"])
        centre = sky["centre"]
        where = (f"centre {centre['icrs_text']} = {readable(centre['icrs_deg'], 'deg', ' ')}"
                 if centre["icrs_deg"] else "centre undefined")
        first = (f"the cube, {sky['pixels'][0]} x {sky['pixels'][1]} px, in ICRS: {where}; corner pixels' centres "
                 f"{corners} deg")
    spectral = fp["spectral"]
    if spectral is None:
        second = f"the cube has no spectral axis ({fp['spectral_problem']})"
    else:
        parts = [f"{spectral['n_channels']} channels of {spectral['ctype']}"]
        if spectral["frequency_hz"] is not None:
            parts.append(_values(spectral["frequency_hz"], "Hz"))
        else:
            parts.append(_fixed(spectral["axis"]["range"], spectral["unit"].replace(" ", "")))
        if spectral["terms"] is not None and spectral["terms"]["kind"] != "frequency":
            parts.append(f"in {whose} terms {_terms_text(spectral['terms'])}")
        elif spectral["velocity_radio_km_s"] is not None:
            parts.append(f"radio velocity {_values(spectral['velocity_radio_km_s'], 'km/s')}")
        second = f"its spectral range: {', '.join(parts)}"
    return f"{first}\n{second}"


def where_the_cube_is(header, shape, band=None) -> str:
    """For a refusal's message: a newline and footprint_brief, in `band`'s terms where it is a
    SpectralRange; empty if the footprint itself cannot be worked out (the refusal stands alone)."""
    try:
        if isinstance(band, str):
            from ingest.sky.regions import parse_band

            band = parse_band(band)
        footprint = cube_footprint(header, shape, terms=band)
        if footprint["sky"] is None and footprint["spectral"] is None:
            return ""  # nothing to add to the refusal: it says why already
        return "".join(f"\n  {line}" for line in footprint_brief(footprint).splitlines())
    except Exception:  # noqa: BLE001 - a message's extra must never replace the refusal it explains
        return ""


def requests_footprint(header, shape, beams, region_texts) -> dict:
    """cube_footprint in the terms of the first of `region_texts` (requests as describe() writes
    them, as a catalogue's manifest records them) that holds a BAND; describe() text parses back
    to the same band. Without one, in frequency and velocities."""
    from ingest.errors import ConfigError
    from ingest.sky.regions import parse_band

    terms = None
    for text in region_texts:
        _, found, band = (text or "").partition("BAND ")
        if found:
            try:
                terms = parse_band(band)
            except ConfigError:
                continue
            break
    return cube_footprint(header, shape, beams, terms=terms)
