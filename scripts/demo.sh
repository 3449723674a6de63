#!/usr/bin/env bash
# The main job: scenario 1 (batch ML on GKE) on the sandbox, as a newcomer runs it:
# plan, apply (cluster, Filestore share, NFS volume, Redis queue, datasets, queued
# items, the spot Job draining the queue), a clean re-plan, status, the Job's logs,
# destroy, and a check that the sandbox holds nothing. No cloud account is needed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# The sandbox's Redis pods run a real redis-server; mold links faster when it can be
# installed.
bash "$here/scripts/deps.sh" redis
cd "$here"
start=$SECONDS
cargo build --quiet --bin terrain
echo "built terrain in $((SECONDS - start))s"
terrain="$here/target/debug/terrain"
stack=stacks/gke-batch-ml
run() { echo; echo "\$ terrain $*"; "$terrain" "$@"; }
start=$SECONDS
# Leftovers of an interrupted earlier run are adopted or cleaned up by the runs below.
set +e
run plan -s "$stack" --sandbox --detailed-exitcode
code=$?
set -e
[ "$code" -eq 2 ] || { echo "expected plan exit code 2 (changes), got $code"; exit 1; }
run apply -s "$stack" --sandbox --auto-approve
run plan -s "$stack" --sandbox --detailed-exitcode
run status -s "$stack" --sandbox
run logs -s "$stack" --sandbox kubernetes_job.workload
run destroy -s "$stack" --sandbox --auto-approve
run sandbox list
echo
echo "Scenario 1 converged and was torn down in $((SECONDS - start))s."
