#!/bin/bash
# The whole round trip without a shared copy of the cube: ingest pre-stages each region, SoFiA-2 runs
# per parameter file (jobs/prestage-sofia.sh), then ingest publishes the regions' mask cubes back to
# the store as ONE FITS object (every voxel from the region that owns it; overlaps cut in the middle),
# with the cube's header and WCS, BITPIX from the masks. Usage:
#   bash jobs/prestage-sofia-publish.sh CUBE WEIGHTS OUT_DIR TEMPLATE DEST [RANKS]
# DEST is s3://bucket/key (keys from the environment, as for the cube); PUBLISH_OPTIONS adds options
# to the publish step (e.g. "--resume" after an interrupted upload, "--overwrite" to replace DEST).
# SOFIA, REGION_SHAPE, MIN_OVERLAP, RUN_NAME as in jobs/prestage-sofia.sh; the template must have
# output.writeMask = true (SoFiA-2 then writes OUT_DIR/outputs/RUN_NNN_mask.fits per region).
set -euo pipefail
cube=${1:?CUBE} weights=${2:?WEIGHTS} out_dir=${3:?OUT_DIR} template=${4:?TEMPLATE} dest=${5:?DEST}
ranks=${6:-4}

bash "$(dirname "$0")/prestage-sofia.sh" "$cube" "$weights" "$out_dir" "$template" "$ranks"

# Region i's mask is outputs/RUN_NNN_mask.fits (NNN = i + 1, as sofia_NNN.par); its box comes from
# OUT_DIR/manifest.json. ${PUBLISH_OPTIONS} is left unquoted on purpose: it holds several options.
# shellcheck disable=SC2086
mpiexec -n "$ranks" python -m ingest publish --source "$out_dir" \
  --region-files "outputs/${RUN_NAME:-run}_{index:03d}_mask.fits" --dest "$dest" \
  --report "$out_dir/publish-report.json" --no-progress ${PUBLISH_OPTIONS:-}
