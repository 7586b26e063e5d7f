//! SLA alerts of a job (`alerts`): `late_start`, `max_duration`, `no_success_within` and
//! `on_output_match`, the rules that say when each is due, and the values workers keep in
//! etcd under `{ns}/alerts/{job}/` so that each occurrence is raised once in the cluster.
//!
//! An alert is a notification event (`late`, `long_running`, `stale`, `output_match`, see
//! `crate::notify`, `crate::spec::notify`) sent to the job's targets that ask for it. `late`, `long_running` and
//! `stale` are decided by a create-if-absent (or compare-and-set) transaction on their key, so
//! workers racing to raise the same occurrence raise it once; `output_match` follows the final
//! record, which one worker writes.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
use crate::spec::notify::NotifyEvent;
use crate::spec::{JobSpec, SpecError};
use crate::UnixMs;

/// Smallest and largest `late_start` and `max_duration`.
pub const ALERT_AFTER_RANGE: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(24 * 3600);
/// Smallest and largest `no_success_within`.
pub const NO_SUCCESS_RANGE: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(30 * 24 * 3600);
/// Longest `on_output_match` pattern.
pub const MAX_PATTERN_LEN: usize = 512;
/// Most memory a compiled `on_output_match` may take (the regex crate's size limit).
pub const PATTERN_SIZE_LIMIT: usize = 1 << 20;
/// How long etcd remembers that an execution's `late` or `long_running` was raised: longer
/// than either threshold can be, so a run is never alerted twice for one occurrence while it
/// can still be late or running (a tick queued for longer than this could be alerted again).
pub const ALERT_MEMORY: Duration = Duration::from_secs(25 * 3600);

/// `alerts` of a job spec. Every field is optional; an absent one raises nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alerts {
    /// `late`: a schedule tick's run has not started this long after its (jittered) time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_start: Option<HumanDuration>,
    /// `long_running`: an execution is still running this long after it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<HumanDuration>,
    /// `stale`: no execution of the job succeeded for this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_success_within: Option<HumanDuration>,
    /// `output_match`: a regular expression (Rust `regex` syntax) found in an execution's
    /// output (as kept in its record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_output_match: Option<String>,
}

impl Alerts {
    /// Checks every field; errors name it under `field` (`alerts.late_start`).
    pub fn validate(&self, field: &str) -> Result<(), SpecError> {
        let range = |name: &str, value: Option<HumanDuration>, range: &RangeInclusive<Duration>| match value {
            Some(v) if !range.contains(&v.0) => Err(SpecError::at(
                &format!("{field}.{name}"),
                format!(
                    "must be between {} and {} (leave it out for no alert)",
                    HumanDuration(*range.start()),
                    HumanDuration(*range.end())
                ),
            )),
            _ => Ok(()),
        };
        range("late_start", self.late_start, &ALERT_AFTER_RANGE)?;
        range("max_duration", self.max_duration, &ALERT_AFTER_RANGE)?;
        range("no_success_within", self.no_success_within, &NO_SUCCESS_RANGE)?;
        if let Some(pattern) = &self.on_output_match {
            output_regex(pattern).map_err(|why| SpecError::at(&format!("{field}.on_output_match"), why))?;
        }
        Ok(())
    }
}

/// Something a save allows but an operator should hear of: the field and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    pub field: String,
    pub message: String,
}

impl Alerts {
    /// Each alert set, with the field that sets it and the event it raises.
    fn set(&self) -> Vec<(&'static str, NotifyEvent)> {
        [
            (self.late_start.is_some(), NotifyEvent::Late),
            (self.max_duration.is_some(), NotifyEvent::LongRunning),
            (self.no_success_within.is_some(), NotifyEvent::Stale),
            (self.on_output_match.is_some(), NotifyEvent::OutputMatch),
        ]
        .into_iter()
        .filter(|(set, _)| *set)
        .filter_map(|(_, event)| event.alert_field().map(|f| (f, event)))
        .collect()
    }
}

