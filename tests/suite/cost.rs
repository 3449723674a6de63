//! What plans cost, through the CLI on the sandbox: every billing resource of the four
//! scenario stacks shows its hourly range with the usage behind it (checked-in expected
//! output), one stack's total is computed here by hand from the shipped catalog, a plan
//! over `[stack] budget` fails naming what drives the cost, a price file overrides the
//! catalog, a machine type the catalog lacks is named as having no price, and
//! `terrain cost` prices the state.

use crate::common;

use common::Sandbox as Work;
use terrain::cost::Catalog;

use common::SCENARIO_STACKS as STACKS;

/// A work directory holding the stacks these tests use, with their shared modules.
fn with_stacks() -> Work {
    common::with_stacks(&[STACKS.as_slice(), &["modules"]].concat())
}

/// The cost part of a rendered plan: each resource line followed by its `$` lines, and
/// the total.
fn cost_lines(plan: &str) -> String {
    let mut out = Vec::new();
    let mut resource = None;
    let mut in_cost = false;
    for line in plan.lines() {
        if line.starts_with("  ") && !line.starts_with("      ") {
            resource = Some(line);
            in_cost = false;
        } else if line.starts_with("      $") || line.starts_with("      billed by") {
            if let Some(r) = resource.take() {
                out.push(r.to_string());
            }
            out.push(line.to_string());
            in_cost = true;
        } else if (in_cost && line.starts_with("          "))
            || line.starts_with("Cost: ")
            || line.starts_with("Note: ")
        {
            out.push(line.to_string());
        } else {
            in_cost = false;
        }
    }
    out.join("\n") + "\n"
}

#[test]
fn plans_price_every_billing_resource_of_the_scenario_stacks() {
    let work = with_stacks();
    for s in STACKS {
        let run = work.run(&[
            "plan",
            "-s",
            &format!("stacks/{s}"),
            "--sandbox",
            "--no-color",
        ]);
        run.success();
        work.expect(&format!("cost/{s}.txt"), &cost_lines(&run.stdout));
    }
}

/// Regression guard on the arithmetic: gke-accelerators' maximum, from the catalog's own
/// entries (us-central1): the Standard cluster fee, the TPU pool at 1 node × 4 v5e chips,
/// the L4 pool at 5 nodes × g2-standard-24 (its GPUs are in the machine's price).
#[test]
fn the_total_is_the_sum_of_catalog_prices_times_usage() {
    let catalog = Catalog::shipped();
    let price = |meter: &str, item: &str| {
        catalog
            .get(meter, item, "us-central1")
            .unwrap_or_else(|| panic!("the catalog prices {meter} {item}"))
            .usd
    };
    let max = price("gke.cluster", "standard")
        + 4.0 * price("tpu.chip", "ct5lp")
        + 5.0 * price("gce.vm", "g2-standard-24");
    let idle = price("gke.cluster", "standard");
    let work = with_stacks();
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--no-color",
    ]);
    run.success();
    let want = format!("Cost: $0.00/h now → ${idle:.2}/h idle … ${max:.2}/h at max.");
    assert!(
        run.stdout.lines().any(|l| l == want),
        "want `{want}` in:\n{}",
        run.stdout
    );
    let json = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--json",
    ]);
    json.success();
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("plan JSON");
    let at_max = v["cost"]["after_hourly_max"].as_f64().expect("a total");
    assert!((at_max - max).abs() < 1e-9, "{at_max} vs {max}");
    let pool = v["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["address"] == "module.gpu.gke_node_pool.main")
        .expect("the GPU pool");
    assert_eq!(
        pool["cost"]["hourly_min"], 0.0,
        "an idle pool costs nothing"
    );
    assert_eq!(pool["cost"]["lines"][0]["usage"]["meter"], "gce.vm");
}

#[test]
fn a_plan_over_the_budget_fails_naming_what_drives_the_cost_and_changes_nothing() {
    let work = with_stacks();
    let stack = work.join("stacks/gke-accelerators/stack.toml");
    let text = std::fs::read_to_string(&stack).expect("read the stack");
    let text = text.replacen("[stack]\n", "[stack]\nbudget = { max_hourly = 5.0 }\n", 1);
    assert!(text.contains("max_hourly"), "the stack has a [stack] table");
    std::fs::write(&stack, text).expect("write the stack");
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--no-color",
    ]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("over the stack's budget of $5.00/h")
            && run
                .stderr
                .contains("module.gpu.gke_node_pool.main ($10.00/h at max)"),
        "{}",
        run.stderr
    );
    let apply = work.run(&[
        "apply",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--auto-approve",
    ]);
    apply.expect_code(1);
    assert!(!apply.stdout.contains("creating..."), "{}", apply.stdout);
}

