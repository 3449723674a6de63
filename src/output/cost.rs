//! Renders what a plan or a state costs: a few lines under each billing resource of a
//! plan (its hourly range and how it comes about, each usage priced or named as having
//! no price), the stack's total before → after at the end, the budget verdict, and
//! `terrain cost`'s table. `--json` carries the same as data; [`totals`] words the
//! summary once for both the human plan and its Markdown (`plan --markdown`). In
//! `--json`, a usage text hidden because it quotes a secret (`(sensitive value)` in the
//! lines people read) is `null`, named in the usage's `sensitive` list.

use serde_json::{json, Value};

use super::Style;
use crate::cost::{hourly_range, usd, Line, PlanCost, ResourceCost, Unit, SPOT_SHARE};

const INDENT: &str = "      ";

fn per_hour(amount: f64) -> String {
    format!("{}/h", usd(amount))
}

/// What one unit of a meter is, as a plan says it.
fn noun(meter: &str) -> &'static str {
    match meter {
        "gce.gpu" | "autopilot.gpu" => "GPU",
        "tpu.chip" => "chip",
        "autopilot.vcpu" => "vCPU",
        "autopilot.memory" => "GiB",
        "gke.cluster" | "eks.cluster" => "cluster",
        _ => "node",
    }
}

/// The lines under one resource of a plan.
pub fn resource_lines(rc: &ResourceCost, style: Style) -> String {
    // Storage billed by what is stored has a rate, not an hourly cost.
    let headline = if rc.lines.iter().all(|l| l.hourly.is_none()) {
        "billed by what is stored".to_string()
    } else {
        hourly_range(rc.hourly)
    };
    let mut out = format!("{INDENT}{}\n", style.paint("36", &headline));
    for line in &rc.lines {
        out.push_str(&format!("{INDENT}    {}\n", describe(line)));
    }
    out
}

/// One usage, priced: `0–3 nodes × g2-standard-24, spot: $0.96/h each`.
fn describe(line: &Line) -> String {
    let u = &line.usage;
    let spot = if u.spot { ", spot" } else { "" };
    match (line.unit_usd, line.unit, line.hourly) {
        (None, _, _) => {
            let region = if u.region.is_empty() {
                "a region not known before apply".to_string()
            } else {
                u.region.clone()
            };
            format!(
                "{}{spot}: no price for {} {} in {region}",
                u.basis, u.meter, u.item
            )
        }
        (Some(unit_usd), Some(Unit::GibMonth), None) => {
            format!("{}{spot}: {} per GiB-month", u.basis, usd(unit_usd))
        }
        (Some(unit_usd), unit, _) => {
            let one = u.min == 1.0 && u.max == 1.0;
            let per = match unit {
                Some(Unit::GibMonth) => format!("{} per GiB-month", usd(unit_usd)),
                _ if one => format!("{}/h", usd(unit_usd)),
                _ => format!("{}/h per {}", usd(unit_usd), noun(&u.meter)),
            };
            let estimated = if line.spot_estimated {
                format!(
                    " (spot estimated at {:.0}% of on-demand)",
                    SPOT_SHARE * 100.0
                )
            } else {
                String::new()
            };
            format!("{}{spot}: {per}{estimated}", u.basis)
        }
    }
}

/// The parts of a plan's cost summary, worded once for every renderer: the terminal
/// shows them as they are, Markdown with its amounts in code spans (see [`totals`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Totals {
    /// `Cost: $0.00/h now → $0.38/h idle … $0.39/h at max`.
    pub line: String,
    /// `no price for …; the total leaves them out …`, when some usage has no price.
    pub unpriced: Option<String>,
    /// `Within the budget of $5.00/h at max`, when a budget holds the plan.
    pub within_budget: Option<String>,
    /// Why the plan is over its budget (as [`over_budget`] says it), when it is.
    pub over_budget: Option<String>,
}

/// The cost summary of a plan, each amount (`$0.38/h`) passed through `amount`; `None`
/// when nothing bills before or after the plan.
pub fn totals(cost: &PlanCost, amount: &dyn Fn(String) -> String) -> Option<Totals> {
    if cost.resources.is_empty() && cost.before == (0.0, 0.0) {
        return None;
    }
    let line = format!(
        "Cost: {} now → {} idle … {} at max",
        amount(hourly_range(cost.before)),
        amount(per_hour(cost.after.0)),
        amount(per_hour(cost.after.1)),
    );
    let unpriced: Vec<String> = cost
        .resources
        .iter()
        .flat_map(|r| {
            r.unpriced()
                .map(move |u| format!("{} ({} {})", r.address, u.meter, u.item))
        })
        .collect();
    let unpriced = (!unpriced.is_empty()).then(|| {
        format!(
            "no price for {}; the total leaves them out (a [pricing] file can give them one)",
            unpriced.join(", ")
        )
    });
    let within_budget = cost
        .max_hourly
        .filter(|_| cost.over_budget().is_none())
        .map(|max| format!("Within the budget of {} at max", amount(per_hour(max))));
    let over_budget = cost
        .over_budget()
        .map(|max| over_budget_with(cost, max, amount));
    Some(Totals {
        line,
        unpriced,
        within_budget,
        over_budget,
    })
}

