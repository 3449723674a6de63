//! `terrain graph --format svg|html`, through the CLI: for the four scenario stacks the
//! SVG holds exactly one node per resource and one edge per dependency, the same as the
//! DOT output lists, boxes that fit their labels and never overlap, and the same bytes
//! on every run; gke-batch-ml's picture is checked in (tests/expected/graph/) and is the
//! one the README shows (docs/gke-batch-ml.svg, so it cannot go stale). The HTML page
//! is self-contained and colours each resource by its planned action: all creates on a
//! fresh sandbox; after an apply, an update for the changed resource, and from a saved
//! plan (`--plan FILE`) a deleted resource drawn in red.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::Sandbox as Work;

use common::SCENARIO_STACKS as STACKS;

/// A work directory holding the stacks these tests use, with their shared modules.
fn with_stacks() -> Work {
    common::with_stacks(&[STACKS.as_slice(), &["modules"]].concat())
}

/// The nodes and edges (`from -> to`) a DOT graph lists, each sorted.
fn dot_graph(dot: &str) -> (Vec<String>, Vec<String>) {
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for line in dot.lines().map(str::trim) {
        let Some(stmt) = line.strip_suffix(';') else {
            continue;
        };
        if let Some((from, to)) = stmt.split_once(" -> ") {
            edges.push(format!("{} -> {}", dot_id(from), dot_id(to)));
        } else if stmt.starts_with('"') {
            nodes.push(dot_id(stmt));
        }
    }
    nodes.sort();
    edges.sort();
    (nodes, edges)
}

/// A quoted DOT ID's text.
fn dot_id(quoted: &str) -> String {
    let inner = quoted
        .trim()
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{quoted} is not a quoted DOT ID"));
    inner.replace("\\\"", "\"").replace("\\\\", "\\")
}

/// One node of a picture: its address (from its `<title>`), id, classes, action, box
/// and label.
#[derive(Debug)]
struct Node {
    address: String,
    id: String,
    class: String,
    action: Option<String>,
    rect: [f64; 4],
    label: String,
}

/// A picture read as XML: its nodes, and its edges' titles (sorted).
struct Picture {
    nodes: Vec<Node>,
    edges: Vec<String>,
}

impl Picture {
    fn parse(svg: &str) -> Self {
        let doc = roxmltree::Document::parse(svg)
            .unwrap_or_else(|e| panic!("the SVG is not XML: {e}\n{svg}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        let title = |g: roxmltree::Node| -> String {
            g.children()
                .find(|c| c.has_tag_name("title"))
                .and_then(|t| t.text())
                .unwrap_or_else(|| panic!("{g:?} has no <title>"))
                .to_string()
        };
        let groups = |class: &str| -> Vec<roxmltree::Node> {
            root.descendants()
                .filter(|n| {
                    n.has_tag_name("g")
                        && n.attribute("class")
                            .is_some_and(|c| c.split(' ').next() == Some(class))
                })
                .collect()
        };
        let nodes = groups("node")
            .into_iter()
            .map(|g| {
                let rect = g
                    .children()
                    .find(|c| c.has_tag_name("rect"))
                    .unwrap_or_else(|| panic!("{g:?} has no <rect>"));
                let n = |a: &str| -> f64 {
                    rect.attribute(a)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| panic!("<rect> without a numeric {a}"))
                };
                let text = g
                    .children()
                    .find(|c| c.has_tag_name("text"))
                    .unwrap_or_else(|| panic!("{g:?} has no <text>"));
                Node {
                    address: title(g),
                    id: g.attribute("id").unwrap_or_default().to_string(),
                    class: g.attribute("class").unwrap_or_default().to_string(),
                    action: g.attribute("data-action").map(ToString::to_string),
                    rect: [n("x"), n("y"), n("width"), n("height")],
                    label: text
                        .descendants()
                        .filter_map(|t| t.is_text().then(|| t.text()).flatten())
                        .collect(),
                }
            })
            .collect();
        let mut edges: Vec<String> = groups("edge").into_iter().map(title).collect();
        edges.sort();
        Self { nodes, edges }
    }

