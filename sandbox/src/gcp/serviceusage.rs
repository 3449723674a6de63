//! Service Usage (serviceusage v1), as far as gcloud calls it before it creates
//! anything (`gcloud container clusters create-auto` checks that
//! `container.googleapis.com` is enabled): services.get, list, enable and disable. The
//! APIs the sandbox emulates start enabled in every project; any other service is
//! disabled until enabled. Enabling and disabling finish at once.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::ApiError;
use super::operation::OpCtx;
use super::schema::Rules;
use super::{parse_body, Api};
use crate::http::{ApiRequest, ApiResponse};

/// The services a project has without enabling anything: the ones the sandbox emulates.
const EMULATED: [&str; 4] = [
    "container.googleapis.com",
    "file.googleapis.com",
    "storage.googleapis.com",
    "serviceusage.googleapis.com",
];

/// What each project changed from the start: services enabled and disabled.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    #[serde(default)]
    enabled: BTreeMap<String, BTreeSet<String>>,
    #[serde(default)]
    disabled: BTreeMap<String, BTreeSet<String>>,
}

impl State {
    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        _ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (req.method.as_str(), s.as_slice()) {
            ("GET", ["v1", "projects", project, "services"]) => Ok(ApiResponse::ok(
                self.list(project, req.param("filter").unwrap_or_default()),
            )),
            ("GET", ["v1", "projects", project, "services", service]) => {
                Ok(ApiResponse::ok(self.service(project, service)))
            }
            ("POST", ["v1", "projects", project, "services", action]) => {
                let (service, verb) = action
                    .rsplit_once(':')
                    .ok_or_else(|| ApiError::no_route("POST", &req.path))?;
                let (enable, request) = match verb {
                    "enable" => (true, "EnableServiceRequest"),
                    "disable" => (false, "DisableServiceRequest"),
                    _ => return Err(ApiError::no_route("POST", &req.path)),
                };
                // Nothing in either body changes what the sandbox does (see `tables.rs`),
                // but a body Google would refuse is refused.
                parse_body(req, Api::ServiceUsage, request, "", Rules::PROTO3)?;
                Ok(ApiResponse::ok(self.set(project, service, enable)))
            }
            (method, _) => Err(ApiError::no_route(method, &req.path)),
        }
    }

    fn is_enabled(&self, project: &str, service: &str) -> bool {
        let has = |m: &BTreeMap<String, BTreeSet<String>>| {
            m.get(project).is_some_and(|s| s.contains(service))
        };
        if has(&self.disabled) {
            return false;
        }
        EMULATED.contains(&service) || has(&self.enabled)
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

    /// The project's services: the emulated ones and those enabled since, filtered by
    /// `state:ENABLED` / `state:DISABLED` when asked.
    fn list(&self, project: &str, filter: &str) -> Value {
        let mut names: BTreeSet<&str> = EMULATED.into_iter().collect();
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

    /// Enables or disables `service`; the finished operation.
    fn set(&mut self, project: &str, service: &str, enable: bool) -> Value {
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
        let kind = if enable { "Enable" } else { "Disable" };
        let mut response = json!({
            "@type": format!("type.googleapis.com/google.api.serviceusage.v1.{kind}ServiceResponse"),
        });
        response["service"] = self.service(project, service);
        json!({
            "name": "operations/noop.DONE_OPERATION",
            "done": true,
            "response": response,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use axum::http::Method;

    fn call(state: &mut State, method: Method, path: &str) -> Value {
        let faults = Faults::default();
        let ctx = OpCtx {
            now: chrono::Utc::now(),
            scale: 1.0,
            faults: &faults,
        };
        let req = ApiRequest::new(method, path, None);
        state
            .handle(&req, &ctx)
            .expect("served")
            .json_body()
            .cloned()
            .unwrap_or(Value::Null)
    }

    #[test]
    fn emulated_apis_start_enabled_and_others_enable_at_once() {
        let mut s = State::default();
        let got = call(
            &mut s,
            Method::GET,
            "v1/projects/p1/services/container.googleapis.com",
        );
        assert_eq!(got["state"], "ENABLED");
        assert_eq!(got["config"]["name"], "container.googleapis.com");
        let other = "v1/projects/p1/services/compute.googleapis.com";
        assert_eq!(call(&mut s, Method::GET, other)["state"], "DISABLED");
        let op = call(&mut s, Method::POST, &format!("{other}:enable"));
        assert_eq!(op["done"], true);
        assert_eq!(op["response"]["service"]["state"], "ENABLED");
        assert_eq!(call(&mut s, Method::GET, other)["state"], "ENABLED");
        let listed = call(
            &mut s,
            Method::GET,
            "v1/projects/p1/services?filter=state:ENABLED",
        );
        assert_eq!(listed["services"].as_array().map(Vec::len), Some(5));
        call(&mut s, Method::POST, &format!("{other}:disable"));
        assert_eq!(call(&mut s, Method::GET, other)["state"], "DISABLED");
        assert_eq!(
            call(
                &mut s,
                Method::GET,
                "v1/projects/p2/services/compute.googleapis.com"
            )["state"],
            "DISABLED",
            "projects are apart"
        );
    }
}
