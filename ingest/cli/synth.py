"""`python -m ingest synth OUT --shape NAXIS1xNAXIS2x...`: write a synthetic FITS or HDF5 cube
whose every voxel is known (ingest.testbed.synth's oracle)."""
from __future__ import annotations

from ingest.errors import ConfigError
from ingest.testbed.synth import BITPIX_DTYPES, check_shape, parse_fits_shape, write_cube
from ingest.testbed.synth_hdf5 import parse_chunks, write_hdf5_cube


def _run(args) -> int:
    shape = check_shape(parse_fits_shape(args.shape))
    if args.format == "hdf5":
        for option, value in (("--beams", args.beams), ("--restfrq", args.restfrq is not None)):
            if value:
                raise ConfigError(f"{option}: FITS cubes only (CARTA's HDF5 schema keeps no beam table, and the "
                                  f"HDF5 cube's header attributes are fixed)")
        return _run_hdf5(args, shape)
    info = write_cube(args.out, shape, args.bitpix, bscale=args.bscale, bzero=args.bzero,
                      blank=args.blank, extension=args.extension,
                      header_blocks=args.header_blocks, stokes=args.stokes, restfrq_hz=args.restfrq,
                      beams=args.beams)
    fits_shape = "x".join(str(n) for n in reversed(info["shape"]))
    hdu = "IMAGE extension 1" if args.extension else "primary HDU"
    print(f"wrote {info['path']}: {fits_shape} (NAXIS1xNAXIS2...) BITPIX={info['bitpix']} in the {hdu}, "
          f"data at byte {info['data_offset']}, {info['data_bytes']} data bytes, "
          f"{info['file_bytes']} bytes in all" + (f", BEAMS table {info['beams_bytes']} bytes after the data"
                                                  if info.get("beams_bytes") else ""))
    return 0


def _run_hdf5(args, shape) -> int:
    info = write_hdf5_cube(args.out, shape, args.bitpix, chunks=parse_chunks(args.chunks) if args.chunks else None,
                           compression=args.compression, shuffle=args.shuffle, byteorder=args.byteorder,
                           idia=args.idia)
    layout = f"chunks {'x'.join(map(str, info['chunks']))}" if info["chunks"] else "contiguous"
    print(f"wrote {info['path']}: dataset {info['dataset']} shape {info['shape']} (numpy order) {info['dtype']}, "
          f"{layout}, compression {args.compression}{' + shuffle' if args.shuffle else ''}")
    return 0


def add_parser(subparsers) -> None:
    """Register `synth OUT.fits --shape NAXIS1xNAXIS2x... [--bitpix N] ...`."""
    p = subparsers.add_parser("synth", help="write a synthetic FITS cube with known voxel values",
                              description="write a synthetic FITS or HDF5 cube with known voxel values")
    p.add_argument("out", help="output FITS path (written atomically)")
    p.add_argument("--shape", required=True,
                   help="axis lengths in FITS order, fastest first: NAXIS1xNAXIS2xNAXIS3, e.g. 256x256x64")
    p.add_argument("--bitpix", type=int, default=-32, choices=sorted(BITPIX_DTYPES),
                   help="FITS BITPIX (default -32)")
    p.add_argument("--extension", action="store_true",
                   help="put the cube in an IMAGE extension after an empty primary HDU")
    p.add_argument("--bscale", type=float, default=None, help="BSCALE card (default: none)")
    p.add_argument("--bzero", type=float, default=None, help="BZERO card (default: none)")
    p.add_argument("--blank", type=int, default=None, help="BLANK card, integer BITPIX only (default: none)")
    p.add_argument("--header-blocks", type=int, default=1,
                   help="pad the cube's header to at least N 2880-byte blocks (default 1)")
    p.add_argument("--stokes", action="store_true",
                   help="4 axes only: STOKES on FITS axis 3 and FREQ on axis 4 (default FREQ then STOKES)")
    p.add_argument("--beams", action="store_true",
                   help="a beam per channel as CASA and ASKAP write it: CASAMBM = T and a BEAMS table after the data")
    p.add_argument("--restfrq", type=float, default=None, metavar="HZ",
                   help="RESTFRQ card: the line's rest frequency in Hz, e.g. 1.420405752e9 (default: none)")
    p.add_argument("--format", choices=("fits", "hdf5"), default="fits", help="file format (default fits)")
    p.add_argument("--chunks", default=None, help="hdf5: chunk shape in numpy order ZxYxX, e.g. 16x64x64 "
                                                  "(default: contiguous)")
    p.add_argument("--compression", choices=("none", "gzip", "zstd"), default="none", help="hdf5: filter")
    p.add_argument("--shuffle", action="store_true", help="hdf5: byte shuffle before compression")
    p.add_argument("--byteorder", choices=(">", "<"), default=">", help="hdf5: stored byte order (default >)")
    p.add_argument("--idia", action="store_true", help="hdf5: CARTA/IDIA layout, /0/DATA, Stokes first")
    p.set_defaults(func=_run)
