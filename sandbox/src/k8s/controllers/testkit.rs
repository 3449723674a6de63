//! A hand-built cluster with a controllable clock for the controller, defaulting and
//! volume tests: objects go in through the same defaulting the API server applies, and
//! time moves only when a test says so.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};

use crate::k8s::obj;
use crate::k8s::processes::Processes;
use crate::k8s::store::{ObjKey, Store};
use std::sync::Arc;

use crate::common::hash::fnv64;
use crate::k8s::{defaults, CloudSide, ClusterState, NodePoolInfo, SettleCtx};

pub(crate) struct Harness {
    pub cluster: ClusterState,
    pub now: DateTime<Utc>,
    pub scale: f64,
    pub processes: Processes,
    pub dir: tempfile::TempDir,
    pub spot_reclaims: Option<crate::faults::SpotReclaims>,
}

/// The tests' cloud: it labels pools and names per-pod nodes as GKE does, so that the
/// tests read like the clusters users meet, without the emulator knowing GKE. It adds no
/// system add-ons.
#[derive(Debug)]
pub(crate) struct TestCloud {
    per_pod: bool,
}

pub(crate) fn cloud(per_pod: bool) -> Arc<dyn CloudSide> {
    Arc::new(TestCloud { per_pod })
}

impl CloudSide for TestCloud {
    fn describe(&self) -> &'static str {
        "test"
    }
    fn pool_label(&self) -> &'static str {
        "cloud.google.com/gke-nodepool"
    }
    fn provisions_per_pod(&self) -> bool {
        self.per_pod
    }
    fn pool_node_name(&self, cluster: &str, pool: &str, index: i64) -> String {
        format!("{cluster}-{pool}-{index}")
    }
    fn pod_node_name(&self, cluster: &str, pod_uid: &str) -> String {
        format!(
            "gk3-{cluster}-nap-{:08x}",
            fnv64(&[cluster, pod_uid]) as u32
        )
    }
    fn provider_id(&self, zone: &str, node: &str) -> String {
        format!("test://{zone}/{node}")
    }
    fn node_os(&self) -> (&'static str, &'static str) {
        ("Test OS", "containerd://1.7.24")
    }
    fn accepts_token(&self, token: &str) -> bool {
        token != "refused"
    }
    fn context_name(&self, _key: &str, name: &str) -> String {
        name.to_string()
    }
    fn system_objects(&self, _key: &str, _version: &str) -> Vec<Value> {
        // No add-ons, so the controller tests count exactly the pods and nodes they make.
        Vec::new()
    }
}

pub(crate) fn pool(name: &str, count: i64, max: i64) -> NodePoolInfo {
    NodePoolInfo {
        version: None,
        name: name.to_string(),
        machine_type: "e2-standard-4".into(),
        node_count: count,
        max_nodes: max,
        labels: BTreeMap::from([
            (
                "cloud.google.com/gke-nodepool".to_string(),
                name.to_string(),
            ),
            (
                "topology.kubernetes.io/zone".to_string(),
                "us-central1-a".to_string(),
            ),
        ]),
        taints: Vec::new(),
        extended_resources: BTreeMap::new(),
        cpu: "4".into(),
        memory: "16Gi".into(),
    }
}

/// A pool of single-L4 nodes, tainted as GKE taints GPU nodes.
pub(crate) fn gpu_pool(name: &str, count: i64, max: i64) -> NodePoolInfo {
    let mut p = pool(name, count, max);
    p.machine_type = "g2-standard-8".into();
    p.labels.insert(
        "cloud.google.com/gke-accelerator".into(),
        "nvidia-l4".into(),
    );
    p.taints = vec![json!({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})];
    p.extended_resources
        .insert("nvidia.com/gpu".into(), "1".into());
    p
}

pub(crate) fn nfs_pv(name: &str, server: &str, path: &str, size: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "nfs": {"server": server, "path": path}},
    })
}

impl Harness {
    fn new(cloud: Arc<dyn CloudSide>, pools: Vec<NodePoolInfo>) -> Harness {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let now = Utc
            .with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
            .single()
            .expect("a valid date");
        let cluster = ClusterState {
            name: "batch".into(),
            cloud,
            port: 0,
            ca_cert_pem: String::new(),
            ca_key_pem: String::new(),
            node_pools: pools,
            version: "v1.31.8-sandbox".into(),
            created: now,
            store: Store::default(),
            drained: Default::default(),
            kfp: Default::default(),
        };
        let processes = Processes::new(dir.path().to_path_buf());
        let mut h = Harness {
            cluster,
            now,
            scale: 1.0,
            processes,
            dir,
            spot_reclaims: None,
        };
        for ns in ["default", "kube-system"] {
            h.create(
                "",
                "namespaces",
                "",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            );
        }
        h
    }

