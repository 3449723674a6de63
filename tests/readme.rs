//! The README's examples are produced by the binary: the quickstart plan shown there
//! must be exactly what `terrain plan` prints, so the README cannot go stale.

use std::path::Path;
use std::process::Command;

/// The fenced block that follows the line containing `marker`.
fn block_after(readme: &str, marker: &str) -> String {
    let start = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README has `{marker}`"));
    let rest = &readme[start..];
    let fence = rest.find("```").expect("a fenced block follows");
    let open = fence + rest[fence..].find('\n').expect("the fence line ends") + 1;
    let close = rest[open..].find("```").expect("the block closes") + open;
    rest[open..close].to_string()
}

#[test]
fn readme_quickstart_plan_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let work = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_terrain"))
        .args(["plan", "-s"])
        .arg(root.join("stacks/quickstart"))
        .current_dir(work.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run terrain");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        block_after(&readme, "`cargo run -- plan -s stacks/quickstart`")
    );
}

#[test]
fn readme_stack_is_the_quickstart_stack() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let shown = block_after(
        &readme,
        "`stacks/quickstart/stack.toml` needs no cloud account",
    );
    let file =
        std::fs::read_to_string(root.join("stacks/quickstart/stack.toml")).expect("read stack");
    // The README shows the stack without its comments.
    let uncommented: String = file
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("\n\n\n", "\n\n");
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let shown_lines = strip(&shown);
    let file_lines: Vec<String> = strip(&uncommented)
        .into_iter()
        .filter(|l| !l.starts_with("description ="))
        .collect();
    assert_eq!(shown_lines, file_lines);
}

#[test]
fn readme_error_example_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let fixture = root.join("tests/fixtures/readme-typo");
    let shown_stack = block_after(&readme, "For this stack:");
    assert_eq!(
        shown_stack,
        std::fs::read_to_string(fixture.join("stack.toml")).expect("read fixture")
    );
    let out = Command::new(env!("CARGO_BIN_EXE_terrain"))
        .args(["validate", "-s", "stack.toml"])
        .current_dir(&fixture)
        .env("NO_COLOR", "1")
        .output()
        .expect("run terrain");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        block_after(&readme, "`terrain validate -s stack.toml` prints:")
    );
}
