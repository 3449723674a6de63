//! Source files of a stack and source-located diagnostics: every error about a stack
//! points at file:line:col and shows the line.

use std::path::PathBuf;
use std::sync::Arc;

/// Which file of the stack, by index into [`Sources`].
pub type FileId = usize;

/// A byte range in one source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Span {
    pub file: FileId,
    pub start: usize,
    pub end: usize,
}

impl Span {
    /// The span from `start` to `end` (bytes) in `file`.
    pub fn new(file: FileId, start: usize, end: usize) -> Self {
        Self { file, start, end }
    }
}

/// One file of a stack, as read.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The path as the user would type it (relative to where terrain runs when possible).
    pub path: PathBuf,
    pub text: Arc<str>,
}

impl SourceFile {
    /// The 1-based line and column of byte `offset`.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }
}

/// All files of a stack.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub files: Vec<SourceFile>,
}

impl Sources {
    /// `path:line:col` of a span's start.
    pub fn locate(&self, span: Span) -> String {
        match self.files.get(span.file) {
            Some(f) => {
                let (line, col) = f.line_col(span.start);
                format!("{}:{line}:{col}", f.path.display())
            }
            None => "<unknown>".to_string(),
        }
    }
}

/// One problem in a stack, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// What is wrong, starting with the address or section it concerns.
    pub message: String,
    /// Where; `None` for problems that are not in any file (an empty directory).
    pub span: Option<Span>,
    /// The label under the highlighted source.
    pub label: String,
    /// A suggestion: a did-you-mean, or how to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A problem at `span`.
    pub fn at(span: Span, message: impl Into<String>, label: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            span: Some(span),
            label: label.into(),
            help: None,
        }
    }

    /// A problem with no place in the files.
    pub fn nowhere(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            span: None,
            label: String::new(),
            help: None,
        }
    }

    /// Adds a suggestion.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// The closest of `candidates` to `word`, if close enough to be a likely typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean `{c}`?"))
}

/// Stack problems found before anything runs. Displayed plainly as `path:line:col:
/// message`; the output layer renders them with the source line.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", render_plain(.sources, .diagnostics))]
pub struct StackErrors {
    pub sources: Sources,
    pub diagnostics: Vec<Diagnostic>,
}

fn render_plain(sources: &Sources, diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| match d.span {
            Some(span) => format!("{}: {}", sources.locate(span), d.message),
            None => d.message.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_is_one_based_and_counts_chars() {
        let f = SourceFile {
            path: "a.toml".into(),
            text: "ab\ncé d\n".into(),
        };
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(3), (2, 1));
        assert_eq!(f.line_col("ab\ncé ".len()), (2, 4));
    }

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(
            did_you_mean("contnet", ["content", "mode"]).as_deref(),
            Some("did you mean `content`?")
        );
        assert_eq!(did_you_mean("zzz", ["content", "mode"]), None);
    }
}
