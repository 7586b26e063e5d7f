//! Job files: TOML, YAML or JSON (by extension) holding a top-level `jobs` map from job name to
//! JobSpec, or one bare JobSpec named after the file. Reading validates every job with
//! common's `JobSpec::from_value`, the master's own check, so a file is refused with the same
//! message the API would give, naming the file, the job and the field. Writing is for `export`.
//!
//! Secrets: a `null` secret value (JSON, YAML) or `{ keep = true }` (any format; TOML has no
//! null) means "keep the value stored on the server", as `null` does in the API. An export
//! writes withheld secrets that way, since the API never shows their values.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use etcron_model::spec::{JobSpec, MAX_SPEC_BYTES, TASK_SECRET_FIELDS};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::exit::{FileError, InvalidFiles};

/// A job file's format, chosen by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Toml,
    Yaml,
    Json,
}

impl Format {
    /// `.toml`, `.yaml`/`.yml` or `.json` (any case); `None` for anything else.
    #[must_use]
    pub fn of_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "toml" => Some(Format::Toml),
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }

    /// The format of a text read without a telling name (standard input, a file without a
    /// known extension): JSON when it starts with `{`, TOML when it parses as TOML, else YAML.
    #[must_use]
    pub fn sniff(text: &str) -> Self {
        if text.trim_start().starts_with('{') {
            Format::Json
        } else if toml::from_str::<toml::Table>(text).is_ok() {
            Format::Toml
        } else {
            Format::Yaml
        }
    }
}

/// The path that means standard input.
pub const STDIN: &str = "-";

fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == STDIN
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Toml => "toml",
            Format::Yaml => "yaml",
            Format::Json => "json",
        })
    }
}

/// A job read from a file and validated.
#[derive(Debug, Clone)]
pub struct FileJob {
    pub name: String,
    pub file: PathBuf,
    /// The body to `PUT`: the file's spec, with kept secrets as `null`.
    pub body: Value,
    /// The spec as the API shows it once saved (defaults filled in, secret values withheld):
    /// what `apply` compares with the server's.
    pub normalized: Value,
    /// Secrets whose value the file gives (`task.secret_env.PW`): the API never shows the
    /// stored values, so these cannot be compared.
    pub secret_values: Vec<String>,
    /// Secrets the file asks to keep (`null` / `{ keep = true }`).
    pub kept_secrets: Vec<String>,
    /// The file's `managed_by`: the owner stamped on its jobs as the `managed-by` label.
    pub managed_by: Option<String>,
}

/// The label that says which repository (or team, or tool) owns a job: set on every job of a
/// file with a top-level `managed_by`, and the scope of `apply --prune` for those files.
pub const MANAGED_BY: &str = "managed-by";

/// Adds the `managed-by` label to a job's spec; a job that sets it otherwise is an error.
fn stamp_owner(value: &mut Value, owner: &str) -> Result<(), String> {
    let Some(spec) = value.as_object_mut() else { return Ok(()) };
    let labels = spec.entry("labels").or_insert_with(|| Value::Object(Map::new()));
    let Some(labels) = labels.as_object_mut() else { return Ok(()) };
    match labels.get(MANAGED_BY) {
        Some(Value::String(set)) if set != owner => Err(format!(
            "the job sets {MANAGED_BY} = {set:?} but its file's managed_by is {owner:?}; leave the label to managed_by"
        )),
        _ => {
            labels.insert(MANAGED_BY.to_owned(), Value::String(owner.to_owned()));
            Ok(())
        }
    }
}

/// The key TOML's datetimes carry when read into a generic value.
const TOML_DATETIME: &str = "$__toml_private_datetime";