/// The alerts of `spec` that no target would hear: the job's own `notify` when it has one,
/// else `defaults`, the events the live workers' default targets listen for (a worker sends a
/// job without `notify` to its own). Each would be raised and recorded `no_target`, sent
/// nowhere: the save goes through, with these warnings.
#[must_use]
pub fn unrouted(spec: &JobSpec, defaults: &[NotifyEvent]) -> Vec<Warning> {
    let Some(alerts) = &spec.alerts else { return Vec::new() };
    alerts
        .set()
        .into_iter()
        .filter_map(|(field, event)| {
            let name = event.as_str();
            let message = match &spec.notify {
                Some(targets) if targets.iter().any(|t| t.wants(event)) => return None,
                Some(_) => format!(
                    "raises {name}, which no target in notify listens for: add \"{name}\" to a target's `on` (until then each one is recorded no_target and sent nowhere)"
                ),
                None if defaults.contains(&event) => return None,
                None => format!(
                    "raises {name}; the job has no notify and no live worker's default target listens for {name}: add a notify target with \"{name}\" in its `on` (until then each one is recorded no_target and sent nowhere)"
                ),
            };
            Some(Warning { field: format!("alerts.{field}"), message })
        })
        .collect()
}

/// Compiles an `on_output_match` pattern, bounded in length and compiled size.
pub fn output_regex(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.is_empty() {
        return Err("is empty (leave it out for no output alert)".to_owned());
    }
    bounded_regex(pattern)
}

/// Compiles a regular expression a user wrote (an output alert's, a run parameter's), bounded
/// in length ([`MAX_PATTERN_LEN`]) and compiled size ([`PATTERN_SIZE_LIMIT`]).
pub fn bounded_regex(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!("is longer than {MAX_PATTERN_LEN} bytes"));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("is not a valid regular expression: {}", one_line(&e.to_string())))
}

/// The regex crate explains errors over several lines (with a caret under the pattern).
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// `{ns}/alerts/{job}/stale`: when the job's window of `no_success_within` started (its last
/// success's end, or when a worker first looked at a job that had none), and who raised
/// `stale` for that window. A success rewrites it; a worker raises `stale` by rewriting it
/// `raised` at the revision it read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleState {
    /// Unix ms the window started.
    pub base_ms: UnixMs,
    /// `base_ms` is a success's end (not the first look at the job).
    #[serde(default)]
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raised: Option<Raised>,
}

impl StaleState {
    /// When this window makes the job stale, given `window` and the last time this worker saw
    /// the job resumed (or enabled): a job is not stale for the time it was not scheduled.
    #[must_use]
    pub fn due_ms(&self, window: Duration, resumed_ms: Option<UnixMs>) -> UnixMs {
        let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        self.base_ms.max(resumed_ms.unwrap_or(i64::MIN)).saturating_add(window)
    }

    /// The occurrence a raise of this window names: `{job}@stale-{base_ms}`.
    #[must_use]
    pub fn occurrence(&self, job: &str) -> String {
        format!("{job}@stale-{}", self.base_ms)
    }
}

/// Reads a `stale` occurrence (`{job}@stale-{ms}`) written as [`StaleState::occurrence`]
/// writes it; `None` for anything else.
#[must_use]
pub fn parse_stale_occurrence(text: &str) -> Option<(String, UnixMs)> {
    let (job, ms) = text.split_once("@stale-")?;
    crate::keys::validate_job_name(job).ok()?;
    let canonical = !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) && (ms == "0" || !ms.starts_with('0'));
    let ms: UnixMs = ms.parse().ok().filter(|_| canonical)?;
    Some((job.to_owned(), ms))
}

/// The value of a raised alert's key: who raised it and when, so a worker whose transaction's
/// answer was lost can tell by reading it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Raised {
    pub worker_id: String,
    pub at_ms: UnixMs,
}

