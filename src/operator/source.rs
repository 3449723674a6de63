//! A Stack's inputs as the operator reads them: the stack's files from its ConfigMap or
//! its Git repository, written into the Stack's own working directory, and its
//! variables, those of `varsFrom` Secrets kept apart so their values can be hidden.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use super::crd::StackSpec;
use super::OperatorError;

/// What a stack is made from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The directory the files were written to.
    pub dir: PathBuf,
    /// Each file by its path in the stack's directory.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Every variable: `vars`, then each Secret's keys over them.
    pub vars: BTreeMap<String, String>,
    /// The values that came from Secrets: never shown.
    pub secrets: Vec<String>,
}

/// Reads the inputs of the Stack `name` in `namespace` and writes its files under
/// `work/NAMESPACE/NAME`, replacing what an earlier reconcile wrote there.
pub async fn read(
    client: &Client,
    namespace: &str,
    name: &str,
    spec: &StackSpec,
    work: &Path,
) -> Result<Inputs, OperatorError> {
    let files = match (&spec.source.config_map, &spec.source.git) {
        (Some(cm), None) => {
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let found = maps
                .get_opt(&cm.name)
                .await
                .map_err(|source| OperatorError::Kube {
                    call: format!("get configmaps/{}", cm.name),
                    source,
                })?
                .ok_or_else(|| OperatorError::Source {
                    message: format!("ConfigMap {namespace}/{} does not exist", cm.name),
                })?;
            files_of(&found)?
        }
        (None, Some(git)) => {
            let (git, cache) = (git.clone(), work.join(".mirrors"));
            // Cloning and fetching block: off the controller's threads.
            let (files, _commit) = tokio::task::spawn_blocking(move || {
                super::git::files(&git.url, &git.reference, &git.path, &cache)
            })
            .await
            .map_err(|e| OperatorError::Source {
                message: format!("the git fetch stopped: {e}"),
            })??;
            if !files.keys().any(|p| p.ends_with(".toml")) {
                return Err(OperatorError::Source {
                    message: "the git source holds no .toml file at its path".into(),
                });
            }
            files
        }
        _ => {
            return Err(OperatorError::Source {
                message: "spec.source must name exactly one of configMap and git".into(),
            })
        }
    };
    let mut vars = spec.vars.clone();
    let mut secrets = Vec::new();
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for from in &spec.vars_from {
        let name = &from.secret_ref.name;
        let secret = secret_api
            .get_opt(name)
            .await
            .map_err(|source| OperatorError::Kube {
                call: format!("get secrets/{name}"),
                source,
            })?
            .ok_or_else(|| OperatorError::Source {
                message: format!("Secret {namespace}/{name} (varsFrom) does not exist"),
            })?;
        for (key, value) in secret.data.unwrap_or_default() {
            let value = String::from_utf8(value.0).map_err(|_| OperatorError::Source {
                message: format!("Secret {namespace}/{name}: key {key} is not UTF-8 text"),
            })?;
            if !value.is_empty() {
                secrets.push(value.clone());
            }
            vars.insert(key, value);
        }
    }
    let dir = work.join(namespace).join(name);
    write(&dir, &files)?;
    Ok(Inputs {
        dir,
        files,
        vars,
        secrets,
    })
}

/// The files a ConfigMap holds, by path (`__` in a key stands for `/`).
pub fn files_of(cm: &ConfigMap) -> Result<BTreeMap<String, Vec<u8>>, OperatorError> {
    let mut files = BTreeMap::new();
    for (key, text) in cm.data.iter().flatten() {
        files.insert(path_of(key)?, text.clone().into_bytes());
    }
    for (key, bytes) in cm.binary_data.iter().flatten() {
        files.insert(path_of(key)?, bytes.0.clone());
    }
    if !files.keys().any(|p| p.ends_with(".toml")) {
        return Err(OperatorError::Source {
            message: format!(
                "ConfigMap {} holds no .toml file: a stack's files are its keys (main.toml …)",
                cm.metadata.name.as_deref().unwrap_or_default()
            ),
        });
    }
    Ok(files)
}

/// The path a ConfigMap key stands for; none may leave the stack's directory.
fn path_of(key: &str) -> Result<String, OperatorError> {
    let path = key.replace("__", "/");
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(OperatorError::Source {
            message: format!("ConfigMap key {key:?} is not a path inside the stack's directory"),
        });
    }
    Ok(path)
}

/// Writes `files` into `dir`, which holds nothing else afterwards. The directory itself
/// stays (a run may be working in it): what was in it goes.
fn write(dir: &Path, files: &BTreeMap<String, Vec<u8>>) -> Result<(), OperatorError> {
    let io = |what: &str, path: &Path, source: std::io::Error| OperatorError::WorkDir {
        message: format!("{what} {}", path.display()),
        source,
    };
    if dir.exists() {
        for entry in std::fs::read_dir(dir).map_err(|e| io("list", dir, e))? {
            let path = entry.map_err(|e| io("list", dir, e))?.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| io("clear", &path, e))?;
        }
    }
    for (path, bytes) in files {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
        }
        std::fs::write(&file, bytes).map_err(|e| io("write", &file, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configmap_keys_are_paths_and_cannot_leave_the_directory() {
        assert_eq!(path_of("main.toml").expect("plain"), "main.toml");
        assert_eq!(
            path_of("envs__prod.toml").expect("nested"),
            "envs/prod.toml"
        );
        assert!(path_of("..__etc__passwd").is_err());
        assert!(path_of("a____b").is_err());
    }

    #[test]
    fn a_configmap_without_a_toml_file_is_refused() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("files".into());
        cm.data = Some(BTreeMap::from([("readme.md".into(), "x".into())]));
        let err = files_of(&cm).expect_err("no stack file");
        assert!(err.to_string().contains("holds no .toml file"), "{err}");
    }

    #[test]
    fn writing_replaces_what_was_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stack = dir.path().join("ns").join("s");
        write(
            &stack,
            &BTreeMap::from([("old.toml".into(), b"a".to_vec())]),
        )
        .expect("write");
        write(
            &stack,
            &BTreeMap::from([("envs/prod.toml".into(), b"b".to_vec())]),
        )
        .expect("rewrite");
        assert!(!stack.join("old.toml").exists());
        assert_eq!(
            std::fs::read(stack.join("envs/prod.toml")).expect("read"),
            b"b"
        );
    }
}