/// Every job file `paths` name: files as given, directories as every `*.toml|*.yaml|*.yml|*.json`
/// directly in them (not recursive, sorted, hidden files skipped). A file named twice is read
/// once.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InvalidFiles> {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let error = |file: &Path, message: String| FileError { file: file.to_path_buf(), job: None, field: None, message };
    for path in paths {
        if is_stdin(path) {
            files.push(path.clone());
            continue;
        }
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                errors.push(error(path, format!("cannot read: {e}")));
                continue;
            }
        };
        if meta.is_dir() {
            let entries = match std::fs::read_dir(path) {
                Ok(entries) => entries,
                Err(e) => {
                    errors.push(error(path, format!("cannot list the directory: {e}")));
                    continue;
                }
            };
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file() && Format::of_path(p).is_some())
                .filter(|p| !p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.')))
                .collect();
            found.sort();
            if found.is_empty() {
                errors.push(error(path, "the directory holds no .toml, .yaml, .yml or .json file".to_owned()));
            }
            files.extend(found);
        } else {
            // Named on its own: any name (the format is read from the text when the extension
            // does not say it).
            files.push(path.clone());
        }
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    if errors.is_empty() {
        Ok(files)
    } else {
        Err(InvalidFiles(errors))
    }
}

/// Reads and validates every job of `paths` (see [`expand`]). Every problem is reported, each
/// naming its file, job and field; a job defined in two files names both.
pub fn load(paths: &[PathBuf]) -> Result<Vec<FileJob>, InvalidFiles> {
    let files = expand(paths)?;
    let mut jobs: Vec<FileJob> = Vec::new();
    let mut errors = Vec::new();
    let mut defined: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in files {
        let read = if is_stdin(&file) {
            std::io::read_to_string(std::io::stdin().lock())
        } else {
            std::fs::read_to_string(&file)
        };
        let text = match read {
            Ok(t) => t,
            Err(e) => {
                errors.push(FileError { file, job: None, field: None, message: format!("cannot read: {e}") });
                continue;
            }
        };
        match parse(&file, &text) {
            Ok(found) => {
                for job in found {
                    match job {
                        Ok(job) => {
                            if let Some(first) = defined.get(&job.name) {
                                errors.push(FileError {
                                    file: job.file.clone(),
                                    job: Some(job.name.clone()),
                                    field: None,
                                    message: format!("is defined twice: also in {}", first.display()),
                                });
                                continue;
                            }
                            defined.insert(job.name.clone(), job.file.clone());
                            jobs.push(job);
                        }
                        Err(e) => errors.push(e),
                    }
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(jobs)
    } else {
        Err(InvalidFiles(errors))
    }
}

/// The jobs of one file's text: the file itself is refused as a whole (syntax, shape), each job
/// on its own.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Result<FileJob, FileError>>, FileError> {
    let whole = |message: String| FileError { file: file.to_path_buf(), job: None, field: None, message };
    let format = Format::of_path(file).unwrap_or_else(|| Format::sniff(text));
    let doc: Doc = match format {
        Format::Json => serde_json::from_str(text).map_err(|e| whole(e.to_string()))?,
        Format::Yaml => {
            if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
                Doc::Jobs(Vec::new(), None)
            } else {
                serde_norway::from_str(text).map_err(|e| whole(e.to_string()))?
            }
        }
        Format::Toml => toml::from_str(text).map_err(|e| whole(toml_error(text, &e)))?,
    };
    let (named, managed_by) = match doc {
        Doc::Jobs(jobs, managed_by) => (jobs, managed_by),
        Doc::Single(spec) => {
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
            if let Err(e) = etcron_model::spec::validate_name(&stem) {
                return Err(whole(format!(
                    "holds no top-level `jobs` map, so it is one job named after the file, but {stem:?} is not a \
                     job name ({})",
                    e.message
                )));
            }
            (vec![(stem, Value::Object(spec))], None)
        }
    };
    Ok(named.into_iter().map(|(name, value)| job(file, name, value, managed_by.as_deref())).collect())
}

/// Validates one job of a file.
fn job(file: &Path, name: String, mut value: Value, managed_by: Option<&str>) -> Result<FileJob, FileError> {
    let error = |field: Option<String>, message: String| FileError {
        file: file.to_path_buf(),
        job: Some(name.clone()),
        field,
        message,
    };
    if let Err(e) = etcron_model::spec::validate_name(&name) {
        return Err(error(None, format!("is not a job name: {}", e.message)));
    }
    toml_datetimes_to_strings(&mut value);
    if let Some(owner) = managed_by {
        if let Err(message) = stamp_owner(&mut value, owner) {
            return Err(error(Some(format!("labels.{MANAGED_BY}")), message));
        }
    }
    if let Err((field, message)) = resolve_secrets(&mut value, file) {
        return Err(error(Some(field), message));
    }
    let size = serde_json::to_vec(&value).map_or(0, |b| b.len());
    if size > MAX_SPEC_BYTES {
        return Err(error(None, format!("the spec is {size} bytes as JSON; the limit is {MAX_SPEC_BYTES}")));
    }
    let spec = JobSpec::from_value(value.clone()).map_err(|e| error(e.field, e.message))?;
    let normalized = serde_json::to_value(spec.redacted()).map_err(|e| error(None, e.to_string()))?;
    let (field, secrets) = spec.task.secrets_field();
    let (mut secret_values, mut kept_secrets) = (Vec::new(), Vec::new());
    for (key, v) in secrets {
        let path = format!("{field}.{key}");
        if v.is_some() {
            secret_values.push(path);
        } else {
            kept_secrets.push(path);
        }
    }
    Ok(FileJob {
        name,
        file: file.to_path_buf(),
        body: value,
        normalized,
        secret_values,
        kept_secrets,
        managed_by: managed_by.map(str::to_owned),
    })
}

/// TOML errors are several lines with a code excerpt; this is one, with the line and column.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{} at line {line} column {column}", e.message().trim())
        }
        None => e.message().trim().to_owned(),
    }
}

