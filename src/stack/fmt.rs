//! The canonical layout of stack files (`terrain fmt`): [`format`] rewrites the text of
//! one TOML file into one layout, keeping every comment, the order of tables and keys,
//! and the exact text of every string, number, date and multi-line string.
//!
//! The file is parsed with `toml_edit` (which keeps each piece's span and the
//! whitespace and comments around it), then written out again:
//!
//! - no indentation; `=` aligned within a run of consecutive `key = value` lines (a run
//!   ends at a blank line, a full-line comment, a header, or after a value that spans
//!   lines), keys padded to the longest written key of the run, one space around `=`;
//! - dotted keys and table headers without inner spaces (`a.b`, `[a.b]`, `[[moved]]`);
//! - inline tables as `{ a = 1, b = "x" }`, empty ones as `{}`;
//! - arrays written on one line as `[1, 2, 3]`; arrays written across lines one item a
//!   line, indented four spaces a level, each with a trailing comma, comments kept;
//! - a trailing comment one space after what it follows;
//! - at most one blank line in a row, one blank line before each header (and the
//!   comments just above it) except at the top of the file, no trailing whitespace,
//!   one newline at the end.
//!
//! Formatting a formatted file changes nothing.

use std::ops::Range;

use toml_edit::{Array, Document, InlineTable, Item, Key, RawString, Table, Value};

/// Why a file could not be formatted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FmtError {
    /// The text is not TOML; `line` and `col` (1-based, in characters) locate it.
    #[error("{line}:{col}: {message}")]
    Parse {
        line: usize,
        col: usize,
        message: String,
    },
}

/// Four spaces a nesting level inside multi-line arrays.
const INDENT: usize = 4;

