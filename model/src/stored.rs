//! The JSON values workers and masters store in etcd, other than `JobSpec`: registrations,
//! claims, running markers, kill commands, run requests, pauses, spec versions and job state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::keys::{ExecutionId, Tick};
use crate::spec::JobSpec;
use crate::{rfc3339_ms, UnixMs};

use crate::record::{ExecutionRecord, RunParams, Status, TriggerKind};

/// `{ns}/workers/{worker_id}`, under the worker's session lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    pub hostname: String,
    pub pid: u32,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub capacity: u32,
    pub running: u32,
    pub version: String,
    /// RFC 3339.
    pub started_at: String,
    /// Where masters read the live output of this worker's running executions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_url: Option<String>,
    /// Bearer token for `output_url`. Only in etcd: the API never shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_token: Option<String>,
    /// Users this worker runs shell tasks as (`task.user`): its `run_as_users`, only ever
    /// non-empty on a worker running as root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_as_users: Vec<String>,
    /// What this worker lets HTTP and gRPC tasks connect to although it is refused by default
    /// (loopback, link-local, its control plane named exactly): its `task_network_allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_network_allow: Vec<String>,
    /// The teams this worker is bound to (its `teams` setting): it runs only their jobs.
    /// Empty: a shared worker, which runs every job, with a team or without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<String>,
    /// Who its shell tasks without `task.user` run as: an account the admin chose (`task_user`,
    /// `root` included), `uid per team FIRST-LAST`, or `worker's own uid N`. Absent for workers
    /// that predate the setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_user: Option<String>,
    /// The oldest tick (Unix ms) whose fate this worker could not learn yet (its ledger of
    /// unsettled ticks): the survivors of its departure sweep from there, since what it would
    /// have settled dies with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsettled_from_ms: Option<UnixMs>,
    /// The handlers this executor runs (an application embedding `etcron-sdk`): it races for
    /// the jobs of those handler tasks only. Empty: a worker, which runs every other kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handlers: Vec<String>,
    /// The events its default notify targets listen for (what it sends of a job without
    /// `notify`): a save of such a job is warned about alerts no live worker would send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_notify: Vec<crate::spec::notify::NotifyEvent>,
    /// The account the worker process itself runs as, `root (uid 0)`: what a task naming no
    /// `task.user` could become on a worker that cannot switch users, and what an operator
    /// should know before importing a user's crontab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_user: Option<String>,
}

/// How the runs-as settings of the live workers read, grouped: `uid per team 70000-70999 on
/// local-1, local-2 (the workers run as root (uid 0))`, one line per distinct setting; shell
/// workers only (an executor runs no shell task).
#[must_use]
pub fn runs_as_lines(workers: &[WorkerInfo]) -> Vec<String> {
    let mut groups: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    for w in workers.iter().filter(|w| w.handlers.is_empty()) {
        let task_user = w.task_user.clone().unwrap_or_else(|| "its own user".to_owned());
        let os_user = w.os_user.clone().unwrap_or_else(|| "an unknown account".to_owned());
        groups.entry((task_user, os_user)).or_default().push(&w.id);
    }
    groups
        .into_iter()
        .map(|((task_user, os_user), ids)| {
            let what = if task_user == "root" {
                "root (every task without task.user runs as root)".to_owned()
            } else {
                task_user
            };
            format!("{what} on {} (the worker process runs as {os_user})", ids.join(", "))
        })
        .collect()
}

impl WorkerInfo {
    /// True when the worker's labels include every entry of `selector`.
    #[must_use]
    pub fn matches(&self, selector: &BTreeMap<String, String>) -> bool {
        labels_match(&self.labels, selector)
    }

    /// True when this worker may run `spec`: its labels match the selector, it allows the
    /// task's user, it serves the job's team, and it runs the task's kind ([`runs_task`]).
    #[must_use]
    pub fn may_run(&self, spec: &JobSpec) -> bool {
        self.fits(&spec.selector, spec.run_as_user(), spec.team.as_deref(), spec.task.handler())
    }

    /// [`may_run`](Self::may_run) for a job known by its [`Placement`] only.
    #[must_use]
    pub fn may_place(&self, p: &Placement) -> bool {
        self.fits(&p.selector, p.user.as_deref(), p.team.as_deref(), p.handler.as_deref())
    }

    fn fits(
        &self,
        selector: &BTreeMap<String, String>,
        user: Option<&str>,
        team: Option<&str>,
        handler: Option<&str>,
    ) -> bool {
        self.matches(selector)
            && may_run_as(&self.run_as_users, user)
            && serves_team(&self.teams, team)
            && runs_task(&self.handlers, handler)
    }
}

