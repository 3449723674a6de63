//! What the operator and `terrain stack` show: the operator's structured log lines
//! (one JSON object per line on standard error), and Stacks as a table and one by one.

use crate::operator::crd::{Condition, Stack};

/// One structured log line: time, level, the Stack (`NAMESPACE/NAME`, or empty) and
/// the message.
pub fn log(level: &str, stack: &str, message: &str) {
    let line = serde_json::json!({
        "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "level": level,
        "stack": stack,
        "msg": message,
    });
    super::eprint(&format!("{line}\n"));
}

fn condition<'a>(stack: &'a Stack, type_: &str) -> Option<&'a Condition> {
    stack
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

fn short(digest: &str) -> String {
    digest.chars().take(19).collect()
}

/// Stacks as `kubectl get` shows resources: one line each.
pub fn table(stacks: &[Stack], namespaces: bool) -> String {
    let mut rows = vec![{
        let mut r = Vec::new();
        if namespaces {
            r.push("NAMESPACE".to_string());
        }
        r.extend(
            [
                "NAME",
                "READY",
                "REASON",
                "PENDING PLAN",
                "CHANGES",
                "DRIFTED",
                "LAST APPLIED",
            ]
            .map(String::from),
        );
        r
    }];
    for s in stacks {
        let status = s.status.clone().unwrap_or_default();
        let cond = |t: &str| condition(s, t).map_or("Unknown".to_string(), |c| c.status.clone());
        let reason = condition(s, "Ready").map_or(String::new(), |c| c.reason.clone());
        let (pending, changes) = match &status.pending_plan {
            Some(p) => (
                short(&p.digest),
                format!("+{} ~{} ±{} -{}", p.add, p.change, p.replace, p.destroy),
            ),
            None => ("-".to_string(), "-".to_string()),
        };
        let mut r = Vec::new();
        if namespaces {
            r.push(s.metadata.namespace.clone().unwrap_or_default());
        }
        r.extend([
            s.metadata.name.clone().unwrap_or_default(),
            cond("Ready"),
            reason,
            pending,
            changes,
            cond("Drifted"),
            status
                .last_applied_digest
                .as_deref()
                .map_or("-".to_string(), short),
        ]);
        rows.push(r);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<width$}", width = widths[i]))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// One Stack: its source, approval, conditions and pending plan (without the plan's
/// changes, which [`super::plan::render`] shows).
pub fn describe(stack: &Stack) -> String {
    let status = stack.status.clone().unwrap_or_default();
    let spec = &stack.spec;
    let mut out = format!(
        "Stack {}/{}\n",
        stack.metadata.namespace.as_deref().unwrap_or_default(),
        stack.metadata.name.as_deref().unwrap_or_default()
    );
    if let Some(cm) = &spec.source.config_map {
        out.push_str(&format!("  Source:        ConfigMap {}\n", cm.name));
    }
    if let Some(git) = &spec.source.git {
        let path = if git.path.is_empty() {
            String::new()
        } else {
            format!(" {}", git.path)
        };
        out.push_str(&format!(
            "  Source:        {} at {}{path}\n",
            git.url, git.reference
        ));
    }
    if let Some(env) = &spec.env {
        out.push_str(&format!("  Environment:   {env}\n"));
    }
    out.push_str(&format!(
        "  Approval:      {:?}{}\n  Drift:         {:?}\n  Interval:      {}{}\n",
        spec.approval.mode,
        spec.approval
            .approved_plan
            .as_deref()
            .map_or(String::new(), |d| format!(" (approved {d})")),
        spec.drift.mode,
        spec.interval,
        if spec.suspend { " (suspended)" } else { "" }
    ));
    if let Some(d) = &status.last_applied_digest {
        out.push_str(&format!("  Last applied:  {d}\n"));
    }
    if let Some(t) = &status.last_planned {
        out.push_str(&format!("  Last planned:  {t}\n"));
    }
    if !status.conditions.is_empty() {
        out.push_str("\nConditions:\n");
        for c in &status.conditions {
            let message = if c.message.is_empty() {
                String::new()
            } else {
                format!(": {}", c.message)
            };
            out.push_str(&format!(
                "  {:<12} {:<5} {}{message}\n",
                c.type_, c.status, c.reason
            ));
        }
    }
    if !status.drifted.is_empty() {
        out.push_str("\nChanged outside the stack:\n");
        for f in &status.drifted {
            out.push_str(&format!("  {f}\n"));
        }
    }
    if !status.outputs.is_empty() {
        out.push_str("\nOutputs:\n");
        for (k, v) in &status.outputs {
            out.push_str(&format!("  {k} = {v}\n"));
        }
    }
    match &status.pending_plan {
        Some(p) => {
            out.push_str(&format!(
                "\nPending plan {}{}\n  made {} against {}\n  {} to add, {} to change, {} to replace, {} to destroy{}\n  stored at {}\n",
                p.digest,
                if p.destroy_all { " (destroy)" } else { "" },
                p.planned_at,
                if p.lineage.is_empty() {
                    "no state yet".to_string()
                } else {
                    format!("state serial {} (lineage {})", p.serial, p.lineage)
                },
                p.add,
                p.change,
                p.replace,
                p.destroy,
                p.cost_delta.as_deref().map_or(String::new(), |c| format!("; cost {c} USD/h at most")),
                p.location
            ));
            for d in &p.disruptions {
                out.push_str(&format!("  disrupts: {d}\n"));
            }
        }
        None => out.push_str("\nNo plan is pending.\n"),
    }
    out
}
