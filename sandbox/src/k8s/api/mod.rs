//! The request handlers of an emulated Kubernetes API server: routing a path to a
//! resource type, get/list (label and field selectors, paging), create, replace, the
//! patch flavours, server-side apply, delete with propagation, the status and scale
//! subresources, dry runs, pod logs, and the first half of watches, exec and
//! port-forward (validated here under the state lock, streamed by `server/kube.rs`).
//! Transport-neutral, so every rule can be unit-tested without a socket. This file owns
//! a request's outcome and the routing of a path (`request.rs` the request) to a handler; the handlers
//! live by seam: `objects.rs` (views, checks, storing), `selectors.rs`, `read.rs`,
//! `write.rs` (create, replace, patches, server-side apply), `delete.rs`, `scale.rs`,
//! `pods.rs` (logs, exec, port-forward), `proxy.rs` (the service proxy) and `watch.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::http::Method;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::apply::{self, Writer};
use super::discovery::{self, ResourceType};
use super::request::KubeRequest;
use super::status::{self, Cause, StatusError};
use super::store::timestamp;
use super::stream::ExecTarget;
use super::table::{self, Include};
use super::{controllers, defaults, environment, volumes, ClusterState, ObjKey, SettleCtx};
use crate::common::ids::new_uid;
use crate::http::{percent_decode, ApiResponse, Body};

mod delete;
mod objects;
mod pods;
mod proxy;
mod read;
mod scale;
mod selectors;
mod watch;
mod write;

use delete::*;
use objects::*;
use pods::*;
use read::*;
use scale::*;
use selectors::*;
use write::*;

pub(crate) use pods::{follow_poll, LogFollow};
pub(crate) use watch::Watch;

/// Watches without `timeoutSeconds` end after this long, as the API server's default.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Namespaces that cannot be deleted.
const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// What a request turned into: an answer, or a stream for `server/kube.rs` to run.
#[derive(Debug)]
pub(crate) enum Outcome {
    Done(ApiResponse),
    Watch(Box<Watch>, Vec<Value>),
    FollowLog(LogFollow),
    Exec(ExecTarget),
    PortForward(Vec<(u16, Option<SocketAddr>)>),
}

impl From<StatusError> for Outcome {
    fn from(e: StatusError) -> Outcome {
        Outcome::Done(e.response())
    }
}

fn ok(status: u16, value: Value) -> Outcome {
    Outcome::Done(ApiResponse::json(status, value))
}

/// A path resolved to a resource.
#[derive(Debug, Clone)]
struct Target {
    rt: ResourceType,
    /// `None`: every namespace (lists and watches of namespaced types).
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    /// The deprecated `/watch/` path form.
    watch_path: bool,
}

impl Target {
    fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    fn key(&self) -> ObjKey {
        self.rt.key(self.ns(), self.name())
    }
}

fn segments(path: &str) -> Vec<String> {
    path.trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect()
}

/// Serves one request against one cluster (already settled by the caller).
pub(crate) fn handle(cluster: &mut ClusterState, req: &KubeRequest, ctx: &SettleCtx) -> Outcome {
    let segs = segments(&req.path);
    let seg: Vec<&str> = segs.iter().map(String::as_str).collect();
    let get_only = |value: Option<Value>| -> Outcome {
        if req.method != Method::GET {
            return StatusError::method_not_allowed(req.method.as_str()).into();
        }
        match value {
            Some(v) => ok(200, v),
            None => StatusError::no_route().into(),
        }
    };
    // The service proxy forwards any body as is: no field validation applies to it.
    if let ["api", "v1", "namespaces", ns, "services", svc, "proxy", rest @ ..] = seg.as_slice() {
        return proxy::service_proxy(cluster, req, ctx, ns, svc, rest);
    }
    // fieldValidation=Strict: the schemas behind /openapi reject undeclared fields first.
    if let Some(refused) = super::openapi::strict_field_check(cluster, req, &seg) {
        return Outcome::Done(refused);
    }
    match seg.as_slice() {
        [] => get_only(Some(
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]}),
        )),
        ["healthz" | "livez" | "readyz"] => Outcome::Done(ApiResponse {
            status: 200,
            body: Body::Bytes {
                content_type: "text/plain; charset=utf-8".into(),
                data: b"ok".to_vec(),
            },
            retry_after: None,
        }),
        ["version"] => get_only(Some(discovery::version_info(cluster))),
        ["api"] => {
            if discovery::wants_aggregated(req.accept()) {
                return aggregated(discovery::aggregated(cluster, true), req);
            }
            get_only(Some(discovery::core_versions(cluster)))
        }
        ["apis"] => {
            if discovery::wants_aggregated(req.accept()) {
                return aggregated(discovery::aggregated(cluster, false), req);
            }
            get_only(Some(discovery::group_list(cluster)))
        }
        ["apis", group] => get_only(discovery::group(cluster, group)),
        ["api", "v1"] => get_only(discovery::resource_list(cluster, "", "v1")),
        ["apis", group, version] => get_only(discovery::resource_list(cluster, group, version)),
        ["openapi", rest @ ..] => Outcome::Done(super::openapi::respond(
            cluster,
            &req.method,
            req.accept(),
            rest,
        )),
        ["api", "v1", rest @ ..] => resource(cluster, req, ctx, "", "v1", rest),
        ["apis", group, version, rest @ ..] => resource(cluster, req, ctx, group, version, rest),
        _ => StatusError::no_route().into(),
    }
}

