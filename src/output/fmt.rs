//! What `terrain fmt` prints: the path of each file it changed (or would change), a
//! unified diff of a file's formatting (`--diff`), and a file that could not be
//! formatted, located at file:line:col.

use std::path::Path;

use similar::{ChangeTag, TextDiff};

use super::Style;

/// The line naming a file that was (or, with `--check`, would be) rewritten.
pub fn changed(path: &Path) -> String {
    format!("{}\n", path.display())
}

/// A unified diff from `before` to `after` (three lines of context), headed
/// `--- old/PATH` / `+++ new/PATH` as `terraform fmt -diff` does; removed lines red,
/// added lines green when colours are on.
pub fn diff(path: &Path, before: &str, after: &str, style: Style) -> String {
    let shown = path.display();
    let mut out = format!("--- old/{shown}\n+++ new/{shown}\n");
    let diff = TextDiff::from_lines(before, after);
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        out.push_str(&style.paint("36", &hunk.header().to_string()));
        out.push('\n');
        for change in hunk.iter_changes() {
            let (sign, colour) = match change.tag() {
                ChangeTag::Delete => ("-", Some("31")),
                ChangeTag::Insert => ("+", Some("32")),
                ChangeTag::Equal => (" ", None),
            };
            let line = format!("{sign}{}", change.value().trim_end_matches(['\n', '\r']));
            match colour {
                Some(code) => out.push_str(&style.paint(code, &line)),
                None => out.push_str(&line),
            }
            out.push('\n');
        }
    }
    out
}

/// A file that is not TOML: where, and what the parser said (lowercase, as every error).
pub fn parse_error(path: &Path, line: usize, col: usize, message: &str) -> String {
    format!(
        "Error: {}:{line}:{col}: {}; the file was left as it is\n",
        path.display(),
        lowercase_first(message)
    )
}

/// A file that could not be read or written.
pub fn io_error(what: &str, path: &Path, e: &std::io::Error) -> String {
    format!("Error: {what} {}: {e}\n", path.display())
}

fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Style = Style {
        tty: false,
        color: false,
    };

    #[test]
    fn a_diff_is_unified_with_old_and_new_headers() {
        let out = diff(
            Path::new("stack.toml"),
            "a=1\nb = 2\n",
            "a = 1\nb = 2\n",
            PLAIN,
        );
        assert_eq!(
            out,
            "--- old/stack.toml\n+++ new/stack.toml\n@@ -1,2 +1,2 @@\n-a=1\n+a = 1\n b = 2\n"
        );
    }

    #[test]
    fn a_parse_error_names_the_file_and_place() {
        assert_eq!(
            parse_error(Path::new("s/a.toml"), 4, 2, "Duplicate key"),
            "Error: s/a.toml:4:2: duplicate key; the file was left as it is\n"
        );
    }
}
