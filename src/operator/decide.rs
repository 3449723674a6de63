//! Whether a freshly made plan is applied: the approval rules in one pure function, so
//! they are tested apart from the API server and the clouds. A plan is applied only
//! when its digest is the approved one, or the approval mode lets it through; drift
//! under `Report` waits for an approval by digest whatever the mode.

use super::crd::{ApprovalMode, DriftMode, StackSpec, StackStatus};

/// What the operator knows about the plan it just made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub digest: String,
    /// The content hash of the files and variables it was made from.
    pub inputs: String,
    pub has_changes: bool,
    pub disruptive: bool,
}

/// What to do with the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do: the live objects match the stack.
    Converged,
    /// Apply it; `why` says who let it through.
    Apply { why: Why },
    /// Keep it pending approval. `superseded` is the approved digest it replaces (the
    /// inputs, the state or the live objects moved since it was approved).
    Wait {
        superseded: Option<String>,
        drift: bool,
    },
}

/// Who let a plan through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Approved,
    Auto,
    NonDisruptive,
}

/// Whether the changes of a plan are drift: the stack's inputs are those last applied,
/// so the differences were made outside it.
pub fn is_drift(status: &StackStatus, facts: &Facts) -> bool {
    facts.has_changes && status.last_applied_inputs.as_deref() == Some(facts.inputs.as_str())
}

/// The decision for `facts` under `spec`, given what `status` recorded before.
pub fn decide(spec: &StackSpec, status: &StackStatus, facts: &Facts) -> Decision {
    if !facts.has_changes {
        return Decision::Converged;
    }
    let drift = is_drift(status, facts);
    let approved = spec.approval.approved_plan.as_deref();
    if approved == Some(facts.digest.as_str()) {
        return Decision::Apply { why: Why::Approved };
    }
    let held_for_review = drift && spec.drift.mode == DriftMode::Report;
    if !held_for_review {
        match spec.approval.mode {
            ApprovalMode::Auto => return Decision::Apply { why: Why::Auto },
            ApprovalMode::AutoIfNonDisruptive if !facts.disruptive => {
                return Decision::Apply {
                    why: Why::NonDisruptive,
                }
            }
            ApprovalMode::AutoIfNonDisruptive | ApprovalMode::Manual => {}
        }
    }
    // An approval of a plan that was pending (now or when it was first superseded),
    // which no longer matches.
    let superseded = approved
        .filter(|a| {
            status.pending_plan.as_ref().is_some_and(|p| p.digest == *a)
                || status.superseded_approval.as_deref() == Some(*a)
        })
        .map(str::to_string);
    Decision::Wait { superseded, drift }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::crd::{Approval, PendingPlan, Source};

    fn spec(mode: ApprovalMode, approved: Option<&str>, drift: DriftMode) -> StackSpec {
        StackSpec {
            source: Source::default(),
            env: None,
            vars: Default::default(),
            vars_from: Vec::new(),
            backend: None,
            interval: "5m".into(),
            suspend: false,
            approval: Approval {
                mode,
                approved_plan: approved.map(str::to_string),
            },
            drift: crate::operator::crd::DriftSpec {
                mode: drift,
                ignore: Vec::new(),
            },
            deletion_policy: Default::default(),
        }
    }

    fn facts(digest: &str, inputs: &str, disruptive: bool) -> Facts {
        Facts {
            digest: digest.into(),
            inputs: inputs.into(),
            has_changes: true,
            disruptive,
        }
    }

    fn pending(digest: &str) -> PendingPlan {
        PendingPlan {
            digest: digest.into(),
            serial: 1,
            lineage: "l".into(),
            add: 1,
            change: 0,
            replace: 0,
            destroy: 0,
            destroy_all: false,
            disruptive: false,
            disruptions: Vec::new(),
            cost_delta: None,
            location: "x".into(),
            state: "y".into(),
            planned_at: "now".into(),
        }
    }

    #[test]
    fn manual_applies_only_the_approved_digest() {
        let status = StackStatus::default();
        let f = facts("sha256:a", "in1", false);
        assert_eq!(
            decide(
                &spec(ApprovalMode::Manual, None, DriftMode::Report),
                &status,
                &f
            ),
            Decision::Wait {
                superseded: None,
                drift: false
            }
        );
        assert_eq!(
            decide(
                &spec(ApprovalMode::Manual, Some("sha256:a"), DriftMode::Report),
                &status,
                &f
            ),
            Decision::Apply { why: Why::Approved }
        );
    }

    #[test]
    fn an_approval_of_the_pending_plan_is_superseded_when_the_plan_moves() {
        let status = StackStatus {
            pending_plan: Some(pending("sha256:a")),
            ..StackStatus::default()
        };
        let f = facts("sha256:b", "in2", false);
        assert_eq!(
            decide(
                &spec(ApprovalMode::Manual, Some("sha256:a"), DriftMode::Report),
                &status,
                &f
            ),
            Decision::Wait {
                superseded: Some("sha256:a".into()),
                drift: false
            }
        );
        // Still superseded once the new plan is the pending one.
        let later = StackStatus {
            pending_plan: Some(pending("sha256:b")),
            superseded_approval: Some("sha256:a".into()),
            ..StackStatus::default()
        };
        assert_eq!(
            decide(
                &spec(ApprovalMode::Manual, Some("sha256:a"), DriftMode::Report),
                &later,
                &f
            ),
            Decision::Wait {
                superseded: Some("sha256:a".into()),
                drift: false
            }
        );
    }

    #[test]
    fn auto_if_non_disruptive_waits_for_destroys_and_shrinks() {
        let s = spec(ApprovalMode::AutoIfNonDisruptive, None, DriftMode::Correct);
        let status = StackStatus::default();
        assert_eq!(
            decide(&s, &status, &facts("sha256:a", "i", false)),
            Decision::Apply {
                why: Why::NonDisruptive
            }
        );
        assert!(matches!(
            decide(&s, &status, &facts("sha256:a", "i", true)),
            Decision::Wait { .. }
        ));
    }

    #[test]
    fn reported_drift_waits_for_an_approval_even_under_auto() {
        let status = StackStatus {
            last_applied_inputs: Some("in1".into()),
            ..StackStatus::default()
        };
        let f = facts("sha256:d", "in1", false);
        assert_eq!(
            decide(
                &spec(ApprovalMode::Auto, None, DriftMode::Report),
                &status,
                &f
            ),
            Decision::Wait {
                superseded: None,
                drift: true
            }
        );
        assert_eq!(
            decide(
                &spec(ApprovalMode::Auto, None, DriftMode::Correct),
                &status,
                &f
            ),
            Decision::Apply { why: Why::Auto }
        );
        assert_eq!(
            decide(
                &spec(ApprovalMode::Manual, Some("sha256:d"), DriftMode::Report),
                &status,
                &f
            ),
            Decision::Apply { why: Why::Approved }
        );
    }

    #[test]
    fn no_changes_is_converged_whatever_was_approved() {
        let mut f = facts("sha256:a", "i", true);
        f.has_changes = false;
        assert_eq!(
            decide(
                &spec(ApprovalMode::Auto, Some("sha256:a"), DriftMode::Correct),
                &StackStatus::default(),
                &f
            ),
            Decision::Converged
        );
    }
}
