"""Start-up: what a rank imports and how long from launch to its first byte, for two trees side by side.

    python -m bench.engine.startup [--before DIR] [--ranks 16] [--methods presigned,s3] [--repeats 3]

For this checkout (and, with --before, another tree of ingest, e.g. `git worktree add DIR COMMIT` or
a copy of the package) it measures, in interleaved rounds (before, after, before, after, ...):
- `import ingest` in a fresh process: wall time, the sum of `python -X importtime`'s self times,
  module count and the packages that cost most;
- `mpiexec -n RANKS python -m ingest run` of a small cube per method (bench/engine/_rank_startup.py wraps
  every rank): per rank, launch -> process start -> ingest imported -> transport open -> first byte,
  and the heavy modules a rank other than 0 had loaded when it opened its transport;
- the import of exactly those modules of rank 1 (but mpi4py, whose import starts MPI) again in one
  fresh process alone: what a reading rank other than 0 pays to import, without 16 ranks fighting
  for the cores;
- baselines in fresh processes: `import numpy` (the floor of any rank), `import astropy, boto3`, and
  `import astropy.io.fits, astropy.wcs, boto3` (a rank that loads the header parser and the S3 client).
Every child finds its compiled bytecode in a cache of the run's own (PYTHONPYCACHEPREFIX, filled by
a warm-up round that is not recorded), as a site's pre-compiled install would: with
PYTHONDONTWRITEBYTECODE set and no cache, every process would compile ingest's sources again, and
that would be measured instead of the imports. CPU seconds are reported beside wall seconds: on a
shared, loaded machine a process waiting for a core is not charged CPU, so its CPU seconds stand
for the wall time of a quiet core.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a file (python bench/engine/startup.py): make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common, mpirun
from bench._rank_record import read_rank_records
from bench.engine._rank_startup import LAUNCH_ENV, STARTUP_DIR_ENV
from ingest.cli.main import BLAS_THREADS_DEFAULTS
from ingest.units import MiB

NAME = "startup"
WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank_startup.py")
HEAVY = ("astropy", "boto3", "botocore", "s3transfer", "h5py", "matplotlib", "tqdm", "urllib3", "pycurl",
         "numcodecs", "dask", "xarray")
BASELINES = {"numpy": "import numpy", "astropy+boto3": "import astropy, boto3",
             "astropy.io.fits+wcs+boto3": "import astropy.io.fits, astropy.wcs, boto3"}
GOAL_IMPORT_S = 0.25  # a non-zero reading rank's imports on a quiet core (issue 46)
# Wall and CPU seconds of the imports in a fresh process: on a shared, loaded machine the CPU
# seconds stand for a quiet core's wall time (a process waiting for a core is not charged).
_TIMED_IMPORT = ("import time; t, c = time.perf_counter(), time.process_time(); {stmt}; "
                 "print(time.perf_counter() - t, time.process_time() - c)")
_REPLAY = ("import importlib, json, sys, time; names = json.load(open(sys.argv[1]))\n"
           "t, c = time.perf_counter(), time.process_time()\n"
           "for n in names:\n"
           "    try: importlib.import_module(n)\n"
           "    except Exception: pass\n"
           "print(time.perf_counter() - t, time.process_time() - c)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.engine.startup", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, size_mib=16)
    parser.add_argument("--before", default=None,
                        help="a directory holding another tree's `ingest` package, measured beside this one")
    parser.add_argument("--ranks", type=int, default=16, help="ranks of the mpiexec runs (default 16)")
    parser.add_argument("--methods", default="presigned,s3", help="comma-separated run methods (default presigned,s3)")
    return parser


def _env(base: dict, root: str, pyc_dir: str) -> dict:
    env = {k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=root, PYTHONPYCACHEPREFIX=pyc_dir, **mpirun.MPI_ENV)
    return env


def _python(code: str, env: dict, *argv: str, importtime: bool = False) -> subprocess.CompletedProcess:
    """`python -c code argv` in a fresh process (with `-X importtime`: its tree on stderr)."""
    flags = ["-X", "importtime"] if importtime else []
    done = subprocess.run([sys.executable, *flags, "-c", code, *argv], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"python -c {code!r} failed: {done.stderr.strip()[-800:]}")
    return done


def _profile(done: subprocess.CompletedProcess) -> dict:
    """A timed child's wall and CPU seconds, and what `-X importtime` said: self-time sum,
    modules imported, the packages that cost most, the heavy ones among them."""
    wall_s, cpu_s = (float(x) for x in done.stdout.split()[-2:])
    rows = [(m.group(2), int(m.group(1))) for m in
            re.finditer(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", done.stderr)]
    by_package: dict[str, int] = {}
    for name, self_us in rows:
        by_package[name.split(".")[0]] = by_package.get(name.split(".")[0], 0) + self_us
    top = sorted(by_package.items(), key=lambda kv: -kv[1])[:8]
    return {"wall_s": wall_s, "cpu_s": cpu_s, "importtime_sum_s": sum(us for _, us in rows) / 1e6,
            "modules": len(rows), "top_packages_s": {name: us / 1e6 for name, us in top},
            "heavy": [h for h in HEAVY if h in by_package]}


def import_profile(env: dict) -> dict:
    """`import ingest` in a fresh process (_profile)."""
    return _profile(_python(_TIMED_IMPORT.format(stmt="import ingest"), env, importtime=True))


def timed_import(stmt: str, env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds a fresh process takes to run `stmt` (interpreter start-up excluded)."""
    wall_s, cpu_s = _python(_TIMED_IMPORT.format(stmt=stmt), env).stdout.split()[-2:]
    return float(wall_s), float(cpu_s)


