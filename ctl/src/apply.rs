//! `jobs apply` and `import`: make the server's jobs match job files. The plan is pure (files
//! and the server's list in, steps out); carrying it out uses the API's preconditions, so a
//! concurrent edit (console, another apply) is a conflict and never silently overwritten:
//! creates send `If-None-Match: *`, updates and prune deletes `If-Match: <revision read>`.
//!
//! Comparison: each file's spec is parsed with common's `JobSpec` and shown the way the API
//! shows a saved spec (defaults filled in, secret values withheld), then compared with the
//! server's. Secret values can never be compared here (the API does not show them), so a job
//! whose file gives a secret value is sent on every apply, and the master compares: when the
//! value it would store is the one it has, it writes nothing and answers `unchanged`, which is
//! what apply reports. A dry run cannot tell (the master never compares secret values without
//! writing them). A job whose file keeps its secrets (`null` / `{ keep = true }`) compares like
//! any other.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::{segment, Client};
use crate::exit::{ApiError, Exit, FileError, InvalidFiles, Unsuccessful, Usage};
use crate::jobfile::{self, FileJob};

/// A job as the server has it.
#[derive(Debug, Clone, PartialEq)]
pub struct Current {
    /// As the API shows it (secret values `null`).
    pub spec: Value,
    pub revision: i64,
    /// Why the stored value is not a valid spec, when it is not.
    pub invalid: Option<String>,
    /// The operator's pause, as the view's `paused` says it (`by …, since …: reason`).
    pub paused: Option<String>,
}

/// The view's `paused` (`{by, at, until, reason}`) in a few words; `None` when the job is not
/// paused.
fn pause_note(paused: &Value) -> Option<String> {
    if !paused.is_object() {
        return None;
    }
    let mut note = "paused".to_owned();
    if let Some(by) = paused["by"].as_str() {
        let _ = write!(note, " by {by}");
    }
    if let Some(at) = paused["at"].as_str() {
        let _ = write!(note, " since {at}");
    }
    if let Some(until) = paused["until"].as_str() {
        let _ = write!(note, " until {until}");
    }
    if let Some(reason) = paused["reason"].as_str() {
        let _ = write!(note, ": {reason}");
    }
    Some(note)
}

/// The jobs of a `GET /api/jobs` answer by name.
#[must_use]
pub fn current_jobs(list: &Value) -> BTreeMap<String, Current> {
    list["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| {
                    let name = j["name"].as_str()?.to_owned();
                    let current = Current {
                        spec: j["spec"].clone(),
                        revision: j["revision"].as_i64().unwrap_or(0),
                        invalid: j["invalid"].as_str().map(str::to_owned),
                        paused: pause_note(&j["paused"]),
                    };
                    Some((name, current))
                })
                .collect()
        })
        .unwrap_or_default()
}

pub use etcron_model::diff::{diff, Difference};

/// What apply does with one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Create,
    Update {
        revision: i64,
        diff: Vec<Difference>,
        /// Why it is updated when the diff does not say (secret values, an invalid stored value).
        note: Option<String>,
    },
    Unchanged,
    Delete {
        revision: i64,
    },
}

impl Action {
    fn verb(&self, done: bool) -> &'static str {
        match (self, done) {
            (Action::Create, false) => "create",
            (Action::Create, true) => "created",
            (Action::Update { .. }, false) => "update",
            (Action::Update { .. }, true) => "updated",
            (Action::Unchanged, _) => "unchanged",
            (Action::Delete { .. }, false) => "delete",
            (Action::Delete { .. }, true) => "deleted",
        }
    }
}

/// One job's step of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub job: String,
    /// The file it comes from (none for a prune delete).
    pub file: Option<PathBuf>,
    pub action: Action,
    /// The body to PUT.
    pub body: Option<Value>,
    /// The server's job is paused (kept outside the spec: apply never resumes it).
    pub paused: Option<String>,
}

