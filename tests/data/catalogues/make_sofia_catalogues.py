"""Write the SoFiA-2 catalogue fixtures of this directory, in SoFiA-2 v2.5's exact layout.

Run `python -m tests.data.catalogues.make_sofia_catalogues` from the repository root; the output
is deterministic. The layout follows SoFiA-2's `Catalog_save` (src/Catalog.c: the header lines,
`CATALOG_COLUMN_WIDTH` = 14, `%14ld` integers, `%14.6f` or `%14.5e` floats in the text file,
`%.15e` in the VOTable, one PARAM per parameter setting in `Parameter_default` order), the
column order that `LinkerPar_make_catalog` and `DataCube_parameterise` build (world columns
named from the cube's CTYPEs: RA---SIN, DEC--SIN, FREQ give ra, dec, freq), the source names
of `DataCube_create_src_name`, and `Source_offset_xyz` (x, y, z and x_min..z_max shifted by the
region's start when `parameter.offset = true`; the *_peak columns are not).

The run: SoFiA-2 on the region `REGION` of a cube shaped like `ingest.testbed.synth`'s
(RA 150, Dec -30, 1 arcsec pixels, 18.5 kHz channels from 1.4 GHz), finding `SOURCES`.
`wallaby_region*` is the run with `parameter.offset = false` (pixels relative to the region),
`wallaby_offset*` the same run with `parameter.offset = true` (pixels in the full cube).
"""
from __future__ import annotations

import math
import os
from datetime import datetime

from astropy.wcs import WCS

from ingest.testbed.synth import build_header

HERE = os.path.dirname(os.path.abspath(__file__))
CUBE_SHAPE = (400, 512, 512)  # numpy order (z, y, x)
REGION = (128, 383, 64, 319, 100, 299)  # input.region: x_min, x_max, y_min, y_max, z_min, z_max
VERSION, VERSION_FULL, CREATION_DATE = "2.5.0", "SoFiA 2.5.0", "24-Jun-2022"
TIME = datetime(2026, 11, 27, 10, 15, 42).strftime("%a, %d %b %Y, %H:%M:%S")
WIDTH = 14  # CATALOG_COLUMN_WIDTH

# Per source, pixels relative to the region: centroid, bounding box, peak, and the measurements.
SOURCES = [
    dict(x=40.318221, y=60.702314, z=50.217718, bbox=(30, 51, 50, 71, 35, 66), peak=(40, 61, 50),
         n_pix=2315, f_min=-0.0021, f_max=0.0412, f_sum=12.875, rel=0.99912, flag=0, rms=0.00152,
         w20=18.27, w50=14.61, wm50=15.02, ell=(6.42, 4.81, 37.9, 9.73, 7.02, 38.4), kin_pa=215.3),
    dict(x=200.104733, y=30.512007, z=120.911512, bbox=(190, 211, 22, 40, 110, 131), peak=(200, 30, 121),
         n_pix=1186, f_min=-0.00185, f_max=0.0275, f_sum=6.4521, rel=0.97431, flag=0, rms=0.00148,
         w20=12.84, w50=10.02, wm50=10.33, ell=(5.11, 3.34, -52.6, 7.94, 5.28, -51.2), kin_pa=128.7),
    dict(x=120.644096, y=180.207831, z=10.398174, bbox=(112, 130, 170, 191, 0, 21), peak=(121, 180, 10),
         n_pix=987, f_min=-0.00201, f_max=0.0198, f_sum=4.1107, rel=0.95208, flag=2, rms=0.00155,
         w20=11.05, w50=8.77, wm50=9.01, ell=(4.88, 4.02, 12.5, 7.31, 6.07, 11.8), kin_pa=-1.0),
    dict(x=7.951376, y=244.033318, z=188.562409, bbox=(0, 16, 236, 252, 180, 197), peak=(8, 244, 189),
         n_pix=604, f_min=-0.00172, f_max=0.0169, f_sum=2.6693, rel=0.93067, flag=1, rms=0.00161,
         w20=9.12, w50=7.25, wm50=7.41, ell=(3.97, 3.12, 81.4, 6.55, 5.10, 80.9), kin_pa=301.6),
]

