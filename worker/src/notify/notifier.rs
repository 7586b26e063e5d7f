//! Webhook notifications of final outcomes (`failure`, `success`, `missed`, `recovery`,
//! `paused`, `output_match`) and of SLA alerts (`late`, `long_running`, `stale`).
//!
//! The execution path calls [`Notifier::record`] with each final record: it classifies the
//! record, and queues it with a non-blocking `try_send` into a bounded queue; `crate::fire::alerts`
//! calls [`Notifier::alert`] with each alert it raised. Nothing on the
//! scheduling or claim path waits for a webhook, for etcd on behalf of a notification, or for
//! MongoDB: a full queue drops the notification with a warning and a counter.
//!
//! Behind the queue, one dispatcher task decides `recovery` and `paused` (through the job's
//! health key in etcd, `crate::notify::health`, moved once per outcome so that exactly one worker sees
//! a job recover or pause) and starts one delivery task per target, at most `concurrency` at once. A delivery
//! POSTs with this module's own HTTP client, under a per-attempt timeout, retried with
//! exponential backoff and jitter up to `max_attempts` (timeouts, connection errors, 408, 429
//! and 5xx are retried; other answers are final). Each delivery and each of its attempts is
//! recorded in MongoDB (`notifications`) by a writer that keeps the latest state of every
//! delivery in memory while MongoDB is unreachable (bounded; past the bound, loudly dropped).

use etcron_common::backoff::Backoff;
use etcron_common::hash::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use etcd_client::Client;
use etcron_common::metrics::{counter, counter_vec, gauge};
use etcron_common::store::MongoStore;
use etcron_model::duration::HumanDuration;
use etcron_model::keys::Keys;
use etcron_model::notify::{delivery_id, Attempt, Delivery, DeliveryState};
use etcron_model::record::{ExecutionRecord, Status};
use etcron_model::spec::notify::{validate_targets, validate_url, NotifyEvent, NotifyFormat, NotifyTarget};
use etcron_model::spec::JobSpec;
use etcron_model::{now_ms, rfc3339_ms};
use prometheus::{IntCounter, IntCounterVec, IntGauge};
use reqwest::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use crate::notify::health::{self, Tracked};

/// `User-Agent` of every delivery.
pub const USER_AGENT: &str = concat!("etcron/", env!("CARGO_PKG_VERSION"));
/// Bytes of output a notification carries (the end of it; the whole is behind the link).
pub const OUTPUT_KEPT: usize = 16 * 1024;
/// Delivery records held in memory while MongoDB is unreachable.
pub const MAX_PENDING_RECORDS: usize = 10_000;
/// How long a worker that is shutting down waits for deliveries in progress.
pub const DRAIN_ON_SHUTDOWN: Duration = Duration::from_secs(5);
/// Bytes of a refusing answer's body quoted in the attempt's error.
const ERROR_BODY: usize = 256;
/// Connecting (DNS, TCP, TLS) is limited to this, within the attempt's timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Records written to MongoDB per round trip.
const RECORD_BATCH: usize = 500;

pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
pub const MAX_ATTEMPTS: u32 = 20;
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_QUEUE: usize = 1000;
pub const DEFAULT_CONCURRENCY: usize = 16;

/// Flags and env vars of the `[notify]` settings (the targets are only in the file).
#[derive(Debug, Default, clap::Args)]
pub struct NotifyArgs {
    /// Base URL of the console, for the link to the execution in notifications.
    #[arg(long, env = "ETCRON_UI_URL")]
    pub ui_url: Option<String>,
    /// Tries per notification.
    #[arg(long = "notify-max-attempts", env = "ETCRON_NOTIFY_MAX_ATTEMPTS")]
    pub max_attempts: Option<u32>,
    /// Wait after the first failed try; doubles after each, up to `--notify-max-backoff`.
    #[arg(long = "notify-backoff", env = "ETCRON_NOTIFY_BACKOFF")]
    pub backoff: Option<HumanDuration>,
    #[arg(long = "notify-max-backoff", env = "ETCRON_NOTIFY_MAX_BACKOFF")]
    pub max_backoff: Option<HumanDuration>,
    /// Limit of one try (connect, send, answer).
    #[arg(long = "notify-timeout", env = "ETCRON_NOTIFY_TIMEOUT")]
    pub timeout: Option<HumanDuration>,
    /// Notifications waiting for delivery; more are dropped (logged and counted).
    #[arg(long = "notify-queue", env = "ETCRON_NOTIFY_QUEUE")]
    pub queue: Option<usize>,
    /// Deliveries in progress at once (each through its retries).
    #[arg(long = "notify-concurrency", env = "ETCRON_NOTIFY_CONCURRENCY")]
    pub concurrency: Option<usize>,
}

/// The `[notify]` table of the worker's config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyFile {
    pub ui_url: Option<String>,
    /// Targets of jobs without `notify` (`[[notify.targets]]`).
    #[serde(default)]
    pub targets: Vec<NotifyTarget>,
    pub max_attempts: Option<u32>,
    pub backoff: Option<HumanDuration>,
    pub max_backoff: Option<HumanDuration>,
    pub timeout: Option<HumanDuration>,
    pub queue: Option<usize>,
    pub concurrency: Option<usize>,
}