    fn addresses(&self) -> Vec<String> {
        let mut a: Vec<String> = self.nodes.iter().map(|n| n.address.clone()).collect();
        a.sort();
        a
    }

    fn actions(&self) -> BTreeMap<String, String> {
        self.nodes
            .iter()
            .map(|n| {
                (
                    n.address.clone(),
                    n.action.clone().unwrap_or_else(|| "(none)".to_string()),
                )
            })
            .collect()
    }
}

/// The inline SVG of an HTML page.
fn inline_svg(html: &str) -> &str {
    let start = html.find("<svg").expect("the page holds an <svg>");
    let end = html.rfind("</svg>").expect("the page's <svg> is closed") + "</svg>".len();
    &html[start..end]
}

#[test]
fn svg_draws_every_resource_and_dependency_the_dot_lists_once_and_readably() {
    let work = with_stacks();
    for s in STACKS {
        let stack = format!("stacks/{s}");
        let dot = work.run(&["graph", "-s", &stack]);
        dot.success();
        let (nodes, edges) = dot_graph(&dot.stdout);
        assert!(
            !nodes.is_empty() && !edges.is_empty(),
            "{s}: {}",
            dot.stdout
        );

        let svg = work.run(&["graph", "-s", &stack, "--format", "svg"]);
        svg.success();
        let picture = Picture::parse(&svg.stdout);
        assert_eq!(picture.addresses(), nodes, "{s}: one node per resource");
        assert_eq!(picture.edges, edges, "{s}: one edge per dependency");

        for n in &picture.nodes {
            // Found by id as by title, fully labelled, the box wider than the label
            // (7.2 px a character of the 12 px monospace font) and never over another.
            assert!(n.id.starts_with("node-"), "{s}: {n:?}");
            assert_eq!(n.label, n.address, "{s}: the label is the whole address");
            let [x, y, w, h] = n.rect;
            assert!(
                w >= n.label.chars().count() as f64 * 7.2 + 10.0 && h >= 20.0,
                "{s}: the box of {} is too small for its label: {n:?}",
                n.address
            );
            for m in &picture.nodes {
                let [mx, my, mw, mh] = m.rect;
                let apart = x + w <= mx || mx + mw <= x || y + h <= my || my + mh <= y;
                assert!(
                    m.address == n.address || apart,
                    "{s}: {} and {} overlap",
                    n.address,
                    m.address
                );
            }
        }
        let mut ids: Vec<&str> = picture.nodes.iter().map(|n| n.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), picture.nodes.len(), "{s}: node ids are unique");

        let again = work.run(&["graph", "-s", &stack, "--format", "svg"]);
        assert_eq!(again.stdout, svg.stdout, "{s}: the same bytes on every run");
        // Checked in, so a change to the layout shows in review.
        work.expect(&format!("graph/{s}.svg"), &svg.stdout);
    }
}

#[test]
fn gke_batch_ml_picture_is_as_expected_and_is_the_one_the_readme_shows() {
    let work = with_stacks();
    let run = work.run(&["graph", "-s", "stacks/gke-batch-ml", "--format", "svg"]);
    run.success();
    work.expect("graph/gke-batch-ml.svg", &run.stdout);
    // The module's resources are labelled in full.
    let picture = Picture::parse(&run.stdout);
    assert!(picture
        .nodes
        .iter()
        .any(|n| n.label == "module.share.filestore_instance.main"));

    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/gke-batch-ml.svg");
    if std::env::var_os("UPDATE_EXPECTED").is_some_and(|v| v == "1") {
        if let Some(dir) = docs.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        }
        std::fs::write(&docs, &run.stdout)
            .unwrap_or_else(|e| panic!("write {}: {e}", docs.display()));
        return;
    }
    let shown =
        std::fs::read_to_string(&docs).unwrap_or_else(|e| panic!("read {}: {e}", docs.display()));
    assert!(
        shown == run.stdout,
        "docs/gke-batch-ml.svg is not what `terrain graph -s stacks/gke-batch-ml --format svg` prints now; UPDATE_EXPECTED=1 rewrites it"
    );
}