INT, FLT = 0, 1
# (name, type, unit, ucd) in the order SoFiA-2 builds them (parameter.physical = false)
COLUMNS = [
    ("id", INT, "", "meta.id"),
    ("x", FLT, "pix", "pos.cartesian.x"), ("y", FLT, "pix", "pos.cartesian.y"), ("z", FLT, "pix", "pos.cartesian.z"),
    ("x_min", INT, "pix", "pos.cartesian.x;stat.min"), ("x_max", INT, "pix", "pos.cartesian.x;stat.max"),
    ("y_min", INT, "pix", "pos.cartesian.y;stat.min"), ("y_max", INT, "pix", "pos.cartesian.y;stat.max"),
    ("z_min", INT, "pix", "pos.cartesian.z;stat.min"), ("z_max", INT, "pix", "pos.cartesian.z;stat.max"),
    ("n_pix", INT, "", "meta.number;instr.pixel"),
    ("f_min", FLT, "Jy/beam", "phot.flux.density;stat.min"),
    ("f_max", FLT, "Jy/beam", "phot.flux.density;stat.max"),
    ("f_sum", FLT, "Jy/beam", "phot.flux"), ("rel", FLT, "", "stat.probability"), ("flag", INT, "", "meta.code.qual"),
    ("rms", FLT, "Jy/beam", "instr.det.noise"),
    ("w20", FLT, "pix", "spect.line.width"), ("w50", FLT, "pix", "spect.line.width"),
    ("wm50", FLT, "pix", "spect.line.width"),
    ("ell_maj", FLT, "pix", "phys.angSize"), ("ell_min", FLT, "pix", "phys.angSize"),
    ("ell_pa", FLT, "deg", "pos.posAng"),
    ("ell3s_maj", FLT, "pix", "phys.angSize"), ("ell3s_min", FLT, "pix", "phys.angSize"),
    ("ell3s_pa", FLT, "deg", "pos.posAng"), ("kin_pa", FLT, "deg", "pos.posAng"),
    ("err_x", FLT, "pix", "stat.error;pos.cartesian.x"), ("err_y", FLT, "pix", "stat.error;pos.cartesian.y"),
    ("err_z", FLT, "pix", "stat.error;pos.cartesian.z"), ("err_f_sum", FLT, "Jy/beam", "stat.error;phot.flux"),
    ("ra", FLT, "deg", "pos.eq.ra"), ("dec", FLT, "deg", "pos.eq.dec"), ("freq", FLT, "Hz", "em.freq"),
    ("x_peak", INT, "pix", "pos.cartesian.x"), ("y_peak", INT, "pix", "pos.cartesian.y"),
    ("z_peak", INT, "pix", "pos.cartesian.z"),
    ("ra_peak", FLT, "deg", "pos.eq.ra"), ("dec_peak", FLT, "deg", "pos.eq.dec"), ("freq_peak", FLT, "Hz", "em.freq"),
]

