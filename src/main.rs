//! The `terrain` binary: parse arguments, run, map the result to an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    terrain::cli::main()
}