/// `text` (one TOML file) in the canonical layout.
pub fn format(text: &str) -> Result<String, FmtError> {
    let doc = Document::parse(text).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        let (line, col) = line_col(text, at);
        FmtError::Parse {
            line,
            col,
            message: e.message().trim().to_string(),
        }
    })?;
    let w = Writer { input: text };
    let mut lines = Vec::new();
    for (table, path, is_array) in tables_in_order(doc.as_table()) {
        w.table(table, &path, is_array, &mut lines);
    }
    w.gap(doc.trailing(), true, &mut lines, &mut None);
    Ok(layout(lines))
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let mut line = 1;
    let mut col = 1;
    for (i, c) in text.char_indices() {
        if i >= at {
            break;
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (line, col)
}

/// One line of the output before blank lines and alignment are settled.
#[derive(Debug)]
enum Line {
    Blank,
    /// A full-line comment, trimmed.
    Comment(String),
    /// `[a.b]` or `[[moved]]`, with its trailing comment.
    Header(String, Option<String>),
    /// `key = value`; the value may span lines (a multi-line array or string).
    KeyValue {
        key: String,
        value: String,
        comment: Option<String>,
    },
}

/// Every table with a header (and the root table) in the order the file wrote them:
/// the table, its key path and whether it is an entry of an array of tables.
fn tables_in_order(root: &Table) -> Vec<(&Table, Vec<&Key>, bool)> {
    fn visit<'t>(
        table: &'t Table,
        path: &mut Vec<&'t Key>,
        is_array: bool,
        last_position: &mut isize,
        out: &mut Vec<(isize, &'t Table, Vec<&'t Key>, bool)>,
    ) {
        if !table.is_dotted() {
            if let Some(p) = table.position() {
                *last_position = p;
            }
            out.push((*last_position, table, path.clone(), is_array));
        }
        for (key, item) in table.iter() {
            let Some(k) = table.key(key) else { continue };
            match item {
                Item::Table(t) => {
                    path.push(k);
                    visit(t, path, false, last_position, out);
                    path.pop();
                }
                Item::ArrayOfTables(a) => {
                    for t in a.iter() {
                        path.push(k);
                        visit(t, path, true, last_position, out);
                        path.pop();
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    visit(root, &mut Vec::new(), false, &mut 0, &mut out);
    out.sort_by_key(|(position, _, path, _)| (!path.is_empty(), *position));
    out.into_iter()
        .map(|(_, table, path, is_array)| (table, path, is_array))
        .collect()
}

/// The `key = value` entries of a table (dotted keys flattened) in the order written.
fn entries(table: &Table) -> Vec<(Vec<&Key>, &Value)> {
    let mut out = table.get_values();
    out.sort_by_key(|(_, v)| v.span().map_or(usize::MAX, |s| s.start));
    out
}

/// The entries of an inline table in the order written.
fn inline_entries(table: &InlineTable) -> Vec<(Vec<&Key>, &Value)> {
    let mut out = table.get_values();
    out.sort_by_key(|(_, v)| v.span().map_or(usize::MAX, |s| s.start));
    out
}

/// A piece of the whitespace and comments between two tokens.
#[derive(Debug, PartialEq)]
enum Gap {
    /// A comment on the line of what came before it.
    Trailing(String),
    /// A comment on a line of its own.
    Comment(String),
    Blank,
}

/// The comments and blank lines in `raw` (whitespace and comments only). With
/// `line_start`, `raw` begins at the start of a line; otherwise its first line
/// continues the line of what came before.
fn gaps(raw: &str, line_start: bool) -> Vec<Gap> {
    let mut out = Vec::new();
    let segments: Vec<&str> = raw.split('\n').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        let seg = seg.trim();
        let own_line = line_start || i > 0;
        if seg.starts_with('#') {
            out.push(if own_line {
                Gap::Comment(seg.to_string())
            } else {
                Gap::Trailing(seg.to_string())
            });
        } else if seg.is_empty() && own_line && i < last {
            // A whole line with nothing on it.
            out.push(Gap::Blank);
        }
    }
    out
}

/// Writes the parsed document back out, reading each piece's text from `input`.
struct Writer<'a> {
    input: &'a str,
}

impl<'a> Writer<'a> {
    /// The text of `raw`: its own, or the slice of the input its span covers.
    fn raw<'b>(&'b self, raw: Option<&'b RawString>) -> &'b str {
        match raw {
            Some(r) => match r.as_str() {
                Some(s) => s,
                None => r.span().and_then(|s| self.input.get(s)).unwrap_or(""),
            },
            None => "",
        }
    }

    fn slice(&self, span: Option<Range<usize>>) -> Option<&'a str> {
        span.and_then(|s| self.input.get(s))
    }

    /// A key as written (quotes and all).
    fn key(&self, key: &Key) -> String {
        key.as_repr()
            .and_then(|r| {
                let raw = r.as_raw();
                raw.as_str()
                    .map(str::to_string)
                    .or_else(|| self.slice(raw.span()).map(str::to_string))
            })
            .unwrap_or_else(|| key.display_repr().into_owned())
    }

    /// A dotted key path as written, without spaces around the dots.
    fn key_path(&self, path: &[&Key]) -> String {
        path.iter()
            .map(|k| self.key(k))
            .collect::<Vec<_>>()
            .join(".")
    }

    /// Adds the comments and blank lines of a gap that starts a line: a trailing comment
    /// goes onto the last line when there is one to take it.
    fn gap(
        &self,
        raw: &RawString,
        line_start: bool,
        lines: &mut Vec<Line>,
        trailing: &mut Option<String>,
    ) {
        for g in gaps(self.raw(Some(raw)), line_start) {
            match g {
                Gap::Trailing(c) if trailing.is_none() => *trailing = Some(c),
                Gap::Trailing(c) | Gap::Comment(c) => lines.push(Line::Comment(c)),
                Gap::Blank => lines.push(Line::Blank),
            }
        }
    }

    /// The lines of one table: its header (unless it has none) and its entries.
    fn table(&self, table: &Table, path: &[&Key], is_array: bool, lines: &mut Vec<Line>) {
        let children = entries(table);
        let shown = !path.is_empty() && (is_array || !(table.is_implicit() && children.is_empty()));
        if shown {
            // Comments above a header sit in its decor, or (for some tables made from
            // dotted keys) in the leaf decor of its last key.
            if let Some(last) = path.last() {
                let prefix = self.raw(last.leaf_decor().prefix());
                if prefix.contains('\n') {
                    self.lines_of(prefix, lines);
                }
            }
            self.lines_of(self.raw(table.decor().prefix()), lines);
            let name = self.key_path(path);
            let header = if is_array {
                format!("[[{name}]]")
            } else {
                format!("[{name}]")
            };
            let mut comment = None;
            for g in gaps(self.raw(table.decor().suffix()), false) {
                match g {
                    Gap::Trailing(c) if comment.is_none() => comment = Some(c),
                    Gap::Trailing(c) | Gap::Comment(c) => lines.push(Line::Comment(c)),
                    Gap::Blank => {}
                }
            }
            lines.push(Line::Header(header, comment));
        }
        for (keys, value) in children {
            if let Some(last) = keys.last() {
                self.lines_of(self.raw(last.leaf_decor().prefix()), lines);
            }
            let mut comment = None;
            let mut after = Vec::new();
            for g in gaps(self.raw(value.decor().suffix()), false) {
                match g {
                    Gap::Trailing(c) if comment.is_none() => comment = Some(c),
                    Gap::Trailing(c) | Gap::Comment(c) => after.push(Line::Comment(c)),
                    Gap::Blank => {}
                }
            }
            lines.push(Line::KeyValue {
                key: self.key_path(&keys),
                value: self.value(value, 0),
                comment,
            });
            lines.extend(after);
        }
    }

    /// The comments and blank lines of a gap that starts a line.
    fn lines_of(&self, raw: &str, lines: &mut Vec<Line>) {
        for g in gaps(raw, true) {
            match g {
                Gap::Trailing(c) | Gap::Comment(c) => lines.push(Line::Comment(c)),
                Gap::Blank => lines.push(Line::Blank),
            }
        }
    }

    /// A value in the canonical layout; `indent` is the indentation of the line it
    /// starts on (multi-line arrays indent their items one level deeper).
    fn value(&self, value: &Value, indent: usize) -> String {
        match value {
            Value::Array(a) => self.array(a, indent),
            Value::InlineTable(t) => self.inline_table(t, indent),
            _ => self
                .slice(value.span())
                .map_or_else(|| value.to_string().trim().to_string(), str::to_string),
        }
    }

    fn inline_table(&self, table: &InlineTable, indent: usize) -> String {
        let children = inline_entries(table);
        if self.inline_has_comment(table) {
            // TOML 1.1 allows comments in inline tables; one line would lose them, so the
            // table stays as written.
            if let Some(text) = self.slice(table.span()) {
                return text.to_string();
            }
        }
        if children.is_empty() {
            return "{}".to_string();
        }
        let parts: Vec<String> = children
            .iter()
            .map(|(keys, v)| format!("{} = {}", self.key_path(keys), self.value(v, indent)))
            .collect();
        format!("{{ {} }}", parts.join(", "))
    }

    /// Whether a comment sits anywhere between the braces of `table` (outside the
    /// values, which format their own).
    fn inline_has_comment(&self, table: &InlineTable) -> bool {
        let has = |r: Option<&RawString>| self.raw(r).contains('#');
        if has(Some(table.trailing())) {
            return true;
        }
        table.get_values().iter().any(|(keys, v)| {
            has(v.decor().prefix())
                || has(v.decor().suffix())
                || keys.iter().any(|k| {
                    has(k.leaf_decor().prefix())
                        || has(k.leaf_decor().suffix())
                        || has(k.dotted_decor().prefix())
                        || has(k.dotted_decor().suffix())
                })
        })
    }

    fn array(&self, array: &Array, indent: usize) -> String {
        let commented = self.raw(Some(array.trailing())).contains('#');
        if array.is_empty() && !commented {
            return "[]".to_string();
        }
        // Written across lines: a line break between the brackets outside the values (a
        // multi-line string alone leaves `['''…''']` as it is).
        let across_lines = self.raw(Some(array.trailing())).contains('\n')
            || array.iter().any(|v| {
                self.raw(v.decor().prefix()).contains('\n')
                    || self.raw(v.decor().suffix()).contains('\n')
            });
        if !across_lines {
            let items: Vec<String> = array.iter().map(|v| self.value(v, indent)).collect();
            return format!("[{}]", items.join(", "));
        }
        // One item a line. `open` takes a comment on the line of `[`.
        enum Row {
            Item(String, Option<String>),
            Comment(String),
            Blank,
        }
        let inner = indent + INDENT;
        let mut open: Option<String> = None;
        let mut rows: Vec<Row> = Vec::new();
        let add = |rows: &mut Vec<Row>, open: &mut Option<String>, raw: &str| {
            for g in gaps(raw, false) {
                match g {
                    Gap::Trailing(c) => {
                        let slot = match rows.last_mut() {
                            Some(Row::Item(_, slot)) => slot,
                            Some(_) => {
                                rows.push(Row::Comment(c));
                                continue;
                            }
                            None => &mut *open,
                        };
                        if slot.is_none() {
                            *slot = Some(c);
                        } else {
                            rows.push(Row::Comment(c));
                        }
                    }
                    Gap::Comment(c) => rows.push(Row::Comment(c)),
                    Gap::Blank => rows.push(Row::Blank),
                }
            }
        };
        for v in array.iter() {
            add(&mut rows, &mut open, self.raw(v.decor().prefix()));
            rows.push(Row::Item(self.value(v, inner), None));
            add(&mut rows, &mut open, self.raw(v.decor().suffix()));
        }
        add(&mut rows, &mut open, self.raw(Some(array.trailing())));

        let pad = " ".repeat(inner);
        let mut out = String::from("[");
        if let Some(c) = open {
            out.push(' ');
            out.push_str(&c);
        }
        let mut blank = false;
        let mut any = false;
        for row in rows {
            match row {
                Row::Blank => {
                    blank = any;
                    continue;
                }
                Row::Item(text, comment) => {
                    if blank {
                        out.push('\n');
                    }
                    out.push('\n');
                    out.push_str(&pad);
                    out.push_str(&text);
                    out.push(',');
                    if let Some(c) = comment {
                        out.push(' ');
                        out.push_str(&c);
                    }
                }
                Row::Comment(c) => {
                    if blank {
                        out.push('\n');
                    }
                    out.push('\n');
                    out.push_str(&pad);
                    out.push_str(&c);
                }
            }
            blank = false;
            any = true;
        }
        out.push('\n');
        out.push_str(&" ".repeat(indent));
        out.push(']');
        out
    }
}

/// Settles blank lines and aligns `=`, then joins the lines.
fn layout(lines: Vec<Line>) -> String {
    // At most one blank line in a row, none at the start or the end.
    let mut kept: Vec<Line> = Vec::with_capacity(lines.len());
    for line in lines {
        if matches!(line, Line::Blank) && matches!(kept.last(), None | Some(Line::Blank)) {
            continue;
        }
        kept.push(line);
    }
    while matches!(kept.last(), Some(Line::Blank)) {
        kept.pop();
    }
    // One blank line before each header and the comments just above it.
    let mut spaced: Vec<Line> = Vec::with_capacity(kept.len());
    for line in kept {
        if matches!(line, Line::Header(..)) {
            let start = spaced.len()
                - spaced
                    .iter()
                    .rev()
                    .take_while(|l| matches!(l, Line::Comment(_)))
                    .count();
            if start > 0 && !matches!(spaced[start - 1], Line::Blank) {
                spaced.insert(start, Line::Blank);
            }
        }
        spaced.push(line);
    }
    // The width of the keys of each run of `key = value` lines.
    let mut widths = vec![0; spaced.len()];
    let mut run_start = 0;
    let mut width = 0;
    for i in 0..=spaced.len() {
        let (in_run, ends_run) = match spaced.get(i) {
            Some(Line::KeyValue { value, .. }) => (true, value.contains('\n')),
            _ => (false, true),
        };
        if in_run {
            if let Some(Line::KeyValue { key, .. }) = spaced.get(i) {
                width = width.max(key.chars().count());
            }
        }
        if ends_run {
            let end = if in_run { i + 1 } else { i };
            for w in widths.iter_mut().take(end).skip(run_start) {
                *w = width;
            }
            run_start = end;
            width = 0;
        }
    }
    let mut out = String::new();
    for (line, width) in spaced.iter().zip(widths) {
        match line {
            Line::Blank => {}
            Line::Comment(c) => out.push_str(c),
            Line::Header(h, comment) => {
                out.push_str(h);
                if let Some(c) = comment {
                    out.push(' ');
                    out.push_str(c);
                }
            }
            Line::KeyValue {
                key,
                value,
                comment,
            } => {
                let pad = width.saturating_sub(key.chars().count());
                out.push_str(key);
                out.push_str(&" ".repeat(pad));
                out.push_str(" = ");
                out.push_str(value);
                if let Some(c) = comment {
                    out.push(' ');
                    out.push_str(c);
                }
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn fmt(text: &str) -> String {
        let out = format(text).unwrap_or_else(|e| panic!("format failed: {e}\n{text}"));
        let again = format(&out).unwrap_or_else(|e| panic!("reformat failed: {e}\n{out}"));
        assert_eq!(out, again, "formatting is not idempotent");
        out
    }

    #[test]
    fn aligns_equals_in_a_run() {
        assert_eq!(
            fmt("a = 1\nlong_name=2\n  mid =  3\n"),
            "a         = 1\nlong_name = 2\nmid       = 3\n"
        );
    }

    #[test]
    fn a_blank_line_or_comment_ends_a_run() {
        assert_eq!(
            fmt("a = 1\nlonger = 2\n\nb = 3\n# note\nccc = 4\nd = 5\n"),
            "a      = 1\nlonger = 2\n\nb = 3\n# note\nccc = 4\nd   = 5\n"
        );
    }

    #[test]
    fn dotted_and_quoted_keys_count_by_written_length() {
        assert_eq!(
            fmt("a . b = 1\n\"x y\" = 2\nc = 3\n"),
            "a.b   = 1\n\"x y\" = 2\nc     = 3\n"
        );
    }

    #[test]
    fn a_multi_line_value_ends_its_run() {
        assert_eq!(
            fmt("a = 1\nlist = [\n  1,\n]\nlonger = 2\nb = 3\n"),
            "a    = 1\nlist = [\n    1,\n]\nlonger = 2\nb      = 3\n"
        );
    }

    #[test]
    fn keys_and_tables_keep_their_order() {
        let text = "z = 1\na.y = 2\nm = 3\na.x = 4\n\n[b]\nk = 1\n\n[a2]\nk = 2\n";
        assert_eq!(
            fmt(text),
            "z   = 1\na.y = 2\nm   = 3\na.x = 4\n\n[b]\nk = 1\n\n[a2]\nk = 2\n"
        );
    }

    #[test]
    fn inline_tables_are_normalised() {
        assert_eq!(
            fmt("a = {x=1,y = \"s\" ,  z.w={}}\nb = {   }\n"),
            "a = { x = 1, y = \"s\", z.w = {} }\nb = {}\n"
        );
    }

    #[test]
    fn short_arrays_stay_on_one_line() {
        assert_eq!(
            fmt("a = [ 1,2 ,  3 ]\nb = [ ]\nc = [[1,2],[ \"x\" ]]\nd = [1,2,]\n"),
            "a = [1, 2, 3]\nb = []\nc = [[1, 2], [\"x\"]]\nd = [1, 2]\n"
        );
    }

    #[test]
    fn multi_line_arrays_get_one_item_a_line() {
        assert_eq!(
            fmt("a = [1, 2,\n  3]\n"),
            "a = [\n    1,\n    2,\n    3,\n]\n"
        );
        assert_eq!(
            fmt("a = [\n  [1,\n 2], {x=1}\n]\n"),
            "a = [\n    [\n        1,\n        2,\n    ],\n    { x = 1 },\n]\n"
        );
        assert_eq!(fmt("a = [\n]\n"), "a = []\n");
    }

    #[test]
    fn comments_in_arrays_are_kept() {
        let text = "a = [ # open\n  1, # one\n  # before two\n\n\n  2 # two\n  ,\n  # end\n]\n";
        assert_eq!(
            fmt(text),
            "a = [ # open\n    1, # one\n    # before two\n\n    2, # two\n    # end\n]\n"
        );
        assert_eq!(
            fmt("a = [\n  # nothing yet\n]\n"),
            "a = [\n    # nothing yet\n]\n"
        );
    }

    #[test]
    fn comments_everywhere_are_kept() {
        let text = "# top\n\n\n\n  # indented\na = 1   # trailing\n[t]   # header\n# first\nx=1\n   \n# last\n";
        assert_eq!(
            fmt(text),
            "# top\n\n# indented\na = 1 # trailing\n\n[t] # header\n# first\nx = 1\n\n# last\n"
        );
    }

    #[test]
    fn one_blank_line_before_each_header_and_its_comments() {
        assert_eq!(
            fmt("a = 1\n# about t\n[t]\nb = 2\n\n\n\n[[u]]\n[ v . w ]\n"),
            "a = 1\n\n# about t\n[t]\nb = 2\n\n[[u]]\n\n[v.w]\n"
        );
        assert_eq!(fmt("\n\n# doc\n[t]\na = 1\n"), "# doc\n[t]\na = 1\n");
        assert_eq!(fmt("[t]\na = 1\n"), "[t]\na = 1\n");
    }

    #[test]
    fn array_of_tables_headers_are_normalised() {
        assert_eq!(
            fmt("[[ moved ]]\nfrom=\"a\"\nto = \"b\"\n[[moved]]\nfrom = \"c\"\n"),
            "[[moved]]\nfrom = \"a\"\nto   = \"b\"\n\n[[moved]]\nfrom = \"c\"\n"
        );
    }

    #[test]
    fn strings_and_numbers_are_kept_as_written() {
        let text =
            "a = 'lit'\nb = \"esc\\tq\"\nc = 0x1F\nd = 1_000\ne = 1e3\nf = 1979-05-27T07:32:00Z\n";
        assert_eq!(
            fmt(text),
            "a = 'lit'\nb = \"esc\\tq\"\nc = 0x1F\nd = 1_000\ne = 1e3\nf = 1979-05-27T07:32:00Z\n"
        );
    }

    #[test]
    fn multi_line_strings_are_kept_byte_for_byte() {
        let text = "s = \"\"\"\n  indented   \n\n\n\ttab \\\n  end\"\"\"   # c\nl = '''\nraw  \n'''\nx = 1\n";
        assert_eq!(
            fmt(text),
            "s = \"\"\"\n  indented   \n\n\n\ttab \\\n  end\"\"\" # c\nl = '''\nraw  \n'''\nx = 1\n"
        );
    }

    #[test]
    fn a_multi_line_string_alone_does_not_make_an_array_multi_line() {
        let text = "args = ['''\nprint(1)\n''']\nb = [\"\"\"x\ny\"\"\",  1]\n";
        assert_eq!(
            fmt(text),
            "args = ['''\nprint(1)\n''']\nb = [\"\"\"x\ny\"\"\", 1]\n"
        );
    }

    #[test]
    fn whitespace_is_trimmed_and_one_newline_ends_the_file() {
        assert_eq!(fmt("a = 1   \t\n\n\n\n"), "a = 1\n");
        assert_eq!(fmt("a = 1"), "a = 1\n");
        assert_eq!(fmt("\r\n"), "");
        assert_eq!(fmt(""), "");
    }

    #[test]
    fn an_implicit_table_gets_no_header() {
        assert_eq!(
            fmt("[a.b]\nx = 1\n[a.c]\ny = 2\n"),
            "[a.b]\nx = 1\n\n[a.c]\ny = 2\n"
        );
    }

    #[test]
    fn a_commented_inline_table_stays_as_written() {
        let text = "a = { x = 1, # c\n  y = 2 }\n";
        assert_eq!(fmt(text), text);
    }

    #[test]
    fn a_parse_error_is_located() {
        let err = format("a = 1\nb = [1,\n  2\nc = \"x\n").expect_err("not TOML");
        let FmtError::Parse { line, col, message } = err;
        assert_eq!((line, col), (4, 1));
        assert!(message.contains("comma"), "{message}");
        let err = format("a = 1\n[x]\nb = 2\n[x]\n").expect_err("a duplicate table");
        assert_eq!(err.to_string(), "4:2: duplicate key");
    }
}
