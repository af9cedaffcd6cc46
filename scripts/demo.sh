#!/usr/bin/env bash
# The demo: a local S3 server, a synthetic cube, and ingest at 1, 2 and 4 ranks three ways
# (presigned URL, S3 API, and the staging baseline: copy + read), 3 repeats each, every run with
# its report; then the ranks write their boxes back as one object (publish), checked byte for byte
# against the source; then the makespan-vs-ranks figure drawn from the reports; then sky cut-outs of a
# small catalogue (python -m ingest cutouts). Safe to re-run.
#   bash scripts/demo.sh   (DEMO_SHAPE=512x512x256 DEMO_RANKS=1,2,4 DEMO_REPEATS=3 to change it)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml='^cm'   # skip Open MPI's PSM/OFI probe at every launch: ingest/testbed/mpilaunch.py
shape=${DEMO_SHAPE:-512x512x256}   # FITS order x,y,z: 256 MiB of float32
ranks=${DEMO_RANKS:-1,2,4}
repeats=${DEMO_REPEATS:-3}
max_ranks=$(tr , '\n' <<< "$ranks" | sort -n | tail -1)
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

echo "== 4. the sweep: $ranks ranks, direct (presigned, s3) and staging (copy + read), $repeats repeats;"
echo "   then the $max_ranks ranks publish their boxes back as one object (python -m ingest publish's API)"
echo "   (one mpiexec -n $max_ranks launch; each line is a real ingest.driver.run job and its report;"
echo "    the same job from the shell: mpiexec -n 4 python -m ingest run --source s3://survey/cube.fits"
echo "    --method presigned --config configs/demo.toml --compare staging --stage-dir DIR --report r.json)"
mpiexec -n "$max_ranks" --oversubscribe --bind-to none python scripts/demo_sweep.py \
  --source s3://survey/cube.fits --config configs/demo.toml --ranks "$ranks" --repeats "$repeats" \
  --out "$out" --stage-dir "$work/stage" --publish s3://survey/copy.fits

echo "== 5. tables and the figure, drawn from the report JSON alone"
python -m ingest report "$out/presigned-n$max_ranks-r1.json"
python analysis/table.py "$out"/*.json --sort ranks
python analysis/demo_figure.py "$out"/*.json --out "$out/demo.png"
echo "== 6. sky cut-outs: one region by RA, Dec and frequency, then every source of a small catalogue"
python -m ingest plan s3://survey/cube.fits --pos "circle 10h00m00s -30d00m00s 30arcsec" --band "1.3995GHz 1.4005GHz"
python scripts/demo_catalogue.py "$work/sources.csv"
mpiexec -n "$max_ranks" --oversubscribe --bind-to none python -m ingest cutouts --source s3://survey/cube.fits \
  --catalogue "$work/sources.csv" --columns "freq=[Hz]" --size "20arcsec 100km/s" --rest-frequency 1420.405752MHz \
  --output-dir "$out/cutouts" --report "$out/cutouts.json" --no-progress
echo "reports in $out/ (run summaries in $out/sweep.log), the figure in $out/demo.png, cut-outs in $out/cutouts/"
echo "(per-rank figures: python analysis/plot_report.py $out/*.json --out $out/plots)"
