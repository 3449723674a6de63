//! The Google Cloud provider (`[providers.gcp]`): the project's APIs (Service Usage),
//! service accounts and IAM bindings (IAM, Resource Manager), GKE clusters and node
//! pools, Filestore instances and Cloud Storage buckets, over the REST APIs; and the
//! stack-wide checks of who may do what (`iam_checks`).
//!
//! Layout: `config` resolves settings, `auth` supplies tokens, `client` sends requests
//! (retries, errors), `operation` follows long-running operations, `catalog` holds the
//! offline knowledge validation uses; one file per resource kind.
//!
//! Every object terrain creates carries the labels `managed-by=terrain` and
//! `terrain-address=<kind>_<name>`: when a create's response is lost and the retry finds
//! the object already there, those labels prove it is ours to adopt rather than a
//! stranger's to refuse.

pub mod auth;
pub mod bucket;
pub mod capacity;
pub mod catalog;
pub mod client;
pub mod cluster;
pub mod config;
pub mod filestore;
pub mod iam_checks;
pub mod iam_member;
pub mod node_pool;
pub mod operation;
pub mod project_service;
pub mod roles;
pub mod service_account;

/// The gcp provider's table and capacity (see [`crate::provider::Provider`]).
pub struct Gcp;

#[async_trait::async_trait]
impl crate::provider::Provider for Gcp {
    fn name(&self) -> &'static str {
        "gcp"
    }

    fn validate_config(&self, config: &serde_json::Value) -> Vec<crate::Invalid> {
        config::validate(config)
    }

    fn setting_keys(&self) -> Option<&'static [&'static str]> {
        Some(config::KEYS)
    }

    fn configure(
        &self,
        table: serde_json::Value,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> serde_json::Value {
        config::configure(table, env)
    }

    fn stack_kinds(&self) -> &'static [&'static str] {
        iam_checks::STACK_KINDS
    }

    fn check_stack(
        &self,
        resources: &[crate::protocol::StackResource],
    ) -> Vec<crate::protocol::StackFinding> {
        iam_checks::check(resources)
    }

    async fn preflight(
        &self,
        ctx: &crate::Ctx,
        needs: &[crate::Need],
    ) -> Result<Vec<crate::Finding>, crate::ProviderError> {
        capacity::preflight(ctx, needs).await
    }

    async fn services_off(
        &self,
        ctx: &crate::Ctx,
        services: &[String],
    ) -> Result<Vec<String>, crate::ProviderError> {
        project_service::off(ctx, services).await
    }

    async fn check_planned(
        &self,
        ctx: &crate::Ctx,
        planned: &[crate::protocol::Planned],
    ) -> Result<Vec<crate::protocol::StackFinding>, crate::ProviderError> {
        iam_checks::check_planned(ctx, planned).await
    }
}

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::protocol::is_unknown;
use crate::ProviderError;
use config::{Api, CredentialSource, GcpConfig};

/// The label every object terrain creates carries.
pub const MANAGED_BY: (&str, &str) = ("managed-by", "terrain");
/// The label holding the creating resource's address.
pub const ADDRESS_LABEL: &str = "terrain-address";

/// A resource address as a label value: labels allow only `[a-z0-9_-]`.
pub fn address_label(address: &str) -> String {
    address
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .take(63)
        .collect()
}

/// The user's labels plus terrain's own.
pub fn labels_with_ours(labels: &BTreeMap<String, String>, address: &str) -> Map<String, Value> {
    let mut out: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    out.insert(
        MANAGED_BY.0.to_string(),
        Value::String(MANAGED_BY.1.to_string()),
    );
    out.insert(
        ADDRESS_LABEL.to_string(),
        Value::String(address_label(address)),
    );
    out
}

/// The labels of a live object without terrain's own.
pub fn user_labels(labels: &Value) -> BTreeMap<String, String> {
    labels
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.as_str() != MANAGED_BY.0 && k.as_str() != ADDRESS_LABEL)
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a live object's labels say this address created it.
pub fn is_ours(labels: &Value, address: &str) -> bool {
    labels[ADDRESS_LABEL].as_str() == Some(address_label(address).as_str())
        && labels[MANAGED_BY.0].as_str() == Some(MANAGED_BY.1)
}

/// The error for a create that found a same-named object terrain did not make.
pub fn not_ours(
    call: &'static str,
    what: &str,
    id: &str,
    kind: &str,
    address: &str,
) -> ProviderError {
    let name = address.split_once('.').map_or(address, |(_, n)| n);
    ProviderError::api(
        call,
        409,
        "ALREADY_EXISTS",
        format!("{what} {id} already exists and was not created by {address}; bring it under terrain with `terrain import {kind}.{name} {id}` or pick another name"),
    )
}

