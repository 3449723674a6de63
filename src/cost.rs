//! What a plan costs: each billing resource's usage (as its kind reads it from the spec,
//! see `terrain_providers::usage`) priced from the catalog terrain ships
//! (`src/cost/prices.toml`: public list prices, each naming its region, unit, source and
//! the date read), with a user's price file laid over it (negotiated rates). Hourly
//! costs at the autoscaling minimum and maximum, spot apart; storage billed by what is
//! stored is shown as its rate. An unknown machine, class or region is named as having
//! no price, never guessed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use terrain_providers::Usage;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::stack::load::toml_to_json;

/// The prices terrain ships.
const SHIPPED: &str = include_str!("cost/prices.toml");

/// Hours in a month, as Google and AWS bill monthly rates by the hour.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// Where no spot price is published (EC2's vary by the hour), spot capacity is
/// estimated at this share of the on-demand price, and the plan says so.
pub const SPOT_SHARE: f64 = 0.35;

/// Why prices could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    #[error("could not read the price file {path}")]
    ReadPrices {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    ParsePrices { path: PathBuf, message: String },
}

/// How a price is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    Hour,
    GibMonth,
}

/// One catalog entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub meter: String,
    pub item: String,
    pub region: String,
    pub unit: Unit,
    pub usd: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<f64>,
    pub source: String,
    pub read: String,
}

/// The prices a plan is priced with.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    prices: BTreeMap<(String, String, String), Price>,
}

impl Catalog {
    /// The prices terrain ships, parsed once per process and shared: every engine starts
    /// with them.
    pub fn shipped() -> std::sync::Arc<Catalog> {
        static SHIPPED_CATALOG: std::sync::OnceLock<std::sync::Arc<Catalog>> =
            std::sync::OnceLock::new();
        SHIPPED_CATALOG
            .get_or_init(|| {
                let mut catalog = Catalog::default();
                // The shipped file is checked by a test; a broken one would fail it, not
                // a plan.
                if let Ok(prices) = parse(SHIPPED, Path::new("src/cost/prices.toml")) {
                    catalog.lay_over(prices);
                }
                std::sync::Arc::new(catalog)
            })
            .clone()
    }

    /// The shipped prices with the entries of `file` laid over them (same meter, item
    /// and region).
    pub fn with_file(file: &Path) -> Result<Catalog, CostError> {
        let text = std::fs::read_to_string(file).map_err(|source| CostError::ReadPrices {
            path: file.to_path_buf(),
            source,
        })?;
        let mut catalog = Catalog::clone(&Catalog::shipped());
        catalog.lay_over(parse(&text, file)?);
        Ok(catalog)
    }

    fn lay_over(&mut self, prices: Vec<Price>) {
        for p in prices {
            self.prices
                .insert((p.meter.clone(), p.item.clone(), p.region.clone()), p);
        }
    }

    /// The entry for `meter`'s `item` in `region`.
    pub fn get(&self, meter: &str, item: &str, region: &str) -> Option<&Price> {
        self.prices
            .get(&(meter.to_string(), item.to_string(), region.to_string()))
    }

    /// Every entry, for `terrain cost --catalog`-style listings and tests.
    pub fn entries(&self) -> impl Iterator<Item = &Price> {
        self.prices.values()
    }
}

/// `[[price]]` entries of a price file.
fn parse(text: &str, path: &Path) -> Result<Vec<Price>, CostError> {
    let fail = |message: String| CostError::ParsePrices {
        path: path.to_path_buf(),
        message,
    };
    let doc = DeTable::parse(text).map_err(|e| fail(e.message().to_string()))?;
    let (span, doc) = (doc.span(), doc.into_inner());
    let json =
        toml_to_json(&Spanned::new(span, DeValue::Table(doc))).map_err(|e| fail(e.to_string()))?;
    let entries = json["price"].as_array().cloned().unwrap_or_default();
    entries
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value::<Price>(v)
                .map_err(|e| fail(format!("price entry {}: {e}", i + 1)))
        })
        .collect()
}

