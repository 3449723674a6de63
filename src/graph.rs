//! The dependency graph between resources: cycle detection (naming every address on a
//! cycle), a stable topological order, target selection and DOT output.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::graphmap::DiGraphMap;

use crate::addr::Address;

/// Dependencies by address: `a -> [b, c]` means a needs b and c first.
pub type Deps = BTreeMap<Address, Vec<Address>>;

/// Every dependency cycle, each as the addresses along it (starting from the smallest).
pub fn cycles(deps: &Deps) -> Vec<Vec<Address>> {
    let index: BTreeMap<&Address, usize> = deps.keys().enumerate().map(|(i, a)| (a, i)).collect();
    let addrs: Vec<&Address> = deps.keys().collect();
    let mut g: DiGraphMap<usize, ()> = DiGraphMap::new();
    for (a, ds) in deps {
        g.add_node(index[a]);
        for d in ds {
            if let Some(&j) = index.get(d) {
                g.add_edge(index[a], j, ());
            }
        }
    }
    let mut out = Vec::new();
    for scc in petgraph::algo::tarjan_scc(&g) {
        let is_cycle = scc.len() > 1 || g.contains_edge(scc[0], scc[0]);
        if !is_cycle {
            continue;
        }
        let members: BTreeSet<usize> = scc.iter().copied().collect();
        let start = *members.iter().next().unwrap_or(&scc[0]);
        let mut path = cycle_path(&g, start, &members);
        // Name every address of the strongly connected set, even those off this path.
        for m in &members {
            if !path.contains(m) {
                path.push(*m);
            }
        }
        out.push(path.into_iter().map(|i| addrs[i].clone()).collect());
    }
    out.sort();
    out
}

/// A path from `start` back to `start` inside `members` (depth first, smallest first).
fn cycle_path(g: &DiGraphMap<usize, ()>, start: usize, members: &BTreeSet<usize>) -> Vec<usize> {
    fn dfs(
        g: &DiGraphMap<usize, ()>,
        at: usize,
        start: usize,
        members: &BTreeSet<usize>,
        seen: &mut BTreeSet<usize>,
        path: &mut Vec<usize>,
    ) -> bool {
        path.push(at);
        let mut next: Vec<usize> = g.neighbors(at).filter(|n| members.contains(n)).collect();
        next.sort_unstable();
        for n in next {
            if n == start {
                return true;
            }
            if seen.insert(n) && dfs(g, n, start, members, seen, path) {
                return true;
            }
        }
        path.pop();
        false
    }
    let mut path = Vec::new();
    let mut seen = BTreeSet::from([start]);
    if dfs(g, start, start, members, &mut seen, &mut path) {
        path
    } else {
        vec![start]
    }
}

/// Addresses in dependency order (dependencies first), ties broken by address so the
/// order is the same on every run. Assumes no cycles (checked at load).
pub fn topo_order(deps: &Deps) -> Vec<Address> {
    let mut remaining: BTreeMap<&Address, usize> = deps
        .iter()
        .map(|(a, ds)| {
            (
                a,
                ds.iter()
                    .filter(|d| deps.contains_key(*d) && *d != a)
                    .count(),
            )
        })
        .collect();
    let mut dependents: BTreeMap<&Address, Vec<&Address>> = BTreeMap::new();
    for (a, ds) in deps {
        for d in ds.iter().filter(|d| deps.contains_key(*d) && *d != a) {
            dependents.entry(d).or_default().push(a);
        }
    }
    let mut ready: BTreeSet<&Address> = remaining
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(a, _)| *a)
        .collect();
    let mut out = Vec::with_capacity(deps.len());
    while let Some(a) = ready.pop_first() {
        out.push(a.clone());
        for d in dependents.get(a).map(Vec::as_slice).unwrap_or_default() {
            if let Some(n) = remaining.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    ready.insert(d);
                }
            }
        }
    }
    out
}

/// The addresses `targets` need: themselves and, transitively, what they depend on.
pub fn with_dependencies(deps: &Deps, targets: &[Address]) -> BTreeSet<Address> {
    closure(targets, |a| deps.get(a).cloned().unwrap_or_default())
}

/// The addresses that must go when `targets` go: themselves and, transitively, what
/// depends on them.
pub fn with_dependents(deps: &Deps, targets: &[Address]) -> BTreeSet<Address> {
    let mut rev: BTreeMap<&Address, Vec<Address>> = BTreeMap::new();
    for (a, ds) in deps {
        for d in ds {
            rev.entry(d).or_default().push(a.clone());
        }
    }
    closure(targets, |a| rev.get(a).cloned().unwrap_or_default())
}

