#!/usr/bin/env bash
# Mutation testing of the modules where a wrong answer would come from (docs/testing.md).
#   bash scripts/mutation.sh                      every module in the table below, one at a time
#   bash scripts/mutation.sh core/ownership ...   just these
# Each module's mutants run only against its own fast unit/property test files (the table),
# never the MPI, S3 or server tests: the whole suite takes ~20 min, a module here takes minutes.
# Not part of CI (too slow); run it for a tag or a release.
# Environment: MUTATION_JOBS (parallel mutants, default 1: the machine is shared),
# MUTATION_DIR (run artifacts, default .mutation/, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# module (path under ingest/, no .py) -> the test files whose tests must kill its mutants
declare -A tests_of=(
  [core/byteruns]="tests/test_parts.py tests/test_mutants_core.py"
  [core/ownership]="tests/test_parts.py tests/test_sharing.py tests/test_mutants_core.py"
  [core/decompose]="tests/test_decompose.py tests/test_tiles.py tests/test_parts.py tests/test_mutants_core.py"
  [core/cutplan]="tests/test_cutplan.py tests/test_mutants_cutplan.py"
  [formats/fits]="tests/test_fits_geometry.py tests/test_planner_properties.py tests/test_cutplan.py tests/test_mutants_fits.py"
  [sky/bands]="tests/test_sky_units.py tests/test_sky_catalogue.py tests/test_sky_regions.py tests/test_sky_pixels.py tests/test_mutants_sky.py"
  [sky/pixels]="tests/test_sky_pixels.py tests/test_sky_frames.py tests/test_mutants_sky.py tests/test_mutants_sky_pixels.py"
  [sky/regions]="tests/test_sky_regions.py tests/test_sky_pixels.py tests/test_sky_frames.py tests/test_mutants_sky.py tests/test_mutants_sky_regions.py"
  [outputs/manifest]="tests/test_mutants_outputs.py"
  [outputs/cutouts]="tests/test_mutants_outputs.py"
)
# the order of a full run: smallest first, the sky modules still being edited last
all_modules="core/byteruns core/ownership core/decompose core/cutplan formats/fits sky/bands sky/pixels sky/regions outputs/manifest outputs/cutouts"

python -c "import mutmut" 2>/dev/null || python -m pip install -q --disable-pip-version-check -e ".[mutation]"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work_root=${MUTATION_DIR:-$root/.mutation}
jobs=${MUTATION_JOBS:-1}
modules=${*:-$all_modules}

# Equivalent mutants are listed in docs/testing.md, one table row each: | `mutant_name` | reason |
equivalent_names() { grep -oE '^\| `ingest\.[^`]+__mutmut_[0-9]+`' "$root/docs/testing.md" 2>/dev/null | tr -d '|` ' || true; }

for module in $modules; do
  files=${tests_of[$module]:-}
  if [[ -z $files ]]; then
    echo "mutation.sh: no test files for '$module'; known modules: ${!tests_of[*]}" >&2
    exit 2
  fi
  work=$work_root/${module//\//_}
  rm -rf "$work"
  mkdir -p "$work"
  # mutmut reads its config from the directory it runs in and copies the sources into mutants/
  # there, so each module gets a directory of its own and the checkout is never mutated.
  ln -s "$root/ingest" "$work/ingest"
  ln -s "$root/tests" "$work/tests"
  {
    echo "[mutmut]"
    echo "source_paths = ingest"
    echo "only_mutate = ingest/$module.py"
    echo "also_copy = tests"
    # a mutant whose tests use more than 2 x 3 x (their clean time + 2 s) of CPU is a timeout
    # (counted killed: an endless loop); CPU time, so a loaded machine does not time out a mutant
    echo "timeout_multiplier = 3.0"
    echo "timeout_constant = 2.0"
    # a fixed seed: a mutant's verdict must not depend on which examples hypothesis drew this time
    echo "pytest_add_cli_args = -p no:cacheprovider -q --hypothesis-seed=0"
    echo "pytest_add_cli_args_test_selection ="
    for f in $files; do [[ -f $root/$f ]] && echo "    $f"; done
  } > "$work/setup.cfg"
  echo "== $module against: $files"
  start_s=$(date +%s)
  (cd "$work" && mutmut run --max-children "$jobs" > run.log 2>&1) || { tail -30 "$work/run.log"; exit 1; }
  elapsed_s=$(( $(date +%s) - start_s ))
  (cd "$work" && mutmut results --all true > results.txt 2>&1) || true
  equivalent_names > "$work/equivalent.txt"
  python - "$work" "$module" "$elapsed_s" <<'EOF'
import json, sys
from pathlib import Path
work, module, elapsed_s = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
equivalent = set(Path(work, "equivalent.txt").read_text().split())
prefix = "ingest." + module.replace("/", ".") + "."
status_by_name = {}
for line in Path(work, "results.txt").read_text().splitlines():
    name, sep, status = line.strip().partition(": ")
    if sep and name.startswith(prefix):
        status_by_name[name] = status
# a test run that failed, ran out of time or crashed (a segfault: a mutant handing numpy garbage) caught it
caught = ("killed", "timeout", "segfault")
killed = sum(s in caught for s in status_by_name.values())
alive = sorted(n for n, s in status_by_name.items() if s not in caught)
listed = [n for n in alive if n in equivalent]
open_ = [n for n in alive if n not in equivalent]
non_equivalent = len(status_by_name) - len(listed)
score = 100.0 * killed / non_equivalent if non_equivalent else 100.0
print(f"{module}: {len(status_by_name)} mutants, killed {killed}, survived {len(open_)}, "
      f"equivalent {len(listed)}; score {killed}/{non_equivalent} = {score:.1f} %; {elapsed_s} s")
for n in open_:
    print(f"  {status_by_name[n]}: {n}")
if open_:
    print(f"  (each one's diff: cd {work} && mutmut show NAME)")
json.dump({"module": module, "mutants": len(status_by_name), "killed": killed, "survived": open_,
           "equivalent": listed, "score_percent": round(score, 1), "elapsed_s": elapsed_s},
          open(Path(work, "score.json"), "w"), indent=1)
EOF
done