/// The steps that make the server's jobs match `files`; with `prune`, jobs the files do not
/// define are deleted. Refuses (before anything changes) a job that asks to keep a secret the
/// server does not have.
pub fn plan(
    files: &[FileJob],
    current: &BTreeMap<String, Current>,
    prune: Option<&Scope>,
) -> Result<Vec<Step>, InvalidFiles> {
    let mut steps = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        let paused = current.get(&f.name).and_then(|c| c.paused.clone());
        let step = |action| Step {
            job: f.name.clone(),
            file: Some(f.file.clone()),
            action,
            body: Some(f.body.clone()),
            paused: paused.clone(),
        };
        match current.get(&f.name) {
            None => {
                for field in &f.kept_secrets {
                    errors.push(FileError {
                        file: f.file.clone(),
                        job: Some(f.name.clone()),
                        field: Some(field.clone()),
                        message: format!(
                            "no value given (null / {{ keep = true }} keeps the value stored on the server), and job \
                             {:?} does not exist there: write the secret's value into the file (an export cannot \
                             contain secrets)",
                            f.name
                        ),
                    });
                }
                steps.push(step(Action::Create));
            }
            Some(cur) => {
                let changes = diff(&cur.spec, &f.normalized);
                let note = if let Some(why) = &cur.invalid {
                    Some(format!("the stored value is not a valid spec ({why})"))
                } else if !f.secret_values.is_empty() {
                    Some(format!("{SECRETS_UNCOMPARED} ({}): {SECRETS_SENT}", f.secret_values.join(", ")))
                } else {
                    None
                };
                if changes.is_empty() && note.is_none() {
                    steps.push(step(Action::Unchanged));
                } else {
                    steps.push(step(Action::Update { revision: cur.revision, diff: changes, note }));
                }
            }
        }
    }
    if let Some(scope) = prune {
        let defined: std::collections::HashSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
        for (name, cur) in current {
            if !defined.contains(name.as_str()) && scope.covers(&cur.spec) {
                steps.push(Step {
                    job: name.clone(),
                    file: None,
                    action: Action::Delete { revision: cur.revision },
                    body: None,
                    paused: cur.paused.clone(),
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(steps)
    } else {
        Err(InvalidFiles(errors))
    }
}

/// Which of the server's jobs `--prune` may delete (when the files do not define them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// `-l k=v`: jobs with all of these labels.
    pub selector: Vec<(String, String)>,
    /// The files' `managed_by`: jobs whose `managed-by` label is one of these.
    pub owners: std::collections::BTreeSet<String>,
    /// `--prune-all`: every job.
    pub all: bool,
}

impl Scope {
    /// Whether a server job (its spec as the API shows it) is within the scope.
    #[must_use]
    pub fn covers(&self, spec: &Value) -> bool {
        let labels = &spec["labels"];
        let selected = self.selector.iter().all(|(k, v)| labels[k].as_str() == Some(v.as_str()));
        let owned = self.owners.is_empty()
            || labels[jobfile::MANAGED_BY].as_str().is_some_and(|owner| self.owners.contains(owner));
        self.all || (selected && owned)
    }

    /// What the scope says, for messages.
    fn describe(&self) -> String {
        if self.all {
            return "every job".to_owned();
        }
        let mut parts: Vec<String> = self.selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !self.owners.is_empty() {
            let owners: Vec<&str> = self.owners.iter().map(String::as_str).collect();
            parts.push(format!("{}={}", jobfile::MANAGED_BY, owners.join("|")));
        }
        format!("jobs with {}", parts.join(", "))
    }
}

/// `--prune`'s flags: with a selector, or for every job; the files' `managed_by` adds to the scope.
#[derive(Debug, Clone, Default)]
pub struct PruneFlags {
    pub prune: bool,
    pub selector: Vec<(String, String)>,
    pub all: bool,
}

impl PruneFlags {
    /// The scope to prune in, `None` without `--prune`; never the whole cluster unless asked.
    fn scope(&self, files: &[FileJob]) -> Result<Option<Scope>, Usage> {
        if !self.prune && !self.all {
            if !self.selector.is_empty() {
                return Err(Usage("-l/--selector only scopes --prune; add --prune".to_owned()));
            }
            return Ok(None);
        }
        let owners = files.iter().filter_map(|f| f.managed_by.clone()).collect();
        let scope = Scope { selector: self.selector.clone(), owners, all: self.all };
        if scope.selector.is_empty() && scope.owners.is_empty() && !scope.all {
            return Err(Usage(
                "--prune needs a scope: -l key=value (jobs with those labels), `managed_by = \"...\"` in the job \
                 files (jobs with that managed-by label), or --prune-all for every job on the server"
                    .to_owned(),
            ));
        }
        Ok(Some(scope))
    }
}

/// How `apply` runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub prune: PruneFlags,
    pub dry_run: bool,
    pub json: bool,
    /// `-v`: a line for each unchanged job too.
    pub verbose: bool,
}

/// What became of one step.
#[derive(Debug)]
struct Outcome {
    step: Step,
    /// The job's revision after the change.
    revision: Option<i64>,
    error: Option<anyhow::Error>,
}

/// What the master did with one change it took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Done {
    /// The job's revision after it (none for a delete, or a step that sent nothing).
    revision: Option<i64>,
    /// The master found the job already as sent (a job sent for its secret values, which were
    /// the stored ones) and wrote nothing.
    unchanged: bool,
}

