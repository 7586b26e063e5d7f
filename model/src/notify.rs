//! Webhook notifications: the `notify` targets of a job spec (and of a worker's default), their
//! validation and secrets, the events, the job health kept in etcd for `recovery`, and the
//! delivery record stored in MongoDB (collection `notifications`).
//!
//! A target is `{"name", "url" | "secret_url", "on", "format", "headers", "secret_headers"}`.
//! `secret_url` is for webhooks whose URL is itself the credential (Slack, Mattermost, Teams):
//! like `secret_headers`, the API shows its value as `null`, and a `null` sent back keeps the
//! stored value. Records and logs show a target by [`NotifyTarget::shown_url`], which never
//! contains a secret.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::headers::Secrets;
use crate::spec_error::SpecError;
use crate::UnixMs;

/// Most targets per job (and in a worker's default).
pub const MAX_TARGETS: usize = 10;
/// Most headers per target, plain and secret together.
pub const MAX_TARGET_HEADERS: usize = 16;
/// Longest target URL.
pub const MAX_URL_LEN: usize = 2048;
pub use crate::headers::{MAX_HEADER_NAME_LEN, MAX_HEADER_VALUE_LEN};
/// Longest target name.
pub const MAX_TARGET_NAME_LEN: usize = 64;
/// Shortest and longest `silence` of a target.
pub const SILENCE_RANGE: std::ops::RangeInclusive<std::time::Duration> =
    std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(7 * 24 * 3600);
/// Headers etcron sets on every delivery besides those no request may set
/// (`crate::headers::check_name`: `Host`, `Content-Length`, `Transfer-Encoding`, `X-Etcron-*`).
pub const DELIVERY_HEADERS: [&str; 2] = ["content-type", "user-agent"];

/// What a target can be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyEvent {
    /// A final failure: `failed` or `timed_out` with no retry left, or `lost` not rerun.
    Failure,
    /// A `succeeded` execution.
    Success,
    /// A tick recorded `missed`.
    Missed,
    /// A success whose job's previous final outcome was a failure.
    Recovery,
    /// A final failure that paused its job (`pause_after_failures`).
    Paused,
    /// A tick's run started (or has not started) later than `alerts.late_start`.
    Late,
    /// An execution still running `alerts.max_duration` after it started.
    LongRunning,
    /// No success of the job within `alerts.no_success_within`.
    Stale,
    /// An execution's output matched `alerts.on_output_match`.
    OutputMatch,
}

impl NotifyEvent {
    pub const ALL: [NotifyEvent; 9] = [
        NotifyEvent::Failure,
        NotifyEvent::Success,
        NotifyEvent::Missed,
        NotifyEvent::Recovery,
        NotifyEvent::Paused,
        NotifyEvent::Late,
        NotifyEvent::LongRunning,
        NotifyEvent::Stale,
        NotifyEvent::OutputMatch,
    ];

    /// The name in specs, payloads, headers and records.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::Failure => "failure",
            NotifyEvent::Success => "success",
            NotifyEvent::Missed => "missed",
            NotifyEvent::Recovery => "recovery",
            NotifyEvent::Paused => "paused",
            NotifyEvent::Late => "late",
            NotifyEvent::LongRunning => "long_running",
            NotifyEvent::Stale => "stale",
            NotifyEvent::OutputMatch => "output_match",
        }
    }
}

impl std::str::FromStr for NotifyEvent {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| format!("unknown event {s:?}; one of {}", Self::ALL.map(NotifyEvent::as_str).join(", ")))
    }
}

/// The body of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    /// `{"event", "job", "execution", "url", "delivery", "sent_at"}`.
    #[default]
    Json,
    /// `{"text": ...}` for Slack and Mattermost incoming webhooks.
    Slack,
}

impl NotifyFormat {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyFormat::Json => "json",
            NotifyFormat::Slack => "slack",
        }
    }
}

