#!/usr/bin/env bash
# The main job: build terrain and take the quickstart stack through its whole life
# (validate, plan, apply, a clean re-plan, destroy) in a scratch directory.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --manifest-path "$here/Cargo.toml" --bin terrain
terrain="$here/target/debug/terrain"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/stacks/quickstart" "$work/"
cd "$work"
run() { echo; echo "\$ terrain $*"; "$terrain" "$@"; }
run validate -s quickstart
run plan -s quickstart
run apply -s quickstart --auto-approve
run plan -s quickstart --detailed-exitcode
run output -s quickstart
run destroy -s quickstart --auto-approve