/// Counts for the summary line.
#[derive(Debug, Default)]
struct Summary {
    created: usize,
    updated: usize,
    unchanged: usize,
    deleted: usize,
    failed: usize,
}

impl Summary {
    fn of(outcomes: &[Outcome]) -> Self {
        let mut s = Summary::default();
        for o in outcomes {
            if o.error.is_some() {
                s.failed += 1;
                continue;
            }
            match o.step.action {
                Action::Create => s.created += 1,
                Action::Update { .. } => s.updated += 1,
                Action::Unchanged => s.unchanged += 1,
                Action::Delete { .. } => s.deleted += 1,
            }
        }
        s
    }

    fn line(&self, dry_run: bool) -> String {
        let mut line = format!(
            "{} created, {} updated, {} unchanged, {} deleted",
            self.created, self.updated, self.unchanged, self.deleted
        );
        if self.failed > 0 {
            let _ = write!(line, ", {} failed", self.failed);
        }
        if dry_run {
            line.push_str(" (dry run: nothing was changed)");
        }
        line
    }
}

/// `jobs apply -f ...` / `import FILE`.
pub async fn apply(client: &Client, paths: &[PathBuf], opts: Options) -> anyhow::Result<()> {
    apply_jobs(client, jobfile::load(paths)?, opts).await
}

/// `apply` of jobs read by other means (`import --crontab`).
pub async fn apply_jobs(client: &Client, files: Vec<FileJob>, opts: Options) -> anyhow::Result<()> {
    let scope = opts.prune.scope(&files)?;
    if let (Some(scope), true) = (&scope, files.is_empty()) {
        return Err(Usage(format!(
            "the files define no job: --prune would delete {}; refusing (delete jobs with `jobs rm`)",
            scope.describe()
        ))
        .into());
    }
    let list = crate::jobs::list_all(client, None).await.context("listing the jobs on the server")?;
    let steps = plan(&files, &current_jobs(&list), scope.as_ref())?;
    let owners: BTreeMap<&str, Option<&str>> =
        files.iter().map(|f| (f.name.as_str(), f.managed_by.as_deref())).collect();
    overwrite_warnings(client, &steps, &owners).await;
    if let Some(scope) = &scope {
        let deletes = steps.iter().filter(|s| matches!(s.action, Action::Delete { .. })).count();
        eprintln!("etcronctl: pruning among {}: {deletes} not in the files", scope.describe());
    }
    let mut out = Printer { json: opts.json, done: !opts.dry_run, verbose: opts.verbose };
    if opts.dry_run {
        let outcomes: Vec<Outcome> =
            steps.into_iter().map(|step| Outcome { step, revision: None, error: None }).collect();
        for o in &outcomes {
            out.step(o)?;
        }
        return out.finish(&outcomes, true);
    }
    let mut outcomes = Vec::new();
    let (mut writes, deletes): (Vec<Step>, Vec<Step>) =
        steps.into_iter().partition(|s| !matches!(s.action, Action::Delete { .. }));
    let mut sender = Sender { client, batch: true };
    // A save refused as a dependency cycle may only be one with the stored jobs that a later
    // request changes too (a → b becoming b → a across batches): retry those after the
    // others, while that helps.
    loop {
        let mut deferred = Vec::new();
        let mut progress = false;
        let last_pass = writes.len();
        let results = sender.send(&writes).await;
        for (step, result) in writes.into_iter().zip(results) {
            match result {
                Err(e) if is_cycle(&e) && last_pass > 1 => deferred.push((step, e)),
                result => {
                    progress = true;
                    let outcome = finished(step, result);
                    out.step(&outcome)?;
                    outcomes.push(outcome);
                }
            }
        }
        if deferred.is_empty() {
            break;
        }
        if !progress {
            for (step, e) in deferred {
                let outcome = finished(step, Err(e));
                out.step(&outcome)?;
                outcomes.push(outcome);
            }
            break;
        }
        writes = deferred.into_iter().map(|(s, _)| s).collect();
    }
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    if failed > 0 && !deletes.is_empty() {
        eprintln!("etcronctl: not pruning {} job(s): {failed} change(s) failed", deletes.len());
    } else {
        let results = sender.send(&deletes).await;
        for (step, result) in deletes.into_iter().zip(results) {
            let outcome = finished(step, result);
            out.step(&outcome)?;
            outcomes.push(outcome);
        }
    }
    out.finish(&outcomes, false)
}

/// Why a job whose file gives secret values is planned as an update on every apply: secret
/// values are never shown, and the master only compares them on a real save (where a wrong
/// value overwrites the stored one), never in a dry run (which would confirm guesses for free).
const SECRETS_UNCOMPARED: &str = "secret values cannot be read back to compare";
/// What happens to such a job when applied.
const SECRETS_SENT: &str = "sent; the master writes the job only if they differ from the stored ones";

