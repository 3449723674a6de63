//! Empty: a build script makes cargo resolve `[build-dependencies]`, which carry the
//! features proc macros and build scripts are built with (see Cargo.toml).
fn main() {}
