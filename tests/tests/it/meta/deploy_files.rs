//! Every deployment file under `deploy/` is checked against the code it deploys, so that a typo
//! or a drift fails here rather than at 3 a.m. on a production host:
//!
//! - every `*.toml` is loaded by the real config loader of the binary it configures
//!   (`master*.toml` → `etcron_master::config`, `worker*.toml` → `etcron_worker::config`):
//!   unknown keys are refused (`deny_unknown_fields`) and every value is validated by
//!   `Config::resolve`, exactly as the binary does at start-up;
//! - every `*.yaml|*.yml` parses (all documents); Kubernetes manifests, the compose stack,
//!   nginx.conf, the Dockerfile and the systemd units are checked for the mistakes that would
//!   only show once deployed (see each test). Each etcron container / service is resolved with
//!   its own command line, mounted config file and environment through the binaries' own
//!   `Cli` + `Config::resolve`, with every `ETCRON_*` variable checked against the settings the
//!   binaries really read.
//!
//! Nothing here needs Docker, Kubernetes, nginx or systemd running; `systemd-analyze verify`
//! is used when it is installed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_norway::Value as Yaml;

// ---------------------------------------------------------------------------------------------
// The repository

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn deploy() -> PathBuf {
    root().join("deploy")
}

/// `path` relative to the repository root, for messages.
fn rel(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", rel(path)))
}

/// Files under `dir` (recursively) whose name ends with one of `suffixes`, sorted.
fn files_under(dir: &Path, suffixes: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if suffixes.iter().any(|s| path.file_name().unwrap().to_string_lossy().ends_with(s)) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Collected problems of one test; reported all at once.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, what: impl Into<String>) {
        self.0.push(what.into());
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    fn assert_none(self, test: &str) {
        assert!(self.0.is_empty(), "{test}: {} problem(s):\n  - {}", self.0.len(), self.0.join("\n  - "));
    }
}

/// Binaries the workspace builds, with their package: `src/main.rs` (named after the package),
/// `src/bin/*.rs`, `src/bin/*/main.rs` and `[[bin]]` entries of each workspace member.
fn workspace_binaries() -> BTreeMap<String, String> {
    let workspace: toml::Table = toml::from_str(&read(&root().join("Cargo.toml"))).unwrap();
    let members = workspace["workspace"]["members"].as_array().unwrap();
    let mut bins = BTreeMap::new();
    for member in members {
        let dir = root().join(member.as_str().unwrap());
        let manifest: toml::Table = toml::from_str(&read(&dir.join("Cargo.toml"))).unwrap();
        let package = manifest["package"]["name"].as_str().unwrap().to_owned();
        let named_main = manifest
            .get("bin")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .any(|b| b.get("path").and_then(toml::Value::as_str) == Some("src/main.rs"));
        if dir.join("src/main.rs").is_file() && !named_main {
            bins.insert(package.clone(), package.clone());
        }
        if let Ok(entries) = std::fs::read_dir(dir.join("src/bin")) {
            for entry in entries {
                let path = entry.unwrap().path();
                let name = if path.is_dir() && path.join("main.rs").is_file() {
                    path.file_name().unwrap().to_string_lossy().into_owned()
                } else if path.extension().is_some_and(|e| e == "rs") {
                    path.file_stem().unwrap().to_string_lossy().into_owned()
                } else {
                    continue;
                };
                bins.insert(name, package.clone());
            }
        }
        for bin in manifest.get("bin").and_then(toml::Value::as_array).into_iter().flatten() {
            if let Some(name) = bin.get("name").and_then(toml::Value::as_str) {
                bins.insert(name.to_owned(), package.clone());
            }
        }
    }
    bins
}

// ---------------------------------------------------------------------------------------------
// The two binaries and their configuration

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bin {
    Master,
    Worker,
}

enum Resolved {
    Master(Box<etcron_master::config::Config>),
    Worker(Box<etcron_worker::config::Config>),
}

impl Bin {
    fn name(self) -> &'static str {
        match self {
            Bin::Master => "etcron-master",
            Bin::Worker => "etcron-worker",
        }
    }

    /// Which binary a config file configures, by its name: `master*.toml` / `worker*.toml`.
    fn for_config(file_name: &str) -> Option<Bin> {
        if !file_name.ends_with(".toml") {
            None
        } else if file_name.starts_with("master") {
            Some(Bin::Master)
        } else if file_name.starts_with("worker") {
            Some(Bin::Worker)
        } else {
            None
        }
    }

    fn from_binary(binary: &str) -> Option<Bin> {
        let base = binary.rsplit('/').next().unwrap_or(binary);
        [Bin::Master, Bin::Worker].into_iter().find(|b| b.name() == base)
    }

    /// The `ETCRON_*` variables this binary reads, from the source text: every
    /// `env = "ETCRON_…"` attribute and `env::var("ETCRON_…")` call in its crate's modules (not
    /// `src/bin/`, the other binaries) and in `common`, plus `ETCRON_CONFIG` (and the master's
    /// `ETCRON_API_TOKEN`).
    fn env_names(self) -> BTreeSet<String> {
        let mut names = BTreeSet::from(["ETCRON_CONFIG".to_owned()]);
        if self == Bin::Master {
            names.insert("ETCRON_API_TOKEN".to_owned());
        }
        names.extend(self.scan_sources(&["env = \"ETCRON_", "env::var(\"ETCRON_"]));
        names
    }

    /// The variables read straight from the environment (`env::var`), not through a flag.
    fn direct_env_reads(self) -> BTreeSet<String> {
        self.scan_sources(&["env::var(\"ETCRON_"])
    }

    fn scan_sources(self, markers: &[&str]) -> BTreeSet<String> {
        let own = match self {
            Bin::Master => "master/src",
            Bin::Worker => "worker/src",
        };
        let mut names = BTreeSet::new();
        for dir in [own, "common/src"] {
            let mut files = Vec::new();
            rust_files(&root().join(dir), &mut files);
            files.sort();
            for file in files {
                let text = read(&file);
                for marker in markers {
                    for (at, _) in text.match_indices(marker) {
                        let start = at + marker.len() - "ETCRON_".len();
                        let name: String = text[start..]
                            .chars()
                            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                            .collect();
                        names.insert(name);
                    }
                }
            }
        }
        names
    }

    fn command(self) -> clap::Command {
        use clap::CommandFactory;
        match self {
            Bin::Master => etcron_master::config::Cli::command(),
            Bin::Worker => etcron_worker::config::Cli::command(),
        }
    }

    /// Resolves the configuration as the binary would when started with `argv` (`argv[0]` is
    /// the binary) and exactly the environment `env`: through its own `Cli` and
    /// `Config::resolve`. Each `ETCRON_*` variable is handed over as the flag that reads it
    /// (found in the `Cli` itself; flag > env as in the binary), and this process's own
    /// environment is not consulted, so the result does not depend on who runs the test.
    fn resolve(self, argv: &[String], env: &[(String, String)]) -> Result<Resolved, String> {
        let known = self.env_names();
        let direct = self.direct_env_reads();
        let mut cmd = self.command();
        let mut by_env = BTreeMap::new();
        for arg in cmd.get_arguments() {
            if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) {
                by_env.insert(env.to_string_lossy().into_owned(), (long.to_owned(), arg.get_action().takes_values()));
            }
        }
        cmd = cmd.mut_args(|a| a.env(None::<&'static str>));
        let mut full = argv.to_vec();
        for (name, value) in env {
            if !name.starts_with("ETCRON_") {
                continue;
            }
            if !known.contains(name) {
                return Err(format!("{name} is not a setting of {}", self.name()));
            }
            let Some((long, takes_value)) = by_env.get(name) else {
                if direct.contains(name) {
                    continue; // read straight from the environment (ETCRON_ETCD_PASSWORD)
                }
                return Err(format!("{name} is read by no flag of {}", self.name()));
            };
            let flag = format!("--{long}");
            if argv.iter().any(|a| *a == flag || a.starts_with(&format!("{flag}="))) {
                continue; // the flag wins
            }
            if *takes_value {
                full.push(format!("{flag}={value}"));
            } else if !matches!(value.to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "n" | "f" | "off") {
                full.push(flag);
            }
        }
        let matches = cmd.try_get_matches_from(&full).map_err(|e| format!("{}: {e}", full.join(" ")))?;
        let fmt = |e: anyhow::Error| format!("{e:#}");
        match self {
            Bin::Master => {
                let cli = <etcron_master::config::Cli as clap::FromArgMatches>::from_arg_matches(&matches)
                    .map_err(|e| e.to_string())?;
                etcron_master::config::Config::resolve(cli).map(|c| Resolved::Master(Box::new(c))).map_err(fmt)
            }
            Bin::Worker => {
                let cli = <etcron_worker::config::Cli as clap::FromArgMatches>::from_arg_matches(&matches)
                    .map_err(|e| e.to_string())?;
                etcron_worker::config::Config::resolve(cli).map(|c| Resolved::Worker(Box::new(c))).map_err(fmt)
            }
        }
    }

    /// Only parses the file, with the binary's `FileConfig` (refuses unknown keys).
    fn load_file(self, path: &Path) -> Result<(), String> {
        match self {
            Bin::Master => etcron_master::config::FileConfig::load(path).map(drop),
            Bin::Worker => etcron_worker::config::FileConfig::load(path).map(drop),
        }
        .map_err(|e| format!("{e:#}"))
    }
}