/// One webhook of a job's `notify` list (or of a worker's `[[notify.targets]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyTarget {
    /// Names the target in records; also how a `null` secret finds its stored value when the
    /// list is edited (unnamed targets are matched by position).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where to POST, shown by the API as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Where to POST when the URL is the credential: the API shows `null`, and a `null` in a
    /// PUT keeps the stored value. Give `url` or `secret_url`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "given")]
    pub secret_url: Option<Option<String>>,
    /// Events sent to this target.
    #[serde(default = "default_events")]
    pub on: Vec<NotifyEvent>,
    #[serde(default)]
    pub format: NotifyFormat,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values the API never shows (e.g. `Authorization`), as `task.secret_headers`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: Secrets,
    /// After a delivery of an event of a job, the same event of that job is not sent to this
    /// target again for this long (it is recorded `silenced`): a flapping job pages once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence: Option<crate::duration::HumanDuration>,
}

/// `"secret_url": null` is "keep the stored value", which is not the same as leaving it out.
fn given<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A target that names no events is sent failures, recoveries, pauses and every SLA alert
/// (which only jobs with `alerts` raise).
fn default_events() -> Vec<NotifyEvent> {
    NotifyEvent::ALL.into_iter().filter(|e| !matches!(e, NotifyEvent::Success | NotifyEvent::Missed)).collect()
}

impl NotifyTarget {
    /// Whether this target is sent `event`.
    #[must_use]
    pub fn wants(&self, event: NotifyEvent) -> bool {
        self.on.contains(&event)
    }

    /// The URL to send to; `None` while a secret URL is withheld.
    #[must_use]
    pub fn endpoint(&self) -> Option<&str> {
        self.url.as_deref().or(self.secret_url.as_ref().and_then(Option::as_deref))
    }

    /// The target as records and logs show it: the `url` without a user or password, or only
    /// the scheme and host of a `secret_url` (`https://hooks.slack.com/…`).
    #[must_use]
    pub fn shown_url(&self) -> String {
        match (&self.url, &self.secret_url) {
            (Some(url), _) => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
                let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                let host = rest[..end].rsplit_once('@').map_or(&rest[..end], |(_, h)| h);
                format!("{scheme}://{host}{}", &rest[end..])
            }
            (None, Some(Some(url))) => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
                let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                let host = rest[..end].rsplit_once('@').map_or(&rest[..end], |(_, h)| h);
                format!("{scheme}://{host}/…")
            }
            _ => "(secret URL)".to_owned(),
        }
    }

    /// The target as the API shows it: every secret value withheld (`null`).
    #[must_use]
    pub fn redacted(&self) -> Self {
        let mut t = self.clone();
        if t.secret_url.is_some() {
            t.secret_url = Some(None);
        }
        t.url = t.url.as_deref().map(crate::headers::shown_url);
        t.secret_headers.values_mut().for_each(|v| *v = None);
        t
    }

    /// Whether a secret value is withheld (`null`).
    #[must_use]
    pub fn withholds_secrets(&self) -> bool {
        matches!(self.secret_url, Some(None)) || self.secret_headers.values().any(Option::is_none)
    }

    /// Every header to send, secret values included (withheld ones left out).
    pub fn all_headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(self.secret_headers.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_deref()?))))
    }
}

/// Fills each withheld (`null`) secret of `targets` from `stored`, the list being replaced: a
/// named target takes the secrets of the stored target of the same name, an unnamed one those
/// of the unnamed stored target at the same position. Errors name the first secret left
/// without a value (`notify[1].secret_url`).
/// Fills withheld secrets of `targets` from `stored` (see `JobSpec::keep_secrets`); `Err` names
/// the field that cannot be kept, and why when it is more than "nothing stored".
pub fn keep_secrets(
    field: &str,
    targets: &mut [NotifyTarget],
    stored: &[NotifyTarget],
) -> Result<(), (String, Option<String>)> {
    for (i, target) in targets.iter_mut().enumerate() {
        let here = format!("{field}[{i}]");
        let source = match &target.name {
            Some(name) => stored.iter().find(|s| s.name.as_ref() == Some(name)),
            None => stored.get(i).filter(|s| s.name.is_none()),
        };
        let stored_url = source.and_then(|s| s.url.as_deref());
        if let Some(url) = &mut target.url {
            *url =
                crate::headers::keep_url_password(url, stored_url).map_err(|why| (format!("{here}.url"), Some(why)))?;
        }
        if !target.withholds_secrets() {
            continue;
        }
        let moved = match (&target.url, stored_url) {
            (Some(new), Some(old)) => crate::headers::destination_changed(new, old),
            _ => None,
        };
        if matches!(target.secret_url, Some(None)) {
            target.secret_url = Some(source.and_then(|s| s.secret_url.clone().flatten()));
            if matches!(target.secret_url, Some(None)) {
                return Err((format!("{here}.secret_url"), None));
            }
        }
        for (name, value) in &mut target.secret_headers {
            if value.is_none() {
                if let Some(why) = &moved {
                    return Err((format!("{here}.secret_headers.{name}"), Some(why.clone())));
                }
                *value = source.and_then(|s| s.secret_headers.get(name).cloned().flatten());
                if value.is_none() {
                    return Err((format!("{here}.secret_headers.{name}"), None));
                }
            }
        }
    }
    Ok(())
}