/// What a job asks of the worker that runs it: the parts of its spec
/// [`WorkerInfo::may_run`] reads. Many jobs share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Placement {
    pub selector: BTreeMap<String, String>,
    /// `task.user`.
    pub user: Option<String>,
    pub team: Option<String>,
    /// The handler of an executor task.
    pub handler: Option<String>,
}

impl Placement {
    #[must_use]
    pub fn of(spec: &JobSpec) -> Self {
        Self {
            selector: spec.selector.clone(),
            user: spec.run_as_user().map(str::to_owned),
            team: spec.team.clone(),
            handler: spec.task.handler().map(str::to_owned),
        }
    }
}

/// True when a process registering `handlers` runs a task naming `handler` (`None`: a shell,
/// HTTP or gRPC task): an executor (handlers registered) runs its handlers' tasks only, and a
/// worker (none) every other kind. An application embedding an executor never runs a shell
/// command of the cluster's.
#[must_use]
pub fn runs_task(handlers: &[String], handler: Option<&str>) -> bool {
    match handler {
        Some(name) => handlers.iter().any(|h| h == name),
        None => handlers.is_empty(),
    }
}

/// True when a worker bound to `teams` runs the jobs of `team` (`None`: a job without a team):
/// a worker bound to no team is shared and runs every job; a bound worker only its teams' jobs,
/// never a job without a team.
#[must_use]
pub fn serves_team(teams: &[String], team: Option<&str>) -> bool {
    teams.is_empty() || team.is_some_and(|t| teams.iter().any(|b| b == t))
}

/// True when a worker allowing `allowed` users may run a task as `user` (any worker may run a
/// task that names none).
#[must_use]
pub fn may_run_as(allowed: &[String], user: Option<&str>) -> bool {
    user.is_none_or(|u| allowed.iter().any(|a| a == u))
}

/// True when `labels` include every entry of `selector` (an empty selector matches all).
#[must_use]
pub fn labels_match(labels: &BTreeMap<String, String>, selector: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimState {
    Running,
    Done,
    Queued,
}

/// `{ns}/claims/{job}/{tick}{part}[#attempt]`: who won a tick. The key names the execution and
/// its create revision is the fencing token, so the value holds only the winner while the
/// claim is taken, `{"worker_id":"w1"}`, and the final status once it is closed,
/// `{"status":"succeeded"}` (the execution record says who ran it). Values written by older
/// versions (with `execution_id`, `attempt`, `state`) still read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub worker_id: String,
    /// Final status once the claim was rewritten `done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// A run's parameters, while taken: what a failover rerun of it runs with.
    #[serde(default, skip_serializing_if = "RunParams::is_empty")]
    pub params: RunParams,
    /// Waiting in its job's queue (`concurrency: queue`): `{"queued":true}`, on no lease, until
    /// the run it waits for ends and hands it the lock.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
}

impl Claim {
    /// The claim as its winning transaction writes it.
    #[must_use]
    pub fn taken(worker_id: &str) -> Self {
        Self { worker_id: worker_id.to_owned(), status: None, params: RunParams::default(), queued: false }
    }

    /// The claim as closed with `status`.
    #[must_use]
    pub fn closed(status: Status) -> Self {
        Self { worker_id: String::new(), status: Some(status), params: RunParams::default(), queued: false }
    }

    /// The claim of an execution waiting in its job's queue.
    #[must_use]
    pub fn waiting() -> Self {
        Self { worker_id: String::new(), status: None, params: RunParams::default(), queued: true }
    }

    /// `Done` once the claim carries a final status; `Queued` while it waits in the queue.
    #[must_use]
    pub fn state(&self) -> ClaimState {
        if self.status.is_some() {
            ClaimState::Done
        } else if self.queued {
            ClaimState::Queued
        } else {
            ClaimState::Running
        }
    }
}

/// `{ns}/running/{job}/{tick}{part}[#attempt]`, under the worker's session lease: an execution
/// that has run for a second (a shorter one is never written: its claim transaction's
/// `{ns}/inflight/...` key says it is looked after). In memory and in the API it carries
/// everything; in etcd only what the key does not tell (see [`RunningExecution::to_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningExecution {
    pub worker_id: String,
    pub execution_id: ExecutionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// When it was claimed, RFC 3339.
    pub started_at: String,
    /// When its task started (its process spawned, or handed to its executor): in markers
    /// written by this version, none in what a claim tells of a younger run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_started_ms: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<i64>,
    /// What started it and for which scheduled time, so a survivor can record or rerun it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_ms: Option<UnixMs>,
    /// The run's parameters, for its failover rerun.
    #[serde(default, skip_serializing_if = "RunParams::is_empty")]
    pub params: RunParams,
}