/// The value a setting that is not (yet) a field of `Config` gets, read the way the binary
/// reads it: flag, then env, then the config file's key.
fn raw_setting(argv: &[String], env: &[(String, String)], config: Option<&Path>, key: &str) -> Option<String> {
    let flag = format!("--{}", key.replace('_', "-"));
    for (i, a) in argv.iter().enumerate() {
        if let Some(v) = a.strip_prefix(&format!("{flag}=")) {
            return Some(v.to_owned());
        }
        if *a == flag {
            return argv.get(i + 1).cloned();
        }
    }
    let env_name = format!("ETCRON_{}", key.to_ascii_uppercase());
    if let Some((_, v)) = env.iter().find(|(k, _)| *k == env_name) {
        return Some(v.clone());
    }
    let table: toml::Table = toml::from_str(&std::fs::read_to_string(config?).ok()?).ok()?;
    table.get(key).and_then(toml::Value::as_str).map(str::to_owned)
}

/// The config file named on a command line (`--config F` / `--config=F`) or by `ETCRON_CONFIG`.
fn config_arg(argv: &[String], env: &[(String, String)]) -> Option<String> {
    raw_setting(argv, env, None, "config")
}

/// Host and port of `host:port`, `scheme://host:port/...` or `scheme://user@host:port`.
fn host_port(addr: &str) -> (String, Option<u16>) {
    let rest = addr.split_once("://").map_or(addr, |(_, r)| r);
    let rest = rest.split(['/', '?']).next().unwrap_or(rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    match rest.rsplit_once(':') {
        Some((h, p)) => (h.to_owned(), p.parse().ok()),
        None => (rest.to_owned(), None),
    }
}

/// The hosts of a MongoDB URI (`mongodb://a:1,b:2/db?...`).
fn mongodb_hosts(uri: &str) -> Vec<String> {
    let rest = uri.split_once("://").map_or(uri, |(_, r)| r);
    let rest = rest.split(['/', '?']).next().unwrap_or(rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(',').map(|h| host_port(h).0).collect()
}

/// Shortest stop timeout a worker needs: its drain, the kill grace, and 5 s to exit and flush.
fn drain_time(w: &etcron_worker::config::Config) -> Duration {
    w.shutdown_grace + w.kill_grace + Duration::from_secs(5)
}

// ---------------------------------------------------------------------------------------------
// YAML

/// All documents of a YAML file (empty documents left out), with `<<` merge keys applied.
fn yaml_docs(path: &Path) -> Result<Vec<Yaml>, String> {
    use serde::Deserialize;
    let text = read(path);
    let mut docs = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let mut value = Yaml::deserialize(doc).map_err(|e| format!("{}: {e}", rel(path)))?;
        // A merged mapping may itself merge another (`<<: *worker` where `worker` has
        // `<<: *etcron`): apply until none is left.
        for _ in 0..8 {
            value.apply_merge().map_err(|e| format!("{}: {e}", rel(path)))?;
        }
        if !value.is_null() {
            docs.push(value);
        }
    }
    if docs.is_empty() {
        return Err(format!("{}: no YAML document", rel(path)));
    }
    Ok(docs)
}

fn ystr<'a>(v: &'a Yaml, path: &[&str]) -> Option<&'a str> {
    yget(v, path).and_then(Yaml::as_str)
}

fn yget<'a>(v: &'a Yaml, path: &[&str]) -> Option<&'a Yaml> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn yseq<'a>(v: &'a Yaml, path: &[&str]) -> Vec<&'a Yaml> {
    yget(v, path).and_then(Yaml::as_sequence).map(|s| s.iter().collect()).unwrap_or_default()
}

/// A scalar as text (compose and Kubernetes take numbers and booleans where strings are meant).
fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn string_map(v: Option<&Yaml>) -> BTreeMap<String, String> {
    v.and_then(Yaml::as_mapping)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.as_str()?.to_owned(), scalar(v)?))).collect())
        .unwrap_or_default()
}

