#!/bin/bash
# Grade a class as a Slurm array of SHARDS tasks, then merge it (docs/shards.md):
#
#   SHARDS=4 SUBMITTED=/course/submitted SHARD_DIR=/scratch/attnkit OUT=/course/graded \
#     [GRADEBOOK=/course/gradebook.db] [ATTNKIT=/course/.venv/bin/attnkit] examples/slurm/submit.sh [sbatch options]
#
# The sbatch options (e.g. --partition=…, --cpus-per-task=4) go to the array; its tasks take
# their --jobs from the CPUs Slurm gives them.
# Prints the two job ids. Run it again after a late submission or a failed task: every task
# resumes (only new or changed submissions are graded) and the merge follows.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${SHARDS:?}" "${SUBMITTED:?}" "${SHARD_DIR:?}" "${OUT:?}"
mkdir -p "$SHARD_DIR"
export SHARDS SUBMITTED SHARD_DIR OUT
array=$(sbatch --parsable --array="0-$((SHARDS - 1))" --chdir="$SHARD_DIR" --export=ALL "$@" "$here/grade-array.sbatch")
array=${array%%;*}
merge=$(sbatch --parsable --dependency="afterany:$array" --chdir="$SHARD_DIR" --export=ALL "$here/merge.sbatch")
echo "$array ${merge%%;*}"
