//! Renders a plan as Markdown for a pull-request comment (`terrain plan --markdown`): a
//! heading with the stack and the counts (bold when not zero), the cost before → after,
//! the warnings (the plan's and the policies'), a table of the actions (each replace
//! with the fields forcing it, each destroy in bold, each update with the fields it
//! changes), the moves and the drift, then the human plan without colour in a collapsed
//! `diff` block. A plan with nothing to do is one line (then its warnings and drift, if
//! it has any).
//!
//! Secrets never show: the table names fields, never values, and the full plan is the
//! human rendering, which redacts them. Nothing varies between runs (plan order, no
//! times), so the comment can be snapshotted. Amounts are code spans, which GitHub
//! never reads as `$…$` math.
//!
//! Resources with `lifecycle.prevent_destroy` need no call-out here: planning refuses
//! any plan that would destroy or replace one, so no such plan reaches a renderer.

use super::cost::{totals, Totals};
use super::Style;
use crate::diff::changed_paths;
use crate::plan::{Action, Change, Plan};

/// The most field names a table cell lists before saying how many more there are.
const MAX_FIELDS: usize = 10;

/// `plan` as Markdown; `policy_warnings` are what the policies warned about (each shown
/// like a warning of the plan's).
pub fn render(plan: &Plan, policy_warnings: &[String]) -> String {
    let title = format!(
        "terrain plan: {}{}",
        text(&plan.stack),
        if plan.destroy { " (destroy)" } else { "" }
    );
    let mut out = String::new();
    if !plan.has_changes() {
        out.push_str(&format!(
            "### {title} — no changes, live infrastructure matches the stack\n"
        ));
        push_warnings(&mut out, plan, policy_warnings);
        push_drift(&mut out, plan);
        return out;
    }
    out.push_str(&format!("### {title}\n\n{}\n", counts(plan)));
    if let Some(t) = plan.cost.as_ref().and_then(|c| totals(c, &mark)) {
        out.push_str(&cost(&t));
    }
    push_warnings(&mut out, plan, policy_warnings);
    // A plan that only moves state entries has no row.
    let rows: String = plan
        .changes
        .iter()
        .filter(|c| c.is_change())
        .map(|c| row(plan, c))
        .collect();
    if !rows.is_empty() {
        out.push_str("\n| | Address | Kind | Why |\n|---|---|---|---|\n");
        out.push_str(&rows);
    }
    if !plan.moved.is_empty() {
        out.push_str("\n**Moved:**\n\n");
        for m in &plan.moved {
            out.push_str(&format!(
                "- {} has moved to {}\n",
                code(&m.from),
                code(&m.to)
            ));
        }
    }
    push_drift(&mut out, plan);
    out.push_str(&full_plan(plan));
    out
}

/// `**7 to add**, 0 to change, 0 to replace, 0 to destroy`: every count that is not
/// zero in bold, so that a replace or a destroy stands out.
fn counts(plan: &Plan) -> String {
    let s = plan.summary();
    let count = |n: usize, what: &str| {
        if n == 0 {
            format!("{n} {what}")
        } else {
            format!("**{n} {what}**")
        }
    };
    let mut parts = vec![
        count(s.add, "to add"),
        count(s.change, "to change"),
        count(s.replace, "to replace"),
        count(s.destroy, "to destroy"),
    ];
    if !plan.moved.is_empty() {
        parts.push(count(plan.moved.len(), "moved"));
    }
    parts.join(", ")
}

/// Where an amount starts and ends in the text [`totals`] words, for [`priced`].
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';

fn mark(amount: String) -> String {
    format!("{OPEN}{amount}{CLOSE}")
}

/// Text worded by [`totals`] with [`mark`]: the amounts as code spans, the rest escaped.
fn priced(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&text(&rest[..i]));
        let after = &rest[i + OPEN.len_utf8()..];
        let end = after.find(CLOSE).unwrap_or(after.len());
        out.push_str(&code(&after[..end]));
        rest = after.get(end + CLOSE.len_utf8()..).unwrap_or("");
    }
    out.push_str(&text(rest));
    out
}