fn string_list(v: Option<&Yaml>) -> Vec<String> {
    match v {
        Some(Yaml::Sequence(s)) => s.iter().filter_map(scalar).collect(),
        Some(Yaml::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn every_yaml_file_under_deploy_parses() {
    let files = files_under(&deploy(), &[".yaml", ".yml"]);
    assert!(files.len() >= 8, "expected the compose and k8s files, found {files:?}");
    let mut problems = Problems::default();
    for file in &files {
        if let Err(e) = yaml_docs(file) {
            problems.add(e);
        }
    }
    problems.assert_none("YAML files");
}

// ---------------------------------------------------------------------------------------------
// TOML: every file with the loader of its binary

#[test]
fn every_toml_file_under_deploy_is_loaded_by_the_binary_it_configures() {
    let files = files_under(&deploy(), &[".toml"]);
    let mut problems = Problems::default();
    let mut seen = BTreeSet::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let Some(bin) = Bin::for_config(&name) else {
            problems.add(format!(
                "{}: configures neither binary (name it master*.toml or worker*.toml so this test \
                 knows which loader to check it with)",
                rel(file)
            ));
            continue;
        };
        seen.insert(bin.name());
        if let Err(e) = bin.load_file(file) {
            problems.add(format!("{}: {} refuses it: {e}", rel(file), bin.name()));
            continue;
        }
        // The API token is a secret that deployments give through the environment (the
        // compose and Kubernetes tests resolve each file with its service's own environment).
        let env = match bin {
            Bin::Master => vec![("ETCRON_API_TOKEN".to_owned(), "deploy-files-test-token".to_owned())],
            Bin::Worker => Vec::new(),
        };
        let argv = vec![bin.name().to_owned(), "--config".to_owned(), file.display().to_string()];
        if let Err(e) = bin.resolve(&argv, &env) {
            problems.add(format!("{}: {} would not start: {e}", rel(file), bin.name()));
        }
    }
    problems.check(seen.len() == 2, || format!("expected master and worker configs, found {seen:?} in {files:?}"));
    problems.assert_none("TOML files");
}

/// The loaders really refuse what the deployment files must not contain (so the test above
/// cannot pass by accident).
#[test]
fn the_loaders_refuse_unknown_keys_and_bad_values() {
    let dir = tempfile::tempdir().unwrap();
    for (bin, text, needle) in [
        (Bin::Master, "listn = \"0.0.0.0:8070\"\n", "listn"),
        (Bin::Worker, "shutdown_grce = \"30s\"\n", "shutdown_grce"),
        (Bin::Worker, "capacity = 0\n", "capacity"),
    ] {
        let path = dir.path().join(format!("{}.toml", bin.name()));
        std::fs::write(&path, text).unwrap();
        let argv = vec![bin.name().to_owned(), "--config".to_owned(), path.display().to_string()];
        let err = bin.resolve(&argv, &[]).err().unwrap_or_default();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
    let err = Bin::Worker.resolve(&["etcron-worker".to_owned()], &[("ETCRON_CAPACTY".into(), "3".into())]);
    assert!(err.err().unwrap_or_default().contains("ETCRON_CAPACTY"));
    // The scan of the source finds what clap really reads.
    for bin in [Bin::Master, Bin::Worker] {
        let names = bin.env_names();
        for arg in bin.command().get_arguments() {
            if let Some(env) = arg.get_env() {
                let env = env.to_string_lossy();
                assert!(names.contains(env.as_ref()), "{env} of {} missed by the source scan: {names:?}", bin.name());
            }
        }
        assert!(names.contains("ETCRON_ETCD_PASSWORD") && names.contains("ETCRON_MONGODB_URI"), "{names:?}");
    }
    assert!(Bin::Worker.env_names().contains("ETCRON_WORKER_ID"));
    assert!(!Bin::Master.env_names().contains("ETCRON_WORKER_ID"));
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

/// One container of a Deployment, resolved.
struct K8sContainer {
    deployment: String,
    bin: Bin,
    resolved: Resolved,
    ports: BTreeMap<String, u16>,
}

#[test]
fn kubernetes_manifests_are_complete_and_consistent() {
    let dir = deploy().join("k8s");
    let mut problems = Problems::default();
    let files: Vec<PathBuf> = files_under(&dir, &[".yaml", ".yml"]);
    let mut docs: Vec<(String, Yaml)> = Vec::new();
    let mut kustomization = None;
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        match yaml_docs(file) {
            Ok(d) if name == "kustomization.yaml" => kustomization = d.into_iter().next(),
            Ok(d) => docs.extend(d.into_iter().map(|d| (name.clone(), d))),
            Err(e) => problems.add(e),
        }
    }
    let kustomization = kustomization.expect("deploy/k8s/kustomization.yaml");

    // Every document is a complete object.
    for (file, doc) in &docs {
        for key in [&["apiVersion"][..], &["kind"], &["metadata", "name"]] {
            problems.check(ystr(doc, key).is_some_and(|s| !s.is_empty()), || {
                format!("k8s/{file}: a document without {}", key.join("."))
            });
        }
    }
    let find = |kind: &str, name: &str| {
        docs.iter().find(|(_, d)| ystr(d, &["kind"]) == Some(kind) && ystr(d, &["metadata", "name"]) == Some(name))
    };

    // The kustomization lists every manifest but the example secret.
    let listed: BTreeSet<String> = string_list(kustomization.get("resources")).into_iter().collect();
    let expected: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "kustomization.yaml" && n != "secret.example.yaml")
        .collect();
    problems.check(listed == expected, || format!("kustomization.yaml resources {listed:?}, files {expected:?}"));
    problems.check(files.iter().any(|f| f.ends_with("secret.example.yaml")), || "no k8s/secret.example.yaml".into());
    let namespace = ystr(&kustomization, &["namespace"]).unwrap_or_default().to_owned();
    problems.check(find("Namespace", &namespace).is_some(), || format!("no Namespace {namespace:?} manifest"));
    for (file, doc) in &docs {
        if let Some(ns) = ystr(doc, &["metadata", "namespace"]) {
            problems.check(ns == namespace, || format!("k8s/{file}: namespace {ns}, kustomization says {namespace}"));
        }
    }

    let images: BTreeSet<String> =
        yseq(&kustomization, &["images"]).into_iter().filter_map(|i| ystr(i, &["name"]).map(str::to_owned)).collect();

    // The ConfigMap's files, written out so the loaders can read them.
    let tmp = tempfile::tempdir().unwrap();
    let mut deployments = Vec::new();
    let mut containers: Vec<K8sContainer> = Vec::new();
    for (file, doc) in docs.iter().filter(|(_, d)| ystr(d, &["kind"]) == Some("Deployment")) {
        let name = ystr(doc, &["metadata", "name"]).unwrap_or_default().to_owned();
        let at = format!("k8s/{file}: Deployment {name}");
        deployments.push(name.clone());
        let pod = yget(doc, &["spec", "template", "spec"]).cloned().unwrap_or(Yaml::Null);
        let labels = string_map(yget(doc, &["spec", "template", "metadata", "labels"]));
        let selector = string_map(yget(doc, &["spec", "selector", "matchLabels"]));
        problems.check(!selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v)), || {
            format!("{at}: selector {selector:?} does not match the pod labels {labels:?}")
        });
        let volumes: BTreeMap<String, &Yaml> =
            yseq(&pod, &["volumes"]).into_iter().filter_map(|v| Some((ystr(v, &["name"])?.to_owned(), v))).collect();
        let pod_non_root = yget(&pod, &["securityContext", "runAsNonRoot"]).and_then(Yaml::as_bool) == Some(true);
        for c in yseq(&pod, &["containers"]) {
            let cname = ystr(c, &["name"]).unwrap_or("?");
            let at = format!("{at} container {cname}");
            let mut argv = string_list(c.get("command"));
            argv.extend(string_list(c.get("args")));
            let image = ystr(c, &["image"]).unwrap_or_default();
            problems.check(images.contains(image.split(':').next().unwrap_or_default()), || {
                format!("{at}: image {image:?} is not rewritten by the kustomization's images {images:?}")
            });
            let Some(bin) = argv.first().and_then(|b| Bin::from_binary(b)) else {
                problems.add(format!("{at}: command/args {argv:?} start neither etcron binary"));
                continue;
            };
            // Probes on the health routes, on a declared port.
            let ports: BTreeMap<String, u16> = yseq(c, &["ports"])
                .into_iter()
                .filter_map(|p| {
                    let port = u16::try_from(p.get("containerPort")?.as_u64()?).ok()?;
                    Some((ystr(p, &["name"]).map_or_else(|| port.to_string(), str::to_owned), port))
                })
                .collect();
            let mut probe_ports = BTreeSet::new();
            for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
                let got = ystr(c, &[probe, "httpGet", "path"]);
                problems.check(got == Some(path), || format!("{at}: {probe} is {got:?}, expected httpGet {path}"));
                let port = yget(c, &[probe, "httpGet", "port"]).and_then(scalar).unwrap_or_default();
                match ports.get(&port).copied().or_else(|| port.parse().ok().filter(|p| ports.values().any(|v| v == p)))
                {
                    Some(p) => {
                        probe_ports.insert(p);
                    }
                    None => problems.add(format!("{at}: {probe} port {port:?} is not a container port {ports:?}")),
                }
            }
            problems.check(probe_ports.len() == 1, || format!("{at}: probes on different ports {probe_ports:?}"));
            // Hardening.
            problems.check(
                pod_non_root || yget(c, &["securityContext", "runAsNonRoot"]).and_then(Yaml::as_bool) == Some(true),
                || format!("{at}: runAsNonRoot is not set"),
            );
            let read_only =
                yget(c, &["securityContext", "readOnlyRootFilesystem"]).and_then(Yaml::as_bool) == Some(true);
            problems.check(read_only, || format!("{at}: readOnlyRootFilesystem is not set"));
            problems.check(yget(c, &["resources", "requests"]).is_some(), || format!("{at}: no resource requests"));

            // Mounts: the ConfigMap's files become real files for the loader.
            let mut mounts: Vec<(String, bool)> = Vec::new();
            let mut files_at: BTreeMap<String, PathBuf> = BTreeMap::new();
            for m in yseq(c, &["volumeMounts"]) {
                let (Some(vname), Some(mount)) = (ystr(m, &["name"]), ystr(m, &["mountPath"])) else {
                    problems.add(format!("{at}: a volumeMount without name or mountPath"));
                    continue;
                };
                let Some(volume) = volumes.get(vname) else {
                    problems.add(format!("{at}: volumeMount {vname} names no volume of the pod"));
                    continue;
                };
                mounts.push((mount.to_owned(), m.get("readOnly").and_then(Yaml::as_bool) == Some(true)));
                if let Some(cm) = ystr(volume, &["configMap", "name"]) {
                    let Some((_, map)) = find("ConfigMap", cm) else {
                        problems.add(format!("{at}: volume {vname} names ConfigMap {cm}, which is not in k8s/"));
                        continue;
                    };
                    let data = string_map(map.get("data"));
                    let items: Vec<(String, String)> = match yget(volume, &["configMap", "items"]) {
                        Some(items) => yseq(items, &[])
                            .into_iter()
                            .filter_map(|i| Some((ystr(i, &["key"])?.to_owned(), ystr(i, &["path"])?.to_owned())))
                            .collect(),
                        None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
                    };
                    for (key, path) in items {
                        let Some(text) = data.get(&key) else {
                            problems.add(format!("{at}: ConfigMap {cm} has no key {key}"));
                            continue;
                        };
                        let host = tmp.path().join(format!("{name}-{cname}-{path}"));
                        std::fs::write(&host, text).unwrap();
                        files_at.insert(format!("{}/{path}", mount.trim_end_matches('/')), host);
                    }
                }
            }

            // The environment, as the kubelet builds it.
            let mut env: Vec<(String, String)> = Vec::new();
            let known = bin.env_names();
            for e in yseq(c, &["env"]) {
                let Some(ename) = ystr(e, &["name"]) else { continue };
                problems.check(!ename.starts_with("ETCRON_") || known.contains(ename), || {
                    format!("{at}: env {ename} is not a setting of {}", bin.name())
                });
                let value = if let Some(v) = e.get("value") {
                    let v = scalar(v).unwrap_or_default();
                    // $(VAR) refers to a variable defined before this one.
                    let mut out = String::new();
                    let mut rest = v.as_str();
                    while let Some(start) = rest.find("$(") {
                        out.push_str(&rest[..start]);
                        let Some(end) = rest[start..].find(')') else { break };
                        let var = &rest[start + 2..start + end];
                        match env.iter().find(|(k, _)| k == var) {
                            Some((_, val)) => out.push_str(val),
                            None => problems.add(format!("{at}: env {ename} uses $({var}), not defined before it")),
                        }
                        rest = &rest[start + end + 1..];
                    }
                    out.push_str(rest);
                    out
                } else if let Some(field) = ystr(e, &["valueFrom", "fieldRef", "fieldPath"]) {
                    match field {
                        "status.podIP" => "10.1.2.3".to_owned(),
                        "metadata.name" => format!("{name}-7d9f8b6c5d-x2x4z"),
                        "metadata.namespace" => namespace.clone(),
                        other => other.to_owned(),
                    }
                } else if let Some(secret) = yget(e, &["valueFrom", "secretKeyRef"]) {
                    let (sname, key) = (ystr(secret, &["name"]).unwrap_or(""), ystr(secret, &["key"]).unwrap_or(""));
                    let has = find("Secret", sname).is_some_and(|(_, s)| {
                        string_map(s.get("stringData")).contains_key(key) || string_map(s.get("data")).contains_key(key)
                    });
                    problems.check(has, || {
                        format!("{at}: env {ename} from Secret {sname} key {key}, which secret.example.yaml lacks")
                    });
                    "secret-from-kubernetes".to_owned()
                } else {
                    problems.add(format!("{at}: env {ename} has neither value nor a known valueFrom"));
                    continue;
                };
                env.push((ename.to_owned(), value));
            }

            // The binary's own view of it all.
            let argv: Vec<String> =
                argv.iter().map(|a| files_at.get(a).map_or_else(|| a.clone(), |p| p.display().to_string())).collect();
            let env: Vec<(String, String)> = env
                .into_iter()
                .map(|(k, v)| {
                    let v =
                        if k == "ETCRON_CONFIG" { files_at.get(&v).map_or(v, |p| p.display().to_string()) } else { v };
                    (k, v)
                })
                .collect();
            let config = config_arg(&argv, &env);
            problems.check(config.as_ref().is_some_and(|c| Path::new(c).starts_with(tmp.path())), || {
                format!("{at}: config file {config:?} is not one of the ConfigMap's mounted files {files_at:?}")
            });
            let resolved = match bin.resolve(&argv, &env) {
                Ok(r) => r,
                Err(e) => {
                    problems.add(format!("{at}: {} would not start: {e}", bin.name()));
                    continue;
                }
            };
            let probe_port = probe_ports.iter().next().copied();
            match &resolved {
                Resolved::Master(m) => {
                    problems.check(Some(m.listen.port()) == probe_port, || {
                        format!("{at}: master listens on {}, probes go to {probe_port:?}", m.listen)
                    });
                }
                Resolved::Worker(w) => {
                    let metrics = w.metrics_listen.map(|a| a.port());
                    problems.check(metrics.is_some() && metrics == probe_port, || {
                        format!("{at}: worker metrics_listen {metrics:?}, probes go to {probe_port:?}")
                    });
                    let grace = yget(&pod, &["terminationGracePeriodSeconds"]).and_then(Yaml::as_u64).unwrap_or(30);
                    problems.check(Duration::from_secs(grace) > drain_time(w), || {
                        format!(
                            "{at}: terminationGracePeriodSeconds {grace} is not above shutdown_grace {:?} + kill_grace {:?} + 5s",
                            w.shutdown_grace, w.kill_grace
                        )
                    });
                    let on_volume = mounts.iter().any(|(m, ro)| !ro && w.data_dir.starts_with(m));
                    problems.check(on_volume, || {
                        format!("{at}: data_dir {} is on no writable volume {mounts:?}", w.data_dir.display())
                    });
                    problems.check(mounts.iter().any(|(m, ro)| m == "/tmp" && !ro) || !read_only, || {
                        format!("{at}: tasks need a writable /tmp under readOnlyRootFilesystem")
                    });
                    problems.check(w.worker_id.starts_with(&name), || {
                        format!("{at}: worker id {} does not come from the pod name", w.worker_id)
                    });
                    let listen = raw_setting(&argv, &env, config.as_deref().map(Path::new), "output_listen");
                    let url = raw_setting(&argv, &env, config.as_deref().map(Path::new), "output_url");
                    problems.check(listen.is_some() && url.is_some(), || {
                        format!("{at}: output_listen {listen:?} / output_url {url:?} not both set")
                    });
                    if let (Some(listen), Some(url)) = (listen, url) {
                        let (host, port) = host_port(&url);
                        problems.check(host == "10.1.2.3" && port.is_some() && port == host_port(&listen).1, || {
                            format!("{at}: output_url {url} is not the pod IP and the port of output_listen {listen}")
                        });
                        problems.check(port.is_some_and(|p| ports.values().any(|v| *v == p)), || {
                            format!("{at}: output port of {url} is not a container port")
                        });
                    }
                }
            }
            containers.push(K8sContainer { deployment: name.clone(), bin, resolved, ports });
        }
        let replicas = yget(doc, &["spec", "replicas"]).and_then(Yaml::as_u64).unwrap_or(1);
        problems.check(replicas >= 2, || format!("{at}: {replicas} replica(s); at least 2 for availability"));
    }
    for bin in [Bin::Master, Bin::Worker] {
        problems.check(containers.iter().any(|c| c.bin == bin), || format!("no Deployment runs {}", bin.name()));
    }

    // Services and PodDisruptionBudgets select a Deployment's pods.
    let pods_of = |selector: &BTreeMap<String, String>| -> Vec<String> {
        docs.iter()
            .filter(|(_, d)| ystr(d, &["kind"]) == Some("Deployment"))
            .filter(|(_, d)| {
                let labels = string_map(yget(d, &["spec", "template", "metadata", "labels"]));
                !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .filter_map(|(_, d)| ystr(d, &["metadata", "name"]).map(str::to_owned))
            .collect()
    };
    for (file, doc) in docs.iter().filter(|(_, d)| ystr(d, &["kind"]) == Some("Service")) {
        let name = ystr(doc, &["metadata", "name"]).unwrap_or_default();
        let targets = pods_of(&string_map(yget(doc, &["spec", "selector"])));
        problems.check(!targets.is_empty(), || format!("k8s/{file}: Service {name} selects no Deployment's pods"));
        for port in yseq(doc, &["spec", "ports"]) {
            let target = port.get("targetPort").or_else(|| port.get("port")).and_then(scalar).unwrap_or_default();
            for c in containers.iter().filter(|c| targets.contains(&c.deployment)) {
                let found = c.ports.contains_key(&target) || c.ports.values().any(|p| p.to_string() == target);
                problems.check(found, || {
                    format!("k8s/{file}: Service {name} targetPort {target} is not a port of {}", c.deployment)
                });
                if let Resolved::Master(m) = &c.resolved {
                    let port = c.ports.get(&target).copied().or_else(|| target.parse().ok());
                    problems.check(port == Some(m.listen.port()), || {
                        format!("k8s/{file}: Service {name} targets {target}, the master listens on {}", m.listen)
                    });
                }
            }
        }
    }
    let mut budgeted = BTreeSet::new();
    for (file, doc) in docs.iter().filter(|(_, d)| ystr(d, &["kind"]) == Some("PodDisruptionBudget")) {
        let name = ystr(doc, &["metadata", "name"]).unwrap_or_default();
        let targets = pods_of(&string_map(yget(doc, &["spec", "selector", "matchLabels"])));
        problems.check(targets.len() == 1, || format!("k8s/{file}: PDB {name} selects {targets:?}"));
        for t in &targets {
            let replicas = find("Deployment", t)
                .and_then(|(_, d)| yget(d, &["spec", "replicas"]))
                .and_then(Yaml::as_u64)
                .unwrap_or(1);
            if let Some(min) = yget(doc, &["spec", "minAvailable"]).and_then(Yaml::as_u64) {
                problems.check(min < replicas, || {
                    format!("k8s/{file}: PDB {name} minAvailable {min} of {replicas} replicas blocks every drain")
                });
            }
            budgeted.insert(t.clone());
        }
    }
    for d in &deployments {
        problems.check(budgeted.contains(d), || format!("Deployment {d} has no PodDisruptionBudget"));
    }
    problems.assert_none("deploy/k8s");
}

// ---------------------------------------------------------------------------------------------
// Docker Compose

/// The compose stack, checked and resolved.
struct Compose {
    /// master service name → the port it listens on.
    masters: BTreeMap<String, u16>,
    problems: Problems,
}

/// Compose's `${VAR:-default}` interpolation, with no variable of the host set.
fn interpolate(value: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(r) = rest.strip_prefix("$$") {
            out.push('$');
            rest = r;
        } else if let Some(r) = rest.strip_prefix("${") {
            let end = r.find('}').ok_or_else(|| format!("unclosed ${{ in {value:?}"))?;
            let expr = &r[..end];
            let name_end = expr.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(expr.len());
            let op = &expr[name_end..];
            if let Some(default) = op.strip_prefix(":-").or_else(|| op.strip_prefix('-')) {
                out.push_str(default);
            } else if op.starts_with('?') || op.starts_with(":?") {
                return Err(format!("{value:?} requires the host to set a variable"));
            } else if !op.is_empty() {
                return Err(format!("{value:?}: interpolation {op:?} not understood by this test"));
            }
            rest = &r[end + 1..];
        } else {
            return Err(format!("bare $ in {value:?}: write $$ or ${{VAR}}"));
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn compose() -> Compose {
    let dir = deploy().join("compose");
    let path = dir.join("compose.yaml");
    let mut problems = Problems::default();
    let doc = match yaml_docs(&path) {
        Ok(d) => d.into_iter().next().unwrap(),
        Err(e) => {
            problems.add(e);
            return Compose { masters: BTreeMap::new(), problems };
        }
    };
    let services = doc.get("services").and_then(Yaml::as_mapping).cloned().unwrap_or_default();
    let names: BTreeSet<String> = services.keys().filter_map(|k| k.as_str().map(str::to_owned)).collect();
    let declared_volumes: BTreeSet<String> = doc
        .get("volumes")
        .and_then(Yaml::as_mapping)
        .map(|m| m.keys().filter_map(|k| k.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let dockerfile = deploy().join("compose/Dockerfile");
    let dockerfile_text = std::fs::read_to_string(&dockerfile).unwrap_or_default();
    let (mut etcd, mut mongo, mut nginx) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut etcron: Vec<(String, Bin, &Yaml)> = Vec::new();
    for (name, svc) in &services {
        let name = name.as_str().unwrap_or_default().to_owned();
        let image = ystr(svc, &["image"]).unwrap_or_default();
        let command = string_list(svc.get("command"));
        if image.starts_with("quay.io/coreos/etcd:") {
            etcd.insert(name.clone());
        } else if image.starts_with("mongo:") {
            mongo.insert(name.clone());
        } else if image.starts_with("nginx") {
            nginx.insert(name.clone());
        } else if let Some(bin) = command.first().and_then(|c| Bin::from_binary(c)) {
            etcron.push((name.clone(), bin, svc));
        } else {
            problems.add(format!("compose: service {name} is neither etcd, mongo, nginx nor an etcron binary"));
        }
        // Everything it mounts exists; named volumes are declared.
        for v in yseq(svc, &["volumes"]) {
            let (source, target) = match v {
                Yaml::String(s) => {
                    let mut parts = s.splitn(3, ':');
                    (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned())
                }
                _ => (
                    ystr(v, &["source"]).unwrap_or_default().to_owned(),
                    ystr(v, &["target"]).unwrap_or_default().to_owned(),
                ),
            };
            if source.starts_with('.') || source.starts_with('/') {
                let host = dir.join(&source);
                let inside = host.canonicalize().is_ok_and(|h| h.starts_with(root()));
                problems.check(host.exists() && inside, || {
                    format!("compose: {name} mounts {source}, which is not a file of the repository")
                });
            } else {
                problems.check(declared_volumes.contains(&source), || {
                    format!("compose: {name} mounts volume {source:?}, not declared under volumes:")
                });
            }
            problems.check(target.starts_with('/'), || format!("compose: {name}: mount target {target:?}"));
        }
        if let Some(build) = svc.get("build") {
            let context = dir.join(ystr(build, &["context"]).unwrap_or("."));
            let file = context.join(ystr(build, &["dockerfile"]).unwrap_or("Dockerfile"));
            problems.check(context.join("Cargo.toml").is_file() && file.is_file(), || {
                format!("compose: {name} builds {} with {}: not found", rel(&context), rel(&file))
            });
        }
        let depends: Vec<String> = match svc.get("depends_on") {
            Some(Yaml::Mapping(m)) => m.keys().filter_map(|k| k.as_str().map(str::to_owned)).collect(),
            other => string_list(other),
        };
        for d in depends {
            problems.check(names.contains(&d), || format!("compose: {name} depends on unknown service {d}"));
        }
        if let Some(tool) = yseq(svc, &["healthcheck", "test"]).get(1).and_then(|t| t.as_str()) {
            if command.first().and_then(|c| Bin::from_binary(c)).is_some() {
                problems.check(dockerfile_text.contains(&format!(" {tool}")), || {
                    format!("compose: {name}'s health check runs {tool}, which the Dockerfile does not install")
                });
            }
        }
    }
    problems.check(etcd.len() == 3, || format!("compose: expected 3 etcd members, found {etcd:?}"));
    problems.check(mongo.len() == 1, || format!("compose: expected 1 mongo, found {mongo:?}"));
    problems.check(nginx.len() == 1, || format!("compose: expected 1 nginx, found {nginx:?}"));

    // etcd: one static cluster of exactly these members.
    let expected_cluster: Vec<String> = etcd.iter().map(|e| format!("{e}=http://{e}:2380")).collect();
    for name in &etcd {
        let svc = &services[name.as_str()];
        let flags: BTreeMap<String, String> = string_list(svc.get("command"))
            .iter()
            .filter_map(|a| a.strip_prefix("--")?.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        let flag = |k: &str| flags.get(k).cloned().unwrap_or_default();
        problems.check(flag("name") == *name, || format!("compose: {name} runs etcd --name={}", flag("name")));
        let cluster: Vec<String> = flag("initial-cluster").split(',').map(str::to_owned).collect();
        problems.check(cluster == expected_cluster, || {
            format!("compose: {name} --initial-cluster={}", flag("initial-cluster"))
        });
        problems.check(flag("initial-advertise-peer-urls") == format!("http://{name}:2380"), || {
            format!("compose: {name} advertises peer URL {}", flag("initial-advertise-peer-urls"))
        });
        problems.check(flag("advertise-client-urls") == format!("http://{name}:2379"), || {
            format!("compose: {name} advertises client URL {}", flag("advertise-client-urls"))
        });
    }

    // masters and workers, resolved by the binaries themselves.
    let mut masters = BTreeMap::new();
    let mut worker_ids = BTreeSet::new();
    for (name, bin, svc) in &etcron {
        let at = format!("compose: {name}");
        let mounts: BTreeMap<String, PathBuf> = yseq(svc, &["volumes"])
            .into_iter()
            .filter_map(|v| {
                let mut parts = v.as_str()?.splitn(3, ':');
                let source = parts.next()?;
                let target = parts.next()?;
                source.starts_with('.').then(|| (target.to_owned(), dir.join(source)))
            })
            .collect();
        let map_path = |a: &String| mounts.get(a).map_or_else(|| a.clone(), |p| p.display().to_string());
        let argv: Vec<String> = string_list(svc.get("command")).iter().map(map_path).collect();
        let raw_env: Vec<(String, String)> = match svc.get("environment") {
            Some(Yaml::Sequence(items)) => items
                .iter()
                .filter_map(|i| i.as_str()?.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
                .collect(),
            other => string_map(other).into_iter().collect(),
        };
        let known = bin.env_names();
        let mut env = Vec::new();
        for (k, v) in raw_env {
            problems.check(!k.starts_with("ETCRON_") || known.contains(&k), || {
                format!("{at}: environment {k} is not a setting of {}", bin.name())
            });
            match interpolate(&v) {
                Ok(v) => env.push((k.clone(), if k == "ETCRON_CONFIG" { map_path(&v) } else { v })),
                Err(e) => problems.add(format!("{at}: {k}: {e}")),
            }
        }
        let config = config_arg(&argv, &env);
        problems.check(config.as_ref().is_some_and(|c| Path::new(c).is_file()), || {
            format!("{at}: config file {config:?} is not a file mounted from the repository")
        });
        let resolved = match bin.resolve(&argv, &env) {
            Ok(r) => r,
            Err(e) => {
                problems.add(format!("{at}: {} would not start: {e}", bin.name()));
                continue;
            }
        };
        let (endpoints, mongodb_uri) = match &resolved {
            Resolved::Master(m) => (m.etcd_endpoints.clone(), m.mongodb_uri.clone()),
            Resolved::Worker(w) => (w.etcd_endpoints.clone(), w.mongodb_uri.clone()),
        };
        let hosts: BTreeSet<String> = endpoints.iter().map(|e| host_port(e).0).collect();
        problems.check(hosts == etcd, || format!("{at}: etcd endpoints {endpoints:?}, members {etcd:?}"));
        for h in mongodb_hosts(&mongodb_uri) {
            problems.check(mongo.contains(&h), || format!("{at}: mongodb_uri {mongodb_uri} names {h}, not a service"));
        }
        let health: Vec<String> = string_list(yget(svc, &["healthcheck", "test"]));
        let health_port = health.iter().find(|a| a.starts_with("http://")).and_then(|u| host_port(u).1);
        match &resolved {
            Resolved::Master(m) => {
                problems.check(!m.listen.ip().is_loopback(), || {
                    format!("{at}: listens on {}, nginx cannot reach it", m.listen)
                });
                problems.check(
                    health_port == Some(m.listen.port()) && health.iter().any(|a| a.ends_with("/readyz")),
                    || format!("{at}: health check {health:?} is not /readyz on {}", m.listen),
                );
                masters.insert(name.clone(), m.listen.port());
            }
            Resolved::Worker(w) => {
                let metrics = w.metrics_listen.map(|a| a.port());
                problems.check(
                    metrics.is_some() && health_port == metrics && health.iter().any(|a| a.ends_with("/readyz")),
                    || format!("{at}: health check {health:?} is not /readyz on metrics_listen {:?}", w.metrics_listen),
                );
                let grace = ystr(svc, &["stop_grace_period"]).and_then(|g| humantime::parse_duration(g).ok());
                problems.check(grace.is_some_and(|g| g > drain_time(w)), || {
                    format!(
                        "{at}: stop_grace_period {grace:?} is not above shutdown_grace {:?} + kill_grace {:?} + 5s",
                        w.shutdown_grace, w.kill_grace
                    )
                });
                let on_volume = yseq(svc, &["volumes"]).iter().filter_map(|v| v.as_str()).any(|v| {
                    let mut p = v.split(':');
                    let source = p.next().unwrap_or_default();
                    !source.starts_with('.') && p.next().is_some_and(|t| w.data_dir.starts_with(t))
                });
                problems.check(on_volume, || format!("{at}: data_dir {} is on no named volume", w.data_dir.display()));
                problems.check(worker_ids.insert(w.worker_id.clone()), || {
                    format!("{at}: worker id {} used twice", w.worker_id)
                });
                let cfg = config.as_deref().map(Path::new);
                let listen = raw_setting(&argv, &env, cfg, "output_listen");
                let url = raw_setting(&argv, &env, cfg, "output_url");
                problems.check(listen.is_some() && url.is_some(), || {
                    format!("{at}: output_listen {listen:?} / output_url {url:?} not both set")
                });
                if let (Some(listen), Some(url)) = (listen, url) {
                    let (host, port) = host_port(&url);
                    let hostname = ystr(svc, &["hostname"]).unwrap_or(name);
                    problems.check(
                        (host == *name || host == hostname) && port.is_some() && port == host_port(&listen).1,
                        || format!("{at}: output_url {url} is not this service at the port of output_listen {listen}"),
                    );
                }
            }
        }
    }
    problems.check(masters.len() == 2, || format!("compose: expected 2 masters, found {masters:?}"));
    problems.check(worker_ids.len() == 3, || format!("compose: expected 3 workers, found {worker_ids:?}"));
    Compose { masters, problems }
}

#[test]
fn the_compose_stack_is_complete_and_every_etcron_service_would_start() {
    compose().problems.assert_none("deploy/compose/compose.yaml");
}

#[test]
fn nginx_balances_over_both_masters() {
    let compose = compose();
    let path = deploy().join("compose/nginx.conf");
    let text = read(&path);
    let mut problems = Problems::default();
    // Comments out, then braces balance (outside quotes).
    let code: String = text.lines().map(|l| l.split_once('#').map_or(l, |(c, _)| c)).collect::<Vec<_>>().join("\n");
    let (mut depth, mut quoted, mut min) = (0i32, None::<char>, 0);
    for c in code.chars() {
        match (c, quoted) {
            ('"' | '\'', None) => quoted = Some(c),
            (q, Some(open)) if q == open => quoted = None,
            ('{', None) => depth += 1,
            ('}', None) => {
                depth -= 1;
                min = min.min(depth);
            }
            _ => {}
        }
    }
    problems
        .check(depth == 0 && min >= 0 && quoted.is_none(), || format!("nginx.conf: braces do not balance ({depth})"));
    // Statements per block, by a small tokenizer: `name args... ;` and `name args... {`.
    let mut blocks: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    let mut stack: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    for token in code.replace('{', " { ").replace('}', " } ").replace(';', " ; ").split_whitespace() {
        match token {
            "{" => {
                stack.push((words.join(" "), Vec::new()));
                words.clear();
            }
            "}" => {
                if let Some(b) = stack.pop() {
                    blocks.push(b);
                }
            }
            ";" => {
                if let Some((_, stmts)) = stack.last_mut() {
                    stmts.push(std::mem::take(&mut words));
                } else {
                    words.clear();
                }
            }
            w => words.push(w.to_owned()),
        }
    }
    let upstreams: Vec<&(String, Vec<Vec<String>>)> =
        blocks.iter().filter(|(h, _)| h.starts_with("upstream ")).collect();
    problems.check(upstreams.len() == 1, || format!("nginx.conf: expected one upstream, found {}", upstreams.len()));
    if let Some((head, stmts)) = upstreams.first() {
        let name = head.trim_start_matches("upstream ").trim().to_owned();
        let servers: BTreeMap<String, u16> = stmts
            .iter()
            .filter(|s| s.first().map(String::as_str) == Some("server"))
            .filter_map(|s| {
                let (h, p) = host_port(s.get(1)?);
                Some((h, p?))
            })
            .collect();
        problems.check(servers == compose.masters, || {
            format!("nginx.conf: upstream {name} has {servers:?}, compose's masters are {:?}", compose.masters)
        });
        let locations: Vec<&(String, Vec<Vec<String>>)> =
            blocks.iter().filter(|(h, _)| h.starts_with("location ")).collect();
        for (head, stmts) in &locations {
            for s in stmts.iter().filter(|s| s.first().map(String::as_str) == Some("proxy_pass")) {
                problems.check(s.get(1).map(String::as_str) == Some(&format!("http://{name}")), || {
                    format!("nginx.conf: {head}: proxy_pass {s:?} is not the upstream {name}")
                });
            }
        }
        let directive = |stmts: &Vec<Vec<String>>, d: &str| {
            stmts.iter().find(|s| s.first().map(String::as_str) == Some(d)).map(|s| s[1..].join(" "))
        };
        let stream = locations.iter().find(|(h, _)| h.contains("/api/executions/") && h.contains("/stream"));
        match stream {
            None => problems.add("nginx.conf: no location for /api/executions/{id}/stream (SSE)"),
            Some((head, stmts)) => {
                problems.check(directive(stmts, "proxy_buffering").as_deref() == Some("off"), || {
                    format!("nginx.conf: {head}: proxy_buffering is not off")
                });
                let timeout = directive(stmts, "proxy_read_timeout").and_then(|t| humantime::parse_duration(&t).ok());
                problems.check(timeout.is_some_and(|t| t >= Duration::from_secs(600)), || {
                    format!("nginx.conf: {head}: proxy_read_timeout {timeout:?} ends quiet streams")
                });
            }
        }
        let root = locations.iter().find(|(h, _)| h.split_whitespace().collect::<Vec<_>>() == ["location", "/"]);
        problems.check(
            root.is_some_and(|(_, s)| directive(s, "proxy_next_upstream").is_some_and(|d| d.contains("error"))),
            || "nginx.conf: location / does not retry another master (proxy_next_upstream)".to_owned(),
        );
    }
    problems.assert_none("deploy/compose/nginx.conf");
}

#[test]
fn the_dockerfile_builds_and_ships_the_workspace_binaries() {
    let path = deploy().join("compose/Dockerfile");
    let text = read(&path);
    let mut problems = Problems::default();
    let bins = workspace_binaries();
    // Logical lines: continuations joined, comments out.
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') {
            continue;
        }
        if let Some(cont) = t.strip_suffix('\\') {
            current.push_str(cont);
            current.push(' ');
        } else {
            current.push_str(t);
            if !current.trim().is_empty() {
                lines.push(std::mem::take(&mut current));
            }
            current.clear();
        }
    }
    let froms: Vec<&String> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    problems.check(
        froms.len() == 2
            && froms[0].starts_with("FROM rust:1-bookworm AS ")
            && froms[1].starts_with("FROM debian:bookworm-slim"),
        || format!("Dockerfile: stages {froms:?}"),
    );
    let all = lines.join("\n");
    for needed in ["protobuf-compiler", "ca-certificates", "tini"] {
        problems.check(all.contains(needed), || format!("Dockerfile: does not install {needed}"));
    }
    let line = lines.iter().find(|l| l.contains("cargo build")).cloned().unwrap_or_default();
    let build = line.split("&&").find(|c| c.contains("cargo build")).unwrap_or_default().to_owned();
    let words: Vec<&str> = build.split_whitespace().collect();
    let packages: BTreeSet<&str> =
        words.windows(2).filter(|w| w[0] == "-p" || w[0] == "--package").map(|w| w[1]).collect();
    problems.check(
        ["--release", "--locked", "--bins"].iter().all(|f| words.contains(f))
            && packages == BTreeSet::from(["etcron-master", "etcron-worker", "etcron-ctl"]),
        || format!("Dockerfile: build step {build:?}"),
    );
    let shipped: BTreeSet<String> =
        line.split_whitespace().filter_map(|w| w.strip_prefix("target/release/")).map(str::to_owned).collect();
    for bin in &shipped {
        problems.check(bins.get(bin).is_some_and(|p| packages.contains(p.as_str())), || {
            format!("Dockerfile: copies {bin}, which `cargo build -p {packages:?}` does not build ({bins:?})")
        });
    }
    for bin in ["etcron-master", "etcron-worker", "etcron-keeper", "etcronctl"] {
        problems.check(shipped.contains(bin), || format!("Dockerfile: does not ship {bin}"));
    }
    let user = lines.iter().rev().find_map(|l| l.strip_prefix("USER ")).unwrap_or("root");
    problems.check(!["root", "0", "0:0"].contains(&user.trim()), || format!("Dockerfile: runs as {user}"));
    problems.check(lines.iter().any(|l| l.starts_with("ENTRYPOINT") && l.contains("tini")), || {
        "Dockerfile: tini is not the entrypoint".to_owned()
    });
    let ignore = deploy().join("compose/Dockerfile.dockerignore");
    problems.check(ignore.is_file() && read(&ignore).lines().any(|l| l.trim() == "target"), || {
        "Dockerfile.dockerignore does not keep target/ out of the build context".to_owned()
    });
    problems.assert_none("deploy/compose/Dockerfile");
}

// ---------------------------------------------------------------------------------------------
// systemd

/// A unit file: section → key → values (in order; a key may repeat).
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse_unit(text: &str) -> Result<Unit, String> {
    let mut unit = Unit::new();
    let mut section: Option<String> = None;
    let mut pending = String::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let logical = std::mem::take(&mut pending);
        if let Some(name) = logical.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            unit.entry(name.to_owned()).or_default();
            section = Some(name.to_owned());
            continue;
        }
        let Some((key, value)) = logical.split_once('=') else {
            return Err(format!("line {}: {logical:?} is neither [Section] nor Key=value", n + 1));
        };
        let Some(section) = &section else { return Err(format!("line {}: a key before any section", n + 1)) };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!("line {}: bad key {key:?}", n + 1));
        }
        unit.entry(section.clone()).or_default().entry(key.to_owned()).or_default().push(value.trim().to_owned());
    }
    if !pending.is_empty() {
        return Err("a continuation line at the end".to_owned());
    }
    Ok(unit)
}

/// A systemd time span: `90`, `90s`, `1min 30s`, `2m`.
fn unit_duration(text: &str) -> Option<Duration> {
    if let Ok(secs) = text.trim().parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    humantime::parse_duration(&text.replace("min", "m").replace("sec", "s")).ok()
}

fn unit_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

#[test]
fn systemd_units_are_hardened_and_run_a_workspace_binary_with_an_example_config() {
    let units = files_under(&deploy().join("systemd"), &[".service"]);
    let bins = workspace_binaries();
    let configs: BTreeSet<String> = files_under(&deploy().join("config"), &[".toml"])
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut problems = Problems::default();
    let mut seen = BTreeSet::new();
    for path in &units {
        let at = rel(path);
        let unit = match parse_unit(&read(path)) {
            Ok(u) => u,
            Err(e) => {
                problems.add(format!("{at}: {e}"));
                continue;
            }
        };
        let get = |section: &str, key: &str| -> Vec<String> {
            unit.get(section).and_then(|s| s.get(key)).cloned().unwrap_or_default()
        };
        let one = |section: &str, key: &str| get(section, key).last().cloned().unwrap_or_default();
        let words = |section: &str, key: &str| -> Vec<String> {
            get(section, key).iter().flat_map(|v| v.split_whitespace().map(str::to_owned)).collect()
        };
        for (section, key, want) in [
            ("Service", "User", "etcron"),
            ("Service", "Group", "etcron"),
            ("Service", "Restart", "on-failure"),
            ("Service", "ProtectSystem", "strict"),
            ("Install", "WantedBy", "multi-user.target"),
        ] {
            problems.check(one(section, key) == want, || format!("{at}: {key}={}, expected {want}", one(section, key)));
        }
        for key in ["ProtectHome", "PrivateTmp", "NoNewPrivileges"] {
            problems.check(unit_bool(&one("Service", key)) == Some(true), || format!("{at}: {key} is not on"));
        }
        problems.check(get("Service", "DynamicUser").iter().all(|v| unit_bool(v) == Some(false)), || {
            format!("{at}: DynamicUser must be off (the etcron user owns the state)")
        });
        problems.check(unit_duration(&one("Service", "RestartSec")).is_some(), || format!("{at}: no RestartSec"));
        problems.check(one("Service", "LimitNOFILE").parse::<u64>().is_ok_and(|n| n >= 4096), || {
            format!("{at}: LimitNOFILE={}", one("Service", "LimitNOFILE"))
        });
        for key in ["After", "Wants"] {
            problems.check(words("Unit", key).iter().any(|w| w == "network-online.target"), || {
                format!("{at}: {key}= lacks network-online.target (After= orders, Wants= pulls it in)")
            });
        }

        // ExecStart: a binary the workspace builds, with a config file from deploy/config/.
        let exec: Vec<String> = one("Service", "ExecStart").split_whitespace().map(str::to_owned).collect();
        let binary = exec.first().cloned().unwrap_or_default();
        let Some(bin) = Bin::from_binary(&binary) else {
            problems.add(format!("{at}: ExecStart runs {binary:?}, not etcron-master or etcron-worker"));
            continue;
        };
        seen.insert(bin.name());
        problems.check(binary == format!("/usr/local/bin/{}", bin.name()) && bins.contains_key(bin.name()), || {
            format!("{at}: ExecStart binary {binary} (workspace binaries: {bins:?})")
        });
        problems.check(path.file_name().unwrap().to_string_lossy() == format!("{}.service", bin.name()), || {
            format!("{at}: runs {}", bin.name())
        });
        let config = config_arg(&exec, &[]).unwrap_or_default();
        let base = Path::new(&config).file_name().map(|b| b.to_string_lossy().into_owned()).unwrap_or_default();
        problems.check(configs.contains(&base) && Bin::for_config(&base) == Some(bin), || {
            format!("{at}: --config {config:?} is not a {} config under deploy/config/ {configs:?}", bin.name())
        });
        let example = deploy().join("config").join(&base);
        let argv: Vec<String> =
            exec.iter().map(|a| if *a == config { example.display().to_string() } else { a.clone() }).collect();
        let resolved = match bin.resolve(&argv, &[]) {
            Ok(r) => r,
            Err(e) => {
                problems.add(format!("{at}: {} would not start with {}: {e}", bin.name(), rel(&example)));
                continue;
            }
        };
        if let Resolved::Worker(w) = &resolved {
            problems.check(one("Service", "KillMode") == "mixed", || {
                format!("{at}: KillMode={}, expected mixed", one("Service", "KillMode"))
            });
            let stop = unit_duration(&one("Service", "TimeoutStopSec"));
            problems.check(stop.is_some_and(|s| s > drain_time(w)), || {
                format!(
                    "{at}: TimeoutStopSec {stop:?} is not above shutdown_grace {:?} + kill_grace {:?} + 5s",
                    w.shutdown_grace, w.kill_grace
                )
            });
            problems
                .check(one("Service", "StateDirectory") == "etcron", || format!("{at}: StateDirectory is not etcron"));
            let writable = words("Service", "ReadWritePaths");
            problems.check(writable.iter().any(|p| w.data_dir.starts_with(p.trim_start_matches(['-', '+']))), || {
                format!("{at}: data_dir {} is not under ReadWritePaths {writable:?}", w.data_dir.display())
            });
            problems.check(get("Service", "EnvironmentFile").contains(&"-/etc/etcron/worker.env".to_owned()), || {
                format!("{at}: no EnvironmentFile=-/etc/etcron/worker.env")
            });
            // Settings that would break arbitrary task programs.
            for key in ["MemoryDenyWriteExecute", "PrivateDevices", "PrivateNetwork", "RestrictNamespaces"] {
                problems.check(get("Service", key).iter().all(|v| unit_bool(v) == Some(false)), || {
                    format!("{at}: {key} would break shell tasks")
                });
            }
            for key in ["SystemCallFilter", "RestrictAddressFamilies", "ProtectProc", "IPAddressDeny"] {
                problems.check(get("Service", key).is_empty(), || format!("{at}: {key} would break shell tasks"));
            }
        }
    }
    problems.check(seen.len() == 2, || format!("expected a master and a worker unit, found {seen:?}"));

    // systemd's own parser, where installed: unknown keys and bad values are reported.
    match std::process::Command::new("systemd-analyze").arg("verify").args(&units).output() {
        Ok(out) => {
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                // The binaries are not installed here.
                let missing_binary = line.contains("/usr/local/bin/etcron-") && line.contains("not executable");
                problems.check(missing_binary, || format!("systemd-analyze verify: {line}"));
            }
        }
        Err(e) => eprintln!("systemd-analyze not run ({e}); the units were checked by the test's own parser only"),
    }
    problems.assert_none("deploy/systemd");
}

