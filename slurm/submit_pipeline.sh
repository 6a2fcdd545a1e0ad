#!/bin/bash
# Submit staging then training, the training job starting only if staging succeeded
# (afterok): a failed or refused copy must not burn GPU hours on missing data.
#
#   SRC=$STORE/shards DST=$SCRATCH/shards slurm/submit_pipeline.sh
#   slurm/submit_pipeline.sh --time=01:00:00           # options for both jobs
#   STAGE_OPTS="--cpus-per-task=4" TRAIN_OPTS="--nodes=8 -C h100 --account=abc@h100 \
#       --qos=qos_gpu_h100-t3 --gres=gpu:4" slurm/submit_pipeline.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SRC=${SRC:-"$STORE/shards"}
export DST=${DST:-"$SCRATCH/shards"}
export DATA=$DST                          # the training job reads the staged copy
STAGE_OPTS=${STAGE_OPTS:-}                # sbatch options for the staging job only
TRAIN_OPTS=${TRAIN_OPTS:-}                # ... for the training job only

# --parsable prints only the job id (";cluster" on federated setups, stripped below).
# shellcheck disable=SC2086  # *_OPTS are lists of options
STAGE_JID=$(sbatch --parsable "$@" $STAGE_OPTS "$HERE/stage.sbatch")
STAGE_JID=${STAGE_JID%%;*}
# --kill-on-invalid-dep: if staging fails, the training job is cancelled instead of
# waiting forever in PENDING (DependencyNeverSatisfied).
# shellcheck disable=SC2086
TRAIN_JID=$(sbatch --parsable --dependency="afterok:$STAGE_JID" --kill-on-invalid-dep=yes \
    "$@" $TRAIN_OPTS "$HERE/train.sbatch")
TRAIN_JID=${TRAIN_JID%%;*}
echo "staging job $STAGE_JID -> training job $TRAIN_JID (afterok)"
