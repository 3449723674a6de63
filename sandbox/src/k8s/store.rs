//! The object store of one emulated Kubernetes API server: every object as JSON under its
//! [`ObjKey`], one resourceVersion counter, and the change log that watches read from.
//! Handlers and controllers change objects only through these methods, so uids,
//! timestamps, resourceVersions, generations and watch events stay consistent.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::common::ids::new_uid;

/// How many changes the log keeps for watches; older resourceVersions get 410 Gone.
const LOG_CAPACITY: usize = 4096;

/// Where an object lives: API group (`""` for core), plural resource, namespace (`""`
/// for cluster-scoped objects) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct ObjKey {
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl ObjKey {
    pub(crate) fn new(group: &str, resource: &str, namespace: &str, name: &str) -> ObjKey {
        ObjKey {
            group: group.to_string(),
            resource: resource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// `pods "x"` or `jobs.batch "x"`, as the API server names objects in messages.
    pub(crate) fn describe(&self) -> String {
        if self.group.is_empty() {
            format!("{} \"{}\"", self.resource, self.name)
        } else {
            format!("{}.{} \"{}\"", self.resource, self.group, self.name)
        }
    }
}

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub resource_version: u64,
    pub key: ObjKey,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    pub object: Value,
}

/// The objects of one cluster.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Store {
    /// The last resourceVersion handed out.
    pub resource_version: u64,
    /// Serialized as a list: JSON object keys must be strings.
    #[serde(with = "entries")]
    objects: BTreeMap<ObjKey, Value>,
    #[serde(skip)]
    log: VecDeque<Change>,
}

mod entries {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<ObjKey, Value>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter().map(|(k, v)| ObjKeyed(k, v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<ObjKey, Value>, D::Error> {
        let list: Vec<StoredObject> = Vec::deserialize(d)?;
        Ok(list.into_iter().map(|o| (o.key, o.object)).collect())
    }

    #[derive(Deserialize)]
    struct StoredObject {
        #[serde(flatten)]
        key: ObjKey,
        object: Value,
    }
}

/// An object persisted with its key beside it (see `entries`).
struct ObjKeyed<'a>(&'a ObjKey, &'a Value);

impl Serialize for ObjKeyed<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("group", &self.0.group)?;
        m.serialize_entry("resource", &self.0.resource)?;
        m.serialize_entry("namespace", &self.0.namespace)?;
        m.serialize_entry("name", &self.0.name)?;
        m.serialize_entry("object", self.1)?;
        m.end()
    }
}

