//! The shape of the code, held: no function in `src/` or `providers/src/` is over 150
//! lines (outside test modules), so each step of the engine and of a kind reads as one
//! short function; the apply's operations live one per file under
//! `src/engine/apply/`; and `sandbox/README.md` maps every kind to its provider file,
//! its emulator and its tests, with paths that exist.

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
    for dir in ["src", "providers/src"] {
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