/// A running marker's value: `{"worker_id":"w1","started_ms":1764037206012,
/// "task_started_ms":1764037206015,"pid":42,"fencing_token":9001}` (`started_ms`: claimed), plus `trigger` / `scheduled_ms` only where the execution's tick does
/// not tell them (a catch-up, retry or failover run; a manual run's request time). Markers of
/// older versions (`started_at`, `execution_id`, ...) still read, their create revision being
/// the token.
#[derive(Debug, Serialize, Deserialize)]
struct StoredMarker {
    worker_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_ms: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task_started_ms: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    /// The claim's create revision (the marker is written after the claim, in its own txn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fencing_token: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trigger: Option<TriggerKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scheduled_ms: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "RunParams::is_empty")]
    params: RunParams,
}

impl RunningExecution {
    /// The marker's stored value (see [`StoredMarker`]).
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let tick = &self.execution_id.tick;
        let derived_trigger = TriggerKind::of_tick(tick);
        let started_ms = chrono::DateTime::parse_from_rfc3339(&self.started_at).ok().map(|t| t.timestamp_millis());
        let stored = StoredMarker {
            worker_id: self.worker_id.clone(),
            started_ms,
            started_at: started_ms.is_none().then(|| self.started_at.clone()),
            task_started_ms: self.task_started_ms,
            pid: self.pid,
            fencing_token: self.fencing_token,
            trigger: self.trigger.filter(|t| *t != derived_trigger),
            scheduled_ms: self.scheduled_ms.filter(|ms| tick.scheduled_ms() != Some(*ms)),
            params: self.params.clone(),
        };
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// What a claim taken by a worker (`Claim::taken`, not yet closed) tells of a run too young
    /// to have its marker: its claim time is taken to be its scheduled time (a claim carries no
    /// time: every byte of it is paid per fire; a scheduled tick is claimed at its time, or
    /// `claim_ahead` before it), and its task's start is not known yet. A manual run's request
    /// time only the marker holds: now stands for it (within a second of it).
    #[must_use]
    pub fn from_claim(execution_id: &ExecutionId, claim: &Claim, create_revision: i64) -> Self {
        let tick_ms = execution_id.tick.scheduled_ms();
        let claimed_ms = tick_ms.unwrap_or_else(crate::now_ms);
        Self {
            worker_id: claim.worker_id.clone(),
            execution_id: execution_id.clone(),
            pid: None,
            started_at: rfc3339_ms(claimed_ms),
            task_started_ms: None,
            fencing_token: Some(create_revision),
            trigger: Some(TriggerKind::of_tick(&execution_id.tick)),
            scheduled_ms: Some(claim.params.as_of_ms.or(tick_ms).unwrap_or(claimed_ms)),
            params: claim.params.clone(),
        }
    }

    /// Reads a marker stored under the key of `execution_id` with this create revision.
    #[must_use]
    pub fn from_stored(execution_id: ExecutionId, bytes: &[u8], create_revision: i64) -> Option<Self> {
        let stored: StoredMarker = serde_json::from_slice(bytes).ok()?;
        let started_at = match (stored.started_ms, stored.started_at) {
            (Some(ms), _) => rfc3339_ms(ms),
            (None, Some(at)) => at,
            (None, None) => return None,
        };
        let trigger = stored.trigger.unwrap_or_else(|| TriggerKind::of_tick(&execution_id.tick));
        let scheduled_ms = stored.scheduled_ms.or(execution_id.tick.scheduled_ms());
        Some(Self {
            worker_id: stored.worker_id,
            execution_id,
            pid: stored.pid,
            started_at,
            task_started_ms: stored.task_started_ms,
            fencing_token: Some(stored.fencing_token.unwrap_or(create_revision)),
            trigger: Some(trigger),
            scheduled_ms,
            params: stored.params,
        })
    }
}

/// `{ns}/kill/{job}/{execution_id|all}`. Applies to executions claimed before the key was
/// written (claim create revision < kill mod revision), so it never kills later runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillCommand {
    /// RFC 3339; may be left out by an operator writing `{}` with `etcdctl`.
    #[serde(default)]
    pub requested_at: String,
    #[serde(default)]
    pub reason: String,
}