    pub(crate) fn standard(pools: Vec<NodePoolInfo>) -> Harness {
        Harness::new(cloud(false), pools)
    }

    pub(crate) fn autopilot() -> Harness {
        Harness::new(cloud(true), Vec::new())
    }

    pub(crate) fn settle(&mut self) {
        let ctx = SettleCtx {
            now: self.now,
            scale: self.scale,
            processes: &self.processes,
            data_dir: self.dir.path(),
            spot_reclaims: self.spot_reclaims,
        };
        super::settle(&mut self.cluster, &ctx);
    }

    /// Moves the clock and settles.
    pub(crate) fn advance(&mut self, secs: f64) {
        self.now += chrono::Duration::milliseconds((secs * 1000.0) as i64);
        self.settle();
    }

    /// Settles every half second for `secs`, as a client polling would.
    pub(crate) fn run_for(&mut self, secs: f64) {
        let steps = (secs * 2.0).ceil() as usize;
        for _ in 0..steps {
            self.advance(0.5);
        }
    }

    /// Creates an object as the API server would (defaults, then the store).
    pub(crate) fn create(
        &mut self,
        group: &str,
        resource: &str,
        namespace: &str,
        mut object: Value,
    ) -> Value {
        let key = ObjKey::new(group, resource, namespace, obj::name(&object));
        if !namespace.is_empty() {
            obj::set(&mut object, &["metadata", "namespace"], json!(namespace));
        }
        if let Err(causes) = defaults::on_create(&key, &mut object, &self.cluster) {
            panic!("creating {}: {causes:?}", key.describe());
        }
        self.cluster.store.insert_new(key, object, self.now)
    }

    /// Replaces an object as a PUT would; the causes when defaulting refuses it.
    pub(crate) fn try_put(
        &mut self,
        group: &str,
        resource: &str,
        namespace: &str,
        mut object: Value,
    ) -> Result<Value, Vec<defaults::Cause>> {
        let key = ObjKey::new(group, resource, namespace, obj::name(&object));
        let old = self.cluster.store.get(&key).cloned().unwrap_or(Value::Null);
        defaults::on_update(&key, &old, &mut object, &self.cluster)?;
        Ok(self.cluster.store.update(&key, object))
    }

    pub(crate) fn put(
        &mut self,
        group: &str,
        resource: &str,
        namespace: &str,
        object: Value,
    ) -> Value {
        match self.try_put(group, resource, namespace, object) {
            Ok(v) => v,
            Err(causes) => panic!("updating {group}/{resource} {namespace}: {causes:?}"),
        }
    }

    pub(crate) fn delete(&mut self, group: &str, resource: &str, namespace: &str, name: &str) {
        self.cluster
            .store
            .delete(&ObjKey::new(group, resource, namespace, name), self.now);
    }

    /// The object, or null when there is none.
    pub(crate) fn get(&self, group: &str, resource: &str, namespace: &str, name: &str) -> Value {
        self.cluster
            .store
            .get(&ObjKey::new(group, resource, namespace, name))
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub(crate) fn exists(&self, group: &str, resource: &str, namespace: &str, name: &str) -> bool {
        self.cluster
            .store
            .get(&ObjKey::new(group, resource, namespace, name))
            .is_some()
    }

    pub(crate) fn list(&self, group: &str, resource: &str, namespace: &str) -> Vec<Value> {
        let ns = (!namespace.is_empty()).then_some(namespace);
        self.cluster
            .store
            .list(group, resource, ns)
            .into_iter()
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub(crate) fn names(&self, group: &str, resource: &str, namespace: &str) -> Vec<String> {
        self.list(group, resource, namespace)
            .iter()
            .map(|o| obj::name(o).to_string())
            .collect()
    }

    /// The reasons of the Events about the named object, oldest first.
    pub(crate) fn reasons(&self, namespace: &str, involved: &str) -> Vec<String> {
        let mut events: Vec<Value> = self
            .list("", "events", namespace)
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == involved)
            .collect();
        events.sort_by(|a, b| {
            a["firstTimestamp"]
                .as_str()
                .cmp(&b["firstTimestamp"].as_str())
        });
        events
            .iter()
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    }

    pub(crate) fn event_messages(&self, namespace: &str, reason: &str) -> Vec<String> {
        self.list("", "events", namespace)
            .iter()
            .filter(|e| e["reason"] == reason)
            .filter_map(|e| e["message"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let ctx = SettleCtx {
            now: self.now,
            scale: self.scale,
            processes: &self.processes,
            data_dir: self.dir.path(),
            spot_reclaims: None,
        };
        super::teardown(&self.cluster, &ctx);
    }
}
