//! Looking at what a stack manages without changing it: the rendered objects of a
//! resource (`terrain render`), the live readiness of every resource (`terrain status`)
//! and a resource's logs (`terrain logs`). Values come from the state as last applied;
//! what is not known yet stays marked as known after apply.

use futures::stream::{self, StreamExt};
use serde_json::Value;
use terrain_providers::{Health, LineSink, ProviderError};

use crate::addr::Address;
use crate::desired::{self, StackScope};
use crate::engine::{Engine, EngineError};
use crate::state::State;

/// Why a look at one resource failed.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{address}: no such resource in the stack")]
    NotInStack { address: Address },
    #[error("{address}: not in the state; apply the stack first")]
    NotApplied { address: Address },
    #[error("{address}: {kind} has no rendered form")]
    NoRender { address: Address, kind: String },
    #[error("{address}: {message}")]
    Evaluate { address: Address, message: String },
    #[error("{address}: {source}")]
    Provider {
        address: Address,
        #[source]
        source: Box<ProviderError>,
    },
    #[error(transparent)]
    Engine(Box<EngineError>),
}

impl From<EngineError> for InspectError {
    fn from(e: EngineError) -> Self {
        Self::Engine(Box::new(e))
    }
}

/// One resource's live readiness, for `terrain status`.
#[derive(Debug, Clone)]
pub struct Status {
    pub address: Address,
    pub kind: String,
    /// `None` when the resource is in the stack but not applied yet.
    pub health: Option<Result<Health, String>>,
}

impl Engine {
    /// The resource's spec evaluated against `state`: references to applied resources
    /// resolve, others stay unknown (what `render` shows, and `import` hands the
    /// provider).
    pub(crate) fn spec_from_state(
        &self,
        address: &Address,
        state: &State,
    ) -> Result<Value, InspectError> {
        let rc = self
            .stack
            .resources
            .get(address)
            .ok_or_else(|| InspectError::NotInStack {
                address: address.clone(),
            })?;
        let env = self.env();
        let entry = |k: &str| state.resources.get(k).filter(|r| r.id.is_some()).cloned();
        let applied = desired::Applied {
            resources: &self.stack.resources,
            entry: &entry,
        };
        let scope = StackScope {
            variables: &self.stack.variables,
            env: &env,
            attributes: &applied,
        };
        let config = self.provider_config(&rc.provider)?;
        let peers = desired::applied_peers(rc, &entry);
        // The same pipeline as plan and apply: what is shown is what would be applied.
        desired::compute(
            rc,
            &scope,
            &desired::Inputs {
                config: &config,
                peers: &peers,
                prior: None,
            },
        )
        .map(|d| d.spec)
        .map_err(|e| InspectError::Evaluate {
            address: address.clone(),
            message: e.to_string(),
        })
    }

    /// The plain objects `address` is made of, as they would be applied now.
    ///
    /// Fails when the resource is not in the stack, its kind has no rendered form, or
    /// its spec cannot be evaluated.
    pub fn render(&self, address: &Address, state: &State) -> Result<Vec<Value>, InspectError> {
        let spec = self.spec_from_state(address, state)?;
        let kind = self.kind(address, &address.kind)?;
        let config = self.provider_config(&self.instance(address, kind.provider(), None))?;
        match kind.render(&spec, &config) {
            None => Err(InspectError::NoRender {
                address: address.clone(),
                kind: address.kind.clone(),
            }),
            Some(r) => r.map_err(|source| InspectError::Provider {
                address: address.clone(),
                source: Box::new(source),
            }),
        }
    }

    /// The live readiness of every resource in the stack or the state, in address
    /// order, asking the providers `parallelism` at a time.
    pub async fn status(&self, state: &State) -> Vec<Status> {
        let mut addresses: Vec<Address> = self.stack.resources.keys().cloned().collect();
        addresses.extend(
            state
                .resources
                .keys()
                .filter_map(|k| Address::parse(k).ok()),
        );
        addresses.sort();
        addresses.dedup();
        let parallelism = self.settings.parallelism.max(1);
        stream::iter(addresses)
            .map(|address| async move {
                let entry = state
                    .resources
                    .get(&address.to_string())
                    .filter(|r| r.id.is_some());
                let kind = entry
                    .map(|r| r.kind.clone())
                    .unwrap_or_else(|| address.kind.clone());
                let health = match entry {
                    None => None,
                    Some(r) => Some(
                        self.health_of(
                            &address,
                            &r.kind,
                            r.id.as_deref().unwrap_or_default(),
                            &r.spec,
                        )
                        .await,
                    ),
                };
                Status {
                    address,
                    kind,
                    health,
                }
            })
            .buffered(parallelism)
            .collect()
            .await
    }

    async fn health_of(
        &self,
        address: &Address,
        kind: &str,
        id: &str,
        spec: &Value,
    ) -> Result<Health, String> {
        let resource = self.kind(address, kind).map_err(|e| e.to_string())?;
        let ctx = self
            .ctx(address, resource.provider())
            .map_err(|e| e.to_string())?;
        resource
            .health(&ctx, id, spec)
            .await
            .map_err(|e| e.to_string())
    }

    /// Streams the logs of `address` into `sink`; with `follow`, until it finishes.
    ///
    /// Fails when the resource is not applied or its kind has no logs.
    pub async fn logs(
        &self,
        address: &Address,
        state: &State,
        follow: bool,
        sink: LineSink,
    ) -> Result<(), InspectError> {
        let r = state
            .resources
            .get(&address.to_string())
            .filter(|r| r.id.is_some())
            .ok_or_else(|| InspectError::NotApplied {
                address: address.clone(),
            })?;
        let kind = self.kind(address, &r.kind)?;
        let ctx = self.ctx(
            address,
            &self.instance(address, kind.provider(), Some(&r.provider)),
        )?;
        kind.logs(
            &ctx,
            r.id.as_deref().unwrap_or_default(),
            &r.spec,
            follow,
            sink,
        )
        .await
        .map_err(|source| InspectError::Provider {
            address: address.clone(),
            source: Box::new(source),
        })
    }
}