/// `{ns}/trigger/{job}/{request_id}`: a run request. Manual runs come from the API (under a
/// 60 s lease); retries, failover reruns, dependency runs and catch-up runs are written by
/// workers in the same transaction that closes the execution they follow, and live until a
/// worker claims (or records) the execution they name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRequest {
    /// RFC 3339.
    pub requested_at: String,
    pub requested_at_ms: UnixMs,
    #[serde(default)]
    pub reason: String,
    #[serde(default = "manual")]
    pub kind: TriggerKind,
    /// The execution to claim; `{job}@manual-{request_id}#1` when absent (manual runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<ExecutionId>,
    /// The scheduled time the run belongs to (retries, failover, catch-up); the request time
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_ms: Option<UnixMs>,
    /// Not to be started before this time (retry backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<UnixMs>,
    /// The execution that caused this one (the failed attempt, the lost run, the parent job's run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ExecutionId>,
    /// Catch-up ticks still to run after this one, oldest first (`misfire: run_all`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<UnixMs>,
    /// The run's parameters (a manual run's, passed on to its retries and failover reruns).
    #[serde(default, skip_serializing_if = "RunParams::is_empty")]
    pub params: RunParams,
    /// The execution waited in its job's queue: its claim is `queued` (taken by this request,
    /// not created), and the lock was handed to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dequeued: bool,
    /// A worker that races for it only after the others had their turn (the worker a run
    /// asked to be moved away from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avoid: Option<String>,
    /// The workflow run the execution is a step of (the workflow module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// This run's priority instead of the job's (`jobs run --priority`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The W3C `traceparent` the run continues (the API request's trace): the worker's spans
    /// and the task's `traceparent` are its children. Absent: the trace is derived from the
    /// execution (docs/metrics.md, tracing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// `{ns}/queue/{job}/q{part}/{scheduled_ms}-{tick}#{attempt}`: an execution waiting for the
/// lock of a `concurrency: queue` job, and what its run request will say when its turn comes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedRun {
    pub execution_id: ExecutionId,
    pub scheduled_ms: UnixMs,
    pub trigger: TriggerKind,
    #[serde(default, skip_serializing_if = "RunParams::is_empty")]
    pub params: RunParams,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ExecutionId>,
    pub queued_at_ms: UnixMs,
    /// The execution that held the lock when this one was queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind: Option<ExecutionId>,
}

impl QueuedRun {
    /// The run request that starts it: its own execution, with the lock handed over.
    #[must_use]
    pub fn request(&self, now_ms: UnixMs) -> TriggerRequest {
        TriggerRequest {
            kind: self.trigger,
            execution_id: Some(self.execution_id.clone()),
            scheduled_ms: Some(self.scheduled_ms),
            parent: self.parent.clone(),
            params: self.params.clone(),
            dequeued: true,
            ..TriggerRequest::manual(now_ms, &format!("its turn in the queue of {}", self.execution_id.job))
        }
    }
}

fn manual() -> TriggerKind {
    TriggerKind::Manual
}

impl TriggerRequest {
    /// The execution this request (`{ns}/trigger/{job}/{request_id}`) runs: its
    /// `execution_id` when it names one of `job`, else the manual run `{job}@manual-{request_id}#1`.
    #[must_use]
    pub fn execution(&self, job: &str, request_id: &str) -> ExecutionId {
        self.execution_id
            .clone()
            .filter(|id| id.job == job)
            .unwrap_or_else(|| ExecutionId::new(job, Tick::Manual(request_id.to_owned())))
    }

    /// A manual run request made now.
    #[must_use]
    pub fn manual(now_ms: UnixMs, reason: &str) -> Self {
        Self {
            requested_at: crate::rfc3339_ms(now_ms),
            requested_at_ms: now_ms,
            reason: reason.to_owned(),
            kind: TriggerKind::Manual,
            execution_id: None,
            scheduled_ms: None,
            not_before_ms: None,
            parent: None,
            then: Vec::new(),
            params: RunParams::default(),
            dequeued: false,
            avoid: None,
            workflow: None,
            priority: None,
            traceparent: None,
        }
    }
}

/// Longest reason an operator may give for a pause, in characters.
pub const MAX_PAUSE_REASON: usize = 500;

/// `{ns}/paused/{job}`: an operator paused the job, `{"by":"alice","at_ms":1764037206012,
/// "reason":"db migration"}`. Kept outside the spec, so that writing the spec again (as
/// `etcronctl jobs apply` does) never resumes a paused job; no lease: it lasts until resumed
/// or until the job is deleted.
///
/// **The key's existence is the pause**; the value only says who, when and why. Every field
/// may be missing (`{}` written with `etcdctl` is a pause by someone unknown), unknown fields
/// are ignored, and a value that does not parse at all still pauses the job: readers log it,
/// naming the key, and go on with [`Pause::default`] (fail safe: what was meant as a pause
/// never runs the job).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Who paused the job (the API caller's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the pause ends by itself (a master deletes the key then: see `master/src/duties/pause_expiry.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<UnixMs>,
    /// The final failure that paused the job (`pause_after_failures`); none for an operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
}

