//! Backfills: running a job's past ticks again (`POST /api/jobs/{job}/backfill`). The request,
//! its checks (errors name the field), the stored backfill (`{ns}/backfills/{job}/{id}`) and
//! the pure rule that picks which ticks a backfill runs.
//!
//! A backfilled tick is **one more attempt of that tick**: execution `{job}@{tick}#{k}` where
//! `k` is one past the highest attempt recorded for the tick, so its record sits beside the
//! tick's earlier attempts, `ETCRON_SCHEDULED_AT` is the tick and the claim key is the tick's
//! own. Two backfills that pick the same tick pick the same attempt, hence the same claim: the
//! tick runs once, whichever of them (or the live schedule) claims it first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::keys::{ExecutionId, Part, Tick};
use crate::record::{BackfillRef, RunParams};
use crate::record::{Status, TriggerKind};
use crate::spec::SpecError;
use crate::stored::TriggerRequest;
use crate::UnixMs;

/// Most ticks one backfill runs (`max_runs` may be lower; 100 by default).
pub const MAX_BACKFILL_RUNS: u32 = 500;
/// `max_runs` when the request leaves it out.
pub const DEFAULT_BACKFILL_RUNS: u32 = 100;
/// Most ticks of the range the master looks at (a range holding more is refused: narrow it).
pub const MAX_BACKFILL_SCAN: usize = 10_000;
/// Most backfilled runs going at once (`overlap: "parallel"`).
pub const MAX_BACKFILL_PARALLEL: u32 = 50;
/// `max_parallel` of a parallel backfill when the request leaves it out.
pub const DEFAULT_BACKFILL_PARALLEL: u32 = 5;
/// Most backfills kept per job; creating one more removes the oldest finished one.
pub const MAX_BACKFILLS_PER_JOB: usize = 20;
/// Longest reason, in characters.
pub const MAX_BACKFILL_REASON: usize = 500;

/// Which ticks of the range a backfill runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    /// Ticks with no successful run (never run, missed, skipped, failed, lost, killed).
    #[default]
    Missing,
    /// Ticks whose latest attempt ended `failed`, `timed_out` or `lost`.
    Failed,
    /// Every tick.
    All,
}

/// How a backfill's runs follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// One at a time, oldest first: the next tick is requested when the previous run ends.
    #[default]
    Serial,
    /// Up to `max_parallel` at a time, oldest first.
    Parallel,
}

/// The body of `POST /api/jobs/{job}/backfill`.
#[derive(Debug, Clone, Default)]
pub struct BackfillRequest {
    pub from: String,
    pub to: String,
    pub which: Which,
    pub overlap: Overlap,
    pub max_parallel: Option<u32>,
    pub max_runs: Option<u32>,
    pub dry_run: bool,
    pub reason: String,
}

/// A checked request: the range in Unix ms (both ends included) and its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from_ms: UnixMs,
    pub to_ms: UnixMs,
    /// Runs going at once: 1 for a serial backfill.
    pub parallel: u32,
    pub max_runs: u32,
}

impl BackfillRequest {
    /// Parses the body; errors name the field.
    pub fn from_json(bytes: &[u8]) -> Result<Self, SpecError> {
        let value = crate::json::from_slice_unique(bytes).map_err(|e| {
            let (field, message) = match e {
                crate::json::ParseError::Duplicate { path } => (Some(path.clone()), format!("{path} appears twice")),
                crate::json::ParseError::Syntax(e) => (None, format!("not JSON: {e}")),
            };
            SpecError { field, message, too_large: false }
        })?;
        let Some(fields) = value.as_object() else {
            return Err(SpecError { field: None, message: "the body must be a JSON object".into(), too_large: false });
        };
        let mut request = BackfillRequest::default();
        for (key, v) in fields {
            match key.as_str() {
                "from" => request.from = field(key, v)?,
                "to" => request.to = field(key, v)?,
                "which" => request.which = field(key, v)?,
                "overlap" => request.overlap = field(key, v)?,
                "max_parallel" => request.max_parallel = Some(field(key, v)?),
                "max_runs" => request.max_runs = Some(field(key, v)?),
                "dry_run" => request.dry_run = field(key, v)?,
                "reason" => request.reason = field(key, v)?,
                _ => return Err(SpecError::at(key, "unknown field")),
            }
        }
        for (name, text) in [("from", &request.from), ("to", &request.to)] {
            if text.is_empty() {
                return Err(SpecError::at(name, "is required (an RFC 3339 time)"));
            }
        }
        Ok(request)
    }

