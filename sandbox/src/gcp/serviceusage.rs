//! Service Usage (serviceusage v1): services.get, list, enable and disable, and the
//! long-running operations enable and disable answer with (operations.get). A project
//! starts as a new Google Cloud project does: Cloud Storage and Service Usage on, every
//! other API off until enabled (plus what the sandbox was started with on, see
//! `Options::enabled_apis`, as if someone had run `gcloud services enable`). Enabling
//! Kubernetes Engine enables Compute Engine, which it depends on; disabling Compute
//! Engine while Kubernetes Engine is on is refused unless `disableDependentServices`.
//! A call to an API that is off answers as Google does: 403 PERMISSION_DENIED with an
//! `ErrorInfo` of reason SERVICE_DISABLED (see [`State::check`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::{ApiError, Code};
use super::operation::{Lro, OpCtx};
use super::schema::Rules;
use super::{parse_body, Api};
use crate::http::{ApiRequest, ApiResponse};

/// The services a new Google Cloud project has on.
const NEW_PROJECT: [&str; 2] = ["serviceusage.googleapis.com", "storage.googleapis.com"];

/// Services enabling one also enables (Kubernetes Engine runs on Compute Engine).
const DEPENDS_ON: [(&str, &str); 1] = [("container.googleapis.com", "compute.googleapis.com")];

/// How long Service Usage takes to enable or disable an API.
const CHANGE: Duration = Duration::from_secs(4);

/// The service behind each emulated API, and the title Google's errors use.
pub(crate) fn service_of(api: Api) -> (&'static str, &'static str) {
    match api {
        Api::Container => ("container.googleapis.com", "Kubernetes Engine API"),
        Api::File => ("file.googleapis.com", "Cloud Filestore API"),
        Api::Storage => ("storage.googleapis.com", "Cloud Storage API"),
        Api::ServiceUsage => ("serviceusage.googleapis.com", "Service Usage API"),
        Api::Compute => ("compute.googleapis.com", "Compute Engine API"),
        Api::Tpu => ("tpu.googleapis.com", "Cloud TPU API"),
        Api::Iam => (
            "iam.googleapis.com",
            "Identity and Access Management (IAM) API",
        ),
        Api::ResourceManager => (
            "cloudresourcemanager.googleapis.com",
            "Cloud Resource Manager API",
        ),
    }
}

/// An enable or disable under way.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Change {
    id: String,
    project: String,
    services: Vec<String>,
    enable: bool,
    lro: Lro,
}

/// What each project changed from the start: services enabled and disabled, and the
/// changes still running.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    #[serde(default)]
    enabled: BTreeMap<String, BTreeSet<String>>,
    #[serde(default)]
    disabled: BTreeMap<String, BTreeSet<String>>,
    /// Services on in every project from the start, beyond a new project's.
    #[serde(default)]
    baseline: BTreeSet<String>,
    #[serde(default)]
    changes: Vec<Change>,
}