/// `{ns}/cordon/{worker}`: an operator took the worker out of the race for new runs (the API's
/// cordon and drain). Like a pause, the key's existence is the cordon: `{}` written by hand is
/// a cordon by someone unknown, and a value that does not parse still cordons the worker.
/// No lease: it outlives the worker's restarts until uncordoned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cordon {
    /// `true`: drained — the operator waits for its runs to end (the API says when it is
    /// empty); the worker treats both the same.
    #[serde(default)]
    pub drain: bool,
    /// Who cordoned the worker (the API caller's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<UnixMs>,
}

impl Cordon {
    /// A stored value; one that does not parse is a cordon by someone unknown (fail safe: what
    /// was meant as a cordon never races).
    #[must_use]
    pub fn from_stored(value: &[u8]) -> Self {
        serde_json::from_slice(value).unwrap_or_default()
    }
}

/// `{ns}/history/{job}/{entry}`: one saved version of a job's spec, written in the transaction
/// that saved it (its key's create revision is the spec's revision), secrets withheld.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecVersion {
    /// The spec as saved, its secrets `null` (and passwords in URLs redacted).
    pub spec: serde_json::Value,
    /// Who saved it: the caller's token name, `anonymous`, or `etcron` (a one-shot job
    /// disabled after its run).
    pub by: String,
    pub at_ms: UnixMs,
    /// How: `PUT /api/jobs/{job}`, `POST /api/batch`, `POST /api/jobs/{job}/rollback`, …
    pub via: String,
    /// The request's id: its audit entry's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// A rollback: the revision whose spec it saved again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored: Option<i64>,
    /// The tool that saved it, as the client says (`X-Etcron-Client`: `etcronctl apply`,
    /// `console`): a note for people, never a check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The file it came from, as the client says (`X-Etcron-Source`, or a batch change's
    /// `source`): `jobs/backup.toml`, a crontab's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Longest client note (`client`, `source`) a saved version keeps, in bytes.
pub const MAX_CLIENT_NOTE_BYTES: usize = 256;

/// Why `text` cannot be a client note of a saved version (`client`, `source`): too long, or
/// holding control characters (it is printed in tables and logs).
pub fn client_note_error(text: &str) -> Option<String> {
    if text.len() > MAX_CLIENT_NOTE_BYTES {
        Some(format!("is {} bytes long; at most {MAX_CLIENT_NOTE_BYTES}", text.len()))
    } else if text.chars().any(char::is_control) {
        Some("holds a control character".to_owned())
    } else if text.trim().is_empty() {
        Some("is empty".to_owned())
    } else {
        None
    }
}

/// Saved versions kept per job (older ones are deleted after each save).
pub const MAX_SPEC_VERSIONS: usize = 100;

/// Furthest ahead a pause may end by itself.
pub const MAX_PAUSE_UNTIL_MS: UnixMs = 366 * 86_400_000;

impl Pause {
    /// Whether the pause has ended by itself at `now_ms` (its key not yet deleted).
    #[must_use]
    pub fn expired(&self, now_ms: UnixMs) -> bool {
        self.until_ms.is_some_and(|until| until <= now_ms)
    }

    /// Reads a stored value; `Err` says why it does not parse (the job is paused all the same:
    /// see [`Pause`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        // serde would read a struct from an array too (fields by position).
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if !value.is_object() {
            return Err("a pause is a JSON object".to_owned());
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// `job paused`, `job paused by alice`, `job paused by alice: db migration`: the reason a
    /// tick of a paused job is recorded `skipped` with.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut text = "job paused".to_owned();
        if let Some(by) = self.by.as_deref().filter(|b| !b.is_empty()) {
            text.push_str(" by ");
            text.push_str(by);
        }
        if let Some(until) = self.until_ms {
            text.push_str(" until ");
            text.push_str(&crate::rfc3339_ms(until));
        }
        if let Some(reason) = self.reason.as_deref().filter(|r| !r.is_empty()) {
            text.push_str(": ");
            text.push_str(reason);
        }
        text
    }
}

/// Why a job's schedule does not fire (see [`halt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt<'a> {
    /// An operator paused it (`{ns}/paused/{job}`).
    Paused(&'a Pause),
    /// Its spec says `enabled: false`: declared so, or an `@at` job the workers disabled after
    /// its run.
    Disabled,
}

impl Halt<'_> {
    /// What a tick that does not run because of it is recorded `skipped` with.
    #[must_use]
    pub fn reason(&self) -> String {
        match self {
            Halt::Paused(pause) => pause.describe(),
            Halt::Disabled => "job disabled (its spec says enabled: false)".to_owned(),
        }
    }
}

