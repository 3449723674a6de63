//! Renders stack diagnostics with the source line and a caret, via miette: each names
//! file:line:col, the address and, where there is one, a suggestion.

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceSpan};

use crate::stack::{Diagnostic, Sources, StackErrors};

#[derive(Debug)]
struct Report {
    message: String,
    help: Option<String>,
    source: Option<NamedSource<String>>,
    label: Option<LabeledSpan>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Report {}

impl miette::Diagnostic for Report {
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn std::fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source.as_ref().map(|s| s as &dyn miette::SourceCode)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        self.label
            .clone()
            .map(|l| Box::new(std::iter::once(l)) as Box<dyn Iterator<Item = LabeledSpan>>)
    }
}

fn report(sources: &Sources, d: &Diagnostic) -> Report {
    let (source, label) = match d
        .span
        .and_then(|s| sources.files.get(s.file).map(|f| (s, f)))
    {
        Some((span, file)) => {
            // Parsers point one past the last byte at end of file; keep labels inside
            // the text so the excerpt still shows (on the last character).
            let text_len = file.text.len();
            let mut start = span.start.min(text_len.saturating_sub(1));
            while start > 0 && !file.text.is_char_boundary(start) {
                start -= 1;
            }
            let len = span.end.min(text_len).saturating_sub(start).max(1);
            let span = crate::stack::Span::new(span.file, start, start + len);
            (
                Some(NamedSource::new(
                    file.path.display().to_string(),
                    file.text.to_string(),
                )),
                Some(LabeledSpan::new_with_span(
                    Some(d.label.clone()),
                    SourceSpan::new(span.start.into(), span.end - span.start),
                )),
            )
        }
        None => (None, None),
    };
    let message = match d.span {
        Some(span) => format!("{}: {}", sources.locate(span), d.message),
        None => d.message.clone(),
    };
    Report {
        message,
        help: d.help.clone(),
        source,
        label,
    }
}

/// Every diagnostic, rendered with its source excerpt, followed by a count.
pub fn render(errors: &StackErrors, color: bool) -> String {
    let theme = if color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .with_links(false);
    let mut out = String::new();
    for d in &errors.diagnostics {
        let r = report(&errors.sources, d);
        if handler.render_report(&mut out, &r).is_err() {
            out.push_str(&format!("error: {}\n", r.message));
        }
        out.push('\n');
    }
    let n = errors.diagnostics.len();
    out.push_str(&format!(
        "Error: the stack has {n} problem{}; nothing was changed.\n",
        if n == 1 { "" } else { "s" }
    ));
    out
}