fn aggregated(value: Value, req: &KubeRequest) -> Outcome {
    if req.method != Method::GET {
        return StatusError::method_not_allowed(req.method.as_str()).into();
    }
    Outcome::Done(ApiResponse {
        status: 200,
        body: Body::Bytes {
            content_type: discovery::AGGREGATED_CONTENT_TYPE.into(),
            data: value.to_string().into_bytes(),
        },
        retry_after: None,
    })
}

fn resolve(cluster: &ClusterState, group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    if let ["namespaces", ns, plural, more @ ..] = rest {
        if let Some(rt) = discovery::find(cluster, group, version, plural).filter(|r| r.namespaced)
        {
            if more.len() > 2 {
                return None;
            }
            return Some(Target {
                rt,
                namespace: Some(ns.to_string()),
                name: more.first().map(|s| s.to_string()),
                sub: more.get(1).map(|s| s.to_string()),
                watch_path,
            });
        }
    }
    let (plural, more) = rest.split_first()?;
    if more.len() > 2 {
        return None;
    }
    let rt = discovery::find(cluster, group, version, plural)?;
    if rt.namespaced && !more.is_empty() {
        // A namespaced object is only reachable under its namespace.
        return None;
    }
    Some(Target {
        rt,
        namespace: None,
        name: more.first().map(|s| s.to_string()),
        sub: more.get(1).map(|s| s.to_string()),
        watch_path,
    })
}

