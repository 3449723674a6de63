#!/usr/bin/env bash
# The test job: everything the tests need is installed here, then the whole suite runs
# (unit, engine, CLI and crash tests). CI calls this script.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# The tests drive python3 (a process holding a lock in the lock tests), redis-server
# (behind the sandbox's Redis pods) and kubernetes-validate (rendered manifests).
bash scripts/deps.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log" || status=$?
# One closing line for the whole run (cargo prints one per test binary, the last of
# which may be a crate with no tests of its own).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
