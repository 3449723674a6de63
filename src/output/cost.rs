//! Renders what a plan or a state costs: a few lines under each billing resource of a
//! plan (its hourly range and how it comes about, each usage priced or named as having
//! no price), the stack's total before → after at the end, the budget verdict, and
//! `terrain cost`'s table. `--json` carries the same as data.

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

/// The stack's total before → after, and what has no price.
pub fn summary(cost: &PlanCost, style: Style) -> String {
    if cost.resources.is_empty() && cost.before == (0.0, 0.0) {
        return String::new();
    }
    let mut out = format!(
        "\nCost: {} now → {} idle … {} at max.\n",
        hourly_range(cost.before),
        per_hour(cost.after.0),
        per_hour(cost.after.1),
    );
    let unpriced: Vec<String> = cost
        .resources
        .iter()
        .flat_map(|r| {
            r.unpriced()
                .map(move |u| format!("{} ({} {})", r.address, u.meter, u.item))
        })
        .collect();
    if !unpriced.is_empty() {
        out.push_str(&format!(
            "{} no price for {}; the total leaves them out (a [pricing] file can give them one).\n",
            style.paint("33", "Note:"),
            unpriced.join(", ")
        ));
    }
    if let Some(max) = cost.max_hourly {
        if cost.over_budget().is_none() {
            out.push_str(&format!("Within the budget of {}/h at max.\n", usd(max)));
        }
    }
    out
}

/// Why a plan over its budget fails: the budget, the maximum and what drives it.
pub fn over_budget(cost: &PlanCost, max: f64) -> String {
    let drivers: Vec<String> = cost
        .drivers()
        .into_iter()
        .take(5)
        .map(|r| format!("{} ({} at max)", r.address, per_hour(r.hourly.1)))
        .collect();
    format!(
        "the plan costs up to {}/h at max, over the stack's budget of {}/h (stack.budget.max_hourly); most of it: {}",
        usd(cost.after.1),
        usd(max),
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

/// The cost of one resource for `plan --json`.
pub fn resource_json(rc: &ResourceCost) -> Value {
    json!({
        "hourly_min": rc.hourly.0,
        "hourly_max": rc.hourly.1,
        "lines": rc.lines,
    })
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
