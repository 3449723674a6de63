//! The `gcs_bucket` kind: a Cloud Storage bucket for pipeline files and datasets.
//! Storage class, versioning, uniform access and labels change in place; name and
//! location are fixed. Destroy refuses a bucket that still holds objects unless
//! `force_destroy = true`, which deletes every object version first.

use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::client::{client, segment, status_of, Request};
use super::config::Api;
use super::{catalog, is_ours, labels_with_ours, not_ours, user_labels};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `gcs_bucket`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcsBucket;

// serde's defaults, the same as the schema's (checked by `schema_mismatches`).
fn us() -> String {
    "US".into()
}

fn standard() -> String {
    "STANDARD".into()
}

fn yes() -> bool {
    true
}

/// What a stack writes for a `gcs_bucket`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The globally unique bucket name.
    #[terrain(force_new)]
    pub name: String,
    /// A region, dual-region or multi-region (US, EU, ASIA).
    #[serde(default = "us")]
    #[terrain(force_new)]
    pub location: String,
    /// STANDARD, NEARLINE, COLDLINE or ARCHIVE.
    #[serde(default = "standard")]
    pub storage_class: String,
    /// Keep old versions of overwritten and deleted objects.
    #[serde(default)]
    pub versioning: bool,
    /// Uniform bucket-level access (IAM only, no object ACLs).
    #[serde(default = "yes")]
    pub uniform_access: bool,
    /// GCP labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Let destroy delete every object in the bucket first.
    #[serde(default)]
    pub force_destroy: bool,
}

/// What `gcs_bucket` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// gs://NAME.
    pub url: String,
    /// The bucket's API URL.
    pub self_link: String,
}

const INSERT: &str = "storage.buckets.insert";
const GET: &str = "storage.buckets.get";
const PATCH: &str = "storage.buckets.patch";
const DELETE: &str = "storage.buckets.delete";
const LIST_OBJECTS: &str = "storage.objects.list";
const DELETE_OBJECT: &str = "storage.objects.delete";
const CLASSES: &[&str] = &["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"];

/// The Bucket body of an insert.
pub fn insert_body(spec: &Spec, address: &str) -> Value {
    json!({
        "name": spec.name,
        "location": spec.location,
        "storageClass": spec.storage_class,
        "versioning": {"enabled": spec.versioning},
        "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": spec.uniform_access}},
        "labels": labels_with_ours(&spec.labels, address),
    })
}

/// The PATCH body taking `prior` to `spec`; `None` when nothing the API holds changed.
pub fn patch_body(prior: &Spec, spec: &Spec, address: &str) -> Option<Value> {
    let mut body = Map::new();
    if prior.storage_class != spec.storage_class {
        body.insert("storageClass".into(), json!(spec.storage_class));
    }
    if prior.versioning != spec.versioning {
        body.insert("versioning".into(), json!({"enabled": spec.versioning}));
    }
    if prior.uniform_access != spec.uniform_access {
        body.insert(
            "iamConfiguration".into(),
            json!({"uniformBucketLevelAccess": {"enabled": spec.uniform_access}}),
        );
    }
    if prior.labels != spec.labels {
        // PATCH merges labels: a removed label must be sent as null.
        let mut labels = labels_with_ours(&spec.labels, address);
        for gone in prior
            .labels
            .keys()
            .filter(|k| !spec.labels.contains_key(*k))
        {
            labels.insert(gone.clone(), Value::Null);
        }
        body.insert("labels".into(), Value::Object(labels));
    }
    (!body.is_empty()).then_some(Value::Object(body))
}

/// The spec a live bucket shows; `force_destroy` is terrain's own and comes from `prior`.
pub fn spec_of(live: &Value, prior: Option<&Spec>) -> Spec {
    let location = live["location"].as_str().unwrap_or_default().to_string();
    Spec {
        name: live["name"].as_str().unwrap_or_default().to_string(),
        // The API upper-cases locations; keep the stack's spelling when it is the same place.
        location: match prior {
            Some(p) if p.location.eq_ignore_ascii_case(&location) => p.location.clone(),
            _ => location,
        },
        storage_class: live["storageClass"]
            .as_str()
            .unwrap_or("STANDARD")
            .to_string(),
        versioning: live["versioning"]["enabled"].as_bool().unwrap_or(false),
        uniform_access: live["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"]
            .as_bool()
            .unwrap_or(false),
        labels: user_labels(&live["labels"]),
        force_destroy: prior.is_some_and(|p| p.force_destroy),
    }
}

