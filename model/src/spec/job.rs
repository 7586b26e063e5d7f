//! The job model: `JobSpec`, its task kinds and options, and the accessors the master and
//! workers read it through. Parsing, validation and redaction live beside it (`parse`,
//! `validate`, `redact`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
use crate::size::ByteSize;
use crate::spec::notify::NotifyTarget;

use super::*;

/// A job as stored at `{ns}/jobs/{job}` and accepted by `PUT /api/jobs/{job}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The job's schedule expression; empty when `schedules` gives several.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub schedule: String,
    /// Several expressions instead of `schedule`, their ticks merged (one tick per instant).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<String>,
    /// No tick before this RFC 3339 instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_from: Option<String>,
    /// No tick after this RFC 3339 instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_until: Option<String>,
    /// Each tick moved later by up to this long: by a delay that is a function of the job's
    /// name and the tick, the same on every worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<HumanDuration>,
    /// Calendars (`PUT /api/calendars/{name}`) whose dates the job skips: a tick on one is
    /// recorded `skipped`, naming the calendar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_calendars: Vec<String>,
    #[serde(default = "default_timezone")]
    pub timezone: String,
    #[serde(default = "default_true")]
    pub enabled: bool,
    pub task: Task,
    /// Kill the task (TERM to its process group, then KILL) after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    #[serde(default)]
    pub retries: Retries,
    #[serde(default)]
    pub concurrency: Concurrency,
    /// Most ticks waiting in the queue (`concurrency: queue`; `DEFAULT_MAX_QUEUE` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue: Option<u32>,
    #[serde(default)]
    pub misfire: Misfire,
    /// Most missed ticks `misfire: run_all` runs after an outage (the newest ones).
    #[serde(default = "default_max_catchup")]
    pub max_catchup: u32,
    /// A schedule tick not raced within this long after its time is handed to `misfire`
    /// (`DEFAULT_START_DEADLINE` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_deadline: Option<HumanDuration>,
    #[serde(default)]
    pub on_worker_loss: OnWorkerLoss,
    #[serde(default)]
    pub mode: Mode,
    /// Only workers whose labels include all of these may run the job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_success: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_failure: Vec<String>,
    /// Workflow parents: the job runs once per workflow run, after every one of these jobs
    /// succeeded in that run (fan-in), with their results (the workflow module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Run parameters taken from the parents' results: `{"DATE": "$.date"}` (a JSON path into
    /// the one parent's result), or `{"DATE": "$extract.date"}` naming the parent job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params_from: BTreeMap<String, String>,
    /// A resource pool (`PUT /api/pools/{name}`) whose slots each run holds while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Slots of `pool` a run holds (1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_slots: Option<u32>,
    /// 0 to 100 (`DEFAULT_PRIORITY`, 50, when absent): under contention for a pool's slots or
    /// a worker's capacity, runs of a higher priority go first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Set by the master on every save, never by the client (what is sent is replaced): for
    /// each dependent (`on_success` / `on_failure`) outside the job's own team, the team it
    /// had (`null`: none) when the saver's operator role on it was checked. Workers trigger
    /// such a dependent only while it is still of that team
    /// ([`crate::dependency::may_trigger`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dependency_teams: BTreeMap<String, Option<String>>,
    /// The team the job belongs to: callers see and touch it only with a role on this team (or
    /// a global role); a job without a team is for global roles only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Bytes of output kept per execution (head + tail); the worker's `max_output` when absent
    /// and never more than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output: Option<u64>,
    /// Resource limits of each process of a shell task (`output` applies to any task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Webhooks told about this job's outcomes (`crate::spec::notify`). Absent: the worker's default
    /// targets; `[]`: none at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Vec<NotifyTarget>>,
    /// Pause the job after this many final failures in a row (and again after as many more
    /// once resumed while still failing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<u32>,
    /// SLA alerts (`crate::spec::alerts`): `late`, `long_running`, `stale`, `output_match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerts: Option<crate::spec::alerts::Alerts>,
}

/// `limits`: applied with `setrlimit` to the task's shell before it runs, so each process of
/// the task (the shell and everything it starts) gets these limits on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Address space (`RLIMIT_AS`): allocations beyond it fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    /// CPU time (`RLIMIT_CPU`): SIGXCPU when used up, SIGKILL shortly after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<HumanDuration>,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
    /// Another name for the spec's `max_output` (bytes of output kept); both may be given only
    /// with the same value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ByteSize>,
}

impl Limits {
    /// Whether any process limit (memory, cpu, open files) is set.
    #[must_use]
    pub fn limits_processes(&self) -> bool {
        self.memory.is_some() || self.cpu.is_some() || self.open_files.is_some()
    }

