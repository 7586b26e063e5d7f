//! Job writes: the one place that saves and deletes job specs in etcd. A write carries its
//! precondition (`If-Match: <revision>` or `If-None-Match: *`); a save fills in withheld
//! secrets from the stored spec, checks the stored size and refuses a dependency cycle. One
//! write (`PUT`/`DELETE /api/jobs/{job}`) and many (`POST /api/batch`, what `etcronctl apply`
//! sends) take the same path: as few etcd transactions as the changes fit in, each change a
//! nested transaction under its own precondition, so each one succeeds or fails on its own.
//!
//! A save whose value as stored (secrets kept, defaults filled in) is byte for byte the value
//! stored now writes nothing: no put, no new revision, no saved version; workers see no change.
//! That is decided against the job read at one revision and its transaction still carries the
//! compare the write would have had, pinned to the revision read, so a job changed meanwhile is
//! refused as the write would be, or compared again when the write would have gone through. A
//! dry run ([`JobStore::plan`]) never compares secret values; a real save may (docs/security.md).
//!
//! The dependency rule: when any save in the batch gives its job dependents (`on_success` /
//! `on_failure`), every job is read at one revision R, the preconditions are decided against
//! that read, the graph with every accepted change applied must have no cycle through a saved
//! job, and each transaction commits only if no key under the jobs prefix was written after R
//! (or after the previous transaction of the batch). When one was, what is left is read and
//! checked again, a few times. Deletes only remove edges, so they never need the check.
//!
//! Teams: every write is made on behalf of a request's [`Scope`]. A caller without the global
//! role the route needs has each job read first; the stored job's team must be one it holds
//! that role on (a job it cannot see is a missing job to it: a delete is 404, a save is refused
//! as a taken name), a save's `team` too, and the write is then guarded on the revision read,
//! so a job moved to another team meanwhile is never written on the strength of the old team.
//!
//! The parts: `txn` builds and commits the transactions, `checks` decides what is refused,
//! `cleanup` removes what goes with a job or an old saved version; every refusal is a
//! [`JobStoreError`], which becomes the API's answer (`From<JobStoreError> for ApiError`).

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use etcd_client::Client;
use etcron_model::keys::Keys;
use etcron_model::now_ms;
use etcron_model::spec::{JobSpec, SpecError, MAX_SPEC_BYTES};
use etcron_model::stored::{Pause, SpecVersion};

use crate::access::Scope;
use crate::change_limits::Throttled;
use crate::error::{ApiError, EtcdFailure};

mod checks;
mod cleanup;
pub mod commands;
mod dependencies;
mod quota;
mod txn;
use checks::{check_write, decide_locally, has_dependents, prepare, teams_checked};
use dependencies::JobTeams;

/// Changes written per etcd transaction (etcd refuses more than 128 operations per level of a
/// transaction by default).
pub const TXN_CHANGES: usize = 100;
/// Bytes of job values per transaction, under etcd's default request limit of 1.5 MiB.
pub const TXN_BYTES: usize = 1024 * 1024;
/// Times a batch with dependencies re-reads the jobs and checks again when other jobs were
/// saved between its read and its write.
const DEPENDENCY_CHECK_ATTEMPTS: u64 = 5;

/// The client's precondition on a write: `If-Match: <revision>` or `If-None-Match: *`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Precondition {
    pub expected: Option<i64>,
    pub create_only: bool,
}

#[derive(Debug, Clone)]
pub enum Change {
    Put(Box<JobSpec>),
    Delete,
}

/// Who writes, and through which request: what each saved version of a spec records
/// (`{ns}/history/{job}/…`, written with the save).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub by: String,
    /// `PUT /api/jobs/{job}`, `POST /api/batch`, …
    pub via: String,
    pub request_id: Option<String>,
    /// A rollback: the revision it saves again.
    pub restored: Option<i64>,
    /// The tool, as the client says (`X-Etcron-Client`).
    pub client: Option<String>,
}

