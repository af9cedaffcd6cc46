#!/usr/bin/env bash
# The demo: a local S3 server, a synthetic cube, and a 4-rank ingest three ways (presigned URL,
# S3 API, and the staging baseline in the same job), each with its report. Safe to re-run.
#   bash scripts/demo.sh            (DEMO_SHAPE=512x512x256 DEMO_RANKS=4 to change the size)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
shape=${DEMO_SHAPE:-512x512x256}   # FITS order x,y,z: 256 MiB of float32
ranks=${DEMO_RANKS:-4}
out=${DEMO_OUT:-demo-out}
rm -rf "$out"; mkdir -p "$out"
work=$(mktemp -d)
trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

echo "== 1. start a local S3 server (Versity S3 Gateway on loopback)"
python -m ingest.testbed.localserver --root "$work/s3" --bucket survey > "$work/server.env" &
server_pid=$!
for _ in $(seq 100); do grep -q AWS_ENDPOINT_URL "$work/server.env" 2>/dev/null && break; sleep 0.1; done
# shellcheck disable=SC1091
source <(grep '^export' "$work/server.env")
echo "   endpoint $AWS_ENDPOINT_URL"

echo "== 2. make a synthetic $shape float32 cube and upload it"
python -m ingest synth "$work/cube.fits" --shape "$shape" --bitpix -32
python -m ingest upload "$work/cube.fits" s3://survey/cube.fits --no-progress
python -m ingest info s3://survey/cube.fits

echo "== 3. what the plan looks like for rank 0's box"
python -m ingest plan s3://survey/cube.fits --region "0:64,:,:" --requests 3

run() {  # run NAME ARGS...: a $ranks-rank job writing $out/NAME.json
  local name=$1; shift
  echo "== $name: mpiexec -n $ranks python -m ingest run $*"
  mpiexec -n "$ranks" --oversubscribe --bind-to none python -m ingest run \
    --source s3://survey/cube.fits --report "$out/$name.json" "$@"
}
run 4-presigned --method presigned --config configs/demo.toml
run 5-s3 --method s3 --config configs/demo.toml --output-dir "$out/subcubes"
run 6-compare-staging --method presigned --config configs/demo.toml --compare staging --stage-dir "$work/stage"

echo "== 7. tables and plots drawn from the report JSON"
python analysis/table.py "$out"/*.json
python analysis/plot_report.py "$out"/*.json --out "$out/plots" || true
echo "reports in $out/, per-rank FITS subcubes in $out/subcubes/, plots in $out/plots/"