impl State {
    /// Turns `services` on in every project from the start (a project whose owner
    /// enabled them before anything else ran).
    pub(crate) fn set_baseline(&mut self, services: &[String]) {
        self.baseline = services.iter().cloned().collect();
    }

    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        self.settle(ctx.now);
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (req.method.as_str(), s.as_slice()) {
            ("GET", ["v1", "projects", project, "services"]) => Ok(ApiResponse::ok(
                self.list(project, req.param("filter").unwrap_or_default()),
            )),
            ("GET", ["v1", "projects", project, "services", service]) => {
                Ok(ApiResponse::ok(self.service(project, service)))
            }
            ("GET", ["v1", "operations", id]) => self
                .changes
                .iter()
                .find(|c| c.id == *id)
                .map(|c| ApiResponse::ok(self.operation(c, ctx.now)))
                .ok_or_else(|| {
                    ApiError::not_found(format!("Operation 'operations/{id}' not found."))
                }),
            ("POST", ["v1", "projects", project, "services", action]) => {
                let (service, verb) = action
                    .rsplit_once(':')
                    .ok_or_else(|| ApiError::no_route("POST", &req.path))?;
                let (enable, request) = match verb {
                    "enable" => (true, "EnableServiceRequest"),
                    "disable" => (false, "DisableServiceRequest"),
                    _ => return Err(ApiError::no_route("POST", &req.path)),
                };
                let body = parse_body(req, Api::ServiceUsage, request, "", Rules::PROTO3)?;
                let cascade = body["disableDependentServices"].as_bool() == Some(true);
                self.change(project, service, enable, cascade, ctx)
            }
            (method, _) => Err(ApiError::no_route(method, &req.path)),
        }
    }

    /// Applies every change that has finished by `now`.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        let mut finished = Vec::new();
        for c in &mut self.changes {
            if c.lro.due(now) {
                c.lro.settled = true;
                finished.push((c.project.clone(), c.services.clone(), c.enable));
            }
        }
        for (project, services, enable) in finished {
            for service in services {
                self.set(&project, &service, enable);
            }
        }
    }

    /// Whether `service` is on in `project` (its id or number).
    pub(crate) fn is_enabled(&self, project: &str, service: &str) -> bool {
        let has = |m: &BTreeMap<String, BTreeSet<String>>| {
            m.get(project).is_some_and(|s| s.contains(service))
        };
        if has(&self.disabled) {
            return false;
        }
        NEW_PROJECT.contains(&service) || self.baseline.contains(service) || has(&self.enabled)
    }

    /// Refuses a call to `api` in `project` while its service is off there, as Google
    /// does (gcloud reads the `ErrorInfo` and offers to enable it).
    pub(crate) fn check(
        &mut self,
        api: Api,
        project: &str,
        now: DateTime<Utc>,
    ) -> Result<(), ApiError> {
        self.settle(now);
        let (service, title) = service_of(api);
        if self.is_enabled(project, service) {
            return Ok(());
        }
        let number = super::storage::project_number(project);
        let url = format!(
            "https://console.developers.google.com/apis/api/{service}/overview?project={number}"
        );
        let mut e = ApiError::new(
            Code::PermissionDenied,
            format!("{title} has not been used in project {number} before or it is disabled. Enable it by visiting {url} then retry. If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry."),
        )
        .with_reason("accessNotConfigured");
        e.details = vec![
            json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "SERVICE_DISABLED",
                "domain": "googleapis.com",
                "metadata": {
                    "service": service,
                    "consumer": format!("projects/{number}"),
                    "activationUrl": url,
                    "serviceTitle": title,
                    "containerInfo": number,
                },
            }),
            json!({
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [{"description": "Google developers console API activation", "url": url}],
            }),
        ];
        Err(e)
    }

    /// A service as services.get answers it.
    fn service(&self, project: &str, service: &str) -> Value {
        let parent = format!("projects/{}", super::storage::project_number(project));
        json!({
            "name": format!("{parent}/services/{service}"),
            "parent": parent,
            "config": {
                "name": service,
                "title": service.split('.').next().unwrap_or(service),
            },
            "state": if self.is_enabled(project, service) { "ENABLED" } else { "DISABLED" },
        })
    }

    /// The project's services: those on from the start and those changed since,
    /// filtered by `state:ENABLED` / `state:DISABLED` when asked.
    fn list(&self, project: &str, filter: &str) -> Value {
        let mut names: BTreeSet<&str> = NEW_PROJECT.into_iter().collect();
        names.extend(self.baseline.iter().map(String::as_str));
        for m in [&self.enabled, &self.disabled] {
            names.extend(m.get(project).into_iter().flatten().map(String::as_str));
        }
        let services: Vec<Value> = names
            .into_iter()
            .map(|s| self.service(project, s))
            .filter(|s| match filter.trim() {
                "state:ENABLED" => s["state"] == "ENABLED",
                "state:DISABLED" => s["state"] == "DISABLED",
                _ => true,
            })
            .collect();
        json!({ "services": services })
    }

    /// Starts enabling (with what it depends on) or disabling `service`; the operation.
    fn change(
        &mut self,
        project: &str,
        service: &str,
        enable: bool,
        cascade: bool,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let mut services = vec![service.to_string()];
        if enable {
            services.extend(
                DEPENDS_ON
                    .iter()
                    .filter(|(s, _)| *s == service)
                    .map(|(_, on)| on.to_string()),
            );
        } else {
            let dependents: Vec<String> = DEPENDS_ON
                .iter()
                .filter(|(s, on)| *on == service && self.is_enabled(project, s))
                .map(|(s, _)| s.to_string())
                .collect();
            if !dependents.is_empty() && !cascade {
                return Err(ApiError::precondition(format!(
                    "The service {service} is depended on by the following active service(s): {}; Please specify disable_dependent_services=true if you want to proceed with disabling all services.",
                    dependents.join(",")
                )));
            }
            services.extend(dependents);
        }
        let change = Change {
            id: format!(
                "acat.p2-{}-{}",
                super::storage::project_number(project),
                crate::common::ids::random_hex(16)
            ),
            project: project.to_string(),
            services,
            enable,
            lro: ctx.start(Api::ServiceUsage, CHANGE),
        };
        let op = self.operation(&change, ctx.now);
        self.changes.push(change);
        Ok(ApiResponse::ok(op))
    }

    /// Records `service` as on or off in `project`.
    fn set(&mut self, project: &str, service: &str, enable: bool) {
        let (on, off) = if enable {
            (&mut self.enabled, &mut self.disabled)
        } else {
            (&mut self.disabled, &mut self.enabled)
        };
        on.entry(project.to_string())
            .or_default()
            .insert(service.to_string());
        if let Some(set) = off.get_mut(project) {
            set.remove(service);
        }
    }

    /// The `google.longrunning.Operation` of a change: done (with the service as it is
    /// now) once settled.
    fn operation(&self, c: &Change, now: DateTime<Utc>) -> Value {
        let name = format!("operations/{}", c.id);
        if !c.lro.settled || now < c.lro.end() {
            return json!({
                "name": name,
                "metadata": {"@type": "type.googleapis.com/google.protobuf.Empty"},
            });
        }
        let kind = if c.enable { "Enable" } else { "Disable" };
        let mut response = json!({
            "@type": format!("type.googleapis.com/google.api.serviceusage.v1.{kind}ServiceResponse"),
        });
        response["service"] = self.service(&c.project, &c.services[0]);
        json!({ "name": name, "done": true, "response": response })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use axum::http::Method;

    fn call_at(
        state: &mut State,
        secs: i64,
        method: Method,
        path: &str,
    ) -> Result<Value, ApiError> {
        let faults = Faults::default();
        let ctx = OpCtx {
            now: DateTime::<Utc>::from_timestamp(1_700_000_000 + secs, 0).expect("valid time"),
            scale: 1.0,
            faults: &faults,
        };
        let req = ApiRequest::new(method, path, None);
        state
            .handle(&req, &ctx)
            .map(|r| r.json_body().cloned().unwrap_or(Value::Null))
    }

    fn call(state: &mut State, secs: i64, method: Method, path: &str) -> Value {
        call_at(state, secs, method, path).expect("served")
    }

    fn now(secs: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + secs, 0).expect("valid time")
    }

    #[test]
    fn a_new_project_has_storage_on_and_container_off_until_its_operation_ends() {
        let mut s = State::default();
        let container = "v1/projects/p1/services/container.googleapis.com";
        assert_eq!(call(&mut s, 0, Method::GET, container)["state"], "DISABLED");
        assert_eq!(
            call(
                &mut s,
                0,
                Method::GET,
                "v1/projects/p1/services/storage.googleapis.com"
            )["state"],
            "ENABLED"
        );
        let refused = s.check(Api::Container, "p1", now(0)).expect_err("off");
        assert_eq!(refused.http, 403);
        assert_eq!(refused.details[0]["reason"], "SERVICE_DISABLED");
        assert_eq!(
            refused.details[0]["metadata"]["service"],
            "container.googleapis.com"
        );
        let op = call(&mut s, 0, Method::POST, &format!("{container}:enable"));
        assert!(op["done"].is_null(), "{op}");
        let name = op["name"].as_str().expect("named").to_string();
        // Still off while the operation runs; on, with Compute Engine, once it is done.
        assert!(s.check(Api::Container, "p1", now(1)).is_err());
        let polled = call(&mut s, 1, Method::GET, &format!("v1/{name}"));
        assert!(polled["done"].is_null());
        let done = call(&mut s, 5, Method::GET, &format!("v1/{name}"));
        assert_eq!(done["done"], true);
        assert_eq!(done["response"]["service"]["state"], "ENABLED");
        assert!(s.check(Api::Container, "p1", now(5)).is_ok());
        assert!(s.check(Api::Compute, "p1", now(5)).is_ok());
        assert!(
            s.check(Api::Container, "p2", now(5)).is_err(),
            "projects are apart"
        );
        let listed = call(
            &mut s,
            5,
            Method::GET,
            "v1/projects/p1/services?filter=state:ENABLED",
        );
        assert_eq!(listed["services"].as_array().map(Vec::len), Some(4));
        // Compute Engine cannot go while Kubernetes Engine needs it, unless asked to.
        let compute = "v1/projects/p1/services/compute.googleapis.com:disable";
        let e = call_at(&mut s, 6, Method::POST, compute).expect_err("depended on");
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(
            e.message.contains("container.googleapis.com"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_baseline_turns_services_on_in_every_project() {
        let mut s = State::default();
        s.set_baseline(&["container.googleapis.com".to_string()]);
        assert!(s.check(Api::Container, "any", now(0)).is_ok());
        assert!(s.check(Api::File, "any", now(0)).is_err());
        call(
            &mut s,
            0,
            Method::POST,
            "v1/projects/p/services/container.googleapis.com:disable",
        );
        assert!(s.check(Api::Container, "p", now(10)).is_err());
        assert!(s.check(Api::Container, "q", now(10)).is_ok());
    }
}