# Parameter_default's settings, in its order (src/Parameter.c); the run's file updates them.
DEFAULTS = [
    ("pipeline.verbose", "false"), ("pipeline.pedantic", "true"), ("pipeline.threads", "0"),
    ("input.data", ""), ("input.region", ""), ("input.gain", ""), ("input.noise", ""), ("input.weights", ""),
    ("input.mask", ""), ("input.invert", "false"),
    ("flag.region", ""), ("flag.catalog", ""), ("flag.radius", "5"), ("flag.auto", "false"),
    ("flag.threshold", "5.0"), ("flag.log", "false"),
    ("contsub.enable", "false"), ("contsub.order", "0"), ("contsub.threshold", "2.0"), ("contsub.shift", "4"),
    ("contsub.padding", "3"),
    ("scaleNoise.enable", "false"), ("scaleNoise.mode", "spectral"), ("scaleNoise.statistic", "mad"),
    ("scaleNoise.fluxRange", "negative"), ("scaleNoise.windowXY", "25"), ("scaleNoise.windowZ", "15"),
    ("scaleNoise.gridXY", "0"), ("scaleNoise.gridZ", "0"), ("scaleNoise.interpolate", "false"),
    ("scaleNoise.scfind", "false"),
    ("rippleFilter.enable", "false"), ("rippleFilter.statistic", "median"), ("rippleFilter.windowXY", "31"),
    ("rippleFilter.windowZ", "15"), ("rippleFilter.gridXY", "0"), ("rippleFilter.gridZ", "0"),
    ("rippleFilter.interpolate", "false"),
    ("scfind.enable", "true"), ("scfind.kernelsXY", "0, 3, 6"), ("scfind.kernelsZ", "0, 3, 7, 15"),
    ("scfind.threshold", "5.0"), ("scfind.replacement", "2.0"), ("scfind.statistic", "mad"),
    ("scfind.fluxRange", "negative"),
    ("threshold.enable", "false"), ("threshold.threshold", "5.0"), ("threshold.mode", "relative"),
    ("threshold.statistic", "mad"), ("threshold.fluxRange", "negative"),
    ("linker.enable", "true"), ("linker.radiusXY", "1"), ("linker.radiusZ", "1"), ("linker.minSizeXY", "5"),
    ("linker.minSizeZ", "5"), ("linker.maxSizeXY", "0"), ("linker.maxSizeZ", "0"), ("linker.minPixels", "0"),
    ("linker.maxPixels", "0"), ("linker.minFill", "0.0"), ("linker.maxFill", "0.0"),
    ("linker.positivity", "false"), ("linker.keepNegative", "false"),
    ("reliability.enable", "false"), ("reliability.parameters", "peak, sum, mean"),
    ("reliability.threshold", "0.9"), ("reliability.scaleKernel", "0.4"), ("reliability.minSNR", "3.0"),
    ("reliability.minPixels", "0"), ("reliability.autoKernel", "false"), ("reliability.iterations", "30"),
    ("reliability.tolerance", "0.05"), ("reliability.catalog", ""), ("reliability.plot", "true"),
    ("reliability.debug", "false"),
    ("dilation.enable", "false"), ("dilation.iterationsXY", "10"), ("dilation.iterationsZ", "5"),
    ("dilation.threshold", "0.001"),
    ("parameter.enable", "true"), ("parameter.wcs", "true"), ("parameter.physical", "false"),
    ("parameter.prefix", "SoFiA"), ("parameter.offset", "false"),
    ("output.directory", ""), ("output.filename", ""), ("output.writeCatASCII", "true"),
    ("output.writeCatXML", "true"), ("output.writeCatSQL", "false"), ("output.writeNoise", "false"),
    ("output.writeFiltered", "false"), ("output.writeMask", "false"), ("output.writeMask2d", "false"),
    ("output.writeRawMask", "false"), ("output.writeMoments", "false"), ("output.writeCubelets", "false"),
    ("output.marginCubelets", "10"), ("output.thresholdMom12", "0.0"), ("output.overwrite", "true"),
]


def par_text(offset: bool, run: str) -> str:
    """The run's parameter file, as a user writes one (comments, aligned keys)."""
    settings = run_settings(offset, run)
    lines = ["# SoFiA 2 parameter file: one region of a WALLABY-like cube", ""]
    for key in ("input.data", "input.region", "reliability.enable", "reliability.threshold",
                "parameter.enable", "parameter.wcs", "parameter.offset", "output.directory",
                "output.filename", "output.writeCatASCII", "output.writeCatXML", "output.marginCubelets"):
        lines.append(f"{key:<27}=  {settings[key]}".rstrip())
    return "\n".join(lines) + "\n"


