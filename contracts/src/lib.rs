//! The official API descriptions the tests check requests and emulator answers against
//! (GCP discovery documents, botocore models, the Kubernetes OpenAPI document, the ACK
//! SageMaker chart and CRDs, the SageMaker pipeline-definition schema, Kubeflow
//! Pipelines as rendered), kept in this directory with their origin, version and sha256
//! in `SOURCES.json`, and read through this one helper.
//!
//! A contract is named by its key in the manifest, the upstream file name
//! (`gcp/container.v1.json`, `aws/botocore-1.44.5/eks/2017-11-01/service-2.json.gz`), or
//! by a file under a directory key (`ack-sagemaker/chart-1.9.1/crds/…`). Large files are
//! stored gzipped (the manifest's `stored` names the file); [`text`] and [`bytes`] give
//! the content as upstream publishes it, uncompressed. A contract that is not here is a
//! panic naming it: no test skips because a contract is missing.
//!
//! `python3 scripts/contracts.py check` verifies every file against the manifest;
//! `python3 scripts/contracts.py fetch` re-derives the ones a package registry serves.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// This directory: where the contracts and their manifest live.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The manifest: each contract's origin, version, size and sha256.
pub fn manifest() -> Value {
    parse_json("SOURCES.json", &read_file(&dir().join("SOURCES.json")))
}

/// The file holding contract `name` as stored here (maybe gzipped). Panics, naming
/// it, when the repository does not hold it.
pub fn path(name: &str) -> PathBuf {
    let plain = dir().join(name);
    if plain.is_file() {
        return plain;
    }
    let gzipped = dir().join(format!("{name}.gz"));
    if gzipped.is_file() {
        return gzipped;
    }
    panic!(
        "contract {name} is not in the repository ({}); add it with its origin to contracts/SOURCES.json",
        plain.display()
    )
}

/// Contract `name`'s content, uncompressed (a `.gz` upstream file is inflated too).
pub fn bytes(name: &str) -> Vec<u8> {
    let file = path(name);
    let raw = read_file(&file);
    if file.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("contract {name}: {} is not gzip: {e}", file.display()));
        out
    } else {
        raw
    }
}

/// Contract `name` as text.
pub fn text(name: &str) -> String {
    String::from_utf8(bytes(name)).unwrap_or_else(|e| panic!("contract {name} is not UTF-8: {e}"))
}

/// Contract `name` parsed as JSON.
pub fn json(name: &str) -> Value {
    parse_json(name, &bytes(name))
}

/// A GCP discovery document by API and version (`container`, `v1`).
pub fn discovery(api: &str, version: &str) -> Value {
    json(&format!("gcp/{api}.{version}.json"))
}

/// The botocore version whose models are kept.
pub const BOTOCORE: &str = "botocore-1.44.5";

/// A botocore service model by service and API version (`eks`, `2017-11-01`).
pub fn botocore(service: &str, api_version: &str) -> Value {
    json(&format!(
        "aws/{BOTOCORE}/{service}/{api_version}/service-2.json.gz"
    ))
}

/// The Kubernetes 1.31 OpenAPI (swagger 2.0) document.
pub fn kubernetes_swagger() -> Value {
    json("kubernetes/swagger.json")
}

/// An ACK SageMaker controller CRD (chart 1.9.1) by plural (`pipelines`).
pub fn ack_sagemaker_crd(plural: &str) -> String {
    text(&format!(
        "ack-sagemaker/chart-1.9.1/crds/sagemaker.services.k8s.aws_{plural}.yaml"
    ))
}

fn read_file(file: &Path) -> Vec<u8> {
    std::fs::read(file).unwrap_or_else(|e| panic!("contract file {}: {e}", file.display()))
}

fn parse_json(name: &str, raw: &[u8]) -> Value {
    serde_json::from_slice(raw).unwrap_or_else(|e| panic!("contract {name} is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use std::collections::BTreeSet;

    fn sha256(raw: &[u8]) -> String {
        hex::encode(Sha256::digest(raw))
    }

    /// Every file the manifest lists is here with its sha256 (of the upstream bytes:
    /// inflated when it is stored gzipped here), and nothing else is.
    #[test]
    fn every_contract_matches_its_manifest_entry_and_none_is_unlisted() {
        let manifest = manifest();
        let entries = manifest.as_object().expect("the manifest is an object");
        let mut listed = BTreeSet::new();
        for (key, meta) in entries {
            assert!(
                meta["from"].as_str().is_some_and(|f| !f.is_empty()),
                "{key} has no origin"
            );
            if let Some(files) = meta["files"].as_object() {
                for (file, want) in files {
                    let name = format!("{key}{file}");
                    let got = sha256(&read_file(&dir().join(&name)));
                    assert_eq!(Some(got.as_str()), want.as_str(), "{name}");
                    listed.insert(name);
                }
                continue;
            }
            let stored = match meta["stored"].as_str() {
                Some(s) => Path::new(key).with_file_name(s),
                None => PathBuf::from(key),
            };
            let raw = read_file(&dir().join(&stored));
            let upstream = if meta["stored"].is_string() {
                bytes(key)
            } else {
                raw
            };
            assert_eq!(
                Some(sha256(&upstream).as_str()),
                meta["sha256"].as_str(),
                "{key} (stored as {})",
                stored.display()
            );
            assert_eq!(
                meta["bytes"].as_u64(),
                Some(upstream.len() as u64),
                "{key}: size"
            );
            listed.insert(stored.to_string_lossy().into_owned());
        }
        let mut unlisted = Vec::new();
        walk(&dir(), &dir(), &mut |rel| {
            let own = rel == "SOURCES.json"
                || rel == "README.md"
                || rel == "Cargo.toml"
                || rel.starts_with("src/");
            if !own && !listed.contains(rel) {
                unlisted.push(rel.to_string());
            }
        });
        assert_eq!(
            unlisted,
            Vec::<String>::new(),
            "files without a manifest entry"
        );
    }

    fn walk(root: &Path, at: &Path, seen: &mut dyn FnMut(&str)) {
        for entry in std::fs::read_dir(at).expect("contracts directory readable") {
            let p = entry.expect("directory entry").path();
            if p.is_dir() {
                walk(root, &p, seen);
            } else {
                let rel = p.strip_prefix(root).expect("under the root");
                seen(&rel.to_string_lossy());
            }
        }
    }

    #[test]
    fn stored_gzipped_and_plain_contracts_read_alike() {
        assert!(kubernetes_swagger()["definitions"].is_object());
        assert!(discovery("container", "v1")["schemas"]["ClusterUpdate"].is_object());
        assert!(discovery("file", "v1")["schemas"].is_object());
        assert!(botocore("eks", "2017-11-01")["operations"]["CreateCluster"].is_object());
        assert!(ack_sagemaker_crd("pipelines").contains("kind: CustomResourceDefinition"));
    }

    #[test]
    #[should_panic(expected = "contract gcp/nope.v1.json is not in the repository")]
    fn a_missing_contract_is_a_failure_naming_it() {
        let _ = text("gcp/nope.v1.json");
    }
}
