#!/usr/bin/env bash
# The test job: everything the tests need is installed here, then the whole suite runs
# (unit, engine, CLI and crash tests). CI calls this script.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# The tests drive python3 (a process holding a lock in the lock tests); it ships with
# the machine image, and is installed if missing.
if ! command -v python3 >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq python3 >/dev/null
fi
cargo test --workspace --all-targets --no-fail-fast 2>&1
