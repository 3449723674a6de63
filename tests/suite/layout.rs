//! The shape of the code, held: no function in `src/`, `providers/src/` or
//! `sandbox/src/` is over 150 lines (outside test modules), so each step of the engine,
//! of a kind and of an emulator reads as one short function; the apply's operations live
//! one per file under `src/engine/apply/`; the sandbox's modules import no layer above
//! their own and no two groups of them import each other; and `sandbox/README.md` maps
//! every kind to its provider file, its emulator and its tests, with paths that exist.

use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// The most lines a function may span, from its `fn` line to its closing brace.
const MOST_LINES: usize = 150;

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read the source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Functions longer than [`MOST_LINES`], as `file:line name (N lines)`.
struct Long<'a> {
    file: &'a str,
    found: Vec<String>,
}

impl Long<'_> {
    fn check(&mut self, name: &syn::Ident, span: proc_macro2::Span) {
        let lines = span.end().line - span.start().line + 1;
        if lines > MOST_LINES {
            self.found.push(format!(
                "{}:{} {name} ({lines} lines)",
                self.file,
                span.start().line
            ));
        }
    }
}

/// Whether an item is test code: `#[test]`, or under a `cfg` that names `test`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || matches!(&a.meta, syn::Meta::List(l) if l.path.is_ident("cfg") && l.tokens.to_string().contains("test"))
    })
}

impl<'ast> Visit<'ast> for Long<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.check(&f.sig.ident, f.span());
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.check(&f.sig.ident, f.span());
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.default.is_some() {
            self.check(&f.sig.ident, f.span());
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

fn long_functions(text: &str, file: &str) -> Vec<String> {
    let parsed = syn::parse_file(text).unwrap_or_else(|e| panic!("{file} parses: {e}"));
    let mut long = Long {
        file,
        found: Vec::new(),
    };
    long.visit_file(&parsed);
    long.found
}

#[test]
fn no_function_is_over_150_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in ["src", "providers/src", "sandbox/src"] {
        for path in sources(&root.join(dir)) {
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let shown = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            found.extend(long_functions(&text, &shown));
        }
    }
    assert!(
        found.is_empty(),
        "functions over {MOST_LINES} lines; split them where they have natural steps:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_length_check_can_fail() {
    let body = "    let x = 1;\n".repeat(MOST_LINES);
    let text = format!(
        "fn long() {{\n{body}}}\nfn short() {{}}\n#[cfg(test)]\nmod tests {{\n    fn also_long() {{\n{body}    }}\n}}\n"
    );
    let found = long_functions(&text, "x.rs");
    assert_eq!(found, ["x.rs:1 long (152 lines)"]);
}

#[test]
fn each_apply_operation_has_its_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/apply");
    for op in ["create", "update", "delete"] {
        assert!(root.join(format!("{op}.rs")).exists(), "no {op}.rs");
    }
}

/// The rows of the kind map in `sandbox/README.md`: each row's code spans (the kind,
/// then paths).
fn kind_map(readme: &str) -> Vec<Vec<String>> {
    let section = readme
        .split("## Where each kind is emulated and tested")
        .nth(1)
        .expect("sandbox/README.md has the kind map");
    section
        .lines()
        .skip_while(|l| !l.starts_with("| kind"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            row.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[test]
fn every_kind_has_a_row_in_the_sandbox_map_and_its_paths_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("sandbox/README.md")).expect("the README");
    let rows = kind_map(&readme);
    let registry = terrain_providers::registry::builtin();
    let mut kinds: Vec<&str> = registry.names().collect();
    kinds.sort_unstable();
    let mut mapped: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.first().map(String::as_str))
        .collect();
    mapped.sort_unstable();
    assert_eq!(mapped, kinds, "one row per registered kind");
    for row in &rows {
        for path in &row[1..] {
            assert!(
                root.join(path).exists(),
                "{}: {path} does not exist",
                row[0]
            );
        }
        // The provider file is the kind's own.
        let provider = std::fs::read_to_string(root.join(&row[1])).expect("the provider file");
        assert!(
            provider.contains(&format!("const KIND: &'static str = \"{}\";", row[0])),
            "{} is not defined in {}",
            row[0],
            row[1]
        );
    }
}

