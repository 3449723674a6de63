//! What a resource bills for, as its kind reads it from a spec: the meters of the price
//! catalog (`gce.vm`, `gce.gpu`, `tpu.chip`, `filestore.capacity`, …), the item and
//! region priced, and the quantity at the low and high end of what the spec allows (an
//! autoscaled pool from its minimum to its maximum). Kinds describe; the engine prices,
//! so a provider never carries prices and a price list never learns a spec's shape.

use serde::{Deserialize, Serialize};

/// One billed quantity of one resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// The catalog meter (`gce.vm`).
    pub meter: String,
    /// What is priced within the meter: a machine type, accelerator, tier or class; ""
    /// when the meter has one price.
    pub item: String,
    /// The region priced; "" when the spec does not say yet (the price is then not
    /// found, and the plan says why).
    pub region: String,
    /// Spot or preemptible capacity.
    pub spot: bool,
    /// Units billed at the low end (an autoscaler's minimum) and the high end.
    pub min: f64,
    pub max: f64,
    /// How the quantity came about, for the plan (`0–2 nodes × 1 GPU`).
    pub basis: String,
}

impl Usage {
    /// A fixed quantity of `meter`'s `item` in `region`.
    pub fn fixed(meter: &str, item: &str, region: &str, units: f64, basis: String) -> Usage {
        Usage {
            meter: meter.to_string(),
            item: item.to_string(),
            region: region.to_string(),
            spot: false,
            min: units,
            max: units,
            basis,
        }
    }

    /// The same usage between `min` and `max` units.
    pub fn ranging(mut self, min: f64, max: f64) -> Usage {
        self.min = min;
        self.max = max;
        self
    }

    /// The same usage on spot or preemptible capacity.
    pub fn spot(mut self, spot: bool) -> Usage {
        self.spot = spot;
        self
    }
}

/// A string of a spec that is known before apply.
pub fn known(value: &serde_json::Value) -> Option<&str> {
    value
        .as_str()
        .filter(|_| !crate::protocol::is_unknown(value))
        .filter(|s| !s.is_empty())
}

/// The GCP location a resource lands in: its own `location`, else the provider's region,
/// else its zone.
pub fn gcp_location(location: &serde_json::Value, config: &serde_json::Value) -> Option<String> {
    known(location)
        .or_else(|| known(&config["region"]))
        .or_else(|| known(&config["zone"]))
        .map(str::to_string)
}

/// The region of a GCP location: `us-central1-a` → `us-central1`, a region as it is.
pub fn gcp_region(location: &str) -> String {
    let parts: Vec<&str> = location.split('-').collect();
    match parts.as_slice() {
        [a, b, zone] if zone.len() == 1 => format!("{a}-{b}"),
        _ => location.to_string(),
    }
}

/// The region of an AWS availability zone: `us-east-1a` → `us-east-1`.
pub fn aws_region(zone: &str) -> String {
    let b = zone.as_bytes();
    match b {
        [.., digit, letter] if digit.is_ascii_digit() && letter.is_ascii_lowercase() => {
            zone[..zone.len() - 1].to_string()
        }
        _ => zone.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_come_from_locations() {
        assert_eq!(gcp_region("us-central1-a"), "us-central1");
        assert_eq!(gcp_region("europe-west4"), "europe-west4");
        assert_eq!(aws_region("us-east-1a"), "us-east-1");
        assert_eq!(aws_region("us-east-1"), "us-east-1");
    }
}
