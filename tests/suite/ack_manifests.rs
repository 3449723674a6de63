//! The ACK SageMaker controller's manifests kept in the repository
//! (`stacks/modules/ack-sagemaker-controller/manifests/`) are the chart's: the CRDs the
//! chart in `contracts/ack-sagemaker/chart-1.9.1/crds/` holds, byte for byte and sorted
//! by name, and every file's sha256 as its README states it, so an edit is a
//! re-rendering the README records.

use crate::common::{assert_readme_sha256, manifest_dir};

const DIR: &str = "stacks/modules/ack-sagemaker-controller/manifests";

#[test]
fn the_controller_crds_are_the_charts_byte_for_byte() {
    let root = manifest_dir();
    let chart = root.join("contracts/ack-sagemaker/chart-1.9.1/crds");
    let mut files: Vec<_> = std::fs::read_dir(&chart)
        .expect("the chart's crds/")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 28, "{files:?}");
    let mut documents: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("read a CRD");
            let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
            let name = value["metadata"]["name"]
                .as_str()
                .expect("a CRD name")
                .to_string();
            (name, text)
        })
        .collect();
    documents.sort();
    let kept = std::fs::read_to_string(root.join(DIR).join("crds.yaml")).expect("crds.yaml");
    for (name, text) in &documents {
        assert!(
            kept.contains(text.trim()),
            "{name} is the chart's, byte for byte"
        );
    }
    let names: Vec<&str> = kept
        .lines()
        .filter_map(|l| l.strip_prefix("  name: "))
        .collect();
    let expected: Vec<&str> = documents.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, expected, "one of each, sorted by name");
}

#[test]
fn every_manifest_file_has_the_sha256_its_readme_states() {
    assert_readme_sha256(
        &manifest_dir().join(DIR),
        &["crds.yaml", "namespace.yaml", "controller.yaml"],
    );
}