    /// The process limits in words, e.g. `memory 64MiB, cpu 2s, open files 32`; empty when none.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.memory {
            parts.push(format!("memory {m}"));
        }
        if let Some(c) = self.cpu {
            parts.push(format!("cpu {c}"));
        }
        if let Some(n) = self.open_files {
            parts.push(format!("open files {n}"));
        }
        parts.join(", ")
    }
}

impl JobSpec {
    /// Most ticks waiting in the job's queue.
    #[must_use]
    pub fn queue_limit(&self) -> usize {
        usize::try_from(self.max_queue.unwrap_or(DEFAULT_MAX_QUEUE)).unwrap_or(usize::MAX)
    }
}

fn default_max_catchup() -> u32 {
    DEFAULT_MAX_CATCHUP
}

fn default_timezone() -> String {
    "UTC".to_owned()
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Task {
    Shell(ShellTask),
    Http(HttpTask),
    Grpc(GrpcTask),
    Handler(HandlerTask),
}

/// A function of an application that embeds an executor (`etcron-sdk`) or of a remote executor,
/// registered under `name`: only executors that registered it race for the job's ticks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerTask {
    /// The handler's name, as the executor registered it (`[A-Za-z0-9][A-Za-z0-9._-]{0,127}`).
    pub name: String,
    /// Values handed to the handler (`ctx.env()`), as a shell task's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Values the API never shows, as `secret_env`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: Secrets,
    /// The values a manual run may set (`crate::spec::params`), as a shell task's.
    #[serde(default, skip_serializing_if = "Params::is_empty")]
    pub params: Params,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellTask {
    /// Run with `/bin/sh -c`.
    pub command: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Environment variables the API never shows: reads give `null` for each value, and a
    /// `null` in a PUT keeps the stored value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: Secrets,
    /// The variables a manual run may set (`crate::spec::params`): no other name, and never one of
    /// `env` or `secret_env`.
    #[serde(default, skip_serializing_if = "Params::is_empty")]
    pub params: Params,
    /// Working directory (absolute); the worker's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Run as this user (a name from the worker's user database): only workers that run as
    /// root and list the user in their `run_as_users` race for the job's ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Run with this group instead of the user's primary one; it must be one of the user's
    /// groups on the worker. Needs `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpTask {
    #[serde(default = "default_method")]
    pub method: String,
    pub url: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Headers the API never shows (e.g. `Authorization`), as `secret_env`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: Secrets,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The status that counts as success; any 2xx when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<u16>,
    /// The endpoint answers `202 Accepted` and a status URL, polled until the work ends
    /// (`crate::spec::http_async`).
    #[serde(default, rename = "async", skip_serializing_if = "Option::is_none")]
    pub asynchronous: Option<Box<crate::spec::http_async::AsyncPoll>>,
    /// Where the run's result is in a successful response's JSON body (RFC 6901; `""` is the
    /// whole body; an asynchronous task's final status document instead of the 202's body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_pointer: Option<String>,
}

/// Longest `result_pointer` of an HTTP task.
pub const MAX_RESULT_POINTER_LEN: usize = 256;

pub use crate::spec::grpc::GrpcTask;
pub use crate::spec::headers::Secrets;
pub use crate::spec::params::Params;

impl Task {
    pub(super) fn secrets_mut(&mut self) -> (&'static str, &mut Secrets) {
        match self {
            Task::Shell(t) => ("task.secret_env", &mut t.secret_env),
            Task::Http(t) => ("task.secret_headers", &mut t.secret_headers),
            Task::Grpc(t) => ("task.secret_metadata", &mut t.secret_metadata),
            Task::Handler(t) => ("task.secret_env", &mut t.secret_env),
        }
    }

    /// The task's secrets and the field that holds them (`task.secret_env`, …).
    #[must_use]
    pub fn secrets_field(&self) -> (&'static str, &Secrets) {
        match self {
            Task::Shell(t) => ("task.secret_env", &t.secret_env),
            Task::Http(t) => ("task.secret_headers", &t.secret_headers),
            Task::Grpc(t) => ("task.secret_metadata", &t.secret_metadata),
            Task::Handler(t) => ("task.secret_env", &t.secret_env),
        }
    }

    pub(super) fn secrets(&self) -> &Secrets {
        self.secrets_field().1
    }

    /// The kind as specs write it: `shell`, `http`, `grpc`, `handler`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Task::Shell(_) => "shell",
            Task::Http(_) => "http",
            Task::Grpc(_) => "grpc",
            Task::Handler(_) => "handler",
        }
    }

    /// The handler a `handler` task names: only executors that registered it run the job.
    #[must_use]
    pub fn handler(&self) -> Option<&str> {
        match self {
            Task::Handler(h) => Some(&h.name),
            _ => None,
        }
    }

    /// Where an HTTP or gRPC task sends its requests (its URL or endpoint): the secrets kept for
    /// it go there only. `None` for shell and handler tasks.
    #[must_use]
    pub fn destination_url(&self) -> Option<&str> {
        match self {
            Task::Shell(_) | Task::Handler(_) => None,
            Task::Http(h) => Some(&h.url),
            Task::Grpc(g) => Some(&g.endpoint),
        }
    }

    /// The secrets (`task.secret_env.K`, `task.secret_headers.K`, `task.secret_metadata.K`)
    /// whose values differ between two tasks, or that only one of them has.
    #[must_use]
    pub fn changed_secrets(&self, other: &Task) -> Vec<String> {
        let (field, mine) = self.secrets_field();
        let theirs = other.secrets();
        let keys: std::collections::BTreeSet<&String> = mine.keys().chain(theirs.keys()).collect();
        keys.into_iter().filter(|k| mine.get(*k) != theirs.get(*k)).map(|k| format!("{field}.{k}")).collect()
    }
}

