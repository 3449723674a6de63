//! The `gcp_project_service` kind: one Google API enabled in the provider's project
//! (`service = "container.googleapis.com"`), through Service Usage, waiting on the
//! enable operation. The stack's resources that call the API are ordered after it
//! without a `depends_on` (see `Kind::SERVICES`), and the plan refuses a resource whose
//! API is off and enabled by nothing in the stack.
//!
//! Destroy leaves the API on unless `disable_on_destroy = true`: turning an API off
//! under resources other people made in the project is destructive, and a stack that
//! merely needs an API does not own it. A disable that other enabled APIs depend on is
//! refused by Google (and so here); terrain never asks for the cascade.

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::{client, segment, Request};
use super::config::Api;
use super::operation;
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `gcp_project_service`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcpProjectService;

/// What a stack writes for a `gcp_project_service`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The API's service name, e.g. "container.googleapis.com".
    #[terrain(force_new)]
    pub service: String,
    /// Turn the API off when the resource is destroyed (default: leave it on, as other
    /// resources in the project may use it).
    #[serde(default)]
    pub disable_on_destroy: bool,
}

/// What `gcp_project_service` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// ENABLED.
    pub state: String,
    /// projects/NUMBER/services/SERVICE.
    pub name: String,
}

const GET: &str = "serviceusage.services.get";
const ENABLE: &str = "serviceusage.services.enable";
const DISABLE: &str = "serviceusage.services.disable";

/// How long an enable or disable may take (Google: usually under a minute).
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// Whether `name` looks like a Google API's service name: `NAME.googleapis.com`.
pub fn check_service(name: &str) -> Result<(), String> {
    let ok = name.strip_suffix(".googleapis.com").is_some_and(|head| {
        !head.is_empty()
            && head
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a Google API's service name; write it as gcloud services list shows it, e.g. \"container.googleapis.com\""
        ))
    }
}

fn path(project: &str, service: &str) -> String {
    format!(
        "v1/projects/{}/services/{}",
        segment(project),
        segment(service)
    )
}

/// The service as Service Usage reports it; `None` when it is off.
async fn get(ctx: &Ctx, service: &str) -> Result<Option<Value>, ProviderError> {
    let c = client(ctx)?;
    let project = c.config.project()?.to_string();
    let live = c
        .send(
            ctx,
            &Request::get(GET, Api::ServiceUsage, path(&project, service)),
        )
        .await?;
    Ok((live["state"].as_str() == Some("ENABLED")).then_some(live))
}

/// Which of `services` are off in the provider's project (services.get each). A plan
/// asks this: an endpoint it cannot reach fails at once rather than after retries.
pub async fn off(ctx: &Ctx, services: &[String]) -> Result<Vec<String>, ProviderError> {
    let c = client(ctx)?;
    let project = c.config.project()?.to_string();
    let mut out = Vec::new();
    for service in services {
        let req =
            Request::get(GET, Api::ServiceUsage, path(&project, service)).transport_retries(0);
        if c.send(ctx, &req).await?["state"].as_str() != Some("ENABLED") {
            out.push(service.clone());
        }
    }
    Ok(out)
}

fn outputs_of(live: &Value) -> Outputs {
    Outputs {
        state: live["state"].as_str().unwrap_or_default().to_string(),
        name: live["name"].as_str().unwrap_or_default().to_string(),
    }
}

/// Enables or disables `service` and waits for the operation.
async fn switch(ctx: &Ctx, service: &str, enable: bool) -> Result<(), ProviderError> {
    let c = client(ctx)?;
    let project = c.config.project()?.to_string();
    let (call, verb) = if enable {
        (ENABLE, "enable")
    } else {
        (DISABLE, "disable")
    };
    let body = if enable {
        json!({})
    } else {
        json!({"disableDependentServices": false})
    };
    let req = Request::new(
        call,
        Api::ServiceUsage,
        Method::POST,
        format!("{}:{verb}", path(&project, service)),
    )
    .body(body);
    let op = c.send(ctx, &req).await?;
    let name = op["name"].as_str().unwrap_or_default().to_string();
    ctx.progress(&format!("waiting for {service} to {verb}"));
    operation::wait(
        ctx,
        &c,
        &operation::SERVICEUSAGE,
        call,
        &format!("v1/{name}"),
        &op,
        TIMEOUT,
    )
    .await
}

#[async_trait]
impl Kind for GcpProjectService {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "gcp_project_service";
    const PROVIDER: &'static str = "gcp";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        match check_service(&spec.service) {
            Ok(()) => Vec::new(),
            Err(m) => vec![Invalid::at("service", m)],
        }
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(spec.service.clone())
    }

    fn enables(spec: &Value) -> Option<String> {
        spec["service"].as_str().map(str::to_string)
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        Ok(get(ctx, id).await?.map(|live| Live {
            id: id.to_string(),
            spec: Spec {
                service: id.to_string(),
                disable_on_destroy: prior.is_some_and(|p| p.disable_on_destroy),
            },
            outputs: outputs_of(&live),
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        // Already on (by hand, or by an earlier attempt): nothing to enable.
        if get(ctx, &spec.service).await?.is_none() {
            switch(ctx, &spec.service, true).await?;
        }
        self.read(ctx, &spec.service, Some(spec))
            .await?
            .ok_or_else(|| {
                ProviderError::api(
                    GET,
                    200,
                    "DISABLED",
                    format!(
                        "{} is still off after its enable operation finished",
                        spec.service
                    ),
                )
            })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        // Only `disable_on_destroy` changes in place, and it is terrain's own.
        self.create(
            ctx,
            &Spec {
                service: id.to_string(),
                disable_on_destroy: spec.disable_on_destroy,
            },
        )
        .await
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        if !prior.is_some_and(|p| p.disable_on_destroy) {
            ctx.progress(&format!("leaving {id} on (disable_on_destroy = false)"));
            return Ok(());
        }
        if get(ctx, id).await?.is_none() {
            return Ok(());
        }
        switch(ctx, id, false).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    #[test]
    fn schema_matches_spec_and_outputs() {
        let spec = Spec {
            service: "container.googleapis.com".into(),
            disable_on_destroy: true,
        };
        let outputs = Outputs {
            state: "ENABLED".into(),
            name: "projects/123/services/container.googleapis.com".into(),
        };
        assert_eq!(
            schema_mismatches::<GcpProjectService>(&spec, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn service_names_are_checked_offline() {
        assert!(check_service("container.googleapis.com").is_ok());
        assert!(check_service("iamcredentials.googleapis.com").is_ok());
        for bad in [
            "container",
            "Container.googleapis.com",
            ".googleapis.com",
            "container.googleapis.co",
        ] {
            assert!(check_service(bad).is_err(), "{bad}");
        }
    }
}
