//! Progress, checkpoints and results of running tasks: what a task reports (a percentage, a
//! message, a checkpoint, its result), the two ways it reports it (a line on its output,
//! `::etcron …`, or a POST to its worker), the checkpoint as etcd keeps it for a rerun to resume
//! from, and what the record says of them.
//!
//! Lines (each alone on a line of the task's output, which keeps them too):
//!
//! ```text
//! ::etcron progress 42.5 copying table b     percent 0..100, then an optional message
//! ::etcron checkpoint {"offset":100000}      any JSON value, at most MAX_CHECKPOINT_BYTES
//! ::etcron result {"rows":12}                any JSON value but null, at most MAX_RESULT_BYTES
//! ::etcron rebalance                         move me: end this run, continue on another worker
//! ```
//!
//! A line that starts with `::etcron ` but says anything else is not a report (the worker logs
//! it once per execution).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most bytes of a run's result (JSON).
pub const MAX_RESULT_BYTES: usize = 64 * 1024;
use crate::UnixMs;

/// Largest checkpoint, as JSON text.
pub const MAX_CHECKPOINT_BYTES: usize = 16 * 1024;
/// Longest progress message, in bytes (longer ones are cut at a character boundary).
pub const MAX_MESSAGE_BYTES: usize = 512;
/// Largest body of a report POSTed to the worker, besides its result.
pub const MAX_REPORT_BYTES: usize = MAX_CHECKPOINT_BYTES + 4 * 1024;
/// Largest body of a report with its result, and longest report line: a longer line is not
/// read ([`ScannedLine::TooLong`]).
pub const MAX_BODY_BYTES: usize = MAX_REPORT_BYTES + MAX_RESULT_BYTES;
/// What starts a report line.
pub const LINE_PREFIX: &str = "::etcron ";

/// One report of a running task: `{"percent": 50, "message": "…", "checkpoint": {…},
/// "result": {…}}`, every field optional (an empty report is refused).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Value>,
    /// The run's result (its record's `result`): the last one reported wins. `null` is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Move the run: the worker ends it (after storing the checkpoint) and another worker
    /// continues it from its last checkpoint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rebalance: bool,
}

/// Why a report was refused: the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportError {
    pub field: String,
    pub message: String,
    /// The body is larger than a report may be (an HTTP `413`, not a `400`).
    pub too_large: bool,
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn refused(field: &str, message: impl Into<String>) -> ReportError {
    ReportError { field: field.to_owned(), message: message.into(), too_large: false }
}

fn too_large(message: String) -> ReportError {
    ReportError { too_large: true, ..refused("body", message) }
}

/// Bytes of `value` as compact JSON.
fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