/// Changes per `POST /api/batch` request (the API takes at most 500).
const BATCH_CHANGES: usize = 500;
/// Bytes of specs per batch request (the API reads at most 1 MiB of body).
const BATCH_BYTES: usize = 768 * 1024;

/// Sends steps: through `POST /api/batch`, as few requests as they fit in, or one request per
/// job to a master that has no batch route (an older version, during an upgrade).
struct Sender<'a> {
    client: &'a Client,
    batch: bool,
}

impl Sender<'_> {
    /// The result of each step, in order: what the master did (the default when nothing was
    /// sent, or a prune found the job gone already). Only the steps that change something are
    /// sent, one request after another (several in flight were slower: the master and etcd
    /// share the cores, `etcron-bench apply`).
    async fn send(&mut self, steps: &[Step]) -> Vec<anyhow::Result<Done>> {
        let sending: Vec<&Step> = steps.iter().filter(|s| change(s).is_some()).collect();
        let mut sent = Vec::with_capacity(sending.len());
        for group in batches(&sending) {
            if self.batch {
                match batch(self.client, group).await {
                    Ok(Some(done)) => {
                        sent.extend(done);
                        continue;
                    }
                    Ok(None) => self.batch = false,
                    Err(e) => {
                        // The whole request failed: it is every change's answer.
                        let api = e.downcast_ref::<ApiError>().cloned();
                        sent.extend(group.iter().map(|_| match &api {
                            Some(api) => Err(api.clone().into()),
                            None => Err(anyhow::anyhow!("{e:#}")),
                        }));
                        continue;
                    }
                }
            }
            for step in group {
                sent.push(match step.action {
                    Action::Delete { .. } => delete(self.client, step).await,
                    _ => write(self.client, step).await,
                });
            }
        }
        let mut sent = sent.into_iter();
        steps
            .iter()
            .map(|s| if change(s).is_some() { sent.next().unwrap_or(Ok(Done::default())) } else { Ok(Done::default()) })
            .collect()
    }
}