/// `{ns}/alerts/{job}/silence/{target}/{event}`: until when a target hears no more of an event
/// of the job (its `silence`), and the delivery that started the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Silence {
    pub until_ms: UnixMs,
    pub delivery: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_no_target_hears_is_warned_about_with_its_field() {
        let spec = |extra: serde_json::Value| {
            let mut v = serde_json::json!({"schedule": "@hourly", "task": {"kind": "shell", "command": "true"},
                "alerts": {"max_duration": "3s", "late_start": "1m"}});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            JobSpec::from_json(v.to_string().as_bytes()).unwrap()
        };
        // The usual choice: a target for failures only.
        let failures = spec(serde_json::json!({"notify": [{"url": "http://127.0.0.1:1/h", "on": ["failure"]}]}));
        let w = unrouted(&failures, &[NotifyEvent::LongRunning]);
        assert_eq!(
            w.iter().map(|w| w.field.as_str()).collect::<Vec<_>>(),
            ["alerts.late_start", "alerts.max_duration"]
        );
        assert!(w[1].message.starts_with("raises long_running, which no target in notify listens for"), "{w:?}");
        let heard =
            spec(serde_json::json!({"notify": [{"url": "http://127.0.0.1:1/h", "on": ["late", "long_running"]}]}));
        assert_eq!(unrouted(&heard, &[]), []);
        // Without notify, the live workers' default targets decide.
        let defaults = spec(serde_json::json!({}));
        let w = unrouted(&defaults, &[NotifyEvent::Late]);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].field, "alerts.max_duration");
        assert!(w[0].message.contains("no live worker's default target listens for long_running"), "{w:?}");
        assert_eq!(unrouted(&defaults, &[NotifyEvent::Late, NotifyEvent::LongRunning]), []);
    }

    fn alerts(json: &str) -> Alerts {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn fields_are_checked_and_named() {
        assert!(alerts(
            r#"{"late_start":"1m","max_duration":"10m","no_success_within":"2h","on_output_match":"ERROR|panic"}"#
        )
        .validate("alerts")
        .is_ok());
        assert!(Alerts::default().validate("alerts").is_ok());
        for (json, field) in [
            (r#"{"late_start":"0s"}"#, "alerts.late_start"),
            (r#"{"late_start":"25h"}"#, "alerts.late_start"),
            (r#"{"max_duration":"500ms"}"#, "alerts.max_duration"),
            (r#"{"no_success_within":"31d"}"#, "alerts.no_success_within"),
            (r#"{"on_output_match":"("}"#, "alerts.on_output_match"),
            (r#"{"on_output_match":""}"#, "alerts.on_output_match"),
        ] {
            assert_eq!(alerts(json).validate("alerts").unwrap_err().field.as_deref(), Some(field), "{json}");
        }
        let long = Alerts { on_output_match: Some("a".repeat(MAX_PATTERN_LEN + 1)), ..Alerts::default() };
        assert!(long.validate("alerts").unwrap_err().message.contains("longer than"));
        // A pattern that compiles into too much memory is refused, not built.
        let huge = Alerts { on_output_match: Some(r"\w{1000}\w{1000}".to_owned()), ..Alerts::default() };
        assert_eq!(huge.validate("alerts").unwrap_err().field.as_deref(), Some("alerts.on_output_match"));
        let bad = alerts(r#"{"on_output_match":"a(b"}"#).validate("alerts").unwrap_err();
        assert!(!bad.message.contains('\n'), "{}", bad.message);
        assert!(serde_json::from_str::<Alerts>(r#"{"late":"1m"}"#).is_err(), "unknown fields are refused");
    }

    #[test]
    fn a_window_runs_from_its_base_or_the_resume() {
        let s = StaleState { base_ms: 1_000, success: true, raised: None };
        let hour = Duration::from_secs(3600);
        assert_eq!(s.due_ms(hour, None), 3_601_000);
        assert_eq!(s.due_ms(hour, Some(500)), 3_601_000, "a resume before the base changes nothing");
        assert_eq!(s.due_ms(hour, Some(10_000)), 3_610_000);
        assert_eq!(s.occurrence("nightly"), "nightly@stale-1000");
        assert_eq!(parse_stale_occurrence("nightly@stale-1000"), Some(("nightly".to_owned(), 1000)));
        for bad in ["nightly@stale-", "nightly@stale-01", "Bad@stale-1", "nightly@stale-1x", "nightly@1000#1"] {
            assert_eq!(parse_stale_occurrence(bad), None, "{bad}");
        }
        let read: StaleState = serde_json::from_str(r#"{"base_ms":5}"#).unwrap();
        assert_eq!(read, StaleState { base_ms: 5, success: false, raised: None });
    }
}
