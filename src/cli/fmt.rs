//! `terrain fmt [PATH…]`: rewrites stack files into the canonical layout
//! ([`crate::stack::fmt`]), in place and atomically; `--check` only lists the files that
//! would change (exit 1 if any), `--diff` shows each change. A file that does not parse
//! is reported at file:line:col and left alone while the others are still formatted.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

use clap::Args;

use super::{Exit, Reported};
use crate::output::{self, Style};
use crate::stack::fmt::{format, FmtError};

#[derive(Args, Debug)]
pub struct FmtArgs {
    /// Files to format, or directories whose .toml files to format.
    #[arg(value_name = "PATH", default_value = ".")]
    paths: Vec<PathBuf>,
    /// Writes nothing: lists the files that are not formatted and exits 1 if there are
    /// any (for CI).
    #[arg(long)]
    check: bool,
    /// Prints a unified diff of each file's formatting (with --check, writes nothing).
    #[arg(long)]
    diff: bool,
    /// Also formats the .toml files in subdirectories (except `state/`, `target/` and
    /// hidden ones).
    #[arg(long, short = 'r')]
    recursive: bool,
    /// Never colour the output (also NO_COLOR).
    #[arg(long = "no-color")]
    no_color: bool,
}

/// Directories `--recursive` never descends into.
const SKIPPED_DIRS: [&str; 2] = ["state", "target"];

pub fn run(args: FmtArgs) -> anyhow::Result<Exit> {
    let style = Style::detect(args.no_color);
    let mut failed = false;
    let mut files = Vec::new();
    for path in &args.paths {
        match fs::metadata(path) {
            Ok(m) if m.is_dir() => {
                if let Err(e) = collect(path, args.recursive, &mut files) {
                    output::eprint(&output::fmt::io_error("list", path, &e));
                    failed = true;
                }
            }
            Ok(_) => files.push(path.clone()),
            Err(e) => {
                output::eprint(&output::fmt::io_error("read", path, &e));
                failed = true;
            }
        }
    }
    let mut seen = BTreeSet::new();
    let mut unformatted = false;
    for file in files {
        let shown = tidy(&file);
        if !seen.insert(shown.clone()) {
            continue;
        }
        match format_file(&file, &shown, &args, style) {
            Ok(changed) => unformatted |= changed,
            Err(()) => failed = true,
        }
    }
    if failed || (args.check && unformatted) {
        return Err(Reported.into());
    }
    Ok(Exit::Ok)
}

/// Formats one file: prints its path (and diff) when it changes, writes it unless
/// `--check`. `Ok(true)`: the file was not formatted. Errors are printed here.
fn format_file(file: &Path, shown: &Path, args: &FmtArgs, style: Style) -> Result<bool, ()> {
    let before = match fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            output::eprint(&output::fmt::io_error("read", shown, &e));
            return Err(());
        }
    };
    let after = match format(&before) {
        Ok(text) => text,
        Err(FmtError::Parse { line, col, message }) => {
            output::eprint(&output::fmt::parse_error(shown, line, col, &message));
            return Err(());
        }
    };
    if after == before {
        return Ok(false);
    }
    output::print(&output::fmt::changed(shown));
    if args.diff {
        output::print(&output::fmt::diff(shown, &before, &after, style));
    }
    if !args.check {
        if let Err(e) = super::common::replace_file(file, &after) {
            output::eprint(&output::fmt::io_error("write", shown, &e));
            return Err(());
        }
    }
    Ok(true)
}

/// The `.toml` files of `dir` (sorted), and with `recursive` those of its
/// subdirectories too, skipping `state/`, `target/` and hidden directories.
fn collect(dir: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            if recursive && !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_str()) {
                dirs.push(path);
            }
        } else if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    dirs.sort();
    out.extend(files);
    for d in dirs {
        collect(&d, recursive, out)?;
    }
    Ok(())
}

/// `path` as shown to the user: without a leading `./`.
fn tidy(path: &Path) -> PathBuf {
    let tidied: PathBuf = path
        .components()
        .skip_while(|c| matches!(c, Component::CurDir))
        .collect();
    if tidied.as_os_str().is_empty() {
        path.to_path_buf()
    } else {
        tidied
    }
}
