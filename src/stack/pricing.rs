//! The stack's cost settings: `[pricing] file = "prices.toml"` (prices laid over the
//! catalog terrain ships, for negotiated rates) and `[stack] budget = { max_hourly = 25.0 }`
//! (a plan whose hourly maximum exceeds it fails, naming what drives the cost). Both take
//! plain values: they decide how a plan is judged, so they are known before anything is
//! evaluated.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::expr::{Node, NodeKind};
use super::source::{Diagnostic, Span};

/// What the stack says about prices and its budget.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pricing {
    /// A price file laid over the shipped catalog, relative paths from the stack's
    /// directory.
    pub file: Option<PathBuf>,
    /// The most the stack may cost per hour at its maximum.
    pub max_hourly: Option<f64>,
}

/// Checks `[pricing]` (`table`) and `[stack] budget` (`budget`).
pub fn check(
    table: Option<&(Span, Node)>,
    budget: Option<&Node>,
    dir: &Path,
    diags: &mut Vec<Diagnostic>,
) -> Pricing {
    let mut out = Pricing::default();
    if let Some((_, node)) = table {
        for (key, span, value) in entries("[pricing]", node, diags) {
            match key.as_str() {
                "file" => match &value.kind {
                    NodeKind::Literal(Value::String(s)) if !s.is_empty() => {
                        out.file = Some(dir.join(s));
                    }
                    _ => diags.push(Diagnostic::at(
                        value.span,
                        "pricing.file must be a plain string naming a price file",
                        "expected a string",
                    )),
                },
                other => diags.push(
                    Diagnostic::at(
                        span,
                        format!("[pricing]: unknown key `{other}`"),
                        "unknown key",
                    )
                    .help("allowed keys: file"),
                ),
            }
        }
    }
    if let Some(node) = budget {
        for (key, span, value) in entries("stack.budget", node, diags) {
            match key.as_str() {
                "max_hourly" => match &value.kind {
                    NodeKind::Literal(Value::Number(n))
                        if n.as_f64().is_some_and(|v| v > 0.0 && v.is_finite()) =>
                    {
                        out.max_hourly = n.as_f64();
                    }
                    _ => diags.push(Diagnostic::at(
                        value.span,
                        "stack.budget.max_hourly must be a positive number of US dollars per hour",
                        "expected a positive number",
                    )),
                },
                other => diags.push(
                    Diagnostic::at(
                        span,
                        format!("stack.budget: unknown key `{other}`"),
                        "unknown key",
                    )
                    .help("allowed keys: max_hourly"),
                ),
            }
        }
    }
    out
}

fn entries(what: &str, node: &Node, diags: &mut Vec<Diagnostic>) -> Vec<(String, Span, Node)> {
    match &node.kind {
        NodeKind::Table(entries) => entries.clone(),
        _ => {
            diags.push(Diagnostic::at(
                node.span,
                format!("{what} must be a table"),
                "expected a table",
            ));
            Vec::new()
        }
    }
}
