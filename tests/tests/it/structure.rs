//! The layout rules ARCHITECTURE.md states, checked from the sources: the model crate does no
//! I/O, etcronctl depends on the model alone, and no crate's modules import each other in a
//! circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The names under `[dependencies]` of a crate's manifest.
fn dependencies(krate: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
    let manifest: toml::Table = toml::from_str(&text).unwrap();
    manifest.get("dependencies").and_then(|d| d.as_table()).map(|d| d.keys().cloned().collect()).unwrap_or_default()
}

#[test]
fn the_model_does_no_io_and_etcronctl_depends_on_the_model_alone() {
    let model = dependencies("model");
    for io in ["etcd-client", "mongodb", "prometheus", "clap", "tokio", "axum", "reqwest", "etcron-common"] {
        assert!(!model.contains(io), "etcron-model depends on {io}");
    }
    let ctl = dependencies("ctl");
    assert!(ctl.contains("etcron-model"));
    for server in ["etcron-common", "etcron-master", "etcron-worker", "etcd-client", "mongodb", "prometheus", "axum"] {
        assert!(!ctl.contains(server), "etcron-ctl depends on {server}");
    }
    for krate in ["master", "worker"] {
        assert!(!dependencies(krate).contains("clap_complete"), "{krate} links etcronctl's completion crate");
    }
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// For each top-level module of a crate (`src/<m>.rs` or `src/<m>/…`), the other top-level
/// modules its code names as `crate::<m>`, comments and unit-test modules left out.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        if first == "bin" {
            continue;
        }
        let module = first.trim_end_matches(".rs").to_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let named = uses.entry(module.clone()).or_default();
        for part in code.split("crate::").skip(1) {
            let name: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if name != module {
                named.insert(name);
            }
        }
    }
    let modules: BTreeSet<String> = uses.keys().cloned().collect();
    uses.values_mut().for_each(|named| named.retain(|m| modules.contains(m)));
    uses
}

/// A cycle in `graph`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in &graph[node] {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_a_circle_of_modules() {
    for krate in ["model", "common", "master", "worker", "ctl", "tests"] {
        let graph = module_graph(&root().join(krate).join("src"));
        assert!(graph.len() > 3, "{krate}: {graph:?}");
        assert_eq!(cycle(&graph), None, "{krate}: modules that import each other in a circle");
    }
    // The check finds a circle when there is one.
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert("a".into(), ["b".into()].into());
    graph.insert("b".into(), ["c".into()].into());
    graph.insert("c".into(), ["a".into()].into());
    assert_eq!(cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}