def run_settings(offset: bool, run: str) -> dict:
    settings = dict(DEFAULTS)
    settings.update({
        "input.data": "/scratch/wallaby/cube.fits", "input.region": ", ".join(map(str, REGION)),
        "reliability.enable": "true", "reliability.threshold": "0.9", "parameter.offset": str(offset).lower(),
        "output.directory": "/scratch/wallaby/outputs", "output.filename": run,
        "output.marginCubelets": "10"})
    return settings


def source_name(ra: float, dec: float, prefix: str = "SoFiA") -> str:
    """DataCube_create_src_name for equatorial coordinates and a prefix other than WALLABY."""
    hours = ra / 15.0
    rah = math.floor(hours)
    ram = math.floor(60.0 * (hours - rah))
    ras = 3600.0 * (hours - rah - ram / 60.0)
    de = abs(dec)
    ded = math.floor(de)
    dem = math.floor(60.0 * (de - ded))
    des = 3600.0 * (de - ded - dem / 60.0)
    sign = "-" if dec < 0.0 else "+"
    return f"{prefix} J{int(rah):02d}{int(ram):02d}{ras:05.2f}{sign}{int(ded):02d}{int(dem):02d}{des:04.1f}"


def rows(offset: bool) -> list[tuple[str, dict]]:
    """(name, column -> value) per source, pixels shifted as Source_offset_xyz shifts them."""
    wcs = WCS(build_header(CUBE_SHAPE))
    dx, dy, dz = REGION[0], REGION[2], REGION[4]
    out = []
    for number, s in enumerate(SOURCES, 1):
        ra, dec, freq = (float(v) for v in wcs.wcs_pix2world(s["x"] + dx, s["y"] + dy, s["z"] + dz, 0))
        px, py, pz = s["peak"]
        ra_p, dec_p, freq_p = (float(v) for v in wcs.wcs_pix2world(px + dx, py + dy, pz + dz, 0))
        shift = (dx, dy, dz) if offset else (0, 0, 0)
        bbox = [b + shift[i // 2] for i, b in enumerate(s["bbox"])]
        ell = s["ell"]
        values = dict(
            id=number, x=s["x"] + shift[0], y=s["y"] + shift[1], z=s["z"] + shift[2],
            x_min=bbox[0], x_max=bbox[1], y_min=bbox[2], y_max=bbox[3], z_min=bbox[4], z_max=bbox[5],
            n_pix=s["n_pix"], f_min=s["f_min"], f_max=s["f_max"], f_sum=s["f_sum"], rel=s["rel"], flag=s["flag"],
            rms=s["rms"], w20=s["w20"], w50=s["w50"], wm50=s["wm50"], ell_maj=ell[0], ell_min=ell[1],
            ell_pa=ell[2], ell3s_maj=ell[3], ell3s_min=ell[4], ell3s_pa=ell[5], kin_pa=s["kin_pa"],
            err_x=0.0213 * number, err_y=0.0198 * number, err_z=0.0311 * number, err_f_sum=0.0734 * number,
            ra=ra, dec=dec, freq=freq, x_peak=px, y_peak=py, z_peak=pz, ra_peak=ra_p, dec_peak=dec_p,
            freq_peak=freq_p)
        out.append((source_name(ra, dec), values))
    return out


def ascii_text(offset: bool) -> str:
    out = [f"# SoFiA source catalogue\n# Creator: {VERSION_FULL} ({CREATION_DATE})\n# Time:    {TIME}\n#\n",
           "# Note that the plain-text catalogue is solely intended for\n",
           "# visual inspection and should not be used for quantitative\n",
           "# analysis due to limited precision and the lack of Unified\n",
           "# Content Descriptors.  The XML catalogue should instead be\n",
           "# imported into Python or VO-compatible software to analyse\n",
           "# the source parameters measured by SoFiA, e.g. through the\n",
           "# astropy.io.votable module of Astropy.\n#\n",
           "# Header rows:\n#   1 = column number\n#   2 = parameter name\n#   3 = parameter unit\n#\n#"]
    out.append("%*d" % (2 * WIDTH, 1) + "".join("%*d" % (WIDTH, j + 2) for j in range(len(COLUMNS))) + "\n#")
    out.append("%*s" % (2 * WIDTH, "name") + "".join("%*s" % (WIDTH, c[0]) for c in COLUMNS) + "\n#")
    out.append("%*s" % (2 * WIDTH, "-") + "".join("%*s" % (WIDTH, c[2] or "-") for c in COLUMNS) + "\n\n")
    for name, values in rows(offset):
        line = " " + "%*s" % (2 * WIDTH, f'"{name}"')
        for column, kind, _, _ in COLUMNS:
            v = values[column]
            if kind == INT:
                line += "%*d" % (WIDTH, v)
            elif v != 0.0 and (abs(v) >= 1.0e4 or abs(v) < 1.0e-3):
                line += "%*.5e" % (WIDTH, v)
            else:
                line += "%*.6f" % (WIDTH, v)
        out.append(line + "\n")
    return "".join(out)


def xml_text(offset: bool, run: str) -> str:
    out = ['<?xml version="1.0" ?>\n',
           '<VOTABLE version="1.3" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
           'xmlns="http://www.ivoa.net/xml/VOTable/v1.3">\n',
           "\t<RESOURCE>\n",
           "\t\t<DESCRIPTION>Source catalogue created by the Source Finding Application "
           f"(SoFiA {VERSION})</DESCRIPTION>\n",
           f'\t\t<PARAM name="Time" datatype="char" arraysize="*" value="{TIME}" ucd="time.creation"/>\n',
           f'\t\t<PARAM name="Creator" datatype="char" arraysize="*" value="SoFiA {VERSION} ({CREATION_DATE})" '
           'ucd="meta.id;meta.software"/>\n']
    for key, value in run_settings(offset, run).items():
        out.append(f'\t\t<PARAM name="{key}" datatype="char" arraysize="*" value="{value}" ucd="meta.note"/>\n')
    out.append('\t\t<TABLE ID="SoFiA_source_catalogue" name="SoFiA source catalogue">\n')
    out.append('\t\t\t<FIELD arraysize="32" datatype="char" name="name" unit="" ucd="meta.id"/>\n')
    for column, kind, unit, ucd in COLUMNS:
        datatype = "long" if kind == INT else "double"
        out.append(f'\t\t\t<FIELD datatype="{datatype}" name="{column}" unit="{unit}" ucd="{ucd}"/>\n')
    out.append("\t\t\t<DATA>\n\t\t\t\t<TABLEDATA>\n")
    for name, values in rows(offset):
        out.append("\t\t\t\t\t<TR>\n")
        out.append(f"\t\t\t\t\t\t<TD>{name}</TD>\n")
        for column, kind, _, _ in COLUMNS:
            v = values[column]
            out.append(f"\t\t\t\t\t\t<TD>{v:d}</TD>\n" if kind == INT else "\t\t\t\t\t\t<TD>%.15e</TD>\n" % v)
        out.append("\t\t\t\t\t</TR>\n")
    out.append("\t\t\t\t</TABLEDATA>\n\t\t\t</DATA>\n\t\t</TABLE>\n\t</RESOURCE>\n</VOTABLE>\n")
    return "".join(out)


def main() -> None:
    for offset, run in ((False, "wallaby_region"), (True, "wallaby_offset")):
        files = {f"{run}.par": par_text(offset, run), f"{run}_cat.txt": ascii_text(offset),
                 f"{run}_cat.xml": xml_text(offset, run)}
        for name, text in files.items():
            with open(os.path.join(HERE, name), "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)


if __name__ == "__main__":
    main()
