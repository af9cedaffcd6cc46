"""`python -m ingest cutouts`: every source of a catalogue cut out of one cube (ingest.driver.cutouts.command)."""
from __future__ import annotations

from ingest.config import add_run_arguments, config_from_args


def _cli(args) -> int:
    # SIGINT and SIGTERM stop the job with what it cut kept (driver.cutouts.progress): taken before
    # MPI starts, so that no signal meets Python's default traceback.
    from ingest.driver.cutouts.progress import STOP, Interrupted, end_interrupted

    STOP.install()
    comm = None
    try:
        # MPI starts when the job runs, not when `--help` lists the commands; and before the driver's
        # modules import it, so that it starts as world() starts it.
        from ingest.driver.mpi import root_step, run_or_abort, world

        comm = world()
        from ingest.driver.cutouts.command import cutouts

        def command(comm, parsed):
            try:
                report = cutouts(comm, root_step(comm, config_from_args, parsed))
            except Interrupted as stop:
                return end_interrupted(comm, stop)
            return nothing_cut(report)

        return run_or_abort(comm, command, args)
    except Interrupted as stop:  # while MPI started, or on the way out of run_or_abort
        return end_interrupted(comm, stop)
    finally:
        STOP.release()


# A job that skipped every source made nothing a later step can use: it exits as a bad input does
# (1, as main and run_or_abort end on an IngestError), its manifest and report written all the same.
NOTHING_CUT_EXIT = 1


def nothing_cut(report: dict | None) -> int:
    """0, or, on rank 0 when every source of the catalogue was skipped, NOTHING_CUT_EXIT after
    saying where the cube is (report["footprint"], in the catalogue's spectral terms) and why the
    first skipped source was skipped."""
    if report is None or not report["totals"]["sources"] or report["totals"]["skipped"] < report["totals"]["sources"]:
        return 0
    import sys

    from ingest.sky.footprint import footprint_brief

    first = min(report["skipped"], key=lambda e: e["row"])
    lines = [f"every one of the catalogue's {report['totals']['sources']} sources was skipped: nothing was cut "
             f"(manifest.json lists each with its reason)"]
    if report.get("footprint") is not None:
        lines += footprint_brief(report["footprint"], "the catalogue's").splitlines()
    lines.append(f"e.g. row {first['row']} {first['name']!r}: {first['reason']}")
    print("ingest: error: " + "\n  ".join(lines), file=sys.stderr, flush=True)
    return NOTHING_CUT_EXIT


def add_parser(sub) -> None:
    p = sub.add_parser(
        "cutouts", help="cut every source of a catalogue out of the cube (SoFiA-2's cubelets, sky cut-outs)",
        description="Cut one FITS file per catalogue source out of --source, under mpiexec, srun or alone. "
                    "Sources come from --catalogue (SoFiA-2's ASCII or VOTable catalogue, or any table astropy "
                    "reads); each is boxed by --size (a sky radius and spectral half width, or SoFiA-2's bounding "
                    "box plus a margin). Ranks split the sources by where they lie in the object, read each batch's "
                    "bytes once, and write each cut-out whole or not at all; manifest.json records every source "
                    "(file, box, bytes, CRC-32, or why it was skipped) and a re-run keeps the files whose CRC "
                    "still checks.")
    add_run_arguments(p, "cutouts")
    p.set_defaults(func=_cli)
