//! `terrain operator`: stacks reconciled in a cluster. A `Stack` resource names the
//! stack's files, variables and remote state; the operator plans it every interval
//! (and on every change of the Stack or its ConfigMap), applies a plan only when its
//! content digest is approved or the approval mode lets it through, stores pending
//! plans beside the state, and reports drift. The plan and apply themselves go through
//! a [`Runner`] (the CLI's engine), so the rules here are tested without clouds.

pub mod controller;
pub mod crd;
pub mod decide;
pub mod digest;
pub mod git;
pub mod lease;
pub mod metrics;
pub mod source;

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;

use crate::plan::Plan;
use crate::state::OutputState;

/// Why reconciling a Stack failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("{call} failed: {source}")]
    Kube {
        call: String,
        #[source]
        source: kube::Error,
    },
    #[error("the stack's source: {message}")]
    Source { message: String },
    #[error("the working directory: {message}: {source}")]
    WorkDir {
        message: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the destroy plan {digest} waits for approval; the Stack stays until it is applied (set spec.approval.approvedPlan, or `terrain stack approve`)")]
    DestroyPending { digest: String },
    #[error("{0}")]
    Run(#[from] RunError),
}

/// One plan or apply of a Stack's stack.
#[derive(Debug, Clone)]
pub struct Job {
    /// The stack's directory, its files written there.
    pub dir: PathBuf,
    pub env: Option<String>,
    pub vars: Vec<(String, String)>,
    /// Values never to show (those of Secrets).
    pub secrets: Vec<String>,
    /// The state store in place of the stack's `[backend]`.
    pub backend: Option<crd::BackendSpec>,
    /// Plan the destruction of everything.
    pub destroy: bool,
    /// The Lease this replica holds, recorded with the state locks it takes.
    pub lease: Option<crate::state::LeaseHold>,
}

/// A plan made for a [`Job`].
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    /// Where the state is (`gs://…`).
    pub state: String,
    /// The stack's outputs as the state holds them.
    pub outputs: BTreeMap<String, OutputState>,
    /// Who holds the state lock, when someone (alive) does.
    pub locked: Option<String>,
}

/// Why a plan or apply did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    /// The stack does not load or check, or keeps its state where a pod cannot: fixed
    /// only by changing the inputs.
    #[error("{message}")]
    Invalid { message: String },
    /// Another run holds the state lock.
    #[error("{message}")]
    Locked { holder: String, message: String },
    /// The state moved since the plan was made: plan again.
    #[error("{message}")]
    Stale { message: String },
    #[error("{message}")]
    Failed { message: String },
}

/// Plans and applies stacks (the engine, through the CLI's sessions).
#[async_trait]
pub trait Runner: Send + Sync {
    /// Plans `job` against its state and the live objects.
    async fn plan(&self, job: &Job) -> Result<Planned, RunError>;
    /// Applies `planned` under the state lock, refusing it if the state moved since.
    async fn apply(
        &self,
        job: &Job,
        planned: &Planned,
    ) -> Result<BTreeMap<String, OutputState>, RunError>;
    /// Stores `plan` as `name` beside `job`'s state, protected as the state is; returns
    /// where it is.
    async fn store_plan(&self, job: &Job, name: &str, plan: &Plan) -> Result<String, RunError>;
}

/// `text` with every one of `secrets` (and its base64, as a Secret's data holds it)
/// hidden, as the engine hides secrets in progress lines.
pub fn hide(text: &str, secrets: &[String]) -> String {
    crate::engine::hide_secrets(text.to_string(), secrets)
}
