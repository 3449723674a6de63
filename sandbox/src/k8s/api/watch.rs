//! Watches: the events since a resourceVersion, bookmarks, timeouts, and the poll a
//! streaming watch makes under the state lock.

use super::*;

/// A running watch: what it selects and how far it has read the change log.
#[derive(Debug)]
pub(crate) struct Watch {
    rt: ResourceType,
    namespace: Option<String>,
    selectors: Selectors,
    last: u64,
    /// Whether each object seen so far matched the selectors, so an object that stops
    /// (or starts) matching is reported as DELETED (ADDED).
    visible: BTreeMap<ObjKey, bool>,
    table: Option<Include>,
    pub timeout: Duration,
    /// Set once an ERROR event has been sent: the stream ends.
    pub finished: bool,
}

impl Watch {
    pub(super) fn start(
        cluster: &ClusterState,
        t: &Target,
        req: &KubeRequest,
        now: DateTime<Utc>,
    ) -> Result<(Watch, Vec<Value>), StatusError> {
        let selectors = Selectors::parse(req, &t.rt)?;
        let timeout = req
            .param("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_WATCH_TIMEOUT);
        let mut w = Watch {
            rt: t.rt.clone(),
            namespace: t.namespace.clone(),
            selectors,
            last: cluster.store.resource_version,
            visible: BTreeMap::new(),
            table: table_include(req),
            timeout,
            finished: false,
        };
        let rv = req.param("resourceVersion").unwrap_or("");
        let initial_events = req.flag("sendInitialEvents");
        let mut events = Vec::new();
        if rv.is_empty() || rv == "0" || initial_events {
            for (k, o) in
                cluster
                    .store
                    .list(&t.rt.storage_group, &t.rt.plural, t.namespace.as_deref())
            {
                let m = w.selectors.matches(o);
                w.visible.insert(k.clone(), m);
                if m {
                    events.push(w.event("ADDED", o, now));
                }
            }
            if initial_events {
                events.push(json!({"type": "BOOKMARK", "object": {
                    "kind": t.rt.kind, "apiVersion": t.rt.api_version(),
                    "metadata": {"resourceVersion": w.last.to_string(),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}
                }}));
            }
            return Ok((w, events));
        }
        let from: u64 = rv
            .parse()
            .map_err(|_| StatusError::bad_request(format!("invalid resource version {rv:?}")))?;
        w.last = from;
        let events = w.poll(cluster, now);
        Ok((w, events))
    }

    fn event(&self, kind: &str, stored: &Value, now: DateTime<Utc>) -> Value {
        let obj = view(&self.rt, stored);
        let object = match self.table {
            Some(include) => {
                let meta =
                    json!({"resourceVersion": resource_version_of(&obj).unwrap_or_default()});
                table::table(&self.rt, &[obj], now, include, meta)
            }
            None => obj,
        };
        json!({"type": kind, "object": object})
    }

    /// The events since the last poll.
    pub(crate) fn poll(&mut self, cluster: &ClusterState, now: DateTime<Utc>) -> Vec<Value> {
        if self.finished {
            return Vec::new();
        }
        let Some(changes) = cluster.store.changes_since(self.last) else {
            self.finished = true;
            let oldest = cluster.store.resource_version;
            let err = StatusError::expired(format!(
                "too old resource version: {} ({oldest})",
                self.last
            ));
            return vec![json!({"type": "ERROR", "object": err.to_value()})];
        };
        let mut events = Vec::new();
        for c in changes {
            self.last = c.resource_version;
            if c.key.group != self.rt.storage_group
                || c.key.resource != self.rt.plural
                || self
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| ns != c.key.namespace)
            {
                continue;
            }
            let now_matches = self.selectors.matches(&c.object);
            let was = *self
                .visible
                .entry(c.key.clone())
                .or_insert(c.kind != "ADDED" && now_matches);
            let kind = match (c.kind, was, now_matches) {
                ("DELETED", true, _) => Some("DELETED"),
                ("DELETED", false, _) => None,
                (_, true, true) => Some(if c.kind == "ADDED" {
                    "ADDED"
                } else {
                    "MODIFIED"
                }),
                (_, true, false) => Some("DELETED"),
                (_, false, true) => Some("ADDED"),
                (_, false, false) => None,
            };
            if c.kind == "DELETED" {
                self.visible.remove(&c.key);
            } else {
                self.visible.insert(c.key.clone(), now_matches);
            }
            if let Some(kind) = kind {
                events.push(self.event(kind, &c.object, now));
            }
        }
        // Every change up to the store's version has now been seen.
        self.last = self.last.max(cluster.store.resource_version);
        events
    }
}
