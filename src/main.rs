//! CLI entry.
fn main() {}