/// The resolved notification settings.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// Base URL of the console, without a trailing `/`.
    pub ui_url: Option<String>,
    /// Targets of jobs that have no `notify`.
    pub targets: Vec<NotifyTarget>,
    pub max_attempts: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub timeout: Duration,
    pub queue: usize,
    pub concurrency: usize,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            ui_url: None,
            targets: Vec::new(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff: DEFAULT_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            timeout: DEFAULT_TIMEOUT,
            queue: DEFAULT_QUEUE,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

impl NotifyConfig {
    /// Flags and env over the file over the defaults; errors name the setting (`notify.queue`).
    pub fn resolve(args: NotifyArgs, file: Option<NotifyFile>) -> anyhow::Result<Self> {
        let file = file.unwrap_or_default();
        let d = Self::default();
        let ui_url = args.ui_url.or(file.ui_url).map(|u| u.trim_end_matches('/').to_owned()).filter(|u| !u.is_empty());
        if let Some(url) = &ui_url {
            validate_url("notify.ui_url", url).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        validate_targets("notify.targets", &file.targets).map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(i) = file.targets.iter().position(NotifyTarget::withholds_secrets) {
            bail!("notify.targets[{i}]: secret values must be given in the file");
        }
        let c = Self {
            ui_url,
            targets: file.targets,
            max_attempts: args.max_attempts.or(file.max_attempts).unwrap_or(d.max_attempts),
            backoff: args.backoff.or(file.backoff).map_or(d.backoff, |v| v.0),
            max_backoff: args.max_backoff.or(file.max_backoff).map_or(d.max_backoff, |v| v.0),
            timeout: args.timeout.or(file.timeout).map_or(d.timeout, |v| v.0),
            queue: args.queue.or(file.queue).unwrap_or(d.queue),
            concurrency: args.concurrency.or(file.concurrency).unwrap_or(d.concurrency),
        };
        if !(1..=MAX_ATTEMPTS).contains(&c.max_attempts) {
            bail!("notify.max_attempts: must be between 1 and {MAX_ATTEMPTS}, got {}", c.max_attempts);
        }
        if c.backoff < Duration::from_millis(10) || c.backoff > c.max_backoff {
            bail!("notify.backoff: must be at least 10ms and at most notify.max_backoff");
        }
        if c.max_backoff > Duration::from_secs(3600) {
            bail!("notify.max_backoff: must be at most 1h");
        }
        if c.timeout < Duration::from_millis(100) || c.timeout > Duration::from_secs(300) {
            bail!("notify.timeout: must be between 100ms and 5m");
        }
        if !(1..=100_000).contains(&c.queue) {
            bail!("notify.queue: must be between 1 and 100000, got {}", c.queue);
        }
        if !(1..=1000).contains(&c.concurrency) {
            bail!("notify.concurrency: must be between 1 and 1000, got {}", c.concurrency);
        }
        Ok(c)
    }
}

/// The event a final record is (before `recovery` is decided), or `None` when it notifies
/// nothing: a failure that will be retried or rerun is not final yet (the same rule as
/// `on_failure`), and `killed` (asked for by an operator, a `replace`, or a shutdown) and
/// `skipped` are not failures.
#[must_use]
pub fn classify(spec: &JobSpec, record: &ExecutionRecord) -> Option<NotifyEvent> {
    if record.status == Status::Missed {
        return Some(NotifyEvent::Missed);
    }
    health::failing(spec, &record.id, record.status).map(|failing| {
        if failing {
            NotifyEvent::Failure
        } else {
            NotifyEvent::Success
        }
    })
}

/// The wait after try `failed_attempt` (1-based): `base · 2^(n-1)` capped at `cap`, jittered into
/// its upper half by `jitter` in `[0, 1]`, so deliveries that failed together spread out.
#[must_use]
pub fn backoff(failed_attempt: u32, base: Duration, cap: Duration, jitter: f64) -> Duration {
    let exp = failed_attempt.saturating_sub(1).min(31);
    let full = base.saturating_mul(1u32 << exp).min(cap);
    full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// The console's page of an execution: `{ui_url}/#/execution/{id, percent-encoded}`.
#[must_use]
pub fn execution_link(ui_url: Option<&str>, execution_id: &str) -> Option<String> {
    let encoded: String = execution_id
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    ui_url.map(|u| format!("{u}/#/execution/{encoded}"))
}

/// The body of a `format: json` delivery.
#[must_use]
pub fn json_payload(
    event: NotifyEvent,
    record: &ExecutionRecord,
    ui_url: Option<&str>,
    delivery: &str,
    sent_at: &str,
) -> Value {
    json!({
        "event": event.as_str(),
        "job": record.job,
        "execution": record,
        "url": execution_link(ui_url, &record.id.to_string()),
        "delivery": delivery,
        "sent_at": sent_at,
    })
}

/// The body of a `format: slack` delivery: `{"text": …}` as Slack and Mattermost incoming
/// webhooks take it, with the link in their `<url|label>` form.
#[must_use]
pub fn slack_payload(event: NotifyEvent, record: &ExecutionRecord, ui_url: Option<&str>) -> Value {
    let job = escape(&record.job);
    let worker = escape(&record.worker_id);
    let why = record.error.as_deref().or(record.reason.as_deref()).map(|w| format!(" ({})", escape(&short(w, 200))));
    let why = why.unwrap_or_default();
    let text = match event {
        NotifyEvent::Failure => {
            let what = match record.status {
                Status::TimedOut => "timed out",
                Status::Lost => "was lost",
                _ => "failed",
            };
            format!(":x: etcron: job `{job}` {what} on worker {worker}{why}")
        }
        NotifyEvent::Success => {
            let took = record.duration_ms.map(|ms| format!(" in {:.1}s", ms as f64 / 1000.0)).unwrap_or_default();
            format!(":white_check_mark: etcron: job `{job}` succeeded on worker {worker}{took}")
        }
        NotifyEvent::Recovery => {
            format!(":large_green_circle: etcron: job `{job}` recovered: succeeded on worker {worker} after failing")
        }
        NotifyEvent::Missed => format!(":warning: etcron: job `{job}` missed its tick at {}{why}", record.scheduled_at),
        NotifyEvent::Paused => {
            format!(":double_vertical_bar: etcron: job `{job}` paused after failing again on worker {worker}{why}; resume it when fixed")
        }
        NotifyEvent::OutputMatch => {
            format!(":mag: etcron: the output of job `{job}` on worker {worker} matched its on_output_match")
        }
        // Alerts have no record (`alert_slack`); these read as the alert would.
        NotifyEvent::Late => format!(":hourglass: etcron: job `{job}` started late on worker {worker}"),
        NotifyEvent::LongRunning => format!(":turtle: etcron: job `{job}` is running long on worker {worker}"),
        NotifyEvent::Stale => format!(":zzz: etcron: job `{job}` has not succeeded lately"),
    };
    let link = execution_link(ui_url, &record.id.to_string())
        .map(|url| format!(" — <{}|view execution>", url.replace('|', "%7C")))
        .unwrap_or_default();
    json!({ "text": format!("{text}{link}") })
}

/// Slack's three control characters.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn short(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// The record as a notification carries it: at most the last [`OUTPUT_KEPT`] bytes of output.
#[must_use]
pub fn trimmed(record: &ExecutionRecord) -> ExecutionRecord {
    let mut copy = record.clone();
    if copy.output.len() > OUTPUT_KEPT {
        let mut start = copy.output.len() - OUTPUT_KEPT;
        while !copy.output.is_char_boundary(start) {
            start += 1;
        }
        copy.output = copy.output[start..].to_owned();
        copy.output_truncated = true;
    }
    copy
}

/// Notification metrics (`etcron_worker_notification*`).
pub struct NotifyMetrics {
    /// Finished deliveries by outcome (`delivered`, `failed`).
    pub notifications: IntCounterVec,
    /// Tries by result (`delivered`, `http_error`, `error`, `timeout`).
    pub attempts: IntCounterVec,
    /// Notifications dropped because the queue was full.
    pub dropped: IntCounter,
    /// Delivery records lost (MongoDB unreachable and the in-memory bound reached).
    pub records_dropped: IntCounter,
    pub queue: IntGauge,
    pub in_flight: IntGauge,
}

pub static NOTIFY_METRICS: LazyLock<NotifyMetrics> = LazyLock::new(|| {
    NotifyMetrics {
    notifications: counter_vec(
        "etcron_worker_notifications_total",
        "Notification deliveries finished, by outcome (delivered, failed, silenced: not sent within the target's silence window).",
        &["outcome"],
    ),
    attempts: counter_vec(
        "etcron_worker_notification_attempts_total",
        "Notification delivery tries, by result (delivered, http_error, error, timeout).",
        &["result"],
    ),
    dropped: counter(
        "etcron_worker_notifications_dropped_total",
        "Notifications dropped because the notification queue was full.",
    ),
    records_dropped: counter(
        "etcron_worker_notification_records_dropped_total",
        "Notification delivery records not written: MongoDB unreachable and too many waiting.",
    ),
    queue: gauge("etcron_worker_notification_queue_length", "Notifications waiting for a delivery slot."),
    in_flight: gauge(
        "etcron_worker_notifications_in_flight",
        "Notification deliveries in progress (retries included).",
    ),
}
});

fn init_metrics() {
    let m = &*NOTIFY_METRICS;
    for outcome in ["delivered", "failed", "silenced"] {
        m.notifications.with_label_values(&[outcome]);
    }
    for result in ["delivered", "http_error", "error", "timeout"] {
        m.attempts.with_label_values(&[result]);
    }
}

/// Brings the notification gauges up to date (at scrape time), summed over the process's nodes.
pub fn refresh_metrics<'a>(notifiers: impl Iterator<Item = &'a Notifier>) {
    let m = &*NOTIFY_METRICS;
    let (queued, in_flight) = notifiers.fold((0usize, 0usize), |(q, f), n| (q + n.queued(), f + n.in_flight()));
    m.queue.set(i64::try_from(queued).unwrap_or(i64::MAX));
    m.in_flight.set(i64::try_from(in_flight).unwrap_or(i64::MAX));
}

/// An SLA alert raised by this worker (`crate::fire::alerts`), as deliveries carry it (`alert`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Alert {
    pub event: NotifyEvent,
    pub job: String,
    /// The execution it is about; none for `stale`.
    pub execution_id: Option<String>,
    /// Names the occurrence in delivery ids: the execution id, or `{job}@stale-{ms}`.
    pub occurrence: String,
    /// What happened, in a sentence.
    pub message: String,
    /// The setting that was exceeded, as written (`"1m"`).
    pub threshold: String,
    /// The execution's scheduled time (RFC 3339), for `late` and `long_running`.
    pub scheduled_at: Option<String>,
}

/// What a notification is about: a final record, or an alert.
#[derive(Debug)]
enum Subject {
    Record(Box<ExecutionRecord>),
    Alert(Alert),
}

impl Subject {
    fn job(&self) -> &str {
        match self {
            Subject::Record(r) => &r.job,
            Subject::Alert(a) => &a.job,
        }
    }

    /// The execution id, or the occurrence of an alert that is about none.
    fn occurrence(&self) -> String {
        match self {
            Subject::Record(r) => r.id.to_string(),
            Subject::Alert(a) => a.occurrence.clone(),
        }
    }

    fn body(
        &self,
        format: NotifyFormat,
        event: NotifyEvent,
        ui_url: Option<&str>,
        delivery: &str,
        sent_at: &str,
    ) -> Value {
        match (self, format) {
            (Subject::Record(r), NotifyFormat::Json) => json_payload(event, r, ui_url, delivery, sent_at),
            (Subject::Record(r), NotifyFormat::Slack) => slack_payload(event, r, ui_url),
            (Subject::Alert(a), NotifyFormat::Json) => alert_json(a, ui_url, delivery, sent_at),
            (Subject::Alert(a), NotifyFormat::Slack) => alert_slack(a, ui_url),
        }
    }
}

/// The body of a `format: json` alert: as a record's, with `execution: null` and `alert`.
#[must_use]
pub fn alert_json(alert: &Alert, ui_url: Option<&str>, delivery: &str, sent_at: &str) -> Value {
    json!({
        "event": alert.event.as_str(),
        "job": alert.job,
        "execution": Value::Null,
        "alert": alert,
        "url": alert.execution_id.as_deref().and_then(|id| execution_link(ui_url, id)),
        "delivery": delivery,
        "sent_at": sent_at,
    })
}

/// The body of a `format: slack` alert.
#[must_use]
pub fn alert_slack(alert: &Alert, ui_url: Option<&str>) -> Value {
    let icon = match alert.event {
        NotifyEvent::Late => ":hourglass:",
        NotifyEvent::LongRunning => ":turtle:",
        _ => ":zzz:",
    };
    let link = alert
        .execution_id
        .as_deref()
        .and_then(|id| execution_link(ui_url, id))
        .map(|url| format!(" — <{}|view execution>", url.replace('|', "%7C")))
        .unwrap_or_default();
    json!({ "text": format!("{icon} etcron: job `{}` {}{link}", escape(&alert.job), escape(&alert.message)) })
}

/// A notification on its way to the dispatcher.
struct Notice {
    event: NotifyEvent,
    subject: Subject,
    targets: Vec<NotifyTarget>,
    /// The worker's default targets (the job has no `notify`).
    default_targets: bool,
    /// The job's `pause_after_failures`.
    pause_after: Option<u32>,
    /// The job's team, stamped on each delivery record.
    team: Option<String>,
}

struct Shared {
    config: NotifyConfig,
    http: Result<reqwest::Client, String>,
    etcd: Client,
    keys: Keys,
    worker_id: String,
    slots: Arc<Semaphore>,
    records: Arc<DeliveryLog>,
    /// Compiled `on_output_match` patterns, by pattern.
    patterns: Mutex<HashMap<String, Option<Arc<regex::Regex>>>>,
}

/// Most compiled `on_output_match` patterns kept (the cache starts over past it).
const MAX_PATTERNS: usize = 1024;

/// Queues notifications; see the module docs.
pub struct Notifier {
    tx: mpsc::Sender<Notice>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").field("queued", &self.queued()).finish_non_exhaustive()
    }
}

