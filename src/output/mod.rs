//! The output layer: the only code that prints. Plans, progress, diagnostics, state
//! listings and outputs are rendered here; colours only on a terminal.

pub mod cost;
pub mod diag;
pub mod fmt;
pub mod log;
pub mod markdown;
pub mod operator;
pub mod picture;
pub mod plan;
pub mod policy;
pub mod progress;
pub mod value;

use std::io::{IsTerminal, Write};

/// How output looks on this run.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    /// Standard output is a terminal (spinners, colours allowed).
    pub tty: bool,
    pub color: bool,
}

impl Style {
    /// Detects the terminal; `no_color` (or `NO_COLOR`) turns colours off.
    pub fn detect(no_color: bool) -> Self {
        let tty = std::io::stdout().is_terminal();
        Self {
            tty,
            color: tty && !no_color && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// Wraps `s` in an ANSI colour when colours are on.
    pub fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

/// Writes `text` to standard output; a closed pipe (`terrain plan | head`) is not an
/// error worth reporting.
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Writes `text` to standard error.
pub fn eprint(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}