impl Report {
    /// A POSTed report; errors name the field. A body is at most [`MAX_REPORT_BYTES`] besides
    /// its result (so at most [`MAX_BODY_BYTES`] with one).
    pub fn from_json(body: &[u8]) -> Result<Self, ReportError> {
        if body.len() > MAX_BODY_BYTES {
            return Err(too_large(format!("is larger than {MAX_BODY_BYTES} bytes")));
        }
        let value: Value = serde_json::from_slice(body).map_err(|e| refused("body", format!("is not JSON: {e}")))?;
        if !value.is_object() {
            return Err(refused("body", "must be a JSON object"));
        }
        let result = value.get("result").map_or(0, json_len);
        if body.len().saturating_sub(result) > MAX_REPORT_BYTES {
            return Err(too_large(format!("is larger than {MAX_REPORT_BYTES} bytes besides its result")));
        }
        let report: Report = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "body".to_owned() } else { path };
            refused(&field, e.inner().to_string())
        })?;
        report.checked()
    }

    /// The report a line of output makes: `None` for a line that is not one (no prefix), an
    /// error for a line with the prefix that does not parse.
    #[must_use]
    pub fn from_line(line: &str) -> Option<Result<Self, ReportError>> {
        let rest = line.trim_end_matches(['\r', '\n']).strip_prefix(LINE_PREFIX)?;
        let (verb, arg) = rest.split_once(' ').unwrap_or((rest, ""));
        Some(match verb {
            "progress" => {
                let (number, message) = arg.trim_start().split_once(' ').unwrap_or((arg.trim(), ""));
                match number.parse::<f64>() {
                    Ok(percent) => {
                        let message = (!message.trim().is_empty()).then(|| message.trim().to_owned());
                        Report { percent: Some(percent), message, ..Report::default() }.checked()
                    }
                    Err(_) => Err(refused("percent", format!("{number:?} is not a number"))),
                }
            }
            "checkpoint" => match serde_json::from_str::<Value>(arg) {
                Ok(value) => Report { checkpoint: Some(value), ..Report::default() }.checked(),
                Err(e) => Err(refused("checkpoint", format!("is not JSON: {e}"))),
            },
            "result" => match serde_json::from_str::<Value>(arg) {
                Ok(Value::Null) => Err(refused("result", "null is no result")),
                Ok(value) => Report { result: Some(value), ..Report::default() }.checked(),
                Err(e) => Err(refused("result", format!("is not JSON: {e}"))),
            },
            "rebalance" if arg.trim().is_empty() => Ok(Report { rebalance: true, ..Report::default() }),
            other => Err(refused(
                "line",
                format!("unknown report {other:?}; one of progress, checkpoint, result, rebalance"),
            )),
        })
    }

    fn checked(mut self) -> Result<Self, ReportError> {
        let empty = self.percent.is_none() && self.message.is_none() && self.checkpoint.is_none();
        if empty && self.result.is_none() && !self.rebalance {
            return Err(refused("body", "give percent, message, checkpoint, result or rebalance"));
        }
        if let Some(p) = self.percent {
            if !(0.0..=100.0).contains(&p) {
                return Err(refused("percent", "must be between 0 and 100"));
            }
        }
        if let Some(m) = &mut self.message {
            *m = plain(m);
            cut(m, MAX_MESSAGE_BYTES);
        }
        if let Some(c) = &self.checkpoint {
            let size = json_len(c);
            if size > MAX_CHECKPOINT_BYTES {
                return Err(refused("checkpoint", format!("is {size} bytes as JSON; at most {MAX_CHECKPOINT_BYTES}")));
            }
        }
        if let Some(r) = &self.result {
            let size = json_len(r);
            if size > MAX_RESULT_BYTES {
                return Err(refused("result", format!("is {size} bytes as JSON; at most {MAX_RESULT_BYTES}")));
            }
        }
        Ok(self)
    }
}

/// `text` as plain text: tabs and line breaks become spaces, every other control character
/// (ESC and so terminal escape sequences, C1 controls, DEL) is dropped, so a message shows as
/// it reads wherever it is displayed.
#[must_use]
pub fn plain(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            '\t' | '\n' | '\r' => Some(' '),
            c if c.is_control() => None,
            c => Some(c),
        })
        .collect()
}

fn cut(text: &mut String, max: usize) {
    text.truncate(crate::output::char_floor(text, max));
}

/// A report line [`LineScanner`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScannedLine {
    /// A whole line, without its newline.
    Line(String),
    /// A line longer than [`MAX_BODY_BYTES`], not read: the word after the prefix, and its length.
    TooLong { verb: String, bytes: usize },
}

impl ScannedLine {
    /// The report the line makes, or why it makes none.
    pub fn report(&self) -> Result<Report, ReportError> {
        match self {
            ScannedLine::Line(line) => {
                Report::from_line(line).unwrap_or_else(|| Err(refused("line", "not a report line")))
            }
            ScannedLine::TooLong { verb, bytes } => {
                let field = if matches!(verb.as_str(), "checkpoint" | "result") { verb.as_str() } else { "line" };
                Err(refused(field, format!("the line is {bytes} bytes; a report line is at most {MAX_BODY_BYTES}")))
            }
        }
    }
}