/// The cost paragraph: the total, what has no price, the budget's verdict.
fn cost(t: &Totals) -> String {
    let mut out = format!("\n{}.\n", priced(&t.line));
    if let Some(u) = &t.unpriced {
        out.push_str(&format!("\n**Note:** {}.\n", priced(u)));
    }
    if let Some(w) = &t.within_budget {
        out.push_str(&format!("\n{}.\n", priced(w)));
    }
    if let Some(o) = &t.over_budget {
        out.push_str(&format!("\n**Over budget:** {}.\n", priced(o)));
    }
    out
}

fn push_warnings(out: &mut String, plan: &Plan, policy_warnings: &[String]) {
    for w in &plan.warnings {
        out.push_str(&warning("Warning", w));
    }
    for w in policy_warnings {
        out.push_str(&warning("Policy warning", w));
    }
}

/// One warning as a quote: its first line after the label, the lines under it (the
/// terminal indents them) as a list nested as they were indented.
fn warning(label: &str, w: &str) -> String {
    let mut lines = w.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or_default();
    let mut out = format!("\n> **{label}:** {}\n", text(first.trim()));
    // The indents of the lines above that this one is under, and its own: its depth is
    // one more than the line above at most (a deeper jump would read as code).
    let mut under: Vec<usize> = Vec::new();
    for l in lines {
        let i = l.len() - l.trim_start().len();
        while under.last().is_some_and(|&u| u >= i) {
            under.pop();
        }
        under.push(i);
        let depth = under.len() - 1;
        out.push_str(&format!(
            "> {}- {}\n",
            "  ".repeat(depth),
            line_start(&text(l.trim()))
        ));
    }
    out
}

/// What changed outside terrain since the last apply.
fn push_drift(out: &mut String, plan: &Plan) {
    let drifted: Vec<&Change> = plan.drifted().collect();
    if drifted.is_empty() {
        return;
    }
    out.push_str("\n**Changed outside terrain since the last apply:**\n\n");
    for c in drifted {
        let Some(d) = &c.drift else { continue };
        match &d.live {
            None => out.push_str(&format!(
                "- {} was deleted outside terrain\n",
                code(&c.address.to_string())
            )),
            Some(live) => out.push_str(&format!(
                "- {} changed outside terrain: {}\n",
                code(&c.address.to_string()),
                fields(&changed_paths(&d.recorded, live, &[]))
            )),
        }
    }
}

/// One row of the table: symbol, address (bold for a destroy), kind, why.
fn row(plan: &Plan, c: &Change) -> String {
    let address = code(&c.address.to_string());
    let destroys = matches!(c.action, Action::Delete | Action::Replace) || !c.deposed.is_empty();
    let address = if destroys {
        format!("**{address}**")
    } else {
        address
    };
    let cells = [code(symbol(c)), address, text(&c.kind), why(plan, c)];
    let mut out = String::from("|");
    for cell in cells {
        let cell = cell.replace('\n', " ").replace('|', "\\|");
        if cell.is_empty() {
            out.push_str(" |");
        } else {
            out.push_str(&format!(" {cell} |"));
        }
    }
    out.push('\n');
    out
}

/// The symbol the human plan shows for `c`.
fn symbol(c: &Change) -> &'static str {
    match c.action {
        Action::Replace if c.create_before_destroy => "+/-",
        Action::NoOp => "-",
        a => a.symbol(),
    }
}

/// Why `c` happens, as far as a reviewer needs it: the fields an update changes, what
/// forces a replace, that a destroy is a removal from the stack.
fn why(plan: &Plan, c: &Change) -> String {
    let empty = serde_json::Value::Object(Default::default());
    let mut parts = Vec::new();
    match c.action {
        Action::Create => {
            if c.drift.as_ref().is_some_and(|d| d.live.is_none()) {
                parts.push("deleted outside terrain".to_string());
            }
        }
        Action::Update => {
            let before = c.before.as_ref().unwrap_or(&empty);
            let after = c.after.as_ref().unwrap_or(&empty);
            let changed = changed_paths(before, after, &[]);
            if !changed.is_empty() {
                parts.push(fields(&changed));
            }
        }
        Action::Replace => {
            if c.tainted {
                parts.push("tainted".to_string());
            }
            if !c.replace_because.is_empty() {
                parts.push(format!("{} forces replacement", fields(&c.replace_because)));
            }
            if c.create_before_destroy {
                parts.push("the new one created first".to_string());
            }
        }
        Action::Delete if !plan.destroy => parts.push("removed from the stack".to_string()),
        Action::Delete | Action::NoOp => {}
    }
    match c.deposed.len() {
        0 => {}
        1 => parts.push("1 old object to destroy".to_string()),
        n => parts.push(format!("{n} old objects to destroy")),
    }
    parts.join("; ")
}