fn closure(start: &[Address], next: impl Fn(&Address) -> Vec<Address>) -> BTreeSet<Address> {
    let mut seen: BTreeSet<Address> = BTreeSet::new();
    let mut stack: Vec<Address> = start.to_vec();
    while let Some(a) = stack.pop() {
        if seen.insert(a.clone()) {
            stack.extend(next(&a));
        }
    }
    seen
}

/// The graph in Graphviz DOT, edges pointing from a resource to what it depends on;
/// the resources of each module call (instance) are drawn together in a cluster
/// labelled with the call.
pub fn to_dot(name: &str, deps: &Deps) -> String {
    let mut s = format!(
        "digraph {} {{\n  rankdir = \"RL\";\n  node [shape = box];\n",
        dot_id(name)
    );
    let mut by_module: BTreeMap<String, Vec<&Address>> = BTreeMap::new();
    for a in deps.keys() {
        let module = a
            .module()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(".");
        by_module.entry(module).or_default().push(a);
    }
    for (i, (module, addrs)) in by_module.iter().enumerate() {
        let indent = if module.is_empty() {
            "  "
        } else {
            s.push_str(&format!(
                "  subgraph cluster_{i} {{\n    label = {};\n",
                dot_id(module)
            ));
            "    "
        };
        for a in addrs {
            s.push_str(&format!("{indent}{};\n", dot_id(&a.to_string())));
        }
        if !module.is_empty() {
            s.push_str("  }\n");
        }
    }
    for (a, ds) in deps {
        for d in ds {
            s.push_str(&format!(
                "  {} -> {};\n",
                dot_id(&a.to_string()),
                dot_id(&d.to_string())
            ));
        }
    }
    s.push_str("}\n");
    s
}

/// A DOT quoted ID: instance keys hold quotes, which must be escaped.
fn dot_id(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_quotes_instance_keys_and_clusters_modules() {
        let mut deps = Deps::new();
        deps.insert(
            a("module.m[\"x\"].local_file.b"),
            vec![a("local_file.c[0]")],
        );
        deps.insert(a("local_file.c[0]"), vec![]);
        let dot = to_dot("s", &deps);
        assert!(dot.contains("  subgraph cluster_1 {\n    label = \"module.m[\\\"x\\\"]\";\n    \"module.m[\\\"x\\\"].local_file.b\";\n  }\n"), "{dot}");
        assert!(
            dot.contains("  \"module.m[\\\"x\\\"].local_file.b\" -> \"local_file.c[0]\";\n"),
            "{dot}"
        );
    }

    fn a(s: &str) -> Address {
        Address::parse(s).expect("valid address")
    }

    fn deps(edges: &[(&str, &[&str])]) -> Deps {
        edges
            .iter()
            .map(|(k, ds)| (a(k), ds.iter().map(|d| a(d)).collect()))
            .collect()
    }

    #[test]
    fn cycle_names_every_address_in_order() {
        let d = deps(&[
            ("t.a", &["t.b"]),
            ("t.b", &["t.c"]),
            ("t.c", &["t.a"]),
            ("t.d", &[]),
        ]);
        assert_eq!(cycles(&d), vec![vec![a("t.a"), a("t.b"), a("t.c")]]);
    }

    #[test]
    fn self_reference_is_a_cycle() {
        let d = deps(&[("t.a", &["t.a"])]);
        assert_eq!(cycles(&d), vec![vec![a("t.a")]]);
    }

    #[test]
    fn topo_order_is_dependencies_first_and_stable() {
        let d = deps(&[
            ("t.z", &[]),
            ("t.y", &["t.z"]),
            ("t.a", &["t.y"]),
            ("t.b", &[]),
        ]);
        assert_eq!(topo_order(&d), vec![a("t.b"), a("t.z"), a("t.y"), a("t.a")]);
    }

    #[test]
    fn targets_pull_in_dependencies_or_dependents() {
        let d = deps(&[
            ("t.a", &[]),
            ("t.b", &["t.a"]),
            ("t.c", &["t.b"]),
            ("t.x", &[]),
        ]);
        assert_eq!(
            with_dependencies(&d, &[a("t.b")]),
            BTreeSet::from([a("t.a"), a("t.b")])
        );
        assert_eq!(
            with_dependents(&d, &[a("t.b")]),
            BTreeSet::from([a("t.b"), a("t.c")])
        );
    }
}