fn resource(
    cluster: &mut ClusterState,
    req: &KubeRequest,
    ctx: &SettleCtx,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Outcome {
    let Some(t) = resolve(cluster, group, version, rest) else {
        return StatusError::no_route().into();
    };
    if let Some(v) = req.param("dryRun").filter(|v| *v != "All") {
        return StatusError::bad_request(format!(
            "invalid dry run value {v:?}: the only supported value is \"All\""
        ))
        .into();
    }
    let result = match (t.sub.as_deref(), t.name.is_some()) {
        (None, false) => match req.method {
            Method::GET if t.watch_path || req.flag("watch") => {
                return match Watch::start(cluster, &t, req, ctx.now) {
                    Ok((w, initial)) => Outcome::Watch(Box::new(w), initial),
                    Err(e) => e.into(),
                }
            }
            Method::GET => list(cluster, &t, req, ctx.now),
            Method::POST if !t.rt.namespaced || t.namespace.is_some() => {
                create(cluster, &t, req, ctx.now)
            }
            Method::DELETE => delete_collection(cluster, &t, req, ctx.now),
            _ => Err(StatusError::method_not_allowed(req.method.as_str())),
        },
        (None, true) => match req.method {
            Method::GET if t.watch_path => {
                let mut t = t.clone();
                let name = t.name.take().unwrap_or_default();
                let mut req = req.clone();
                req.query
                    .push(("fieldSelector".into(), format!("metadata.name={name}")));
                return match Watch::start(cluster, &t, &req, ctx.now) {
                    Ok((w, initial)) => Outcome::Watch(Box::new(w), initial),
                    Err(e) => e.into(),
                };
            }
            Method::GET => get(cluster, &t, req, ctx.now),
            Method::PUT => replace(cluster, &t, req, ctx.now),
            Method::PATCH => patch(cluster, &t, req, ctx.now),
            Method::DELETE => delete(cluster, &t, req, ctx.now),
            _ => Err(StatusError::method_not_allowed(req.method.as_str())),
        },
        (Some("status"), true) if t.rt.has("status") => match req.method {
            Method::GET => get(cluster, &t, req, ctx.now),
            Method::PUT => replace(cluster, &t, req, ctx.now),
            Method::PATCH => patch(cluster, &t, req, ctx.now),
            _ => Err(StatusError::method_not_allowed(req.method.as_str())),
        },
        (Some("scale"), true) if t.rt.scale.is_some() => scale(cluster, &t, req, ctx.now),
        (Some("log"), true) if t.rt.has("log") => {
            if req.method != Method::GET {
                Err(StatusError::method_not_allowed(req.method.as_str()))
            } else {
                return logs(cluster, &t, req, ctx.now);
            }
        }
        (Some("exec"), true) if t.rt.has("exec") => return exec(cluster, &t, req, ctx),
        (Some("portforward"), true) if t.rt.has("portforward") => {
            return portforward(cluster, &t, req, ctx)
        }
        _ => Err(StatusError::no_route()),
    };
    match result {
        Ok(outcome) => outcome,
        Err(e) => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::processes::Processes;

    struct Fixture {
        cluster: ClusterState,
        dir: tempfile::TempDir,
        processes: Processes,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().expect("temp dir");
            let processes = Processes::new(dir.path().to_path_buf());
            Fixture {
                cluster: ClusterState::new(
                    "c",
                    crate::k8s::controllers::testkit::cloud(false),
                    String::new(),
                    String::new(),
                    Vec::new(),
                    "v1.31.8-sandbox".to_string(),
                    Utc::now(),
                ),
                dir,
                processes,
            }
        }

        fn send(
            &mut self,
            method: Method,
            path_query: &str,
            content_type: Option<&str>,
            body: Option<Value>,
        ) -> Outcome {
            let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
            let req = KubeRequest {
                method,
                path: path.to_string(),
                query: crate::http::parse_query(query),
                content_type: content_type.map(str::to_string),
                accept: None,
                user_agent: Some("tester/1.0".into()),
                body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
                port_streams: false,
            };
            self.handle(&req)
        }

        fn handle(&mut self, req: &KubeRequest) -> Outcome {
            let ctx = SettleCtx {
                now: Utc::now(),
                scale: 0.0,
                processes: &self.processes,
                data_dir: self.dir.path(),
                spot_reclaims: None,
            };
            handle(&mut self.cluster, req, &ctx)
        }

        fn call(&mut self, method: Method, path_query: &str, body: Option<Value>) -> (u16, Value) {
            let ct = match method {
                Method::PATCH => Some("application/merge-patch+json"),
                _ => Some("application/json"),
            };
            self.reply(method, path_query, ct, body)
        }

        fn reply(
            &mut self,
            method: Method,
            path_query: &str,
            ct: Option<&str>,
            body: Option<Value>,
        ) -> (u16, Value) {
            match self.send(method, path_query, ct, body) {
                Outcome::Done(r) => (r.status, r.json_body().cloned().unwrap_or(Value::Null)),
                other => panic!("expected a plain answer, got {other:?}"),
            }
        }
    }

    const CMS: &str = "/api/v1/namespaces/default/configmaps";

    fn cm(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
    }

    #[test]
    fn label_selectors_parse_and_match() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=back", false),
            ("missing notin (x)", true),
            ("", true),
        ];
        for (selector, want) in cases {
            let reqs = parse_label_selector(selector).expect(selector);
            assert_eq!(labels_match(&reqs, &obj), want, "{selector}");
        }
        for bad in ["app in web)", "a b in (x)", "=x", "app=not valid"] {
            assert!(parse_label_selector(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_depend_on_the_type() {
        let f = Fixture::new();
        let pods = discovery::find(&f.cluster, "", "v1", "pods").expect("pods");
        let cms = discovery::find(&f.cluster, "", "v1", "configmaps").expect("configmaps");
        let events = discovery::find(&f.cluster, "", "v1", "events").expect("events");
        let pod = json!({"metadata": {"name": "p", "namespace": "n"}, "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}});
        let cases = [
            (&pods, "spec.nodeName=node-1", Some(true)),
            (&pods, "status.phase!=Running", Some(false)),
            (&pods, "metadata.name=p,metadata.namespace=n", Some(true)),
            (&cms, "spec.nodeName=node-1", None),
            (&events, "involvedObject.name=p", Some(false)),
        ];
        for (rt, selector, want) in cases {
            let got = parse_field_selector(selector, rt)
                .ok()
                .map(|reqs| fields_match(&reqs, &pod));
            assert_eq!(got, want, "{selector}");
        }
    }

    #[test]
    fn crud_with_conflicts_and_not_found() {
        let mut f = Fixture::new();
        let (code, created) = f.call(Method::POST, CMS, Some(cm("a", json!({"app": "x"}))));
        assert_eq!(code, 201, "{created}");
        assert_eq!(created["metadata"]["managedFields"][0]["manager"], "tester");
        assert_eq!(f.call(Method::POST, CMS, Some(cm("a", json!({})))).0, 409);
        let (code, got) = f.call(Method::GET, &format!("{CMS}/a"), None);
        assert_eq!((code, got["data"]["k"].as_str()), (200, Some("v")));
        let mut stale = got.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        stale["data"]["k"] = json!("w");
        let (code, err) = f.call(Method::PUT, &format!("{CMS}/a"), Some(stale));
        assert_eq!((code, err["reason"].as_str()), (409, Some("Conflict")));
        let mut fresh = got.clone();
        fresh["data"]["k"] = json!("w");
        let (code, put) = f.call(Method::PUT, &format!("{CMS}/a"), Some(fresh));
        assert_eq!((code, put["data"]["k"].as_str()), (200, Some("w")));
        let (code, patched) = f.call(
            Method::PATCH,
            &format!("{CMS}/a"),
            Some(json!({"data": {"k": null, "n": "1"}})),
        );
        assert_eq!((code, patched["data"].clone()), (200, json!({"n": "1"})));
        let (code, gone) = f.call(Method::DELETE, &format!("{CMS}/a"), None);
        assert_eq!((code, gone["status"].as_str()), (200, Some("Success")));
        let (code, err) = f.call(Method::GET, &format!("{CMS}/a"), None);
        assert_eq!(code, 404);
        assert_eq!(err["message"], "configmaps \"a\" not found");
        assert_eq!(
            f.call(Method::GET, "/api/v1/namespaces/default/widgets", None)
                .0,
            404
        );
    }

    #[test]
    fn creates_check_names_and_namespaces() {
        let mut f = Fixture::new();
        let (code, err) = f.call(Method::POST, CMS, Some(cm("Bad_Name", json!({}))));
        assert_eq!((code, err["reason"].as_str()), (422, Some("Invalid")));
        assert_eq!(err["details"]["causes"][0]["field"], "metadata.name");
        let (code, err) = f.call(
            Method::POST,
            "/api/v1/namespaces/nope/configmaps",
            Some(cm("a", json!({}))),
        );
        assert_eq!(
            (code, err["message"].as_str()),
            (404, Some("namespaces \"nope\" not found"))
        );
        let (code, made) = f.call(
            Method::POST,
            CMS,
            Some(json!({"metadata": {"generateName": "gen-"}})),
        );
        assert_eq!(code, 201);
        assert!(made["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("gen-") && n.len() == 9));
        let (code, dry) = f.call(
            Method::POST,
            &format!("{CMS}?dryRun=All"),
            Some(cm("dry", json!({}))),
        );
        assert_eq!(code, 201);
        assert!(dry["metadata"]["uid"].is_string());
        assert_eq!(
            f.call(Method::GET, &format!("{CMS}/dry"), None).0,
            404,
            "a dry run stores nothing"
        );
        let (code, _) = f.call(Method::DELETE, "/api/v1/namespaces/default", None);
        assert_eq!(code, 403, "default cannot be deleted");
    }

    #[test]
    fn lists_select_and_page() {
        let mut f = Fixture::new();
        for (name, app) in [("a", "x"), ("b", "y"), ("c", "x")] {
            assert_eq!(
                f.call(Method::POST, CMS, Some(cm(name, json!({"app": app}))))
                    .0,
                201
            );
        }
        let names = |v: &Value| -> Vec<String> {
            v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        };
        let (_, list) = f.call(Method::GET, &format!("{CMS}?labelSelector=app%3Dx"), None);
        assert_eq!(names(&list), ["a", "c"]);
        assert_eq!(list["kind"], "ConfigMapList");
        assert!(list["metadata"]["resourceVersion"].is_string());
        let (_, page) = f.call(Method::GET, &format!("{CMS}?limit=2"), None);
        assert_eq!(names(&page), ["a", "b"]);
        let token = page["metadata"]["continue"]
            .as_str()
            .expect("continue token")
            .to_string();
        let (_, rest) = f.call(
            Method::GET,
            &format!("{CMS}?limit=2&continue={token}"),
            None,
        );
        assert_eq!(names(&rest), ["c"]);
        let (_, all) = f.call(
            Method::GET,
            "/api/v1/configmaps?fieldSelector=metadata.name%3Db",
            None,
        );
        assert_eq!(names(&all), ["b"]);
        let (code, _) = f.call(
            Method::GET,
            &format!("{CMS}?fieldSelector=spec.x%3D1"),
            None,
        );
        assert_eq!(code, 400);
    }

    #[test]
    fn status_subresource_changes_only_status() {
        let mut f = Fixture::new();
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}},
                         "status": {"active": 5}});
        let (code, created) = f.call(
            Method::POST,
            "/apis/batch/v1/namespaces/default/jobs",
            Some(job),
        );
        assert_eq!(code, 201);
        assert!(
            created.get("status").is_none(),
            "status is not set on create"
        );
        let (code, s) = f.call(
            Method::PATCH,
            "/apis/batch/v1/namespaces/default/jobs/j/status",
            Some(json!({"status": {"active": 1}, "spec": {"parallelism": 9}})),
        );
        assert_eq!(code, 200);
        assert_eq!(s["status"]["active"], 1);
        assert_ne!(
            s["spec"]["parallelism"], 9,
            "spec is not written through status"
        );
        let (_, main) = f.call(
            Method::PATCH,
            "/apis/batch/v1/namespaces/default/jobs/j",
            Some(json!({"status": {"active": 7}, "spec": {"parallelism": 2}})),
        );
        assert_eq!(
            (
                main["status"]["active"].as_i64(),
                main["spec"]["parallelism"].as_i64()
            ),
            (Some(1), Some(2))
        );
    }

    #[test]
    fn patch_flavours() {
        let doc = json!({"a": {"b": 1}, "l": [{"name": "x", "v": 1}, {"name": "y", "v": 2}], "s": [1, 2]});
        let mut merged = doc.clone();
        merge_patch(&mut merged, &json!({"a": {"b": null, "c": 2}, "s": [3]}));
        assert_eq!(merged, json!({"a": {"c": 2}, "l": doc["l"], "s": [3]}));
        let mut strategic = doc.clone();
        strategic_merge_patch(
            &mut strategic,
            &json!({"$setElementOrder/l": [{"name": "y"}], "l": [{"name": "y", "v": 3}, {"name": "x", "$patch": "delete"}]}),
        );
        assert_eq!(strategic["l"], json!([{"name": "y", "v": 3}]));
        assert!(strategic.get("$setElementOrder/l").is_none());
        let patched = json_patch(
            &doc,
            &json!([
                {"op": "add", "path": "/s/-", "value": 9},
                {"op": "replace", "path": "/a/b", "value": 5},
                {"op": "remove", "path": "/l/0"},
                {"op": "test", "path": "/a/b", "value": 5}
            ]),
        )
        .expect("patch applies");
        assert_eq!(
            patched,
            json!({"a": {"b": 5}, "l": [{"name": "y", "v": 2}], "s": [1, 2, 9]})
        );
        assert!(json_patch(&doc, &json!([{"op": "test", "path": "/a/b", "value": 2}])).is_err());
    }

    #[test]
    fn json_patch_test_of_a_missing_member_against_null_passes() {
        let doc = json!({"metadata": {"name": "s"}});
        let patched = json_patch(
            &doc,
            &json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["terrain.dev/destroy"]}
            ]),
        )
        .expect("a missing member tests equal to null");
        assert_eq!(
            patched["metadata"]["finalizers"],
            json!(["terrain.dev/destroy"])
        );
        let missing = json!([{"op": "test", "path": "/metadata/finalizers", "value": []}]);
        assert!(json_patch(&doc, &missing).is_err());
    }

    #[test]
    fn server_side_apply_over_the_api() {
        let mut f = Fixture::new();
        let apply_ct = Some("application/apply-patch+yaml");
        let url = "/apis/apps/v1/namespaces/default/deployments/d";
        let config = |replicas: i64| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                   "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                            "template": {"metadata": {"labels": {"app": "d"}},
                                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        };
        let (code, err) = f.reply(Method::PATCH, url, apply_ct, Some(config(1)));
        assert_eq!(
            (code, err["reason"].as_str()),
            (400, Some("BadRequest")),
            "fieldManager is required"
        );
        let (code, made) = f.reply(
            Method::PATCH,
            &format!("{url}?fieldManager=kubectl"),
            apply_ct,
            Some(config(1)),
        );
        assert_eq!(code, 201, "{made}");
        let (code, err) = f.reply(
            Method::PATCH,
            &format!("{url}?fieldManager=other"),
            apply_ct,
            Some(config(2)),
        );
        assert_eq!(code, 409);
        assert_eq!(
            err["message"],
            "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
        );
        assert_eq!(
            err["details"]["causes"][0],
            json!({"reason": "FieldManagerConflict", "message": "conflict with \"kubectl\"", "field": ".spec.replicas"})
        );
        let (code, forced) = f.reply(
            Method::PATCH,
            &format!("{url}?fieldManager=other&force=true"),
            apply_ct,
            Some(config(2)),
        );
        assert_eq!((code, forced["spec"]["replicas"].as_i64()), (200, Some(2)));
        let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: 4\n  selector:\n    matchLabels: {app: d}\n  template:\n    metadata:\n      labels: {app: d}\n    spec:\n      containers: [{name: c, image: i}]\n";
        let req = KubeRequest {
            method: Method::PATCH,
            path: url.into(),
            query: vec![("fieldManager".into(), "other".into())],
            content_type: apply_ct.map(str::to_string),
            accept: None,
            user_agent: None,
            body: yaml.as_bytes().to_vec(),
            port_streams: false,
        };
        match f.handle(&req) {
            Outcome::Done(r) => assert_eq!(
                r.json_body().map(|b| b["spec"]["replicas"].clone()),
                Some(json!(4))
            ),
            other => panic!("unexpected {other:?}"),
        }
        let (code, scale) = f.call(Method::GET, &format!("{url}/scale"), None);
        assert_eq!((code, scale["spec"]["replicas"].as_i64()), (200, Some(4)));
        let (code, scaled) = f.call(
            Method::PATCH,
            &format!("{url}/scale"),
            Some(json!({"spec": {"replicas": 6}})),
        );
        assert_eq!((code, scaled["spec"]["replicas"].as_i64()), (200, Some(6)));
    }

    #[test]
    fn crds_register_types_and_take_their_objects_along() {
        let mut f = Fixture::new();
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let (code, made) = f.call(Method::POST, crds, Some(crd.clone()));
        assert_eq!(code, 201, "{made}");
        assert_eq!(made["status"]["conditions"][1]["type"], "Established");
        assert_eq!(made["status"]["acceptedNames"]["singular"], "widget");
        let mut bad = crd.clone();
        bad["metadata"]["name"] = json!("wrong");
        assert_eq!(f.call(Method::POST, crds, Some(bad)).0, 422);
        let widgets = "/apis/example.com/v1/namespaces/default/widgets";
        let (code, w) = f.call(Method::POST, widgets, Some(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}})));
        assert_eq!((code, w["spec"]["size"].as_i64()), (201, Some(1)));
        assert_eq!(
            f.call(Method::DELETE, &format!("{crds}/widgets.example.com"), None)
                .0,
            200
        );
        assert_eq!(f.call(Method::GET, widgets, None).0, 404);
        assert!(f
            .cluster
            .store
            .list("example.com", "widgets", None)
            .is_empty());
    }

    #[test]
    fn deletes_follow_the_propagation_policy() {
        let mut f = Fixture::new();
        let (_, owner) = f.call(Method::POST, CMS, Some(cm("owner", json!({}))));
        let uid = owner["metadata"]["uid"].clone();
        let mut child = cm("child", json!({}));
        child["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]);
        assert_eq!(f.call(Method::POST, CMS, Some(child)).0, 201);
        let (code, held) = f.call(
            Method::DELETE,
            &format!("{CMS}/owner?propagationPolicy=Foreground"),
            None,
        );
        assert_eq!(code, 200);
        assert_eq!(
            held["metadata"]["finalizers"],
            json!(["foregroundDeletion"])
        );
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        let (code, orphaning) = f.call(
            Method::DELETE,
            &format!("{CMS}/child"),
            Some(json!({"propagationPolicy": "Orphan"})),
        );
        assert_eq!(code, 200);
        assert_eq!(orphaning["metadata"]["finalizers"], json!(["orphan"]));
        let (_, plain) = f.call(Method::POST, CMS, Some(cm("plain", json!({}))));
        let (code, _) = f.call(
            Method::DELETE,
            &format!("{CMS}/plain"),
            Some(json!({"preconditions": {"uid": "nope"}})),
        );
        assert_eq!(code, 409);
        let uid = plain["metadata"]["uid"].as_str().unwrap_or_default();
        let (code, gone) = f.call(
            Method::DELETE,
            &format!("{CMS}/plain?propagationPolicy=Background"),
            Some(json!({"preconditions": {"uid": uid}})),
        );
        assert_eq!(
            (code, gone["status"].as_str()),
            (200, Some("Success")),
            "no finalizers: gone at once"
        );
        // Jobs still orphan their pods by default.
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        f.call(
            Method::POST,
            "/apis/batch/v1/namespaces/default/jobs",
            Some(job),
        );
        let (_, job) = f.call(
            Method::DELETE,
            "/apis/batch/v1/namespaces/default/jobs/j",
            None,
        );
        assert_eq!(job["metadata"]["finalizers"], json!(["orphan"]));
    }

    #[test]
    fn watches_replay_changes_and_report_selector_transitions() {
        let mut f = Fixture::new();
        f.call(Method::POST, CMS, Some(cm("a", json!({"app": "x"}))));
        let req = KubeRequest {
            method: Method::GET,
            path: CMS.into(),
            query: crate::http::parse_query("watch=true&labelSelector=app%3Dx"),
            content_type: None,
            accept: None,
            user_agent: None,
            body: Vec::new(),
            port_streams: false,
        };
        let Outcome::Watch(mut w, initial) = f.handle(&req) else {
            panic!("expected a watch");
        };
        assert_eq!(
            initial
                .iter()
                .map(|e| e["type"].clone())
                .collect::<Vec<_>>(),
            [json!("ADDED")]
        );
        f.call(Method::POST, CMS, Some(cm("b", json!({"app": "y"}))));
        f.call(
            Method::PATCH,
            &format!("{CMS}/b"),
            Some(json!({"metadata": {"labels": {"app": "x"}}})),
        );
        f.call(
            Method::PATCH,
            &format!("{CMS}/a"),
            Some(json!({"metadata": {"labels": {"app": "z"}}})),
        );
        f.call(Method::DELETE, &format!("{CMS}/b"), None);
        let events: Vec<(String, String)> = w
            .poll(&f.cluster, Utc::now())
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or_default().to_string(),
                    e["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = [("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(events, want);
        let mut old = req.clone();
        old.query = crate::http::parse_query("watch=1&resourceVersion=1");
        let Outcome::Watch(_, replay) = f.handle(&old) else {
            panic!("expected a watch");
        };
        assert!(!replay.is_empty(), "changes after version 1 are replayed");
    }

    #[test]
    fn discovery_paths_answer() {
        let mut f = Fixture::new();
        let (code, v) = f.call(Method::GET, "/version", None);
        assert_eq!(
            (code, v["gitVersion"].as_str()),
            (200, Some(f.cluster.version.as_str()))
        );
        let (code, list) = f.call(Method::GET, "/apis/batch/v1", None);
        assert_eq!(
            (code, list["kind"].as_str()),
            (200, Some("APIResourceList"))
        );
        assert_eq!(f.call(Method::GET, "/apis/nothing/v1", None).0, 404);
        assert_eq!(f.call(Method::POST, "/version", None).0, 405);
    }

    #[test]
    fn exec_needs_a_running_pod() {
        let mut f = Fixture::new();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(
            f.call(Method::POST, "/api/v1/namespaces/default/pods", Some(pod))
                .0,
            201
        );
        let (code, err) = f.call(
            Method::GET,
            "/api/v1/namespaces/default/pods/p/exec?command=ls",
            None,
        );
        assert_eq!(code, 400);
        assert_eq!(
            err["message"],
            "unable to upgrade connection: pod p is not running"
        );
        let key = ObjKey::new("", "pods", "default", "p");
        let mut running = f.cluster.store.get(&key).cloned().expect("pod");
        running["status"] = json!({"phase": "Running"});
        f.cluster.store.update(&key, running);
        match f.send(
            Method::GET,
            "/api/v1/namespaces/default/pods/p/exec?command=ls&command=-l&stdout=true",
            None,
            None,
        ) {
            Outcome::Exec(target) => assert_eq!(target.command, ["ls", "-l"]),
            other => panic!("expected exec, got {other:?}"),
        }
        assert_eq!(
            f.call(
                Method::GET,
                "/api/v1/namespaces/default/pods/p/log?previous=true",
                None
            )
            .0,
            400
        );
    }

    #[test]
    fn defaults_causes_keep_their_kind() {
        let f = Fixture::new();
        let jobs = discovery::find(&f.cluster, "batch", "v1", "jobs").expect("jobs");
        let t = Target {
            rt: jobs,
            namespace: Some("default".into()),
            name: Some("x".into()),
            sub: None,
            watch_path: false,
        };
        let object = json!({"spec": {"parallelism": 3}});
        let cases = [
            (
                "spec.parallelism",
                "field is immutable",
                "FieldValueInvalid",
                "Invalid value: 3: field is immutable",
            ),
            (
                "spec.selector",
                "Required value",
                "FieldValueRequired",
                "Required value",
            ),
            (
                "spec.x",
                "Invalid value: \"a\": bad",
                "FieldValueInvalid",
                "Invalid value: \"a\": bad",
            ),
            (
                "spec.restartPolicy",
                "Unsupported value: \"Always\": supported values: \"Never\"",
                "FieldValueNotSupported",
                "Unsupported value: \"Always\": supported values: \"Never\"",
            ),
            (
                "spec",
                "Forbidden: no",
                "FieldValueForbidden",
                "Forbidden: no",
            ),
        ];
        for (field, message, reason, shown) in cases {
            let e =
                defaults_invalid(&t, "x", &object, vec![(field.into(), message.into())]).to_value();
            let cause = &e["details"]["causes"][0];
            assert_eq!(
                (cause["reason"].as_str(), cause["message"].as_str()),
                (Some(reason), Some(shown)),
                "{message}"
            );
            assert_eq!(
                e["message"],
                format!("Job.batch \"x\" is invalid: {field}: {shown}")
            );
        }
    }

    #[test]
    fn logs_tail_and_follow_until_the_pod_finishes() {
        let cases = [
            ("a\nb\nc\n", None, "a\nb\nc\n"),
            ("a\nb\nc\n", Some(2), "b\nc\n"),
            ("a\nb\nc", Some(1), "c"),
            ("a\n", Some(5), "a\n"),
            ("a\n", Some(0), ""),
        ];
        for (text, lines, want) in cases {
            assert_eq!(tail(text, lines), want, "{text:?} {lines:?}");
        }
        let mut f = Fixture::new();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        f.call(Method::POST, "/api/v1/namespaces/default/pods", Some(pod));
        let started = json!({"phase": "Running", "containerStatuses": [
            {"name": "c", "ready": true, "restartCount": 0, "image": "i", "imageID": "", "state": {"running": {"startedAt": timestamp(Utc::now())}}}
        ]});
        let (code, _) = f.call(
            Method::PATCH,
            "/api/v1/namespaces/default/pods/p/status",
            Some(json!({"status": started})),
        );
        assert_eq!(code, 200);
        let Outcome::FollowLog(mut follow) = f.send(
            Method::GET,
            "/api/v1/namespaces/default/pods/p/log?follow=true",
            None,
            None,
        ) else {
            panic!("expected a followed log");
        };
        assert_eq!(follow.container, "c");
        assert!(
            !follow_poll(&f.cluster, &mut follow, Utc::now()).1,
            "still running"
        );
        f.call(
            Method::PATCH,
            "/api/v1/namespaces/default/pods/p/status",
            Some(json!({"status": {"phase": "Succeeded"}})),
        );
        assert!(
            follow_poll(&f.cluster, &mut follow, Utc::now()).1,
            "finished"
        );
        f.call(Method::DELETE, "/api/v1/namespaces/default/pods/p", None);
        assert!(follow_poll(&f.cluster, &mut follow, Utc::now()).1, "gone");
        assert_eq!(
            f.call(
                Method::GET,
                "/api/v1/namespaces/default/pods/nope/log",
                None
            )
            .0,
            404
        );
    }

    #[test]
    fn events_are_shared_between_core_and_events_k8s_io() {
        let mut f = Fixture::new();
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                        "involvedObject": {"kind": "Pod", "name": "p"}, "message": "hello", "reason": "R"});
        assert_eq!(
            f.call(Method::POST, "/api/v1/namespaces/default/events", Some(ev))
                .0,
            201
        );
        let (code, v1) = f.call(
            Method::GET,
            "/apis/events.k8s.io/v1/namespaces/default/events/e",
            None,
        );
        assert_eq!(code, 200);
        assert_eq!(
            (
                v1["note"].as_str(),
                v1["regarding"]["name"].as_str(),
                v1["apiVersion"].as_str()
            ),
            (Some("hello"), Some("p"), Some("events.k8s.io/v1"))
        );
        let (_, by_object) = f.call(
            Method::GET,
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp",
            None,
        );
        assert_eq!(by_object["items"].as_array().map(Vec::len), Some(1));
    }
}