/// Every etcd the project starts compacts and states its quota (docs/operations.md): the local
/// script and each compose member carry the harness's `ETCD_STORAGE_FLAGS`, and the operations
/// manual names them for the etcd an operator runs.
#[test]
fn every_etcd_the_project_starts_compacts_and_has_a_quota() {
    let up = read(&deploy().join("local/up.sh"));
    let compose = yaml_docs(&deploy().join("compose/compose.yaml")).unwrap();
    let ops = read(&root().join("docs/operations.md"));
    let mut problems = Problems::default();
    for flag in etcron_tests::ETCD_STORAGE_FLAGS {
        problems.check(up.contains(flag), || format!("deploy/local/up.sh starts etcd without {flag}"));
        let (name, value) = flag.trim_start_matches("--").split_once('=').unwrap();
        problems.check(ops.contains(&format!("{name}: ")) && ops.contains(value), || {
            format!("docs/operations.md does not give etcd's {name} for etcd run elsewhere")
        });
    }
    let mut members = 0;
    for doc in &compose {
        let Some(Yaml::Mapping(services)) = yget(doc, &["services"]) else { continue };
        for (name, service) in services {
            let command: Vec<String> = yseq(service, &["command"]).into_iter().filter_map(scalar).collect();
            if command.first().map(String::as_str) != Some("etcd") {
                continue;
            }
            members += 1;
            for flag in etcron_tests::ETCD_STORAGE_FLAGS {
                problems.check(command.iter().any(|a| a == flag), || {
                    format!("compose service {} starts etcd without {flag}", scalar(name).unwrap_or_default())
                });
            }
        }
    }
    problems.check(members > 0, || "the compose stack runs no etcd".to_owned());
    problems.assert_none("etcd storage flags");
}