/// **The rule for whether a job's schedule fires**, the one place workers and the API decide
/// it: a job fires iff its spec says `enabled` (the declared state) and no operator paused it
/// (`pause`, the value of `{ns}/paused/{job}` when that key exists). `None` when it fires;
/// else why not, the pause first. Manual runs are not subject to it.
#[must_use]
pub fn halt<'a>(spec: &crate::spec::JobSpec, pause: Option<&'a Pause>) -> Option<Halt<'a>> {
    match pause {
        Some(p) => Some(Halt::Paused(p)),
        None if !spec.enabled => Some(Halt::Disabled),
        None => None,
    }
}

/// Whether a job's schedule fires: [`halt`] is `None`.
#[must_use]
pub fn fires(spec: &crate::spec::JobSpec, pause: Option<&Pause>) -> bool {
    halt(spec, pause).is_none()
}

const MIN_STATE_MS: UnixMs = 1_000_000_000_000;
const MAX_STATE_MS: UnixMs = 9_999_999_999_999;

/// `{ns}/state/{job}`: the newest scheduled tick that was claimed (run, skipped, missed or
/// caught up). Workers starting after a full-cluster outage catch up from here (`misfire`).
///
/// Serialized as exactly `{"last_tick_ms":<13 digits>}` so that etcd can compare two values
/// bytewise (`value < new`) and a transaction only ever moves it forward. Unix ms have 13
/// digits from 2001-09-09 to 2286-11-20; earlier values are stored as the first 13-digit one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobState {
    pub last_tick_ms: UnixMs,
}

impl JobState {
    /// The stored bytes.
    #[must_use]
    pub fn to_bytes(self) -> Vec<u8> {
        format!("{{\"last_tick_ms\":{}}}", self.last_tick_ms.clamp(MIN_STATE_MS, MAX_STATE_MS)).into_bytes()
    }

    /// Reads stored bytes; `None` unless they are exactly what [`JobState::to_bytes`] writes,
    /// since only that form orders bytewise like its ticks (anything else, even valid JSON such
    /// as `{"last_tick_ms": 5}`, would stop transactions from moving the state forward).
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let state: JobState = serde_json::from_slice(bytes).ok()?;
        (state.to_bytes() == bytes).then_some(state)
    }
}