impl Origin {
    /// The key and record of the saved version of `job` holding `value`, to put with the save.
    #[must_use]
    pub fn entry(&self, keys: &Keys, job: &str, value: &[u8], source: Option<&str>) -> (String, Vec<u8>) {
        (keys.history(job, &format!("{:016x}", rand::random::<u64>())), self.version(value, source))
    }

    /// The version record of a save of `value` (secrets withheld) from file `source`.
    fn version(&self, value: &[u8], source: Option<&str>) -> Vec<u8> {
        let spec = serde_json::from_slice(value).map(etcron_model::spec::redacted_json).unwrap_or_default();
        let version = SpecVersion {
            spec,
            by: self.by.clone(),
            at_ms: now_ms(),
            via: self.via.clone(),
            request_id: self.request_id.clone(),
            restored: self.restored,
            client: self.client.clone(),
            source: source.map(str::to_owned),
        };
        serde_json::to_vec(&version).unwrap_or_default()
    }
}

/// One job to save or delete.
#[derive(Debug, Clone)]
pub struct Write {
    pub job: String,
    pub change: Change,
    pub precondition: Precondition,
    /// The file the spec came from, as the client says: kept in the saved version.
    pub source: Option<String>,
}

/// What a write did.
#[derive(Debug)]
pub enum Written {
    Saved {
        created: bool,
        revision: i64,
        created_revision: i64,
        /// The value as stored (secrets kept, defaults filled in).
        value: Vec<u8>,
        /// The spec it holds, so that answers need not parse it again.
        spec: Box<JobSpec>,
        /// The job's pause as the save found it (a save never changes it).
        pause: Option<Pause>,
        /// The value it replaced, for the audit log.
        before: Option<Vec<u8>>,
        /// The stored value already was `value`: nothing was written (no new revision, no
        /// saved version), `revision` is the job's revision as it stays.
        unchanged: bool,
    },
    Deleted {
        before: Option<Vec<u8>>,
    },
}

pub type Outcome = Result<Written, JobStoreError>;

/// What a write would do ([`JobStore::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    Create,
    /// `secrets_changed`: the secrets whose values differ from the stored ones (their names).
    Update {
        secrets_changed: Vec<String>,
    },
    Unchanged,
    Delete,
}

/// The answer to a batch: one outcome per write, in order, and the transactions it took.
#[derive(Debug)]
pub struct Applied {
    pub outcomes: Vec<Outcome>,
    pub transactions: usize,
}

#[derive(Clone)]
pub struct JobStore {
    client: Client,
    keys: Keys,
    /// What each team's jobs may use on the workers.
    policies: std::sync::Arc<crate::team_policy::TeamPolicies>,
    /// The byte budgets, the job quota per team and the history kept per job.
    limits: std::sync::Arc<crate::change_limits::ChangeLimits>,
}

/// A write ready to send: its value (for a save) and what it replaces in the read, if read.
struct Prepared {
    index: usize,
    value: Option<Vec<u8>>,
    /// The spec `value` holds (a save).
    spec: Option<Box<JobSpec>>,
    /// The write's precondition, or the one it was pinned to: the revision read (or "absent")
    /// for withheld secrets or a caller whose teams were checked against the read.
    precondition: Precondition,
    /// The saved version's key and record (a save that is written).
    history: Option<(String, Vec<u8>)>,
    /// A save whose value is the one stored at this (mod) revision, which its precondition
    /// accepts: it writes nothing, as long as the job is still at that revision.
    unchanged: Option<i64>,
}

/// The jobs as read at one revision (all of them, or those a batch needs).
struct Snapshot {
    revision: i64,
    /// name → (value, mod revision)
    jobs: BTreeMap<String, (Vec<u8>, i64)>,
    /// Whether every job was read (needed for the dependency check).
    complete: bool,
}

/// Why a write is tried again (with the jobs read again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// A job was written after the revision the dependency check (or the quota) read.
    JobsChanged,
    /// The job itself was written after the read that found the save unchanged, and the save's
    /// precondition still holds: it is compared again (a write would have gone through).
    Compared,
}