/// A TOML datetime read into a generic value is `{"$__toml_private_datetime": "..."}`; the spec
/// has strings there (`@at 2026-...` is a string anyway).
fn toml_datetimes_to_strings(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.len() == 1 {
                if let Some(Value::String(s)) = map.get(TOML_DATETIME) {
                    *value = Value::String(s.clone());
                    return;
                }
            }
            map.values_mut().for_each(toml_datetimes_to_strings);
        }
        Value::Array(items) => items.iter_mut().for_each(toml_datetimes_to_strings),
        _ => {}
    }
}

/// Whether `v` is the `{ keep = true }` marker of a secret whose stored value is kept.
fn is_keep_marker(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.len() == 1 && m.get("keep") == Some(&Value::Bool(true)))
}

/// Secrets written as references become what the API takes: `{ keep = true }` becomes `null`
/// (keep the stored value); `{ env = "NAME" }` the value of that environment variable;
/// `{ file = "PATH" }` the content of that file (relative to the job file's directory), one
/// trailing newline removed. A reference that cannot be resolved is an error naming the secret.
fn resolve_secrets(value: &mut Value, job_file: &Path) -> Result<(), (String, String)> {
    let Some(task) = value.get_mut("task").and_then(Value::as_object_mut) else { return Ok(()) };
    for field in TASK_SECRET_FIELDS {
        if let Some(Value::Object(secrets)) = task.get_mut(field) {
            for (key, v) in secrets.iter_mut() {
                let path = format!("task.{field}.{key}");
                if let Some(resolved) = resolve_secret(v, job_file).map_err(|m| (path, m))? {
                    *v = resolved;
                }
            }
        }
    }
    Ok(())
}

/// The value a secret reference stands for; `None` when `v` is not a reference.
fn resolve_secret(v: &Value, job_file: &Path) -> Result<Option<Value>, String> {
    if is_keep_marker(v) {
        return Ok(Some(Value::Null));
    }
    let Some(map) = v.as_object().filter(|m| m.len() == 1) else { return Ok(None) };
    if let Some(name) = map.get("env") {
        let name = name.as_str().ok_or("`env` must name an environment variable")?;
        return match std::env::var(name) {
            Ok(value) => Ok(Some(Value::String(value))),
            Err(std::env::VarError::NotPresent) => Err(format!("environment variable {name} is not set")),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("environment variable {name} is not UTF-8")),
        };
    }
    if let Some(path) = map.get("file") {
        let path = path.as_str().ok_or("`file` must be a path")?;
        let base = job_file.parent().filter(|p| !p.as_os_str().is_empty() && job_file != Path::new("-"));
        let full = base.map_or_else(|| Path::new(path).to_path_buf(), |dir| dir.join(path));
        let text = std::fs::read_to_string(&full).map_err(|e| format!("reading {}: {e}", full.display()))?;
        let text = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
        return Ok(Some(Value::String(text.to_owned())));
    }
    Ok(None)
}

