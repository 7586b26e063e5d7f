//! The etcd key layout. This module is the only place that builds or parses key strings.
//!
//! ```text
//! {ns}/jobs/{job}                         JobSpec
//! {ns}/workers/{worker_id}                WorkerInfo           (worker session lease)
//! {ns}/claims/{job}/{tick}{part}[#attempt]  Claim              (retention lease; its inflight key is on the session lease)
//! {ns}/inflight/{worker_id}/{batch}       the executions one claim transaction raced for (worker session lease)
//! {ns}/departures/{worker_id}/{revision}  a departure's handling finished (retention lease)
//! {ns}/running/{job}/{execution_id}       RunningExecution     (worker session lease)
//! {ns}/lock/{job}{part}                   ExecutionId          (`forbid`/`replace`/`queue`: the holder's session lease)
//! {ns}/queue/{job}/q{part}/{ms}-{tick}#{attempt}  QueuedRun   (`concurrency: queue`, oldest first)
//! {ns}/backfills/{job}/{id}               Backfill             (no lease: deleted with the job)
//! {ns}/calendars/{name}                   Calendar             (no lease)
//! {ns}/pools/{name}                       Pool                 (no lease)
//! {ns}/workflows/{run}/steps/{job}        Step                 (workflow lease)
//! {ns}/workflows/{run}/ok/{job}           empty: the step succeeded in the run (workflow lease)
//! {ns}/poolslots/{name}/{i}               HeldSlot             (the holder's session lease)
//! {ns}/poolwait/{name}/{order}            Waiting              (a waiting worker's session lease; `order`: priority, time, execution)
//! {ns}/compactor                          the compacting master (its lease)
//! {ns}/quota-probe                        empty                (a top-level put weighing batches against etcd's quota)
//! {ns}/kill/{job}/{execution_id|all}      KillCommand          (lease >= 60 s)
//! {ns}/trigger/{job}/{request_id}         TriggerRequest       (lease >= 60 s)
//! {ns}/state/{job}                        JobState
//! {ns}/health/{job}                       JobHealth            (jobs notifying `recovery`)
//! {ns}/paused/{job}                       Pause                (no lease: until resumed or deleted)
//! {ns}/history/{job}/{entry}              SpecVersion          (no lease: the newest kept, deleted with the job)
//! {ns}/alerts/{job}/{tick}{part}[#attempt]/{event}  Raised    (alert lease, `alerts::ALERT_MEMORY`)
//! {ns}/checkpoints/{job}/{tick}{part}    Checkpoint           (long lease, renewed by each write; deleted with the job)
//! {ns}/alerts/{job}/stale                 StaleState           (no lease: deleted with the job)
//! {ns}/alerts/{job}/silence/{target}/{event}  Silence         (no lease: deleted with the job)
//! ```
//! `{tick}` is the scheduled time in Unix ms, or `manual-{request_id}` for a manual run.
//! Execution ids are `{job}@{tick}#{attempt}`.

use std::fmt;
use std::str::FromStr;

use crate::UnixMs;

/// Longest job name.
pub const MAX_JOB_NAME_LEN: usize = 128;
/// Longest worker id or request id.
pub const MAX_ID_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("invalid namespace {0:?}: must start with '/', not end with '/', and use only [A-Za-z0-9._/-]")]
    Namespace(String),
}

/// The `range_end` of every key starting with `prefix` (etcd's "prefix" range, as
/// etcd-client's `with_prefix` computes it): the prefix with its last byte below 0xff
/// incremented, `\0` (every key) when there is none.
#[must_use]
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Checks a job name against `^[a-z0-9][a-z0-9._-]{0,127}$`; the error says what is wrong.
pub fn validate_job_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("job name is empty".to_owned());
    }
    if name.len() > MAX_JOB_NAME_LEN {
        return Err(format!("job name is longer than {MAX_JOB_NAME_LEN} characters"));
    }
    let mut chars = name.chars();
    let first = chars.next().unwrap_or('-');
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return Err(format!("job name {name:?} must start with a lowercase letter or digit"));
    }
    if let Some(bad) =
        name.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "job name {name:?} contains {bad:?}; use lowercase letters, digits, '.', '_' and '-' (pattern ^[a-z0-9][a-z0-9._-]{{0,127}}$)"
        ));
    }
    Ok(())
}

/// Checks a worker id or request id: `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`.
pub fn validate_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!("id {id:?} must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$"))
    }
}

/// Parses a number written as this module writes it: decimal digits, no sign, no leading zero.
/// Anything else would parse into a value that prints back differently, so one key (or id)
/// could be written several ways.
fn canonical<N: FromStr>(text: &str) -> Option<N> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let no_padding = text == "0" || !text.starts_with('0');
    if digits && no_padding {
        text.parse().ok()
    } else {
        None
    }
}

/// Which fire of a job a claim or execution belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tick {
    /// A tick of the job's schedule, at this Unix ms.
    Scheduled(UnixMs),
    /// A manual run requested through `{ns}/trigger/{job}/{request_id}`.
    Manual(String),
    /// A run triggered by another job's execution (`on_success` / `on_failure`); the id names
    /// the parent execution (see [`Tick::dependency`]).
    Dependency(String),
}

impl Tick {
    /// The tick of a dependency run of `parent`, whose claim had `fencing_token`:
    /// `{token}-{12 hex digits of the parent job's name}`. A token alone is not unique: claims
    /// of several jobs committed in one batch transaction share its revision (one claim per job
    /// per batch, so the pair is).
    #[must_use]
    pub fn dependency(fencing_token: i64, parent_job: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in parent_job.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Tick::Dependency(format!("{fencing_token}-{:012x}", h & 0xffff_ffff_ffff))
    }

    /// The scheduled time of a schedule tick.
    #[must_use]
    pub fn scheduled_ms(&self) -> Option<UnixMs> {
        match self {
            Tick::Scheduled(ms) => Some(*ms),
            Tick::Manual(_) | Tick::Dependency(_) => None,
        }
    }
}

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tick::Scheduled(ms) => write!(f, "{ms}"),
            Tick::Manual(id) => write!(f, "manual-{id}"),
            Tick::Dependency(id) => write!(f, "dep-{id}"),
        }
    }
}

