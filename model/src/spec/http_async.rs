//! Asynchronous HTTP tasks (`task.async`): the endpoint answers `202 Accepted` with a status
//! URL, which the worker then polls until the status document says the work is done or failed;
//! a kill or a timeout sends a cancel request there. This module holds the spec, its
//! validation and the reading of answers (where the status URL is, what a status document
//! says); the worker does the requests.
//!
//! A status document is JSON; by default its fields are
//!
//! ```text
//! {"state": "running", "percent": 40, "message": "copying table b", "checkpoint": {…}, "output": "…"}
//! ```
//!
//! and `fields` names other places for them (JSON pointers such as `/status/phase`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::duration::HumanDuration;
use crate::progress::Report;
use crate::spec::SpecError;

/// Shortest poll interval.
pub const MIN_INTERVAL: HumanDuration = HumanDuration::from_millis(100);
/// Longest poll interval.
pub const MAX_INTERVAL: HumanDuration = HumanDuration::from_secs(3600);
/// Poll interval when the spec names none.
pub const DEFAULT_INTERVAL: HumanDuration = HumanDuration::from_secs(5);
/// Longest polling time a spec may ask for.
pub const MAX_POLL_TIMEOUT: HumanDuration = HumanDuration::from_secs(7 * 24 * 3600);
/// Polling time when neither `async.timeout` nor the job's `timeout` says.
pub const DEFAULT_POLL_TIMEOUT: HumanDuration = HumanDuration::from_secs(24 * 3600);
/// Most values in `done` or `failed`.
pub const MAX_STATES: usize = 16;
/// Longest state value, JSON pointer or cancel URL.
pub const MAX_TEXT: usize = 2048;
/// Polls in a row that may fail (no answer, 5xx, 429) before the run fails.
pub const MAX_POLL_ERRORS: u32 = 5;
/// Largest status document read.
pub const MAX_STATUS_BYTES: usize = 256 * 1024;

/// `task.async` of an HTTP task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsyncPoll {
    /// Where a 202's status URL is: `location` (its `Location` header) or a JSON pointer into
    /// its body (`/links/status`). A relative URL is resolved against the task's URL.
    #[serde(default = "default_status_url")]
    pub status_url: String,
    /// Time between polls (100ms..1h).
    #[serde(default = "default_interval")]
    pub interval: HumanDuration,
    /// How long polling may last from the 202 (1s..7d); the job's `timeout`, if shorter, still
    /// bounds the whole run. Neither set: 24h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Where the status document's fields are.
    #[serde(default)]
    pub fields: StatusFields,
    /// States that mean the work succeeded.
    #[serde(default = "default_done")]
    pub done: Vec<String>,
    /// States that mean it failed. Any other state means it is still going.
    #[serde(default = "default_failed")]
    pub failed: Vec<String>,
    /// The request a kill or timeout sends; a `DELETE` of the status URL when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
}

/// JSON pointers to the status document's fields; only `state` must be present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusFields {
    pub state: String,
    pub percent: String,
    pub message: String,
    pub checkpoint: String,
    /// What the record's output ends with once the work ended (the whole document when absent).
    pub output: String,
}

impl Default for StatusFields {
    fn default() -> Self {
        Self {
            state: "/state".to_owned(),
            percent: "/percent".to_owned(),
            message: "/message".to_owned(),
            checkpoint: "/checkpoint".to_owned(),
            output: "/output".to_owned(),
        }
    }
}

/// `task.async.cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    #[serde(default = "default_cancel_method")]
    pub method: String,
    /// The status URL when absent; relative URLs are resolved against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

fn default_status_url() -> String {
    "location".to_owned()
}
fn default_interval() -> HumanDuration {
    DEFAULT_INTERVAL
}
fn default_done() -> Vec<String> {
    ["succeeded", "success", "done", "completed"].map(str::to_owned).to_vec()
}
fn default_failed() -> Vec<String> {
    ["failed", "error", "cancelled", "canceled"].map(str::to_owned).to_vec()
}
fn default_cancel_method() -> String {
    "DELETE".to_owned()
}

