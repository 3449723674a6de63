//! Import: an existing object brought under management at an address.

use serde_json::Value;

use crate::addr::Address;
use crate::desired::{self};
use crate::eval::{self};
use crate::state::{ResourceState, State};

use super::refresh::refresh_error;
use super::{Engine, EngineError};

impl Engine {
    /// Brings an existing object under management at `address`.
    pub async fn import(
        &self,
        address: &Address,
        id: &str,
        state: &State,
    ) -> Result<ResourceState, EngineError> {
        let rc = self
            .stack
            .resources
            .get(address)
            .ok_or_else(|| EngineError::Import {
                address: address.clone(),
                message: "the stack has no such resource; add it to the stack first".into(),
            })?;
        let kind = rc.resource.clone();
        let ctx = self.ctx(address, &rc.provider)?;
        // The stack's spec tells the provider how the object is described (which field
        // holds a secret, which cluster a Kubernetes object is on, a manifest's
        // objects): computed by the pipeline apply uses, with what the state knows of
        // the resources it references. Without them, as far as it is known offline.
        let hint = self
            .spec_from_state(address, state)
            .ok()
            .or_else(|| {
                let env = self.env();
                let scope = desired::variables_only(&self.stack.variables, &env);
                eval::eval(&rc.body, &scope)
                    .ok()
                    .map(|e| kind.schema().with_defaults(&e.value))
            })
            .filter(|v| !terrain_providers::protocol::is_unknown(v))
            .unwrap_or(Value::Null);
        let obs = kind
            .read(&ctx, id, &hint)
            .await
            .map_err(refresh_error(address))?
            .ok_or_else(|| EngineError::Import {
                address: address.clone(),
                message: format!("no {} with id `{id}` exists", address.kind),
            })?;
        let mut sensitive: Vec<String> = kind
            .schema()
            .fields
            .iter()
            .filter(|f| f.sensitive)
            .map(|f| format!("spec.{}", f.name))
            .collect();
        sensitive.extend(rc.sensitive.iter().map(|p| format!("spec.{p}")));
        Ok(ResourceState {
            kind: address.kind.clone(),
            provider: rc.provider.clone(),
            id: Some(obs.id),
            spec: obs.spec,
            outputs: obs.outputs,
            dependencies: rc.dependencies().iter().map(ToString::to_string).collect(),
            sensitive_paths: sensitive,
            pending: None,
            deposed: Vec::new(),
            tainted: false,
        })
    }
}