/// One usage of a resource, priced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub usage: Usage,
    /// The price per unit used (the spot one for spot usage); `None` when the catalog has
    /// no entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_usd: Option<f64>,
    pub unit: Option<Unit>,
    /// USD per hour at the low and high end; `None` for storage billed by what is stored
    /// and for usage without a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hourly: Option<(f64, f64)>,
    /// The spot price is an estimate ([`SPOT_SHARE`] of on-demand).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot_estimated: bool,
    /// Where the price comes from and when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// What one resource costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceCost {
    pub address: String,
    pub lines: Vec<Line>,
    /// USD per hour at the low and high end, over the lines with a price.
    pub hourly: (f64, f64),
}

impl ResourceCost {
    /// Usage the catalog has no price for.
    pub fn unpriced(&self) -> impl Iterator<Item = &Usage> {
        self.lines
            .iter()
            .filter(|l| l.unit_usd.is_none())
            .map(|l| &l.usage)
    }
}

/// What a plan costs: the stack before (its live objects) and after the plan, per
/// resource after.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanCost {
    /// USD per hour of the live objects the plan starts from, low and high end.
    pub before: (f64, f64),
    /// USD per hour once applied, low and high end.
    pub after: (f64, f64),
    /// Each billing resource once applied, in plan order.
    pub resources: Vec<ResourceCost>,
    /// The `[stack] budget` maximum the plan is held to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hourly: Option<f64>,
}

impl PlanCost {
    /// Whether the plan's maximum exceeds the budget.
    pub fn over_budget(&self) -> Option<f64> {
        self.max_hourly.filter(|max| self.after.1 > *max + 1e-9)
    }

    /// The resources that drive the cost at its maximum, most expensive first.
    pub fn drivers(&self) -> Vec<&ResourceCost> {
        let mut out: Vec<&ResourceCost> =
            self.resources.iter().filter(|r| r.hourly.1 > 0.0).collect();
        out.sort_by(|a, b| b.hourly.1.total_cmp(&a.hourly.1));
        out
    }
}

/// Prices `usage` from `catalog`.
pub fn price(usage: &Usage, catalog: &Catalog) -> Line {
    let Some(p) = catalog.get(&usage.meter, &usage.item, &usage.region) else {
        return Line {
            usage: usage.clone(),
            unit_usd: None,
            unit: None,
            hourly: None,
            spot_estimated: false,
            source: None,
        };
    };
    let (unit_usd, spot_estimated) = match (usage.spot, p.spot) {
        (true, Some(spot)) => (spot, false),
        (true, None) => (p.usd * SPOT_SHARE, true),
        (false, _) => (p.usd, false),
    };
    let per_hour = match p.unit {
        Unit::Hour => unit_usd,
        Unit::GibMonth => unit_usd / HOURS_PER_MONTH,
    };
    // Storage billed by what is stored has no quantity before apply: its rate is shown.
    let by_what_is_stored = p.unit == Unit::GibMonth && usage.max == 0.0;
    Line {
        usage: usage.clone(),
        unit_usd: Some(unit_usd),
        unit: Some(p.unit),
        hourly: (!by_what_is_stored).then_some((per_hour * usage.min, per_hour * usage.max)),
        spot_estimated,
        source: Some(format!("{} (read {})", p.source, p.read)),
    }
}

/// What one resource's usage costs.
pub fn resource(address: &str, usage: &[Usage], catalog: &Catalog) -> ResourceCost {
    let lines: Vec<Line> = usage.iter().map(|u| price(u, catalog)).collect();
    let hourly = lines
        .iter()
        .filter_map(|l| l.hourly)
        .fold((0.0, 0.0), |(a, b), (lo, hi)| (a + lo, b + hi));
    ResourceCost {
        address: address.to_string(),
        lines,
        hourly,
    }
}

/// `$1.23`, `$0.0042` (small amounts keep their significant digits).
pub fn usd(amount: f64) -> String {
    if amount != 0.0 && amount.abs() < 0.01 {
        format!("${amount:.4}")
    } else {
        format!("${amount:.2}")
    }
}

