//! The resource types an emulated API server serves — a built-in table plus whatever
//! CustomResourceDefinitions register — and the discovery documents built from them:
//! `/version`, `/api`, `/apis` (legacy and aggregated v2) and the APIResourceLists. The
//! served kinds' schemas (`schema.rs`) and the OpenAPI documents built from them
//! (`openapi.rs`) are its submodules.

use serde_json::{json, Value};

use super::ClusterState;
use super::{schema, ObjKey};

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Where a scale subresource reads and writes replicas (dotted paths such as
/// `.spec.replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// One resource as served at one group/version.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceType {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Served subresources: `status`, `scale`, `log`, `exec`, `portforward`, `proxy`.
    pub subresources: Vec<String>,
    /// The group objects are stored under: events.k8s.io events are core events seen
    /// through another schema, as in the real API server.
    pub storage_group: String,
    /// A CRD's `additionalPrinterColumns` for this version.
    pub printer_columns: Vec<Value>,
    pub scale: Option<ScalePaths>,
}

impl ResourceType {
    /// `v1` or `apps/v1`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub(crate) fn has(&self, subresource: &str) -> bool {
        self.subresources.iter().any(|s| s == subresource)
    }

    /// Where an object of this type is stored.
    pub(crate) fn key(&self, namespace: &str, name: &str) -> ObjKey {
        let ns = if self.namespaced { namespace } else { "" };
        ObjKey::new(&self.storage_group, &self.plural, ns, name)
    }

    /// A view of events.k8s.io events over core storage.
    pub(crate) fn is_events_v1(&self) -> bool {
        self.group == "events.k8s.io" && self.plural == "events"
    }

    fn verbs(&self) -> Vec<&'static str> {
        if self.plural == "namespaces" {
            // The namespace controller owns the contents; no collection delete.
            return ALL_VERBS
                .iter()
                .copied()
                .filter(|v| *v != "deletecollection")
                .collect();
        }
        ALL_VERBS.to_vec()
    }
}

/// `(subresource, kind, group, version, verbs)` of each subresource the server knows.
fn subresource_shape(
    rt: &ResourceType,
    sub: &str,
) -> (String, String, String, &'static [&'static str]) {
    match sub {
        "scale" => (
            "Scale".into(),
            "autoscaling".into(),
            "v1".into(),
            &["get", "patch", "update"],
        ),
        "log" => (
            rt.kind.clone(),
            rt.group.clone(),
            rt.version.clone(),
            &["get"],
        ),
        "exec" => (
            "PodExecOptions".into(),
            rt.group.clone(),
            rt.version.clone(),
            &["create", "get"],
        ),
        "portforward" => (
            "PodPortForwardOptions".into(),
            rt.group.clone(),
            rt.version.clone(),
            &["create", "get"],
        ),
        // Served by `api/proxy.rs` ahead of the resource routing.
        "proxy" => (
            "ServiceProxyOptions".into(),
            rt.group.clone(),
            rt.version.clone(),
            &["create", "delete", "get", "patch", "update"],
        ),
        _ => (
            rt.kind.clone(),
            rt.group.clone(),
            rt.version.clone(),
            &["get", "patch", "update"],
        ),
    }
}

