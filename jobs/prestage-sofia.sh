#!/bin/bash
# The same hand-off without SLURM, as a pipeline's pre-stage step (a Nextflow process `script:`
# block can hold exactly these two steps): ingest stages the regions, then SoFiA-2 runs per
# parameter file. Usage:
#   bash jobs/prestage-sofia.sh CUBE WEIGHTS OUT_DIR TEMPLATE [RANKS]
# SOFIA (default sofia) is the SoFiA-2 executable; REGION_SHAPE, MIN_OVERLAP, RUN_NAME as in
# jobs/prestage-sofia.sbatch. Under Nextflow, OUT_DIR/sofia_*.par is the process's output channel.
set -euo pipefail
cube=${1:?CUBE} weights=${2:?WEIGHTS} out_dir=${3:?OUT_DIR} template=${4:?TEMPLATE} ranks=${5:-4}
sofia=${SOFIA:-sofia}

mpiexec -n "$ranks" python -m ingest prestage --source "$cube" --companion "weights=$weights" \
  --output-dir "$out_dir" --region-shape "${REGION_SHAPE:-1500x1500x1400}" \
  --min-overlap "${MIN_OVERLAP:-256,256}" --sofia-template "$template" --run-name "${RUN_NAME:-run}" \
  --report "$out_dir/prestage-report.json" --no-progress

# SoFiA-2 reads only its region of the frame file; xargs runs RANKS of them at once.
printf '%s\n' "$out_dir"/sofia_*.par | xargs -P "$ranks" -n 1 "$sofia"
