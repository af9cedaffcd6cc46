#!/usr/bin/env bash
# Run a command beside N busy processes (default 10): a load of about N on this machine, to check
# that a test or benchmark which times something still holds on a shared, loaded machine.
#   bash scripts/under-load.sh 10 python tests/test_throttle_store.py 3
set -euo pipefail
busy="${1:?usage: under-load.sh N COMMAND...}"
shift
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for _ in $(seq "$busy"); do
    python3 -c "while True: pass" &
    pids+=($!)
done
"$@"
