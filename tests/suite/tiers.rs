//! The test tiers: `scripts/test.sh` runs every test that is not ignored, and
//! `scripts/test.sh --long` (CI) then runs the ignored ones, which are the long tier of
//! randomized and soak trials. An ignored test must say so (`#[ignore = "long: …"]`):
//! a test ignored for any other reason would run nowhere but CI, unannounced.

use std::path::Path;

use crate::common::manifest_dir;

/// Every `.rs` file under `dir`, `target/` left out.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("directory readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == ".git")
            {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_ignored_test_belongs_to_the_long_tier() {
    let root = manifest_dir();
    let mut files = Vec::new();
    for dir in [
        "src",
        "providers",
        "sandbox",
        "contracts",
        "tests",
        "examples",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "read {} files", files.len());
    // Spelled in two parts so this file does not match itself.
    let attribute = format!("#[{}", "ignore");
    let mut stray = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("source readable");
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with(&attribute) && !line.starts_with(&format!("{attribute} = \"long: "))
            {
                let rel = file.strip_prefix(&root).unwrap_or(file);
                stray.push(format!("{}:{}: {line}", rel.display(), n + 1));
            }
        }
    }
    assert_eq!(
        stray,
        Vec::<String>::new(),
        "ignored tests outside the long tier (write #[ignore = \"long: why\"])"
    );
}