fn outputs_of(live: &Value) -> Outputs {
    Outputs {
        url: format!("gs://{}", live["name"].as_str().unwrap_or_default()),
        self_link: live["selfLink"].as_str().unwrap_or_default().to_string(),
    }
}

async fn get(ctx: &Ctx, name: &str) -> Result<Option<Value>, ProviderError> {
    client(ctx)?
        .get_opt(
            ctx,
            &Request::get(GET, Api::Storage, format!("storage/v1/b/{}", segment(name))),
        )
        .await
}

/// Deletes every object version in the bucket, page by page.
async fn empty(ctx: &Ctx, name: &str) -> Result<usize, ProviderError> {
    let c = client(ctx)?;
    let mut deleted = 0;
    let mut page: Option<String> = None;
    // Listing again after a full pass catches versions written meanwhile; bounded so a
    // bucket that keeps refilling cannot hold destroy forever.
    for _pass in 0..1000 {
        let mut req = Request::get(
            LIST_OBJECTS,
            Api::Storage,
            format!("storage/v1/b/{}/o", segment(name)),
        )
        .query("versions", "true");
        if let Some(token) = &page {
            req = req.query("pageToken", token.clone());
        }
        let Some(list) = c.get_opt(ctx, &req).await? else {
            return Ok(deleted);
        };
        for item in list["items"].as_array().into_iter().flatten() {
            let object = item["name"].as_str().unwrap_or_default();
            let mut del = Request::new(
                DELETE_OBJECT,
                Api::Storage,
                Method::DELETE,
                format!("storage/v1/b/{}/o/{}", segment(name), segment(object)),
            );
            if let Some(generation) = item["generation"].as_str() {
                del = del.query("generation", generation);
            }
            match c.send(ctx, &del).await {
                Ok(_) => deleted += 1,
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
        ctx.progress(&format!("deleted {deleted} objects"));
        match list["nextPageToken"].as_str() {
            Some(t) => page = Some(t.to_string()),
            // Versioned deletes leave noncurrent versions; list again until none remain.
            None if list["items"].as_array().is_some_and(|i| !i.is_empty()) => page = None,
            None => return Ok(deleted),
        }
    }
    Err(ProviderError::api(
        LIST_OBJECTS,
        409,
        "conflict",
        format!("bucket {name} keeps receiving objects while destroy empties it"),
    ))
}

#[async_trait]
impl Kind for GcsBucket {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "gcs_bucket";
    const PROVIDER: &'static str = "gcp";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_bucket_name(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = catalog::check_bucket_location(&spec.location) {
            out.push(Invalid::at("location", m));
        }
        if !CLASSES.contains(&spec.storage_class.as_str()) {
            out.push(Invalid::at(
                "storage_class",
                format!(
                    "{:?} is not a storage class; use {}",
                    spec.storage_class,
                    CLASSES.join(", ")
                ),
            ));
        }
        if let Err(m) =
            catalog::check_labels(spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            out.push(Invalid::at("labels", m));
        }
        out
    }

    /// Storage by class, per GiB-month of what is stored (not known before).
    fn usage(spec: &Value, _config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let class = crate::usage::known(&spec["storage_class"]).unwrap_or("STANDARD");
        let location = crate::usage::known(&spec["location"])
            .unwrap_or("US")
            .to_lowercase();
        vec![crate::Usage::fixed(
            "gcs.storage",
            class,
            &location,
            0.0,
            format!("{class} storage, by what is stored"),
        )]
    }

    fn services(_spec: &Value) -> Vec<&'static str> {
        vec!["storage.googleapis.com"]
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(spec.name.clone())
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        Ok(get(ctx, id).await?.map(|live| Live {
            id: id.to_string(),
            spec: spec_of(&live, prior),
            outputs: outputs_of(&live),
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let c = client(ctx)?;
        let req = Request::new(INSERT, Api::Storage, Method::POST, "storage/v1/b")
            .query("project", c.config.project()?)
            .body(insert_body(spec, &ctx.address));
        let live = match c.send(ctx, &req).await {
            Ok(live) => live,
            Err(e) if status_of(&e) == Some(409) => {
                // Bucket names are global: a 409 is either our lost earlier insert or a
                // name someone else holds (whose bucket we may not even be able to read).
                match get(ctx, &spec.name).await {
                    Ok(Some(live)) if is_ours(&live["labels"], &ctx.address) => {
                        ctx.progress("adopting the bucket an earlier attempt created");
                        live
                    }
                    _ => {
                        return Err(not_ours(
                            INSERT,
                            "bucket",
                            &spec.name,
                            Self::KIND,
                            &ctx.address,
                        ))
                    }
                }
            }
            Err(e) => return Err(e),
        };
        Ok(Live {
            id: spec.name.clone(),
            spec: spec_of(&live, Some(spec)),
            outputs: outputs_of(&live),
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        if let Some(body) = patch_body(prior, spec, &ctx.address) {
            let req = Request::new(
                PATCH,
                Api::Storage,
                Method::PATCH,
                format!("storage/v1/b/{}", segment(id)),
            )
            .body(body);
            client(ctx)?.send(ctx, &req).await?;
        }
        self.read(ctx, id, Some(spec))
            .await?
            .ok_or_else(|| ProviderError::api(GET, 404, "notFound", format!("bucket {id} is gone")))
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let force = prior.is_some_and(|p| p.force_destroy);
        if force {
            empty(ctx, id).await?;
        }
        let req = Request::new(
            DELETE,
            Api::Storage,
            Method::DELETE,
            format!("storage/v1/b/{}", segment(id)),
        );
        match client(ctx)?.send(ctx, &req).await {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(ProviderError::Api { status: 409, code, message, call, request_id, hint }) if !force => Err(ProviderError::Api {
                call,
                status: 409,
                code,
                message: format!("{message} Delete its objects first, or set force_destroy = true on the bucket to let destroy delete them."),
                request_id,
                hint,
            }),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn base() -> Spec {
        Spec {
            name: "kubeflow-my-project".into(),
            location: "us-central1".into(),
            storage_class: "STANDARD".into(),
            versioning: true,
            uniform_access: true,
            labels: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            force_destroy: false,
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = outputs_of(&json!({"name": "b", "selfLink": "x"}));
        assert_eq!(outputs.url, "gs://b");
        assert_eq!(
            schema_mismatches::<GcsBucket>(&base(), &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn live_bucket_reads_back_as_its_spec() {
        let s = base();
        let mut live = insert_body(&s, "gcs_bucket.pipeline");
        live["location"] = json!("US-CENTRAL1");
        assert_eq!(spec_of(&live, Some(&s)), s);
    }

    #[test]
    fn patch_sends_only_changes_and_nulls_removed_labels() {
        assert_eq!(patch_body(&base(), &base(), "a.b"), None);
        let next = Spec {
            versioning: false,
            labels: BTreeMap::new(),
            ..base()
        };
        let body = patch_body(&base(), &next, "gcs_bucket.pipeline").expect("changes");
        assert_eq!(body["versioning"], json!({"enabled": false}));
        assert_eq!(body["labels"]["team"], Value::Null);
        assert_eq!(body["labels"]["managed-by"], "terrain");
        assert!(body.get("storageClass").is_none());
    }

    #[test]
    fn object_names_are_one_segment() {
        assert_eq!(
            segment("datasets/training 1.pkl"),
            "datasets%2Ftraining%201.pkl"
        );
    }

    #[test]
    fn validation_names_the_field() {
        let bad = Spec {
            name: "Goog-bucket".into(),
            storage_class: "HOT".into(),
            ..base()
        };
        let paths: Vec<String> = GcsBucket::validate(&bad, &Value::Null)
            .into_iter()
            .map(|p| p.path.join("."))
            .collect();
        assert_eq!(paths, ["name", "storage_class"]);
        assert!(GcsBucket::validate(&base(), &Value::Null).is_empty());
    }

    #[test]
    fn bucket_regions_come_from_the_catalog() {
        let at = |location: &str| -> Vec<(String, String)> {
            GcsBucket::validate(
                &Spec {
                    location: location.into(),
                    ..base()
                },
                &json!({"region": "us-central1"}),
            )
            .into_iter()
            .map(|p| (p.path.join("."), p.message))
            .collect()
        };
        for ok in ["US", "NAM4", "europe-west4", "us-central1"] {
            assert!(at(ok).is_empty(), "{ok}: {:?}", at(ok));
        }
        let made_up = at("us-west9");
        assert!(
            matches!(made_up.as_slice(), [(p, m)] if p == "location" && m.contains("`us-west9` is not a Google Cloud region; did you mean `us-west1`")),
            "{made_up:?}"
        );
    }
}
