//! A Stack's Git source: a bare mirror of the repository under the operator's working
//! directory (cloned once, fetched at every reconcile), and the files under `path` at
//! `ref` read out of it. The inputs are identified by that content, not by the commit:
//! committing an approval, or the same files arriving in another commit, plans nothing
//! new.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use sha2::{Digest, Sha256};

use super::OperatorError;

/// The files under `path` (every file, by its path below `path`) at `reference` (a
/// branch, a tag or a commit id) of the repository at `url`, and the commit they are
/// from. The mirror is kept in `cache`.
pub fn files(
    url: &str,
    reference: &str,
    path: &str,
    cache: &Path,
) -> Result<(BTreeMap<String, Vec<u8>>, String), OperatorError> {
    let fail = |step: &str, e: &dyn std::fmt::Display| OperatorError::Source {
        message: format!("git {url}: {step}: {e}"),
    };
    let dir = cache.join(&hex::encode(Sha256::digest(url.as_bytes()))[..16]);
    let interrupt = AtomicBool::new(false);
    let repo = match gix::open(&dir) {
        Ok(repo) => {
            // Branches under refs/remotes/origin (looked up first), tags as they are.
            let remote = repo
                .remote_at(url)
                .and_then(|r| {
                    r.with_refspecs(
                        [
                            "+refs/heads/*:refs/remotes/origin/*",
                            "+refs/tags/*:refs/tags/*",
                        ],
                        gix::remote::Direction::Fetch,
                    )
                })
                .map_err(|e| fail("configure the fetch", &e))?;
            remote
                .connect(gix::remote::Direction::Fetch)
                .map_err(|e| fail("connect", &e))?
                .prepare_fetch(gix::progress::Discard, Default::default())
                .map_err(|e| fail("fetch", &e))?
                .receive(gix::progress::Discard, &interrupt)
                .map_err(|e| fail("fetch", &e))?;
            repo
        }
        Err(_) => {
            // Nothing usable there: a first clone (or one a crash left half made).
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(cache)
                .map_err(|e| fail("create the mirror's directory", &e))?;
            let mut clone = gix::prepare_clone_bare(url, &dir).map_err(|e| fail("clone", &e))?;
            let (repo, _) = clone
                .fetch_only(gix::progress::Discard, &interrupt)
                .map_err(|e| fail("clone", &e))?;
            repo
        }
    };
    let named = [
        format!("refs/remotes/origin/{reference}"),
        format!("refs/heads/{reference}"),
        format!("refs/tags/{reference}"),
    ]
    .iter()
    .find_map(|name| {
        let mut r = repo.try_find_reference(name.as_str()).ok()??;
        r.peel_to_id().ok().map(|id| id.detach())
    });
    let id = named
        .or_else(|| gix::ObjectId::from_hex(reference.as_bytes()).ok())
        .ok_or_else(|| OperatorError::Source {
            message: format!("git {url}: no branch, tag or commit {reference:?}"),
        })?;
    let commit = repo
        .find_object(id)
        .map_err(|e| fail(&format!("read {reference}"), &e))?
        .peel_to_commit()
        .map_err(|e| fail(&format!("read {reference}"), &e))?;
    let root = commit
        .tree()
        .map_err(|e| fail("read the commit's tree", &e))?;
    let path = path.trim_matches('/');
    let tree = if path.is_empty() || path == "." {
        root
    } else {
        root.lookup_entry_by_path(path)
            .map_err(|e| fail(&format!("look up {path}"), &e))?
            .ok_or_else(|| OperatorError::Source {
                message: format!("git {url}: {reference} has no directory {path}"),
            })?
            .object()
            .map_err(|e| fail(&format!("read {path}"), &e))?
            .try_into_tree()
            .map_err(|_| OperatorError::Source {
                message: format!("git {url}: {path} at {reference} is not a directory"),
            })?
    };
    let mut files = BTreeMap::new();
    let entries = tree
        .traverse()
        .breadthfirst
        .files()
        .map_err(|e| fail("list the files", &e))?;
    for entry in entries.into_iter().filter(|e| e.mode.is_blob()) {
        let blob = repo
            .find_object(entry.oid)
            .map_err(|e| fail(&format!("read {}", entry.filepath), &e))?;
        files.insert(entry.filepath.to_string(), blob.data.clone());
    }
    Ok((files, commit.id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn commit(dir: &Path, file: &str, text: &str) -> String {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", file]);
        git(dir, &["rev-parse", "HEAD"])
    }

    #[test]
    fn files_under_a_path_at_a_branch_tag_or_commit_and_fetched_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        git(&repo, &["init", "-q", "-b", "main"]);
        let first = commit(&repo, "stacks/data/stack.toml", "a = 1\n");
        commit(&repo, "stacks/data/envs/prod.toml", "x = 2\n");
        commit(&repo, "README.md", "outside the path\n");
        git(&repo, &["tag", "v1"]);
        let url = format!("file://{}", repo.display());
        let cache = tmp.path().join("cache");
        let (at_main, _) = files(&url, "main", "stacks/data", &cache).expect("main");
        assert_eq!(
            at_main.keys().collect::<Vec<_>>(),
            vec!["envs/prod.toml", "stack.toml"]
        );
        let (at_first, id) = files_at(&url, &first, &cache);
        assert_eq!(id, first);
        assert_eq!(at_first.keys().collect::<Vec<_>>(), vec!["stack.toml"]);
        // A new commit is fetched into the mirror; the tag stays where it was.
        commit(&repo, "stacks/data/stack.toml", "a = 3\n");
        let (now, _) = files(&url, "main", "stacks/data", &cache).expect("fetched");
        assert_eq!(now["stack.toml"], b"a = 3\n");
        let (tagged, _) = files(&url, "v1", "stacks/data", &cache).expect("tag");
        assert_eq!(tagged["stack.toml"], b"a = 1\n");
        let err = files(&url, "nope", "stacks/data", &cache).expect_err("no such ref");
        assert!(
            err.to_string()
                .contains("no branch, tag or commit \"nope\""),
            "{err}"
        );
        let err = files(&url, "main", "stacks/other", &cache).expect_err("no such path");
        assert!(
            err.to_string().contains("has no directory stacks/other"),
            "{err}"
        );
    }

    fn files_at(url: &str, id: &str, cache: &Path) -> (BTreeMap<String, Vec<u8>>, String) {
        files(url, id, "stacks/data", cache).expect("by commit id")
    }
}