fn default_method() -> String {
    "GET".to_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retries {
    #[serde(default)]
    pub max: u32,
    #[serde(default = "default_backoff")]
    pub backoff: HumanDuration,
    #[serde(default = "default_max_backoff")]
    pub max_backoff: HumanDuration,
}

fn default_backoff() -> HumanDuration {
    HumanDuration::from_secs(10)
}
fn default_max_backoff() -> HumanDuration {
    HumanDuration::from_secs(300)
}

impl Retries {
    /// The wait before attempt `failed_attempt + 1`: `backoff * 2^(failed_attempt - 1)`, capped
    /// at `max_backoff`, then jittered into its upper half by `jitter` in `[0, 1]` (so retries
    /// of many ticks that failed together spread out).
    #[must_use]
    pub fn delay(&self, failed_attempt: u32, jitter: f64) -> Duration {
        let exp = failed_attempt.saturating_sub(1).min(32);
        let full = self.backoff.0.saturating_mul(1u32 << exp.min(31)).min(self.max_backoff.0);
        full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

impl Default for Retries {
    fn default() -> Self {
        Self { max: 0, backoff: default_backoff(), max_backoff: default_max_backoff() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Concurrency {
    #[default]
    Allow,
    Forbid,
    Replace,
    /// A tick that finds a run going waits in the job's queue (`{ns}/queue/{job}/`) and runs
    /// when the runs before it have ended, oldest first; beyond `max_queue` it is skipped.
    Queue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    #[default]
    Skip,
    RunOnce,
    RunAll,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnWorkerLoss {
    #[default]
    Rerun,
    MarkLost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Single,
    Broadcast,
    Sharded(u32),
}

impl JobSpec {
    /// The user a shell task runs as, when it names one.
    #[must_use]
    pub fn run_as_user(&self) -> Option<&str> {
        match &self.task {
            Task::Shell(shell) => shell.user.as_deref(),
            Task::Http(_) | Task::Grpc(_) | Task::Handler(_) => None,
        }
    }

    /// The run's priority: `priority`, or `DEFAULT_PRIORITY`.
    #[must_use]
    pub fn priority(&self) -> u8 {
        self.priority.unwrap_or(DEFAULT_PRIORITY)
    }

    /// The pool a run holds slots of, and how many.
    #[must_use]
    pub fn pool_claim(&self) -> Option<(&str, u32)> {
        self.pool.as_deref().map(|p| (p, self.pool_slots.unwrap_or(1)))
    }

    /// How late a schedule tick may still be raced: `start_deadline`, or the default.
    #[must_use]
    pub fn start_deadline(&self) -> Duration {
        self.start_deadline.map_or(DEFAULT_START_DEADLINE, |d| d.0)
    }

    /// Bytes of output to keep, from `max_output` or its other name `limits.output`.
    #[must_use]
    pub fn output_limit(&self) -> Option<u64> {
        self.max_output.or(self.limits.and_then(|l| l.output).map(|o| o.0))
    }

    /// `jitter` in ms; 0 when absent.
    #[must_use]
    pub fn jitter_ms(&self) -> i64 {
        self.jitter.map_or(0, |j| i64::try_from(j.0.as_millis()).unwrap_or(i64::MAX))
    }

    /// Whether `other` has the same fire times: the same expressions, window and timezone.
    #[must_use]
    pub fn same_timing(&self, other: &Self) -> bool {
        self.schedule == other.schedule
            && self.schedules == other.schedules
            && self.active_from == other.active_from
            && self.active_until == other.active_until
            && self.jitter == other.jitter
            && self.timezone == other.timezone
    }

    /// The expressions of the spec with the field each is at: `schedule`, or `schedules[i]`.
    #[must_use]
    pub fn expressions(&self) -> Vec<(String, &str)> {
        if self.schedules.is_empty() {
            return vec![("schedule".to_owned(), self.schedule.as_str())];
        }
        self.schedules.iter().enumerate().map(|(i, e)| (format!("schedules[{i}]"), e.as_str())).collect()
    }
}
