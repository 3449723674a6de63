//! Kubeconfig files for the emulated clusters: one context per cluster, named the way
//! the cloud's CLI names it, trusting the cluster CA and authenticating with a fixed
//! bearer token (GKE clusters accept any non-empty one; EKS clusters a token shaped like
//! `aws eks get-token`'s). Written owner-only, like
//! credentials.

use std::io::Write as _;
use std::path::Path;

use base64::Engine as _;
use serde_json::json;

/// The token kubeconfigs carry.
pub(crate) const TOKEN: &str = "sandbox";

/// A kubeconfig with a single context, authenticating with `token`.
pub(crate) fn render(
    context: &str,
    server: &str,
    ca_pem: &str,
    token: &str,
) -> Result<String, String> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": context,
            "cluster": {
                "server": server,
                "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
        }],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "users": [{"name": context, "user": {"token": token}}],
        "preferences": {},
    });
    serde_yaml_ng::to_string(&config).map_err(|e| format!("could not render the kubeconfig: {e}"))
}

/// Writes `text` to `path`, readable by its owner only.
/// Whether the file at `path` is readable by its owner only.
fn owner_only(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 == 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        true
    }
}

pub(crate) fn write(path: &Path, text: &str) -> std::io::Result<()> {
    // Rewritten whenever clusters come and go (`terrain sandbox serve` refreshes them
    // while kubectl may be reading): unchanged files are left alone, and changed ones
    // replaced whole, so a reader never sees a half-written file.
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) && owner_only(path) {
        return Ok(());
    }
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let written = options.open(&tmp).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        file.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_names_one_context_and_trusts_the_ca() {
        let text = render("gke_p_l_c", "https://127.0.0.1:1234", "PEM", TOKEN).expect("renders");
        let v: serde_json::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(v["current-context"], "gke_p_l_c");
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:1234"
        );
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            base64::engine::general_purpose::STANDARD.encode("PEM")
        );
        assert_eq!(v["users"][0]["user"]["token"], TOKEN);
    }

    #[cfg(unix)]
    #[test]
    fn kubeconfig_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.kubeconfig");
        std::fs::write(&path, "old").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        write(&path, "new").expect("write");
        let mode = std::fs::metadata(&path)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
    }

    #[cfg(unix)]
    #[test]
    fn rewriting_a_kubeconfig_replaces_it_whole_and_leaves_an_unchanged_one_alone() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.kubeconfig");
        write(&path, "one").expect("write");
        let first = std::fs::metadata(&path).expect("metadata").ino();
        write(&path, "one").expect("write");
        assert_eq!(std::fs::metadata(&path).expect("metadata").ino(), first);
        write(&path, "two").expect("write");
        // A new file renamed into place: a reader holding the old one reads it whole.
        assert_ne!(std::fs::metadata(&path).expect("metadata").ino(), first);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "two");
        let leftovers = std::fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
    }
}