/// Why the job store refused a request, or could not carry it out. Each variant is one answer
/// of the API (`From<JobStoreError> for ApiError`: the status, code, message and field).
#[derive(Debug, Clone, thiserror::Error)]
pub enum JobStoreError {
    /// `400 invalid`: the request itself (the job's name, its spec or schedule, a secret kept
    /// with none stored, a calendar or pool that does not exist, a run's parameters).
    #[error("{message}")]
    Invalid { field: Option<String>, message: String },
    /// `413 too_large`: the spec, as sent or as it would be stored.
    #[error("{message}")]
    TooLarge { field: Option<String>, message: String },
    /// `400 dependency_cycle`: the save would start itself through `on_success` / `on_failure`.
    #[error("{message}")]
    Cycle { field: Option<String>, message: String },
    /// `404 not_found`: no such job, or one the caller does not see (the same answer), or a
    /// dependent it does not see.
    #[error("{message}")]
    NotFound { field: Option<String>, message: String },
    /// `403 forbidden`: the caller's role on the job's team (or on the team a save names, or on
    /// a dependent's), or the team's policy, does not allow it.
    #[error("{message}")]
    Forbidden { field: Option<String>, message: String },
    /// `409 conflict`: the write's precondition (`If-Match`, `If-None-Match: *`, or the revision
    /// it was pinned to) does not hold for the job as it is.
    #[error("{message}")]
    PreconditionFailed { message: String },
    /// `409 conflict`: other writers kept changing the job (or the jobs) meanwhile, or the name
    /// is taken by a job of a team the caller holds no role on.
    #[error("{message}")]
    Conflict { message: String },
    /// `409 conflict`: the stored spec does not read; a `PUT` replaces it.
    #[error("{message}")]
    StoredSpecInvalid { message: String },
    /// `409 quota_exceeded` (field `team`): the save would take `team` past its job quota.
    #[error(
        "job {job:?} would take team {team:?} past its quota of jobs: it holds {held}, the quota \
         (max_jobs_per_team) is {max}; delete one of its jobs first, or ask an operator to raise max_jobs_per_team"
    )]
    QuotaExceeded { job: String, team: String, held: u64, max: u64 },
    /// `429 change_budget` (with `Retry-After` as a response): a byte budget is spent.
    #[error("{}", .0.message)]
    Throttled(Throttled),
    /// `503 etcd_unavailable` or `507 etcd_nospace`, logged where etcd failed.
    #[error(transparent)]
    Etcd(EtcdFailure),
    /// `500 internal`: a server-side fault, logged where it happened.
    #[error("internal error; see the master's log")]
    Internal,
}

impl JobStoreError {
    /// A server-side fault: `cause` goes to the log, the client is told `500 internal`.
    fn internal(cause: &dyn std::fmt::Display) -> Self {
        crate::error::log_internal(cause);
        Self::Internal
    }

    /// A refusal of the caller's roles ([`Scope`]) or of its team's policy, which answer
    /// `404 not_found` for a job the caller does not see and `403 forbidden` otherwise.
    fn denied(e: ApiError) -> Self {
        let ApiError { status, field, message, .. } = e;
        if status == StatusCode::NOT_FOUND {
            Self::NotFound { field, message }
        } else {
            Self::Forbidden { field, message }
        }
    }

    /// A job that does not exist, or that the caller does not see: the same answer.
    fn no_job(name: &str) -> Self {
        Self::denied(Scope::no_job(name))
    }
}

impl From<SpecError> for JobStoreError {
    fn from(e: SpecError) -> Self {
        let SpecError { field, message, too_large } = e;
        if too_large {
            Self::TooLarge { field, message }
        } else {
            Self::Invalid { field, message }
        }
    }
}