#[test]
fn a_price_file_overrides_the_catalog_and_what_it_lacks_is_named() {
    let work = with_stacks();
    work.write(
        "negotiated.toml",
        r#"
[[price]]
meter  = "gce.vm"
item   = "g2-standard-24"
region = "us-central1"
unit   = "hour"
usd    = 1.0
source = "https://example.com/our-agreement"
read   = "2026-11-01"
"#,
    );
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--no-color",
        "--prices",
        "negotiated.toml",
    ]);
    run.success();
    assert!(
        run.stdout
            .contains("0–5 nodes × g2-standard-24: $1.00/h per node"),
        "{}",
        run.stdout
    );
    // A region the catalog has no prices for: each usage is named, never guessed, and
    // the total says it leaves them out.
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--no-color",
        "--var",
        "region=asia-northeast1",
        "--var",
        "zone=asia-northeast1-a",
    ]);
    run.success();
    assert!(
        run.stdout.contains(
            "0–5 nodes × g2-standard-24: no price for gce.vm g2-standard-24 in asia-northeast1"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("Note: no price for gke_cluster.accelerators (gke.cluster standard), gke_node_pool.tpu (tpu.chip ct5lp), module.gpu.gke_node_pool.main (gce.vm g2-standard-24); the total leaves them out"),
        "{}",
        run.stdout
    );
}

#[test]
fn terrain_cost_prices_the_state() {
    let work = with_stacks();
    let empty = work.run(&["cost", "-s", "stacks/gke-gpu-pipelines", "--sandbox"]);
    empty.success();
    assert_eq!(empty.stdout, "Nothing in the state bills by the hour.\n");
    work.run(&[
        "apply",
        "-s",
        "stacks/gke-gpu-pipelines",
        "--sandbox",
        "--auto-approve",
    ])
    .success();
    let run = work.run(&["cost", "-s", "stacks/gke-gpu-pipelines", "--sandbox"]);
    run.success();
    let plan_total = {
        // The plan's maximum is what the state costs once applied.
        let stack = work.run(&[
            "cost",
            "-s",
            "stacks/gke-gpu-pipelines",
            "--sandbox",
            "--json",
        ]);
        stack.success();
        let v: serde_json::Value = serde_json::from_str(&stack.stdout).expect("JSON");
        v["total"]["after_hourly_max"].as_f64().expect("a total")
    };
    assert!(
        run.stdout
            .contains(&format!("… ${plan_total:.2}/h at max.")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("module.preemptible_gpu.gke_node_pool.main"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_bad_budget_or_price_file_setting_is_located_at_its_value() {
    let work = with_stacks();
    let stack = work.join("stacks/gke-accelerators/stack.toml");
    let text = std::fs::read_to_string(&stack).expect("read the stack");
    let text = text.replacen(
        "[stack]\n",
        "[pricing]\nfile = 3\n\n[stack]\nbudget = { max_hourly = \"lots\" }\n",
        1,
    );
    std::fs::write(&stack, text).expect("write the stack");
    let run = work.run(&["validate", "-s", "stacks/gke-accelerators"]);
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("stack.toml:6:8: pricing.file must be a plain string"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("stack.toml:9:26: stack.budget.max_hourly must be a positive number"),
        "{}",
        run.stderr
    );
}

/// A machine type that comes from a sensitive variable is hidden in the cost lines as in
/// the plan's fields, for a pool on the cluster the same stack creates.
#[test]
fn cost_lines_never_show_a_value_that_came_from_a_secret() {
    let work = with_stacks();
    common::gpu_machine_from_a_secret(&work);
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--no-color",
    ]);
    run.success();
    assert!(!run.stdout.contains("g2-standard-24"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("0–5 nodes × (sensitive value): $2.00/h per node"),
        "priced all the same: {}",
        run.stdout
    );
    let json = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--json",
    ]);
    json.success();
    assert!(!json.stdout.contains("g2-standard-24"), "{}", json.stdout);
}