impl Notifier {
    /// Starts the dispatcher and the record writer (with a store).
    #[must_use]
    pub fn start(config: NotifyConfig, etcd: Client, keys: Keys, store: Option<MongoStore>, worker_id: String) -> Self {
        LazyLock::force(&NOTIFY_METRICS);
        init_metrics();
        let (tx, rx) = mpsc::channel(config.queue);
        let records = Arc::new(DeliveryLog::default());
        let shared = Arc::new(Shared {
            http: build_client(config.timeout),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            config,
            etcd,
            keys,
            worker_id,
            records: records.clone(),
            patterns: Mutex::new(HashMap::default()),
        });
        etcron_common::task::spawn(dispatch(shared.clone(), rx));
        // Without a store (the simulation) delivery records are not written anywhere.
        if let Some(store) = store {
            etcron_common::task::spawn(write_records(records, store));
        }
        Self { tx, shared }
    }

    /// Hands over a final record of `spec`'s job. Never waits: when the queue is full the
    /// notification is dropped, with a warning and `etcron_worker_notifications_dropped_total`.
    pub fn record(&self, spec: &JobSpec, record: &ExecutionRecord) {
        if let Some(event) = classify(spec, record) {
            self.queue(spec, event, || Subject::Record(Box::new(trimmed(record))));
        }
        if self.output_matches(spec, &record.output) {
            self.queue(spec, NotifyEvent::OutputMatch, || Subject::Record(Box::new(trimmed(record))));
        }
    }

