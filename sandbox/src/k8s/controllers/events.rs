//! Core v1 Events as the controllers record them for `kubectl describe`: one Event per
//! (object, reason, message), its `count` raised when the same thing happens again, as the
//! client-go event recorder aggregates.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::common::hash::fnv64;
use crate::k8s::obj::{self, ts};
use crate::k8s::store::{ObjKey, Store};

/// The object an Event is about.
pub(super) struct Involved<'a> {
    pub object: &'a Value,
    pub api_version: &'a str,
    pub kind: &'a str,
}

impl<'a> Involved<'a> {
    pub(super) fn new(object: &'a Value, api_version: &'a str, kind: &'a str) -> Involved<'a> {
        Involved {
            object,
            api_version,
            kind,
        }
    }
}

/// What happened, and who says so.
pub(super) struct Event<'a> {
    pub reason: &'a str,
    pub message: String,
    pub warning: bool,
    /// `source.component`: `kubelet`, `default-scheduler`, `job-controller`…
    pub component: &'a str,
    /// `source.host`: the node, for kubelet events.
    pub host: Option<&'a str>,
    /// `involvedObject.fieldPath`, e.g. `spec.containers{main}`.
    pub field_path: Option<String>,
}

impl<'a> Event<'a> {
    pub(super) fn normal(
        component: &'a str,
        reason: &'a str,
        message: impl Into<String>,
    ) -> Event<'a> {
        Event {
            reason,
            message: message.into(),
            warning: false,
            component,
            host: None,
            field_path: None,
        }
    }

    pub(super) fn warning(
        component: &'a str,
        reason: &'a str,
        message: impl Into<String>,
    ) -> Event<'a> {
        Event {
            warning: true,
            ..Event::normal(component, reason, message)
        }
    }

    pub(super) fn on_host(mut self, host: &'a str) -> Event<'a> {
        self.host = Some(host);
        self
    }

    pub(super) fn at_container(mut self, container: &str) -> Event<'a> {
        self.field_path = Some(format!("spec.containers{{{container}}}"));
        self
    }
}

fn key(involved: &Involved<'_>, event: &Event<'_>) -> ObjKey {
    let o = involved.object;
    let namespace = obj::str_at(o, &["metadata", "namespace"])
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    // Named from what it says, not when: the same occurrence maps onto the same Event,
    // which keeps a repeated settle from piling up copies.
    let hash = fnv64(&[
        obj::uid(o),
        event.reason,
        &event.message,
        event.field_path.as_deref().unwrap_or_default(),
    ]);
    ObjKey::new(
        "",
        "events",
        namespace,
        &format!("{}.{hash:016x}", obj::name(o)),
    )
}

/// Records an Event that happened at `at`, or counts it again if it was recorded before.
pub(super) fn emit(
    store: &mut Store,
    involved: &Involved<'_>,
    event: Event<'_>,
    at: DateTime<Utc>,
) {
    let key = key(involved, &event);
    if let Some(existing) = store.get(&key) {
        let mut updated = existing.clone();
        let count = existing["count"].as_i64().unwrap_or(1) + 1;
        updated["count"] = json!(count);
        updated["lastTimestamp"] = ts(at);
        store.update(&key, updated);
        return;
    }
    let o = involved.object;
    let mut involved_ref = json!({
        "kind": involved.kind,
        "apiVersion": involved.api_version,
        "name": obj::name(o),
        "uid": obj::uid(o),
    });
    if let Some(ns) = obj::str_at(o, &["metadata", "namespace"]) {
        involved_ref["namespace"] = json!(ns);
    }
    if let Some(rv) = obj::str_at(o, &["metadata", "resourceVersion"]) {
        involved_ref["resourceVersion"] = json!(rv);
    }
    if let Some(fp) = &event.field_path {
        involved_ref["fieldPath"] = json!(fp);
    }
    let mut source = json!({"component": event.component});
    if let Some(host) = event.host {
        source["host"] = json!(host);
    }
    let object = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": key.name, "namespace": key.namespace},
        "involvedObject": involved_ref,
        "reason": event.reason,
        "message": event.message,
        "type": if event.warning { "Warning" } else { "Normal" },
        "count": 1,
        "firstTimestamp": ts(at),
        "lastTimestamp": ts(at),
        "source": source,
        "reportingComponent": event.component,
        "reportingInstance": event.host.unwrap_or_default(),
    });
    store.insert_new(key, object, at);
}

/// Records an Event unless the same one was recorded before: for things that happen once
/// per object (a scale-up triggered for a pod) but are noticed on every settle.
pub(super) fn emit_once(
    store: &mut Store,
    involved: &Involved<'_>,
    event: Event<'_>,
    at: DateTime<Utc>,
) {
    if store.get(&key(involved, &event)).is_none() {
        emit(store, involved, event, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_event_is_counted_not_copied() {
        let mut store = Store::default();
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}});
        let t0 = Utc::now();
        let inv = Involved::new(&pod, "v1", "Pod");
        emit(
            &mut store,
            &inv,
            Event::warning("default-scheduler", "FailedScheduling", "no"),
            t0,
        );
        emit(
            &mut store,
            &inv,
            Event::warning("default-scheduler", "FailedScheduling", "no"),
            t0 + chrono::Duration::seconds(5),
        );
        emit_once(
            &mut store,
            &inv,
            Event::warning("default-scheduler", "FailedScheduling", "no"),
            t0,
        );
        emit(
            &mut store,
            &inv,
            Event::normal("default-scheduler", "Scheduled", "yes"),
            t0,
        );
        let events = store.list("", "events", Some("ns"));
        assert_eq!(events.len(), 2);
        let failed = events
            .iter()
            .map(|(_, e)| *e)
            .find(|e| e["reason"] == "FailedScheduling")
            .expect("the FailedScheduling event");
        assert_eq!(failed["count"], 2);
        assert_eq!(failed["type"], "Warning");
        assert_eq!(failed["involvedObject"]["kind"], "Pod");
        assert_ne!(failed["firstTimestamp"], failed["lastTimestamp"]);
    }
}