/// Checks a list of targets; errors name the field under `field` (`notify[0].on[1]`).
pub fn validate_targets(field: &str, targets: &[NotifyTarget]) -> Result<(), SpecError> {
    if targets.len() > MAX_TARGETS {
        return Err(SpecError::at(field, format!("at most {MAX_TARGETS} targets")));
    }
    for (i, t) in targets.iter().enumerate() {
        let here = format!("{field}[{i}]");
        if let Some(name) = &t.name {
            if !name_ok(name) {
                return Err(SpecError::at(
                    &format!("{here}.name"),
                    format!(
                        "must be 1..{MAX_TARGET_NAME_LEN} lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
                    ),
                ));
            }
            if targets[..i].iter().any(|o| o.name.as_ref() == Some(name)) {
                return Err(SpecError::at(&format!("{here}.name"), "another target has this name"));
            }
        }
        match (&t.url, &t.secret_url) {
            (Some(_), Some(_)) => {
                return Err(SpecError::at(&format!("{here}.secret_url"), "give url or secret_url, not both"))
            }
            (None, None) => {
                return Err(SpecError::at(&here, "needs url (shown by the API) or secret_url (withheld by the API)"))
            }
            (Some(url), None) => validate_url(&format!("{here}.url"), url)?,
            (None, Some(Some(url))) => validate_url(&format!("{here}.secret_url"), url)?,
            (None, Some(None)) => {}
        }
        if t.on.is_empty() {
            return Err(SpecError::at(
                &format!("{here}.on"),
                format!(
                    "name at least one event ({}); for no notifications give notify: []",
                    NotifyEvent::ALL.map(NotifyEvent::as_str).join(", ")
                ),
            ));
        }
        if t.silence.is_some_and(|d| !SILENCE_RANGE.contains(&d.0)) {
            return Err(SpecError::at(
                &format!("{here}.silence"),
                format!(
                    "must be between {} and {} (leave it out to send every notification)",
                    crate::duration::HumanDuration(*SILENCE_RANGE.start()),
                    crate::duration::HumanDuration(*SILENCE_RANGE.end())
                ),
            ));
        }
        for (j, e) in t.on.iter().enumerate() {
            if t.on[..j].contains(e) {
                return Err(SpecError::at(&format!("{here}.on[{j}]"), format!("{} is listed twice", e.as_str())));
            }
        }
        if t.headers.len() + t.secret_headers.len() > MAX_TARGET_HEADERS {
            return Err(SpecError::at(
                &format!("{here}.headers"),
                format!("at most {MAX_TARGET_HEADERS} headers, plain and secret together"),
            ));
        }
        let headers = t.headers.iter().map(|(k, v)| ("headers", k, Some(v.as_str())));
        let secret = t.secret_headers.iter().map(|(k, v)| ("secret_headers", k, v.as_deref()));
        for (kind, name, value) in headers.chain(secret) {
            let at = format!("{here}.{kind}.{name}");
            crate::headers::check_name(name, &DELIVERY_HEADERS).map_err(|m| SpecError::at(&at, m))?;
            if let Some(value) = value {
                crate::headers::check_value(value).map_err(|m| SpecError::at(&at, m))?;
            }
        }
        if let Some(k) = t.secret_headers.keys().find(|k| t.headers.keys().any(|h| h.eq_ignore_ascii_case(k))) {
            return Err(SpecError::at(
                &format!("{here}.secret_headers.{k}"),
                "is also in headers; give each header once",
            ));
        }
    }
    Ok(())
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TARGET_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// An absolute `http://` or `https://` URL with a host, without whitespace or control characters
/// (`crate::headers::check_url`, the rule of HTTP task URLs too).
pub fn validate_url(field: &str, url: &str) -> Result<(), SpecError> {
    crate::headers::check_url(url, MAX_URL_LEN).map_err(|m| SpecError::at(field, m))
}

/// `{ns}/health/{job}`: whether the job's last final outcome was a failure, and how many final
/// failures came in a row. Kept only for jobs with a target that asks for `recovery` or
/// `paused`, or with `pause_after_failures`; workers move it with a compare-and-set on its mod
/// revision (or in the transaction that closes the claim), so of two workers finishing at once
/// exactly one makes each change: one sends the `recovery`, one pauses the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHealth {
    pub failing: bool,
    /// The execution whose outcome was recorded last.
    pub execution_id: String,
    /// When the latest recorded outcome finished: an older one processed late does not undo it.
    pub finished_ms: UnixMs,
    /// Final failures in a row; 0 when ok.
    #[serde(default)]
    pub failures: u32,
    /// The success that ended the last run of failures (the job's last recovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_by: Option<String>,
    /// The executions recorded lately, newest last (at most [`RECENT_OUTCOMES`]): an outcome
    /// recorded again (by the notifier after the close, or after a lost answer while others
    /// wrote) is not counted twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<String>,
}

