#!/usr/bin/env bash
# Install everything (idempotent) and run the whole test suite. The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Open MPI refuses to run as root without these; tests launch mpiexec themselves.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# --durations: the slowest tests in every CI log, so the suite's time can be kept in hand.
exec python -m pytest -q -p no:cacheprovider --durations=40 "$@" tests