/// Field names as code spans, `a`, `b.c`, the first few of many and how many more.
fn fields(names: &[String]) -> String {
    let mut out: Vec<String> = names.iter().take(MAX_FIELDS).map(|n| code(n)).collect();
    if names.len() > MAX_FIELDS {
        out.push(format!("{} more", names.len() - MAX_FIELDS));
    }
    out.join(", ")
}

/// The human plan, without colour and without its warnings (they are above), in a
/// collapsed `diff` block.
fn full_plan(plan: &Plan) -> String {
    let mut quiet = plan.clone();
    quiet.warnings.clear();
    let human = super::plan::render(
        &quiet,
        Style {
            tty: false,
            color: false,
        },
    );
    let body: String = human
        .trim_matches('\n')
        .lines()
        .map(|l| diff_line(l) + "\n")
        .collect();
    let fence = "`".repeat(longest_run(&body, '`').max(2) + 1);
    format!("\n<details><summary>Full plan</summary>\n\n{fence}diff\n{body}{fence}\n\n</details>\n")
}

/// A line of the human plan as a `diff` line: its action symbol (`+`, `-`, `~`, `-/+`,
/// `+/-`, and the signs of unified diffs under a field) moved to the start of the line,
/// where GitHub's diff highlighting looks for it, `~` written `!` (the diff syntax's
/// "changed"). Values written over several lines are indented deeper than any symbol
/// and stay as they are.
fn diff_line(line: &str) -> String {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let symbol = if indent <= 10 {
        ["-/+ ", "+/- ", "+ ", "- ", "~ "]
            .iter()
            .find(|s| rest.starts_with(*s))
            .map(|s| s.len() - 1)
    } else {
        None
    };
    // A unified diff's lines sit 10 columns in, their sign against the text.
    let symbol = symbol.or_else(|| {
        (indent == 10 && (rest.starts_with('+') || rest.starts_with('-'))).then_some(1)
    });
    match symbol {
        Some(n) => {
            let sym = if &rest[..n] == "~" { "!" } else { &rest[..n] };
            format!("{sym}{}{}", " ".repeat(indent), &rest[n..])
        }
        None => line.to_string(),
    }
}