    /// Checks the request at `now_ms`: a range of the past (`to` not after now, `from` not
    /// after `to`), the limits within theirs.
    pub fn check(&self, now_ms: UnixMs) -> Result<Range, SpecError> {
        let from_ms = instant("from", &self.from)?;
        let to_ms = instant("to", &self.to)?;
        if from_ms > to_ms {
            return Err(SpecError::at("from", format!("{} is after to ({})", self.from, self.to)));
        }
        if to_ms > now_ms {
            return Err(SpecError::at(
                "to",
                format!("{} is in the future: a backfill runs past ticks; later ones belong to the schedule", self.to),
            ));
        }
        let parallel = match (self.overlap, self.max_parallel) {
            (Overlap::Serial, None) => 1,
            (Overlap::Serial, Some(_)) => {
                return Err(SpecError::at("max_parallel", "applies only to overlap \"parallel\""));
            }
            (Overlap::Parallel, n) => n.unwrap_or(DEFAULT_BACKFILL_PARALLEL),
        };
        if !(1..=MAX_BACKFILL_PARALLEL).contains(&parallel) {
            return Err(SpecError::at("max_parallel", format!("must be 1 to {MAX_BACKFILL_PARALLEL}")));
        }
        let max_runs = self.max_runs.unwrap_or(DEFAULT_BACKFILL_RUNS);
        if !(1..=MAX_BACKFILL_RUNS).contains(&max_runs) {
            return Err(SpecError::at("max_runs", format!("must be 1 to {MAX_BACKFILL_RUNS}")));
        }
        if self.reason.chars().count() > MAX_BACKFILL_REASON {
            return Err(SpecError::at("reason", format!("at most {MAX_BACKFILL_REASON} characters")));
        }
        Ok(Range { from_ms, to_ms, parallel, max_runs })
    }
}

/// One field of the body as `T`, the error naming it.
fn field<T: serde::de::DeserializeOwned>(name: &str, value: &serde_json::Value) -> Result<T, SpecError> {
    T::deserialize(value).map_err(|e| SpecError::at(name, e.to_string()))
}

fn instant(field: &str, text: &str) -> Result<UnixMs, SpecError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| SpecError::at(field, format!("{text:?} is not an RFC 3339 time: {e}")))
}

/// One tick a backfill runs: the tick and the attempt its run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    pub at_ms: UnixMs,
    pub attempt: u32,
}

impl Item {
    /// The execution this item runs.
    #[must_use]
    pub fn execution(&self, job: &str) -> ExecutionId {
        ExecutionId { job: job.to_owned(), tick: Tick::Scheduled(self.at_ms), part: Part::Whole, attempt: self.attempt }
    }
}

/// Who cancelled a backfill, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    #[serde(default)]
    pub by: String,
    pub at_ms: UnixMs,
}

/// `{ns}/backfills/{job}/{id}`: a backfill as created. Written once; cancelling rewrites it
/// with `cancelled` set, which is what stops its chain (the requests for the next ticks are
/// written only while the key is at version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backfill {
    pub from_ms: UnixMs,
    pub to_ms: UnixMs,
    pub which: Which,
    pub overlap: Overlap,
    pub parallel: u32,
    /// The ticks to run, oldest first.
    pub items: Vec<Item>,
    #[serde(default)]
    pub by: String,
    pub at_ms: UnixMs,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<Cancelled>,
}

impl Backfill {
    /// The run request id of item `index`: `bf-{id}-{index}` (under the job's trigger prefix).
    #[must_use]
    pub fn request_id(id: &str, index: usize) -> String {
        format!("bf-{id}-{index}")
    }

    /// The request-id prefix of every item of backfill `id`.
    #[must_use]
    pub fn request_prefix(id: &str) -> String {
        format!("bf-{id}-")
    }

