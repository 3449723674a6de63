//! The `terrain` binary: parse arguments, run, map the result to an exit code; it
//! allocates with mimalloc.

use std::process::ExitCode;

/// Planning allocates and frees many small values (specs, expressions, spans); the
/// system allocator spent about 40% of a large plan in malloc and free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    terrain::cli::main()
}