/// What `deploy/local/up.sh` prints once the cluster is up says where the console is and how to
/// run etcronctl (the binary it built, and `ETCRON_SERVER` for its master), and, started as
/// root, who the tasks run as; the build it runs does build etcronctl.
#[test]
fn up_sh_says_where_the_console_and_etcronctl_are() {
    let up = read(&deploy().join("local/up.sh"));
    let mut problems = Problems::default();
    let banner = up.split("cat <<MSG").nth(1).and_then(|b| b.split("\nMSG\n").next()).unwrap_or_default();
    problems.check(!banner.is_empty(), || "up.sh prints no banner (cat <<MSG ... MSG)".to_owned());
    for (what, text) in [
        ("the console's URL", "console:    http://$LISTEN/"),
        ("the built etcronctl", "$PWD/$BIN/etcronctl"),
        ("PATH with the built binaries", "export PATH=\"$PWD/$BIN:\\$PATH\""),
        ("ETCRON_SERVER for the master", "ETCRON_SERVER=http://$LISTEN"),
    ] {
        problems.check(banner.contains(text), || format!("up.sh's banner does not give {what} ({text})"));
    }
    let bins = workspace_binaries();
    let package = bins.get("etcronctl").cloned().unwrap_or_default();
    problems.check(!package.is_empty(), || "the workspace builds no etcronctl".to_owned());
    let build = up.lines().find(|l| l.starts_with("cargo build --profile \"$PROFILE\" --locked ")).unwrap_or_default();
    problems
        .check(build.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w == ["-p", package.as_str()]), || {
            format!("up.sh does not build {package}, which holds etcronctl")
        });
    problems.check(up.contains("BIN=target/$("), || "up.sh's $BIN is not the build's target directory".to_owned());
    // Started as root, it says who the tasks then run as, and how to change it.
    let as_root = up.split("if [ \"$(id -u)\" = 0 ]; then").nth(1).unwrap_or_default();
    for text in ["the workers run as root", "--task-user NAME", "etcronctl workers ls"] {
        problems.check(as_root.contains(text), || format!("up.sh started as root does not say {text:?}"));
    }
    problems.assert_none("deploy/local/up.sh banner");
}

/// Every `.rs` file under `dir`, its folders included.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
