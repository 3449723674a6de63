# Sourced by the scripts that build: links with mold when `scripts/deps.sh` could install
# it (Debian's package), through the linker driver, so that nothing but linking changes
# (compiled crates are shared with a plain `cargo build`, which keeps working without it).
# Linking is a large part of an incremental test build: every test binary links the AWS
# SDK, kube and the sandbox.
if command -v mold >/dev/null 2>&1 && [ -z "${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS:-}" ] && [ "$(uname -m)" = x86_64 ]; then
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER="$here/scripts/cc-mold"
fi
