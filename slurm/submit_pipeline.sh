#!/bin/bash
# Submit staging then training, the training job starting only if staging succeeded
# (afterok): a failed or refused copy must not burn GPU hours on missing data.
#
#   SRC=$STORE/shards DST=$SCRATCH/shards slurm/submit_pipeline.sh
#   slurm/submit_pipeline.sh --account=abc@a100   # extra options go to the training job
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SRC=${SRC:-"$STORE/shards"}
export DST=${DST:-"$SCRATCH/shards"}
export DATA=$DST                          # the training job stages from the staged copy

# --parsable prints only the job id (";cluster" on federated setups, stripped below).
STAGE_JID=$(sbatch --parsable "$HERE/stage.sbatch")
STAGE_JID=${STAGE_JID%%;*}
TRAIN_JID=$(sbatch --parsable --dependency="afterok:$STAGE_JID" "$@" "$HERE/train.sbatch")
TRAIN_JID=${TRAIN_JID%%;*}
echo "staging job $STAGE_JID -> training job $TRAIN_JID (afterok)"