/// `$1.23/h` or `$0.00–$7.29/h`.
pub fn hourly_range((lo, hi): (f64, f64)) -> String {
    if (hi - lo).abs() < 1e-9 {
        format!("{}/h", usd(hi))
    } else {
        format!("{}–{}/h", usd(lo), usd(hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(meter: &str, item: &str, region: &str, min: f64, max: f64) -> Usage {
        Usage::fixed(meter, item, region, 0.0, String::new()).ranging(min, max)
    }

    #[test]
    fn the_shipped_catalog_parses_and_names_a_source_and_date_for_every_price() {
        let prices = parse(SHIPPED, Path::new("prices.toml")).expect("the shipped prices parse");
        assert!(prices.len() > 50, "{} prices", prices.len());
        for p in &prices {
            assert!(p.usd > 0.0, "{p:?}");
            assert!(p.source.starts_with("https://"), "{p:?}");
            assert!(p.read.len() >= 7, "{p:?}");
            if let Some(spot) = p.spot {
                assert!(spot < p.usd, "spot is cheaper: {p:?}");
            }
        }
        let mut keys: Vec<_> = prices
            .iter()
            .map(|p| (&p.meter, &p.item, &p.region))
            .collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "one entry per meter, item and region");
    }

    #[test]
    fn usage_is_priced_per_hour_and_per_gib_month() {
        let mut c = Catalog::default();
        c.lay_over(vec![
            Price {
                meter: "gce.vm".into(),
                item: "n1-standard-8".into(),
                region: "r".into(),
                unit: Unit::Hour,
                usd: 0.38,
                spot: Some(0.08),
                source: "https://example.test".into(),
                read: "2026-11-26".into(),
            },
            Price {
                meter: "filestore.capacity".into(),
                item: "BASIC_HDD".into(),
                region: "r".into(),
                unit: Unit::GibMonth,
                usd: 0.2,
                spot: None,
                source: "https://example.test".into(),
                read: "2026-11-26".into(),
            },
            Price {
                meter: "ec2.instance".into(),
                item: "g5.xlarge".into(),
                region: "r".into(),
                unit: Unit::Hour,
                usd: 1.0,
                spot: None,
                source: "https://example.test".into(),
                read: "2026-11-26".into(),
            },
        ]);
        let line = price(&usage("gce.vm", "n1-standard-8", "r", 0.0, 3.0), &c);
        assert_eq!(line.hourly, Some((0.0, 0.38 * 3.0)));
        let spot = price(
            &usage("gce.vm", "n1-standard-8", "r", 1.0, 1.0).spot(true),
            &c,
        );
        assert_eq!(spot.hourly, Some((0.08, 0.08)));
        let share = price(
            &usage("filestore.capacity", "BASIC_HDD", "r", 1024.0, 1024.0),
            &c,
        );
        let per_hour = 0.2 * 1024.0 / HOURS_PER_MONTH;
        assert_eq!(share.hourly, Some((per_hour, per_hour)));
        let estimated = price(
            &usage("ec2.instance", "g5.xlarge", "r", 2.0, 2.0).spot(true),
            &c,
        );
        assert!(estimated.spot_estimated);
        assert_eq!(estimated.hourly, Some((2.0 * SPOT_SHARE, 2.0 * SPOT_SHARE)));
        let unknown = price(&usage("gce.vm", "n9-mega", "r", 1.0, 1.0), &c);
        assert_eq!(unknown.unit_usd, None, "never guessed");
        let stored = price(&usage("filestore.capacity", "BASIC_HDD", "r", 0.0, 0.0), &c);
        assert_eq!(stored.hourly, None, "a rate, not an hourly cost");
    }

    #[test]
    fn a_price_file_overrides_shipped_entries_by_meter_item_and_region() {
        let dir = tempfile::tempdir().expect("a directory");
        let file = dir.path().join("prices.toml");
        std::fs::write(
            &file,
            r#"
[[price]]
meter = "gke.cluster"
item = "standard"
region = "us-central1"
unit = "hour"
usd = 0.05
source = "https://example.test/negotiated"
read = "2026-11-01"
"#,
        )
        .expect("write");
        let c = Catalog::with_file(&file).expect("read");
        let p = c
            .get("gke.cluster", "standard", "us-central1")
            .expect("an entry");
        assert_eq!(p.usd, 0.05);
        std::fs::write(&file, "[[price]]\nmeter = 1\n").expect("write");
        let err = Catalog::with_file(&file).expect_err("a bad entry");
        assert!(err.to_string().contains("price entry 1"), "{err}");
    }

    #[test]
    fn amounts_read_as_money() {
        assert_eq!(usd(14.7234), "$14.72");
        assert_eq!(usd(0.0042), "$0.0042");
        assert_eq!(hourly_range((0.1, 0.1)), "$0.10/h");
        assert_eq!(hourly_range((0.1, 14.72)), "$0.10–$14.72/h");
    }
}