impl FromStr for Tick {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(id) = s.strip_prefix("manual-") {
            validate_id(id)?;
            return Ok(Tick::Manual(id.to_owned()));
        }
        if let Some(id) = s.strip_prefix("dep-") {
            validate_id(id)?;
            return Ok(Tick::Dependency(id.to_owned()));
        }
        canonical::<UnixMs>(s).map(Tick::Scheduled).ok_or_else(|| {
            format!("tick {s:?} is neither unix milliseconds (without leading zeros), manual-<request id> nor dep-<id>")
        })
    }
}

/// Which execution of a fire: the only one, one shard of a sharded job, or one worker's run of
/// a broadcast job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    #[default]
    Whole,
    /// 0-based shard index.
    Shard(u32),
    Worker(String),
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Whole => Ok(()),
            Part::Shard(i) => write!(f, ":shard-{i}"),
            Part::Worker(id) => write!(f, ":worker-{id}"),
        }
    }
}

impl FromStr for Part {
    type Err = String;
    /// Parses what follows the tick, including the leading ':' (empty for `Whole`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Ok(Part::Whole);
        }
        if let Some(i) = s.strip_prefix(":shard-") {
            return canonical(i).map(Part::Shard).ok_or_else(|| format!("shard {i:?} is not a shard number"));
        }
        if let Some(id) = s.strip_prefix(":worker-") {
            validate_id(id)?;
            return Ok(Part::Worker(id.to_owned()));
        }
        Err(format!("{s:?} is neither :shard-<n> nor :worker-<id>"))
    }
}

/// `{job}@{tick}{part}#{attempt}`: names one attempt of one fire of a job; also the idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutionId {
    pub job: String,
    pub tick: Tick,
    pub part: Part,
    /// 1-based.
    pub attempt: u32,
}

impl ExecutionId {
    /// The first attempt of the single execution of a tick.
    #[must_use]
    pub fn new(job: &str, tick: Tick) -> Self {
        Self { job: job.to_owned(), tick, part: Part::Whole, attempt: 1 }
    }

    /// The same execution's next attempt.
    #[must_use]
    pub fn next_attempt(&self) -> Self {
        Self { attempt: self.attempt.saturating_add(1), ..self.clone() }
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}{}#{}", self.job, self.tick, self.part, self.attempt)
    }
}

impl FromStr for ExecutionId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("execution id {s:?} is not of the form <job>@<tick>#<attempt>");
        let (job, rest) = s.split_once('@').ok_or_else(bad)?;
        let (tick, attempt) = rest.rsplit_once('#').ok_or_else(bad)?;
        validate_job_name(job)?;
        let attempt: u32 = canonical(attempt).filter(|a| *a > 0).ok_or_else(bad)?;
        let (tick, part) = match tick.find(':') {
            Some(i) => tick.split_at(i),
            None => (tick, ""),
        };
        Ok(ExecutionId { job: job.to_owned(), tick: tick.parse()?, part: part.parse()?, attempt })
    }
}

impl serde::Serialize for ExecutionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ExecutionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The target of a kill command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillTarget {
    All,
    Execution(ExecutionId),
}

impl fmt::Display for KillTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KillTarget::All => f.write_str("all"),
            KillTarget::Execution(id) => write!(f, "{id}"),
        }
    }
}

/// A key of `{ns}` parsed back into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Job(String),
    Worker(String),
    /// The claim of one execution (attempt included).
    Claim(ExecutionId),
    Running(ExecutionId),
    /// The executions one claim transaction of `worker` raced for (see `Keys::inflight`).
    Inflight {
        worker: String,
        batch: String,
    },
    Kill {
        job: String,
        target: KillTarget,
    },
    Trigger {
        job: String,
        request_id: String,
    },
    State(String),
    /// The job's health for `recovery` notifications.
    Health(String),
    /// An operator's pause of the job (see `Keys::paused`).
    Paused(String),
    /// One saved version of the job's spec (see `Keys::history`).
    History {
        job: String,
        entry: String,
    },
    Lock {
        job: String,
        part: Part,
    },
    /// A skip calendar, by name (see `Keys::calendar`).
    Calendar(String),
    /// A backfill of a job (see `Keys::backfill`).
    Backfill {
        job: String,
        id: String,
    },
    /// An operator's cordon of a worker (see `Keys::cordon`).
    Cordon(String),
    /// A resource pool, by name (see `Keys::pool`).
    Pool(String),
}

/// `{job}/{tick}{part}`, plus `#{attempt}` after the first attempt: how claim and running
/// marker keys name an execution.
fn execution_suffix(id: &ExecutionId) -> String {
    if id.attempt > 1 {
        format!("{}/{}{}#{}", id.job, id.tick, id.part, id.attempt)
    } else {
        format!("{}/{}{}", id.job, id.tick, id.part)
    }
}

/// The value of an inflight key (`Keys::inflight`): its executions grouped by what follows the
/// job in their claim keys, `{"1764037206000":["backup","report"]}` — most executions of one
/// claim transaction share a tick, so each costs little more than its job's name.
#[must_use]
pub fn inflight_value(ids: &[&ExecutionId]) -> Vec<u8> {
    let mut by_tick: std::collections::BTreeMap<String, Vec<&str>> = std::collections::BTreeMap::new();
    for id in ids {
        let suffix = execution_suffix(id);
        let tick = suffix.split_once('/').map_or(suffix.as_str(), |(_, t)| t).to_owned();
        by_tick.entry(tick).or_default().push(&id.job);
    }
    serde_json::to_vec(&by_tick).unwrap_or_default()
}