pub(crate) fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Store {
    pub(crate) fn get(&self, key: &ObjKey) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Objects of one resource, in key order; `namespace: None` means every namespace.
    pub(crate) fn list(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> Vec<(&ObjKey, &Value)> {
        self.objects
            .iter()
            .filter(|(k, _)| {
                k.group == group
                    && k.resource == resource
                    && namespace.is_none_or(|ns| k.namespace == ns)
            })
            .collect()
    }

    /// Every key, for controllers that sweep (garbage collection).
    pub(crate) fn keys(&self) -> Vec<ObjKey> {
        self.objects.keys().cloned().collect()
    }

    fn bump(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn record(&mut self, key: &ObjKey, kind: &'static str, object: &Value) {
        if self.log.len() >= LOG_CAPACITY {
            self.log.pop_front();
        }
        self.log.push_back(Change {
            resource_version: self.resource_version,
            key: key.clone(),
            kind,
            object: object.clone(),
        });
    }

    /// Stores a new object, filling `creationTimestamp`, `resourceVersion`,
    /// `generation` and `metadata.uid` (kept when defaulting already assigned one, as a
    /// Job's selector must name it); returns the stored object. The caller has checked
    /// that the key is free.
    pub(crate) fn insert_new(
        &mut self,
        key: ObjKey,
        mut object: Value,
        now: DateTime<Utc>,
    ) -> Value {
        let rv = self.bump();
        let meta = ensure_object(&mut object, "metadata");
        meta.insert("name".into(), json!(key.name));
        if !key.namespace.is_empty() {
            meta.insert("namespace".into(), json!(key.namespace));
        }
        if !meta.get("uid").is_some_and(Value::is_string) {
            meta.insert("uid".into(), json!(new_uid()));
        }
        meta.insert("creationTimestamp".into(), json!(timestamp(now)));
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        meta.insert("generation".into(), json!(1));
        self.record(&key, "ADDED", &object);
        self.objects.insert(key, object.clone());
        object
    }

    /// Replaces a stored object, bumping `resourceVersion` and, when anything outside
    /// metadata and status changed, `generation`; returns the stored object. A write
    /// that changes nothing is not recorded and keeps the resourceVersion, as the API
    /// server does; a change of managers counts, a change of their timestamps alone does
    /// not (the server's field manager skips those).
    pub(crate) fn update(&mut self, key: &ObjKey, mut object: Value) -> Value {
        let Some(old) = self.objects.get(key) else {
            return object;
        };
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
                m.remove("generation");
                if let Some(Value::Array(managers)) = m.get_mut("managedFields") {
                    for entry in managers.iter_mut().filter_map(Value::as_object_mut) {
                        entry.remove("time");
                    }
                }
            }
            v
        };
        if strip(old) == strip(&object) {
            return old.clone();
        }
        let spec_changed = {
            let body = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("metadata");
                    m.remove("status");
                }
                v
            };
            body(old) != body(&object)
        };
        let generation =
            old["metadata"]["generation"].as_i64().unwrap_or(1) + i64::from(spec_changed);
        let rv = self.bump();
        let meta = ensure_object(&mut object, "metadata");
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        meta.insert("generation".into(), json!(generation));
        self.record(key, "MODIFIED", &object);
        self.objects.insert(key.clone(), object.clone());
        object
    }

    /// Removes an object for good (after finalizers); records DELETED.
    pub(crate) fn remove(&mut self, key: &ObjKey) -> Option<Value> {
        let mut object = self.objects.remove(key)?;
        let rv = self.bump();
        if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.record(key, "DELETED", &object);
        Some(object)
    }

    /// Starts deleting an object: with finalizers it gets `deletionTimestamp` and stays
    /// until they are removed (controllers then call [`Store::finish_deletions`]);
    /// without, it is removed at once. Returns the object as the DELETE response shows it.
    pub(crate) fn delete(&mut self, key: &ObjKey, now: DateTime<Utc>) -> Option<Value> {
        let object = self.objects.get(key)?.clone();
        let has_finalizers = object["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !has_finalizers {
            return self.remove(key);
        }
        if object["metadata"].get("deletionTimestamp").is_some() {
            return Some(object);
        }
        let mut object = object;
        let meta = ensure_object(&mut object, "metadata");
        meta.insert("deletionTimestamp".into(), json!(timestamp(now)));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        Some(self.update(key, object))
    }

    /// Removes every object being deleted whose finalizers are all gone.
    pub(crate) fn finish_deletions(&mut self) {
        let done: Vec<ObjKey> = self
            .objects
            .iter()
            .filter(|(_, o)| {
                o["metadata"].get("deletionTimestamp").is_some()
                    && o["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(|f| f.is_empty())
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in done {
            self.remove(&key);
        }
    }

    /// Changes after `resource_version` still in the log, or `None` when that version is
    /// older than the log reaches (a watch must then answer 410 Gone).
    pub(crate) fn changes_since(&self, resource_version: u64) -> Option<Vec<Change>> {
        if let Some(first) = self.log.front() {
            if resource_version + 1 < first.resource_version
                && resource_version < self.resource_version
            {
                return None;
            }
        }
        Some(
            self.log
                .iter()
                .filter(|c| c.resource_version > resource_version)
                .cloned()
                .collect(),
        )
    }
}

fn ensure_object<'a>(value: &'a mut Value, field: &str) -> &'a mut serde_json::Map<String, Value> {
    if !value.is_object() {
        *value = json!({});
    }
    let Some(map) = value.as_object_mut() else {
        unreachable!("just made an object")
    };
    let entry = map.entry(field.to_string()).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    match entry.as_object_mut() {
        Some(m) => m,
        None => unreachable!("just made an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjKey {
        ObjKey::new("batch", "jobs", "default", name)
    }

    #[test]
    fn insert_update_delete_keep_versions_and_log_consistent() {
        let mut s = Store::default();
        let now = Utc::now();
        let a = s.insert_new(key("a"), json!({"metadata": {}, "spec": {"x": 1}}), now);
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        assert_eq!(a["metadata"]["generation"], 1);
        assert_eq!(a["metadata"]["namespace"], "default");
        let mut b = a.clone();
        b["status"] = json!({"active": 1});
        let b = s.update(&key("a"), b);
        assert_eq!(b["metadata"]["resourceVersion"], "2");
        assert_eq!(
            b["metadata"]["generation"], 1,
            "a status change keeps the generation"
        );
        let mut c = b.clone();
        c["spec"]["x"] = json!(2);
        let c = s.update(&key("a"), c);
        assert_eq!(c["metadata"]["generation"], 2);
        let same = s.update(&key("a"), c.clone());
        assert_eq!(
            same["metadata"]["resourceVersion"], "3",
            "a no-op write keeps the version"
        );
        assert!(s.remove(&key("a")).is_some());
        let kinds: Vec<_> = s
            .changes_since(0)
            .map(|c| c.iter().map(|c| c.kind).collect())
            .unwrap_or_default();
        assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
        assert_eq!(s.changes_since(3).map(|c| c.len()), Some(1));
    }

    #[test]
    fn finalizers_hold_an_object_until_removed() {
        let mut s = Store::default();
        let now = Utc::now();
        s.insert_new(key("a"), json!({"metadata": {"finalizers": ["x"]}}), now);
        let shown = s.delete(&key("a"), now);
        assert!(shown.is_some_and(|o| o["metadata"].get("deletionTimestamp").is_some()));
        s.finish_deletions();
        assert!(s.get(&key("a")).is_some());
        let mut o = s.get(&key("a")).cloned().unwrap_or_default();
        o["metadata"]["finalizers"] = json!([]);
        s.update(&key("a"), o);
        s.finish_deletions();
        assert!(s.get(&key("a")).is_none());
    }

    #[test]
    fn store_survives_a_json_round_trip() {
        let mut s = Store::default();
        s.insert_new(key("a"), json!({"metadata": {}}), Utc::now());
        let text = serde_json::to_string(&s).unwrap_or_default();
        let back: Store = serde_json::from_str(&text).unwrap_or_default();
        assert!(back.get(&key("a")).is_some());
        assert_eq!(back.resource_version, 1);
    }
}