    /// Hands over an SLA alert this worker raised; never waits, as [`Notifier::record`].
    pub fn alert(&self, spec: &JobSpec, alert: Alert) {
        self.queue(spec, alert.event, || Subject::Alert(alert));
    }

    /// Whether `output` matches the job's `on_output_match` (a pattern that does not compile,
    /// written around the API, matches nothing).
    fn output_matches(&self, spec: &JobSpec, output: &str) -> bool {
        let Some(pattern) = spec.alerts.as_ref().and_then(|a| a.on_output_match.as_deref()) else { return false };
        let mut patterns = self.shared.patterns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if patterns.len() >= MAX_PATTERNS && !patterns.contains_key(pattern) {
            patterns.clear();
        }
        let regex = patterns
            .entry(pattern.to_owned())
            .or_insert_with(|| etcron_model::spec::alerts::output_regex(pattern).ok().map(Arc::new))
            .clone();
        drop(patterns);
        regex.is_some_and(|r| r.is_match(output))
    }

    fn queue(&self, spec: &JobSpec, event: NotifyEvent, subject: impl FnOnce() -> Subject) {
        let (targets, default_targets) = match &spec.notify {
            Some(own) => (own.as_slice(), false),
            None => (self.shared.config.targets.as_slice(), true),
        };
        let can_recover = event == NotifyEvent::Success || event == NotifyEvent::Failure;
        let can_pause = event == NotifyEvent::Failure && spec.pause_after_failures.is_some();
        let wanted = |t: &NotifyTarget| {
            t.wants(event)
                || (can_recover && t.wants(NotifyEvent::Recovery))
                || (can_pause && t.wants(NotifyEvent::Paused))
        };
        if !targets.iter().any(wanted) {
            if event.is_alert() {
                self.unrouted(spec, event, &subject(), default_targets);
            }
            return;
        }
        let notice = Notice {
            event,
            subject: subject(),
            targets: targets.to_vec(),
            default_targets,
            pause_after: spec.pause_after_failures,
            team: spec.team.clone(),
        };
        if let Err(mpsc::error::TrySendError::Full(n) | mpsc::error::TrySendError::Closed(n)) = self.tx.try_send(notice)
        {
            NOTIFY_METRICS.dropped.inc();
            tracing::warn!(
                job = %n.subject.job(),
                execution_id = %n.subject.occurrence(),
                event = n.event.as_str(),
                queue = self.shared.config.queue,
                "NOTIFICATION DROPPED: the notification queue is full (webhooks slow or unreachable)"
            );
        }
    }

    /// An alert raised that no target listens for: said loudly, and recorded as a delivery
    /// `no_target` (the job's and the execution's pages, `etcronctl notifications` and
    /// `describe` show it), never dropped in silence.
    fn unrouted(&self, spec: &JobSpec, event: NotifyEvent, subject: &Subject, default_targets: bool) {
        let occurrence = subject.occurrence();
        let now = rfc3339_ms(now_ms());
        let whose =
            if default_targets { "this worker's default targets (the job has no notify)" } else { "the job's notify" };
        tracing::warn!(
            job = %subject.job(),
            execution_id = %occurrence,
            event = event.as_str(),
            "ALERT NOT DELIVERED: no target of {whose} listens for {}: add it to a target's `on`",
            event.as_str()
        );
        let delivery = Delivery {
            id: delivery_id(&occurrence, event, "none"),
            job: subject.job().to_owned(),
            team: spec.team.clone(),
            execution_id: occurrence,
            event,
            target: String::new(),
            target_name: None,
            default_target: default_targets,
            format: etcron_model::spec::notify::NotifyFormat::Json,
            worker_id: self.shared.worker_id.clone(),
            state: DeliveryState::NoTarget,
            attempts: Vec::new(),
            created_at: now.clone(),
            finished_at: Some(now),
        };
        self.shared.records.put(&delivery);
        NOTIFY_METRICS.notifications.with_label_values(&[DeliveryState::NoTarget.as_str()]).inc();
    }

    /// Notifications waiting for a delivery slot.
    #[must_use]
    pub fn queued(&self) -> usize {
        self.shared.config.queue.saturating_sub(self.tx.capacity())
    }

