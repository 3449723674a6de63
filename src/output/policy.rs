//! What policies said about a plan, for people and for scripts: warnings under the
//! plan, denies as the error that fails it, `terrain policy test` results, and the
//! `policy` part of `plan --json`.

use serde_json::{json, Value};

use super::Style;
use crate::policy::{Finding, TestResult, Verdict};

/// The warnings, shown under the plan; empty when there are none.
pub fn warnings(verdict: &Verdict, style: Style) -> String {
    if verdict.warns.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{}\n", style.paint("33", "Policy warnings:"));
    for w in &verdict.warns {
        out.push_str(&format!("  {w}\n"));
    }
    out
}

/// The error text of a plan the policies deny.
pub fn denied(verdict: &Verdict) -> String {
    let mut out = format!(
        "the policies deny this plan ({} rule{} matched; nothing was changed):",
        verdict.denies.len(),
        if verdict.denies.len() == 1 { "" } else { "s" }
    );
    for d in &verdict.denies {
        out.push_str(&format!("\n  {d}"));
    }
    out
}

fn finding_json(f: &Finding) -> Value {
    json!({"policy": f.policy, "address": f.address, "message": f.message})
}

/// `{"denies": [...], "warns": [...]}` for `plan --json`.
pub fn to_json(verdict: &Verdict) -> Value {
    json!({
        "denies": verdict.denies.iter().map(finding_json).collect::<Vec<_>>(),
        "warns": verdict.warns.iter().map(finding_json).collect::<Vec<_>>(),
    })
}

/// `terrain policy test`'s report: one line per test, then the counts as `opa test`
/// prints them.
pub fn test_report(results: &[TestResult], style: Style) -> String {
    let mut out = String::new();
    for r in results {
        match &r.failure {
            None => out.push_str(&format!("{} {}\n", style.paint("32", "PASS"), r.rule)),
            Some(why) => out.push_str(&format!(
                "{} {} ({}): {why}\n",
                style.paint("31", "FAIL"),
                r.rule,
                r.file.display()
            )),
        }
    }
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    let total = results.len();
    out.push_str(
        "--------------------------------------------------------------------------------\n",
    );
    if failed == 0 {
        out.push_str(&format!("PASS: {total}/{total}\n"));
    } else {
        out.push_str(&format!(
            "PASS: {}/{total}\nFAIL: {failed}/{total}\n",
            total - failed
        ));
    }
    out
}