/// Splits `projects/{p}/locations/{l}/<collection>/{name}[/...]` ids into their parts.
pub fn id_parts<'a>(id: &'a str, pattern: &[&str]) -> Option<Vec<&'a str>> {
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() != pattern.len() * 2 {
        return None;
    }
    let mut values = Vec::new();
    for (i, expected) in pattern.iter().enumerate() {
        if parts[i * 2] != *expected || parts[i * 2 + 1].is_empty() {
            return None;
        }
        values.push(parts[i * 2 + 1]);
    }
    Some(values)
}

/// The provider settings for offline checks; a table that does not resolve is reported
/// as a problem of the resource and checks needing it are skipped.
pub fn validation_config(config: &Value, out: &mut Vec<crate::Invalid>) -> Option<GcpConfig> {
    match GcpConfig::from_ctx(config) {
        Ok(c) => Some(c),
        Err(e) => {
            out.push(crate::Invalid::at("", e.to_string()));
            None
        }
    }
}

/// The problem with a zone outside the provider's region, if it is one.
pub fn zone_outside_region(
    at: &str,
    location: &str,
    config: Option<&GcpConfig>,
) -> Option<crate::Invalid> {
    let region = config?.region.as_deref()?;
    (catalog::is_zone(location) && catalog::region_of_zone(location) != Some(region)).then(|| {
        crate::Invalid::at(
            at,
            format!("zone {location:?} is not in the provider's region {region:?}"),
        )
    })
}

/// The indices of `items` (`(id, prior)`) grouped by the collection that lists each
/// one (`parent` of its id: `projects/P/locations/L`, a cluster), for batch reads that
/// make one list call per collection.
///
/// Fails with `parent`'s error on an id of the wrong shape.
pub fn by_parent<S>(
    items: &[(String, S)],
    parent: impl Fn(&str) -> Result<String, ProviderError>,
) -> Result<BTreeMap<String, Vec<usize>>, ProviderError> {
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, (id, _)) in items.iter().enumerate() {
        groups.entry(parent(id)?).or_default().push(i);
    }
    Ok(groups)
}

/// The batch key of objects read together by one list call (`Kind::batch_key`): the
/// list's URL — `collection` is its path under the API root, after `v1/`
/// (`projects/P/locations/L/clusters`) — and where its credentials come from, so only
/// objects one request lists (same endpoint, same project and location, same account)
/// share a key. `None` when the provider table does not resolve: each object is then
/// read alone and reports the problem. The token itself never goes into a key.
pub fn list_key(config: &Value, api: Api, collection: &str) -> Option<String> {
    if is_unknown(config) {
        return None;
    }
    let config = GcpConfig::from_ctx(config).ok()?;
    let account = match &config.credentials {
        CredentialSource::Adc { key_file: None } => "application default credentials".to_string(),
        CredentialSource::Adc {
            key_file: Some(path),
        } => format!("key file {path}"),
        CredentialSource::TokenFile(path) => format!("token file {path}"),
        CredentialSource::Token(_) => "GOOGLE_OAUTH_ACCESS_TOKEN".to_string(),
    };
    Some(format!("{}v1/{collection} as {account}", config.root(api)))
}

/// The error for an id that does not have the expected shape (import of a typo).
pub fn bad_id(kind: &str, id: &str, shape: &str) -> ProviderError {
    ProviderError::Unsupported(format!(
        "{kind}: {id:?} is not an id of this kind; expected {shape}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn address_labels_are_valid_label_values() {
        assert_eq!(
            address_label("gke_cluster.Batch.ml"),
            "gke_cluster-batch-ml"
        );
        let labels = Value::Object(labels_with_ours(
            &BTreeMap::from([("team".to_string(), "ml".to_string())]),
            "gke_cluster.gpu",
        ));
        assert!(is_ours(&labels, "gke_cluster.gpu"));
        assert!(!is_ours(&labels, "gke_cluster.cpu"));
        assert_eq!(
            user_labels(&labels),
            BTreeMap::from([("team".to_string(), "ml".to_string())])
        );
        assert!(!is_ours(&json!({}), "gke_cluster.gpu"));
    }

    #[test]
    fn ids_split_by_pattern() {
        assert_eq!(
            id_parts(
                "projects/p/locations/us-central1/clusters/c",
                &["projects", "locations", "clusters"]
            ),
            Some(vec!["p", "us-central1", "c"])
        );
        assert_eq!(
            id_parts(
                "projects/p/locations/us-central1",
                &["projects", "locations", "clusters"]
            ),
            None
        );
        assert_eq!(
            id_parts(
                "projects/p/zones/z/clusters/c",
                &["projects", "locations", "clusters"]
            ),
            None
        );
    }
}