#[test]
fn html_page_is_self_contained_and_colours_a_first_plan_as_creates() {
    let work = with_stacks();
    let stack = "stacks/gke-batch-ml";
    let (nodes, edges) = dot_graph(&work.run(&["graph", "-s", stack]).stdout);
    let run = work.run(&["graph", "-s", stack, "--format", "html", "--sandbox"]);
    run.success();
    let html = &run.stdout;
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    for external in [
        "src=",
        "<script",
        "<link",
        "@import",
        "href=\"http",
        "url(http",
    ] {
        assert!(
            !html.contains(external),
            "the page loads something: {external}"
        );
    }
    assert!(
        html.contains("Plan: 10 to add, 0 to change, 0 to replace, 0 to destroy."),
        "{html}"
    );
    for legend in ["create", "update", "replace", "delete", "no change"] {
        assert!(html.contains(legend), "the legend lacks {legend}");
    }
    let picture = Picture::parse(inline_svg(html));
    assert_eq!(picture.addresses(), nodes);
    assert_eq!(picture.edges, edges);
    for n in &picture.nodes {
        assert_eq!(n.action.as_deref(), Some("create"), "{n:?}");
        assert_eq!(n.class, "node create", "{n:?}");
    }
}

#[test]
fn html_page_colours_a_changed_resource_as_an_update_and_a_removed_one_as_a_delete() {
    let work = with_stacks();
    let stack = "stacks/gke-batch-ml";
    work.run(&["apply", "-s", stack, "--sandbox", "--auto-approve"])
        .success();
    let file = "stacks/gke-batch-ml/stack.toml";
    // Shares grow in place.
    work.set_value(file, "default", "1024", "2048");
    let run = work.run(&["graph", "-s", stack, "--format", "html", "--sandbox"]);
    run.success();
    assert!(
        run.stdout
            .contains("Plan: 0 to add, 1 to change, 0 to replace, 0 to destroy."),
        "{}",
        run.stdout
    );
    let actions = Picture::parse(inline_svg(&run.stdout)).actions();
    let changed = "module.share.filestore_instance.main";
    for (address, action) in &actions {
        let want = if address == changed {
            "update"
        } else {
            "no-op"
        };
        assert_eq!(action, want, "{address}: {actions:?}");
    }

    // Without the Job, from a saved plan: the Job is still drawn, as a delete.
    let text = work.read(file);
    let job = text
        .find("[kubernetes_job.workload]")
        .expect("the stack has the Job");
    work.write(file, &text[..job]);
    work.run(&["plan", "-s", stack, "--sandbox", "--out", "batch.plan"])
        .success();
    let run = work.run(&[
        "graph",
        "-s",
        stack,
        "--format",
        "html",
        "--plan",
        "batch.plan",
    ]);
    run.success();
    let picture = Picture::parse(inline_svg(&run.stdout));
    let actions = picture.actions();
    assert_eq!(
        actions.get("kubernetes_job.workload").map(String::as_str),
        Some("delete"),
        "{actions:?}"
    );
    assert_eq!(
        actions.get(changed).map(String::as_str),
        Some("update"),
        "{actions:?}"
    );
    assert_eq!(actions.len(), 10, "{actions:?}");
    // Drawn with the dependencies the state records for it.
    assert!(picture
        .edges
        .contains(&"kubernetes_job.workload -> gke_cluster.batch".to_string()));
}

#[test]
fn plan_options_need_the_html_format() {
    let work = with_stacks();
    let run = work.run(&[
        "graph",
        "-s",
        "stacks/gke-batch-ml",
        "--format",
        "svg",
        "--plan",
        "x.plan",
    ]);
    run.failure();
    assert!(run.stderr.contains("--format html"), "{}", run.stderr);
}
