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

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use etcron_model::dependency::DependencyGraph;
use etcron_model::keys::{Key, Keys};
use etcron_model::now_ms;
use etcron_model::schedule::ScheduleError;
use etcron_model::spec::{check_jitter, validate_name, JobSpec, MAX_SPEC_BYTES};
use etcron_model::stored::{JobState, Pause, SpecVersion, MAX_SPEC_VERSIONS};
use serde::Deserialize;

use crate::access::{team_of, Scope};
use crate::error::ApiError;

pub mod commands;
mod dependencies;
mod quota;
use crate::error::{etcd, ApiResult};
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
}

impl Origin {
    /// The key and record of the saved version of `job` holding `value`, to put with the save.
    #[must_use]
    pub fn entry(&self, keys: &Keys, job: &str, value: &[u8]) -> (String, Vec<u8>) {
        (keys.history(job, &format!("{:016x}", rand::random::<u64>())), self.version(value))
    }

    /// The version record of a save of `value` (secrets withheld).
    fn version(&self, value: &[u8]) -> Vec<u8> {
        let spec = serde_json::from_slice(value).map(etcron_model::spec::redacted_json).unwrap_or_default();
        let version = SpecVersion {
            spec,
            by: self.by.clone(),
            at_ms: now_ms(),
            via: self.via.clone(),
            request_id: self.request_id.clone(),
            restored: self.restored,
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

pub type Outcome = Result<Written, ApiError>;

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

/// How one transaction of the batch ended.
enum Committed {
    Done {
        revision: i64,
    },
    /// A job was written after the revision the dependency check read.
    JobsChanged,
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
    /// [`Throttled`](crate::change_limits::Throttled): 429 naming the budget that is spent.
    pub fn charge(&self, writes: &[Write], scope: &Scope) -> Result<(), crate::change_limits::Throttled> {
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
        self.limits.charge(&scope.caller.name, &teams, bytes)
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
    /// Refuses (400) the pending saves whose `skip_calendars` name a calendar that does not
    /// exist, with one read of the calendars' names. A calendar deleted between this read and
    /// the save is what workers meet as a missing calendar (they run the tick, loudly).
    async fn check_calendars(
        &self,
        writes: &[Write],
        pending: &mut Vec<usize>,
        outcomes: &mut [Option<Outcome>],
    ) -> ApiResult<()> {
        let named = |i: &usize| match &writes[*i].change {
            Change::Put(spec) => !spec.skip_calendars.is_empty(),
            Change::Delete => false,
        };
        if !pending.iter().any(named) {
            return Ok(());
        }
        let prefix = self.keys.calendars_prefix();
        let opts = GetOptions::new().with_prefix().with_keys_only();
        let resp = etcd("calendar_names", self.client.kv_client().get(prefix.as_str(), Some(opts))).await?;
        let known: std::collections::HashSet<String> = resp
            .kvs()
            .iter()
            .filter_map(|kv| match self.keys.parse(kv.key()) {
                Some(Key::Calendar(name)) => Some(name),
                _ => None,
            })
            .collect();
        pending.retain(|i| {
            let Change::Put(spec) = &writes[*i].change else { return true };
            let Some((n, missing)) = spec.skip_calendars.iter().enumerate().find(|(_, c)| !known.contains(c.as_str()))
            else {
                return true;
            };
            outcomes[*i] = Some(Err(ApiError::bad_request(
                Some(format!("skip_calendars[{n}]")),
                format!("no calendar {missing:?}: create it first (PUT /api/calendars/{missing})"),
            )));
            false
        });
        Ok(())
    }

    pub async fn apply(&self, writes: Vec<Write>, origin: &Origin, scope: &Scope) -> Applied {
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = Vec::new();
        for (i, w) in writes.iter().enumerate() {
            match check_write(w, &self.policies) {
                Ok(()) => pending.push(i),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        if let Err(e) = self.check_calendars(&writes, &mut pending, &mut outcomes).await {
            for i in pending.drain(..) {
                outcomes[i] = Some(Err(e.clone()));
            }
        }
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
            outcomes[i] = Some(Err(ApiError::conflict(match why {
                Retry::JobsChanged => format!(
                    "other jobs were saved while the dependencies of job {job:?} were being checked for cycles, \
                     {DEPENDENCY_CHECK_ATTEMPTS} times in a row; nothing was saved, retry"
                ),
                Retry::Compared => format!(
                    "job {job:?} was saved by someone else while this save was compared with it, \
                     {DEPENDENCY_CHECK_ATTEMPTS} times in a row; nothing was saved, retry"
                ),
            })));
        }
        let outcomes: Vec<Outcome> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(ApiError::internal(&"write without an outcome"))))
            .collect();
        for (w, o) in writes.iter().zip(&outcomes) {
            match o {
                Ok(Written::Saved { unchanged: false, .. }) => {
                    let max_bytes = self.limits.settings.max_history_bytes_per_job;
                    tokio::spawn(prune_history(self.client.clone(), self.keys.clone(), w.job.clone(), max_bytes));
                }
                Ok(Written::Deleted { .. }) => {
                    tokio::spawn(drop_queue(self.client.clone(), self.keys.clone(), w.job.clone()));
                }
                _ => {}
            }
        }
        Applied { outcomes, transactions }
    }

    /// What `writes` would do, without writing: each change's precondition, spec, kept secrets
    /// and dependencies checked as [`apply`](Self::apply) would, and a save compared with the
    /// stored value, except for the secret values it sends: those count as changed, whatever the
    /// stored ones (a dry run costs nothing, so comparing them would confirm guesses).
    pub async fn plan(&self, writes: &[Write], scope: &Scope) -> Vec<Result<Planned, ApiError>> {
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let mut pending = Vec::new();
        for (i, w) in writes.iter().enumerate() {
            match check_write(w, &self.policies) {
                Ok(()) => pending.push(i),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
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
        let mut planned: Vec<Option<Result<Planned, ApiError>>> =
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
        planned.into_iter().map(|p| p.unwrap_or_else(|| Err(ApiError::internal(&"write without a plan")))).collect()
    }

    /// One pass over `pending`: read, prepare, check, write. `Err` holds the writes to try
    /// again (with why): jobs changed under the dependency check, or a save found unchanged
    /// whose job changed before its transaction.
    async fn attempt(
        &self,
        writes: &[Write],
        pending: &[usize],
        outcomes: &mut [Option<Outcome>],
        transactions: &mut usize,
        (origin, scope): (&Origin, &Scope),
    ) -> Result<(), Vec<(usize, Retry)>> {
        let needs_graph = self.needs_all(writes, pending);
        let teams = teams_checked(scope);
        // A caller whose teams are checked has every job it writes read; every save has its
        // job read (to keep withheld secrets, and to write nothing when nothing changes).
        let wanted: Vec<&str> = pending
            .iter()
            .filter(|&&i| teams.is_some() || matches!(&writes[i].change, Change::Put(_)))
            .map(|&i| writes[i].job.as_str())
            .collect();
        let snapshot = match self.snapshot(&wanted, needs_graph).await {
            Ok(s) => s,
            Err(e) => {
                for &i in pending {
                    outcomes[i] = Some(Err(e.clone()));
                }
                return Ok(());
            }
        };
        let job_teams =
            snapshot.as_ref().filter(|s| s.complete).map(|s| JobTeams::after(s, writes, pending.iter().copied()));
        let mut ready = Vec::new();
        for &i in pending {
            let history = Some((&self.keys, origin));
            let deps = job_teams.as_ref().map(|t| (t, scope));
            match prepare(i, &writes[i], snapshot.as_ref(), history, (teams, deps)) {
                Ok(p) => ready.push(p),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        if let (Some(snapshot), Some(job_teams)) = (snapshot.as_ref().filter(|s| s.complete), &job_teams) {
            let shown = |job: &str| job_teams.shown(scope, job);
            let quota = self.limits.settings.max_jobs_per_team;
            ready = decide_locally(writes, ready, snapshot, outcomes, &shown, quota);
        }
        if let Some(snapshot) = &snapshot {
            mark_unchanged(writes, &mut ready, snapshot);
        }
        let mut guard = snapshot.as_ref().filter(|s| s.complete).map(|s| s.revision);
        let chunks = chunks(ready);
        let mut chunks = chunks.into_iter();
        let mut again = Vec::new();
        while let Some(chunk) = chunks.next() {
            *transactions += 1;
            match self.commit(writes, &chunk, guard, outcomes, &mut again).await {
                Ok(Committed::Done { revision }) => {
                    if guard.is_some() {
                        guard = Some(revision);
                    }
                }
                Ok(Committed::JobsChanged) => {
                    let left = chunk.iter().map(|p| p.index).chain(chunks.flatten().map(|p| p.index));
                    again.extend(left.map(|i| (i, Retry::JobsChanged)));
                    break;
                }
                Err(e) => {
                    // This transaction's outcome is unknown, and the later ones were not sent
                    // (nor are the ones left to compare again).
                    let left = chunk.iter().map(|p| p.index).chain(chunks.flatten().map(|p| p.index));
                    for index in left.chain(again.drain(..).map(|(i, _)| i)) {
                        outcomes[index] = Some(Err(e.clone()));
                    }
                    return Ok(());
                }
            }
        }
        if again.is_empty() {
            Ok(())
        } else {
            Err(again)
        }
    }

    /// Every job (when the dependency check needs them), or the jobs named; `None` when
    /// nothing needs reading.
    async fn snapshot(&self, wanted: &[&str], all: bool) -> ApiResult<Option<Snapshot>> {
        let mut kv = self.client.kv_client();
        if all {
            let resp =
                etcd("list_jobs", kv.get(self.keys.jobs_prefix(), Some(GetOptions::new().with_prefix()))).await?;
            let revision =
                resp.header().map(|h| h.revision()).ok_or_else(|| ApiError::internal(&"range without header"))?;
            let jobs = resp
                .kvs()
                .iter()
                .filter_map(|item| match self.keys.parse(item.key()) {
                    Some(Key::Job(name)) => Some((name, (item.value().to_vec(), item.mod_revision()))),
                    _ => None,
                })
                .collect();
            return Ok(Some(Snapshot { revision, jobs, complete: true }));
        }
        if wanted.is_empty() {
            return Ok(None);
        }
        let mut jobs = BTreeMap::new();
        let mut revision = 0;
        for names in wanted.chunks(TXN_CHANGES) {
            let txn = Txn::new().and_then(names.iter().map(|n| TxnOp::get(self.keys.job(n), None)).collect::<Vec<_>>());
            let resp = etcd("get_jobs", kv.txn(txn)).await?;
            revision = resp.header().map_or(revision, |h| h.revision());
            for op in resp.op_responses() {
                if let TxnOpResponse::Get(g) = op {
                    for item in g.kvs() {
                        if let Some(Key::Job(name)) = self.keys.parse(item.key()) {
                            jobs.insert(name, (item.value().to_vec(), item.mod_revision()));
                        }
                    }
                }
            }
        }
        Ok(Some(Snapshot { revision, jobs, complete: false }))
    }

    /// Sends one transaction: each change nested under its own precondition, the whole under
    /// `guard` (no job written after that revision) when the dependency check asks for it. A
    /// save found unchanged whose job was written since the read, where the write would have
    /// gone through, is left to `again`.
    async fn commit(
        &self,
        writes: &[Write],
        chunk: &[Prepared],
        guard: Option<i64>,
        outcomes: &mut [Option<Outcome>],
        again: &mut Vec<(usize, Retry)>,
    ) -> ApiResult<Committed> {
        let compares: Vec<Compare> = guard
            .map(|rev| Compare::mod_revision(self.keys.jobs_prefix(), CompareOp::Less, rev + 1).with_prefix())
            .into_iter()
            .collect();
        let mut kv = self.client.kv_client();
        if let [p] = chunk {
            // One change: its own transaction, as a single PUT or DELETE always was.
            let w = &writes[p.index];
            let resp = etcd("txn", kv.txn(self.change_txn(w, p, compares))).await?;
            let revision = resp.header().map_or(0, |h| h.revision());
            if resp.succeeded() {
                outcomes[p.index] = Some(Ok(written(&w.job, p, resp.op_responses(), revision)));
            } else if guard.is_some() {
                // The precondition was decided against the guarded read: the jobs changed.
                return Ok(Committed::JobsChanged);
            } else {
                refused(w, p, current_revision(resp.op_responses()), outcomes, again);
            }
            return Ok(Committed::Done { revision });
        }
        let mut ops: Vec<TxnOp> =
            chunk.iter().map(|p| TxnOp::txn(self.change_txn(&writes[p.index], p, Vec::new()))).collect();
        if chunk.iter().any(|p| p.value.is_some() && p.unchanged.is_none()) {
            // etcd's space quota weighs only the puts at a transaction's top level, so puts
            // nested in changes alone would pass even its NOSPACE alarm: this one small put
            // makes etcd refuse the whole batch while it refuses writes. (A chunk of unchanged
            // saves only reads: no put, no new revision.)
            ops.push(TxnOp::put(self.keys.quota_probe(), Vec::new(), None));
        }
        let resp = etcd("txn", kv.txn(Txn::new().when(compares).and_then(ops))).await?;
        if !resp.succeeded() {
            return Ok(Committed::JobsChanged);
        }
        let revision = resp.header().map_or(0, |h| h.revision());
        for (p, op) in chunk.iter().zip(resp.op_responses()) {
            let TxnOpResponse::Txn(inner) = op else {
                outcomes[p.index] = Some(Err(ApiError::internal(&"a nested transaction answered otherwise")));
                continue;
            };
            let w = &writes[p.index];
            if inner.succeeded() {
                outcomes[p.index] = Some(Ok(written(&w.job, p, inner.op_responses(), revision)));
            } else {
                refused(w, p, current_revision(inner.op_responses()), outcomes, again);
            }
        }
        Ok(Committed::Done { revision })
    }

    /// The transaction of one change: `compares` and its precondition, then the writes;
    /// otherwise the job as it is now (to say why it was refused).
    fn change_txn(&self, w: &Write, p: &Prepared, mut compares: Vec<Compare>) -> Txn {
        let key = self.keys.job(&w.job);
        if let Some(rev) = p.unchanged {
            // Nothing to write: the job as read, if it is still at the revision compared (the
            // client's `If-Match`, when it gave one, is that revision: see `mark_unchanged`).
            compares.push(Compare::mod_revision(key.clone(), CompareOp::Equal, rev));
            return Txn::new()
                .when(compares)
                .and_then([TxnOp::get(key.clone(), None), TxnOp::get(self.keys.paused(&w.job), None)])
                .or_else([TxnOp::get(key, None)]);
        }
        let Precondition { expected, create_only } = p.precondition;
        match &p.value {
            Some(value) => {
                compares.extend(match (expected, create_only) {
                    (Some(rev), _) => Some(Compare::mod_revision(key.clone(), CompareOp::Equal, rev)),
                    (None, true) => Some(Compare::create_revision(key.clone(), CompareOp::Equal, 0)),
                    (None, false) => None,
                });
                let mut ops = vec![
                    TxnOp::txn(self.init_state(&w.job)),
                    TxnOp::put(key.clone(), value.clone(), Some(PutOptions::new().with_prev_key())),
                    // A save leaves the pause alone; the answer shows it as it is.
                    TxnOp::get(self.keys.paused(&w.job), None),
                ];
                ops.extend(p.history.as_ref().map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None)));
                Txn::new().when(compares).and_then(ops).or_else([TxnOp::get(key, None)])
            }
            None => {
                compares.push(match expected {
                    Some(rev) => Compare::mod_revision(key.clone(), CompareOp::Equal, rev),
                    None => Compare::create_revision(key.clone(), CompareOp::Greater, 0),
                });
                let mut ops = vec![TxnOp::get(key.clone(), None)];
                ops.extend(self.delete_ops(&w.job));
                Txn::new().when(compares).and_then(ops).or_else([TxnOp::get(key, None)])
            }
        }
    }

    /// A new job's catch-up state starts now, so workers never catch up on ticks from before
    /// the job existed. Only when the job does not exist yet and no state is stored: a replace,
    /// or a state left by someone else, keeps its value. Placed before the put so that its
    /// compare sees the job as it was before this transaction.
    fn init_state(&self, job: &str) -> Txn {
        let (key, state_key) = (self.keys.job(job), self.keys.state(job));
        Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, 0),
                Compare::version(state_key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(state_key, JobState { last_tick_ms: now_ms() }.to_bytes(), None)])
    }

    /// Everything that goes with a job when it is deleted.
    #[must_use]
    pub fn delete_ops(&self, job: &str) -> Vec<TxnOp> {
        vec![
            TxnOp::delete(self.keys.job(job), None),
            // The catch-up state belongs to the job and goes with it.
            TxnOp::delete(self.keys.state(job), None),
            // So is the health that `recovery` notifications read.
            TxnOp::delete(self.keys.health(job), None),
            // And an operator's pause: a job created later under the name starts unpaused.
            TxnOp::delete(self.keys.paused(job), None),
            // And its saved versions: a job created later under the name starts a history.
            TxnOp::delete(self.keys.history_of(job), Some(DeleteOptions::new().with_prefix())),
            // Pending run requests (manual runs, retries, dependency runs, catch-up) must not
            // start the job, or a job of the same name created later, after the delete.
            TxnOp::delete(self.keys.job_trigger_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // And its backfills (their pending requests went with the run requests).
            TxnOp::delete(self.keys.job_backfills_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // And its checkpoints: a job created later under the name starts afresh.
            TxnOp::delete(self.keys.job_checkpoints_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // And what its alerts remember (raised alerts, the `stale` window, silences).
            TxnOp::delete(self.keys.job_alerts_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // Claims, running markers and the lock stay: they belong to executions still running
            // under worker leases, and expire with them.
        ]
    }
}

/// What a request alone can be refused for: the job's name and, for a save, a schedule that
/// never fires again, or a `task.user` or `selector` outside its team's policy.
fn check_write(w: &Write, policies: &crate::team_policy::TeamPolicies) -> ApiResult<()> {
    validate_name(&w.job).map_err(ApiError::from)?;
    match &w.change {
        Change::Put(spec) => {
            fires_again(&w.job, spec)?;
            policies.check(spec)?;
            // A job naming itself needs no etcd read to be refused.
            let mut own = DependencyGraph::new();
            own.set(&w.job, spec.on_success.iter().chain(&spec.on_failure));
            cycle_error(&w.job, spec, &own, &|_| true).map_or(Ok(()), Err)
        }
        Change::Delete => Ok(()),
    }
}

/// An enabled job must have a fire time ahead: a past `@at` or a year field wholly in the past
/// is refused. (A disabled one may keep its spent schedule: workers disable an `@at` job after
/// its run, and such a job may be saved back as exported.) A `jitter` must be shorter than the
/// time between the job's ticks, or it would not spread them.
fn fires_again(job: &str, spec: &JobSpec) -> ApiResult<()> {
    let schedule = spec.parsed_schedule(job)?;
    check_jitter(&schedule, spec.jitter_ms(), now_ms())?;
    if !spec.enabled {
        return Ok(());
    }
    schedule.fires_after(now_ms()).map(drop).map_err(|e| {
        let field = match e {
            ScheduleError::Window(_) => "active_until",
            _ if spec.schedules.is_empty() => "schedule",
            _ => "schedules",
        };
        ApiError::bad_request(Some(field.to_owned()), e.to_string())
    })
}

fn has_dependents(w: &Write) -> bool {
    matches!(&w.change, Change::Put(spec) if !spec.on_success.is_empty() || !spec.on_failure.is_empty())
}

/// The scope to check each write's teams with: `None` when the caller holds the route's role
/// as a global role (then every team is its), so nothing needs reading for it.
fn teams_checked(scope: &Scope) -> Option<&Scope> {
    (scope.caller.access.role < Some(scope.needed)).then_some(scope)
}

/// With `scope` (a caller whose teams are checked, the job read in `snapshot`): the stored
/// job's team and a save's team must be the caller's, and the write is pinned to the revision
/// read (or to the job's absence), so it applies only to the job as checked.
fn check_teams(
    w: &Write,
    snapshot: Option<&Snapshot>,
    scope: &Scope,
    precondition: &mut Precondition,
) -> ApiResult<()> {
    let stored = snapshot.and_then(|s| s.jobs.get(&w.job));
    match (stored, &w.change) {
        (Some((value, _)), Change::Put(_)) if !scope.caller.access.sees(team_of(value).as_deref()) => {
            // Job names are shared by every team: the name is taken, by a job it may not see.
            return Err(ApiError::conflict(format!(
                "job name {:?} is taken by a job of a team you hold no role on; choose another name",
                w.job
            )));
        }
        (Some((value, _)), _) => scope.check_job(&w.job, team_of(value).as_deref())?,
        (None, Change::Delete) => return Err(Scope::no_job(&w.job)),
        (None, Change::Put(_)) => {}
    }
    if let Change::Put(spec) = &w.change {
        scope.check_team(spec.team.as_deref())?;
    }
    if precondition.expected.is_none() {
        match stored {
            Some((_, rev)) => precondition.expected = Some(*rev),
            None => precondition.create_only = true,
        }
    }
    Ok(())
}

/// The value a save stores: withheld (`null`) secrets filled in from the stored spec (and
/// then saved only over that revision), checked against the size limit; with `scope`, the
/// teams checked first ([`check_teams`]); with `deps` (every job's team after the batch, read
/// whenever a save has dependents), the dependents checked and the teams checked recorded
/// ([`dependencies::check`]): a spec's `dependency_teams` is always the master's.
fn prepare(
    index: usize,
    w: &Write,
    snapshot: Option<&Snapshot>,
    history: Option<(&Keys, &Origin)>,
    (scope, deps): (Option<&Scope>, Option<(&JobTeams, &Scope)>),
) -> ApiResult<Prepared> {
    let mut precondition = w.precondition;
    if let Some(scope) = scope {
        check_teams(w, snapshot, scope, &mut precondition)?;
    }
    let Change::Put(spec) = &w.change else {
        return Ok(Prepared { index, value: None, spec: None, precondition, history: None, unchanged: None });
    };
    let mut spec = spec.clone();
    spec.dependency_teams = match deps {
        Some((teams, scope)) => dependencies::check(&spec, teams, scope)?,
        None => BTreeMap::new(),
    };
    if spec.withholds_secrets() {
        let stored = snapshot.and_then(|s| s.jobs.get(&w.job));
        let stored_spec = stored.and_then(|(value, _)| JobSpec::from_json(value).ok());
        spec.keep_secrets(stored_spec.as_ref()).map_err(|e| ApiError::bad_request(Some(e.field), e.why))?;
        if let (None, Some((_, rev))) = (precondition.expected, stored) {
            precondition.expected = Some(*rev);
        }
    }
    let value = serde_json::to_vec(&spec).map_err(|e| ApiError::internal(&e))?;
    // What is stored is checked, not only what was sent: defaults and kept secrets add bytes,
    // and a stored spec over the limit would be refused by every worker.
    if value.len() > MAX_SPEC_BYTES {
        return Err(ApiError::too_large(format!(
            "the job spec as stored (with defaults and kept secrets filled in) is {} bytes; the limit is {MAX_SPEC_BYTES}",
            value.len()
        )));
    }
    let history = history.map(|(keys, origin)| origin.entry(keys, &w.job, &value));
    Ok(Prepared { index, value: Some(value), spec: Some(spec), precondition, history, unchanged: None })
}

/// Marks the saves of `ready` whose value is byte for byte the one `snapshot` read, at a
/// revision their precondition accepts: they write nothing (no saved version either), and
/// their transaction only checks that the job is still at that revision. Secret values count
/// like any other byte: a real save that sends a wrong one overwrites the stored secret, so it
/// confirms nothing for free (a dry run never compares them: [`JobStore::plan`]).
fn mark_unchanged(writes: &[Write], ready: &mut [Prepared], snapshot: &Snapshot) {
    for p in ready {
        let (Some(value), Some((stored, rev))) = (&p.value, snapshot.jobs.get(&writes[p.index].job)) else {
            continue;
        };
        if value == stored && holds(true, p.precondition, Some(*rev)) {
            p.unchanged = Some(*rev);
            p.history = None;
        }
    }
}

/// A change whose transaction failed, the job being at `current`: refused as [`refusal_of`]
/// says, except a save found unchanged whose precondition still holds (the job was written
/// after the read, and the write would have gone through): that one is compared again.
fn refused(
    w: &Write,
    p: &Prepared,
    current: Option<i64>,
    outcomes: &mut [Option<Outcome>],
    again: &mut Vec<(usize, Retry)>,
) {
    if p.unchanged.is_some() && holds(true, p.precondition, current) {
        again.push((p.index, Retry::Compared));
    } else {
        outcomes[p.index] = Some(Err(refusal_of(w, p, current)));
    }
}

/// After `job` was deleted: the executions waiting in its queue (`concurrency: queue`) will not
/// run; their entries go, and so do their `queued` claims (which have no lease). Any master may,
/// at once: each claim is deleted only while it still says `queued`.
async fn drop_queue(client: Client, keys: Keys, job: String) {
    let mut kv = client.kv_client();
    let opts = GetOptions::new().with_prefix();
    let resp = match etcd("queue_list", kv.get(keys.job_queue_prefix(&job), Some(opts))).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::warn!(job, error = %e, "listing the queue of a deleted job failed: its entries and queued claims stay");
            return;
        }
    };
    let waiting = serde_json::to_vec(&etcron_model::stored::Claim::waiting()).unwrap_or_default();
    for kv_entry in resp.kvs() {
        let mut ops = vec![TxnOp::delete(kv_entry.key(), None)];
        let entry = serde_json::from_slice::<etcron_model::stored::QueuedRun>(kv_entry.value());
        if let Err(e) = &entry {
            let key = String::from_utf8_lossy(kv_entry.key());
            tracing::error!(job, %key, error = %e, "queue entry in etcd is malformed: removed, its claim (if any) stays");
        }
        if let Ok(entry) = entry {
            let claim = keys.claim(&entry.execution_id);
            ops.push(TxnOp::txn(
                Txn::new()
                    .when([Compare::value(claim.as_str(), CompareOp::Equal, waiting.clone())])
                    .and_then([TxnOp::delete(claim.as_str(), None)]),
            ));
        }
        if let Err(e) = etcd("queue_drop", kv.txn(Txn::new().and_then(ops))).await {
            tracing::warn!(job, error = %e, "dropping the queue of a deleted job failed");
            return;
        }
    }
    if !resp.kvs().is_empty() {
        tracing::info!(job, dropped = resp.kvs().len(), "deleted job: its queued executions will not run");
    }
}

/// Deletes the oldest saved versions of `job` beyond [`MAX_SPEC_VERSIONS`] or beyond
/// `max_bytes` in all ([`versions_to_prune`]; after a save; any master may, at once: deleting
/// a deleted key is harmless).
async fn prune_history(client: Client, keys: Keys, job: String, max_bytes: u64) {
    let mut kv = client.kv_client();
    // Values too, for their sizes: at most MAX_SPEC_VERSIONS of them, each within a spec's limit.
    let opts = GetOptions::new().with_prefix();
    let Ok(resp) = etcd("history_list", kv.get(keys.history_of(&job), Some(opts))).await else { return };
    let versions: Vec<(i64, u64, Vec<u8>)> =
        resp.kvs().iter().map(|kv| (kv.create_revision(), kv.value().len() as u64, kv.key().to_vec())).collect();
    let old = versions_to_prune(versions, max_bytes);
    if old.is_empty() {
        return;
    }
    tracing::debug!(job, pruned = old.len(), "old saved versions deleted (count or bytes kept per job)");
    for old in old.chunks(TXN_CHANGES) {
        let ops: Vec<TxnOp> = old.iter().map(|key| TxnOp::delete(key.clone(), None)).collect();
        if let Err(e) = etcd("history_prune", kv.txn(Txn::new().and_then(ops))).await {
            tracing::warn!(job, error = %e, "deleting old saved versions failed; the next save tries again");
            return;
        }
    }
}

/// The keys of the saved versions (create revision, size, key) to delete: the oldest, until
/// at most [`MAX_SPEC_VERSIONS`] are left holding at most `max_bytes` in all. The newest is
/// always kept.
fn versions_to_prune(mut versions: Vec<(i64, u64, Vec<u8>)>, max_bytes: u64) -> Vec<Vec<u8>> {
    versions.sort_unstable_by_key(|v| std::cmp::Reverse(v.0));
    let mut total = 0u64;
    let mut kept = 0usize;
    for (_, size, _) in &versions {
        if kept > 0 && (kept >= MAX_SPEC_VERSIONS || total + size > max_bytes) {
            break;
        }
        total += size;
        kept += 1;
    }
    versions.into_iter().skip(kept).map(|(_, _, key)| key).collect()
}

/// With every job read at one revision (and the writes guarded on it), preconditions are
/// decided here, saves that would take a team past `quota` jobs are refused
/// ([`quota::check`]), and so are saves that would close a dependency cycle. What is left is
/// to be written.
fn decide_locally(
    writes: &[Write],
    ready: Vec<Prepared>,
    snapshot: &Snapshot,
    outcomes: &mut [Option<Outcome>],
    shown: &dyn Fn(&str) -> bool,
    quota: Option<u64>,
) -> Vec<Prepared> {
    let mut accepted = Vec::new();
    for p in ready {
        let w = &writes[p.index];
        let current = snapshot.jobs.get(&w.job).map(|(_, rev)| *rev);
        if holds(p.value.is_some(), p.precondition, current) {
            accepted.push(p);
        } else {
            outcomes[p.index] = Some(Err(refusal_of(w, &p, current)));
        }
    }
    if let Some(max) = quota {
        accepted = quota::check(writes, accepted, snapshot, outcomes, max);
    }
    let stored = stored_graph(snapshot);
    let mut graph = stored.clone();
    for p in &accepted {
        match &writes[p.index].change {
            Change::Put(spec) => graph.set(&writes[p.index].job, spec.on_success.iter().chain(&spec.on_failure)),
            Change::Delete => graph.set(&writes[p.index].job, Vec::<String>::new()),
        }
    }
    // Refusing a save puts its stored edges back, which may close another cycle: until none.
    loop {
        let refused = accepted.iter().position(|p| match &writes[p.index].change {
            Change::Put(spec) => cycle_error(&writes[p.index].job, spec, &graph, shown).is_some(),
            Change::Delete => false,
        });
        let Some(at) = refused else { break };
        let p = accepted.remove(at);
        let w = &writes[p.index];
        if let Change::Put(spec) = &w.change {
            outcomes[p.index] = cycle_error(&w.job, spec, &graph, shown).map(Err);
        }
        graph.set(&w.job, stored.dependents(&w.job).to_vec());
    }
    accepted
}

/// Whether a precondition holds for a job at revision `current` (`None`: absent).
fn holds(save: bool, precondition: Precondition, current: Option<i64>) -> bool {
    match (precondition.expected, save) {
        (Some(rev), _) => current == Some(rev),
        (None, true) => !(precondition.create_only && current.is_some()),
        (None, false) => current.is_some(),
    }
}

/// Why a prepared write was refused, the job being at `current`: as [`refusal`], except for a
/// save pinned to the job's absence that the client did not ask for (its teams were checked
/// against that absence), which someone else's create beat.
fn refusal_of(w: &Write, p: &Prepared, current: Option<i64>) -> ApiError {
    if p.precondition.create_only && !w.precondition.create_only && current.is_some() {
        return ApiError::conflict(format!("job {:?} was created by someone else meanwhile; reload and retry", w.job));
    }
    refusal(w, p.precondition, current)
}

/// Why a write was refused, the job being at `current` (`None`: absent).
fn refusal(w: &Write, precondition: Precondition, current: Option<i64>) -> ApiError {
    let name = &w.job;
    let save = matches!(w.change, Change::Put(_));
    match (current, precondition.expected) {
        (None, _) if !save => Scope::no_job(name),
        (Some(_), _) if !save => {
            ApiError::conflict(format!("job {name:?} was changed by someone else; reload before deleting"))
        }
        (Some(rev), Some(want)) => ApiError::conflict(format!(
            "job {name:?} was changed by someone else: it is at revision {rev}, your edit was based on \
             revision {want}; reload and re-apply your change"
        )),
        (None, Some(_)) => {
            ApiError::conflict(format!("job {name:?} was deleted by someone else; reload before saving"))
        }
        (Some(_), None) => ApiError::conflict(format!("job {name:?} already exists (If-None-Match: *)")),
        (None, None) => ApiError::conflict(format!("job {name:?} changed concurrently; retry")),
    }
}

/// The dependency edges of a stored job. Read on their own, without validating the rest, so the
/// check is cheap and a stored value that is otherwise invalid still counts its edges.
#[derive(Debug, Default, Deserialize)]
struct StoredEdges {
    #[serde(default)]
    on_success: Vec<String>,
    #[serde(default)]
    on_failure: Vec<String>,
}

fn stored_graph(snapshot: &Snapshot) -> DependencyGraph {
    let mut graph = DependencyGraph::new();
    for (job, (value, _)) in &snapshot.jobs {
        let edges: StoredEdges = serde_json::from_slice(value).unwrap_or_default();
        graph.set(job, edges.on_success.into_iter().chain(edges.on_failure));
    }
    graph
}

/// 400 `dependency_cycle` when `graph` has a cycle through `name`; the field is the entry of
/// the spec's list the cycle leaves by; the jobs `shown` refuses (the caller does not see them)
/// are not named.
fn cycle_error(name: &str, spec: &JobSpec, graph: &DependencyGraph, shown: &dyn Fn(&str) -> bool) -> Option<ApiError> {
    let cycle = graph.cycle_through(name)?;
    let step = cycle.first_step().unwrap_or(name);
    let field = [("on_success", &spec.on_success), ("on_failure", &spec.on_failure)]
        .into_iter()
        .find_map(|(list, jobs)| jobs.iter().position(|j| j == step).map(|i| format!("{list}[{i}]")));
    Some(ApiError::dependency_cycle(field, format!("dependency cycle: {}", cycle.shown(shown))))
}

/// The job's mod revision in a refused change's answer (its `get`); `None`: absent.
fn current_revision(ops: Vec<TxnOpResponse>) -> Option<i64> {
    ops.into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map(|kv| kv.mod_revision())),
            _ => None,
        })
        .flatten()
}

/// The outcome of a change whose transaction succeeded.
fn written(job: &str, p: &Prepared, ops: Vec<TxnOpResponse>, revision: i64) -> Written {
    if let (Some(rev), Some(value), Some(spec)) = (p.unchanged, &p.value, &p.spec) {
        return kept(job, (rev, value, spec), ops);
    }
    match (&p.value, &p.spec) {
        (Some(value), Some(spec)) => {
            let (mut previous, mut pause, mut job_put) = (None, None, true);
            for op in ops {
                match op {
                    // The job's put comes first; the saved version's put after it.
                    TxnOpResponse::Put(put) if job_put => {
                        job_put = false;
                        previous = put.prev_key().map(|kv| (kv.create_revision(), kv.value().to_vec()));
                    }
                    TxnOpResponse::Get(get) => {
                        pause = get.kvs().first().map(|kv| commands::stored_pause(job, kv.value()));
                    }
                    _ => {}
                }
            }
            let (created_revision, before) = match previous {
                Some((created, before)) => (created, Some(before)),
                None => (revision, None),
            };
            Written::Saved {
                created: before.is_none(),
                revision,
                created_revision,
                value: value.clone(),
                spec: spec.clone(),
                before,
                pause,
                unchanged: false,
            }
        }
        _ => {
            let before = ops.into_iter().find_map(|op| match op {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                _ => None,
            });
            Written::Deleted { before }
        }
    }
}

/// The outcome of a save found unchanged at `revision`: its transaction read the job (the value
/// it keeps) and the job's pause, in that order.
fn kept(job: &str, (revision, value, spec): (i64, &[u8], &JobSpec), ops: Vec<TxnOpResponse>) -> Written {
    let mut gets = ops.into_iter().filter_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    });
    let created_revision = gets.next().and_then(|g| g.kvs().first().map(|kv| kv.create_revision()));
    let pause = gets.next().and_then(|g| g.kvs().first().map(|kv| commands::stored_pause(job, kv.value())));
    Written::Saved {
        created: false,
        revision,
        created_revision: created_revision.unwrap_or(revision),
        value: value.to_vec(),
        spec: Box::new(spec.clone()),
        pause,
        before: Some(value.to_vec()),
        unchanged: true,
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

/// Writes grouped into transactions of at most [`TXN_CHANGES`] changes and [`TXN_BYTES`].
fn chunks(ready: Vec<Prepared>) -> Vec<Vec<Prepared>> {
    let mut out: Vec<Vec<Prepared>> = Vec::new();
    let mut bytes = 0;
    for p in ready {
        let size = p.value.as_ref().map_or(0, Vec::len) + p.history.as_ref().map_or(0, |(_, v)| v.len());
        match out.last_mut() {
            Some(last) if last.len() < TXN_CHANGES && bytes + size <= TXN_BYTES => {
                bytes += size;
                last.push(p);
            }
            _ => {
                bytes = size;
                out.push(vec![p]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(index: usize, size: Option<usize>) -> Prepared {
        Prepared {
            index,
            value: size.map(|n| vec![b'x'; n]),
            spec: None,
            precondition: Precondition::default(),
            history: None,
            unchanged: None,
        }
    }

    #[test]
    fn chunks_respect_the_change_and_byte_limits() {
        let many: Vec<Prepared> = (0..250).map(|i| prepared(i, Some(10))).collect();
        let sizes: Vec<usize> = chunks(many).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
        let big: Vec<Prepared> = (0..40).map(|i| prepared(i, Some(60 * 1024))).collect();
        let sizes: Vec<usize> = chunks(big).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![17, 17, 6], "17 × 60 KiB fit in 1 MiB, 18 do not");
        let order: Vec<usize> =
            chunks((0..5).map(|i| prepared(i, None)).collect()).into_iter().flatten().map(|p| p.index).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
        assert!(chunks(Vec::new()).is_empty());
    }

    #[test]
    fn preconditions_hold_as_http_says() {
        let if_match = |rev| Precondition { expected: Some(rev), create_only: false };
        let create = Precondition { expected: None, create_only: true };
        let any = Precondition::default();
        assert!(holds(true, if_match(5), Some(5)));
        assert!(!holds(true, if_match(5), Some(6)));
        assert!(!holds(true, if_match(5), None));
        assert!(holds(true, create, None));
        assert!(!holds(true, create, Some(3)));
        assert!(holds(true, any, None) && holds(true, any, Some(3)));
        assert!(holds(false, any, Some(3)) && !holds(false, any, None), "a delete needs the job");
        assert!(holds(false, if_match(3), Some(3)) && !holds(false, if_match(3), Some(4)));
    }

    fn write(job: &str, change: Change, precondition: Precondition) -> Write {
        Write { job: job.to_owned(), change, precondition }
    }

    fn spec(deps: &[&str]) -> Change {
        let json = serde_json::json!({
            "schedule": "0 * * * * *", "task": {"kind": "shell", "command": "true"}, "on_success": deps
        });
        Change::Put(Box::new(JobSpec::from_value(json).unwrap_or_else(|e| panic!("{e}"))))
    }

    #[test]
    fn refusals_say_what_happened() {
        let put = write("a", spec(&[]), Precondition { expected: Some(4), create_only: false });
        assert!(refusal(&put, put.precondition, Some(9))
            .message
            .contains("at revision 9, your edit was based on revision 4"));
        assert_eq!(refusal(&put, put.precondition, None).status, 409);
        let del = write("a", Change::Delete, Precondition::default());
        assert_eq!(refusal(&del, del.precondition, None).status, 404);
        assert_eq!(refusal(&del, del.precondition, Some(2)).status, 409);
        let create = write("a", spec(&[]), Precondition { expected: None, create_only: true });
        assert!(refusal(&create, create.precondition, Some(2)).message.contains("already exists"));
    }

    fn in_team(team: Option<&str>) -> Change {
        let json = serde_json::json!({
            "schedule": "0 * * * * *", "task": {"kind": "shell", "command": "true"}, "team": team
        });
        Change::Put(Box::new(JobSpec::from_value(json).unwrap_or_else(|e| panic!("{e}"))))
    }

    #[test]
    fn the_job_quota_counts_each_team_after_the_batchs_deletes_and_moves() {
        let stored = |team: &str| (serde_json::to_vec(&serde_json::json!({ "team": team })).unwrap_or_default(), 5);
        // Team a holds a1 and a2, team b holds b1; the quota is 2.
        let snapshot = Snapshot {
            revision: 5,
            jobs: [("a1", "a"), ("a2", "a"), ("b1", "b")].iter().map(|(j, t)| ((*j).to_owned(), stored(t))).collect(),
            complete: true,
        };
        let any = Precondition::default();
        let writes = vec![
            write("a3", in_team(Some("a")), any), // refused: a is full
            write("a1", in_team(Some("a")), any), // an update within a: allowed
            write("b2", in_team(Some("b")), any), // b reaches 2
            write("a2", in_team(Some("c")), any), // a move to c frees a place in a...
            write("a4", in_team(Some("a")), any), // ...taken here
            write("b1", Change::Delete, any),     // a delete counts first: b3 fits
            write("b3", in_team(Some("b")), any),
            write("free", in_team(None), any), // no team, no quota
        ];
        let ready = (0..writes.len()).map(|i| prepared(i, Some(10))).collect();
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let kept = quota::check(&writes, ready, &snapshot, &mut outcomes, 2);
        assert_eq!(kept.iter().map(|p| p.index).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6, 7]);
        let Some(Err(e)) = &outcomes[0] else { panic!("a3 must be refused") };
        assert_eq!((e.status.as_u16(), e.code), (409, "quota_exceeded"));
        assert!(e.message.contains("team \"a\"") && e.message.contains("(max_jobs_per_team) is 2"), "{}", e.message);
    }

    #[test]
    fn history_keeps_the_newest_versions_within_count_and_bytes() {
        let versions =
            |n: i64, size: u64| (1..=n).map(|rev| (rev, size, rev.to_string().into_bytes())).collect::<Vec<_>>();
        let names = |keys: Vec<Vec<u8>>| keys.into_iter().map(|k| String::from_utf8(k).unwrap()).collect::<Vec<_>>();
        // Small versions: only the count binds (the oldest 20 of 120 go).
        let pruned = names(versions_to_prune(versions(120, 10), 1 << 20));
        assert_eq!(pruned.len(), 20);
        assert!(pruned.iter().all(|k| k.parse::<i64>().unwrap() <= 20));
        // Large versions: 1000 bytes each within 3500 keeps the newest 3.
        let pruned = names(versions_to_prune(versions(10, 1000), 3500));
        assert_eq!(pruned, vec!["7", "6", "5", "4", "3", "2", "1"]);
        // The newest is kept whatever its size.
        assert!(versions_to_prune(versions(1, 9000), 100).is_empty());
        assert!(versions_to_prune(Vec::new(), 100).is_empty());
    }

    #[test]
    fn a_save_of_the_stored_value_writes_nothing_at_the_revision_read() {
        let Change::Put(stored) = spec(&[]) else { unreachable!() };
        let value = serde_json::to_vec(&stored).unwrap();
        let snapshot = Snapshot {
            revision: 9,
            jobs: ["same", "stale", "create", "pinned", "gone"]
                .iter()
                .map(|j| ((*j).to_owned(), (value.clone(), 7)))
                .chain([("other".to_owned(), (b"{\"schedule\":\"@daily\"}".to_vec(), 7))])
                .collect(),
            complete: false,
        };
        let (any, at) = (Precondition::default(), |rev| Precondition { expected: Some(rev), create_only: false });
        let writes = vec![
            write("same", spec(&[]), any),    // 0: unchanged
            write("stale", spec(&[]), at(6)), // 1: refused as a write
            write("create", spec(&[]), Precondition { expected: None, create_only: true }), // 2: likewise
            write("pinned", spec(&[]), at(7)), // 3: unchanged
            write("other", spec(&[]), any),   // 4: differs
            write("absent", spec(&[]), any),  // 5: a create
            write("gone", Change::Delete, any), // 6: a delete
        ];
        let keys = Keys::new("/t").unwrap();
        let origin = Origin::default();
        let mut ready: Vec<Prepared> = writes
            .iter()
            .enumerate()
            .map(|(i, w)| prepare(i, w, Some(&snapshot), Some((&keys, &origin)), (None, None)).unwrap())
            .collect();
        mark_unchanged(&writes, &mut ready, &snapshot);
        let marked: Vec<Option<i64>> = ready.iter().map(|p| p.unchanged).collect();
        assert_eq!(marked, [Some(7), None, None, Some(7), None, None, None]);
        assert!(ready[0].history.is_none() && ready[3].history.is_none(), "no saved version either");
        assert!(ready[4].history.is_some() && ready[5].history.is_some());

        // Its transaction failed: the job is at another revision now. A save that asked for no
        // revision is compared again (its write would have gone through); one pinned to the
        // revision read is refused, as its write would be.
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let mut again = Vec::new();
        refused(&writes[0], &ready[0], Some(8), &mut outcomes, &mut again);
        refused(&writes[0], &ready[0], None, &mut outcomes, &mut again);
        assert_eq!(again, [(0, Retry::Compared), (0, Retry::Compared)], "deleted meanwhile: created again");
        refused(&writes[3], &ready[3], Some(8), &mut outcomes, &mut again);
        assert!(matches!(&outcomes[3], Some(Err(e)) if e.status == 409 && e.message.contains("at revision 8")));
        refused(&writes[1], &ready[1], Some(8), &mut outcomes, &mut again);
        assert!(matches!(&outcomes[1], Some(Err(e)) if e.status == 409));
        assert_eq!(again.len(), 2, "a write is never compared again");
    }

    #[test]
    fn the_batch_is_checked_for_cycles_as_a_whole() {
        // Stored: a → b. The batch turns it into b → a and adds c → c.
        let stored =
            |deps: &[&str]| (serde_json::to_vec(&serde_json::json!({"on_success": deps})).unwrap_or_default(), 10);
        let snapshot = Snapshot {
            revision: 10,
            jobs: [("a".to_owned(), stored(&["b"])), ("b".to_owned(), stored(&[]))].into_iter().collect(),
            complete: true,
        };
        let any = Precondition::default();
        let writes = vec![write("a", spec(&[]), any), write("b", spec(&["a"]), any), write("c", spec(&["c"]), any)];
        let ready = |writes: &[Write]| -> Vec<Prepared> {
            writes.iter().enumerate().filter_map(|(i, w)| prepare(i, w, None, None, (None, None)).ok()).collect()
        };
        let mut outcomes: Vec<Option<Outcome>> = vec![None, None, None];
        let accepted = decide_locally(&writes, ready(&writes), &snapshot, &mut outcomes, &|_| true, None);
        assert_eq!(accepted.iter().map(|p| p.index).collect::<Vec<_>>(), vec![0, 1], "the swap applies together");
        let Some(Err(e)) = &outcomes[2] else { panic!("c → c must be refused") };
        assert_eq!((e.code, e.field.as_deref()), ("dependency_cycle", Some("on_success[0]")));

        // Without the change to a (refused by its precondition), b → a closes a → b → a.
        let stale = Precondition { expected: Some(3), create_only: false };
        let writes = vec![write("a", spec(&[]), stale), write("b", spec(&["a"]), any)];
        let mut outcomes: Vec<Option<Outcome>> = vec![None, None];
        let accepted = decide_locally(&writes, ready(&writes), &snapshot, &mut outcomes, &|_| true, None);
        assert!(accepted.is_empty());
        assert!(matches!(&outcomes[0], Some(Err(e)) if e.status == 409));
        assert!(matches!(&outcomes[1], Some(Err(e)) if e.code == "dependency_cycle"));
    }
}
