//! The layout rules ARCHITECTURE.md states, checked from the sources: the model crate does no
//! I/O, etcronctl depends on the model alone, no crate's modules import each other in a circle,
//! and no product function grows past 80 lines (those still longer are listed, to be split).

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

/// The vocabulary has one name: `etcron_model`, never re-exported through the I/O crate.
#[test]
fn the_io_crate_does_not_re_export_the_model() {
    let mut files = Vec::new();
    sources(&root().join("common/src"), &mut files);
    for file in files {
        let code: String = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!code.contains("pub use etcron_model"), "{} re-exports the model", file.display());
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

/// The worker's folders and top-level files, bottom-up (as `worker/src/lib.rs` lists them), each
/// with what it may import: a task knows nothing of claims or the fire path, the context nothing
/// of the phases, the fire path nothing of the ledger or the scheduler.
const WORKER_LAYERS: &[(&str, &[&str])] = &[
    ("timing", &[]),
    ("metrics", &[]),
    ("failpoint", &[]),
    ("tasks", &["metrics"]),
    ("cluster", &["metrics"]),
    ("rules", &["timing", "metrics"]),
    ("notify", &["tasks", "timing", "rules", "metrics"]),
    ("config", &["tasks", "cluster", "notify"]),
    ("context", &["timing", "metrics", "tasks", "cluster", "notify", "config"]),
    ("fire", &["timing", "metrics", "failpoint", "tasks", "cluster", "rules", "notify", "config", "context"]),
    ("ledger", &["timing", "metrics", "failpoint", "tasks", "cluster", "rules", "notify", "config", "context", "fire"]),
    ("metrics_server", &["metrics", "notify", "context"]),
    ("scheduler", &["timing", "metrics", "cluster", "config", "context", "fire", "ledger"]),
];

/// The master's folders and top-level files, bottom-up, each with what it may import: a duty
/// (compaction, etcd's size, pause expiry) names no route and no layer; the layers name no route.
const MASTER_LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("metrics", &[]),
    ("openapi", &[]),
    ("duties", &[]),
    ("access", &["error"]),
    ("job_index", &["access"]),
    ("query", &["error"]),
    ("web", &["error"]),
    ("team_policy", &["error", "metrics"]),
    ("change_limits", &["error", "metrics"]),
    ("job_store", &["access", "change_limits", "error", "metrics", "team_policy"]),
    ("layers", &["access", "error", "job_store", "metrics", "openapi"]),
    ("backend", &["change_limits", "duties", "job_index", "job_store", "layers", "team_policy"]),
    (
        "api",
        &[
            "access",
            "backend",
            "duties",
            "error",
            "job_index",
            "job_store",
            "layers",
            "metrics",
            "openapi",
            "query",
            "web",
        ],
    ),
    ("config", &["api", "change_limits", "duties", "layers", "team_policy"]),
];

/// Every top-level module of `krate` imports only what `layers` allows it; `lib` and `main` (the
/// entry points) and `top` may name anything, and a module with no rule fails.
fn assert_layers(krate: &str, layers: &[(&str, &[&str])], top: &[&str]) {
    let graph = module_graph(&root().join(krate).join("src"));
    for (module, uses) in &graph {
        if ["lib", "main"].contains(&module.as_str()) || top.contains(&module.as_str()) {
            continue;
        }
        let Some((_, allowed)) = layers.iter().find(|(name, _)| name == module) else {
            panic!("{krate}/src/{module}: a folder or file with no rule in its crate's layer table");
        };
        let above: Vec<&String> = uses.iter().filter(|m| !allowed.contains(&m.as_str())).collect();
        assert!(above.is_empty(), "{krate}/src/{module} imports {above:?}; it may import only {allowed:?}");
    }
}

#[test]
fn the_workers_folders_import_only_what_lies_below_them() {
    // The wiring (a node, and the nodes of remote executors) may name everything.
    assert_layers("worker", WORKER_LAYERS, &["node", "executor"]);
}

#[test]
fn the_masters_folders_import_only_what_lies_below_them() {
    assert_layers("master", MASTER_LAYERS, &[]);
}

/// Most lines a product function may span, signature to closing brace.
const FUNCTION_MAX_LINES: usize = 80;

/// Functions over [`FUNCTION_MAX_LINES`] still to be split (issue 35). The list is empty now and
/// only ever shrinks: a function here that fits fails the test until it is taken off, and any
/// other function over the limit fails it at once.
const TOO_LONG_STILL: &[&str] = &[];

/// The functions of one source file with the lines each spans, unit-test modules left out: a
/// function runs from its `fn` line to the first `}` at the same indentation.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let signature = ["pub(crate) ", "pub(super) ", "pub ", "async ", "const ", "unsafe "]
            .iter()
            .fold(trimmed, |rest, prefix| rest.strip_prefix(prefix).unwrap_or(rest));
        let signature = ["async ", "const ", "unsafe "]
            .iter()
            .fold(signature, |rest, prefix| rest.strip_prefix(prefix).unwrap_or(rest));
        let Some(after) = signature.strip_prefix("fn ") else { continue };
        let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // A declaration without a body (in a trait) ends with `;` before any `{`.
        let Some(open) = lines[i..].iter().position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'))
        else {
            continue;
        };
        if lines[i + open].trim_end().ends_with(';') {
            continue;
        }
        let close = lines[i + open + 1..].iter().position(|l| {
            let t = l.trim_start();
            l.len() - t.len() == indent && t.starts_with('}')
        });
        if let Some(close) = close {
            out.push((name, open + close + 2));
        }
    }
    out
}

#[test]
fn no_product_function_is_longer_than_the_limit() {
    let mut too_long = BTreeMap::new();
    for dir in ["model/src", "common/src", "master/src", "worker/src", "ctl/src", "sim/src", "tests/src"] {
        let mut files = Vec::new();
        sources(&root().join(dir), &mut files);
        for file in files {
            let rel = file.strip_prefix(root()).unwrap().display().to_string();
            for (name, lines) in function_lengths(&std::fs::read_to_string(&file).unwrap()) {
                if lines > FUNCTION_MAX_LINES {
                    too_long.insert(format!("{rel}::{name}"), lines);
                }
            }
        }
    }
    let new: Vec<_> = too_long.iter().filter(|(f, _)| !TOO_LONG_STILL.contains(&f.as_str())).collect();
    assert!(new.is_empty(), "functions over {FUNCTION_MAX_LINES} lines: {new:?}; split them");
    let fit: Vec<_> = TOO_LONG_STILL.iter().filter(|f| !too_long.contains_key(**f)).collect();
    assert!(fit.is_empty(), "{fit:?} fit in {FUNCTION_MAX_LINES} lines now: take them off TOO_LONG_STILL");
    // The count sees a long function.
    let long = format!("fn long() {{\n{}}}\n", "    x();\n".repeat(FUNCTION_MAX_LINES));
    assert_eq!(function_lengths(&long), vec![("long".to_owned(), FUNCTION_MAX_LINES + 2)]);
}