/// The API's `null` secrets as the file keeps them: `{ keep = true }` in TOML (which has no
/// null), `null` in YAML and JSON.
fn null_secrets_to_markers(spec: &mut Value) {
    let Some(task) = spec.get_mut("task").and_then(Value::as_object_mut) else { return };
    for field in TASK_SECRET_FIELDS {
        if let Some(Value::Object(secrets)) = task.get_mut(field) {
            for v in secrets.values_mut() {
                if v.is_null() {
                    *v = serde_json::json!({ "keep": true });
                }
            }
        }
    }
}

/// `null`s TOML cannot hold: left out (the spec's optional fields are absent when null).
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// `jobs` (name → spec as the API shows it) as one job file in `format`.
pub fn render(jobs: &BTreeMap<String, Value>, format: Format) -> anyhow::Result<String> {
    let doc = |jobs: Map<String, Value>| serde_json::json!({ "jobs": jobs });
    Ok(match format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&doc(jobs.clone().into_iter().collect()))?),
        Format::Yaml => serde_norway::to_string(&doc(jobs.clone().into_iter().collect()))?,
        Format::Toml => {
            let mut out = Map::new();
            for (name, spec) in jobs {
                let mut spec = spec.clone();
                null_secrets_to_markers(&mut spec);
                drop_nulls(&mut spec);
                out.insert(name.clone(), spec);
            }
            toml::to_string(&doc(out))?
        }
    })
}

/// `spec` (as the API shows it) without the fields that hold their default: a field is left
/// out when the spec without it reads as the same spec (so only what the job says remains,
/// and an import of it saves the same job). Objects are searched field by field within.
#[must_use]
pub fn omit_defaults(spec: &Value) -> Value {
    let read = |v: &Value| JobSpec::from_value(v.clone()).ok().and_then(|s| serde_json::to_value(s.redacted()).ok());
    let Some(whole) = read(spec) else { return spec.clone() };
    let mut out = spec.clone();
    let mut paths = Vec::new();
    object_paths(&out, &mut Vec::new(), &mut paths);
    for path in paths {
        let mut without = out.clone();
        if remove_at(&mut without, &path).is_some() && read(&without).as_ref() == Some(&whole) {
            out = without;
        }
    }
    out
}

/// Every field's path in `v`'s objects, an object's fields after the object itself.
fn object_paths(v: &Value, at: &mut Vec<String>, paths: &mut Vec<Vec<String>>) {
    let Value::Object(map) = v else { return };
    for (key, child) in map {
        at.push(key.clone());
        paths.push(at.clone());
        object_paths(child, at, paths);
        at.pop();
    }
}

fn remove_at(v: &mut Value, path: &[String]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut at = v;
    for key in parents {
        at = at.get_mut(key)?;
    }
    at.as_object_mut()?.remove(last)
}

/// A file's top level: the `jobs` map, or a bare spec.
#[derive(Debug)]
enum Doc {
    /// The jobs, and the file's `managed_by`.
    Jobs(Vec<(String, Value)>, Option<String>),
    Single(Map<String, Value>),
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map: a top-level `jobs` map from job name to spec, or one job's spec")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Jobs(Vec::new(), None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut jobs = None;
        let mut managed_by: Option<Value> = None;
        let mut other = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "managed_by" {
                managed_by = Some(map.next_value()?);
            } else if key == "jobs" {
                if jobs.is_some() {
                    return Err(de::Error::custom("`jobs` appears twice"));
                }
                jobs = Some(map.next_value::<JobsMap>()?.0);
            } else {
                let value: Value = map.next_value()?;
                other.insert(key, value);
            }
        }
        let managed_by = match managed_by {
            None => None,
            Some(Value::String(owner)) if !owner.trim().is_empty() => Some(owner),
            Some(_) => return Err(de::Error::custom("`managed_by` must be a non-empty string naming the owner")),
        };
        match jobs {
            Some(jobs) => match other.keys().next() {
                Some(key) => Err(de::Error::custom(format!(
                    "unknown top-level key `{key}`: a job file holds only `jobs` and `managed_by`"
                ))),
                None => Ok(Doc::Jobs(jobs, managed_by)),
            },
            None if other.is_empty() => Ok(Doc::Jobs(Vec::new(), managed_by)),
            // A bare spec sets its own labels; `managed_by` belongs with a `jobs` map.
            None if managed_by.is_some() => {
                Err(de::Error::custom("`managed_by` goes with a top-level `jobs` map (a bare spec sets `labels`)"))
            }
            None => Ok(Doc::Single(other)),
        }
    }
}