def replay_import(modules: list[str], env: dict, workdir: str) -> dict:
    """A fresh process alone imports `modules` (a rank's sys.modules, in order) but mpi4py, whose
    import starts MPI, a cost of the launcher's rather than of the imports (_profile)."""
    path = os.path.join(workdir, "modules.json")
    with open(path, "w") as f:
        json.dump([m for m in modules if m != "__main__" and m.split(".")[0] != "mpi4py"], f)
    # as the rank's own process had it: `python -m ingest` sets numpy's BLAS threads before importing it
    return _profile(_python(_REPLAY, {**BLAS_THREADS_DEFAULTS, **env}, path, importtime=True))


def launch(n_ranks: int, run_args: list[str], env: dict, workdir: str) -> list[dict]:
    """mpiexec -n N of `ingest run` under the timing wrapper; every rank's marks, in rank order."""
    for name in os.listdir(workdir):
        if name.startswith("rank"):
            os.remove(os.path.join(workdir, name))
    cmd = mpirun.python_command(n_ranks, [WRAPPER, "run", *run_args, "--no-progress",
                                          "--report", os.path.join(workdir, "report.json")])
    child_env = {**env, STARTUP_DIR_ENV: workdir, LAUNCH_ENV: repr(time.time())}
    done = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"mpiexec -n {n_ranks} ingest run failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-1500:]}")
    return read_rank_records(workdir, n_ranks)


def rank_figures(mark: dict) -> dict:
    """One rank's marks as seconds from its launch (and its imports' own span)."""
    launch_s = mark["launch_unix_s"]
    keys = ("process_start", "ingest_imported", "parser_ready", "transport_open", "first_byte")
    since = {key: mark[key + "_unix_s"] - launch_s for key in keys if mark.get(key + "_unix_s")}
    since["imports_s"] = mark["parser_ready_unix_s"] - mark["main_unix_s"]
    return since


def summarize_launch(marks: list[dict]) -> dict:
    """Rank 0's figures, the others' median and max, and what rank 1 had loaded at its transport's open."""
    figures = [rank_figures(m) for m in marks]
    others = figures[1:] or figures
    keys = figures[0].keys()
    modules = marks[min(1, len(marks) - 1)]["modules_at_open"]
    return {"rank0": figures[0],
            "others_median": {k: statistics.median(f[k] for f in others) for k in keys},
            "others_max": {k: max(f[k] for f in others) for k in keys},
            "rank1_modules": len(modules), "rank1_heavy": sorted({m.split(".")[0] for m in modules} & set(HEAVY)),
            "rank0_heavy": sorted({m.split(".")[0] for m in marks[0]["modules_at_open"]} & set(HEAVY)),
            "_rank1_module_names": modules}


