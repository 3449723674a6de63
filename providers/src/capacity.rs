//! What a resource asks of its cloud's capacity, and what a cloud answers at plan time.
//!
//! A kind reads a [`Demand`] offline from a spec (the machines, accelerators, zones or
//! subnets, spot or not, and how many nodes at creation and at most), as it reads what
//! it bills for. Each cloud's preflight (`gcp/capacity.rs`, `aws/capacity.rs`) then asks
//! its read-only APIs whether those machines are offered where the nodes land and
//! whether the quotas they count against hold them, summing over every resource of the
//! run, and answers with [`Finding`]s: an error when even the minimum does not fit, a
//! warning when only the maximum does not. The engine decides nothing about clouds; it
//! gathers the demands and reports the findings.

use serde::{Deserialize, Serialize};

/// What one resource's nodes need of its cloud.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Demand {
    /// The region whose quotas count the nodes; "" when the spec does not say yet.
    pub region: String,
    /// The zones the nodes land in (GCP), when known; empty when the cloud picks them
    /// (a regional GKE cluster's default zones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// How many zones the nodes spread over when `zones` is empty (GKE's default three
    /// for a regional cluster).
    #[serde(default)]
    pub zone_count: u32,
    /// The subnets the nodes land in (AWS), when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    /// The machine or instance types, preferred first (an EKS node group launches the
    /// first it has capacity for; a GKE node pool's fallback machine types follow its
    /// own).
    pub machine_types: Vec<String>,
    /// Zones the nodes may go to instead when the declared ones are out of capacity (a
    /// GKE node pool's fallback zones): checked to offer what the pool needs, while the
    /// quotas count the declared placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_zones: Vec<String>,
    /// Accelerators attached to each node beyond what the machine type carries:
    /// (accelerator type, count).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accelerators: Vec<(String, u32)>,
    /// The TPU accelerator type of a TPU slice (`v5litepod-4`), whose chips count
    /// against a TPU quota instead of vCPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu: Option<String>,
    /// Spot or preemptible nodes, which count against their own quotas.
    #[serde(default)]
    pub spot: bool,
    /// Nodes in all at creation (the fixed or desired size, or the autoscaler's
    /// minimum) and at the most the spec allows.
    pub nodes: (u32, u32),
    /// How the node counts came about, for messages (`0–4 nodes × n1-standard-8`).
    pub basis: String,
}

/// One resource's demands for a preflight: once applied, and as the live object has
/// them now (so an unchanged pool asks for nothing more, and a grown one for the
/// difference).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Need {
    pub address: String,
    pub after: Vec<Demand>,
    pub before: Vec<Demand>,
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The stack cannot be applied as it is: not even its minimum fits, or a machine is
    /// not offered where it must run. The plan fails.
    Error,
    /// The stack applies, but its autoscalers cannot reach their maximum. Shown under
    /// the plan.
    Warning,
}

/// What a preflight found, about the resources it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub severity: Severity,
    /// The resources concerned, first the one most to blame.
    pub addresses: Vec<String>,
    /// The whole message: the quota or offering, the region or zone, the need and the
    /// limit, and how to get more.
    pub message: String,
}

impl Finding {
    pub fn error(addresses: Vec<String>, message: String) -> Self {
        Self {
            severity: Severity::Error,
            addresses,
            message,
        }
    }

    pub fn warning(addresses: Vec<String>, message: String) -> Self {
        Self {
            severity: Severity::Warning,
            addresses,
            message,
        }
    }
}

/// Units of one quota the run asks for, summed over resources: at creation and at the
/// most, with each resource's share for messages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub min: f64,
    pub max: f64,
    /// (address, units at creation, units at most, basis).
    pub shares: Vec<(String, f64, f64, String)>,
}

impl Tally {
    /// Adds what `address` asks for beyond what it holds already (`held`), never less
    /// than nothing: shrinking one pool frees quota only once it has shrunk.
    pub fn add(&mut self, address: &str, want: (f64, f64), held: (f64, f64), basis: &str) {
        let min = (want.0 - held.0).max(0.0);
        let max = (want.1 - held.1).max(0.0);
        if min == 0.0 && max == 0.0 {
            return;
        }
        self.min += min;
        self.max += max;
        self.shares
            .push((address.to_string(), min, max, basis.to_string()));
    }

    /// The resources asking, largest share at the most first.
    pub fn addresses(&self) -> Vec<String> {
        let mut shares: Vec<&(String, f64, f64, String)> = self.shares.iter().collect();
        shares.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        shares.into_iter().map(|s| s.0.clone()).collect()
    }

    /// One line per resource asking, largest first, each `indent`ed:
    /// `gke_node_pool.gpu: 0–4 nodes × 1 nvidia-tesla-t4`.
    pub fn listing(&self, indent: &str) -> String {
        let mut shares: Vec<&(String, f64, f64, String)> = self.shares.iter().collect();
        shares.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        shares
            .iter()
            .map(|(address, _, _, basis)| format!("{indent}{address}: {basis}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A quantity as messages write it: whole numbers without a fraction.
pub fn amount(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// `2 nodes`, `0–4 nodes`.
pub fn nodes_text(min: i64, max: i64) -> String {
    if min == max {
        format!("{max} node{}", if max == 1 { "" } else { "s" })
    } else {
        format!("{min}–{max} nodes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_only_what_is_asked_beyond_what_is_held() {
        let mut t = Tally::default();
        t.add("a", (2.0, 8.0), (0.0, 0.0), "new");
        // Unchanged: nothing more.
        t.add("b", (4.0, 4.0), (4.0, 4.0), "same");
        // Grown at its maximum only.
        t.add("c", (1.0, 6.0), (1.0, 2.0), "grown");
        // Shrunk: frees nothing before it has shrunk.
        t.add("d", (0.0, 0.0), (4.0, 4.0), "shrunk");
        assert_eq!((t.min, t.max), (2.0, 12.0));
        assert_eq!(t.addresses(), ["a", "c"]);
        assert_eq!(t.listing("  "), "  a: new\n  c: grown");
    }

    #[test]
    fn amounts_read_as_people_write_them() {
        assert_eq!(amount(4.0), "4");
        assert_eq!(amount(0.5), "0.50");
        assert_eq!(nodes_text(1, 1), "1 node");
        assert_eq!(nodes_text(0, 4), "0–4 nodes");
    }
}