/// Outcomes a health value remembers.
pub const RECENT_OUTCOMES: usize = 16;

/// What recording one final outcome does to a job's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthStep {
    /// This execution's outcome is recorded already; `recovered` says whether it was the
    /// job's recovery.
    Recorded { recovered: bool },
    /// Nothing to write: a success while ok, or an outcome older than a change the current
    /// state records.
    Unchanged,
    /// The state to write over the current one.
    Write(JobHealth),
}

impl JobHealth {
    /// The step from `current` (none: never recorded, or unreadable) for an outcome of
    /// `execution_id` finished at `finished_ms`, `failing` for a final failure. Failures count
    /// in the order they are recorded; a failure or success older than the current state's
    /// latest outcome does not flip it.
    #[must_use]
    pub fn step(current: Option<&JobHealth>, failing: bool, execution_id: &str, finished_ms: UnixMs) -> HealthStep {
        if let Some(c) =
            current.filter(|c| c.execution_id == execution_id || c.recent.iter().any(|r| r == execution_id))
        {
            return HealthStep::Recorded { recovered: c.recovered_by.as_deref() == Some(execution_id) };
        }
        let was_failing = current.is_some_and(|c| c.failing);
        let older = current.is_some_and(|c| c.finished_ms > finished_ms);
        if (!failing && !was_failing) || (failing != was_failing && older) {
            return HealthStep::Unchanged;
        }
        let mut recent: Vec<String> = current.map(|c| c.recent.clone()).unwrap_or_default();
        recent.push(execution_id.to_owned());
        let excess = recent.len().saturating_sub(RECENT_OUTCOMES);
        recent.drain(..excess);
        let before = current.filter(|c| c.failing).map_or(0, |c| c.failures.max(1));
        let recovered_by =
            if failing { current.and_then(|c| c.recovered_by.clone()) } else { Some(execution_id.to_owned()) };
        HealthStep::Write(JobHealth {
            failing,
            execution_id: execution_id.to_owned(),
            finished_ms: current.map_or(finished_ms, |c| c.finished_ms.max(finished_ms)),
            failures: if failing { before.saturating_add(1) } else { 0 },
            recovered_by,
            recent,
        })
    }

    /// True when this state pauses a job with `pause_after_failures: after`: every `after`-th
    /// failure in a row (so a job resumed while still failing pauses again `after` failures
    /// later).
    #[must_use]
    pub fn pauses(&self, after: Option<u32>) -> bool {
        self.failing && after.is_some_and(|n| n > 0 && self.failures > 0 && self.failures.is_multiple_of(n))
    }
}

