#!/usr/bin/env bash
# The test job: everything the tests need is installed here, then the whole suite builds
# and runs (unit, engine, CLI, sandbox, contracts, the four stacks end to end). CI calls
# this script with --long.
#
#   scripts/test.sh            the suite (under 10 min on 2 cores after the demo's build)
#   scripts/test.sh --long     the suite, then the long tier: randomized and soak trials,
#                              written `#[ignore = "long: …"]` (no test is ignored for
#                              any other reason)
#   scripts/test.sh -- ARGS    ARGS passed to the test binaries (a name filter, say)
#
# The build and the run are timed apart.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
long=no
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --long) long=yes ;;
    --) shift; pass=("$@"); break ;;
    *) echo "usage: scripts/test.sh [--long] [-- TEST-ARGS]" >&2; exit 2 ;;
  esac
  shift
done
# The tests drive python3 (a process holding a lock in the lock tests), redis-server
# (behind the sandbox's Redis pods), kubernetes-validate (rendered manifests), moto and
# the aws CLI; mold links faster when it can be installed.
bash scripts/deps.sh
# The libraries, binaries and test binaries, and the examples (built, not run: a check
# would compile every dependency a second time, as metadata). The same targets the run
# below uses, so it compiles nothing.
targets=(--workspace --lib --tests)
start=$SECONDS
cargo test "${targets[@]}" --no-run
cargo build --workspace --examples --quiet
build=$((SECONDS - start))
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
start=$SECONDS
cargo test "${targets[@]}" --no-fail-fast -- "${pass[@]}" 2>&1 | tee "$log" || status=$?
run=$((SECONDS - start))
long_run=0
if [ "$long" = yes ] && [ "$status" -eq 0 ]; then
  start=$SECONDS
  cargo test "${targets[@]}" --no-fail-fast -- --ignored "${pass[@]}" 2>&1 | tee -a "$log" || status=$?
  long_run=$((SECONDS - start))
fi
# One closing line for the whole run (cargo prints one per test binary, the last of
# which may be a crate with no tests of its own).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
     END { printf "tests: %d passed, %d failed, %d ignored\n", p, f, g }' "$log"
echo "time: build ${build}s, run ${run}s$( [ "$long" = yes ] && echo ", long tier ${long_run}s")"
exit "$status"