impl ExecutionRecord {
    /// What a running marker says of its execution, as a `running` record: for an execution
    /// whose own `running` record is not written yet (a run writes it once it has lasted
    /// `RUNNING_DETAIL_AFTER`; a shorter one only writes its final record).
    #[must_use]
    pub fn from_marker(marker: &RunningExecution) -> Self {
        let id = &marker.execution_id;
        let scheduled_ms = marker.scheduled_ms.or(id.tick.scheduled_ms()).unwrap_or(0);
        let trigger = marker.trigger.unwrap_or_else(|| TriggerKind::of_tick(&id.tick));
        let mut record = Self::blank(id, scheduled_ms, trigger, Status::Running, None);
        record.worker_id.clone_from(&marker.worker_id);
        record.claimed_at = Some(marker.started_at.clone());
        record.started_at = marker.task_started_ms.map(rfc3339_ms);
        record.fencing_token = marker.fencing_token;
        record.params.clone_from(&marker.params);
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_as_lines_group_the_workers_by_who_their_tasks_run_as() {
        let worker = |id: &str, task_user: Option<&str>, os_user: &str, handlers: &[&str]| -> WorkerInfo {
            serde_json::from_value(serde_json::json!({"id": id, "hostname": "h", "pid": 1, "capacity": 1, "running": 0,
                "version": "0", "started_at": "t", "task_user": task_user, "os_user": os_user, "handlers": handlers}))
            .unwrap()
        };
        let lines = runs_as_lines(&[
            worker("local-1", Some("uid per team 70000-70999"), "root (uid 0)", &[]),
            worker("local-2", Some("uid per team 70000-70999"), "root (uid 0)", &[]),
            worker("w3", Some("root"), "root (uid 0)", &[]),
            worker("exec", None, "app (uid 1000)", &["report"]),
        ]);
        assert_eq!(
            lines,
            [
                "root (every task without task.user runs as root) on w3 (the worker process runs as root (uid 0))",
                "uid per team 70000-70999 on local-1, local-2 (the worker process runs as root (uid 0))",
            ]
        );
    }

    #[test]
    fn an_executor_runs_its_handlers_only_and_a_worker_every_other_kind() {
        let hot = ["hot-list".to_owned()];
        assert!(runs_task(&hot, Some("hot-list")));
        assert!(!runs_task(&hot, Some("other")), "a handler it did not register");
        assert!(!runs_task(&hot, None), "an executor never runs a shell, HTTP or gRPC task");
        assert!(runs_task(&[], None));
        assert!(!runs_task(&[], Some("hot-list")), "a worker runs no handler");
    }

    #[test]
    fn a_shared_worker_runs_every_job_and_a_bound_one_its_teams_only() {
        assert!(serves_team(&[], Some("alpha")) && serves_team(&[], None), "shared: every job");
        let bound = ["alpha".to_owned(), "beta".to_owned()];
        assert!(serves_team(&bound, Some("alpha")) && serves_team(&bound, Some("beta")));
        assert!(!serves_team(&bound, Some("gamma")));
        assert!(!serves_team(&bound, None), "a bound worker never runs a job without a team");
    }

    #[test]
    fn a_running_marker_reads_as_a_running_record() {
        let id = ExecutionId::new("j", Tick::Manual("r1".to_owned()));
        let marker = RunningExecution {
            worker_id: "w2".to_owned(),
            execution_id: id.clone(),
            pid: Some(42),
            started_at: "2026-11-24T19:13:12.004Z".to_owned(),
            task_started_ms: None,
            fencing_token: Some(7_001),
            trigger: None,
            scheduled_ms: Some(1_795_547_592_000),
            params: RunParams::default(),
        };
        let record = ExecutionRecord::from_marker(&marker);
        assert_eq!((record.id, record.job.as_str(), record.status), (id, "j", Status::Running));
        assert_eq!(record.trigger, TriggerKind::Manual, "from the tick when the marker does not say");
        assert_eq!(record.scheduled_at, "2026-11-24T19:13:12.000Z");
        assert_eq!(record.claimed_at.as_deref(), Some("2026-11-24T19:13:12.004Z"));
        assert_eq!(record.started_at, None, "a marker of an older version does not say when its task started");
        assert_eq!((record.worker_id.as_str(), record.fencing_token), ("w2", Some(7_001)));
        assert_eq!((record.finished_at, record.exit_code), (None, None));
        // This version's marker says both, and keeps them through etcd.
        let marker = RunningExecution { task_started_ms: Some(1_795_547_592_011), ..marker };
        let stored = RunningExecution::from_stored(marker.execution_id.clone(), &marker.to_bytes(), 7_001).unwrap();
        let record = ExecutionRecord::from_marker(&stored);
        assert_eq!(record.claimed_at.as_deref(), Some("2026-11-24T19:13:12.004Z"));
        assert_eq!(record.started_at.as_deref(), Some("2026-11-24T19:13:12.011Z"));
    }

    #[test]
    fn a_runs_parameters_ride_its_claim_and_marker() {
        let id = ExecutionId::new("j", Tick::Manual("r1".to_owned()));
        let params = RunParams {
            env: BTreeMap::from([("DAY".to_owned(), "2026-11-01".to_owned())]),
            as_of_ms: Some(5),
            backfill: None,
            workflow: None,
        };
        let claim = Claim { params: params.clone(), ..Claim::taken("w1") };
        let bytes = serde_json::to_vec(&claim).unwrap();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"worker_id":"w1","params":{"env":{"DAY":"2026-11-01"},"as_of_ms":5}}"#
        );
        let back: Claim = serde_json::from_slice(&bytes).unwrap();
        let young = RunningExecution::from_claim(&id, &back, 9);
        assert_eq!((young.scheduled_ms, &young.params), (Some(5), &params), "as of 5, not now");
        let marker = RunningExecution { pid: Some(1), ..young };
        let stored = RunningExecution::from_stored(id.clone(), &marker.to_bytes(), 9).unwrap();
        assert_eq!(stored.params, params);
        assert_eq!(ExecutionRecord::from_marker(&stored).params, params);
        // Without parameters nothing is written for them.
        assert_eq!(serde_json::to_string(&Claim::taken("w1")).unwrap(), r#"{"worker_id":"w1"}"#);
        // A young run's claim: claimed at its tick, its task's start not known yet.
        let tick: ExecutionId = "j@1795547592000#1".parse().unwrap();
        let young = ExecutionRecord::from_marker(&RunningExecution::from_claim(&tick, &Claim::taken("w1"), 9));
        assert_eq!(young.claimed_at.as_deref(), Some("2026-11-24T19:13:12.000Z"));
        assert_eq!(young.started_at, None);
        // A young manual run without `as_of` reads as scheduled when it was claimed, not 1970.
        let before = crate::now_ms();
        let plain = ExecutionRecord::from_marker(&RunningExecution::from_claim(&id, &Claim::taken("w1"), 9));
        let scheduled = chrono::DateTime::parse_from_rfc3339(&plain.scheduled_at).unwrap().timestamp_millis();
        assert!(scheduled >= before && scheduled <= crate::now_ms(), "{}", plain.scheduled_at);
    }