/// How a delivery ended, or that it is still being tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Failed,
    /// Not sent: the target's `silence` window for this event of the job was open.
    Silenced,
}

impl DeliveryState {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Silenced => "silenced",
        }
    }
}

/// One try to deliver a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// RFC 3339 (ms), when the request was sent.
    pub at: String,
    pub duration_ms: u64,
    /// The answer's status, when there was one.
    pub http_status: Option<u16>,
    /// Why the attempt failed (status and start of the body, connection error, timeout).
    pub error: Option<String>,
}

/// One notification to one target (MongoDB collection `notifications`, `_id` = `id`), with
/// every attempt to deliver it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// `{execution_id}/{event}/{target}`: stable across retries (`X-Etcron-Delivery`), so a
    /// receiver can drop repeats. `{target}` is the target's position in the job's list, or
    /// `default-{n}` for a worker's default target.
    pub id: String,
    pub job: String,
    /// The job's `team` when the delivery was made (none for jobs without a team, and for
    /// deliveries recorded before teams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The execution the event is about; for `stale`, which is about none, the occurrence
    /// `{job}@stale-{window start, Unix ms}`.
    pub execution_id: String,
    pub event: NotifyEvent,
    /// The target as [`NotifyTarget::shown_url`] shows it (no secret).
    pub target: String,
    pub target_name: Option<String>,
    /// Sent to a worker's default target (the job has no `notify`).
    pub default_target: bool,
    pub format: NotifyFormat,
    pub worker_id: String,
    pub state: DeliveryState,
    pub attempts: Vec<Attempt>,
    /// RFC 3339 (ms).
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// The delivery id of `event` for `execution_id` to the target named by `target_ref`.
#[must_use]
pub fn delivery_id(execution_id: &str, event: NotifyEvent, target_ref: &str) -> String {
    format!("{execution_id}/{}/{target_ref}", event.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(json: &str) -> Vec<NotifyTarget> {
        serde_json::from_str(json).unwrap()
    }

    fn error_field(json: &str) -> Option<String> {
        validate_targets("notify", &targets(json)).unwrap_err().field
    }

    #[test]
    fn defaults_fill_events_and_format() {
        let t = targets(r#"[{"url":"https://h/x"}]"#);
        assert_eq!(t[0].on[..3], [NotifyEvent::Failure, NotifyEvent::Recovery, NotifyEvent::Paused]);
        assert!(t[0].wants(NotifyEvent::Stale) && !t[0].wants(NotifyEvent::Success));
        assert_eq!(t[0].format, NotifyFormat::Json);
        assert!(validate_targets("notify", &t).is_ok());
        assert_eq!(t[0].endpoint(), Some("https://h/x"));
        // Left out and `null` are different things for a secret URL.
        assert_eq!(t[0].secret_url, None);
        let kept = targets(r#"[{"secret_url":null}]"#);
        assert_eq!(kept[0].secret_url, Some(None));
        assert!(kept[0].withholds_secrets());
    }

    #[test]
    fn refusals_name_the_field() {
        for (json, field) in [
            (r#"[{"url":"ftp://h/x"}]"#, "notify[0].url"),
            (r#"[{"url":"https:///x"}]"#, "notify[0].url"),
            (r#"[{"url":"https://h/ x"}]"#, "notify[0].url"),
            (r#"[{"url":"https://h/x"},{"secret_url":"notaurl"}]"#, "notify[1].secret_url"),
            (r#"[{"url":"https://h/x","secret_url":"https://h/y"}]"#, "notify[0].secret_url"),
            (r#"[{"on":["failure"]}]"#, "notify[0]"),
            (r#"[{"url":"https://h/x","on":[]}]"#, "notify[0].on"),
            (r#"[{"url":"https://h/x","on":["failure","failure"]}]"#, "notify[0].on[1]"),
            (r#"[{"url":"https://h/x","headers":{"bad name":"x"}}]"#, "notify[0].headers.bad name"),
            (r#"[{"url":"https://h/x","headers":{"X-Etcron-Event":"x"}}]"#, "notify[0].headers.X-Etcron-Event"),
            (r#"[{"url":"https://h/x","headers":{"Content-Type":"x"}}]"#, "notify[0].headers.Content-Type"),
            (r#"[{"url":"https://h/x","headers":{"A":"x\ny"}}]"#, "notify[0].headers.A"),
            (r#"[{"url":"https://h/x","headers":{"a":"1"},"secret_headers":{"A":"2"}}]"#, "notify[0].secret_headers.A"),
            (r#"[{"url":"https://h/x","name":"Bad"}]"#, "notify[0].name"),
            (r#"[{"url":"https://h/x","silence":"0s"}]"#, "notify[0].silence"),
            (r#"[{"url":"https://h/x","silence":"8d"}]"#, "notify[0].silence"),
            (r#"[{"url":"https://h/x","name":"a"},{"url":"https://h/y","name":"a"}]"#, "notify[1].name"),
        ] {
            assert_eq!(error_field(json).as_deref(), Some(field), "{json}");
        }
        let many = format!("[{}]", [r#"{"url":"https://h/x"}"#; MAX_TARGETS + 1].join(","));
        assert_eq!(error_field(&many).as_deref(), Some("notify"));
        let headers: BTreeMap<String, String> =
            (0..=MAX_TARGET_HEADERS).map(|i| (format!("H{i}"), "v".into())).collect();
        let t = NotifyTarget { headers, ..targets(r#"[{"url":"https://h/x"}]"#).remove(0) };
        assert_eq!(validate_targets("notify", &[t]).unwrap_err().field.as_deref(), Some("notify[0].headers"));
        // Unknown events and fields are refused by serde, at their path.
        assert!(serde_json::from_str::<Vec<NotifyTarget>>(r#"[{"url":"https://h/x","on":["boom"]}]"#).is_err());
        assert!(serde_json::from_str::<Vec<NotifyTarget>>(r#"[{"url":"https://h/x","fmt":"json"}]"#).is_err());
    }

    #[test]
    fn secrets_are_withheld_shown_without_credentials_and_kept_by_name_or_position() {
        let stored = targets(
            r#"[{"name":"ops","secret_url":"https://hooks.slack.com/services/T/B/XYZ","format":"slack"},
                {"url":"https://u:pw@alerts.example.com/hook?team=a","secret_headers":{"Authorization":"Bearer t"}}]"#,
        );
        assert_eq!(stored[0].shown_url(), "https://hooks.slack.com/…");
        assert_eq!(stored[1].shown_url(), "https://alerts.example.com/hook?team=a");
        let shown: Vec<NotifyTarget> = stored.iter().map(NotifyTarget::redacted).collect();
        let text = serde_json::to_string(&shown).unwrap();
        assert!(!text.contains("XYZ") && !text.contains("Bearer"), "{text}");
        assert!(text.contains(r#""secret_url":null"#), "{text}");
        // What was shown, sent back, gets the stored secrets.
        let mut again: Vec<NotifyTarget> = serde_json::from_str(&text).unwrap();
        keep_secrets("notify", &mut again, &stored).unwrap();
        assert_eq!(again, stored);
        // Named targets keep theirs when the list is reordered.
        let mut reordered = vec![shown[1].clone(), shown[0].clone()];
        let err = keep_secrets("notify", &mut reordered, &stored).unwrap_err();
        // (its URL's shown password has no stored URL at that position to come from either)
        assert_eq!(err.0, "notify[0].url", "an unnamed target is matched by position");
        let mut named_only = vec![shown[0].clone()];
        keep_secrets("notify", &mut named_only, &stored[1..]).unwrap_err();
        let mut moved = vec![targets(r#"[{"url":"https://x/y"}]"#).remove(0), shown[0].clone()];
        keep_secrets("notify", &mut moved, &stored).unwrap();
        assert_eq!(moved[1], stored[0]);
        // Nothing stored: refused, naming the entry.
        let mut fresh = shown.clone();
        assert_eq!(keep_secrets("notify", &mut fresh, &[]).unwrap_err().0, "notify[0].secret_url");
    }

    #[test]
    fn events_parse_and_print_alike() {
        for e in NotifyEvent::ALL {
            assert_eq!(e.as_str().parse::<NotifyEvent>(), Ok(e));
            assert_eq!(serde_json::to_value(e).unwrap(), e.as_str());
        }
        assert!("killed".parse::<NotifyEvent>().unwrap_err().contains("long_running"));
        assert_eq!(delivery_id("a@1#1", NotifyEvent::Failure, "0"), "a@1#1/failure/0");
    }
}

#[cfg(test)]
mod health_tests {
    use super::*;

    fn written(step: HealthStep) -> JobHealth {
        match step {
            HealthStep::Write(h) => h,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn failures_count_up_and_a_success_recovers() {
        let first = written(JobHealth::step(None, true, "j@1#1", 10));
        assert_eq!((first.failing, first.failures, first.recovered_by.as_deref()), (true, 1, None));
        let second = written(JobHealth::step(Some(&first), true, "j@2#1", 20));
        assert_eq!(second.failures, 2);
        let ok = written(JobHealth::step(Some(&second), false, "j@3#1", 30));
        assert_eq!((ok.failing, ok.failures, ok.recovered_by.as_deref()), (false, 0, Some("j@3#1")));
        assert_eq!(JobHealth::step(Some(&ok), false, "j@4#1", 40), HealthStep::Unchanged, "ok stays ok unwritten");
        assert_eq!(JobHealth::step(None, false, "j@4#1", 40), HealthStep::Unchanged);
        let again = written(JobHealth::step(Some(&ok), true, "j@5#1", 50));
        assert_eq!(again.failures, 1, "a success ends the run of failures");
        // A state written before the count existed reads as one failure.
        let old: JobHealth =
            serde_json::from_str(r#"{"failing":true,"execution_id":"j@0#1","finished_ms":1}"#).unwrap();
        assert_eq!(written(JobHealth::step(Some(&old), true, "j@1#1", 2)).failures, 2);
    }

    #[test]
    fn an_outcome_is_recorded_once_and_late_ones_do_not_flip_the_state() {
        let a = written(JobHealth::step(None, true, "j@1#1", 10));
        let b = written(JobHealth::step(Some(&a), true, "j@2#1", 20));
        // Recorded again after another one was: still not counted twice.
        assert_eq!(JobHealth::step(Some(&b), true, "j@1#1", 10), HealthStep::Recorded { recovered: false });
        let ok = written(JobHealth::step(Some(&b), false, "j@3#1", 30));
        let c = written(JobHealth::step(Some(&ok), true, "j@4#1", 40));
        assert_eq!(JobHealth::step(Some(&c), false, "j@3#1", 30), HealthStep::Recorded { recovered: true });
        // A failure that finished before the recovery, recorded late, does not undo it; a
        // success older than the latest failure does not end the run of failures.
        assert_eq!(JobHealth::step(Some(&ok), true, "j@0#2", 25), HealthStep::Unchanged);
        assert_eq!(JobHealth::step(Some(&c), false, "j@0#3", 35), HealthStep::Unchanged);
        // A failure finished earlier but recorded later, during failures, counts.
        let late = written(JobHealth::step(Some(&c), true, "j@0#4", 35));
        assert_eq!((late.failures, late.finished_ms), (2, 40));
        // The memory of recorded outcomes is bounded.
        let mut h = late;
        for k in 0..40 {
            h = written(JobHealth::step(Some(&h), true, &format!("j@{k}#9"), 100 + k));
        }
        assert_eq!(h.recent.len(), RECENT_OUTCOMES);
        assert_eq!(h.recent.last().map(String::as_str), Some("j@39#9"));
    }

    #[test]
    fn every_nth_failure_in_a_row_pauses() {
        let at = |failures| JobHealth {
            failing: true,
            execution_id: "x".into(),
            finished_ms: 0,
            failures,
            recovered_by: None,
            recent: Vec::new(),
        };
        assert!(!at(2).pauses(Some(3)));
        assert!(at(3).pauses(Some(3)));
        assert!(!at(4).pauses(Some(3)), "resumed while failing: not at once");
        assert!(at(6).pauses(Some(3)));
        assert!(!at(3).pauses(None));
        assert!(!JobHealth { failing: false, ..at(0) }.pauses(Some(1)));
        assert!(at(1).pauses(Some(1)));
    }
}