    /// Deliveries in progress.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.shared.config.concurrency.saturating_sub(self.shared.slots.available_permits())
    }

    /// Waits up to `limit` for queued and running deliveries to end and their records to be
    /// written (at shutdown); what is left is logged.
    pub async fn drain(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let (queued, in_flight, records) = (self.queued(), self.in_flight(), self.shared.records.pending());
            if queued + in_flight + records == 0 {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    queued,
                    in_flight,
                    records,
                    "shutting down with notifications undelivered or unrecorded"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn build_client(timeout: Duration) -> Result<reqwest::Client, String> {
    let builder = || {
        reqwest::Client::builder()
            .connect_timeout(timeout.min(CONNECT_TIMEOUT))
            // A webhook that moved is a failed delivery to fix, not a hop to follow.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(USER_AGENT)
    };
    builder().build().or_else(|e| {
        let cause = crate::tasks::http_client::error_chain(&e);
        tracing::error!(error = %cause, "cannot set up TLS for notifications; https:// webhooks will fail");
        builder().tls_certs_only(std::iter::empty()).build().map_err(|e| crate::tasks::http_client::error_chain(&e))
    })
}

async fn dispatch(shared: Arc<Shared>, mut rx: mpsc::Receiver<Notice>) {
    while let Some(notice) = rx.recv().await {
        let tracked = tracked(&shared, &notice).await;
        let events = |target: &NotifyTarget| {
            // A recovery replaces the success for targets that asked for recoveries; a pause
            // comes on top of the failure.
            let main = if tracked.recovered && target.wants(NotifyEvent::Recovery) {
                Some(NotifyEvent::Recovery)
            } else {
                target.wants(notice.event).then_some(notice.event)
            };
            let paused = (tracked.paused && target.wants(NotifyEvent::Paused)).then_some(NotifyEvent::Paused);
            main.into_iter().chain(paused).collect::<Vec<_>>()
        };
        let sends: Vec<(usize, NotifyTarget, NotifyEvent)> = notice
            .targets
            .iter()
            .enumerate()
            .flat_map(|(i, target)| events(target).into_iter().map(move |e| (i, target.clone(), e)))
            .collect();
        let subject = Arc::new(notice.subject);
        for (i, target, event) in sends {
            // Waiting for a slot here is what makes the queue fill up when webhooks are slow.
            let Ok(permit) = shared.slots.clone().acquire_owned().await else { return };
            let target_ref = if notice.default_targets { format!("default-{i}") } else { i.to_string() };
            let occurrence = subject.occurrence();
            let span = tracing::info_span!(
                "notification",
                job = %subject.job(),
                execution_id = %occurrence,
                event = event.as_str(),
                target = %target.shown_url()
            );
            let mut delivery = Delivery {
                id: delivery_id(&occurrence, event, &target_ref),
                job: subject.job().to_owned(),
                team: notice.team.clone(),
                execution_id: occurrence,
                event,
                target: target.shown_url(),
                target_name: target.name.clone(),
                default_target: notice.default_targets,
                format: target.format,
                worker_id: shared.worker_id.clone(),
                state: DeliveryState::Pending,
                attempts: Vec::new(),
                created_at: rfc3339_ms(now_ms()),
                finished_at: None,
            };
            if let Some(window) = target.silence {
                let silence_ref = target.name.clone().unwrap_or_else(|| target_ref.clone());
                if crate::notify::silence::silenced(&shared.etcd, &shared.keys, &delivery, &silence_ref, window.0).await
                {
                    delivery.state = DeliveryState::Silenced;
                    delivery.finished_at = Some(delivery.created_at.clone());
                    shared.records.put(&delivery);
                    NOTIFY_METRICS.notifications.with_label_values(&["silenced"]).inc();
                    let _in_span = span.enter();
                    tracing::info!(delivery = %delivery.id, "notification silenced: the target's silence window for this event of the job is open");
                    continue;
                }
            }
            etcron_common::task::spawn(
                deliver(shared.clone(), subject.clone(), target, delivery, permit).instrument(span),
            );
        }
    }
}

/// Records the outcome in the job's health when a target asks for recoveries or pauses (it may
/// be recorded already: by the close, for a job with `pause_after_failures`): whether this
/// success is the job's recovery, whether this failure paused it.
async fn tracked(shared: &Shared, notice: &Notice) -> Tracked {
    let failing = match notice.event {
        NotifyEvent::Failure => true,
        NotifyEvent::Success => false,
        _ => return Tracked::default(),
    };
    if !notice.targets.iter().any(|t| t.wants(NotifyEvent::Recovery) || t.wants(NotifyEvent::Paused)) {
        return Tracked::default();
    }
    let Subject::Record(record) = &notice.subject else { return Tracked::default() };
    let finished_ms = record
        .finished_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or_else(now_ms, |t| t.timestamp_millis());
    let id = record.id.to_string();
    let outcome = health::Outcome { failing, execution_id: &id, finished_ms };
    match health::update(&shared.etcd, &shared.keys, &record.job, notice.pause_after, outcome).await {
        Ok(tracked) => tracked,
        Err(e) => {
            tracing::warn!(job = %record.job, execution_id = %id, error = %e, "job health not updated: a recovery or pause may go unnoticed");
            Tracked::default()
        }
    }
}

/// How one try ended.
enum Sent {
    Delivered(u16),
    Refused {
        status: u16,
        body: String,
    },
    Failed(String),
    TimedOut,
    /// Nothing to send to, or nothing to send with: trying again cannot help.
    Unusable(String),
}

impl Sent {
    /// Worth another try: the receiver may answer differently later.
    fn retryable(&self) -> bool {
        match self {
            Sent::Delivered(_) => false,
            Sent::Refused { status, .. } => *status == 408 || *status == 429 || *status >= 500,
            Sent::Failed(_) | Sent::TimedOut => true,
            Sent::Unusable(_) => false,
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Sent::Delivered(_) => "delivered",
            Sent::Refused { .. } => "http_error",
            Sent::Failed(_) | Sent::Unusable(_) => "error",
            Sent::TimedOut => "timeout",
        }
    }
}

async fn deliver(
    shared: Arc<Shared>,
    subject: Arc<Subject>,
    target: NotifyTarget,
    mut delivery: Delivery,
    _slot: OwnedSemaphorePermit,
) {
    let config = &shared.config;
    shared.records.put(&delivery);
    for attempt in 1..=config.max_attempts {
        let sent_ms = now_ms();
        let started = Instant::now();
        let sent = match (&shared.http, target.endpoint()) {
            (Err(e), _) => Sent::Unusable(format!("the worker cannot make HTTP requests: {e}")),
            // Only a value written around the API (`"secret_url": null` stored) gets here.
            (_, None) => Sent::Unusable("the target's secret_url has no stored value".to_owned()),
            (Ok(client), Some(url)) => {
                let body = subject.body(
                    target.format,
                    delivery.event,
                    config.ui_url.as_deref(),
                    &delivery.id,
                    &rfc3339_ms(sent_ms),
                );
                let body = serde_json::to_vec(&body).unwrap_or_default();
                match tokio::time::timeout(config.timeout, send(client, url, &target, &delivery, body)).await {
                    Ok(sent) => sent,
                    Err(_) => Sent::TimedOut,
                }
            }
        };
        NOTIFY_METRICS.attempts.with_label_values(&[sent.label()]).inc();
        let (http_status, error) = match &sent {
            Sent::Delivered(status) => (Some(*status), None),
            Sent::Refused { status, body } if body.is_empty() => (Some(*status), Some(format!("HTTP {status}"))),
            Sent::Refused { status, body } => (Some(*status), Some(format!("HTTP {status}: {body}"))),
            Sent::Failed(e) | Sent::Unusable(e) => (None, Some(e.clone())),
            Sent::TimedOut => (None, Some(format!("no answer within {}", HumanDuration(config.timeout)))),
        };
        delivery.attempts.push(Attempt {
            at: rfc3339_ms(sent_ms),
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            http_status,
            error: error.clone(),
        });
        let last = !sent.retryable() || attempt == config.max_attempts;
        if matches!(sent, Sent::Delivered(_)) || last {
            let delivered = matches!(sent, Sent::Delivered(_));
            delivery.state = if delivered { DeliveryState::Delivered } else { DeliveryState::Failed };
            delivery.finished_at = Some(rfc3339_ms(now_ms()));
            shared.records.put(&delivery);
            NOTIFY_METRICS.notifications.with_label_values(&[delivery.state.as_str()]).inc();
            if delivered {
                tracing::info!(delivery = %delivery.id, attempts = attempt, "notification delivered");
            } else {
                tracing::warn!(delivery = %delivery.id, attempts = attempt, error = error.as_deref().unwrap_or(""), "notification not delivered");
            }
            return;
        }
        shared.records.put(&delivery);
        let wait = backoff(attempt, config.backoff, config.max_backoff, rand::random::<f64>());
        tracing::debug!(delivery = %delivery.id, attempt, error = error.as_deref().unwrap_or(""), wait_ms = u64::try_from(wait.as_millis()).unwrap_or(0), "notification try failed; retrying");
        tokio::time::sleep(wait).await;
    }
}

/// One POST; the URL never appears in what is returned (it may be the credential).
async fn send(client: &reqwest::Client, url: &str, target: &NotifyTarget, delivery: &Delivery, body: Vec<u8>) -> Sent {
    let mut request = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header("X-Etcron-Event", delivery.event.as_str())
        .header("X-Etcron-Delivery", delivery.id.as_str());
    for (name, value) in target.all_headers() {
        match (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            (Ok(n), Ok(v)) => request = request.header(n, v),
            // The value is not repeated: it may be a credential.
            _ => return Sent::Failed(format!("invalid header {name}")),
        }
    }
    let mut response = match request.body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            let step = if e.is_connect() { "connecting failed" } else { "request failed" };
            return Sent::Failed(format!("{step}: {}", crate::tasks::http_client::error_chain(&e)));
        }
    };
    let status = response.status();
    if status.is_success() {
        return Sent::Delivered(status.as_u16());
    }
    let mut text = Vec::new();
    while text.len() < ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => text.extend_from_slice(&chunk),
            _ => break,
        }
    }
    text.truncate(ERROR_BODY);
    let body = String::from_utf8_lossy(&text).split_whitespace().collect::<Vec<_>>().join(" ");
    Sent::Refused { status: status.as_u16(), body }
}