    #[test]
    fn job_state_bytes_order_like_their_ticks() {
        let a = JobState { last_tick_ms: 5 }.to_bytes();
        let b = JobState { last_tick_ms: 1_700_000_000_000 }.to_bytes();
        let c = JobState { last_tick_ms: 1_700_000_000_001 }.to_bytes();
        assert!(a < b && b < c);
        let back: JobState = serde_json::from_slice(&a).unwrap();
        assert_eq!(back.last_tick_ms, 1_000_000_000_000);
        assert_eq!(JobState::from_bytes(&c), Some(JobState { last_tick_ms: 1_700_000_000_001 }));
        for bad in [&b"garbage"[..], b"{\"last_tick_ms\":5}", b"{\"last_tick_ms\": 1700000000000}", b"[]", b""] {
            assert_eq!(JobState::from_bytes(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(String::from_utf8(b).unwrap(), r#"{"last_tick_ms":1700000000000}"#);
    }

    fn spec(enabled: bool) -> crate::spec::JobSpec {
        let json =
            format!(r#"{{"schedule":"@hourly","enabled":{enabled},"task":{{"kind":"shell","command":"true"}}}}"#);
        crate::spec::JobSpec::from_json(json.as_bytes()).unwrap()
    }

    #[test]
    fn a_job_fires_iff_its_spec_is_enabled_and_nobody_paused_it() {
        let pause = Pause {
            by: Some("alice".into()),
            at_ms: Some(5),
            reason: Some("db migration".into()),
            until_ms: None,
            execution_id: None,
        };
        assert!(fires(&spec(true), None));
        assert!(!fires(&spec(true), Some(&pause)));
        assert!(!fires(&spec(false), None));
        assert!(!fires(&spec(false), Some(&pause)));
        assert_eq!(halt(&spec(true), None), None);
        assert_eq!(halt(&spec(false), None), Some(Halt::Disabled));
        assert_eq!(halt(&spec(false), Some(&pause)), Some(Halt::Paused(&pause)), "the pause says more");
        assert_eq!(halt(&spec(true), Some(&pause)).unwrap().reason(), "job paused by alice: db migration");
        assert_eq!(Halt::Disabled.reason(), "job disabled (its spec says enabled: false)");
    }

    #[test]
    fn pause_values_read_whatever_an_operator_wrote() {
        let full = Pause {
            by: Some("alice".into()),
            at_ms: Some(1_764_037_206_012),
            reason: Some("why".into()),
            until_ms: None,
            execution_id: None,
        };
        let bytes = serde_json::to_vec(&full).unwrap();
        assert_eq!(String::from_utf8(bytes.clone()).unwrap(), r#"{"by":"alice","at_ms":1764037206012,"reason":"why"}"#);
        assert_eq!(Pause::from_bytes(&bytes), Ok(full));
        // `{}` by hand: a pause by someone unknown.
        let unknown = Pause::from_bytes(b"{}").unwrap();
        assert_eq!(unknown, Pause::default());
        assert_eq!(unknown.describe(), "job paused");
        assert_eq!(serde_json::to_vec(&Pause::default()).unwrap(), b"{}");
        // Fields a newer master may add are ignored.
        assert_eq!(Pause::from_bytes(br#"{"by":"bob","team":"ops"}"#).unwrap().describe(), "job paused by bob");
        // A pause that ends by itself says when.
        let until = Pause { until_ms: Some(1_764_040_806_000), ..Pause::from_bytes(br#"{"by":"bob"}"#).unwrap() };
        assert_eq!(until.describe(), "job paused by bob until 2025-11-25T03:20:06.000Z");
        assert!(!until.expired(1_764_040_805_999) && until.expired(1_764_040_806_000));
        assert!(!Pause::default().expired(i64::MAX), "without until, never");
        assert_eq!(
            Pause { reason: Some("x".into()), ..Pause::default() }.describe(),
            "job paused: x",
            "a reason without an author"
        );
        // What does not parse is an error for the reader to log; the job stays paused.
        for bad in [&b"paused"[..], b"", b"[]", br#"{"by":5}"#, b"null"] {
            assert!(Pause::from_bytes(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn old_manual_trigger_requests_still_parse() {
        let r: TriggerRequest =
            serde_json::from_str(r#"{"requested_at":"2026-01-01T00:00:00.000Z","requested_at_ms":5,"reason":"x"}"#)
                .unwrap();
        assert_eq!(r.kind, TriggerKind::Manual);
        assert!(r.execution_id.is_none() && r.then.is_empty());
    }
}
