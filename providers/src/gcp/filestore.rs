//! The `filestore_instance` kind: a Filestore NFS server with one file share, the
//! shared volume ML workers mount. Capacity grows in place; tier, location, network and
//! share name are fixed, so changing them replaces the instance (and its data).

use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::{client, status_of, Client, Request};
use super::config::{Api, GcpConfig};
use super::{
    by_parent, catalog, id_parts, is_ours, labels_with_ours, list_key, not_ours, operation,
    user_labels,
};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `filestore_instance`.
#[derive(Debug, Clone, Copy, Default)]
pub struct FilestoreInstance;

/// The instance's file share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Share {
    /// The share's name, exported as /NAME.
    #[terrain(force_new)]
    pub name: String,
    /// Size in GB; grows in place.
    pub capacity_gb: i64,
}

// serde's defaults, the same as the schema's (checked by `schema_mismatches`).
fn basic_hdd() -> String {
    "BASIC_HDD".into()
}

fn default_network() -> String {
    "default".into()
}

/// What a stack writes for a `filestore_instance`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The instance id (RFC 1035, at most 63 characters).
    #[terrain(force_new)]
    pub name: String,
    /// A zone (BASIC_HDD, BASIC_SSD, ZONAL) or region (REGIONAL, ENTERPRISE); defaults to
    /// the provider's.
    #[terrain(force_new)]
    pub location: Option<String>,
    /// BASIC_HDD, BASIC_SSD, ZONAL, REGIONAL or ENTERPRISE.
    #[serde(default = "basic_hdd")]
    #[terrain(force_new)]
    pub tier: String,
    /// The instance's one file share.
    pub share: Share,
    /// The VPC network clients reach it on (the cluster's).
    #[serde(default = "default_network")]
    #[terrain(force_new)]
    pub network: String,
    /// Free text.
    #[terrain(force_new)]
    pub description: Option<String>,
    /// GCP labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// What `filestore_instance` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The NFS server's IP address.
    #[terrain(derived_from = [])]
    pub ip_address: String,
    /// The file share's name.
    #[terrain(derived_from = ["share.name"])]
    pub share_name: String,
    /// The NFS export path, /SHARE.
    #[terrain(derived_from = ["share.name"])]
    pub share_path: String,
    /// Where the instance runs.
    pub location: String,
    /// READY once serving.
    pub state: String,
}

const CREATE: &str = "file.projects.locations.instances.create";
const GET: &str = "file.projects.locations.instances.get";
const LIST: &str = "file.projects.locations.instances.list";
const PATCH: &str = "file.projects.locations.instances.patch";
const DELETE: &str = "file.projects.locations.instances.delete";
const ID_SHAPE: &str = "projects/PROJECT/locations/LOCATION/instances/NAME";

impl Spec {
    /// The spec's location, else the provider's zone (zonal tiers) or region.
    pub fn location_in(&self, config: &GcpConfig) -> Option<String> {
        let zonal = catalog::filestore_tier(&self.tier).is_none_or(|t| t.zonal);
        self.location.clone().or_else(|| {
            if zonal {
                config.zone.clone()
            } else {
                config.region.clone()
            }
        })
    }
}

/// The Instance body of a create.
pub fn create_body(spec: &Spec, address: &str) -> Value {
    let mut body = json!({
        "tier": spec.tier,
        "fileShares": [{"name": spec.share.name, "capacityGb": spec.share.capacity_gb.to_string()}],
        "networks": [{"network": spec.network, "modes": ["MODE_IPV4"]}],
        "labels": labels_with_ours(&spec.labels, address),
    });
    if let Some(d) = &spec.description {
        body["description"] = json!(d);
    }
    body
}

