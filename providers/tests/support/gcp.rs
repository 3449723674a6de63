//! What the GCP tests share: a sandbox whose projects have every API terrain calls on,
//! the `[providers.gcp]` table pointing at it (a token file, fast polls and retries),
//! and the registered kinds through the untyped face the engine drives.

use std::sync::Arc;

use serde_json::{json, Value};
use terrain_providers::Resource;
use terrain_sandbox::{Options, Sandbox, Timing};

/// A running sandbox, the provider table for `project` pointing at it, and the
/// directory holding its token file (kept while the table is used).
pub struct Gcp {
    pub sandbox: Sandbox,
    pub table: Value,
    pub dir: tempfile::TempDir,
}

/// Starts a sandbox with `timing` and every Google API on.
pub async fn start(timing: Timing, project: &str) -> Gcp {
    let sandbox = Sandbox::start(Options {
        timing,
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "sandbox-token\n").expect("token file");
    let e = sandbox.gcp_endpoints();
    let table = json!({
        "project": project,
        "region": "us-central1",
        "access_token_file": token.display().to_string(),
        "poll_interval": "5ms",
        "max_poll_interval": "20ms",
        "retry_base_delay": "5ms",
        "max_retries": 12,
        "endpoints": {
            "container": e.container,
            "file": e.file,
            "storage": e.storage,
            "iam": e.iam,
            "cloudresourcemanager": e.cloudresourcemanager,
        },
    });
    Gcp {
        sandbox,
        table,
        dir,
    }
}

/// The registered kind `name`.
pub fn kind(name: &str) -> Arc<dyn Resource> {
    terrain_providers::registry::builtin()
        .get(name)
        .unwrap_or_else(|| panic!("{name} is registered"))
        .clone()
}