/// Finds report lines in a task's output as it comes, in pieces: keeps at most one partial
/// line, and only while it can still be a report (it starts with [`LINE_PREFIX`] and is not
/// longer than a report line can be).
#[derive(Debug, Default)]
pub struct LineScanner {
    partial: Vec<u8>,
    /// The current line cannot be a report: skip to its end.
    skipping: bool,
    /// The current line is a report line too long to read: its verb, and its bytes so far.
    too_long: Option<(String, usize)>,
}

impl LineScanner {
    /// The report lines in `bytes` (with what came before) that end in it, each with the offset
    /// in `bytes` just past its newline. Output that cannot be a report is skipped a line at a
    /// time, not copied.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<(usize, ScannedLine)> {
        let prefix = LINE_PREFIX.as_bytes();
        let mut lines = Vec::new();
        let mut at = 0;
        loop {
            let rest = &bytes[at..];
            let newline = rest.iter().position(|&b| b == b'\n');
            let piece = newline.map_or(rest, |i| &rest[..i]);
            if let Some((_, n)) = &mut self.too_long {
                *n += piece.len();
            } else if !self.skipping {
                self.partial.extend_from_slice(piece);
                self.check_partial(prefix);
            }
            let Some(i) = newline else { return lines };
            at += i + 1;
            if let Some((verb, bytes)) = self.too_long.take() {
                lines.push((at, ScannedLine::TooLong { verb, bytes }));
            } else if !self.skipping && self.partial.starts_with(prefix) {
                lines.push((at, ScannedLine::Line(String::from_utf8_lossy(&self.partial).into_owned())));
            }
            self.partial.clear();
            self.skipping = false;
        }
    }

    /// Stops keeping the partial line once it cannot be a report (or is one too long to read).
    fn check_partial(&mut self, prefix: &[u8]) {
        let n = self.partial.len();
        if n <= prefix.len() {
            if !prefix.starts_with(&self.partial) {
                self.partial.clear();
                self.skipping = true;
            }
        } else if !self.partial.starts_with(prefix) {
            self.partial.clear();
            self.skipping = true;
        } else if n > MAX_BODY_BYTES {
            let rest = &self.partial[prefix.len()..];
            let verb = rest.split(|&b| b == b' ').next().unwrap_or_default();
            self.too_long = Some((String::from_utf8_lossy(&verb[..verb.len().min(32)]).into_owned(), n));
            self.partial.clear();
            self.skipping = true;
        }
    }
}

/// A task's latest progress, as the API and the record show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 (ms), when it was reported.
    pub at: String,
}

impl Progress {
    /// `self` moved on by `report` (a report without a percent keeps the last one; one without
    /// a message keeps the last message only when it has no percent either).
    #[must_use]
    pub fn after(previous: Option<&Progress>, report: &Report, at: String) -> Option<Progress> {
        if report.percent.is_none() && report.message.is_none() {
            return previous.cloned();
        }
        let percent = report.percent.or(previous.and_then(|p| p.percent));
        let message = report.message.clone().or_else(|| {
            if report.percent.is_none() {
                previous.and_then(|p| p.message.clone())
            } else {
                None
            }
        });
        Some(Progress { percent, message, at })
    }
}

/// `{ns}/checkpoints/{job}/{tick}{part}`: a tick's latest checkpoint, written by the execution
/// that held its claim when it reported it; a failover rerun of the tick starts from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub execution_id: String,
    pub at_ms: UnixMs,
    pub value: Value,
}