impl AsyncPoll {
    /// Checks every field; errors name it (`task.async.interval`, …).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.status_url != "location" {
            check_pointer(&self.status_url).map_err(|m| {
                SpecError::at("task.async.status_url", format!("must be \"location\" or a JSON pointer: {m}"))
            })?;
        }
        if self.interval < MIN_INTERVAL || self.interval > MAX_INTERVAL {
            return Err(SpecError::at(
                "task.async.interval",
                format!("must be between {MIN_INTERVAL} and {MAX_INTERVAL}"),
            ));
        }
        if let Some(t) = self.timeout {
            if t < HumanDuration::from_secs(1) || t > MAX_POLL_TIMEOUT {
                return Err(SpecError::at("task.async.timeout", format!("must be between 1s and {MAX_POLL_TIMEOUT}")));
            }
        }
        let f = &self.fields;
        for (name, pointer) in [
            ("state", &f.state),
            ("percent", &f.percent),
            ("message", &f.message),
            ("checkpoint", &f.checkpoint),
            ("output", &f.output),
        ] {
            check_pointer(pointer).map_err(|m| SpecError::at(&format!("task.async.fields.{name}"), m))?;
        }
        check_states("task.async.done", &self.done)?;
        check_states("task.async.failed", &self.failed)?;
        if let Some(s) = self.done.iter().find(|s| self.failed.contains(s)) {
            return Err(SpecError::at("task.async.failed", format!("{s:?} is also in task.async.done")));
        }
        if let Some(cancel) = &self.cancel {
            const METHODS: [&str; 4] = ["DELETE", "POST", "PUT", "PATCH"];
            if !METHODS.contains(&cancel.method.as_str()) {
                return Err(SpecError::at(
                    "task.async.cancel.method",
                    format!("must be one of {}", METHODS.join(", ")),
                ));
            }
            if let Some(url) = &cancel.url {
                if url.is_empty() || url.len() > MAX_TEXT || url.contains(char::is_whitespace) {
                    return Err(SpecError::at(
                        "task.async.cancel.url",
                        format!("must be a URL (absolute, or relative to the status URL) of 1..{MAX_TEXT} bytes"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// How long polling may last: `async.timeout`, else the job's timeout, else 24h.
    #[must_use]
    pub fn poll_timeout(&self, job_timeout: Option<HumanDuration>) -> HumanDuration {
        self.timeout.or(job_timeout).unwrap_or(DEFAULT_POLL_TIMEOUT)
    }

    /// The status URL a 202 answer names, as written there (maybe relative), or why none.
    pub fn status_url_of(&self, location: Option<&str>, body: &[u8]) -> Result<String, String> {
        if self.status_url == "location" {
            return location
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| "the 202 answer has no Location header naming the status URL".to_owned());
        }
        let doc: Value = serde_json::from_slice(body)
            .map_err(|e| format!("the 202 answer's body is not JSON ({e}); task.async.status_url points into it"))?;
        match doc.pointer(&self.status_url) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(other) => Err(format!("{} in the 202 answer is {other}, not a URL", self.status_url)),
            None => Err(format!("the 202 answer's body has no {}", self.status_url)),
        }
    }

    /// What a status document says.
    pub fn read_status(&self, doc: &Value) -> Result<Status, String> {
        let f = &self.fields;
        let state = match doc.pointer(&f.state) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(other) => return Err(format!("the status document's {} is {other}, not a string", f.state)),
            None => return Err(format!("the status document has no {}", f.state)),
        };
        let output = doc.pointer(&f.output).map_or_else(
            || doc.to_string(),
            |v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            },
        );
        if self.done.contains(&state) {
            return Ok(Status::Done { state, output });
        }
        if self.failed.contains(&state) {
            return Ok(Status::Failed { state, output });
        }
        Ok(Status::Going { state, report: self.report_of(doc) })
    }

    /// The progress report a status document carries, if any and well-formed.
    fn report_of(&self, doc: &Value) -> Result<Option<Report>, String> {
        let f = &self.fields;
        let mut fields = serde_json::Map::new();
        for (name, pointer) in [("percent", &f.percent), ("message", &f.message), ("checkpoint", &f.checkpoint)] {
            if let Some(v) = doc.pointer(pointer).filter(|v| !v.is_null()) {
                fields.insert(name.to_owned(), v.clone());
            }
        }
        if fields.is_empty() {
            return Ok(None);
        }
        Report::from_json(Value::Object(fields).to_string().as_bytes()).map(Some).map_err(|e| e.to_string())
    }
}

/// What one status document says.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Still going; its progress report (or why the document's progress is not understood).
    Going {
        state: String,
        report: Result<Option<Report>, String>,
    },
    Done {
        state: String,
        output: String,
    },
    Failed {
        state: String,
        output: String,
    },
}