impl From<JobStoreError> for ApiError {
    fn from(e: JobStoreError) -> Self {
        match e {
            JobStoreError::Invalid { field, message } => ApiError::bad_request(field, message),
            JobStoreError::TooLarge { field, message } => ApiError { field, ..ApiError::too_large(message) },
            JobStoreError::Cycle { field, message } => ApiError::dependency_cycle(field, message),
            JobStoreError::NotFound { field, message } => ApiError { field, ..ApiError::not_found(message) },
            JobStoreError::Forbidden { field, message } => ApiError { field, ..ApiError::forbidden(message) },
            JobStoreError::PreconditionFailed { message }
            | JobStoreError::Conflict { message }
            | JobStoreError::StoredSpecInvalid { message } => ApiError::conflict(message),
            e @ JobStoreError::QuotaExceeded { .. } => ApiError {
                status: StatusCode::CONFLICT,
                code: "quota_exceeded",
                message: e.to_string(),
                field: Some("team".to_owned()),
            },
            JobStoreError::Throttled(throttled) => throttled.error(),
            JobStoreError::Etcd(failure) => failure.into(),
            JobStoreError::Internal => ApiError::internal_logged(),
        }
    }
}

/// The API's answer; a spent byte budget with its `Retry-After`.
impl IntoResponse for JobStoreError {
    fn into_response(self) -> Response {
        match self {
            Self::Throttled(throttled) => throttled.into_response(),
            e => ApiError::from(e).into_response(),
        }
    }
}

/// An etcd request of the job store: its failure logged, then `Etcd`.
async fn etcd<T, F>(op: &'static str, fut: F) -> Result<T, JobStoreError>
where
    F: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    crate::error::etcd_request(op, fut).await.map_err(JobStoreError::Etcd)
}

impl JobStore {
    #[must_use]
    pub fn new(client: Client, keys: Keys) -> Self {
        Self { client, keys, policies: std::sync::Arc::default(), limits: std::sync::Arc::default() }
    }

    /// With the change limits of the config (without, the defaults).
    #[must_use]
    pub fn with_limits(self, limits: std::sync::Arc<crate::change_limits::ChangeLimits>) -> Self {
        Self { limits, ..self }
    }

    /// Takes what `writes` would store from the byte budgets of the caller's token and of
    /// each team the saves name that the caller may save into (before [`apply`](Self::apply); a dry run writes nothing and is
    /// not charged). A save costs its spec twice (the job and its saved version) and
    /// [`CHANGE_OVERHEAD_BYTES`](crate::change_limits::CHANGE_OVERHEAD_BYTES); a delete frees
    /// space and costs nothing.
    ///
    /// # Errors
    /// [`JobStoreError::Throttled`]: 429 naming the budget that is spent.
    pub fn charge(&self, writes: &[Write], scope: &Scope) -> Result<(), JobStoreError> {
        let mut teams: Vec<String> = Vec::new();
        let mut bytes = 0u64;
        for w in writes {
            if let Change::Put(spec) = &w.change {
                let size = serde_json::to_vec(spec).map_or(MAX_SPEC_BYTES, |v| v.len()) as u64;
                bytes += 2 * size + crate::change_limits::CHANGE_OVERHEAD_BYTES;
                // Only a team the caller may save into: a save it will be refused cannot spend
                // another team's budget.
                let team = spec.team.as_deref().filter(|t| scope.caller.access.on(Some(t)) >= Some(scope.needed));
                if let Some(team) = team.filter(|t| !teams.iter().any(|u| u == t)) {
                    teams.push(team.to_owned());
                }
            }
        }
        self.limits.charge(&scope.caller.name, &teams, bytes).map_err(JobStoreError::Throttled)
    }

    /// Whether the writes of `pending` need every job read: a save with dependents (the cycle
    /// check) or a save into a team while a job quota is set (the count).
    fn needs_all(&self, writes: &[Write], pending: &[usize]) -> bool {
        let quota = self.limits.settings.max_jobs_per_team.is_some();
        pending.iter().any(|&i| {
            has_dependents(&writes[i])
                || (quota && matches!(&writes[i].change, Change::Put(spec) if spec.team.is_some()))
        })
    }

    /// With the teams' policies (`[teams.NAME]` of the config) checked on every save; without,
    /// every team has the empty policy.
    #[must_use]
    pub fn with_policies(self, policies: std::sync::Arc<crate::team_policy::TeamPolicies>) -> Self {
        Self { policies, ..self }
    }

