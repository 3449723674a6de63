//! No code: this crate only unifies the features of the workspace's dependencies, so
//! that building one member reuses what building the workspace compiled (see its
//! Cargo.toml).