def run(env: common.BenchEnv, args) -> dict:
    workdir = tempfile.mkdtemp(prefix="ingest-bench-startup-")
    try:
        return _run(env, args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(env: common.BenchEnv, args, workdir: str) -> dict:
    log = common.logger(args)
    trees = ([("before", os.path.abspath(args.before))] if args.before else []) + [("after", str(common.REPO_ROOT))]
    methods = [m for m in args.methods.split(",") if m]
    if not methods or any(m not in ("presigned", "s3") for m in methods):
        raise SystemExit(f"--methods: {args.methods!r}: expected presigned and/or s3, comma-separated")
    cube = env.cube(args.size_mib * MiB)
    envs = {label: _env(env.env(), root, os.path.join(workdir, "pyc")) for label, root in trees}
    samples: dict = {label: [] for label, _ in trees}
    baselines: dict = {name: [] for name in BASELINES}
    # At least one warm-up round: it compiles every module into the fresh bytecode cache.
    for round_i in range(-max(1, args.warmup), args.repeats):
        for label, _root in trees:
            e = envs[label]
            sample = {"import_ingest": import_profile(e), "runs": {}}
            for method in methods:
                marks = launch(args.ranks, ["--source", cube.s3_uri, "--method", method], e, workdir)
                summary = summarize_launch(marks)
                summary["rank1_alone"] = replay_import(summary.pop("_rank1_module_names"), e, workdir)
                sample["runs"][method] = summary
            if round_i >= 0:
                samples[label].append(sample)
            if log:
                log(f"round {round_i + 1}/{args.repeats} {label}: import ingest "
                    f"{sample['import_ingest']['wall_s']:.3f} s; " + "; ".join(
                        f"{m}: rank1 imports alone {r['rank1_alone']['cpu_s']:.3f} s CPU, first byte "
                        f"{r['others_median']['first_byte']:.2f} s (max {r['others_max']['first_byte']:.2f})"
                        for m, r in sample["runs"].items()))
        for name, stmt in BASELINES.items():
            wall_s, cpu_s = timed_import(stmt, envs[trees[-1][0]])
            if round_i >= 0:
                baselines[name].append({"wall_s": wall_s, "cpu_s": cpu_s})
    return {"ranks": args.ranks, "size_mib": args.size_mib, "methods": methods, "trees": dict(trees),
            "samples": samples,
            "baselines": {k: {unit: common.stats([x[unit] for x in v]) for unit in ("wall_s", "cpu_s")}
                          for k, v in baselines.items()},
            "summary": {label: summarize(samples[label], methods) for label, _ in trees},
            "goal_import_s": GOAL_IMPORT_S}


def summarize(samples: list[dict], methods: list[str]) -> dict:
    """Per tree: medians over rounds of the figures the table shows."""
    out = {"import_ingest_wall_s": common.stats([s["import_ingest"]["wall_s"] for s in samples]),
           "import_ingest_cpu_s": common.stats([s["import_ingest"]["cpu_s"] for s in samples]),
           "import_ingest_importtime_s": common.stats([s["import_ingest"]["importtime_sum_s"] for s in samples]),
           "import_ingest_modules": samples[-1]["import_ingest"]["modules"],
           "import_ingest_top_s": samples[-1]["import_ingest"]["top_packages_s"],
           "import_ingest_heavy": samples[-1]["import_ingest"]["heavy"]}
    for method in methods:
        runs = [s["runs"][method] for s in samples]
        out[method] = {
            "rank1_import_alone_cpu_s": common.stats([r["rank1_alone"]["cpu_s"] for r in runs]),
            "rank1_import_alone_wall_s": common.stats([r["rank1_alone"]["wall_s"] for r in runs]),
            "rank1_import_top_s": runs[-1]["rank1_alone"]["top_packages_s"],
            "rank1_modules": runs[-1]["rank1_modules"], "rank1_heavy": runs[-1]["rank1_heavy"],
            "rank0_heavy": runs[-1]["rank0_heavy"],
            "others_imports_s": common.stats([r["others_median"]["imports_s"] for r in runs]),
            "others_first_byte_s": common.stats([r["others_median"]["first_byte"] for r in runs]),
            "last_first_byte_s": common.stats([r["others_max"]["first_byte"] for r in runs]),
            "rank0_first_byte_s": common.stats([r["rank0"]["first_byte"] for r in runs]),
        }
    return out


def _top(packages: dict) -> str:
    return ", ".join(f"{name} {seconds:.3f}" for name, seconds in list(packages.items())[:4])


def to_markdown(results: dict) -> str:
    trees = list(results["summary"])
    s = results["summary"]

    def row(label, get, fmt="{:.3f}"):
        return [label, *(common.spread(get(s[t]), fmt) if isinstance(get(s[t]), dict) else str(get(s[t]))
                         for t in trees)]

    rows = [row("`import ingest`: CPU s", lambda x: x["import_ingest_cpu_s"]),
            row("`import ingest`: wall s", lambda x: x["import_ingest_wall_s"]),
            row("`import ingest`: `-X importtime` sum, s", lambda x: x["import_ingest_importtime_s"]),
            row("`import ingest`: modules", lambda x: x["import_ingest_modules"]),
            row("`import ingest`: heavy packages", lambda x: ", ".join(x["import_ingest_heavy"]) or "none"),
            row("`import ingest`: costliest packages, s", lambda x: _top(x["import_ingest_top_s"]))]
    for method in results["methods"]:
        rows += [row(f"{method}: rank 1's imports alone, CPU s", lambda x: x[method]["rank1_import_alone_cpu_s"]),
                 row(f"{method}: rank 1's imports alone, wall s", lambda x: x[method]["rank1_import_alone_wall_s"]),
                 row(f"{method}: rank 1's costliest packages, s", lambda x: _top(x[method]["rank1_import_top_s"])),
                 row(f"{method}: rank 1's modules at its transport's open", lambda x: x[method]["rank1_modules"]),
                 row(f"{method}: rank 1's heavy packages", lambda x: ", ".join(x[method]["rank1_heavy"]) or "none"),
                 row(f"{method}: rank 0's heavy packages", lambda x: ", ".join(x[method]["rank0_heavy"]) or "none"),
                 row(f"{method}: ranks 1+ under mpiexec, start to imports done, median s",
                     lambda x: x[method]["others_imports_s"], "{:.2f}"),
                 row(f"{method}: launch to first byte, ranks 1+ median s",
                     lambda x: x[method]["others_first_byte_s"], "{:.2f}"),
                 row(f"{method}: launch to first byte, last rank s",
                     lambda x: x[method]["last_first_byte_s"], "{:.2f}"),
                 row(f"{method}: launch to first byte, rank 0 s", lambda x: x[method]["rank0_first_byte_s"], "{:.2f}")]
    base = [[f"`{BASELINES[name]}`", common.spread(st["cpu_s"], "{:.3f}"), common.spread(st["wall_s"], "{:.3f}")]
            for name, st in results["baselines"].items()]
    return (f"### Start-up: {results['ranks']} ranks, a {results['size_mib']} MiB cube, median (min-max)\n\n"
            + common.markdown_table(["figure", *trees], rows)
            + f"\n\nGoal: a rank other than 0 imports in at most {results['goal_import_s']} s of a quiet core "
              "(its CPU seconds stand for that on a loaded machine).\n\n"
            + common.markdown_table(["baseline, a fresh process", "CPU s", "wall s"], base) + "\n")


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, size_mib=(16, 16), repeats=(3, 1), warmup=(1, 0))


if __name__ == "__main__":
    sys.exit(main())