/// The spec a live instance shows.
pub fn spec_of(live: &Value, location: &str, prior: Option<&Spec>) -> Spec {
    let share = &live["fileShares"][0];
    Spec {
        name: live["name"]
            .as_str()
            .and_then(|n| n.rsplit('/').next())
            .unwrap_or_default()
            .to_string(),
        // A stack that leaves the location to the provider keeps it that way.
        location: if prior.is_some_and(|p| p.location.is_none()) {
            None
        } else {
            Some(location.to_string())
        },
        tier: live["tier"].as_str().unwrap_or_default().to_string(),
        share: Share {
            name: share["name"].as_str().unwrap_or_default().to_string(),
            capacity_gb: share["capacityGb"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .or_else(|| share["capacityGb"].as_i64())
                .unwrap_or(0),
        },
        network: live["networks"][0]["network"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        description: live["description"]
            .as_str()
            .filter(|d| !d.is_empty())
            .map(str::to_string),
        labels: user_labels(&live["labels"]),
    }
}

fn outputs_of(live: &Value, location: &str) -> Outputs {
    let share = live["fileShares"][0]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Outputs {
        ip_address: live["networks"][0]["ipAddresses"][0]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        share_path: format!("/{share}"),
        share_name: share,
        location: location.to_string(),
        state: live["state"].as_str().unwrap_or_default().to_string(),
    }
}

/// The parts of an instance id: project, location, name.
fn id_of(id: &str) -> Result<Vec<&str>, ProviderError> {
    id_parts(id, &["projects", "locations", "instances"])
        .ok_or_else(|| super::bad_id(FilestoreInstance::KIND, id, ID_SHAPE))
}

/// The object `read` reports for the live instance `live` with id `id` in `location`;
/// `None` for an instance being deleted, which is as good as gone. Shared by `read` and
/// `read_batch`.
fn live_of(
    id: &str,
    location: &str,
    live: &Value,
    prior: Option<&Spec>,
) -> Option<Live<FilestoreInstance>> {
    if live["state"] == "DELETING" {
        return None;
    }
    Some(Live {
        id: id.to_string(),
        spec: spec_of(live, location, prior),
        outputs: outputs_of(live, location),
    })
}

/// Whether `listed`, an instance from the list of the id's location, is the instance
/// `parts` names. Its name is compared by location and instance id only: the API may
/// spell the project as its number.
fn is_instance(listed: &Value, parts: &[&str]) -> bool {
    listed["name"]
        .as_str()
        .and_then(|n| id_parts(n, &["projects", "locations", "instances"]))
        .is_some_and(|n| n[1] == parts[1] && n[2] == parts[2])
}

/// One page of `instances.list` under `parent` (`projects/P/locations/L`), after
/// `page_token`; at most `page_size` instances, or the API's default page when `None`.
pub fn list_request(parent: &str, page_token: Option<&str>, page_size: Option<u32>) -> Request {
    let mut req = Request::get(LIST, Api::File, format!("v1/{parent}/instances"));
    if let Some(size) = page_size {
        req = req.query("pageSize", size.to_string());
    }
    if let Some(token) = page_token {
        req = req.query("pageToken", token);
    }
    req
}

/// Every instance under `parent`, following `nextPageToken` to the last page (see
/// [`list_request`]). A location that is not there lists nothing.
///
/// Fails with the list's error, or when the API hands back a page token it already gave.
async fn list_all(
    ctx: &Ctx,
    c: &Client,
    parent: &str,
    page_size: Option<u32>,
) -> Result<Vec<Value>, ProviderError> {
    let mut instances = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut token: Option<String> = None;
    loop {
        let req = list_request(parent, token.as_deref(), page_size);
        let Some(page) = c.get_opt(ctx, &req).await? else {
            return Ok(instances);
        };
        if let Some(listed) = page["instances"].as_array() {
            instances.extend(listed.iter().cloned());
        }
        match page["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
            None => return Ok(instances),
            Some(next) if !seen.insert(next.to_string()) => {
                return Err(ProviderError::api(
                    LIST,
                    200,
                    "BAD_PAGE_TOKEN",
                    format!("the list of {parent} answered the page token {next:?} twice"),
                ))
            }
            Some(next) => token = Some(next.to_string()),
        }
    }
}

impl FilestoreInstance {
    /// [`Kind::read_batch`] with pages of at most `page_size` instances (the API's
    /// default when `None`): one paged `instances.list` per location among `items`.
    ///
    /// Fails when an id is not an instance id or a list fails.
    pub async fn read_listed(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<Spec>)],
        page_size: Option<u32>,
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError> {
        let c = client(ctx)?;
        let groups = by_parent(items, |id| {
            id_of(id).map(|p| format!("projects/{}/locations/{}", p[0], p[1]))
        })?;
        let mut out: Vec<Option<Live<Self>>> = items.iter().map(|_| None).collect();
        for (parent, indices) in groups {
            let instances = list_all(ctx, &c, &parent, page_size).await?;
            for i in indices {
                let (id, prior) = &items[i];
                let parts = id_of(id)?;
                out[i] = instances
                    .iter()
                    .find(|l| is_instance(l, &parts))
                    .and_then(|live| live_of(id, parts[1], live, prior.as_ref()));
            }
        }
        Ok(out)
    }
}

async fn get(ctx: &Ctx, id: &str) -> Result<Option<Value>, ProviderError> {
    client(ctx)?
        .get_opt(ctx, &Request::get(GET, Api::File, format!("v1/{id}")))
        .await
}

async fn wait_op(ctx: &Ctx, call: &'static str, op: &Value) -> Result<(), ProviderError> {
    let c = client(ctx)?;
    let path = format!("v1/{}", op["name"].as_str().unwrap_or_default());
    operation::wait(
        ctx,
        &c,
        &operation::FILE,
        call,
        &path,
        op,
        c.config.timeout(FilestoreInstance::KIND),
    )
    .await
}

#[async_trait]
impl Kind for FilestoreInstance {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "filestore_instance";
    const PROVIDER: &'static str = "gcp";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_rfc1035(&spec.name, catalog::FILESTORE_INSTANCE_ID_MAX) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = catalog::check_share_name(&spec.share.name) {
            out.push(Invalid::at("share.name", m));
        }
        let tier = catalog::filestore_tier(&spec.tier);
        match u64::try_from(spec.share.capacity_gb) {
            Ok(gb) => {
                if let Err(m) = catalog::check_filestore_capacity(&spec.tier, gb) {
                    out.push(Invalid::at(
                        if tier.is_some() {
                            "share.capacity_gb"
                        } else {
                            "tier"
                        },
                        m,
                    ));
                }
            }
            Err(_) => out.push(Invalid::at("share.capacity_gb", "must be positive")),
        }
        if let Err(m) =
            catalog::check_labels(spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            out.push(Invalid::at("labels", m));
        }
        let config = super::validation_config(config, &mut out);
        let location = spec
            .location
            .clone()
            .or_else(|| config.as_ref().and_then(|c| spec.location_in(c)));
        match (location, tier) {
            (None, Some(t)) => out.push(Invalid::at(
                "",
                format!("no location: {} instances live in a {}; set `location`, or `{}` in [providers.gcp]", t.name, if t.zonal { "zone" } else { "region" }, if t.zonal { "zone" } else { "region" }),
            )),
            // A location taken from the provider is checked with the provider's table.
            (Some(_), _) if spec.location.is_none() => {}
            (Some(loc), Some(t)) if t.zonal && !catalog::is_zone(&loc) => {
                let why = catalog::check_zone(&loc).err().unwrap_or_default();
                out.push(Invalid::at("location", format!("{} instances are zonal; {why}", t.name)));
            }
            (Some(loc), Some(t)) if !t.zonal && !catalog::is_region(&loc) => {
                let why = catalog::check_region(&loc).err().unwrap_or_default();
                out.push(Invalid::at("location", format!("{} instances are regional; {why}", t.name)));
            }
            (Some(loc), Some(_)) => {
                let checked = catalog::check_location(&loc).and_then(|()| {
                    match config.as_ref().and_then(GcpConfig::catalog_region) {
                        Some(region) => catalog::check_location_in_region(&loc, region, "the instance"),
                        None => Ok(()),
                    }
                });
                if let Err(m) = checked {
                    out.push(Invalid::at("location", m));
                }
            }
            _ => {}
        }
        out
    }

    /// Provisioned capacity by tier, billed per GiB-month whatever is stored.
    fn usage(spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let tier = crate::usage::known(&spec["tier"]).unwrap_or("BASIC_HDD");
        let Some(gib) = spec["share"]["capacity_gb"].as_f64() else {
            return Vec::new();
        };
        let region = crate::usage::gcp_location(&spec["location"], config)
            .map(|l| crate::usage::gcp_region(&l))
            .unwrap_or_default();
        vec![crate::Usage::fixed(
            "filestore.capacity",
            tier,
            &region,
            gib,
            format!("{gib} GiB {tier}"),
        )]
    }

    fn services(_spec: &Value) -> Vec<&'static str> {
        vec!["file.googleapis.com"]
    }

    fn planned_id(spec: &Spec, config: &Value) -> Option<String> {
        let config = GcpConfig::from_ctx(config).ok()?;
        Some(format!(
            "projects/{}/locations/{}/instances/{}",
            config.project.as_deref()?,
            spec.location_in(&config)?,
            spec.name
        ))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let parts = id_of(id)?;
        let Some(live) = get(ctx, id).await? else {
            return Ok(None);
        };
        Ok(live_of(id, parts[1], &live, prior))
    }

    /// The instances of one location are listed together.
    fn batch_key(config: &Value, id: &str, _prior: Option<&Spec>) -> Option<String> {
        let p = id_of(id).ok()?;
        list_key(
            config,
            Api::File,
            &format!("projects/{}/locations/{}/instances", p[0], p[1]),
        )
    }

    /// One `instances.list` per location among `items`, page after page.
    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<Spec>)],
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError> {
        self.read_listed(ctx, items, None).await
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let c = client(ctx)?;
        let config = &c.config;
        let project = config.project()?;
        let location = spec.location_in(config).ok_or_else(|| {
            ProviderError::Config(
                "filestore_instance: no location; set `location`, or `zone` in [providers.gcp]"
                    .into(),
            )
        })?;
        let id = format!(
            "projects/{project}/locations/{location}/instances/{}",
            spec.name
        );
        let req = Request::new(
            CREATE,
            Api::File,
            Method::POST,
            format!("v1/projects/{project}/locations/{location}/instances"),
        )
        .query("instanceId", spec.name.clone())
        .body(create_body(spec, &ctx.address));
        match c.send(ctx, &req).await {
            Ok(op) => wait_op(ctx, CREATE, &op).await?,
            Err(e) if status_of(&e) == Some(409) => {
                let live = get(ctx, &id).await?.ok_or(e)?;
                if !is_ours(&live["labels"], &ctx.address) {
                    return Err(not_ours(
                        CREATE,
                        "Filestore instance",
                        &id,
                        Self::KIND,
                        &ctx.address,
                    ));
                }
                ctx.progress("adopting the instance an earlier attempt created");
                operation::until_ready(
                    ctx,
                    &c,
                    GET,
                    &format!("instance {id}"),
                    config.timeout(Self::KIND),
                    || async {
                        match get(ctx, &id).await? {
                            None => Ok(None),
                            Some(l) if l["state"] == "ERROR" => Err(ProviderError::api(
                                GET,
                                200,
                                "ERROR",
                                l["statusMessage"]
                                    .as_str()
                                    .unwrap_or("instance failed")
                                    .to_string(),
                            )),
                            Some(l) => {
                                let s = l["state"].as_str().unwrap_or("CREATING").to_string();
                                Ok(Some((s == "READY", s.to_lowercase())))
                            }
                        }
                    },
                )
                .await?;
            }
            Err(e) => return Err(e),
        }
        self.read(ctx, &id, Some(spec)).await?.ok_or_else(|| {
            ProviderError::api(
                GET,
                404,
                "NOT_FOUND",
                format!("instance {id} vanished right after it was created"),
            )
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let tier = catalog::filestore_tier(&spec.tier);
        if spec.share.capacity_gb < prior.share.capacity_gb && !tier.is_some_and(|t| t.shrinkable) {
            return Err(ProviderError::Unsupported(format!(
                "{PATCH}: {} shares cannot shrink ({} GB → {} GB); keep the size, or rename the instance to replace it (its data is lost)",
                spec.tier, prior.share.capacity_gb, spec.share.capacity_gb
            )));
        }
        let mut mask = Vec::new();
        let mut body = json!({});
        if spec.share.capacity_gb != prior.share.capacity_gb {
            mask.push("fileShares");
            body["fileShares"] = json!([{"name": spec.share.name, "capacityGb": spec.share.capacity_gb.to_string()}]);
        }
        if spec.labels != prior.labels {
            mask.push("labels");
            body["labels"] = Value::Object(labels_with_ours(&spec.labels, &ctx.address));
        }
        if !mask.is_empty() {
            let c = client(ctx)?;
            let req = Request::new(PATCH, Api::File, Method::PATCH, format!("v1/{id}"))
                .query("updateMask", mask.join(","))
                .body(body);
            let op = c.send(ctx, &req).await?;
            wait_op(ctx, PATCH, &op).await?;
        }
        self.read(ctx, id, Some(spec)).await?.ok_or_else(|| {
            ProviderError::api(GET, 404, "NOT_FOUND", format!("instance {id} is gone"))
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        id_of(id)?;
        let c = client(ctx)?;
        match c
            .send(
                ctx,
                &Request::new(DELETE, Api::File, Method::DELETE, format!("v1/{id}")),
            )
            .await
        {
            Ok(op) => wait_op(ctx, DELETE, &op).await,
            Err(e) if status_of(&e) == Some(404) => Ok(()),
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
            name: "batch-aiml-filestore".into(),
            location: Some("us-central1-b".into()),
            tier: "BASIC_HDD".into(),
            share: Share {
                name: "NFSVol".into(),
                capacity_gb: 1024,
            },
            network: "default".into(),
            description: None,
            labels: BTreeMap::new(),
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            description: Some("d".into()),
            labels: BTreeMap::from([("a".to_string(), "b".to_string())]),
            ..base()
        };
        let outputs = outputs_of(
            &json!({"fileShares": [{"name": "NFSVol"}]}),
            "us-central1-b",
        );
        assert_eq!(outputs.share_path, "/NFSVol");
        assert_eq!(
            schema_mismatches::<FilestoreInstance>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn live_instance_reads_back_as_its_spec() {
        let s = base();
        let mut live = create_body(&s, "filestore_instance.nfs");
        live["name"] = json!("projects/p/locations/us-central1-b/instances/batch-aiml-filestore");
        assert_eq!(live["fileShares"][0]["capacityGb"], "1024");
        assert_eq!(spec_of(&live, "us-central1-b", Some(&s)), s);
        let unplaced = Spec {
            location: None,
            ..base()
        };
        assert_eq!(spec_of(&live, "us-central1-b", Some(&unplaced)), unplaced);
    }

    #[test]
    fn validation_table() {
        let cfg = json!({"project": "p", "region": "us-central1"});
        let cases: Vec<(Spec, &str)> = vec![
            (base(), ""),
            (
                Spec {
                    share: Share {
                        name: "NFSVol".into(),
                        capacity_gb: 1000,
                    },
                    ..base()
                },
                "share.capacity_gb",
            ),
            (
                Spec {
                    tier: "BASIC_SSD".into(),
                    ..base()
                },
                "share.capacity_gb",
            ),
            (
                Spec {
                    share: Share {
                        name: "nfs-vol".into(),
                        capacity_gb: 1024,
                    },
                    ..base()
                },
                "share.name",
            ),
            (
                Spec {
                    location: Some("us-central1".into()),
                    ..base()
                },
                "not a zone",
            ),
            (
                Spec {
                    location: Some("europe-west4-a".into()),
                    ..base()
                },
                "not in the provider's region",
            ),
            (
                Spec {
                    tier: "ENTERPRISE".into(),
                    ..base()
                },
                "not a region",
            ),
            (
                Spec {
                    tier: "PLATINUM".into(),
                    ..base()
                },
                "tier",
            ),
            (
                Spec {
                    location: Some("us-central1-z".into()),
                    ..base()
                },
                "us-central1 has zones a, b, c, f",
            ),
            (
                Spec {
                    location: Some("us-west9-a".into()),
                    ..base()
                },
                "did you mean `us-west1-a`",
            ),
            (
                Spec {
                    location: Some("europe-west1-b".into()),
                    ..base()
                },
                "zone `europe-west1-b` is not in the provider's region us-central1: the instance would be made in europe-west1, not us-central1",
            ),
            (
                Spec {
                    tier: "REGIONAL".into(),
                    share: Share {
                        name: "NFSVol".into(),
                        capacity_gb: 1024,
                    },
                    location: Some("us-east9".into()),
                    ..base()
                },
                "`us-east9` is not a Google Cloud region",
            ),
            (
                Spec {
                    tier: "REGIONAL".into(),
                    share: Share {
                        name: "NFSVol".into(),
                        capacity_gb: 1024,
                    },
                    location: Some("us-central1-b".into()),
                    ..base()
                },
                "REGIONAL instances are regional; `us-central1-b` is a zone, not a region; its region is us-central1",
            ),
            (
                Spec {
                    location: Some("us-central1".into()),
                    ..base()
                },
                "BASIC_HDD instances are zonal; `us-central1` is a region, not a zone; its zones are us-central1-a, us-central1-b, us-central1-c or us-central1-f",
            ),
        ];
        for (s, want) in cases {
            let problems = FilestoreInstance::validate(&s, &cfg);
            if want.is_empty() {
                assert!(problems.is_empty(), "{problems:?}");
            } else {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.message.contains(want) || p.path.join(".") == want),
                    "want {want}, got {problems:?}"
                );
            }
        }
    }
}