fn check_pointer(pointer: &str) -> Result<(), String> {
    if pointer.len() > MAX_TEXT {
        return Err(format!("longer than {MAX_TEXT} bytes"));
    }
    if !pointer.starts_with('/') {
        return Err(format!("{pointer:?} is not a JSON pointer (e.g. \"/status/phase\")"));
    }
    Ok(())
}

fn check_states(field: &str, states: &[String]) -> Result<(), SpecError> {
    if states.is_empty() || states.len() > MAX_STATES {
        return Err(SpecError::at(field, format!("must list 1..{MAX_STATES} states")));
    }
    if let Some(s) = states.iter().find(|s| s.is_empty() || s.len() > MAX_TEXT) {
        return Err(SpecError::at(field, format!("{s:?}: a state is 1..{MAX_TEXT} bytes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(v: Value) -> AsyncPoll {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn defaults_read_location_and_state() {
        let p = spec(json!({}));
        assert_eq!(p.interval, DEFAULT_INTERVAL);
        assert!(p.validate().is_ok());
        assert_eq!(p.status_url_of(Some("/jobs/7"), b""), Ok("/jobs/7".to_owned()));
        assert!(p.status_url_of(None, b"{}").is_err_and(|e| e.contains("Location")));
        let going = p
            .read_status(&json!({"state": "running", "percent": 40, "message": "b"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let Status::Going { state, report: Ok(Some(report)) } = going else { panic!("{going:?}") };
        assert_eq!((state.as_str(), report.percent, report.message.as_deref()), ("running", Some(40.0), Some("b")));
        assert_eq!(
            p.read_status(&json!({"state": "succeeded", "output": "42 rows"})),
            Ok(Status::Done { state: "succeeded".into(), output: "42 rows".into() })
        );
        assert_eq!(
            p.read_status(&json!({"state": "failed"})),
            Ok(Status::Failed { state: "failed".into(), output: r#"{"state":"failed"}"#.into() })
        );
        assert!(p.read_status(&json!({"phase": "x"})).is_err_and(|e| e.contains("/state")));
        assert!(p.read_status(&json!({"state": 3})).is_err_and(|e| e.contains("not a string")));
    }

    #[test]
    fn pointers_and_own_states() {
        let p = spec(json!({"status_url": "/links/status", "fields": {"state": "/status/phase", "percent": "/p"},
            "done": ["OK"], "failed": ["BAD"]}));
        assert!(p.validate().is_ok());
        assert_eq!(p.status_url_of(None, br#"{"links":{"status":"https://x/s/1"}}"#), Ok("https://x/s/1".into()));
        assert!(p.status_url_of(None, b"not json").is_err_and(|e| e.contains("not JSON")));
        assert!(p.status_url_of(None, br#"{"links":{}}"#).is_err_and(|e| e.contains("/links/status")));
        assert!(matches!(p.read_status(&json!({"status": {"phase": "OK"}})), Ok(Status::Done { .. })));
        assert!(matches!(p.read_status(&json!({"status": {"phase": "succeeded"}})), Ok(Status::Going { .. })));
        let bad = p.read_status(&json!({"status": {"phase": "RUN"}, "p": 400})).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(bad, Status::Going { report: Err(ref e), .. } if e.contains("percent")), "{bad:?}");
    }

    #[test]
    fn validation_names_the_field() {
        let cases = [
            (json!({"interval": "10ms"}), "task.async.interval"),
            (json!({"timeout": "30d"}), "task.async.timeout"),
            (json!({"status_url": "links.status"}), "task.async.status_url"),
            (json!({"fields": {"state": "state"}}), "task.async.fields.state"),
            (json!({"done": []}), "task.async.done"),
            (json!({"done": ["x"], "failed": ["x"]}), "task.async.failed"),
            (json!({"cancel": {"method": "GET"}}), "task.async.cancel.method"),
            (json!({"cancel": {"url": "a b"}}), "task.async.cancel.url"),
        ];
        for (v, field) in cases {
            let e = spec(v.clone()).validate().expect_err(&v.to_string());
            assert_eq!(e.field.as_deref(), Some(field), "{v}");
        }
        assert_eq!(spec(json!({"timeout": "2h"})).poll_timeout(Some(HumanDuration::from_secs(60))).0.as_secs(), 7200);
        assert_eq!(spec(json!({})).poll_timeout(Some(HumanDuration::from_secs(60))).0.as_secs(), 60);
        assert_eq!(spec(json!({})).poll_timeout(None), DEFAULT_POLL_TIMEOUT);
    }
}