    /// The item requested after item `index` ends: `index + parallel`, while there is one.
    #[must_use]
    pub fn next_index(&self, index: usize) -> Option<usize> {
        let next = index + usize::try_from(self.parallel.max(1)).unwrap_or(1);
        (next < self.items.len()).then_some(next)
    }

    /// The run request of item `index` of backfill `id` of `job`, made at `now_ms`.
    #[must_use]
    pub fn request(&self, (job, id): (&str, &str), index: usize, now_ms: UnixMs) -> Option<TriggerRequest> {
        let item = self.items.get(index)?;
        let reason = format!("backfill {id}, tick {} of {}", index + 1, self.items.len());
        Some(TriggerRequest {
            kind: TriggerKind::Backfill,
            execution_id: Some(item.execution(job)),
            scheduled_ms: Some(item.at_ms),
            params: RunParams {
                backfill: Some(BackfillRef { id: id.to_owned(), index: u32::try_from(index).ok()? }),
                ..RunParams::default()
            },
            ..TriggerRequest::manual(now_ms, &reason)
        })
    }

    /// The items requested when the backfill is created: the first `parallel`.
    #[must_use]
    pub fn first_indexes(&self) -> std::ops::Range<usize> {
        0..self.items.len().min(usize::try_from(self.parallel.max(1)).unwrap_or(1))
    }
}

/// What the records say about one tick: its highest attempt, whether any attempt succeeded,
/// the latest attempt's status and whether one is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TickRecords {
    pub last_attempt: u32,
    pub last_status: Option<Status>,
    pub succeeded: bool,
    pub running: bool,
}

impl TickRecords {
    /// Folds in one record (of any part) of the tick.
    pub fn add(&mut self, attempt: u32, status: Status) {
        if attempt >= self.last_attempt {
            self.last_attempt = attempt;
            self.last_status = Some(status);
        }
        self.succeeded |= status == Status::Succeeded;
        self.running |= status == Status::Running;
    }
}

/// A tick of the range the backfill leaves alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Excluded {
    pub at_ms: UnixMs,
    pub why: String,
}

