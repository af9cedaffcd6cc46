#!/usr/bin/env bash
# Keep N cores busy (default 4) for at most DURATION_S seconds (default 2400, 40 minutes), so that
# the suite can be run on a loaded machine and its tests shown to hold there:
#   bash scripts/cpu_hogs.sh 4 & bash scripts/test.sh; kill %1
# Each hog is a shell loop under `timeout`, so it ends by itself even if this script is killed
# with SIGKILL; on SIGTERM, SIGINT or this script's own exit the hogs are stopped at once.
set -euo pipefail
n_hogs="${1:-4}"
duration_s="${2:-2400}"
if ! [[ "$n_hogs" =~ ^[0-9]+$ && "$duration_s" =~ ^[0-9]+$ && "$duration_s" -gt 0 ]]; then
    echo "usage: cpu_hogs.sh [N (default 4)] [DURATION_S (default 2400)]" >&2
    exit 2
fi
pids=()
stop() {
    trap - EXIT INT TERM
    [ "${#pids[@]}" -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap stop EXIT
trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT
for _ in $(seq "$n_hogs"); do
    timeout "$duration_s" bash -c 'while :; do :; done' &
    pids+=($!)
done
echo "cpu_hogs: $n_hogs busy loops for at most ${duration_s} s (pids ${pids[*]:-none})" >&2
wait || true
