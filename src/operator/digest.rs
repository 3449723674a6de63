//! What identifies a plan for approval, and what the operator says about one: its
//! digest (the canonical plan, the state serial and lineage it was made against, and
//! the content of the files and variables it was made from, never a commit id), what
//! in it disrupts (destroys, replaces, node pools shrunk), and which fields of the live
//! objects drifted.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::plan::{Action, Plan};

/// The content hash of a stack's inputs: its files (path and bytes, in path order), its
/// environment and its variables (name and value, in name order). Committing an
/// approval elsewhere, or the same files arriving from another commit, changes nothing.
pub fn inputs_hash(
    files: &BTreeMap<String, Vec<u8>>,
    env: Option<&str>,
    vars: &BTreeMap<String, String>,
) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        // Length-prefixed, so no two different inputs hash the same bytes.
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    for (path, bytes) in files {
        field(b"file");
        field(path.as_bytes());
        field(bytes);
    }
    field(b"env");
    field(env.unwrap_or_default().as_bytes());
    for (name, value) in vars {
        field(b"var");
        field(name.as_bytes());
        field(value.as_bytes());
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// The digest of `plan` made from inputs whose [`inputs_hash`] is `inputs`, after the
/// plan whose digest is `previous` was applied: what an approval names. Two plans have
/// the same digest exactly when they would do the same to the same state from the same
/// inputs after the same apply, so an approval is spent by its apply: the same changes
/// again (drift that comes back, when the state records nothing new) are a new plan.
pub fn plan_digest(plan: &Plan, inputs: &str, previous: Option<&str>) -> String {
    let changes: Vec<Value> = plan
        .changes
        .iter()
        .filter(|c| c.is_change())
        .map(|c| {
            json!({
                "address": c.address.to_string(),
                "kind": c.kind,
                "action": c.action,
                "id": c.id,
                "before": c.before,
                "after": c.after,
                "replace_because": c.replace_because,
                "deposed": c.deposed.len(),
            })
        })
        .collect();
    let canonical = json!({
        "digest_version": 1,
        "stack": plan.stack,
        "stack_hash": plan.stack_hash,
        "inputs": inputs,
        "after": previous,
        "destroy": plan.destroy,
        "targets": plan.targets.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "lineage": plan.lineage,
        "serial": plan.serial,
        "changes": changes,
        "moved": plan.moved,
    });
    let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The name a plan is stored under beside the state: its digest, file-safe.
pub fn plan_file(digest: &str) -> String {
    format!("{}.json", digest.replace(':', "-"))
}

/// Numeric fields of node pools and node groups whose decrease shrinks a pool.
const SIZE_FIELDS: &[&str] = &[
    "node_count",
    "min",
    "max",
    "desired",
    "min_size",
    "max_size",
    "desired_size",
];

/// What in `plan` disrupts running work: each destroy, replace and node pool shrink,
/// as `ADDRESS: what`. Empty when the plan only adds and changes in place.
pub fn disruptions(plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for c in plan.changes.iter().filter(|c| c.is_change()) {
        match c.action {
            Action::Delete => out.push(format!("{}: destroyed", c.address)),
            Action::Replace => {
                let why = if c.replace_because.is_empty() {
                    String::new()
                } else {
                    format!(" ({} cannot change in place)", c.replace_because.join(", "))
                };
                out.push(format!("{}: replaced{why}", c.address));
            }
            Action::Update if c.kind.contains("node_pool") || c.kind.contains("node_group") => {
                if let (Some(before), Some(after)) = (&c.before, &c.after) {
                    let mut shrunk = Vec::new();
                    shrinks(before, after, "", &mut shrunk);
                    for field in shrunk {
                        out.push(format!("{}: {field}", c.address));
                    }
                }
            }
            Action::Update | Action::Create | Action::NoOp => {}
        }
        if !c.deposed.is_empty() {
            out.push(format!("{}: old objects destroyed", c.address));
        }
    }
    out
}

/// Size fields under `path` that are smaller in `after` than in `before`.
fn shrinks(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    let (Value::Object(b), Value::Object(a)) = (before, after) else {
        return;
    };
    for (key, old) in b {
        let Some(new) = a.get(key) else { continue };
        let here = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match (old.as_f64(), new.as_f64()) {
            (Some(o), Some(n)) if SIZE_FIELDS.contains(&key.as_str()) && n < o => {
                out.push(format!("{here} shrinks from {old} to {new}"));
            }
            _ => shrinks(old, new, &here, out),
        }
    }
}

/// The fields of live objects that differ from what the stack says, as
/// `ADDRESS.FIELD` (an object gone outside the stack is `ADDRESS`), less those
/// `ignore` names (`ADDRESS.FIELD`, or `ADDRESS` for all of one object's).
pub fn drifted_fields(plan: &Plan, ignore: &[String]) -> Vec<String> {
    let ignored = |field: &str| {
        ignore.iter().any(|i| {
            field == i
                || field
                    .strip_prefix(i.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    };
    let mut out = Vec::new();
    for c in plan.changes.iter().filter(|c| c.is_change()) {
        let address = c.address.to_string();
        match (&c.action, &c.before, &c.after) {
            (Action::Update | Action::Replace, Some(Value::Object(b)), Some(Value::Object(a))) => {
                let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
                for key in keys {
                    if b.get(key) != a.get(key) {
                        out.push(format!("{address}.{key}"));
                    }
                }
            }
            _ => out.push(address),
        }
    }
    out.retain(|f| !ignored(f));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Address;
    use crate::plan::Change;

    fn addr(s: &str) -> Address {
        s.parse().expect("address")
    }

    fn update(kind: &str, a: &str, before: Value, after: Value) -> Change {
        let mut c = Change::of(addr(a), Action::Update);
        c.kind = kind.into();
        c.before = Some(before);
        c.after = Some(after);
        c
    }

    #[test]
    fn the_digest_moves_with_the_state_serial_the_inputs_and_the_changes() {
        let c = update(
            "gcs_bucket",
            "gcs_bucket.data",
            json!({"labels": {"a": "1"}}),
            json!({"labels": {"a": "2"}}),
        );
        let plan = Plan::of_changes("s", vec![c.clone()]);
        let d = plan_digest(&plan, "sha256:in", None);
        assert!(d.starts_with("sha256:") && d.len() == 71, "{d}");
        assert_eq!(
            d,
            plan_digest(&plan.clone(), "sha256:in", None),
            "deterministic"
        );
        assert_ne!(d, plan_digest(&plan, "sha256:other", None), "inputs");
        let mut moved = plan.clone();
        moved.serial += 1;
        assert_ne!(d, plan_digest(&moved, "sha256:in", None), "serial");
        let mut other = plan.clone();
        other.lineage = "another".into();
        assert_ne!(d, plan_digest(&other, "sha256:in", None), "lineage");
        let mut changed = c;
        changed.after = Some(json!({"labels": {"a": "3"}}));
        assert_ne!(
            d,
            plan_digest(&Plan::of_changes("s", vec![changed]), "sha256:in", None),
            "changes"
        );
        // What the plan learned besides its changes does not move it.
        let mut warned = plan.clone();
        warned.warnings.push("note".into());
        assert_eq!(d, plan_digest(&warned, "sha256:in", None));
        // The same changes after an apply are another plan: an approval is spent.
        assert_ne!(
            d,
            plan_digest(&plan, "sha256:in", Some(&d)),
            "after an apply"
        );
    }

    #[test]
    fn inputs_hash_tells_files_env_and_vars_apart() {
        let files = BTreeMap::from([("main.toml".to_string(), b"x".to_vec())]);
        let vars = BTreeMap::from([("a".to_string(), "b".to_string())]);
        let h = inputs_hash(&files, None, &vars);
        assert_eq!(h, inputs_hash(&files, None, &vars));
        assert_ne!(h, inputs_hash(&files, Some("prod"), &vars));
        assert_ne!(h, inputs_hash(&files, None, &BTreeMap::new()));
        let renamed = BTreeMap::from([("other.toml".to_string(), b"x".to_vec())]);
        assert_ne!(h, inputs_hash(&renamed, None, &vars));
    }

    #[test]
    fn destroys_replaces_and_pool_shrinks_are_disruptive_growth_is_not() {
        let mut replace = Change::of(addr("gke_cluster.main"), Action::Replace);
        replace.replace_because = vec!["location".into()];
        let plan = Plan::of_changes(
            "s",
            vec![
                Change::of(addr("gcs_bucket.old"), Action::Delete),
                replace,
                update(
                    "gke_node_pool",
                    "gke_node_pool.gpu",
                    json!({"autoscaling": {"min": 0, "max": 4}}),
                    json!({"autoscaling": {"min": 0, "max": 2}}),
                ),
                update(
                    "eks_node_group",
                    "eks_node_group.cpu",
                    json!({"scaling": {"min": 1, "max": 3}}),
                    json!({"scaling": {"min": 1, "max": 5}}),
                ),
                Change::of(addr("gcs_bucket.new"), Action::Create),
            ],
        );
        assert_eq!(
            disruptions(&plan),
            vec![
                "gcs_bucket.old: destroyed",
                "gke_cluster.main: replaced (location cannot change in place)",
                "gke_node_pool.gpu: autoscaling.max shrinks from 4 to 2",
            ]
        );
    }

    #[test]
    fn drifted_fields_name_each_changed_field_less_the_ignored_ones() {
        let plan = Plan::of_changes(
            "s",
            vec![
                update(
                    "gcs_bucket",
                    "gcs_bucket.data",
                    json!({"labels": {"a": "x"}, "location": "EU", "versioning": true}),
                    json!({"labels": {"a": "1"}, "location": "EU", "versioning": false}),
                ),
                Change::of(addr("gcs_bucket.gone"), Action::Create),
            ],
        );
        assert_eq!(
            drifted_fields(&plan, &[]),
            vec![
                "gcs_bucket.data.labels",
                "gcs_bucket.data.versioning",
                "gcs_bucket.gone"
            ]
        );
        assert_eq!(
            drifted_fields(
                &plan,
                &["gcs_bucket.data.labels".into(), "gcs_bucket.gone".into()]
            ),
            vec!["gcs_bucket.data.versioning"]
        );
    }
}