/// Picks the ticks a backfill runs among `ticks` (the range's ticks, oldest first), from what
/// the records say of each: `which` decides, a tick with a running attempt is never picked, and
/// each picked tick runs as the attempt after its highest recorded one.
#[must_use]
pub fn select(ticks: &[UnixMs], records: &BTreeMap<UnixMs, TickRecords>, which: Which) -> (Vec<Item>, Vec<Excluded>) {
    let mut items = Vec::new();
    let mut excluded = Vec::new();
    for &at_ms in ticks {
        let r = records.get(&at_ms).copied().unwrap_or_default();
        let why = if r.running {
            Some("an attempt is running".to_owned())
        } else {
            match which {
                Which::All => None,
                Which::Missing if r.succeeded => Some("it has a successful run".to_owned()),
                Which::Missing => None,
                Which::Failed => match r.last_status {
                    Some(Status::Failed | Status::TimedOut | Status::Lost) => None,
                    Some(s) => Some(format!("its latest attempt ended {}", s.as_str())),
                    None => Some("it has no record".to_owned()),
                },
            }
        };
        match why {
            Some(why) => excluded.push(Excluded { at_ms, why }),
            None => items.push(Item { at_ms, attempt: r.last_attempt + 1 }),
        }
    }
    (items, excluded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> Result<Range, SpecError> {
        BackfillRequest::from_json(body.as_bytes())?.check(2_000_000_000_000)
    }

    fn field_of(r: Result<Range, SpecError>) -> String {
        r.err().and_then(|e| e.field).unwrap_or_default()
    }

    #[test]
    fn a_request_is_checked_field_by_field() {
        let ok = request(r#"{"from":"2026-01-01T00:00:00Z","to":"2026-01-02T00:00:00Z"}"#);
        assert_eq!(ok.ok().map(|r| (r.parallel, r.max_runs)), Some((1, DEFAULT_BACKFILL_RUNS)));
        assert_eq!(field_of(request(r#"{"from":"yesterday","to":"2026-01-02T00:00:00Z"}"#)), "from");
        assert_eq!(field_of(request(r#"{"from":"2026-01-03T00:00:00Z","to":"2026-01-02T00:00:00Z"}"#)), "from");
        assert_eq!(field_of(request(r#"{"from":"2026-01-01T00:00:00Z","to":"2040-01-02T00:00:00Z"}"#)), "to");
        assert_eq!(field_of(request(r#"{"from":"2026-01-01T00:00:00Z"}"#)), "to");
        let base = r#""from":"2026-01-01T00:00:00Z","to":"2026-01-02T00:00:00Z""#;
        assert_eq!(field_of(request(&format!(r#"{{{base},"which":"some"}}"#))), "which");
        assert_eq!(field_of(request(&format!(r#"{{{base},"max_runs":0}}"#))), "max_runs");
        assert_eq!(field_of(request(&format!(r#"{{{base},"max_runs":501}}"#))), "max_runs");
        assert_eq!(field_of(request(&format!(r#"{{{base},"max_parallel":2}}"#))), "max_parallel");
        assert_eq!(field_of(request(&format!(r#"{{{base},"overlap":"parallel","max_parallel":51}}"#))), "max_parallel");
        assert_eq!(field_of(request(&format!(r#"{{{base},"color":"red"}}"#))), "color");
        let parallel = request(&format!(r#"{{{base},"overlap":"parallel"}}"#));
        assert_eq!(parallel.ok().map(|r| r.parallel), Some(DEFAULT_BACKFILL_PARALLEL));
        assert!(BackfillRequest::from_json(br#"{"from":"a","from":"b","to":"c"}"#).is_err(), "duplicate keys");
        assert!(BackfillRequest::from_json(b"[1]").is_err());
    }

    #[test]
    fn which_picks_ticks_from_their_records_and_the_attempt_after_the_last() {
        let mut records = BTreeMap::new();
        let mut add = |at: UnixMs, attempts: &[Status]| {
            let r: &mut TickRecords = records.entry(at).or_default();
            for (i, s) in attempts.iter().enumerate() {
                r.add(u32::try_from(i).unwrap_or(0) + 1, *s);
            }
        };
        add(1, &[Status::Succeeded]);
        add(2, &[Status::Failed]);
        add(3, &[Status::Failed, Status::Succeeded]);
        add(4, &[Status::Missed]);
        add(5, &[Status::Running]);
        add(6, &[Status::Failed, Status::TimedOut]);
        let ticks = [1, 2, 3, 4, 5, 6, 7];
        let picked = |which| select(&ticks, &records, which).0;
        let item = |at_ms, attempt| Item { at_ms, attempt };
        assert_eq!(picked(Which::Missing), vec![item(2, 2), item(4, 2), item(6, 3), item(7, 1)]);
        assert_eq!(picked(Which::Failed), vec![item(2, 2), item(6, 3)]);
        assert_eq!(picked(Which::All), vec![item(1, 2), item(2, 2), item(3, 3), item(4, 2), item(6, 3), item(7, 1)]);
        let (_, excluded) = select(&ticks, &records, Which::Failed);
        assert_eq!(excluded.iter().find(|e| e.at_ms == 5).map(|e| e.why.as_str()), Some("an attempt is running"));
        assert_eq!(excluded.iter().find(|e| e.at_ms == 7).map(|e| e.why.as_str()), Some("it has no record"));
    }

    #[test]
    fn the_chain_requests_each_item_once() {
        let backfill = |parallel, n: i64| Backfill {
            from_ms: 0,
            to_ms: 0,
            which: Which::All,
            overlap: Overlap::Parallel,
            parallel,
            items: (0..n).map(|i| Item { at_ms: i, attempt: 1 }).collect(),
            by: String::new(),
            at_ms: 0,
            reason: String::new(),
            cancelled: None,
        };
        for (parallel, n) in [(1, 5), (3, 10), (5, 2), (50, 120)] {
            let b = backfill(parallel, n);
            let mut requested: Vec<usize> = b.first_indexes().collect();
            let mut i = 0;
            while i < requested.len() {
                requested.extend(b.next_index(requested[i]));
                i += 1;
            }
            requested.sort_unstable();
            assert_eq!(requested, (0..usize::try_from(n).unwrap_or(0)).collect::<Vec<_>>(), "{parallel} {n}");
        }
    }
}