/// `steps` cut into groups one batch request takes.
fn batches<'a>(steps: &'a [&'a Step]) -> Vec<&'a [&'a Step]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, step) in steps.iter().enumerate() {
        let size = step.body.as_ref().map_or(64, |b| b.to_string().len() + 64);
        if i > start && (i - start == BATCH_CHANGES || bytes + size > BATCH_BYTES) {
            out.push(&steps[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < steps.len() {
        out.push(&steps[start..]);
    }
    out
}

/// One `POST /api/batch` of `steps`; `None` when the master has no such route.
async fn batch(client: &Client, steps: &[&Step]) -> anyhow::Result<Option<Vec<anyhow::Result<Done>>>> {
    let changes: Vec<(usize, Value)> =
        steps.iter().enumerate().filter_map(|(i, s)| change(s).map(|c| (i, c))).collect();
    if changes.is_empty() {
        return Ok(Some(steps.iter().map(|_| Ok(Done::default())).collect()));
    }
    let body = json!({ "changes": changes.iter().map(|(_, c)| c).collect::<Vec<_>>() });
    let reply = match client.send(Method::POST, "/api/batch", Some(&body), &[]).await {
        Err(e) if e.downcast_ref::<ApiError>().is_some_and(|a| a.status == 404 && a.code == "not_found") => {
            return Ok(None);
        }
        other => other?,
    };
    let answers = reply.body["results"].as_array().cloned().unwrap_or_default();
    if answers.len() != changes.len() {
        anyhow::bail!("the batch answered {} results for {} changes", answers.len(), changes.len());
    }
    let mut results: Vec<anyhow::Result<Done>> = steps.iter().map(|_| Ok(Done::default())).collect();
    for ((i, _), answer) in changes.iter().zip(answers) {
        results[*i] = answered(steps[*i], &answer);
    }
    Ok(Some(results))
}

/// A step as a batch change (a put names its file, kept in the saved version); `None` for a
/// step that changes nothing.
fn change(step: &Step) -> Option<Value> {
    let source = source_note(step);
    match &step.action {
        Action::Create => {
            Some(json!({"job": step.job, "op": "put", "spec": step.body, "if_none_match": "*", "source": source}))
        }
        Action::Update { revision, .. } => {
            Some(json!({"job": step.job, "op": "put", "spec": step.body, "if_match": revision, "source": source}))
        }
        Action::Delete { revision } => Some(json!({"job": step.job, "op": "delete", "if_match": revision})),
        Action::Unchanged => None,
    }
}

/// The file of a step as the master keeps it in the saved version: its path as given, its
/// end only when longer than the master keeps (`…/jobs/x.toml`).
fn source_note(step: &Step) -> Option<String> {
    let path = step.file.as_ref()?.display().to_string();
    let max = etcron_model::stored::MAX_CLIENT_NOTE_BYTES - '…'.len_utf8();
    if path.len() <= etcron_model::stored::MAX_CLIENT_NOTE_BYTES {
        return Some(path);
    }
    let start = (path.len() - max..path.len()).find(|&i| path.is_char_boundary(i)).unwrap_or(path.len());
    Some(format!("…{}", &path[start..]))
}

/// The result of one change in a batch's answer (a prune's 404: already gone, fine).
fn answered(step: &Step, answer: &Value) -> anyhow::Result<Done> {
    let status = answer["status"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or(0);
    if (200..300).contains(&status) {
        warn(&step.job, &answer["warnings"]);
        return Ok(Done { revision: answer["revision"].as_i64(), unchanged: answer["outcome"] == "unchanged" });
    }
    if status == 404 && matches!(step.action, Action::Delete { .. }) {
        return Ok(Done::default());
    }
    let error = json!({ "error": answer["error"] });
    Err(ApiError::from_body(status, &error, &answer.to_string()).into())
}

/// A step as the master answered it: an update it found unchanged (the secret values sent were
/// the stored ones) is reported unchanged.
fn finished(mut step: Step, result: anyhow::Result<Done>) -> Outcome {
    match result {
        Ok(Done { revision, unchanged }) => {
            if unchanged && matches!(step.action, Action::Update { .. }) {
                step.action = Action::Unchanged;
            }
            Outcome { step, revision, error: None }
        }
        Err(e) => Outcome { step, revision: None, error: Some(e) },
    }
}

fn is_cycle(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ApiError>().is_some_and(|a| a.code == "dependency_cycle")
}

/// Creates or replaces a job with the precondition of its step; the new revision, and whether
/// the master found it unchanged.
async fn write(client: &Client, step: &Step) -> anyhow::Result<Done> {
    let path = format!("/api/jobs/{}", segment(&step.job));
    let mut headers = match &step.action {
        Action::Create => vec![("If-None-Match", "*".to_owned())],
        Action::Update { revision, .. } => vec![("If-Match", revision.to_string())],
        Action::Unchanged | Action::Delete { .. } => return Ok(Done::default()),
    };
    // A header is visible ASCII: a path with other characters is not named.
    if let Some(source) = source_note(step).filter(|s| s.bytes().all(|b| b.is_ascii_graphic() || b == b' ')) {
        headers.push(("X-Etcron-Source", source));
    }
    let reply = client.send(Method::PUT, &path, step.body.as_ref(), &headers).await?;
    warn(&step.job, &reply.body["warnings"]);
    Ok(Done { revision: reply.body["revision"].as_i64(), unchanged: reply.body["unchanged"] == true })
}

/// History reads (`GET /api/jobs/{job}/history`) in flight at once for the overwrite warnings.
const HISTORY_READS_IN_FLIGHT: usize = 8;

/// The overwrite warning of each update (below), printed in the plan's order; the updates'
/// histories are read [`HISTORY_READS_IN_FLIGHT`] at a time.
async fn overwrite_warnings(client: &Client, steps: &[Step], owners: &BTreeMap<&str, Option<&str>>) {
    use futures::StreamExt as _;
    let updates = steps.iter().filter(|s| matches!(s.action, Action::Update { .. }));
    let mut warnings = futures::stream::iter(updates)
        .map(|step| overwrite_warning(client, step, owners.get(step.job.as_str()).copied().flatten()))
        .buffered(HISTORY_READS_IN_FLIGHT);
    while let Some(warning) = warnings.next().await {
        if let Some(line) = warning {
            eprintln!("{line}");
        }
    }
}

/// Warns (stderr) when an update overwrites a spec last saved by something else than an apply
/// of the same owner: the console or `jobs edit` (a `PUT`), a rollback or resume, or a file or
/// crontab of another `managed-by` owner, naming who saved it and when. The job's newest saved
/// version says (`GET /api/jobs/{job}/history`); when it cannot be read, a note says so.
async fn overwrite_warning(client: &Client, step: &Step, owner: Option<&str>) -> Option<String> {
    let url = format!("/api/jobs/{}/history", segment(&step.job));
    let history = match client.get(&url).await {
        Ok(h) => h,
        Err(e) => {
            return Some(format!(
                "etcronctl: note: job {:?}: who saved it last cannot be read ({e:#}); overwriting it unchecked",
                step.job
            ));
        }
    };
    let current = history["versions"].as_array().and_then(|v| v.iter().find(|v| v["current"] == true))?;
    let via = current["via"].as_str().unwrap_or_default();
    let stored_owner = current["spec"]["labels"][jobfile::MANAGED_BY].as_str();
    let by_apply = via == "POST /api/batch";
    if by_apply && stored_owner == owner {
        return None;
    }
    let how = if by_apply {
        format!(
            "an apply of {}{}",
            stored_owner.map_or_else(|| "files without managed_by".to_owned(), |o| format!("managed_by {o:?}")),
            current["source"].as_str().map(|f| format!(" from {f}")).unwrap_or_default()
        )
    } else {
        crate::history::saved_how(current)
    };
    Some(format!(
        "etcronctl: warning: job {:?}: overwriting what {} saved at {} ({how}){}",
        step.job,
        current["by"].as_str().unwrap_or("someone"),
        current["at"].as_str().unwrap_or("an unknown time"),
        if by_apply { "" } else { ": changes made since then outside these files are lost (jobs history shows them)" }
    ))
}

/// Prints a save's warnings (`[{"field","message"}]`, e.g. alerts no target would send) on
/// stderr: the save went through, but an operator should hear of them.
pub fn warn(job: &str, warnings: &Value) {
    for w in warnings.as_array().into_iter().flatten() {
        eprintln!(
            "etcronctl: warning: job {job:?}: {}: {}",
            w["field"].as_str().unwrap_or_default(),
            w["message"].as_str().unwrap_or_default()
        );
    }
}

/// Deletes a job not in the files, only at the revision read (404: already gone, fine).
async fn delete(client: &Client, step: &Step) -> anyhow::Result<Done> {
    let Action::Delete { revision } = step.action else { return Ok(Done::default()) };
    let path = format!("/api/jobs/{}", segment(&step.job));
    match client.send(Method::DELETE, &path, None, &[("If-Match", revision.to_string())]).await {
        Err(e) if e.downcast_ref::<ApiError>().is_some_and(|a| a.status == 404) => Ok(Done::default()),
        other => other.map(|_| Done::default()),
    }
}

/// Prints steps as they happen (table) or all at the end (JSON).
struct Printer {
    json: bool,
    /// Past tense (changes made) or plan (dry run).
    done: bool,
    /// `-v`: unchanged jobs too (else only those with something to say).
    verbose: bool,
}

impl Printer {
    fn step(&mut self, o: &Outcome) -> anyhow::Result<()> {
        let where_ = o.step.file.as_ref().map(|f| format!(" ({})", f.display())).unwrap_or_default();
        if let Some(e) = &o.error {
            eprintln!("etcronctl: job {:?}{where_}: {e:#}", o.step.job);
        }
        if self.json {
            return Ok(());
        }
        // Changes only, unless -v: an unchanged job is a line when it has something to say.
        let quiet = o.step.action == Action::Unchanged && o.error.is_none() && o.step.paused.is_none();
        if quiet && !self.verbose {
            return Ok(());
        }
        let mut text = String::new();
        let verb = if o.error.is_some() { "failed" } else { o.step.action.verb(self.done) };
        let _ = writeln!(text, "{verb:<10} {}{where_}", o.step.job);
        if let Action::Update { diff, note, .. } = &o.step.action {
            for d in diff {
                let _ = writeln!(text, "{}", d.render("    "));
            }
            if let Some(note) = note {
                let _ = writeln!(text, "    ({note})");
            }
        }
        if let (Some(paused), false) = (&o.step.paused, matches!(o.step.action, Action::Delete { .. })) {
            let _ = writeln!(text, "    ({paused} on the server; apply leaves it paused: `jobs resume` resumes it)");
        }
        std::io::stdout().write_all(text.as_bytes())?;
        Ok(())
    }

    fn finish(&mut self, outcomes: &[Outcome], dry_run: bool) -> anyhow::Result<()> {
        let summary = Summary::of(outcomes);
        let mut stdout = std::io::stdout();
        if self.json {
            let changes: Vec<Value> = outcomes
                .iter()
                .map(|o| {
                    let (diff, note) = match &o.step.action {
                        Action::Update { diff, note, .. } => (
                            diff.iter().map(|d| json!({"path": d.path, "old": d.old, "new": d.new})).collect(),
                            note.clone(),
                        ),
                        _ => (Vec::new(), None),
                    };
                    json!({
                        "job": o.step.job,
                        "file": o.step.file.as_ref().map(|f| f.display().to_string()),
                        "action": o.step.action.verb(false),
                        "paused": o.step.paused,
                        "applied": !dry_run && o.error.is_none() && o.step.action != Action::Unchanged,
                        "diff": diff,
                        "note": note,
                        "revision": o.revision,
                        "error": o.error.as_ref().map(|e| format!("{e:#}")),
                    })
                })
                .collect();
            let body = json!({
                "dry_run": dry_run,
                "changes": changes,
                "summary": {"created": summary.created, "updated": summary.updated, "unchanged": summary.unchanged,
                            "deleted": summary.deleted, "failed": summary.failed},
            });
            crate::print_doc(&body)?;
        } else {
            writeln!(stdout, "{}", summary.line(dry_run))?;
        }
        let Some((o, e)) = outcomes.iter().find_map(|o| o.error.as_ref().map(|e| (o, e))) else {
            if dry_run && summary.created + summary.updated + summary.deleted > 0 {
                // Printed above; the exit code tells scripts that applying would change something.
                return Err(Unsuccessful { exit: Exit::Pending, what: "changes pending".to_owned() }.into());
            }
            return Ok(());
        };
        // Each failure was printed as it happened; the first one's decides the exit code.
        let what =
            format!("{} of {} change(s) failed, the first for job {:?}", summary.failed, outcomes.len(), o.step.job);
        Err(match e.chain().find_map(|c| c.downcast_ref::<ApiError>()) {
            Some(api) => anyhow::Error::new(api.clone()).context(what),
            None => anyhow::anyhow!("{e:#}").context(what),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_pause_note_says_until_when() {
        let note = pause_note(&json!({"by": "ops", "at": "t0", "until": "2026-11-28T08:00:00Z", "reason": "db"}));
        assert_eq!(note.as_deref(), Some("paused by ops since t0 until 2026-11-28T08:00:00Z: db"));
        assert_eq!(
            pause_note(&json!({"by": null, "at": null, "until": null, "reason": null})).as_deref(),
            Some("paused")
        );
        assert_eq!(pause_note(&Value::Null), None);
    }
    use std::path::Path;

    #[test]
    fn batches_hold_at_most_500_changes_and_768_kib() {
        let step = |i: usize, bytes: usize| Step {
            job: format!("j{i}"),
            file: None,
            action: Action::Create,
            body: Some(json!({ "pad": "x".repeat(bytes) })),
            paused: None,
        };
        let small: Vec<Step> = (0..1200).map(|i| step(i, 10)).collect();
        let small: Vec<&Step> = small.iter().collect();
        assert_eq!(batches(&small).iter().map(|b| b.len()).collect::<Vec<_>>(), vec![500, 500, 200]);
        let large: Vec<Step> = (0..30).map(|i| step(i, 60 * 1024)).collect();
        let large: Vec<&Step> = large.iter().collect();
        let sizes: Vec<usize> = batches(&large).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, vec![12, 12, 6], "12 specs of 60 KiB fit in 768 KiB");
        assert!(batches(&[]).is_empty());
        let one_huge = step(0, 900 * 1024);
        assert_eq!(batches(&[&one_huge]).len(), 1, "a spec over the budget still goes, alone");
    }

    fn file_jobs(text: &str) -> Vec<FileJob> {
        jobfile::parse(Path::new("jobs.json"), text).unwrap().into_iter().map(|j| j.unwrap()).collect()
    }

    fn server(jobs: &[(&str, Value, i64)]) -> BTreeMap<String, Current> {
        let list = json!({"jobs": jobs.iter().map(|(n, spec, rev)| json!({"name": n, "spec": spec, "revision": rev})).collect::<Vec<_>>()});
        current_jobs(&list)
    }

    /// A spec as the API shows it after saving `{"schedule", "task": shell command}`.
    fn shown(schedule: &str, command: &str) -> Value {
        let spec = etcron_model::spec::JobSpec::from_value(
            json!({"schedule": schedule, "task": {"kind": "shell", "command": command}}),
        )
        .unwrap();
        serde_json::to_value(spec.redacted()).unwrap()
    }

    #[test]
    fn plans_create_update_unchanged_and_prune() {
        let files = file_jobs(
            r#"{"jobs": {
                "new": {"schedule": "@daily", "task": {"kind": "shell", "command": "a"}},
                "same": {"schedule": "@daily", "task": {"kind": "shell", "command": "b"}},
                "changed": {"schedule": "@hourly", "task": {"kind": "shell", "command": "c2"}, "labels": {"t": "x"}}
            }}"#,
        );
        let current = server(&[
            ("same", shown("@daily", "b"), 10),
            ("changed", shown("@hourly", "c1"), 11),
            ("gone", shown("@daily", "d"), 12),
        ]);
        let steps = plan(&files, &current, None).unwrap();
        let actions: Vec<(&str, &Action)> = steps.iter().map(|s| (s.job.as_str(), &s.action)).collect();
        assert_eq!(actions[0], ("new", &Action::Create));
        assert_eq!(actions[1], ("same", &Action::Unchanged));
        let Action::Update { revision, diff, note } = actions[2].1 else { panic!("{actions:?}") };
        assert_eq!((*revision, note), (11, &None));
        let lines: Vec<String> = diff.iter().map(ToString::to_string).collect();
        assert_eq!(lines, ["+ labels: {\"t\":\"x\"}", "~ task.command: \"c1\" → \"c2\""]);
        assert_eq!(steps.len(), 3, "no prune: gone stays");
        let all = Scope { all: true, ..Scope::default() };
        let steps = plan(&files, &current, Some(&all)).unwrap();
        assert_eq!(steps[3].action, Action::Delete { revision: 12 });
        assert_eq!(steps[3].job, "gone");
        let other_team = Scope { selector: vec![("team".into(), "ops".into())], ..Scope::default() };
        assert_eq!(plan(&files, &current, Some(&other_team)).unwrap().len(), 3, "gone has no team=ops label");
    }

    #[test]
    fn secrets_given_are_always_sent_and_kept_ones_compare() {
        let files = file_jobs(
            r#"{"jobs": {
                "given": {"schedule": "@daily", "task": {"kind": "shell", "command": "a", "secret_env": {"PW": "x"}}},
                "kept": {"schedule": "@daily", "task": {"kind": "shell", "command": "a", "secret_env": {"PW": null}}}
            }}"#,
        );
        let mut with_secret = shown("@daily", "a");
        with_secret["task"]["secret_env"] = json!({"PW": null});
        let current = server(&[("given", with_secret.clone(), 3), ("kept", with_secret, 4)]);
        let steps = plan(&files, &current, None).unwrap();
        let Action::Update { diff, note, .. } = &steps[0].action else { panic!("{steps:?}") };
        assert!(diff.is_empty());
        assert!(note.as_deref().unwrap().contains("task.secret_env.PW"), "{note:?}");
        assert_eq!(steps[1].action, Action::Unchanged);
        // Keeping a secret of a job the server does not have is refused before any change.
        let e = plan(&files, &BTreeMap::new(), None).unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.0[0].job.as_deref(), Some("kept"));
        assert_eq!(e.0[0].field.as_deref(), Some("task.secret_env.PW"));
    }

    #[test]
    fn an_invalid_stored_value_is_replaced() {
        let files = file_jobs(r#"{"jobs": {"x": {"schedule": "@daily", "task": {"kind": "shell", "command": "a"}}}}"#);
        let list =
            json!({"jobs": [{"name": "x", "spec": shown("@daily", "a"), "revision": 5, "invalid": "schedule: bad"}]});
        let steps = plan(&files, &current_jobs(&list), None).unwrap();
        let Action::Update { note, .. } = &steps[0].action else { panic!("{steps:?}") };
        assert!(note.as_deref().unwrap().contains("schedule: bad"));
    }

    #[test]
    fn an_update_the_master_found_unchanged_is_reported_unchanged() {
        let update = Step {
            job: "deploy".to_owned(),
            file: None,
            action: Action::Update { revision: 4, diff: Vec::new(), note: Some(SECRETS_SENT.to_owned()) },
            body: Some(json!({})),
            paused: None,
        };
        let kept = json!({"job": "deploy", "op": "put", "status": 200, "outcome": "unchanged", "revision": 4});
        let written = json!({"job": "deploy", "op": "put", "status": 200, "outcome": "updated", "revision": 9});
        assert_eq!(answered(&update, &kept).unwrap(), Done { revision: Some(4), unchanged: true });
        assert_eq!(answered(&update, &written).unwrap(), Done { revision: Some(9), unchanged: false });
        let outcomes =
            [finished(update.clone(), answered(&update, &kept)), finished(update.clone(), answered(&update, &written))];
        assert_eq!(outcomes[0].step.action, Action::Unchanged);
        assert!(matches!(outcomes[1].step.action, Action::Update { .. }));
        let s = Summary::of(&outcomes);
        assert_eq!((s.updated, s.unchanged), (1, 1));
        // Only an update becomes unchanged: a create the master answered otherwise stays one.
        let create = Step { action: Action::Create, ..update };
        assert_eq!(finished(create, Ok(Done { revision: Some(5), unchanged: true })).step.action, Action::Create);
    }

    #[test]
    fn the_summary_line() {
        let s = Summary { created: 1, updated: 2, unchanged: 3, deleted: 0, failed: 0 };
        assert_eq!(s.line(false), "1 created, 2 updated, 3 unchanged, 0 deleted");
        assert_eq!(s.line(true), "1 created, 2 updated, 3 unchanged, 0 deleted (dry run: nothing was changed)");
        let s = Summary { failed: 1, ..Summary::default() };
        assert_eq!(s.line(false), "0 created, 0 updated, 0 unchanged, 0 deleted, 1 failed");
    }
}