/// A built-in type: `(group, version, plural, singular, kind, namespaced, short names,
/// categories, subresources)`.
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    ("", "v1", "namespaces", "namespace", "Namespace", false, &["ns"], &[], &["status"]),
    ("", "v1", "pods", "pod", "Pod", true, &["po"], &["all"], &["status", "log", "exec", "portforward"]),
    ("", "v1", "services", "service", "Service", true, &["svc"], &["all"], &["status", "proxy"]),
    ("", "v1", "endpoints", "endpoints", "Endpoints", true, &["ep"], &[], &[]),
    ("", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume", false, &["pv"], &[], &["status"]),
    ("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true, &["pvc"], &[], &["status"]),
    ("", "v1", "configmaps", "configmap", "ConfigMap", true, &["cm"], &[], &[]),
    ("", "v1", "secrets", "secret", "Secret", true, &[], &[], &[]),
    ("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, &["sa"], &[], &[]),
    ("", "v1", "events", "event", "Event", true, &["ev"], &[], &[]),
    ("", "v1", "nodes", "node", "Node", false, &["no"], &[], &["status"]),
    ("apps", "v1", "deployments", "deployment", "Deployment", true, &["deploy"], &["all"], &["status", "scale"]),
    ("apps", "v1", "replicasets", "replicaset", "ReplicaSet", true, &["rs"], &["all"], &["status", "scale"]),
    ("apps", "v1", "daemonsets", "daemonset", "DaemonSet", true, &["ds"], &["all"], &["status"]),
    ("apps", "v1", "statefulsets", "statefulset", "StatefulSet", true, &["sts"], &["all"], &["status", "scale"]),
    ("batch", "v1", "jobs", "job", "Job", true, &[], &["all"], &["status"]),
    ("batch", "v1", "cronjobs", "cronjob", "CronJob", true, &["cj"], &["all"], &["status"]),
    ("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, &[], &[], &[]),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", true, &[], &[], &[]),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", false, &[], &[], &[]),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", false, &[], &[], &[]),
    ("storage.k8s.io", "v1", "storageclasses", "storageclass", "StorageClass", false, &["sc"], &[], &[]),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition", false, &["crd", "crds"], &["api-extensions"], &["status"]),
    ("events.k8s.io", "v1", "events", "event", "Event", true, &["ev"], &[], &[]),
    ("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, &[], &[], &[]),
    ("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", true, &["pdb"], &[], &["status"]),
    ("scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass", false, &["pc"], &[], &[]),
    ("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", true, &["netpol"], &[], &[]),
];

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The built-in types, for tests that check every one of them.
#[cfg(test)]
pub(crate) fn builtin_types() -> Vec<ResourceType> {
    builtins().collect()
}

fn builtins() -> impl Iterator<Item = ResourceType> {
    BUILTINS.iter().map(
        |&(group, version, plural, singular, kind, namespaced, short, categories, subs)| {
            let scale = subs.contains(&"scale").then(|| ScalePaths {
                spec_replicas: ".spec.replicas".into(),
                status_replicas: ".status.replicas".into(),
                label_selector: Some(".spec.selector".into()),
            });
            ResourceType {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: singular.into(),
                kind: kind.into(),
                namespaced,
                short_names: strings(short),
                categories: strings(categories),
                subresources: strings(subs),
                storage_group: if group == "events.k8s.io" {
                    String::new()
                } else {
                    group.into()
                },
                printer_columns: Vec::new(),
                scale,
            }
        },
    )
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// The types one stored CRD registers, one per served version.
pub(crate) fn crd_types(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = names["plural"].as_str().unwrap_or_default();
    let kind = names["kind"].as_str().unwrap_or_default();
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"] != Value::Bool(false))
        .filter_map(|v| {
            let version = v["name"].as_str()?;
            let subs = &v["subresources"];
            let mut subresources = Vec::new();
            if subs.get("status").is_some() {
                subresources.push("status".to_string());
            }
            let scale = subs.get("scale").map(|s| {
                subresources.push("scale".to_string());
                ScalePaths {
                    spec_replicas: s["specReplicasPath"]
                        .as_str()
                        .unwrap_or(".spec.replicas")
                        .into(),
                    status_replicas: s["statusReplicasPath"]
                        .as_str()
                        .unwrap_or(".status.replicas")
                        .into(),
                    label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
                }
            });
            Some(ResourceType {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: singular.clone(),
                kind: kind.into(),
                namespaced: spec["scope"] != "Cluster",
                short_names: str_list(&names["shortNames"]),
                categories: str_list(&names["categories"]),
                subresources,
                storage_group: group.into(),
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                scale,
            })
        })
        .collect()
}

/// Every type the cluster serves: built-ins first, then CRD-registered ones.
pub(crate) fn all(cluster: &ClusterState) -> Vec<ResourceType> {
    let mut out: Vec<ResourceType> = builtins().collect();
    for (_, crd) in cluster
        .store
        .list("apiextensions.k8s.io", "customresourcedefinitions", None)
    {
        // Apply and strict validation find a custom resource's schema by its GVK.
        schema::register_crd(crd);
        for rt in crd_types(crd) {
            // A CRD cannot shadow a built-in type.
            if !out
                .iter()
                .any(|o| o.group == rt.group && o.version == rt.version && o.plural == rt.plural)
            {
                out.push(rt);
            }
        }
    }
    out
}

/// The type served at `group/version` under `plural`.
pub(crate) fn find(
    cluster: &ClusterState,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<ResourceType> {
    all(cluster)
        .into_iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Groups in discovery order with their versions (preferred first).
pub(crate) fn groups(types: &[ResourceType]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in types {
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) => {
                if !versions.contains(&t.version) {
                    versions.push(t.version.clone());
                }
            }
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    out
}

/// `/version`: the cluster's own version, which its cloud reports for the control plane.
pub(crate) fn version_info(cluster: &ClusterState) -> Value {
    let numbers: Vec<&str> = cluster
        .version
        .trim_start_matches('v')
        .split(['.', '-'])
        .collect();
    json!({
        "major": numbers.first().copied().unwrap_or("1"),
        "minor": numbers.get(1).copied().unwrap_or("31"),
        "gitVersion": cluster.version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.22.12",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api` in the legacy form.
pub(crate) fn core_versions(cluster: &ClusterState) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": format!("127.0.0.1:{}", cluster.port)}
        ],
    })
}

fn group_value(name: &str, versions: &[String]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": gvs,
        "preferredVersion": gvs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis` in the legacy form.
pub(crate) fn group_list(cluster: &ClusterState) -> Value {
    let groups: Vec<Value> = groups(&all(cluster))
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| group_value(&g, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`.
pub(crate) fn group(cluster: &ClusterState, name: &str) -> Option<Value> {
    let (_, versions) = groups(&all(cluster))
        .into_iter()
        .find(|(g, _)| !g.is_empty() && g == name)?;
    let mut v = group_value(name, &versions);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

fn resource_entry(rt: &ResourceType) -> Value {
    let mut entry = json!({
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        entry["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        entry["categories"] = json!(rt.categories);
    }
    entry
}

/// `/api/v1` or `/apis/<group>/<version>`: every resource and subresource.
pub(crate) fn resource_list(cluster: &ClusterState, group: &str, version: &str) -> Option<Value> {
    let types: Vec<ResourceType> = all(cluster)
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for rt in &types {
        resources.push(resource_entry(rt));
        for sub in &rt.subresources {
            let (kind, sub_group, sub_version, verbs) = subresource_shape(rt, sub);
            let mut entry = json!({
                "name": format!("{}/{sub}", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if sub_group != rt.group || sub_version != rt.version {
                entry["group"] = json!(sub_group);
                entry["version"] = json!(sub_version);
            }
            resources.push(entry);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

/// The media type of aggregated discovery answers.
pub(crate) const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery v2 (v2beta1 alone is answered
/// in the legacy form, which clients fall back to).
pub(crate) fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
            && params.contains(&"as=APIGroupDiscoveryList")
    })
}

/// `/api` (`core`) or `/apis` as an APIGroupDiscoveryList.
pub(crate) fn aggregated(cluster: &ClusterState, core: bool) -> Value {
    let types = all(cluster);
    let items: Vec<Value> = groups(&types)
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = types
                        .iter()
                        .filter(|t| t.group == g && &t.version == v)
                        .map(|t| {
                            let subs: Vec<Value> = t
                                .subresources
                                .iter()
                                .map(|s| {
                                    let (kind, sg, sv, verbs) = subresource_shape(t, s);
                                    json!({
                                        "subresource": s,
                                        "responseKind": {"group": sg, "version": sv, "kind": kind},
                                        "verbs": verbs,
                                    })
                                })
                                .collect();
                            let mut r = json!({
                                "resource": t.plural,
                                "responseKind": {"group": t.group, "version": t.version, "kind": t.kind},
                                "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": t.singular,
                                "verbs": t.verbs(),
                            });
                            if !t.short_names.is_empty() {
                                r["shortNames"] = json!(t.short_names);
                            }
                            if !t.categories.is_empty() {
                                r["categories"] = json!(t.categories);
                            }
                            if !subs.is_empty() {
                                r["subresources"] = json!(subs);
                            }
                            r
                        })
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `api/v1` or `apis/<group>/<version>`, the OpenAPI v3 name of a group/version.
pub(crate) fn openapi_name(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::ClusterState;
    use chrono::Utc;

    /// `/openapi/v3`, parsed (the server answers the cached bytes).
    fn openapi_root(cluster: &ClusterState) -> Value {
        serde_json::from_slice(crate::k8s::openapi::documents(cluster).v3_root())
            .unwrap_or(Value::Null)
    }

    /// `/openapi/v3/<api/v1|apis/g/v>`, parsed.
    fn openapi_group_version(cluster: &ClusterState, name: &str) -> Option<Value> {
        serde_json::from_slice(crate::k8s::openapi::documents(cluster).v3(name)?).ok()
    }

    fn cluster() -> ClusterState {
        ClusterState::new(
            "c",
            crate::k8s::controllers::testkit::cloud(false),
            String::new(),
            String::new(),
            Vec::new(),
            "v1.31.8-sandbox".to_string(),
            Utc::now(),
        )
    }

    #[test]
    fn builtin_types_resolve_by_group_version_and_plural() {
        let c = cluster();
        let cases = [
            ("", "v1", "pods", Some(("Pod", true))),
            ("", "v1", "nodes", Some(("Node", false))),
            ("batch", "v1", "jobs", Some(("Job", true))),
            ("apps", "v1", "deployments", Some(("Deployment", true))),
            (
                "rbac.authorization.k8s.io",
                "v1",
                "clusterroles",
                Some(("ClusterRole", false)),
            ),
            ("events.k8s.io", "v1", "events", Some(("Event", true))),
            ("batch", "v2", "jobs", None),
            ("", "v1", "widgets", None),
        ];
        for (group, version, plural, want) in cases {
            let got = find(&c, group, version, plural).map(|r| (r.kind.clone(), r.namespaced));
            assert_eq!(
                got,
                want.map(|(k, n)| (k.to_string(), n)),
                "{group}/{version} {plural}"
            );
        }
        let events = find(&c, "events.k8s.io", "v1", "events").expect("events.k8s.io");
        assert_eq!(events.storage_group, "", "stored with core events");
    }

    #[test]
    fn resource_lists_name_subresources() {
        let c = cluster();
        let list = resource_list(&c, "", "v1").expect("core");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for want in [
            "pods",
            "pods/log",
            "pods/exec",
            "pods/portforward",
            "pods/status",
            "namespaces",
        ] {
            assert!(names.contains(&want), "{want} in {names:?}");
        }
        let apps = resource_list(&c, "apps", "v1").expect("apps");
        let scale = apps["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .expect("deployments/scale");
        assert_eq!(
            (scale["kind"].as_str(), scale["group"].as_str()),
            (Some("Scale"), Some("autoscaling"))
        );
        assert!(resource_list(&c, "nothing.example", "v1").is_none());
    }

    #[test]
    fn a_crd_registers_its_served_versions() {
        let crd = json!({"spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                {"name": "v0", "served": false, "storage": false}
            ]
        }});
        let types = crd_types(&crd);
        assert_eq!(types.len(), 1);
        assert_eq!(types[0].kind, "Widget");
        assert!(types[0].has("status"));
        assert_eq!(types[0].short_names, ["wd"]);
        assert!(crd_types(&json!({"spec": {}})).is_empty());
    }

    #[test]
    fn aggregated_discovery_is_asked_for_by_media_type_parameters() {
        let cases = [
            ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", true),
            ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", false),
            ("application/json", false),
            ("", false),
        ];
        for (accept, want) in cases {
            assert_eq!(wants_aggregated(accept), want, "{accept}");
        }
        let c = cluster();
        let apis = aggregated(&c, false);
        let batch = apis["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|g| g["metadata"]["name"] == "batch")
            .expect("batch");
        assert_eq!(batch["versions"][0]["resources"][0]["resource"], "jobs");
        let core = aggregated(&c, true);
        assert_eq!(core["items"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn openapi_documents_declare_field_validation_per_kind() {
        let c = cluster();
        let root = openapi_root(&c);
        assert!(root["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .is_some_and(|u| u.starts_with("/openapi/v3/api/v1?hash=")));
        let doc = openapi_group_version(&c, "api/v1").expect("core doc");
        let op = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "ConfigMap");
        assert!(op["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
    }
}
