//! Building one member resolves the same dependency features as building the
//! workspace (`hack/`), so `cargo test -p terrain-providers` reuses what
//! `scripts/test.sh` compiled instead of building the dependency tree a second time.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::common::manifest_dir;

/// `package version → features` as `cargo tree` resolves them for `selection`.
fn features(selection: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--locked", "--prefix", "none", "-f", "{p}|{f}"])
        .args(selection)
        .current_dir(manifest_dir())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {selection:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, list)) = line.split_once('|') else {
            continue;
        };
        // `name vX.Y.Z (path)` for members: the name and version are the key.
        let key: String = package.split(' ').take(2).collect::<Vec<_>>().join(" ");
        let list = list.trim_end_matches(" (*)");
        found.entry(key).or_default().extend(
            list.split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_string),
        );
    }
    found
}

#[test]
fn each_member_alone_resolves_the_workspaces_features() {
    let workspace = features(&["--workspace"]);
    assert!(workspace.len() > 300, "read {} packages", workspace.len());
    for member in ["terrain", "terrain-providers", "terrain-sandbox"] {
        let alone = features(&["-p", member]);
        let differ: Vec<String> = alone
            .iter()
            .filter_map(|(package, set)| {
                let all = workspace.get(package)?;
                (all != set).then(|| {
                    let missing: Vec<&String> = all.difference(set).collect();
                    format!("{package}: {missing:?}")
                })
            })
            .collect();
        assert_eq!(
            differ,
            Vec::<String>::new(),
            "`cargo test -p {member}` would build these with fewer features than the workspace: add them to hack/Cargo.toml"
        );
    }
}