    /// Carries out `writes` (each job at most once: the caller checks) on behalf of `origin`,
    /// returning one outcome per write in order. Each save keeps its version in the job's
    /// history, in the same transaction.
    pub async fn apply(&self, writes: Vec<Write>, origin: &Origin, scope: &Scope) -> Applied {
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = Vec::new();
        for (i, w) in writes.iter().enumerate() {
            match check_write(w, &self.policies) {
                Ok(()) => pending.push(i),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        self.check_references(&writes, &mut pending, &mut outcomes).await;
        let mut transactions = 0;
        let mut retried = Vec::new();
        for attempt in 1..=DEPENDENCY_CHECK_ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            match self.attempt(&writes, &pending, &mut outcomes, &mut transactions, (origin, scope)).await {
                Ok(()) => pending.clear(),
                Err(left) => {
                    tracing::info!(
                        attempt,
                        writes = left.len(),
                        "jobs changed between their read and write; trying again"
                    );
                    pending = left.iter().map(|(i, _)| *i).collect();
                    retried = left;
                    if attempt < DEPENDENCY_CHECK_ATTEMPTS {
                        // Jitter, so that saves which keep colliding stop doing so.
                        tokio::time::sleep(Duration::from_millis(rand::random_range(5..=25) * attempt)).await;
                    }
                }
            }
        }
        for (i, why) in retried.into_iter().filter(|(i, _)| pending.contains(i)) {
            let job = &writes[i].job;
            let message = match why {
                Retry::JobsChanged => format!(
                    "other jobs were saved while the dependencies of job {job:?} were being checked for cycles, \
                     {DEPENDENCY_CHECK_ATTEMPTS} times in a row; nothing was saved, retry"
                ),
                Retry::Compared => format!(
                    "job {job:?} was saved by someone else while this save was compared with it, \
                     {DEPENDENCY_CHECK_ATTEMPTS} times in a row; nothing was saved, retry"
                ),
            };
            outcomes[i] = Some(Err(JobStoreError::Conflict { message }));
        }
        let outcomes: Vec<Outcome> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(JobStoreError::internal(&"write without an outcome"))))
            .collect();
        self.clean_up(&writes, &outcomes);
        Applied { outcomes, transactions }
    }

    /// What `writes` would do, without writing: each change's precondition, spec, kept secrets
    /// and dependencies checked as [`apply`](Self::apply) would, and a save compared with the
    /// stored value, except for the secret values it sends: those count as changed, whatever the
    /// stored ones (a dry run costs nothing, so comparing them would confirm guesses).
    pub async fn plan(&self, writes: &[Write], scope: &Scope) -> Vec<Result<Planned, JobStoreError>> {
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let mut pending = Vec::new();
        for (i, w) in writes.iter().enumerate() {
            match check_write(w, &self.policies) {
                Ok(()) => pending.push(i),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        self.check_references(writes, &mut pending, &mut outcomes).await;
        let names: Vec<&str> = pending.iter().map(|&i| writes[i].job.as_str()).collect();
        let all = self.needs_all(writes, &pending);
        let snapshot = match self.snapshot(&names, all).await {
            Ok(s) => s.unwrap_or(Snapshot { revision: 0, jobs: BTreeMap::new(), complete: false }),
            Err(e) => return writes.iter().map(|_| Err(e.clone())).collect(),
        };
        let job_teams = snapshot.complete.then(|| JobTeams::after(&snapshot, writes, pending.iter().copied()));
        let mut ready = Vec::new();
        for &i in &pending {
            let deps = job_teams.as_ref().map(|t| (t, scope));
            match prepare(i, &writes[i], Some(&snapshot), None, (teams_checked(scope), deps)) {
                Ok(p) => ready.push(p),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        // Decided against the read, as a guarded batch would be.
        let snapshot = Snapshot { complete: true, ..snapshot };
        let shown = |job: &str| job_teams.as_ref().is_none_or(|t| t.shown(scope, job));
        let quota = self.limits.settings.max_jobs_per_team.filter(|_| all);
        let accepted = decide_locally(writes, ready, &snapshot, &mut outcomes, &shown, quota);
        let mut planned: Vec<Option<Result<Planned, JobStoreError>>> =
            outcomes.into_iter().map(|o| o.map(|o| o.map(|_| Planned::Unchanged))).collect();
        for p in accepted {
            let stored = snapshot.jobs.get(&writes[p.index].job).map(|(value, _)| value);
            planned[p.index] = Some(Ok(match (&p.value, stored) {
                (None, _) => Planned::Delete,
                (Some(_), None) => Planned::Create,
                (Some(value), Some(stored)) => {
                    // Secret values sent are never compared with the stored ones (that would
                    // confirm guesses): each one sent counts as changed.
                    let sent = match &writes[p.index].change {
                        Change::Put(spec) => sent_secrets(spec),
                        Change::Delete => Vec::new(),
                    };
                    if sent.is_empty() && value == stored {
                        Planned::Unchanged
                    } else {
                        let mut names = sent;
                        names.extend(changed_secrets(value, stored));
                        names.sort();
                        names.dedup();
                        Planned::Update { secrets_changed: names }
                    }
                }
            }));
        }
        planned
            .into_iter()
            .map(|p| p.unwrap_or_else(|| Err(JobStoreError::internal(&"write without a plan"))))
            .collect()
    }
}

/// The secrets `spec` gives a value for, rather than keeping the stored one (`null`, or a URL
/// password shown as `redacted`): `task.secret_env.K`, `task.url`, `notify[0].secret_url`...
#[must_use]
pub fn sent_secrets(spec: &JobSpec) -> Vec<String> {
    let sends_password = |url: &str| {
        etcron_model::spec::headers::shown_url(url) != url && !etcron_model::spec::headers::shows_password(url)
    };
    let (field, task) = spec.task.secrets_field();
    let mut out: Vec<String> = task.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| format!("{field}.{k}")).collect();
    if spec.task.destination_url().is_some_and(sends_password) && spec.task.kind() == "http" {
        out.push("task.url".to_owned());
    }
    for (i, t) in spec.notify.iter().flatten().enumerate() {
        if matches!(t.secret_url, Some(Some(_))) || t.url.as_deref().is_some_and(sends_password) {
            out.push(format!("notify[{i}].secret_url"));
        }
        out.extend(
            t.secret_headers
                .iter()
                .filter(|(_, v)| v.is_some())
                .map(|(k, _)| format!("notify[{i}].secret_headers.{k}")),
        );
    }
    out
}

/// The task secrets whose values differ between two stored values (both valid specs).
fn changed_secrets(value: &[u8], stored: &[u8]) -> Vec<String> {
    match (JobSpec::from_json(value), JobSpec::from_json(stored)) {
        (Ok(new), Ok(old)) => new.task.changed_secrets(&old.task),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change of job `job`.
    pub(super) fn write(job: &str, change: Change, precondition: Precondition) -> Write {
        Write { job: job.to_owned(), change, precondition, source: None }
    }

    /// A save of a job starting `deps` on success.
    pub(super) fn spec(deps: &[&str]) -> Change {
        let json = serde_json::json!({
            "schedule": "0 * * * * *", "task": {"kind": "shell", "command": "true"}, "on_success": deps
        });
        Change::Put(Box::new(JobSpec::from_value(json).unwrap_or_else(|e| panic!("{e}"))))
    }

    /// A write ready to send, with a value of `size` bytes (`None`: a delete).
    pub(super) fn prepared(index: usize, size: Option<usize>) -> Prepared {
        Prepared {
            index,
            value: size.map(|n| vec![b'x'; n]),
            spec: None,
            precondition: Precondition::default(),
            history: None,
            unchanged: None,
        }
    }

    /// The API's answer to `e`.
    pub(super) fn answer(e: &JobStoreError) -> ApiError {
        ApiError::from(e.clone())
    }

    /// Each error is the answer docs/api.md (and job-spec.md, operations.md) documents: its
    /// status, code and field.
    #[test]
    fn each_error_answers_the_status_the_api_documents() {
        let (field, message) = (Some("schedule".to_owned()), "m".to_owned());
        let throttled = Throttled { message: "spent".to_owned(), wait: Duration::from_millis(1_500) };
        let cases: Vec<(JobStoreError, u16, &str, Option<&str>)> = vec![
            (
                JobStoreError::Invalid { field: field.clone(), message: message.clone() },
                400,
                "invalid",
                Some("schedule"),
            ),
            (JobStoreError::TooLarge { field: None, message: message.clone() }, 413, "too_large", None),
            (
                JobStoreError::Cycle { field: field.clone(), message: message.clone() },
                400,
                "dependency_cycle",
                Some("schedule"),
            ),
            (JobStoreError::NotFound { field: None, message: message.clone() }, 404, "not_found", None),
            (
                JobStoreError::Forbidden { field: field.clone(), message: message.clone() },
                403,
                "forbidden",
                Some("schedule"),
            ),
            (JobStoreError::PreconditionFailed { message: message.clone() }, 409, "conflict", None),
            (JobStoreError::Conflict { message: message.clone() }, 409, "conflict", None),
            (JobStoreError::StoredSpecInvalid { message: message.clone() }, 409, "conflict", None),
            (
                JobStoreError::QuotaExceeded { job: "j".into(), team: "t".into(), held: 3, max: 3 },
                409,
                "quota_exceeded",
                Some("team"),
            ),
            (JobStoreError::Throttled(throttled.clone()), 429, "change_budget", None),
            (JobStoreError::Etcd(EtcdFailure::Unavailable), 503, "etcd_unavailable", None),
            (JobStoreError::Etcd(EtcdFailure::NoSpace), 507, "etcd_nospace", None),
            (JobStoreError::Internal, 500, "internal", None),
        ];
        for (e, status, code, field) in cases {
            let api = answer(&e);
            assert_eq!((api.status.as_u16(), api.code, api.field.as_deref()), (status, code, field), "{e:?}");
            assert_eq!(e.into_response().status().as_u16(), status);
        }
        // The messages are the ones the API answered before the job store had its own errors.
        let quota = answer(&JobStoreError::QuotaExceeded { job: "j".into(), team: "t".into(), held: 3, max: 3 });
        assert_eq!(
            quota.message,
            "job \"j\" would take team \"t\" past its quota of jobs: it holds 3, the quota (max_jobs_per_team) is 3; \
             delete one of its jobs first, or ask an operator to raise max_jobs_per_team"
        );
        assert_eq!(answer(&JobStoreError::Throttled(throttled.clone())).message, "spent; retry in 2 s");
        let resp = JobStoreError::Throttled(throttled).into_response();
        assert_eq!(resp.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("2"));
        let internal = answer(&JobStoreError::Internal);
        assert_eq!(internal.message, ApiError::internal(&"cause").message);
        let nospace = answer(&JobStoreError::Etcd(EtcdFailure::NoSpace));
        assert!(
            nospace.message.starts_with("etcd's database reached its quota (NOSPACE alarm)"),
            "{}",
            nospace.message
        );
        assert!(nospace.message.contains("compact, defragment and disarm it"), "{}", nospace.message);
    }

    /// The refusals of the caller's roles, of a spec and of a name answer as they did as
    /// `ApiError`s: the same status, code, message and field.
    #[test]
    fn refusals_converted_answer_as_before() {
        let same = |e: JobStoreError, before: ApiError| {
            let after = answer(&e);
            assert_eq!(
                (after.status, after.code, &after.message, &after.field),
                (before.status, before.code, &before.message, &before.field)
            );
        };
        same(JobStoreError::no_job("a"), Scope::no_job("a"));
        let viewer = crate::access::Access { role: Some(crate::access::Role::Viewer), teams: BTreeMap::new() };
        let scope = Scope {
            caller: crate::access::Caller { name: "v".into(), access: viewer },
            needed: crate::access::Role::Admin,
            action: "PUT /api/jobs/a".into(),
        };
        for before in [scope.check_job("a", None).unwrap_err(), scope.check_team(Some("t")).unwrap_err()] {
            same(JobStoreError::denied(before.clone()), before);
        }
        let name = etcron_model::spec::validate_name("a b").unwrap_err();
        same(name.clone().into(), name.into());
        let big = SpecError { field: Some("task.command".into()), message: "big".into(), too_large: true };
        same(big.clone().into(), big.into());
    }
}