/// Reads what [`inflight_value`] writes; `None` if it is anything else.
#[must_use]
pub fn parse_inflight_value(bytes: &[u8]) -> Option<Vec<ExecutionId>> {
    let by_tick: std::collections::BTreeMap<String, Vec<String>> = serde_json::from_slice(bytes).ok()?;
    let mut ids = Vec::new();
    for (tick, jobs) in by_tick {
        for job in jobs {
            ids.push(parse_execution_suffix(&format!("{job}/{tick}"))?);
        }
    }
    Some(ids)
}

/// Reads what [`execution_suffix`] writes.
fn parse_execution_suffix(rest: &str) -> Option<ExecutionId> {
    let (job, rest) = rest.split_once('/')?;
    validate_job_name(job).ok()?;
    // The first attempt's key has no `#1`; a written `#1` is not an execution's key.
    let (tick, attempt) = match rest.rsplit_once('#') {
        Some((t, a)) => (t, canonical::<u32>(a).filter(|a| *a > 1)?),
        None => (rest, 1),
    };
    format!("{job}@{tick}#{attempt}").parse().ok()
}

/// Builds and parses the keys of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    ns: String,
}

impl Keys {
    /// `ns` like `/etcron`: starts with '/', no trailing '/'.
    pub fn new(ns: &str) -> Result<Self, KeyError> {
        let ok = ns.len() > 1
            && ns.len() <= 256
            && ns.starts_with('/')
            && !ns.ends_with('/')
            && !ns.contains("//")
            && ns.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
        if ok {
            Ok(Self { ns: ns.to_owned() })
        } else {
            Err(KeyError::Namespace(ns.to_owned()))
        }
    }

    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    #[must_use]
    pub fn jobs_prefix(&self) -> String {
        format!("{}/jobs/", self.ns)
    }
    #[must_use]
    pub fn job(&self, job: &str) -> String {
        format!("{}/jobs/{job}", self.ns)
    }
    #[must_use]
    pub fn workers_prefix(&self) -> String {
        format!("{}/workers/", self.ns)
    }
    #[must_use]
    pub fn worker(&self, worker_id: &str) -> String {
        format!("{}/workers/{worker_id}", self.ns)
    }
    #[must_use]
    pub fn claims_prefix(&self) -> String {
        format!("{}/claims/", self.ns)
    }
    #[must_use]
    pub fn job_claims_prefix(&self, job: &str) -> String {
        format!("{}/claims/{job}/", self.ns)
    }
    /// `{ns}/claims/{job}/{tick}{part}`, plus `#{attempt}` after the first attempt.
    #[must_use]
    pub fn claim(&self, id: &ExecutionId) -> String {
        format!("{}/claims/{}", self.ns, execution_suffix(id))
    }
    /// Every claim (all parts and attempts) of one tick: `{ns}/claims/{job}/{tick}` as a prefix.
    #[must_use]
    pub fn tick_claims_prefix(&self, job: &str, tick: &Tick) -> String {
        format!("{}/claims/{job}/{tick}", self.ns)
    }
    #[must_use]
    pub fn running_prefix(&self) -> String {
        format!("{}/running/", self.ns)
    }
    #[must_use]
    pub fn job_running_prefix(&self, job: &str) -> String {
        format!("{}/running/{job}/", self.ns)
    }
    /// `{ns}/running/{job}/{tick}{part}`, plus `#{attempt}` after the first attempt: the
    /// claim's key under `running/` (older versions wrote `{job}/{execution_id}`; both parse).
    #[must_use]
    pub fn running(&self, id: &ExecutionId) -> String {
        format!("{}/running/{}", self.ns, execution_suffix(id))
    }
    /// Everything in flight on any worker.
    #[must_use]
    pub fn inflight_prefix(&self) -> String {
        format!("{}/inflight/", self.ns)
    }
    #[must_use]
    pub fn worker_inflight_prefix(&self, worker_id: &str) -> String {
        format!("{}/inflight/{worker_id}/", self.ns)
    }
    /// `{ns}/inflight/{worker}/{batch}`, under the worker's session lease: written by each claim
    /// transaction, listing the executions it raced for; its create revision is the fencing
    /// token of the claims it won. Deleted once they are all closed; if the session ends
    /// first, it tells the loss handling what the worker held.
    #[must_use]
    pub fn inflight(&self, worker_id: &str, batch: &str) -> String {
        format!("{}/inflight/{worker_id}/{batch}", self.ns)
    }
    /// `{ns}/departures/{worker}/{revision}`, on a retention lease: the handling of the
    /// departure of `worker` (its registration deleted at `revision`) is finished; the survivors
    /// that owe it stop waiting.
    #[must_use]
    pub fn departure_done(&self, worker_id: &str, revision: i64) -> String {
        format!("{}/departures/{worker_id}/{revision}", self.ns)
    }
    /// Held (on a lease) by the master that compacts etcd.
    #[must_use]
    pub fn compactor(&self) -> String {
        format!("{}/compactor", self.ns)
    }

