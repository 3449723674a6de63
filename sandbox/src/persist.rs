//! The state file: everything the emulators hold, as one JSON document loaded at start and
//! rewritten atomically (temporary file, then rename) after every change, so objects and
//! running operations survive across processes — e.g. one sandbox per CLI run. Beside it
//! lives the data directory (volumes, process data).

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::aws::AwsWorld;
use crate::gcp::GcpState;
use crate::k8s::KubeState;
use crate::SandboxError;

/// The format version written into state files.
const VERSION: u32 = 1;

/// Everything the sandbox persists; other clouds add their own fields here.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct World {
    #[serde(default = "version")]
    pub version: u32,
    #[serde(default)]
    pub gcp: GcpState,
    #[serde(default)]
    pub kubernetes: KubeState,
    #[serde(default)]
    pub aws: AwsWorld,
}

fn version() -> u32 {
    VERSION
}

impl World {
    pub(crate) fn new() -> World {
        World {
            version: VERSION,
            gcp: GcpState::default(),
            kubernetes: KubeState::default(),
            aws: AwsWorld::default(),
        }
    }

    /// The state file's text: compact, since every request that changes the world
    /// writes it again, and a world with a Kubeflow install runs to megabytes.
    pub(crate) fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

/// The data directory that goes with a state file: `<state file>.data/`, so volumes and
/// process data survive across processes together with the state.
pub(crate) fn data_dir(state_file: &Path) -> PathBuf {
    let mut name = state_file.as_os_str().to_owned();
    name.push(".data");
    PathBuf::from(name)
}

/// Loads the state file; a missing file is an empty world.
pub(crate) fn load(path: &Path) -> Result<World, SandboxError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(World::new()),
        Err(source) => {
            return Err(SandboxError::ReadState {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let world: World = serde_json::from_str(&text).map_err(|source| SandboxError::ParseState {
        path: path.to_path_buf(),
        source,
    })?;
    if world.version != VERSION {
        return Err(SandboxError::StateVersion {
            path: path.to_path_buf(),
            found: world.version,
        });
    }
    Ok(world)
}

/// Writes `text` to `path` atomically: a reader sees the old or the new file, never a
/// torn one, even if the process dies mid-write.
pub(crate) fn save(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let result = (|| {
        // Owner-only: emulated clusters' Secrets live in it.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        // Best effort: a leftover temporary file is harmless but untidy.
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "sandbox-state".into());
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_is_empty_and_saved_state_round_trips() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.json");
        let world = load(&path).expect("missing is empty");
        let text = world.to_json().expect("serializes");
        save(&path, &text).expect("save");
        let again = load(&path).expect("load");
        assert_eq!(again.to_json().expect("serializes"), text);
        let leftovers = std::fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
    }

    #[test]
    fn data_directories_sit_beside_state_files() {
        assert_eq!(
            data_dir(Path::new("/tmp/x/state.json")),
            PathBuf::from("/tmp/x/state.json.data")
        );
    }

    #[test]
    fn corrupt_or_future_files_are_errors() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{not json").expect("write");
        assert!(matches!(load(&path), Err(SandboxError::ParseState { .. })));
        std::fs::write(&path, r#"{"version": 99}"#).expect("write");
        assert!(matches!(
            load(&path),
            Err(SandboxError::StateVersion { found: 99, .. })
        ));
    }
}