/// The length of the longest run of `c` in `s`.
fn longest_run(s: &str, c: char) -> usize {
    let (mut longest, mut run) = (0, 0);
    for ch in s.chars() {
        run = if ch == c { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// `s` as a code span: fenced by more backticks than it holds in a row, padded when it
/// starts or ends with one, on one line.
fn code(s: &str) -> String {
    let s = s.replace('\n', " ");
    let fence = "`".repeat(longest_run(&s, '`') + 1);
    let pad = s.starts_with('`')
        || s.ends_with('`')
        || (s.starts_with(' ') && s.ends_with(' ') && !s.trim().is_empty());
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// `s` as literal Markdown text within a line: the characters that would start
/// emphasis, code, links, HTML or strikethrough escaped (an underscore only where it
/// could, not inside a word like `gke_node_pool`), an ampersand that could start an
/// entity written as one. A `|` is left to the table cells (see [`row`]).
fn text(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &ch) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|j| chars.get(j)).copied();
        let next = chars.get(i + 1).copied();
        let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        match ch {
            '\\' | '`' | '*' | '[' | ']' | '<' | '>' | '~' => {
                out.push('\\');
                out.push(ch);
            }
            '_' if !(word(prev) && word(next)) => out.push_str("\\_"),
            '&' if next.is_some_and(|c| c.is_alphanumeric() || c == '#') => out.push_str("&amp;"),
            '\n' => out.push(' '),
            _ => out.push(ch),
        }
    }
    out
}

/// Escaped text placed at the start of a line or list item: what would make it a
/// heading, a list, a quote or a rule there is escaped too.
fn line_start(s: &str) -> String {
    if s.starts_with(['#', '-', '+', '=']) {
        return format!("\\{s}");
    }
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && s[digits..].starts_with(['.', ')']) {
        return format!("{}\\{}", &s[..digits], &s[digits..]);
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Address;
    use crate::cost::{PlanCost, ResourceCost};
    use crate::plan::{Drift, Moved};
    use serde_json::json;

    fn change(address: &str, action: Action) -> Change {
        Change::of(Address::parse(address).expect("an address"), action)
    }

    fn plan(changes: Vec<Change>) -> Plan {
        Plan::of_changes("demo", changes)
    }

    /// The table's rows.
    fn rows(md: &str) -> Vec<&str> {
        md.lines()
            .filter(|l| l.starts_with("| `"))
            .collect::<Vec<_>>()
    }

    #[test]
    fn a_pipe_in_a_cell_is_escaped_and_backticks_get_a_longer_fence() {
        let mut c = change(r#"local_file.x["a|b"]"#, Action::Update);
        c.before = Some(json!({"say `hi`": 1, "p|q": 1}));
        c.after = Some(json!({"say `hi`": 2, "p|q": 2}));
        let md = render(&plan(vec![c]), &[]);
        assert_eq!(
            rows(&md),
            [r#"| `~` | `local_file.x["a\|b"]` | local_file | `p\|q`, `` say `hi` `` |"#],
            "{md}"
        );
    }

    #[test]
    fn code_spans_fence_and_pad_backticks() {
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`edge"), "`` `edge ``");
        assert_eq!(code("a``b`"), "``` a``b` ```");
        assert_eq!(code("two\nlines"), "`two lines`");
    }

    #[test]
    fn text_escapes_what_markdown_would_read() {
        assert_eq!(text("gke_node_pool.main"), "gke_node_pool.main");
        assert_eq!(
            text("_x_ *y* `z` [l](u) <b> ~s~"),
            r"\_x\_ \*y\* \`z\` \[l\](u) \<b\> \~s\~"
        );
        assert_eq!(
            text("IAM & Admin &amp; &#1;"),
            "IAM & Admin &amp;amp; &amp;#1;"
        );
        assert_eq!(text(r"a\b"), r"a\\b");
        assert_eq!(line_start("- item"), r"\- item");
        assert_eq!(line_start("# head"), r"\# head");
        assert_eq!(line_start("12. twelve"), r"12\. twelve");
        assert_eq!(line_start("12 twelve"), "12 twelve");
    }

    #[test]
    fn replaces_say_why_and_destroys_are_bold() {
        let mut r = change("local_file.a", Action::Replace);
        r.before = Some(json!({"path": "a", "content": "x"}));
        r.after = Some(json!({"path": "b", "content": "x"}));
        r.replace_because = vec!["path".into()];
        let mut d = change("random_id.run", Action::Delete);
        d.id = Some("abc".into());
        d.before = Some(json!({"byte_length": 4}));
        let md = render(&plan(vec![r, d]), &[]);
        assert!(
            md.starts_with(
                "### terrain plan: demo\n\n0 to add, 0 to change, **1 to replace**, **1 to destroy**\n"
            ),
            "{md}"
        );
        assert_eq!(
            rows(&md),
            [
                "| `-/+` | **`local_file.a`** | local_file | `path` forces replacement |",
                "| `-` | **`random_id.run`** | random_id | removed from the stack |",
            ]
        );
        assert!(md.contains("\n-/+ local_file.a must be replaced (path forces replacement)\n"));
        assert!(
            md.contains("\n!       path = \"a\" -> \"b\"  # forces replacement\n"),
            "{md}"
        );
        assert!(
            md.contains("\n-   random_id.run will be destroyed\n"),
            "{md}"
        );
    }

    #[test]
    fn secrets_are_named_never_shown() {
        let mut c = change("local_file.secret", Action::Update);
        c.before = Some(json!({"path": "s", "sensitive_content": "hunter2"}));
        c.after = Some(json!({"path": "s", "sensitive_content": "swordfish"}));
        c.sensitive_paths = vec!["sensitive_content".into()];
        let md = render(&plan(vec![c]), &[]);
        assert!(!md.contains("hunter2") && !md.contains("swordfish"), "{md}");
        assert!(md.contains("| `sensitive_content` |"), "{md}");
        assert!(
            md.contains("(sensitive value) -> (sensitive value)"),
            "{md}"
        );
    }

    #[test]
    fn a_multi_line_warning_becomes_a_nested_list_in_its_quote() {
        let w = "capacity: quota CPUS: 96 left\n  enough for the initial size\n    module.gpu.gke_node_pool.main: 3–5 nodes\n  to ask for more: the *Quotas* page";
        assert_eq!(
            warning("Warning", w),
            "\n> **Warning:** capacity: quota CPUS: 96 left\n\
             > - enough for the initial size\n\
             >   - module.gpu.gke_node_pool.main: 3–5 nodes\n\
             > - to ask for more: the \\*Quotas\\* page\n"
        );
        // A deeper jump is still one level down, never an indented code block.
        assert_eq!(
            warning("Warning", "a\n        - deep\n  b"),
            "\n> **Warning:** a\n> - \\- deep\n> - b\n"
        );
    }

    #[test]
    fn a_plan_without_changes_is_one_line() {
        let md = render(&plan(vec![change("local_file.a", Action::NoOp)]), &[]);
        assert_eq!(
            md,
            "### terrain plan: demo — no changes, live infrastructure matches the stack\n"
        );
    }

    #[test]
    fn moves_drift_and_policy_warnings_are_listed() {
        let mut c = change("local_file.b", Action::Create);
        c.after = Some(json!({"path": "b"}));
        c.drift = Some(Drift {
            recorded: json!({"path": "b"}),
            live: None,
        });
        let mut p = plan(vec![c]);
        p.moved.push(Moved {
            from: "local_file.old".into(),
            to: "local_file.new".into(),
        });
        let md = render(&p, &["gpu: local_file.b: no labels".into()]);
        let mut only_moves = p.clone();
        only_moves.changes.clear();
        let moved = render(&only_moves, &[]);
        assert!(
            moved.contains("**1 moved**") && !moved.contains("| Address |"),
            "{moved}"
        );
        assert!(
            md.contains("**1 to add**, 0 to change, 0 to replace, 0 to destroy, **1 moved**"),
            "{md}"
        );
        assert!(
            md.contains("\n- `local_file.old` has moved to `local_file.new`\n"),
            "{md}"
        );
        assert!(
            md.contains("\n- `local_file.b` was deleted outside terrain\n"),
            "{md}"
        );
        assert!(
            md.contains("| `+` | `local_file.b` | local_file | deleted outside terrain |"),
            "{md}"
        );
        assert!(
            md.contains("\n> **Policy warning:** gpu: local_file.b: no labels\n"),
            "{md}"
        );
    }

    #[test]
    fn amounts_are_code_spans_so_github_never_reads_them_as_math() {
        let mut c = change("gke_node_pool.gpu", Action::Create);
        c.after = Some(json!({"name": "gpu"}));
        let mut p = plan(vec![c]);
        let cost = |max| PlanCost {
            before: (0.0, 0.0),
            after: (1.0, 7.5),
            resources: vec![ResourceCost {
                address: "gke_node_pool.gpu".into(),
                lines: Vec::new(),
                hourly: (1.0, 7.5),
            }],
            max_hourly: Some(max),
        };
        p.cost = Some(cost(5.0));
        let md = render(&p, &[]);
        assert!(
            md.contains("\nCost: `$0.00/h` now → `$1.00/h` idle … `$7.50/h` at max.\n"),
            "{md}"
        );
        assert!(
            md.contains("\n**Over budget:** the plan costs up to `$7.50/h` at max, over the stack's budget of `$5.00/h` (stack.budget.max_hourly); most of it: gke_node_pool.gpu (`$7.50/h` at max).\n"),
            "{md}"
        );
        p.cost = Some(cost(10.0));
        let md = render(&p, &[]);
        assert!(
            md.contains("\nWithin the budget of `$10.00/h` at max.\n")
                && !md.contains("Over budget"),
            "{md}"
        );
    }

    #[test]
    fn diff_lines_start_with_their_symbol() {
        assert_eq!(diff_line("  + a will be created"), "+   a will be created");
        assert_eq!(
            diff_line("-/+ a must be replaced"),
            "-/+ a must be replaced"
        );
        assert_eq!(diff_line("      ~ n = 1 -> 2"), "!       n = 1 -> 2");
        assert_eq!(diff_line("          -old line"), "-          old line");
        assert_eq!(
            diff_line("            - yaml item"),
            "            - yaml item"
        );
        assert_eq!(diff_line("      $0.10/h"), "      $0.10/h");
    }
}