/// The stack's total before → after, and what has no price.
pub fn summary(cost: &PlanCost, style: Style) -> String {
    let Some(t) = totals(cost, &|a| a) else {
        return String::new();
    };
    let mut out = format!("\n{}.\n", t.line);
    if let Some(unpriced) = &t.unpriced {
        out.push_str(&format!("{} {unpriced}.\n", style.paint("33", "Note:")));
    }
    if let Some(within) = &t.within_budget {
        out.push_str(&format!("{within}.\n"));
    }
    out
}

/// Why a plan over its budget fails: the budget, the maximum and what drives it.
pub fn over_budget(cost: &PlanCost, max: f64) -> String {
    over_budget_with(cost, max, &|a| a)
}

fn over_budget_with(cost: &PlanCost, max: f64, amount: &dyn Fn(String) -> String) -> String {
    let drivers: Vec<String> = cost
        .drivers()
        .into_iter()
        .take(5)
        .map(|r| format!("{} ({} at max)", r.address, amount(per_hour(r.hourly.1))))
        .collect();
    format!(
        "the plan costs up to {} at max, over the stack's budget of {} (stack.budget.max_hourly); most of it: {}",
        amount(per_hour(cost.after.1)),
        amount(per_hour(max)),
        drivers.join(", ")
    )
}

/// `terrain cost`: one line per billing resource of the state, then the total.
pub fn table(cost: &PlanCost) -> String {
    let width = cost
        .resources
        .iter()
        .map(|r| r.address.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for r in &cost.resources {
        out.push_str(&format!(
            "{:width$}  {}\n",
            r.address,
            hourly_range(r.hourly)
        ));
        for line in &r.lines {
            out.push_str(&format!("{:width$}    {}\n", "", describe(line)));
        }
    }
    if cost.resources.is_empty() {
        out.push_str("Nothing in the state bills by the hour.\n");
    } else {
        out.push_str(&format!(
            "\nTotal: {} idle … {} at max.\n",
            per_hour(cost.after.0),
            per_hour(cost.after.1)
        ));
    }
    out
}

/// The cost of one resource for `plan --json` and `cost --json`.
pub fn resource_json(rc: &ResourceCost) -> Value {
    json!({
        "hourly_min": rc.hourly.0,
        "hourly_max": rc.hourly.1,
        "lines": rc.lines.iter().map(line_json).collect::<Vec<_>>(),
    })
}

/// One priced usage as data. The engine hides a secret in a usage's texts (`item`,
/// `region`, `basis`) as [`crate::desired::HIDDEN`]; such a text is `null` here and its
/// name is in the usage's `sensitive` list (empty when nothing is hidden).
fn line_json(line: &Line) -> Value {
    let mut v = serde_json::to_value(line).unwrap_or_default();
    if let Some(usage) = v.get_mut("usage").and_then(Value::as_object_mut) {
        let mut hidden = Vec::new();
        for (field, text) in usage.iter_mut() {
            if text
                .as_str()
                .is_some_and(|t| t.contains(crate::desired::HIDDEN))
            {
                *text = Value::Null;
                hidden.push(Value::String(field.clone()));
            }
        }
        usage.insert("sensitive".into(), Value::Array(hidden));
    }
    v
}

/// The plan's totals for `plan --json`.
pub fn totals_json(cost: &PlanCost) -> Value {
    json!({
        "before_hourly_min": cost.before.0,
        "before_hourly_max": cost.before.1,
        "after_hourly_min": cost.after.0,
        "after_hourly_max": cost.after.1,
        "budget_max_hourly": cost.max_hourly,
        "over_budget": cost.over_budget().is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrain_providers::Usage;

    #[test]
    fn json_hides_a_usage_text_that_quotes_a_secret_as_null_and_names_it() {
        let hidden = crate::desired::HIDDEN;
        let usage = Usage::fixed(
            "gce.vm",
            hidden,
            "us-central1",
            1.0,
            format!("1 node × {hidden}"),
        );
        let rc = ResourceCost {
            address: "gke_node_pool.gpu".into(),
            lines: vec![Line {
                usage,
                unit_usd: Some(2.0),
                unit: Some(Unit::Hour),
                hourly: Some((2.0, 2.0)),
                spot_estimated: false,
                source: None,
            }],
            hourly: (2.0, 2.0),
        };
        let v = resource_json(&rc);
        let u = &v["lines"][0]["usage"];
        assert_eq!(u["item"], Value::Null);
        assert_eq!(u["basis"], Value::Null);
        assert_eq!(u["region"], "us-central1");
        assert_eq!(u["sensitive"], json!(["item", "basis"]));
        assert!(!v.to_string().contains(hidden), "{v}");
        assert!(
            describe(&rc.lines[0]).contains(hidden),
            "people still read the marker"
        );
        let plain = ResourceCost {
            lines: vec![Line {
                usage: Usage::fixed("gce.vm", "n2", "us-central1", 1.0, "1 node".into()),
                ..rc.lines[0].clone()
            }],
            ..rc
        };
        assert_eq!(
            resource_json(&plain)["lines"][0]["usage"]["sensitive"],
            json!([])
        );
    }
}