/// Where an execution resumed from (its record's `resumed_from`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    /// The execution that reported the checkpoint.
    pub execution_id: String,
    /// RFC 3339 (ms), when it was reported.
    pub at: String,
    pub checkpoint: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_reports_only_with_the_prefix_and_a_known_verb() {
        assert_eq!(Report::from_line("progress 50"), None);
        assert_eq!(Report::from_line(" ::etcron progress 50"), None, "at the start of the line only");
        let r = Report::from_line("::etcron progress 42.5 copying table b\n").unwrap().unwrap();
        assert_eq!((r.percent, r.message.as_deref()), (Some(42.5), Some("copying table b")));
        let r = Report::from_line("::etcron progress 7").unwrap().unwrap();
        assert_eq!((r.percent, r.message), (Some(7.0), None));
        let r = Report::from_line(r#"::etcron checkpoint {"offset":100000}"#).unwrap().unwrap();
        assert_eq!(r.checkpoint, Some(serde_json::json!({"offset": 100000})));
        assert!(Report::from_line("::etcron rebalance").unwrap().unwrap().rebalance);
        for (line, field) in [
            ("::etcron progress lots", "percent"),
            ("::etcron progress 101", "percent"),
            ("::etcron progress -1 x", "percent"),
            ("::etcron checkpoint {oops", "checkpoint"),
            ("::etcron rebalance-now", "line"),
            ("::etcron rebalance please", "line"),
        ] {
            assert_eq!(Report::from_line(line).unwrap().unwrap_err().field, field, "{line}");
        }
        let big = format!("::etcron checkpoint \"{}\"", "x".repeat(MAX_CHECKPOINT_BYTES));
        assert_eq!(Report::from_line(&big).unwrap().unwrap_err().field, "checkpoint");
    }

    #[test]
    fn a_result_line_is_any_json_value_but_null_within_the_limit() {
        let r = Report::from_line(r#"::etcron result {"rows": 12}"#).unwrap().unwrap();
        assert_eq!(r.result, Some(serde_json::json!({"rows": 12})));
        assert_eq!((r.percent, r.checkpoint, r.rebalance), (None, None, false));
        let r = Report::from_line("::etcron result \"done\"\r\n").unwrap().unwrap();
        assert_eq!(r.result, Some(Value::from("done")));
        for line in ["::etcron result", "::etcron result {rows", "::etcron result null"] {
            assert_eq!(Report::from_line(line).unwrap().unwrap_err().field, "result", "{line}");
        }
        let fits = format!("::etcron result \"{}\"", "x".repeat(MAX_RESULT_BYTES - 2));
        assert!(Report::from_line(&fits).unwrap().is_ok(), "exactly the limit");
        let big = format!("::etcron result \"{}\"", "x".repeat(MAX_RESULT_BYTES - 1));
        let e = Report::from_line(&big).unwrap().unwrap_err();
        assert_eq!(e.field, "result");
        assert!(e.message.contains(&format!("{} bytes", MAX_RESULT_BYTES + 1)), "{e}");
    }

    fn line(end: usize, text: &str) -> (usize, ScannedLine) {
        (end, ScannedLine::Line(text.to_owned()))
    }

    #[test]
    fn the_scanner_finds_report_lines_across_pieces_and_skips_the_rest() {
        let mut s = LineScanner::default();
        assert!(s.push(b"hello\n::etc").is_empty());
        assert_eq!(s.push(b"ron progress 5\nx ::etcron progress 6\n"), [line(15, "::etcron progress 5")]);
        let long = format!("::etcron result \"{}\"\nnext", "x".repeat(MAX_BODY_BYTES));
        let found = s.push(long.as_bytes());
        let bytes = long.len() - "\nnext".len();
        assert_eq!(found, [(bytes + 1, ScannedLine::TooLong { verb: "result".to_owned(), bytes })], "too long to read");
        assert_eq!(found[0].1.report().unwrap_err().field, "result");
        assert!(s.push(b"\n").is_empty(), "the line after it is no report");
        assert_eq!(s.push(b"::etcron progress 7\n"), [line(20, "::etcron progress 7")], "the next line is read again");
        assert!(s.push(b"::etcron progress 8").is_empty(), "no newline yet");
        assert_eq!(s.push(b"\nout\n"), [line(1, "::etcron progress 8")]);
        let fits = format!("::etcron result \"{}\"\n", "x".repeat(MAX_RESULT_BYTES - 2));
        let found = s.push(fits.as_bytes());
        assert_eq!(found.len(), 1);
        assert!(found[0].1.report().unwrap().result.is_some(), "a result of the limit is read");
    }

    #[test]
    fn posted_reports_name_the_bad_field() {
        let r = Report::from_json(br#"{"percent": 50, "message": "half", "checkpoint": {"next": 51}}"#).unwrap();
        assert_eq!((r.percent, r.rebalance), (Some(50.0), false));
        assert!(Report::from_json(br#"{"rebalance": true}"#).unwrap().rebalance);
        for (body, field) in [
            (&br#"{"percent": "x"}"#[..], "percent"),
            (br#"{"percent": 150}"#, "percent"),
            (br#"{"pct": 1}"#, "pct"),
            (br#"{}"#, "body"),
            (br#"[1]"#, "body"),
        ] {
            assert_eq!(Report::from_json(body).unwrap_err().field, field, "{}", String::from_utf8_lossy(body));
        }
        let long = format!(r#"{{"message": "{}"}}"#, "é".repeat(MAX_MESSAGE_BYTES));
        assert!(Report::from_json(long.as_bytes()).unwrap().message.unwrap().len() <= MAX_MESSAGE_BYTES);
        let e = Report::from_json(&vec![b' '; MAX_BODY_BYTES + 1]).unwrap_err();
        assert_eq!((e.field.as_str(), e.too_large), ("body", true));
    }

    #[test]
    fn a_posted_result_may_make_the_body_larger_by_its_own_size() {
        let r = Report::from_json(br#"{"result": {"rows": 12}, "percent": 100}"#).unwrap();
        assert_eq!((r.result, r.percent), (Some(serde_json::json!({"rows": 12})), Some(100.0)));
        assert_eq!(Report::from_json(br#"{"result": null}"#).unwrap_err().field, "body", "null is no result");
        let result = format!(r#"{{"result": "{}"}}"#, "x".repeat(MAX_RESULT_BYTES - 2));
        assert!(Report::from_json(result.as_bytes()).is_ok(), "{} bytes: a result of the limit", result.len());
        let over = format!(r#"{{"result": "{}"}}"#, "x".repeat(MAX_RESULT_BYTES));
        let e = Report::from_json(over.as_bytes()).unwrap_err();
        assert_eq!((e.field.as_str(), e.too_large), ("result", false));
        // Besides a result, a body is as small as ever.
        let other = format!(r#"{{"result": 1, "message": "{}"}}"#, "x".repeat(MAX_REPORT_BYTES));
        let e = Report::from_json(other.as_bytes()).unwrap_err();
        assert_eq!((e.field.as_str(), e.too_large), ("body", true));
        let checkpoint = format!(r#"{{"checkpoint": "{}"}}"#, "x".repeat(21 * 1024));
        assert!(Report::from_json(checkpoint.as_bytes()).unwrap_err().too_large);
    }

    #[test]
    fn messages_keep_plain_text_only() {
        let r = Report::from_json(br#"{"message": "\u001b[31mred\u001b[0m\tdone\r\nnext\u0007\u009b2J\u007f \u00e9"}"#)
            .unwrap();
        assert_eq!(r.message.as_deref(), Some("[31mred[0m done  next2J \u{e9}"));
        let r = Report::from_line("::etcron progress 5 a\u{1b}]0;title\u{7}b").unwrap().unwrap();
        assert_eq!(r.message.as_deref(), Some("a]0;titleb"));
    }

    #[test]
    fn progress_keeps_the_last_percent_and_message_as_reports_say() {
        let at = |s: &str| s.to_owned();
        let half = Progress::after(
            None,
            &Report { percent: Some(50.0), message: Some("b".into()), ..Report::default() },
            at("t1"),
        )
        .unwrap();
        let msg =
            Progress::after(Some(&half), &Report { message: Some("c".into()), ..Report::default() }, at("t2")).unwrap();
        assert_eq!((msg.percent, msg.message.as_deref()), (Some(50.0), Some("c")));
        let more = Progress::after(Some(&msg), &Report { percent: Some(60.0), ..Report::default() }, at("t3")).unwrap();
        assert_eq!(
            (more.percent, more.message.as_deref()),
            (Some(60.0), None),
            "a new percent without a message clears it"
        );
        let ck = Report { checkpoint: Some(Value::Null), ..Report::default() };
        assert_eq!(
            Progress::after(Some(&more), &ck, at("t4")),
            Some(more.clone()),
            "a checkpoint alone is no progress"
        );
    }
}