/// The latest state of each delivery not yet written to MongoDB.
#[derive(Default)]
struct DeliveryLog {
    pending: Mutex<HashMap<String, Delivery>>,
    wake: tokio::sync::Notify,
}

impl DeliveryLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Delivery>> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `d` to be written; never waits. A newer state of a delivery replaces the older one.
    fn put(&self, d: &Delivery) {
        let mut pending = self.lock();
        if !pending.contains_key(&d.id) && pending.len() >= MAX_PENDING_RECORDS {
            drop(pending);
            NOTIFY_METRICS.records_dropped.inc();
            tracing::error!(
                delivery = %d.id, job = %d.job, state = d.state.as_str(),
                "NOTIFICATION RECORD LOST: MongoDB unreachable and {MAX_PENDING_RECORDS} delivery records already waiting"
            );
            return;
        }
        pending.insert(d.id.clone(), d.clone());
        drop(pending);
        self.wake.notify_one();
    }

    fn pending(&self) -> usize {
        self.lock().len()
    }

    /// Up to `n` deliveries to write, taken out.
    fn take(&self, n: usize) -> Vec<Delivery> {
        let mut pending = self.lock();
        let ids: Vec<String> = pending.keys().take(n).cloned().collect();
        ids.iter().filter_map(|id| pending.remove(id)).collect()
    }

    /// Puts back a batch that was not written, unless a newer state arrived meanwhile.
    fn put_back(&self, batch: Vec<Delivery>) {
        let mut pending = self.lock();
        for d in batch {
            pending.entry(d.id.clone()).or_insert(d);
        }
    }
}