/// The `jobs` map, in file order, refusing a name given twice (which JSON and YAML readers
/// would otherwise settle silently, keeping the last).
struct JobsMap(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for JobsMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JobsMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from job name to job spec")
            }
            fn visit_unit<E: de::Error>(self) -> Result<JobsMap, E> {
                Ok(JobsMap(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JobsMap, A::Error> {
                let mut jobs: Vec<(String, Value)> = Vec::new();
                // A set: a file of 100 000 jobs is read in a fraction of a second, not by
                // comparing each name with every one before it.
                let mut names = std::collections::HashSet::new();
                while let Some(name) = map.next_key::<String>()? {
                    if !names.insert(name.clone()) {
                        return Err(de::Error::custom(format!("job {name:?} is defined twice in this file")));
                    }
                    let value: Value = map.next_value()?;
                    jobs.push((name, value));
                }
                Ok(JobsMap(jobs))
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn jobs_of(name: &str, text: &str) -> Vec<FileJob> {
        parse(Path::new(name), text).unwrap().into_iter().map(|j| j.unwrap()).collect()
    }

    fn job_error(name: &str, text: &str) -> FileError {
        let mut jobs = parse(Path::new(name), text).unwrap();
        assert_eq!(jobs.len(), 1, "one job");
        jobs.remove(0).unwrap_err()
    }

    const TOML: &str = r#"
[jobs.nightly-report]
schedule = "0 3 * * *"
timezone = "Europe/Berlin"
timeout = "10m"

[jobs.nightly-report.task]
kind = "shell"
command = "report.sh"

[jobs.hook.task]
kind = "http"
url = "https://hooks.example.com/x"
[jobs.hook]
schedule = "@hourly"
"#;

    #[test]
    fn omit_defaults_keeps_only_what_the_job_sets() {
        let given = serde_json::json!({"schedule": "0 3 * * *", "timezone": "Europe/Berlin", "timeout": "10m",
            "task": {"kind": "shell", "command": "report.sh", "env": {"A": "1"}}});
        // As the API shows it: every default filled in.
        let shown = serde_json::to_value(JobSpec::from_value(given.clone()).unwrap().redacted()).unwrap();
        assert!(shown.as_object().unwrap().len() > given.as_object().unwrap().len(), "{shown}");
        let omitted = omit_defaults(&shown);
        assert_eq!(omitted, given, "only the fields given remain");
        // The same job when read back.
        let back = serde_json::to_value(JobSpec::from_value(omitted).unwrap().redacted()).unwrap();
        assert_eq!(back, shown);
        // A default value given explicitly is left out too; a spec it cannot read is kept whole.
        let explicit =
            serde_json::json!({"schedule": "@daily", "timezone": "UTC", "task": {"kind": "shell", "command": "x"}});
        assert!(omit_defaults(&explicit).get("timezone").is_none());
        let bad = serde_json::json!({"schedule": "nope"});
        assert_eq!(omit_defaults(&bad), bad);
    }

    #[test]
    fn the_three_formats_read_the_same_jobs() {
        let toml = jobs_of("a.toml", TOML);
        let yaml = jobs_of(
            "a.yaml",
            "jobs:\n  nightly-report:\n    schedule: '0 3 * * *'\n    timezone: Europe/Berlin\n    timeout: 10m\n    \
             task: {kind: shell, command: report.sh}\n  hook:\n    schedule: '@hourly'\n    task:\n      kind: http\n      \
             url: https://hooks.example.com/x\n",
        );
        let json = jobs_of(
            "a.json",
            r#"{"jobs": {"nightly-report": {"schedule": "0 3 * * *", "timezone": "Europe/Berlin", "timeout": "10m",
                "task": {"kind": "shell", "command": "report.sh"}},
                "hook": {"schedule": "@hourly", "task": {"kind": "http", "url": "https://hooks.example.com/x"}}}}"#,
        );
        let names = |jobs: &[FileJob]| {
            let mut n: Vec<(String, Value)> = jobs.iter().map(|j| (j.name.clone(), j.normalized.clone())).collect();
            n.sort_by(|a, b| a.0.cmp(&b.0));
            n
        };
        assert_eq!(names(&toml), names(&yaml));
        assert_eq!(names(&toml), names(&json));
        let report = toml.iter().find(|j| j.name == "nightly-report").unwrap();
        // Defaults are filled in as the API would show them.
        assert_eq!(report.normalized["enabled"], json!(true));
        assert_eq!(report.normalized["concurrency"], json!("allow"));
        assert_eq!(report.normalized["timeout"], json!("10m"));
        assert_eq!(
            report.body,
            json!({"schedule": "0 3 * * *", "timezone": "Europe/Berlin", "timeout": "10m",
            "task": {"kind": "shell", "command": "report.sh"}})
        );
    }

    #[test]
    fn errors_name_the_file_the_job_and_the_field() {
        let e = job_error(
            "jobs/a.toml",
            "[jobs.x]\nschedule = \"@hourly\"\n[jobs.x.task]\nkind = \"shell\"\ncomand = \"ls\"\n",
        );
        assert_eq!(e.file, PathBuf::from("jobs/a.toml"));
        assert_eq!(e.job.as_deref(), Some("x"));
        assert_eq!(e.field.as_deref(), Some("task.comand"));
        assert!(e.message.contains("unknown field"), "{e}");
        let e = job_error(
            "a.yaml",
            "jobs:\n  x:\n    schedule: '@hourly'\n    retries: {max: 1000}\n    task: {kind: shell, command: ls}\n",
        );
        assert_eq!(e.field.as_deref(), Some("retries.max"), "{e}");
        let e =
            job_error("a.json", r#"{"jobs": {"x": {"schedule": "nope", "task": {"kind": "shell", "command": "ls"}}}}"#);
        assert_eq!(e.field.as_deref(), Some("schedule"), "{e}");
        let e = job_error(
            "a.json",
            r#"{"jobs": {"Bad Name": {"schedule": "@hourly", "task": {"kind": "shell", "command": "ls"}}}}"#,
        );
        assert_eq!(e.job.as_deref(), Some("Bad Name"));
        assert!(e.message.contains("is not a job name"), "{e}");
        let e = job_error(
            "a.json",
            r#"{"jobs": {"x": {"schedlue": "@hourly", "task": {"kind": "shell", "command": "ls"}}}}"#,
        );
        assert_eq!(e.field.as_deref(), Some("schedlue"), "{e}");
    }

    #[test]
    fn files_that_cannot_be_read_as_a_whole() {
        let e = parse(Path::new("a.json"), r#"{"jobs": {"x": {}, "x": {}}}"#).unwrap_err();
        assert!(e.message.contains("job \"x\" is defined twice in this file"), "{e}");
        let e =
            parse(Path::new("a.yaml"), "jobs:\n  x: {schedule: '@hourly'}\n  x: {schedule: '@daily'}\n").unwrap_err();
        assert!(e.message.contains("defined twice"), "{e}");
        let e = parse(Path::new("a.toml"), "[jobs.x]\nschedule = \"@hourly\"\n[jobs.x]\n").unwrap_err();
        assert!(e.message.contains("line 3"), "{e}");
        assert!(!e.message.contains('\n'), "one line: {e}");
        let e = parse(Path::new("a.json"), r#"{"jobs": {}, "extra": 1}"#).unwrap_err();
        assert!(e.message.contains("unknown top-level key `extra`"), "{e}");
        let e = parse(Path::new("a.yaml"), "- a\n- b\n").unwrap_err();
        assert!(e.message.contains("a top-level `jobs` map"), "{e}");
        let e = parse(Path::new("Not A Job.json"), r#"{"schedule": "@hourly"}"#).unwrap_err();
        assert!(e.message.contains("named after the file"), "{e}");
        assert!(parse(Path::new("a.yaml"), "# nothing yet\n").unwrap().is_empty());
        assert!(parse(Path::new("a.toml"), "").unwrap().is_empty());
        assert!(parse(Path::new("a.json"), r#"{"jobs": {}}"#).unwrap().is_empty());
    }

    #[test]
    fn a_bare_spec_is_one_job_named_after_the_file() {
        let jobs =
            jobs_of("dir/db-backup.toml", "schedule = \"@daily\"\n[task]\nkind = \"shell\"\ncommand = \"dump\"\n");
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].name, "db-backup");
    }

    #[test]
    fn secrets_come_from_the_environment_or_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "from-a-file\n").unwrap();
        std::env::set_var("ETCRONCTL_TEST_SECRET", "from-the-env");
        let file = dir.path().join("a.toml");
        let text = "[jobs.a]\nschedule = \"@daily\"\n[jobs.a.task]\nkind = \"shell\"\ncommand = \"x\"\n\
                    secret_env = { A = { env = \"ETCRONCTL_TEST_SECRET\" }, B = { file = \"token\" }, C = { keep = true } }\n";
        let jobs: Vec<FileJob> = parse(&file, text).unwrap().into_iter().map(|j| j.unwrap()).collect();
        assert_eq!(
            jobs[0].body["task"]["secret_env"],
            json!({"A": "from-the-env", "B": "from-a-file", "C": null}),
            "a file's trailing newline is not part of the secret"
        );
        assert_eq!(jobs[0].secret_values, vec!["task.secret_env.A", "task.secret_env.B"]);
        assert_eq!(jobs[0].kept_secrets, vec!["task.secret_env.C"]);
        let missing = text.replace("ETCRONCTL_TEST_SECRET", "ETCRONCTL_TEST_UNSET_VARIABLE");
        let e = parse(&file, &missing).unwrap().remove(0).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("task.secret_env.A"), "{e}");
        assert!(e.message.contains("ETCRONCTL_TEST_UNSET_VARIABLE is not set"), "{e}");
        let e = parse(&file, &text.replace("\"token\"", "\"absent\"")).unwrap().remove(0).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("task.secret_env.B"), "{e}");
        assert!(e.message.contains("absent"), "{e}");
    }

    #[test]
    fn secrets_kept_or_given() {
        let text = r#"
[jobs.a.task]
kind = "shell"
command = "x"
secret_env = { PW = { keep = true }, TOKEN = "s3cret" }
[jobs.a]
schedule = "@daily"
"#;
        let jobs = jobs_of("a.toml", text);
        assert_eq!(jobs[0].body["task"]["secret_env"], json!({"PW": null, "TOKEN": "s3cret"}));
        assert_eq!(jobs[0].kept_secrets, vec!["task.secret_env.PW"]);
        assert_eq!(jobs[0].secret_values, vec!["task.secret_env.TOKEN"]);
        assert_eq!(jobs[0].normalized["task"]["secret_env"], json!({"PW": null, "TOKEN": null}), "never shown");
        let yaml = jobs_of("a.yaml", "jobs:\n  a:\n    schedule: '@daily'\n    task: {kind: http, url: 'http://x/', secret_headers: {Authorization: null}}\n");
        assert_eq!(yaml[0].kept_secrets, vec!["task.secret_headers.Authorization"]);
        let grpc = jobs_of(
            "g.toml",
            "[jobs.g]\nschedule = \"@daily\"\n[jobs.g.task]\nkind = \"grpc\"\nendpoint = \"http://h:1\"\n\
             method = \"a.B/C\"\nsecret_metadata = { authorization = { keep = true }, x-key = \"k\" }\n",
        );
        assert_eq!(grpc[0].body["task"]["secret_metadata"], json!({"authorization": null, "x-key": "k"}));
        assert_eq!(grpc[0].kept_secrets, vec!["task.secret_metadata.authorization"]);
        assert_eq!(grpc[0].secret_values, vec!["task.secret_metadata.x-key"]);
        let e = job_error("a.toml", "[jobs.a]\nschedule = \"@daily\"\n[jobs.a.task]\nkind = \"shell\"\ncommand = \"x\"\nsecret_env = { PW = { keep = false } }\n");
        assert_eq!(e.field.as_deref(), Some("task.secret_env.PW"), "{e}");
    }

    #[test]
    fn toml_datetimes_are_strings() {
        let text = "[jobs.a]\nschedule = \"@daily\"\ndescription = 2026-01-01T00:00:00Z\n[jobs.a.task]\nkind = \"shell\"\ncommand = \"x\"\n";
        let jobs = jobs_of("a.toml", text);
        assert_eq!(jobs[0].normalized["description"], json!("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn exports_read_back_as_the_same_jobs() {
        let mut jobs = BTreeMap::new();
        jobs.insert(
            "a".to_owned(),
            json!({"schedule": "@daily", "timezone": "UTC", "enabled": false, "mode": {"sharded": 3},
                   "task": {"kind": "shell", "command": "x", "secret_env": {"PW": null}}, "labels": {"team": "x"}}),
        );
        jobs.insert("b".to_owned(), json!({"schedule": "@hourly", "task": {"kind": "http", "url": "http://h/"}}));
        for format in [Format::Toml, Format::Yaml, Format::Json] {
            let text = render(&jobs, format).unwrap();
            let back = jobs_of(&format!("x.{format}"), &text);
            assert_eq!(back.len(), 2, "{format}: {text}");
            assert_eq!(back[0].kept_secrets, vec!["task.secret_env.PW"], "{format}: {text}");
            for j in &back {
                let original = JobSpec::from_value(jobs[&j.name].clone()).unwrap();
                assert_eq!(j.normalized, serde_json::to_value(original.redacted()).unwrap(), "{format}: {text}");
            }
        }
    }

    #[test]
    fn directories_are_their_job_files_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.yaml", "a.toml", "c.json", "notes.txt", ".hidden.toml", "d.yml"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let files = expand(&[dir.path().to_path_buf(), dir.path().join("a.toml")]).unwrap();
        let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["a.toml", "b.yaml", "c.json", "d.yml"]);
        let empty = tempfile::tempdir().unwrap();
        assert!(expand(&[empty.path().to_path_buf()]).is_err());
        // Named on its own, any file is read (its format from its text); `-` is standard input.
        let named = expand(&[dir.path().join("notes.txt"), PathBuf::from("-")]).unwrap();
        assert_eq!(named, [dir.path().join("notes.txt"), PathBuf::from("-")]);
        assert!(expand(&[dir.path().join("missing.toml")]).is_err());
    }

    #[test]
    fn a_text_without_a_telling_name_is_read_by_its_content() {
        let toml = "[jobs.a]\nschedule = \"@daily\"\n[jobs.a.task]\nkind = \"shell\"\ncommand = \"x\"\n";
        let yaml = "jobs:\n  a:\n    schedule: '@daily'\n    task: {kind: shell, command: x}\n";
        let json = r#"{"jobs": {"a": {"schedule": "@daily", "task": {"kind": "shell", "command": "x"}}}}"#;
        for (text, format) in [(toml, Format::Toml), (yaml, Format::Yaml), (json, Format::Json)] {
            assert_eq!(Format::sniff(text), format, "{text}");
            let jobs = parse(Path::new("-"), text).unwrap();
            assert_eq!(jobs.len(), 1, "{text}");
            assert_eq!(jobs[0].as_ref().unwrap().name, "a");
        }
    }

    #[test]
    fn a_job_in_two_files_names_both() {
        let dir = tempfile::tempdir().unwrap();
        let spec = "schedule = \"@daily\"\n[task]\nkind = \"shell\"\ncommand = \"x\"\n";
        std::fs::write(dir.path().join("a.toml"), format!("[jobs.x]\n{}", spec.replace("[task]", "[jobs.x.task]")))
            .unwrap();
        std::fs::write(dir.path().join("x.toml"), spec).unwrap();
        let e = load(&[dir.path().to_path_buf()]).unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert!(e.0[0].file.ends_with("x.toml"));
        assert!(e.0[0].message.contains("a.toml"), "{}", e.0[0]);
    }
}