    /// `{ns}/quota-probe`: an empty value the master puts at the top level of a transaction of
    /// several job changes, so that etcd weighs it against its space quota (etcd counts only
    /// top-level puts); nothing reads it.
    #[must_use]
    pub fn quota_probe(&self) -> String {
        format!("{}/quota-probe", self.ns)
    }
    #[must_use]
    pub fn kill_prefix(&self) -> String {
        format!("{}/kill/", self.ns)
    }
    #[must_use]
    pub fn kill(&self, job: &str, target: &KillTarget) -> String {
        format!("{}/kill/{job}/{target}", self.ns)
    }
    #[must_use]
    pub fn trigger_prefix(&self) -> String {
        format!("{}/trigger/", self.ns)
    }
    #[must_use]
    pub fn trigger(&self, job: &str, request_id: &str) -> String {
        format!("{}/trigger/{job}/{request_id}", self.ns)
    }
    #[must_use]
    pub fn job_trigger_prefix(&self, job: &str) -> String {
        format!("{}/trigger/{job}/", self.ns)
    }
    #[must_use]
    pub fn state_prefix(&self) -> String {
        format!("{}/state/", self.ns)
    }
    /// Held by the running execution of a job whose concurrency is `forbid` or `replace`: one
    /// lock per job, per shard of a sharded job, per worker of a broadcast job.
    #[must_use]
    pub fn lock(&self, job: &str, part: &Part) -> String {
        format!("{}/lock/{job}{part}", self.ns)
    }
    /// The queue of a `concurrency: queue` job's lock (job and part), oldest entry first.
    #[must_use]
    pub fn queue_prefix(&self, job: &str, part: &Part) -> String {
        format!("{}/queue/{job}/q{part}/", self.ns)
    }
    /// Every queue of `job` (one per part).
    #[must_use]
    pub fn job_queue_prefix(&self, job: &str) -> String {
        format!("{}/queue/{job}/", self.ns)
    }
    /// The queue entry of an execution scheduled at `scheduled_ms`: named so that the queue
    /// lists by scheduled time (13 digits), then tick and attempt.
    #[must_use]
    pub fn queue_entry(&self, id: &ExecutionId, scheduled_ms: UnixMs) -> String {
        let ms = scheduled_ms.clamp(0, 9_999_999_999_999);
        format!("{}{ms:013}-{}#{}", self.queue_prefix(&id.job, &id.part), id.tick, id.attempt)
    }
    #[must_use]
    pub fn state(&self, job: &str) -> String {
        format!("{}/state/{job}", self.ns)
    }
    /// Whether the job's last final outcome was a failure, for `recovery` notifications; kept
    /// by workers only for jobs with a target that asks for `recovery`, deleted with the job.
    #[must_use]
    pub fn health(&self, job: &str) -> String {
        format!("{}/health/{job}", self.ns)
    }
    #[must_use]
    pub fn health_prefix(&self) -> String {
        format!("{}/health/", self.ns)
    }
    /// The latest checkpoint of a tick (part), whichever of its attempts reported it.
    #[must_use]
    pub fn checkpoint(&self, id: &ExecutionId) -> String {
        format!("{}/checkpoints/{}/{}{}", self.ns, id.job, id.tick, id.part)
    }
    /// Every checkpoint of `job`, deleted with it.
    #[must_use]
    pub fn job_checkpoints_prefix(&self, job: &str) -> String {
        format!("{}/checkpoints/{job}/", self.ns)
    }
    /// That `event` (`late`, `long_running`) was raised for an execution.
    #[must_use]
    pub fn alert(&self, id: &ExecutionId, event: &str) -> String {
        format!("{}/alerts/{}/{event}", self.ns, execution_suffix(id))
    }
    /// The window of a job's `no_success_within` (`crate::spec::alerts::StaleState`).
    #[must_use]
    pub fn stale(&self, job: &str) -> String {
        format!("{}/alerts/{job}/stale", self.ns)
    }
    /// A target's `silence` window for one event of a job; `target` is the target's name, its
    /// position, or `default-{n}`.
    #[must_use]
    pub fn silence(&self, job: &str, target: &str, event: &str) -> String {
        format!("{}/alerts/{job}/silence/{target}/{event}", self.ns)
    }
    /// Everything alerts keep for `job`, deleted with it.
    #[must_use]
    pub fn job_alerts_prefix(&self, job: &str) -> String {
        format!("{}/alerts/{job}/", self.ns)
    }
    /// An operator's pause of the job, kept outside its spec so that writing the spec again
    /// (`etcronctl jobs apply`) never resumes it. No lease: deleted by resume and with the job.
    #[must_use]
    pub fn paused(&self, job: &str) -> String {
        format!("{}/paused/{job}", self.ns)
    }
    #[must_use]
    pub fn paused_prefix(&self) -> String {
        format!("{}/paused/", self.ns)
    }
    /// An operator's cordon of worker `id` (`crate::stored::Cordon`): it races for nothing new.
    /// No lease: it outlives the worker's restarts.
    #[must_use]
    pub fn cordon(&self, id: &str) -> String {
        format!("{}/cordon/{id}", self.ns)
    }
    #[must_use]
    pub fn cordon_prefix(&self) -> String {
        format!("{}/cordon/", self.ns)
    }
    /// A backfill of `job` (`crate::backfill::Backfill`).
    #[must_use]
    pub fn backfill(&self, job: &str, id: &str) -> String {
        format!("{}/backfills/{job}/{id}", self.ns)
    }
    /// Every backfill of `job`.
    #[must_use]
    pub fn job_backfills_prefix(&self, job: &str) -> String {
        format!("{}/backfills/{job}/", self.ns)
    }
    /// A skip calendar (`crate::calendar::Calendar`), named by jobs' `skip_calendars`.
    #[must_use]
    pub fn calendar(&self, name: &str) -> String {
        format!("{}/calendars/{name}", self.ns)
    }
    #[must_use]
    pub fn calendars_prefix(&self) -> String {
        format!("{}/calendars/", self.ns)
    }
    /// Step `job` of workflow run `run` (a step's outcome).
    #[must_use]
    pub fn workflow_step(&self, run: &str, job: &str) -> String {
        format!("{}/workflows/{run}/steps/{job}", self.ns)
    }
    /// Present while step `job` of workflow run `run` has succeeded: what fan-in compares.
    #[must_use]
    pub fn workflow_ok(&self, run: &str, job: &str) -> String {
        format!("{}/workflows/{run}/ok/{job}", self.ns)
    }
    /// Every step of workflow run `run`.
    #[must_use]
    pub fn workflow_steps_prefix(&self, run: &str) -> String {
        format!("{}/workflows/{run}/steps/", self.ns)
    }
    /// Everything of workflow run `run`.
    #[must_use]
    pub fn workflow_prefix(&self, run: &str) -> String {
        format!("{}/workflows/{run}/", self.ns)
    }
    /// A resource pool (a pool's spec), named by jobs' `pool`.
    #[must_use]
    pub fn pool(&self, name: &str) -> String {
        format!("{}/pools/{name}", self.ns)
    }
    #[must_use]
    pub fn pools_prefix(&self) -> String {
        format!("{}/pools/", self.ns)
    }
    /// Everything of every pool: the pools, their held slots and their queues (one watch).
    #[must_use]
    pub fn all_pools_prefix(&self) -> String {
        format!("{}/pool", self.ns)
    }
    /// Slot `i` of `pool`, held by a run (the holder).
    #[must_use]
    pub fn pool_slot(&self, pool: &str, i: u32) -> String {
        format!("{}/poolslots/{pool}/{i}", self.ns)
    }
    /// Every slot of `pool` held now.
    #[must_use]
    pub fn pool_slots_prefix(&self, pool: &str) -> String {
        format!("{}/poolslots/{pool}/", self.ns)
    }
    /// Every pool's held slots.
    #[must_use]
    pub fn all_pool_slots_prefix(&self) -> String {
        format!("{}/poolslots/", self.ns)
    }
    /// The slot index of a key under [`Keys::pool_slots_prefix`], with its pool.
    #[must_use]
    pub fn parse_pool_slot(&self, key: &[u8]) -> Option<(String, u32)> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(&self.all_pool_slots_prefix())?;
        let (pool, i) = rest.split_once('/')?;
        Some((pool.to_owned(), canonical::<u32>(i)?))
    }
    /// A tick waiting in `pool`'s queue: sorted by `place` (lower first: the pool module's `place`
    /// of its priority), then scheduled time, then execution (the waiting tick).
    #[must_use]
    pub fn pool_wait(&self, pool: &str, place: u8, scheduled_ms: UnixMs, id: &ExecutionId) -> String {
        let scheduled = u64::try_from(scheduled_ms.max(0)).unwrap_or(0);
        format!("{}/poolwait/{pool}/{place:03}-{scheduled:015}-{}", self.ns, execution_suffix(id))
    }
    /// `pool`'s queue.
    #[must_use]
    pub fn pool_wait_prefix(&self, pool: &str) -> String {
        format!("{}/poolwait/{pool}/", self.ns)
    }
    /// Every pool's queue.
    #[must_use]
    pub fn all_pool_wait_prefix(&self) -> String {
        format!("{}/poolwait/", self.ns)
    }
    /// The pool of a key under [`Keys::all_pool_wait_prefix`].
    #[must_use]
    pub fn parse_pool_wait(&self, key: &[u8]) -> Option<String> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(&self.all_pool_wait_prefix())?;
        Some(rest.split_once('/')?.0.to_owned())
    }
    /// One saved version of the job's spec, written in the transaction that saved it: its
    /// create revision is the revision the spec was saved at. `entry` is a random id (the
    /// create revision orders the versions).
    #[must_use]
    pub fn history(&self, job: &str, entry: &str) -> String {
        format!("{}/history/{job}/{entry}", self.ns)
    }
    /// Every saved version of `job`.
    #[must_use]
    pub fn history_of(&self, job: &str) -> String {
        format!("{}/history/{job}/", self.ns)
    }

    /// Parses any key of this namespace; `None` for keys outside it or malformed ones.
    #[must_use]
    pub fn parse(&self, key: &[u8]) -> Option<Key> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.ns)?.strip_prefix('/')?;
        let (kind, rest) = rest.split_once('/')?;
        let job_ok = |j: &str| validate_job_name(j).is_ok();
        match kind {
            "jobs" if job_ok(rest) => Some(Key::Job(rest.to_owned())),
            "workers" if validate_id(rest).is_ok() => Some(Key::Worker(rest.to_owned())),
            "cordon" if validate_id(rest).is_ok() => Some(Key::Cordon(rest.to_owned())),
            "state" if job_ok(rest) => Some(Key::State(rest.to_owned())),
            "health" if job_ok(rest) => Some(Key::Health(rest.to_owned())),
            "paused" if job_ok(rest) => Some(Key::Paused(rest.to_owned())),
            "history" => {
                let (job, entry) = rest.split_once('/')?;
                (job_ok(job) && validate_id(entry).is_ok())
                    .then(|| Key::History { job: job.to_owned(), entry: entry.to_owned() })
            }
            "lock" => {
                let (job, part) = match rest.find(':') {
                    Some(i) => rest.split_at(i),
                    None => (rest, ""),
                };
                job_ok(job).then_some(())?;
                Some(Key::Lock { job: job.to_owned(), part: part.parse().ok()? })
            }
            "claims" => parse_execution_suffix(rest).map(Key::Claim),
            "running" => {
                let (job, id) = rest.split_once('/')?;
                if id.contains('@') {
                    // An older version's `{job}/{execution_id}`.
                    let id: ExecutionId = id.parse().ok()?;
                    (id.job == job).then_some(Key::Running(id))
                } else {
                    parse_execution_suffix(rest).map(Key::Running)
                }
            }
            "inflight" => {
                let (worker, batch) = rest.split_once('/')?;
                (validate_id(worker).is_ok() && validate_id(batch).is_ok())
                    .then(|| Key::Inflight { worker: worker.to_owned(), batch: batch.to_owned() })
            }
            "kill" => {
                let (job, target) = rest.split_once('/')?;
                if !job_ok(job) {
                    return None;
                }
                let target = if target == "all" {
                    KillTarget::All
                } else {
                    let id: ExecutionId = target.parse().ok()?;
                    if id.job != job {
                        return None;
                    }
                    KillTarget::Execution(id)
                };
                Some(Key::Kill { job: job.to_owned(), target })
            }
            "calendars" if job_ok(rest) => Some(Key::Calendar(rest.to_owned())),
            "pools" if job_ok(rest) => Some(Key::Pool(rest.to_owned())),
            "backfills" => {
                let (job, id) = rest.split_once('/')?;
                (job_ok(job) && validate_id(id).is_ok())
                    .then(|| Key::Backfill { job: job.to_owned(), id: id.to_owned() })
            }
            "trigger" => {
                let (job, request_id) = rest.split_once('/')?;
                if !job_ok(job) || validate_id(request_id).is_err() {
                    return None;
                }
                Some(Key::Trigger { job: job.to_owned(), request_id: request_id.to_owned() })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new("/etcron").unwrap()
    }

    #[test]
    fn a_pools_queue_sorts_by_place_then_scheduled_time() {
        let k = keys();
        let at = |job: &str, ms| ExecutionId::new(job, Tick::Scheduled(ms));
        let mut waiting = [
            ("b", k.pool_wait("db", 50, 2_000, &at("b", 2_000))),
            ("c", k.pool_wait("db", 10, 9_000, &at("c", 9_000))),
            ("a", k.pool_wait("db", 50, 1_000, &at("a", 1_000))),
            ("d", k.pool_wait("db", 100, 500, &at("d", 500))),
            ("e", k.pool_wait("db", 0, 10_000, &at("e", 10_000))),
        ];
        waiting.sort_by(|x, y| x.1.cmp(&y.1));
        assert!(waiting.iter().all(|(_, key)| key.starts_with(&k.pool_wait_prefix("db"))));
        assert_eq!(waiting.map(|(job, _)| job), ["e", "c", "a", "b", "d"]);
    }

    #[test]
    fn every_key_round_trips() {
        let k = keys();
        let id = ExecutionId {
            job: "nightly.report".into(),
            tick: Tick::Scheduled(1_764_547_200_000),
            part: Part::Whole,
            attempt: 2,
        };
        let manual = ExecutionId::new("db-backup", Tick::Manual("a1b2c3".into()));
        let shard = ExecutionId { part: Part::Shard(3), ..id.clone() };
        let on_worker = ExecutionId { part: Part::Worker("w-1".into()), attempt: 1, ..id.clone() };
        let dep = ExecutionId::new("alert", Tick::Dependency("1234".into()));
        let cases = [
            (k.job("db-backup"), Key::Job("db-backup".into())),
            (k.worker("host-1-42"), Key::Worker("host-1-42".into())),
            (k.claim(&id), Key::Claim(id.clone())),
            (k.claim(&manual), Key::Claim(manual.clone())),
            (k.claim(&shard), Key::Claim(shard.clone())),
            (k.claim(&on_worker), Key::Claim(on_worker.clone())),
            (k.claim(&dep), Key::Claim(dep.clone())),
            (k.running(&shard), Key::Running(shard.clone())),
            (k.lock("db-backup", &Part::Whole), Key::Lock { job: "db-backup".into(), part: Part::Whole }),
            (k.lock("db-backup", &Part::Shard(2)), Key::Lock { job: "db-backup".into(), part: Part::Shard(2) }),
            (k.calendar("holidays"), Key::Calendar("holidays".into())),
            (k.pool("reporting-db"), Key::Pool("reporting-db".into())),
            (k.backfill("db-backup", "b1c2"), Key::Backfill { job: "db-backup".into(), id: "b1c2".into() }),
            (k.running(&id), Key::Running(id.clone())),
            (k.running(&manual), Key::Running(manual.clone())),
            (k.inflight("w-1", "5f1e-17"), Key::Inflight { worker: "w-1".into(), batch: "5f1e-17".into() }),
            (k.kill("db-backup", &KillTarget::All), Key::Kill { job: "db-backup".into(), target: KillTarget::All }),
            (
                k.kill("nightly.report", &KillTarget::Execution(id.clone())),
                Key::Kill { job: "nightly.report".into(), target: KillTarget::Execution(id.clone()) },
            ),
            (k.trigger("db-backup", "r-1"), Key::Trigger { job: "db-backup".into(), request_id: "r-1".into() }),
            (k.state("db-backup"), Key::State("db-backup".into())),
            (k.health("db-backup"), Key::Health("db-backup".into())),
            (k.paused("db-backup"), Key::Paused("db-backup".into())),
            (k.history("db-backup", "00ff"), Key::History { job: "db-backup".into(), entry: "00ff".into() }),
        ];
        for (key, parsed) in cases {
            assert_eq!(k.parse(key.as_bytes()), Some(parsed), "{key}");
        }
        assert_eq!(k.running(&id), "/etcron/running/nightly.report/1764547200000#2");
        assert_eq!(k.parse_pool_slot(k.pool_slot("db", 7).as_bytes()), Some(("db".to_owned(), 7)));
        assert_eq!(k.parse_pool_slot(b"/etcron/poolslots/db/07"), None);
        assert_eq!(k.parse_pool_wait(k.pool_wait("db", 50, 1, &id).as_bytes()), Some("db".to_owned()));
        // A marker key written by an older version still names its execution.
        assert_eq!(
            k.parse(b"/etcron/running/nightly.report/nightly.report@1764547200000#2"),
            Some(Key::Running(id.clone()))
        );
        assert_eq!(k.parse(b"/etcron/running/other/nightly.report@1764547200000#2"), None);
        assert_eq!(k.claim(&ExecutionId::new("a", Tick::Manual("r".into()))), "/etcron/claims/a/manual-r");
        assert_eq!(k.claim(&id), "/etcron/claims/nightly.report/1764547200000#2");
        assert_eq!(k.claim(&shard), "/etcron/claims/nightly.report/1764547200000:shard-3#2");
        assert_eq!(k.claim(&on_worker), "/etcron/claims/nightly.report/1764547200000:worker-w-1");
        assert_eq!(shard.to_string(), "nightly.report@1764547200000:shard-3#2");
        assert_eq!(dep.to_string(), "alert@dep-1234#1");
        // Two parents whose claims shared a batch (one revision) give their child two runs.
        let a = ExecutionId::new("alert", Tick::dependency(1234, "backup"));
        let b = ExecutionId::new("alert", Tick::dependency(1234, "report"));
        assert_ne!(a, b);
        assert_eq!(a, ExecutionId::new("alert", Tick::dependency(1234, "backup")));
        assert_eq!(a.to_string().parse::<ExecutionId>().unwrap(), a);
        assert_eq!(k.health("db-backup"), "/etcron/health/db-backup");
        assert!(k.health("db-backup").starts_with(&k.health_prefix()));
        assert_eq!(k.parse(b"/etcron/health/Bad"), None);
        assert_eq!(k.paused("db-backup"), "/etcron/paused/db-backup");
        assert_eq!(k.parse(b"/etcron/paused/Bad"), None);
        assert_eq!(k.parse(b"/etcron/paused/a/b"), None);
    }

    #[test]
    fn inflight_values_list_their_executions() {
        let a = ExecutionId::new("backup", Tick::Scheduled(1_764_037_206_000));
        let b = ExecutionId::new("report", Tick::Scheduled(1_764_037_206_000));
        let c = "sharded@1764037206000:shard-3#2".parse::<ExecutionId>().unwrap();
        let value = inflight_value(&[&a, &b, &c]);
        assert_eq!(
            String::from_utf8(value.clone()).unwrap(),
            r#"{"1764037206000":["backup","report"],"1764037206000:shard-3#2":["sharded"]}"#
        );
        assert_eq!(parse_inflight_value(&value), Some(vec![a, b, c]));
        assert_eq!(parse_inflight_value(br#"{"1764037206000#1":["a"]}"#), None, "a written #1 names nothing");
        assert_eq!(parse_inflight_value(b"[]"), None);
    }

    #[test]
    fn prefixes_contain_their_keys() {
        let k = keys();
        assert!(k.job("a").starts_with(&k.jobs_prefix()));
        assert!(k.paused("a").starts_with(&k.paused_prefix()));
        assert!(!k.paused("a").starts_with(&k.jobs_prefix()) && !k.job("a").starts_with(&k.paused_prefix()));
        let a1 = ExecutionId::new("a", Tick::Scheduled(1));
        assert!(k.claim(&a1).starts_with(&k.job_claims_prefix("a")));
        assert!(k.claim(&a1.next_attempt()).starts_with(&k.tick_claims_prefix("a", &Tick::Scheduled(1))));
        assert!(!k.claim(&ExecutionId::new("ab", Tick::Scheduled(1))).starts_with(&k.job_claims_prefix("a")));
        assert!(k.running(&"a@1#1".parse().unwrap()).starts_with(&k.job_running_prefix("a")));
    }

    #[test]
    fn rejects_foreign_and_malformed_keys() {
        let k = keys();
        for bad in [
            "/other/jobs/a",
            "/etcronx/jobs/a",
            "/etcron/jobs/Bad",
            "/etcron/jobs/",
            "/etcron/claims/a/notanumber",
            "/etcron/claims/a/-5",
            "/etcron/claims/a/5#1",
            "/etcron/claims/a/5#x",
            "/etcron/claims/a/5:shard-x",
            "/etcron/claims/a/5:other",
            "/etcron/running/a/b@1#1",
            "/etcron/running/a/a@1#0",
            "/etcron/kill/a/b@1#1",
            "/etcron/nope/a",
            "/etcron/trigger/a/",
            "/etcron/paused/",
            "/etcron/paused/-a",
            // Numbers written another way than the builders write them (found by the
            // property tests: they parsed, and built back to other bytes).
            "/etcron/claims/a/05",
            "/etcron/claims/a/5#+2",
            "/etcron/claims/a/5#02",
            "/etcron/claims/a/5:shard-01",
            "/etcron/running/a/a@5#+1",
            "/etcron/lock/a:shard-+1",
        ] {
            assert_eq!(k.parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(k.parse(&[0xff, 0xfe]), None);
    }

    #[test]
    fn namespace_rules() {
        assert!(Keys::new("/etcron").is_ok());
        assert!(Keys::new("/team-a/etcron").is_ok());
        for bad in ["", "/", "etcron", "/etcron/", "/a//b", "/a b"] {
            assert!(Keys::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn job_names() {
        for good in ["a", "0", "db-backup", "nightly.report_v2", &"a".repeat(128)] {
            assert!(validate_job_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", ".a", "A", "a/b", "a@b", "a#b", "a b", &"a".repeat(129)] {
            assert!(validate_job_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn execution_ids() {
        let id: ExecutionId = "a.b@1700000000000#3".parse().unwrap();
        assert_eq!(
            id,
            ExecutionId { job: "a.b".into(), tick: Tick::Scheduled(1_700_000_000_000), part: Part::Whole, attempt: 3 }
        );
        assert_eq!(id.to_string(), "a.b@1700000000000#3");
        let shard: ExecutionId = "a@5:shard-2#1".parse().unwrap();
        assert_eq!(shard.part, Part::Shard(2));
        let w: ExecutionId = "a@manual-r1:worker-w.1#4".parse().unwrap();
        assert_eq!((w.tick, w.part, w.attempt), (Tick::Manual("r1".into()), Part::Worker("w.1".into()), 4));
        for bad in [
            "a",
            "a@1",
            "a@1#",
            "a@1#x",
            "A@1#1",
            "a@x#1",
            "a@1#0",
            "a@1:#1",
            "a@1:shard-#1",
            "a@1:x-1#1",
            "a@01#1",
            "a@1#01",
            "a@1#+1",
            "a@1:shard-00#1",
        ] {
            assert!(bad.parse::<ExecutionId>().is_err(), "{bad}");
        }
    }

    /// Property tests: every key the module builds parses back to what built it, and whatever
    /// bytes parse into a key are exactly the bytes that key builds.
    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::check::check;

        fn job_name() -> impl Strategy<Value = String> {
            "[a-z0-9][a-z0-9._-]{0,127}"
        }

        fn id() -> impl Strategy<Value = String> {
            "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
        }

        fn tick() -> impl Strategy<Value = Tick> {
            prop_oneof![
                (0..=9_999_999_999_999i64).prop_map(Tick::Scheduled),
                (0..=i64::MAX).prop_map(Tick::Scheduled),
                id().prop_map(Tick::Manual),
                id().prop_map(Tick::Dependency),
            ]
        }

        fn part() -> impl Strategy<Value = Part> {
            prop_oneof![Just(Part::Whole), any::<u32>().prop_map(Part::Shard), id().prop_map(Part::Worker)]
        }

        fn execution_id() -> impl Strategy<Value = ExecutionId> {
            (job_name(), tick(), part(), prop_oneof![1..=5u32, 1..=u32::MAX])
                .prop_map(|(job, tick, part, attempt)| ExecutionId { job, tick, part, attempt })
        }

        fn namespace() -> impl Strategy<Value = Keys> {
            prop_oneof![Just("/etcron".to_owned()), "(/[A-Za-z0-9._-]{1,12}){1,3}"]
                .prop_filter_map("invalid namespace", |ns| Keys::new(&ns).ok())
        }

        fn key() -> impl Strategy<Value = Key> {
            prop_oneof![
                job_name().prop_map(Key::Job),
                id().prop_map(Key::Worker),
                execution_id().prop_map(Key::Claim),
                execution_id().prop_map(Key::Running),
                (id(), id()).prop_map(|(worker, batch)| Key::Inflight { worker, batch }),
                job_name().prop_map(|job| Key::Kill { job, target: KillTarget::All }),
                execution_id().prop_map(|id| Key::Kill { job: id.job.clone(), target: KillTarget::Execution(id) }),
                (job_name(), id()).prop_map(|(job, request_id)| Key::Trigger { job, request_id }),
                job_name().prop_map(Key::State),
                job_name().prop_map(Key::Health),
                job_name().prop_map(Key::Paused),
                (job_name(), id()).prop_map(|(job, entry)| Key::History { job, entry }),
                (job_name(), part()).prop_map(|(job, part)| Key::Lock { job, part }),
                job_name().prop_map(Key::Calendar),
                (job_name(), id()).prop_map(|(job, id)| Key::Backfill { job, id }),
                id().prop_map(Key::Cordon),
                job_name().prop_map(Key::Pool),
            ]
        }

        /// The key string of a parsed key, through the builders.
        fn build(keys: &Keys, key: &Key) -> String {
            match key {
                Key::Job(job) => keys.job(job),
                Key::Worker(id) => keys.worker(id),
                Key::Claim(id) => keys.claim(id),
                Key::Running(id) => keys.running(id),
                Key::Inflight { worker, batch } => keys.inflight(worker, batch),
                Key::Kill { job, target } => keys.kill(job, target),
                Key::Trigger { job, request_id } => keys.trigger(job, request_id),
                Key::State(job) => keys.state(job),
                Key::Health(job) => keys.health(job),
                Key::Paused(job) => keys.paused(job),
                Key::History { job, entry } => keys.history(job, entry),
                Key::Lock { job, part } => keys.lock(job, part),
                Key::Calendar(name) => keys.calendar(name),
                Key::Backfill { job, id } => keys.backfill(job, id),
                Key::Cordon(id) => keys.cordon(id),
                Key::Pool(name) => keys.pool(name),
            }
        }

        #[test]
        fn built_keys_parse_back() {
            check(300, (namespace(), key()), |(keys, key)| {
                let built = build(&keys, &key);
                prop_assert_eq!(keys.parse(built.as_bytes()), Some(key));
                Ok(())
            });
        }

        #[test]
        fn execution_ids_ticks_and_parts_round_trip() {
            check(300, execution_id(), |id| {
                let text = id.to_string();
                prop_assert_eq!(text.parse::<ExecutionId>(), Ok(id.clone()));
                prop_assert_eq!(id.tick.to_string().parse::<Tick>(), Ok(id.tick.clone()));
                prop_assert_eq!(id.part.to_string().parse::<Part>(), Ok(id.part.clone()));
                let json = serde_json::to_string(&id).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(serde_json::from_str::<ExecutionId>(&json).ok(), Some(id));
                Ok(())
            });
        }

        /// Text near the key grammar: the separators, signs and leading zeros a parser may
        /// accept by mistake.
        fn near_key() -> impl Strategy<Value = Vec<u8>> {
            let kind = prop::sample::select(vec![
                "jobs", "workers", "claims", "running", "kill", "trigger", "state", "health", "lock", "paused",
                "cordon",
            ]);
            let piece = "[a-z0-9@#:+_./-]{0,6}|0[0-9]{1,3}|\\+[0-9]{1,3}|manual-|dep-|:shard-|:worker-|#|@|all";
            let rest = proptest::collection::vec(piece, 0..8).prop_map(|p| p.concat());
            (kind, rest).prop_map(|(kind, rest)| format!("/etcron/{kind}/{rest}").into_bytes())
        }

        #[test]
        fn parsed_bytes_build_back_to_themselves() {
            let keys = Keys::new("/etcron").unwrap();
            let bytes = prop_oneof![
                any::<Vec<u8>>(),
                near_key(),
                key().prop_map(|k| {
                    let mut b = build(&Keys::new("/etcron").unwrap(), &k).into_bytes();
                    // Change one byte of a valid key.
                    let i = b.len() / 2;
                    b[i] = b[i].wrapping_add(1);
                    b
                })
            ];
            check(800, bytes, |bytes| {
                if let Some(key) = keys.parse(&bytes) {
                    let built = build(&keys, &key);
                    prop_assert_eq!(built.as_bytes(), &bytes[..], "{:?}", key);
                }
                Ok(())
            });
        }

        #[test]
        fn parsed_execution_ids_print_back_to_themselves() {
            let text = prop_oneof![
                any::<String>(),
                "[a-z0-9]{1,3}@(0|00|01|\\+1|[0-9]{1,4}|manual-[a-z0-9]{1,3}|dep-[0-9]{1,3})(:shard-(0|01|\\+1|[0-9]{1,3})|:worker-[a-z0-9]{1,3})?#(0|01|\\+1|[0-9]{1,3})",
            ];
            check(400, text, |text| {
                if let Ok(id) = text.parse::<ExecutionId>() {
                    prop_assert_eq!(id.to_string(), text);
                }
                Ok(())
            });
        }
    }
}