/// Writes delivery records in batches; while MongoDB fails, keeps them and retries with backoff.
/// One writer, so the states of a delivery reach MongoDB in order.
async fn write_records(log: Arc<DeliveryLog>, store: MongoStore) {
    let mut delay = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let batch = log.take(RECORD_BATCH);
        if batch.is_empty() {
            log.wake.notified().await;
            continue;
        }
        match store.write_notifications(&batch).await {
            Ok(()) => delay.reset(),
            Err(e) => {
                tracing::warn!(error = %e, records = batch.len(), "writing notification records failed; retrying");
                log.put_back(batch);
                tokio::time::sleep(delay.next_delay()).await;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use etcron_model::keys::{ExecutionId, Tick};
    use etcron_model::record::TriggerKind;

    fn spec(json: &str) -> JobSpec {
        JobSpec::from_json(json.as_bytes()).unwrap()
    }

    fn record(status: Status, attempt: u32) -> ExecutionRecord {
        let id = ExecutionId { attempt, ..ExecutionId::new("nightly", Tick::Scheduled(1_700_000_000_000)) };
        ExecutionRecord {
            id,
            job: "nightly".into(),
            team: None,
            scheduled_at: rfc3339_ms(1_700_000_000_000),
            scheduled_ms: 1_700_000_000_000,
            claimed_at: None,
            started_at: Some(rfc3339_ms(1_700_000_000_002)),
            finished_at: Some(rfc3339_ms(1_700_000_001_502)),
            duration_ms: Some(1500),
            worker_id: "w1".into(),
            hostname: "h".into(),
            attempt,
            trigger: TriggerKind::Schedule,
            status,
            exit_code: (status == Status::Failed).then_some(1),
            signal: None,
            output: "out".into(),
            output_truncated: false,
            error: (status == Status::Failed).then(|| "exit code 1".to_owned()),
            reason: None,
            fencing_token: Some(7),
            parent: None,
            http_status: None,
            shard: None,
            params: etcron_model::record::RunParams::default(),
            jitter_ms: None,
            workflow: None,
            priority: None,
            pool: None,
            trace_id: None,
            reports: Default::default(),
        }
    }

    #[test]
    fn events_are_final_outcomes_only() {
        let retrying = spec(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"retries":{"max":2}}"#);
        assert_eq!(classify(&retrying, &record(Status::Failed, 1)), None, "attempt 2 follows");
        assert_eq!(classify(&retrying, &record(Status::TimedOut, 2)), None, "attempt 3 follows");
        assert_eq!(classify(&retrying, &record(Status::Failed, 3)), Some(NotifyEvent::Failure));
        assert_eq!(classify(&retrying, &record(Status::TimedOut, 3)), Some(NotifyEvent::Failure));
        assert_eq!(classify(&retrying, &record(Status::Succeeded, 2)), Some(NotifyEvent::Success));
        assert_eq!(classify(&retrying, &record(Status::Missed, 1)), Some(NotifyEvent::Missed));
        for quiet in [Status::Killed, Status::Skipped, Status::Running] {
            assert_eq!(classify(&retrying, &record(quiet, 1)), None, "{quiet:?}");
        }
        // Lost: rerun elsewhere (not final) unless mark_lost or the failover limit is reached.
        assert_eq!(classify(&retrying, &record(Status::Lost, 1)), None);
        let over = 2 + crate::rules::MAX_FAILOVERS + 1;
        assert_eq!(classify(&retrying, &record(Status::Lost, over)), Some(NotifyEvent::Failure));
        let mark = spec(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"on_worker_loss":"mark_lost"}"#);
        assert_eq!(classify(&mark, &record(Status::Lost, 1)), Some(NotifyEvent::Failure));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_within_its_upper_half() {
        let (base, cap) = (Duration::from_secs(1), Duration::from_secs(60));
        let full: Vec<u64> = (1..=8).map(|n| backoff(n, base, cap, 1.0).as_secs()).collect();
        assert_eq!(full, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(1, base, cap, 0.0), Duration::from_millis(500));
        assert_eq!(backoff(3, base, cap, 0.5), Duration::from_secs(3));
        assert_eq!(backoff(200, base, cap, 1.0), cap, "no overflow");
        for n in 1..10 {
            let b = backoff(n, base, cap, rand::random());
            let top = backoff(n, base, cap, 1.0);
            assert!(b >= top / 2 && b <= top, "{n}: {b:?}");
        }
    }

    #[test]
    fn the_json_payload_is_the_record_as_the_api_shows_it_with_the_link() {
        let r = record(Status::Failed, 1);
        let body =
            json_payload(NotifyEvent::Failure, &r, Some("https://cron.example"), "d-1", "2026-01-01T00:00:00.000Z");
        assert_eq!(body["event"], "failure");
        assert_eq!(body["job"], "nightly");
        assert_eq!(body["execution"], serde_json::to_value(&r).unwrap());
        assert_eq!(body["execution"]["id"], "nightly@1700000000000#1");
        assert_eq!(body["url"], "https://cron.example/#/execution/nightly%401700000000000%231");
        assert_eq!(body["delivery"], "d-1");
        assert_eq!(body["sent_at"], "2026-01-01T00:00:00.000Z");
        assert_eq!(json_payload(NotifyEvent::Failure, &r, None, "d", "t")["url"], Value::Null);
    }

    #[test]
    fn slack_text_says_what_happened_and_links_the_execution() {
        let link = "<https://cron.example/#/execution/nightly%401700000000000%231|view execution>";
        let failed = slack_payload(NotifyEvent::Failure, &record(Status::Failed, 1), Some("https://cron.example"));
        assert_eq!(failed["text"], format!(":x: etcron: job `nightly` failed on worker w1 (exit code 1) — {link}"));
        assert_eq!(failed.as_object().unwrap().len(), 1);
        let mut timed = record(Status::TimedOut, 1);
        timed.error = Some("timeout reached <&>".into());
        let text = slack_payload(NotifyEvent::Failure, &timed, None)["text"].as_str().unwrap().to_owned();
        assert_eq!(text, ":x: etcron: job `nightly` timed out on worker w1 (timeout reached &lt;&amp;&gt;)");
        let ok = slack_payload(NotifyEvent::Success, &record(Status::Succeeded, 1), None);
        assert_eq!(ok["text"], ":white_check_mark: etcron: job `nightly` succeeded on worker w1 in 1.5s");
        let back = slack_payload(NotifyEvent::Recovery, &record(Status::Succeeded, 1), None);
        assert!(back["text"].as_str().unwrap().contains("recovered"), "{back}");
        let mut missed = record(Status::Missed, 1);
        missed.reason = Some("not claimed within 5s: no live worker matches selector {zone=mars}".into());
        let text = slack_payload(NotifyEvent::Missed, &missed, None)["text"].as_str().unwrap().to_owned();
        assert!(
            text.starts_with(
                ":warning: etcron: job `nightly` missed its tick at 2023-11-14T22:13:20.000Z (not claimed"
            ),
            "{text}"
        );
    }

    #[test]
    fn an_alert_is_a_payload_without_a_record_and_links_its_execution() {
        let alert = Alert {
            event: NotifyEvent::Late,
            job: "nightly".into(),
            execution_id: Some("nightly@1700000000000#1".into()),
            occurrence: "nightly@1700000000000#1".into(),
            message: "late_start: execution nightly@1700000000000#1 started 1m 15s after its scheduled time".into(),
            threshold: "1m".into(),
            scheduled_at: Some(rfc3339_ms(1_700_000_000_000)),
        };
        let body = alert_json(&alert, Some("https://cron.example"), "d-1", "t");
        assert_eq!(body["event"], "late");
        assert_eq!(body["execution"], Value::Null);
        assert_eq!(body["alert"]["threshold"], "1m");
        assert_eq!(body["alert"]["execution_id"], "nightly@1700000000000#1");
        assert_eq!(body["url"], "https://cron.example/#/execution/nightly%401700000000000%231");
        let text = alert_slack(&alert, None)["text"].as_str().unwrap().to_owned();
        assert!(text.starts_with(":hourglass: etcron: job `nightly` late_start: execution"), "{text}");
        let stale = Alert { event: NotifyEvent::Stale, execution_id: None, ..alert };
        assert_eq!(alert_json(&stale, Some("https://cron.example"), "d", "t")["url"], Value::Null);
        assert!(alert_slack(&stale, Some("https://cron.example"))["text"].as_str().unwrap().starts_with(":zzz:"));
    }

    #[test]
    fn notifications_carry_the_end_of_long_output() {
        let mut r = record(Status::Failed, 1);
        r.output = format!("{}é{}", "a".repeat(OUTPUT_KEPT), "z".repeat(OUTPUT_KEPT - 1));
        let t = trimmed(&r);
        assert!(t.output.len() <= OUTPUT_KEPT && t.output_truncated);
        assert!(t.output.ends_with('z'));
        assert_eq!(trimmed(&record(Status::Failed, 1)), record(Status::Failed, 1));
    }

    #[test]
    fn settings_resolve_with_defaults_and_refuse_bad_values() {
        let c = NotifyConfig::resolve(NotifyArgs::default(), None).unwrap();
        assert_eq!(
            (c.max_attempts, c.backoff, c.timeout, c.queue),
            (5, Duration::from_secs(1), Duration::from_secs(10), 1000)
        );
        assert!(c.targets.is_empty() && c.ui_url.is_none());
        let file: NotifyFile = toml::from_str(
            "ui_url = \"https://cron.example/\"\nmax_attempts = 3\n[[targets]]\nurl = \"https://h/x\"\non = [\"failure\"]\nformat = \"slack\"\n",
        )
        .unwrap();
        let args = NotifyArgs { max_attempts: Some(2), ..NotifyArgs::default() };
        let c = NotifyConfig::resolve(args, Some(file)).unwrap();
        assert_eq!(c.ui_url.as_deref(), Some("https://cron.example"));
        assert_eq!(c.max_attempts, 2, "the flag wins over the file");
        assert_eq!(c.targets[0].format, NotifyFormat::Slack);
        for (toml_text, needle) in [
            ("max_attempts = 0", "notify.max_attempts"),
            ("queue = 0", "notify.queue"),
            ("timeout = \"1h\"", "notify.timeout"),
            ("backoff = \"2m\"", "notify.backoff"),
            ("ui_url = \"cron.example\"", "notify.ui_url"),
            ("[[targets]]\nurl = \"ftp://h\"", "notify.targets[0].url"),
            ("[[targets]]\nurl = \"https://h\"\non = [\"nope\"]", "unknown variant"),
            ("colour = 1", "colour"),
        ] {
            let err = match toml::from_str::<NotifyFile>(toml_text) {
                Ok(file) => format!("{:#}", NotifyConfig::resolve(NotifyArgs::default(), Some(file)).unwrap_err()),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(needle), "{toml_text}: {err}");
        }
    }

    #[test]
    fn the_commented_example_in_the_worker_config_is_valid() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/worker.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let example: String = text
            .lines()
            .skip_while(|l| *l != "# [notify]")
            .map(|l| l.strip_prefix('#').unwrap_or(l).trim_start())
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(example.contains("[[notify.targets]]"), "{example}");
        let mut table: toml::Table = toml::from_str(&example).unwrap();
        let file: NotifyFile = table.remove("notify").unwrap().try_into().unwrap();
        let c = NotifyConfig::resolve(NotifyArgs::default(), Some(file)).unwrap();
        assert_eq!(c.targets.len(), 2);
        assert_eq!(c.targets[0].shown_url(), "https://hooks.slack.com/…");
    }

    #[test]
    fn the_record_log_keeps_the_newest_state_and_is_bounded() {
        let log = DeliveryLog::default();
        let mut d = Delivery {
            id: "a@1#1/failure/0".into(),
            job: "a".into(),
            team: None,
            execution_id: "a@1#1".into(),
            event: NotifyEvent::Failure,
            target: "https://h/x".into(),
            target_name: None,
            default_target: false,
            format: NotifyFormat::Json,
            worker_id: "w".into(),
            state: DeliveryState::Pending,
            attempts: Vec::new(),
            created_at: rfc3339_ms(1),
            finished_at: None,
        };
        log.put(&d);
        let taken = log.take(10);
        d.state = DeliveryState::Delivered;
        log.put(&d);
        // The failed write of the older state does not replace the newer one.
        log.put_back(taken);
        assert_eq!(log.take(10)[0].state, DeliveryState::Delivered);
        for i in 0..MAX_PENDING_RECORDS + 5 {
            log.put(&Delivery { id: format!("x{i}"), ..d.clone() });
        }
        assert_eq!(log.pending(), MAX_PENDING_RECORDS);
        log.put(&Delivery { state: DeliveryState::Failed, ..Delivery { id: "x0".into(), ..d.clone() } });
        assert_eq!(log.pending(), MAX_PENDING_RECORDS, "an update of a waiting record is kept");
    }
}