/// The sandbox's modules (`aws/s3/objects`), each with the modules its non-test code
/// names through `crate::`, `super::` or `self::` paths (in `use` items and in code).
fn sandbox_imports(
    root: &Path,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = root.join("sandbox/src");
    let files = sources(&src);
    let module_of = |path: &Path| -> String {
        let rel = path.strip_prefix(&src).expect("under sandbox/src");
        let mut parts: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
            parts.pop();
        }
        parts.join("/")
    };
    let modules: std::collections::BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph = std::collections::BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let text = std::fs::read_to_string(file).expect("read a source file");
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut paths = Paths::default();
        paths.visit_file(&parsed);
        let mut named = std::collections::BTreeSet::new();
        for path in paths.found {
            let mut base: Vec<String> = if module.is_empty() {
                Vec::new()
            } else {
                module.split('/').map(str::to_string).collect()
            };
            let mut rest = path.as_slice();
            match rest.first().map(String::as_str) {
                Some("crate") => base.clear(),
                Some("self") => {}
                Some("super") => {
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
                _ => continue,
            }
            if rest.first().is_some_and(|s| s == "crate" || s == "self") {
                rest = &rest[1..];
            }
            let full: Vec<String> = base.into_iter().chain(rest.iter().cloned()).collect();
            // The longest prefix that is a module.
            if let Some(target) = (0..=full.len())
                .rev()
                .map(|n| full[..n].join("/"))
                .find(|m| modules.contains(m))
            {
                named.insert(target);
            }
        }
        graph.insert(module, named);
    }
    graph
}

/// Paths starting with `crate`, `super` or `self`, outside test code: `use` trees are
/// flattened (`crate::a::{b, c::d}` → `crate::a::b`, `crate::a::c::d`).
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl Paths {
    fn tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                full.push(n.ident.to_string());
                self.found.push(full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                full.push(r.ident.to_string());
                self.found.push(full);
            }
            syn::UseTree::Glob(_) => self.found.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_test(&u.attrs) {
            self.tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments
            .first()
            .is_some_and(|s| s == "crate" || s == "super" || s == "self")
        {
            self.found.push(segments);
        }
        syn::visit::visit_path(self, p);
    }
}

/// Whether `a` is `b` or one of them holds the other (a module and its own submodules
/// count as one).
fn related(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}/"))
    };
    within(a, b) || within(b, a)
}

/// Groups of modules that import each other, directly or through others (a module and
/// its own submodules counted as one): the strongly connected components of more than
/// one module.
fn import_groups(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<Vec<String>> {
    let reaches = |from: &str| -> std::collections::BTreeSet<String> {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if !related(&m, next) && seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: std::collections::BTreeMap<&String, std::collections::BTreeSet<String>> =
        graph.keys().map(|m| (m, reaches(m))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for (m, from) in &reach {
        let group: Vec<String> = from
            .iter()
            .filter(|other| *other != *m && reach.get(other).is_some_and(|r| r.contains(*m)))
            .cloned()
            .chain(std::iter::once((*m).clone()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if group.len() > 1 && !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups
}

/// The sandbox's layers, bottom first; a module may name only its own layer's and
/// those below.
const SANDBOX_LAYERS: &[&[&str]] = &[
    &["common", "http", "faults", "capacity"],
    &["k8s"],
    &["gcp", "aws"],
    &["persist", "server", ""],
];

fn layer_of(module: &str) -> usize {
    let top = module.split('/').next().unwrap_or_default();
    SANDBOX_LAYERS
        .iter()
        .position(|l| l.contains(&top))
        .unwrap_or_else(|| panic!("sandbox module {module:?} is in no layer of SANDBOX_LAYERS"))
}

#[test]
fn the_sandboxs_layers_point_one_way_and_no_modules_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = sandbox_imports(root);
    let groups = import_groups(&graph);
    assert!(
        groups.is_empty(),
        "sandbox modules that import each other (directly or through others):\n{}",
        groups
            .iter()
            .map(|g| g.join(" ↔ "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut upward = Vec::new();
    for (module, named) in &graph {
        for target in named {
            if !related(module, target) && layer_of(target) > layer_of(module) {
                upward.push(format!("{module} → {target}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "sandbox modules that import a layer above their own:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_import_group_check_can_fail() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut g: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            std::collections::BTreeMap::new();
        for (a, b) in pairs {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    let cycle = edges(&[
        ("aws/ec2", "aws/vpc"),
        ("aws/vpc", "aws/eks"),
        ("aws/eks", "aws/ec2"),
    ]);
    assert_eq!(
        import_groups(&cycle),
        vec![vec![
            "aws/ec2".to_string(),
            "aws/eks".to_string(),
            "aws/vpc".to_string()
        ]]
    );
    // A module and its own submodules are one.
    let nested = edges(&[("aws/s3", "aws/s3/objects"), ("aws/s3/objects", "aws/s3")]);
    assert!(import_groups(&nested).is_empty());
}
