//! The execution-record store: MongoDB collection `executions`, `_id` = execution id; and the
//! notification deliveries: collection `notifications`, `_id` = delivery id.
//!
//! Only features MongoDB 6 has are used: the `update` command with upserts for batched,
//! idempotent writes; compound indexes for every search filter; a multikey index over the
//! words of output and error for `q`; a TTL index on `finished_at` (deliveries: `created_at`)
//! for retention.

use std::collections::HashMap;
use std::time::Duration;

use futures::TryStreamExt;
use mongodb::bson::{self, doc, Bson, DateTime as BsonDate, Document, RawArrayBuf, RawDocumentBuf};
use mongodb::options::{AggregateOptions, ClientOptions, FindOptions, IndexOptions};
use mongodb::{Client, Collection, Database, IndexModel};
use serde::{Deserialize, Serialize};

use etcron_model::keys::ExecutionId;
use etcron_model::notify::{Attempt, Delivery, DeliveryState};
use etcron_model::record::RunParams;
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_model::spec::notify::{NotifyEvent, NotifyFormat};
use etcron_model::UnixMs;

pub const COLLECTION: &str = "executions";
/// Notification deliveries, one document per delivery with all its attempts.
pub const NOTIFICATIONS: &str = "notifications";
const NOTIFICATIONS_TTL_INDEX: &str = "notif_ttl_created";
/// Most records per search page.
pub const MAX_LIMIT: i64 = 500;
/// Default records per search page.
pub const DEFAULT_LIMIT: i64 = 50;
/// Most distinct words indexed per record.
pub const MAX_WORDS: usize = 2_000;
/// Shortest and longest indexed word.
const WORD_LEN: std::ops::RangeInclusive<usize> = 2..=64;
const TTL_INDEX: &str = "exec_ttl_finished";
/// MongoDB's error code for a collection that does not exist.
const NAMESPACE_NOT_FOUND: i32 = 26;
/// MongoDB's error code for creating a collection that exists.
const NAMESPACE_EXISTS: i32 = 48;
/// MongoDB's duplicate-key error code.
const DUPLICATE_KEY: i32 = 11000;
/// Most bytes of records in one `update` command (MongoDB takes 16 MiB per command document).
const UPDATE_COMMAND_BYTES: usize = 4 * 1024 * 1024;
/// Most bytes of output stored per record: a document must stay under MongoDB's 16 MiB, and
/// `max_output` may be as large as that. Longer output keeps its head and tail.
pub const MAX_STORED_OUTPUT: usize = 12 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The server could not be reached or did not answer in time: retry later.
    #[error("MongoDB unavailable: {0}")]
    Unavailable(String),
    /// The server answered with an error.
    #[error("MongoDB error: {0}")]
    Failed(String),
    #[error("invalid cursor")]
    BadCursor,
}

/// MongoDB's answer to a hint naming an index that does not exist.
const MISSING_INDEX: &str = "hint provided does not correspond to an existing index";

impl From<mongodb::error::Error> for StoreError {
    fn from(e: mongodb::error::Error) -> Self {
        use mongodb::error::ErrorKind;
        match *e.kind {
            ErrorKind::ServerSelection { .. } | ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => {
                StoreError::Unavailable(e.to_string())
            }
            // Searches name their index; until the master has created the indexes (at start,
            // retried while MongoDB is away) the search cannot be served yet.
            ErrorKind::Command(ref c) if c.code == 2 && c.message.contains(MISSING_INDEX) => StoreError::Unavailable(
                "the execution record indexes are not created yet (masters create them at start); retry shortly"
                    .to_owned(),
            ),
            _ => StoreError::Failed(e.to_string()),
        }
    }
}

/// How a record is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Insert only if no record with this id exists (the `running` record: it must never
    /// overwrite a final one, whatever order writes arrive in).
    IfAbsent,
    /// Replace whatever is there (the final record).
    Replace,
    /// Insert, or replace a `running` record, never a final one: the `lost` record of a
    /// departed worker's run, which yields to the run's own final record should the run have
    /// ended and journaled it before its worker died (docs/decisions/exactly-once.md, T3 and T5).
    OverRunning,
}

impl WriteMode {
    /// Whether the write is an execution's final record.
    #[must_use]
    pub fn is_final(self) -> bool {
        matches!(self, Self::Replace | Self::OverRunning)
    }
}

/// One record write, as queued by the worker's log sink and kept in its spool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordWrite {
    pub mode: WriteMode,
    pub record: ExecutionRecord,
}

/// A search of `GET /api/executions`.
#[derive(Debug, Clone, Default)]
pub struct Search {
    pub job: Option<String>,
    pub statuses: Vec<Status>,
    pub worker: Option<String>,
    pub trigger: Option<TriggerKind>,
    pub since_ms: Option<UnixMs>,
    pub until_ms: Option<UnixMs>,
    /// Words that must all occur in output or error (case-insensitive, whole words).
    pub q: Option<String>,
    /// Only records whose `team` is one of these (`None`: any team, or none). A caller that
    /// holds roles on some teams only searches with them; records without a team never match.
    pub teams: Option<Vec<String>>,
    pub limit: i64,
    pub cursor: Option<Cursor>,
}

/// The filter of `teams` on a document's `team` (see [`Search::teams`]): one value, or `$in`.
#[must_use]
pub fn team_filter(teams: &[String]) -> Bson {
    match teams {
        [one] => Bson::String(one.clone()),
        many => Bson::Document(doc! {"$in": many}),
    }
}

/// Position after the last record of a page: newest first by (scheduled time, id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub scheduled_ms: UnixMs,
    pub id: String,
}

impl Cursor {
    #[must_use]
    pub fn encode(&self) -> String {
        let hex: String = self.id.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}.{hex}", self.scheduled_ms)
    }

    pub fn decode(text: &str) -> Result<Self, StoreError> {
        let (ms, hex) = text.split_once('.').ok_or(StoreError::BadCursor)?;
        let scheduled_ms = ms.parse().map_err(|_| StoreError::BadCursor)?;
        if hex.len() % 2 != 0 || hex.len() > 1024 {
            return Err(StoreError::BadCursor);
        }
        let bytes: Result<Vec<u8>, _> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16)).collect();
        let id = String::from_utf8(bytes.map_err(|_| StoreError::BadCursor)?).map_err(|_| StoreError::BadCursor)?;
        Ok(Self { scheduled_ms, id })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub executions: Vec<ExecutionRecord>,
    pub next_cursor: Option<String>,
    /// True when the page ended at the scan budget rather than at `limit` records: everything
    /// newer than `next_cursor` was searched, and older records may still match.
    pub partial: bool,
}

/// Per-job outcome counts and latest execution.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobSummary {
    pub last_execution: Option<LastExecution>,
    pub succeeded_24h: u64,
    pub failed_24h: u64,
    pub total_24h: u64,
}

/// Executions per status scheduled in one time bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActivityBucket {
    pub start_ms: UnixMs,
    pub counts: std::collections::BTreeMap<Status, u64>,
}

/// An integer BSON value of any width.
fn int(value: Option<&Bson>) -> Option<i64> {
    match value? {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        #[allow(clippy::cast_possible_truncation)]
        Bson::Double(v) => Some(*v as i64),
        _ => None,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LastExecution {
    pub id: String,
    pub status: Status,
    pub scheduled_at: String,
}

/// Lowercased words of `text` for the `words` field: letters, digits and `_`.
#[must_use]
pub fn words(text: &str) -> Vec<String> {
    words_of(std::iter::once(text))
}

/// The distinct lowercased words of the texts, in order of first appearance, at most
/// `MAX_WORDS` of them.
fn words_of<'a>(texts: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for text in texts {
        for w in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !WORD_LEN.contains(&w.len()) {
                continue;
            }
            let w = w.to_lowercase();
            if seen.insert(w.clone()) {
                out.push(w);
                if out.len() >= MAX_WORDS {
                    return out;
                }
            }
        }
    }
    out
}

fn date(rfc: Option<&str>) -> Bson {
    match rfc.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) {
        Some(t) => Bson::DateTime(BsonDate::from_millis(t.timestamp_millis())),
        None => Bson::Null,
    }
}

fn rfc(value: Option<&Bson>) -> Option<String> {
    match value {
        Some(Bson::DateTime(d)) => Some(etcron_model::rfc3339_ms(d.timestamp_millis())),
        _ => None,
    }
}

/// The stored document of a record (see [`to_raw_document`]).
#[must_use]
pub fn to_document(r: &ExecutionRecord) -> Document {
    Document::try_from(to_raw_document(r).as_ref()).unwrap_or_default()
}

/// The stored document of a record, built as raw BSON (what the driver sends: no map of
/// fields is made on the record path). Absent values are left out rather than stored null.
#[must_use]
pub fn to_raw_document(r: &ExecutionRecord) -> RawDocumentBuf {
    let (output, cut) = stored_output(&r.output);
    let mut d = RawDocumentBuf::new();
    d.append("_id", r.id.to_string());
    d.append("job", r.job.as_str());
    if let Some(team) = &r.team {
        d.append("team", team.as_str());
    }
    let mut date = |key: &str, rfc: Option<&str>| {
        if let Some(t) = rfc.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) {
            d.append(key, BsonDate::from_millis(t.timestamp_millis()));
        }
    };
    date("scheduled_at", Some(&r.scheduled_at));
    date("claimed_at", r.claimed_at.as_deref());
    date("started_at", r.started_at.as_deref());
    date("finished_at", r.finished_at.as_deref());
    d.append("scheduled_ms", r.scheduled_ms);
    if let Some(ms) = r.duration_ms {
        d.append("duration_ms", i64::try_from(ms).unwrap_or(i64::MAX));
    }
    d.append("worker_id", r.worker_id.as_str());
    d.append("hostname", r.hostname.as_str());
    d.append("attempt", i64::from(r.attempt));
    d.append("trigger", r.trigger.as_str());
    d.append("status", r.status.as_str());
    let mut opt_i64 = |key: &str, v: Option<i64>| {
        if let Some(v) = v {
            d.append(key, v);
        }
    };
    opt_i64("exit_code", r.exit_code.map(i64::from));
    opt_i64("signal", r.signal.map(i64::from));
    opt_i64("fencing_token", r.fencing_token);
    opt_i64("http_status", r.http_status.map(i64::from));
    d.append("output", output.as_ref());
    d.append("output_truncated", r.output_truncated || cut);
    let mut opt_str = |key: &str, v: Option<&str>| {
        if let Some(v) = v {
            d.append(key, v);
        }
    };
    opt_str("error", r.error.as_deref());
    opt_str("reason", r.reason.as_deref());
    opt_str("parent", r.parent.as_ref().map(ToString::to_string).as_deref());
    if let Some((i, n)) = r.shard {
        let mut shard = RawArrayBuf::new();
        shard.push(i64::from(i));
        shard.push(i64::from(n));
        d.append("shard", shard);
    }
    if !r.params.is_empty() {
        d.append("params", params_document(&r.params));
    }
    if let Some(ms) = r.jitter_ms {
        d.append("jitter_ms", ms);
    }
    reports_document(&mut d, &r.reports);
    let mut terms = RawArrayBuf::new();
    let extra = [r.error.as_deref(), r.reason.as_deref()];
    for w in words_of(std::iter::once(output.as_ref()).chain(extra.into_iter().flatten())) {
        terms.push(w);
    }
    d.append("words", terms);
    d
}

/// What the task reported, as stored: `progress`, `checkpoint` and `resumed_from` as documents
/// (a value BSON cannot hold is left out).
fn reports_document(d: &mut RawDocumentBuf, reports: &etcron_model::record::TaskReports) {
    let fields = [
        ("progress", reports.progress.as_ref().and_then(|p| mongodb::bson::to_bson(p).ok())),
        ("checkpoint", reports.checkpoint.as_ref().and_then(|c| mongodb::bson::to_bson(c).ok())),
        ("resumed_from", reports.resumed_from.as_ref().and_then(|r| mongodb::bson::to_bson(r).ok())),
    ];
    for (key, value) in fields {
        if let Some(raw) = value.and_then(|v| mongodb::bson::RawBson::try_from(v).ok()) {
            d.append(key, raw);
        }
    }
}

/// The reports of a stored record (each as JSON; one that does not read is left out).
fn reports_of(d: &Document) -> etcron_model::record::TaskReports {
    let json = |key: &str| d.get(key).map(|b| b.clone().into_relaxed_extjson());
    etcron_model::record::TaskReports {
        progress: json("progress").and_then(|v| serde_json::from_value(v).ok()),
        checkpoint: json("checkpoint"),
        resumed_from: json("resumed_from").and_then(|v| serde_json::from_value(v).ok()),
    }
}

/// A run's parameters as stored: `{env: {NAME: value}, as_of_ms}`.
fn params_document(params: &RunParams) -> RawDocumentBuf {
    let mut p = RawDocumentBuf::new();
    if !params.env.is_empty() {
        let mut env = RawDocumentBuf::new();
        for (k, v) in &params.env {
            env.append(k.as_str(), v.as_str());
        }
        p.append("env", env);
    }
    if let Some(ms) = params.as_of_ms {
        p.append("as_of_ms", ms);
    }
    if let Some(b) = &params.backfill {
        let mut backfill = RawDocumentBuf::new();
        backfill.append("id", b.id.as_str());
        backfill.append("index", i64::from(b.index));
        p.append("backfill", backfill);
    }
    p
}

/// A run's parameters back from a stored record (none when absent or unreadable).
fn params_of(d: &Document) -> RunParams {
    let Ok(p) = d.get_document("params") else { return RunParams::default() };
    let env = p
        .get_document("env")
        .map(|env| env.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    let as_of_ms = match p.get("as_of_ms") {
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        _ => None,
    };
    let backfill = p.get_document("backfill").ok().and_then(|b| {
        let index = match b.get("index")? {
            Bson::Int64(v) => u32::try_from(*v).ok()?,
            Bson::Int32(v) => u32::try_from(*v).ok()?,
            _ => return None,
        };
        Some(etcron_model::record::BackfillRef { id: b.get_str("id").ok()?.to_owned(), index })
    });
    RunParams { env, as_of_ms, backfill }
}

/// The output as stored: at most `MAX_STORED_OUTPUT` bytes, the head and the tail around a
/// marker; true when cut.
fn stored_output(output: &str) -> (std::borrow::Cow<'_, str>, bool) {
    if output.len() <= MAX_STORED_OUTPUT {
        return (std::borrow::Cow::Borrowed(output), false);
    }
    let floor = |mut i: usize| {
        while !output.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let head = floor(MAX_STORED_OUTPUT / 2);
    let tail = floor(output.len() - MAX_STORED_OUTPUT / 2);
    let cut = tail - head;
    (
        std::borrow::Cow::Owned(format!("{}\n[... {cut} bytes not stored ...]\n{}", &output[..head], &output[tail..])),
        true,
    )
}

/// The execution id and status of a document (ids or statuses written by a newer version are
/// left out).
fn id_and_status(d: &Document) -> Option<(ExecutionId, Status)> {
    let id = d.get_str("_id").ok()?.parse().ok()?;
    let status = bson::from_bson::<Status>(d.get("status")?.clone()).ok()?;
    Some((id, status))
}

/// A stored document back as a record (`output` may be absent in search results).
pub fn from_document(d: &Document) -> Result<ExecutionRecord, StoreError> {
    let bad = |what: &str| StoreError::Failed(format!("stored record has no valid {what}"));
    let id: ExecutionId = d.get_str("_id").map_err(|_| bad("_id"))?.parse().map_err(|_| bad("_id"))?;
    let str_of = |k: &str| d.get_str(k).ok().map(str::to_owned);
    let int_of = |k: &str| match d.get(k) {
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Double(v)) => Some(*v as i64),
        _ => None,
    };
    let status: Status = bson::from_bson(d.get("status").cloned().unwrap_or(Bson::Null)).map_err(|_| bad("status"))?;
    let trigger: TriggerKind =
        bson::from_bson(d.get("trigger").cloned().unwrap_or(Bson::Null)).map_err(|_| bad("trigger"))?;
    Ok(ExecutionRecord {
        job: str_of("job").unwrap_or_else(|| id.job.clone()),
        team: str_of("team"),
        scheduled_at: rfc(d.get("scheduled_at")).unwrap_or_default(),
        scheduled_ms: int_of("scheduled_ms").unwrap_or(0),
        claimed_at: rfc(d.get("claimed_at")),
        started_at: rfc(d.get("started_at")),
        finished_at: rfc(d.get("finished_at")),
        duration_ms: int_of("duration_ms").and_then(|v| u64::try_from(v).ok()),
        worker_id: str_of("worker_id").unwrap_or_default(),
        hostname: str_of("hostname").unwrap_or_default(),
        attempt: int_of("attempt").and_then(|v| u32::try_from(v).ok()).unwrap_or(1),
        trigger,
        status,
        exit_code: int_of("exit_code").and_then(|v| i32::try_from(v).ok()),
        signal: int_of("signal").and_then(|v| i32::try_from(v).ok()),
        output: str_of("output").unwrap_or_default(),
        output_truncated: d.get_bool("output_truncated").unwrap_or(false),
        error: str_of("error"),
        reason: str_of("reason"),
        fencing_token: int_of("fencing_token"),
        parent: str_of("parent").and_then(|p| p.parse().ok()),
        http_status: int_of("http_status").and_then(|v| u16::try_from(v).ok()),
        shard: match d.get_array("shard") {
            Ok(a) if a.len() == 2 => {
                let n = |b: &Bson| match b {
                    Bson::Int32(v) => u32::try_from(*v).ok(),
                    Bson::Int64(v) => u32::try_from(*v).ok(),
                    _ => None,
                };
                n(&a[0]).zip(n(&a[1]))
            }
            _ => None,
        },
        params: params_of(d),
        jitter_ms: int_of("jitter_ms"),
        reports: reports_of(d),
        id,
    })
}

/// Adds to `filter` the time range `[since, until]` on the date field `field` and, for a page
/// after `cursor`, the entries older than the cursor's (time, `_id`) in newest-first order.
/// The cursor narrows the range itself (`field <= its time`) and only the entries at exactly its
/// time are filtered by `_id`, so an index on `(…, field, _id)` is read as one range in order.
pub fn time_page(
    filter: &mut Document,
    field: &str,
    since: Option<UnixMs>,
    until: Option<UnixMs>,
    cursor: Option<&Cursor>,
) {
    let until = match (until, cursor) {
        (Some(u), Some(c)) => Some(u.min(c.scheduled_ms)),
        (u, c) => u.or(c.map(|c| c.scheduled_ms)),
    };
    let mut range = Document::new();
    if let Some(t) = since {
        range.insert("$gte", BsonDate::from_millis(t));
    }
    if let Some(t) = until {
        range.insert("$lte", BsonDate::from_millis(t));
    }
    if !range.is_empty() {
        filter.insert(field, range);
    }
    if let Some(c) = cursor {
        let mut seen = doc! { "_id": {"$gte": &c.id} };
        seen.insert(field, BsonDate::from_millis(c.scheduled_ms));
        filter.insert("$nor", vec![seen]);
    }
}

/// The search indexes, each `{<lead>, status, trigger, scheduled_at: -1, _id: -1}`: one per
/// filter with too many values to list (the job, the worker) and one led by the status for
/// searches with neither. A search reads one index in (scheduled_at, _id) order and stops after
/// `limit` + 1 matches: the status and trigger are listed in full (`$in`) when not filtered, so
/// MongoDB reads the index as one ordered range per (status, trigger) pair and merges them (48
/// at most) instead of sorting. Words (`q`) have no index: each indexed word costs every insert
/// more than all these indexes together (BENCHMARKS.md), so words are checked on the documents.
pub const SEARCH_INDEXES: [(&str, Option<&str>); 4] =
    [("exec_job", Some("job")), ("exec_worker", Some("worker_id")), ("exec_team", Some("team")), ("exec_status", None)];

/// Most documents a search examines for filters its index does not hold (words, or a worker
/// together with a job): it reads at most this many documents of the index's range, newest
/// first, checking each, and the page ends there, `partial`, with a cursor to go on from.
pub const SCAN_BUDGET: i64 = 1_000;

/// Documents a residual search takes from MongoDB per round trip.
const RESIDUAL_BATCH: u32 = 500;

/// Marks a document a residual search read and did not match (see
/// [`SearchPlan::residual_pipeline`]).
const RESIDUAL_SKIP: &str = "skip";

/// A stored document's place in newest-first order.
fn position(d: &mongodb::bson::RawDocument) -> Result<Cursor, StoreError> {
    let bad = |what: &str| StoreError::Failed(format!("stored record has no valid {what}"));
    let id = d.get_str("_id").map_err(|_| bad("_id"))?.to_owned();
    let scheduled_ms = d.get_datetime("scheduled_at").map_err(|_| bad("scheduled_at"))?.timestamp_millis();
    Ok(Cursor { scheduled_ms, id })
}

/// Adds the status and trigger filters, listing every value of one not filtered: the search
/// indexes hold both before the time, so MongoDB then reads one ordered range per pair instead
/// of scanning or sorting.
fn status_and_trigger(filter: &mut Document, statuses: &[Status], trigger: Option<TriggerKind>) {
    let statuses: Vec<&str> =
        if statuses.is_empty() { &Status::ALL[..] } else { statuses }.iter().map(|st| st.as_str()).collect();
    match statuses.as_slice() {
        [one] => filter.insert("status", *one),
        many => filter.insert("status", doc! {"$in": many}),
    };
    match trigger {
        Some(t) => filter.insert("trigger", t.as_str()),
        None => filter.insert("trigger", doc! {"$in": TriggerKind::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>()}),
    };
}

/// Lists every status and trigger in `filter` (see [`status_and_trigger`]), so that a time
/// range is read from the search indexes as ranges instead of a collection scan.
fn any_status_and_trigger(filter: &mut Document) {
    status_and_trigger(filter, &[], None);
}

/// How a search runs: the index, the filter its bounds hold, and the filters checked on the
/// documents the index yields (residual: a worker given with a job, teams given with a job or
/// a worker, and the words).
#[derive(Debug, Clone)]
pub struct SearchPlan {
    pub index: &'static str,
    pub indexed: Document,
    pub worker: Option<String>,
    pub teams: Option<Vec<String>>,
    pub words: Vec<String>,
}

impl SearchPlan {
    /// True when the index holds every filter.
    #[must_use]
    pub fn exact(&self) -> bool {
        self.worker.is_none() && self.teams.is_none() && self.words.is_empty()
    }

    /// The projection and the most documents to read for a page of `limit` when the index holds
    /// every filter: `limit` + 1.
    fn exact_read(limit: i64) -> (Document, i64) {
        (doc! {"output": 0, "words": 0}, limit + 1)
    }

    /// The aggregation a search with residual filters runs: the index range newest first, at
    /// most `SCAN_BUDGET` documents of it, each checked inside MongoDB. A match comes back
    /// whole (without output and words), any other document as its position only (`_id`,
    /// `scheduled_at` and `skip`), so a page ships its matches and not the documents it read.
    fn residual_pipeline(&self) -> Vec<Document> {
        let mut checks = Vec::new();
        if let Some(worker) = &self.worker {
            checks.push(Bson::Document(doc! {"$eq": ["$worker_id", worker]}));
        }
        if let Some(teams) = &self.teams {
            checks.push(Bson::Document(doc! {"$in": [{"$ifNull": ["$team", Bson::Null]}, teams]}));
        }
        if !self.words.is_empty() {
            checks.push(Bson::Document(doc! {"$setIsSubset": [&self.words, {"$ifNull": ["$words", []]}]}));
        }
        vec![
            doc! {"$match": self.indexed.clone()},
            doc! {"$sort": {"scheduled_at": -1, "_id": -1}},
            doc! {"$limit": SCAN_BUDGET},
            doc! {"$project": {"output": 0}},
            doc! {"$replaceWith": {"$cond": [
                {"$and": checks},
                "$$ROOT",
                {"_id": "$_id", "scheduled_at": "$scheduled_at", RESIDUAL_SKIP: true},
            ]}},
            doc! {"$project": {"words": 0}},
        ]
    }

    /// Every filter as one MongoDB filter (what a page's records match).
    #[must_use]
    pub fn filter(&self) -> Document {
        let mut all = self.indexed.clone();
        if let Some(worker) = &self.worker {
            all.insert("worker_id", worker);
        }
        if let Some(teams) = &self.teams {
            all.insert("team", team_filter(teams));
        }
        if !self.words.is_empty() {
            all.insert("words", doc! {"$all": &self.words});
        }
        all
    }
}

/// The plan of a search: the job's index when a job is given, else the worker's, else the
/// teams' when teams are given, else the status's; the words, a worker given with a job, and
/// teams given with a job or a worker are residual.
#[must_use]
pub fn search_plan(s: &Search) -> SearchPlan {
    let mut indexed = Document::new();
    let mut residual_worker = None;
    let mut residual_teams = s.teams.clone();
    let index = match (&s.job, &s.worker, &s.teams) {
        (Some(job), worker, _) => {
            indexed.insert("job", job);
            residual_worker.clone_from(worker);
            "exec_job"
        }
        (None, Some(worker), _) => {
            indexed.insert("worker_id", worker);
            "exec_worker"
        }
        (None, None, Some(teams)) => {
            indexed.insert("team", team_filter(teams));
            residual_teams = None;
            "exec_team"
        }
        (None, None, None) => "exec_status",
    };
    status_and_trigger(&mut indexed, &s.statuses, s.trigger);
    time_page(&mut indexed, "scheduled_at", s.since_ms, s.until_ms, s.cursor.as_ref());
    let words = s.q.as_deref().map(words).unwrap_or_default();
    SearchPlan { index, indexed, worker: residual_worker, teams: residual_teams, words }
}

/// A search of `GET /api/notifications`, newest first.
#[derive(Debug, Clone, Default)]
pub struct NotificationSearch {
    pub job: Option<String>,
    pub execution_id: Option<String>,
    pub event: Option<NotifyEvent>,
    /// Only deliveries whose `team` is one of these (`None`: any), as [`Search::teams`].
    pub teams: Option<Vec<String>>,
    pub limit: i64,
}

/// The stored document of a delivery.
#[must_use]
pub fn notification_document(n: &Delivery) -> Document {
    let attempts: Vec<Document> = n
        .attempts
        .iter()
        .map(|a| {
            doc! {
                "at": date(Some(&a.at)),
                "duration_ms": i64::try_from(a.duration_ms).unwrap_or(i64::MAX),
                "http_status": a.http_status.map(i32::from),
                "error": a.error.as_deref(),
            }
        })
        .collect();
    doc! {
        "_id": &n.id,
        "job": &n.job,
        "team": n.team.as_deref(),
        "execution_id": &n.execution_id,
        "event": n.event.as_str(),
        "target": &n.target,
        "target_name": n.target_name.as_deref(),
        "default_target": n.default_target,
        "format": n.format.as_str(),
        "worker_id": &n.worker_id,
        "state": n.state.as_str(),
        "attempts": attempts,
        "created_at": date(Some(&n.created_at)),
        "finished_at": date(n.finished_at.as_deref()),
    }
}

/// A stored delivery document back as a delivery.
pub fn notification_from_document(d: &Document) -> Result<Delivery, StoreError> {
    let bad = |what: &str| StoreError::Failed(format!("stored notification has no valid {what}"));
    let str_of = |k: &str| d.get_str(k).ok().map(str::to_owned);
    let parse = |k: &str| -> Result<Bson, StoreError> { d.get(k).cloned().ok_or_else(|| bad(k)) };
    let event: NotifyEvent = bson::from_bson(parse("event")?).map_err(|_| bad("event"))?;
    let state: DeliveryState = bson::from_bson(parse("state")?).map_err(|_| bad("state"))?;
    let format: NotifyFormat = bson::from_bson(parse("format")?).unwrap_or_default();
    let attempts = d
        .get_array("attempts")
        .map(|list| {
            list.iter()
                .filter_map(Bson::as_document)
                .map(|a| Attempt {
                    at: rfc(a.get("at")).unwrap_or_default(),
                    duration_ms: int(a.get("duration_ms")).and_then(|v| u64::try_from(v).ok()).unwrap_or(0),
                    http_status: int(a.get("http_status")).and_then(|v| u16::try_from(v).ok()),
                    error: a.get_str("error").ok().map(str::to_owned),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Delivery {
        id: str_of("_id").ok_or_else(|| bad("_id"))?,
        job: str_of("job").unwrap_or_default(),
        team: str_of("team"),
        execution_id: str_of("execution_id").unwrap_or_default(),
        event,
        target: str_of("target").unwrap_or_default(),
        target_name: str_of("target_name"),
        default_target: d.get_bool("default_target").unwrap_or(false),
        format,
        worker_id: str_of("worker_id").unwrap_or_default(),
        state,
        attempts,
        created_at: rfc(d.get("created_at")).unwrap_or_default(),
        finished_at: rfc(d.get("finished_at")),
    })
}

/// The MongoDB-backed store. Connecting is lazy: `connect` succeeds while the server is down.
#[derive(Debug, Clone)]
pub struct MongoStore {
    db: Database,
    executions: Collection<Document>,
    notifications: Collection<Document>,
}

impl MongoStore {
    pub async fn connect(uri: &str, database: &str) -> Result<Self, StoreError> {
        let mut options =
            ClientOptions::parse(uri).await.map_err(|e| StoreError::Failed(format!("invalid MongoDB URI: {e}")))?;
        options.app_name = Some("etcron".to_owned());
        options.server_selection_timeout = Some(Duration::from_secs(3));
        options.connect_timeout = Some(Duration::from_secs(3));
        let client = Client::with_options(options)?;
        let db = client.database(database);
        let executions = db.collection::<Document>(COLLECTION);
        let notifications = db.collection::<Document>(NOTIFICATIONS);
        Ok(Self { db, executions, notifications })
    }

    /// The database, for collections other than `executions` (the master's audit log).
    #[must_use]
    pub fn database(&self) -> &Database {
        &self.db
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.db.run_command(doc! {"ping": 1}).await?;
        Ok(())
    }

    /// Creates every index (idempotent); sets the TTL to `retention`, changing it if needed.
    pub async fn ensure_indexes(&self, retention: Duration) -> Result<(), StoreError> {
        let models: Vec<IndexModel> = SEARCH_INDEXES
            .iter()
            .map(|(name, lead)| {
                let mut keys = Document::new();
                if let Some(field) = lead {
                    keys.insert(*field, 1);
                }
                keys.insert("status", 1);
                keys.insert("trigger", 1);
                keys.insert("scheduled_at", -1);
                keys.insert("_id", -1);
                // Only records that have a team are in the team's index: a cluster without
                // teams pays nothing for it on each insert (BENCHMARKS.md).
                let partial = (*lead == Some("team")).then(|| doc! {"team": {"$exists": true}});
                let options = IndexOptions::builder().name((*name).to_owned()).partial_filter_expression(partial);
                IndexModel::builder().keys(keys).options(options.build()).build()
            })
            .collect();
        self.ensure_collection().await?;
        self.executions.create_indexes(models).await?;
        self.drop_obsolete_indexes().await?;
        self.ensure_ttl(&self.executions, COLLECTION, TTL_INDEX, "finished_at", retention).await?;
        self.ensure_notification_indexes(retention).await
    }

    /// Creates `executions` as a clustered collection (documents kept in `_id` order, so no
    /// separate `_id` index for every insert to update), its blocks compressed with zstd, unless
    /// it exists. A collection an
    /// earlier version made stays as it is: MongoDB cannot cluster it in place.
    async fn ensure_collection(&self) -> Result<(), StoreError> {
        let names = self.db.list_collection_names().filter(doc! {"name": COLLECTION}).await?;
        if !names.is_empty() {
            return Ok(());
        }
        let create = self
            .db
            .create_collection(COLLECTION)
            .clustered_index(mongodb::options::ClusteredIndex::default())
            .storage_engine(doc! {"wiredTiger": {"configString": "block_compressor=zstd"}});
        match create.await {
            Ok(()) => Ok(()),
            // Made meanwhile by another master.
            Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == NAMESPACE_EXISTS) => {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Drops the search indexes earlier versions made (every `exec_*` index that is neither a
    /// search index nor the TTL index): each one costs every insert a write.
    async fn drop_obsolete_indexes(&self) -> Result<(), StoreError> {
        let names = match self.executions.list_index_names().await {
            Ok(names) => names,
            // No collection yet, so no index.
            Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == NAMESPACE_NOT_FOUND) => {
                return Ok(())
            }
            Err(e) => return Err(e.into()),
        };
        for name in names {
            let current = name == TTL_INDEX || SEARCH_INDEXES.iter().any(|(n, _)| *n == name);
            if name.starts_with("exec_") && !current {
                tracing::info!(index = %name, "dropping an execution index this version no longer uses");
                self.executions.drop_index(name).await?;
            }
        }
        Ok(())
    }

    /// The `notifications` indexes: one per filter of `GET /api/notifications` with the time,
    /// and a TTL on `created_at` (a delivery whose worker died before it finished still goes).
    async fn ensure_notification_indexes(&self, retention: Duration) -> Result<(), StoreError> {
        let index = |name: &str, keys: Document| {
            IndexModel::builder().keys(keys).options(IndexOptions::builder().name(name.to_owned()).build()).build()
        };
        let models = vec![
            index("notif_job_time", doc! {"job": 1, "created_at": -1, "_id": -1}),
            index("notif_execution", doc! {"execution_id": 1, "created_at": -1}),
            index("notif_event_time", doc! {"event": 1, "created_at": -1, "_id": -1}),
            index("notif_time", doc! {"created_at": -1, "_id": -1}),
            index("notif_team_time", doc! {"team": 1, "created_at": -1, "_id": -1}),
        ];
        self.notifications.create_indexes(models).await?;
        self.ensure_ttl(&self.notifications, NOTIFICATIONS, NOTIFICATIONS_TTL_INDEX, "created_at", retention).await
    }

    /// Creates the TTL index `name` on `field`, or changes its expiry in place to `retention`.
    async fn ensure_ttl(
        &self,
        collection: &Collection<Document>,
        collection_name: &str,
        name: &str,
        field: &str,
        retention: Duration,
    ) -> Result<(), StoreError> {
        let ttl_secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
        let existing: Vec<mongodb::IndexModel> = collection.list_indexes().await?.try_collect().await?;
        let current = existing.iter().find(|m| m.options.as_ref().and_then(|o| o.name.as_deref()) == Some(name));
        match current.and_then(|m| m.options.as_ref()?.expire_after) {
            Some(d) if d.as_secs() == retention.as_secs() => {}
            Some(_) => {
                self.db
                    .run_command(
                        doc! {"collMod": collection_name, "index": {"name": name, "expireAfterSeconds": ttl_secs}},
                    )
                    .await?;
            }
            None => {
                let mut keys = Document::new();
                keys.insert(field, 1);
                let ttl = IndexModel::builder()
                    .keys(keys)
                    .options(IndexOptions::builder().name(name.to_owned()).expire_after(retention).build())
                    .build();
                collection.create_index(ttl).await?;
            }
        }
        Ok(())
    }

    /// Writes the latest state of each delivery in one round trip: whole-document upserts by
    /// delivery id, so a replay is harmless and the newest write wins.
    pub async fn write_notifications(&self, batch: &[Delivery]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let updates: Vec<Document> =
            batch.iter().map(|n| doc! {"q": {"_id": &n.id}, "u": notification_document(n), "upsert": true}).collect();
        let reply = self.db.run_command(doc! {"update": NOTIFICATIONS, "updates": updates, "ordered": false}).await?;
        if let Ok(errors) = reply.get_array("writeErrors") {
            if let Some(first) = errors.iter().filter_map(|e| e.as_document()).next() {
                // Including 11000 (two upserts of a new id raced): the caller writes again.
                return Err(StoreError::Failed(format!(
                    "{} notification write errors, first: {}",
                    errors.len(),
                    first.get_str("errmsg").unwrap_or("?")
                )));
            }
        }
        Ok(())
    }

    /// Deliveries matching `s`, newest first (by creation, then id).
    pub async fn notifications(&self, s: &NotificationSearch) -> Result<Vec<Delivery>, StoreError> {
        let mut filter = Document::new();
        if let Some(job) = &s.job {
            filter.insert("job", job);
        }
        if let Some(id) = &s.execution_id {
            filter.insert("execution_id", id);
        }
        if let Some(event) = s.event {
            filter.insert("event", event.as_str());
        }
        if let Some(teams) = &s.teams {
            filter.insert("team", team_filter(teams));
        }
        let options =
            FindOptions::builder().sort(doc! {"created_at": -1, "_id": -1}).limit(s.limit.clamp(1, MAX_LIMIT)).build();
        let docs: Vec<Document> = self.notifications.find(filter).with_options(options).await?.try_collect().await?;
        docs.iter().map(notification_from_document).collect()
    }

    /// The TTL of the retention index, if it exists.
    pub async fn retention(&self) -> Result<Option<Duration>, StoreError> {
        let existing: Vec<mongodb::IndexModel> = self.executions.list_indexes().await?.try_collect().await?;
        Ok(existing
            .iter()
            .find(|m| m.options.as_ref().and_then(|o| o.name.as_deref()) == Some(TTL_INDEX))
            .and_then(|m| m.options.as_ref()?.expire_after))
    }

    /// Writes a batch idempotently; see [`MongoStore::write_known`].
    pub async fn write(&self, batch: &[RecordWrite]) -> Result<(), StoreError> {
        self.write_known(batch, |_| false).await
    }

    /// Writes a batch idempotently in one or two round trips. Every record is inserted
    /// (`insertMany`, unordered): a new record, which nearly all are, costs MongoDB one insert
    /// and no lookup, and upserts cost about twice as much. An insert whose id is taken
    /// (duplicate key) is settled by its mode: a `running` record ([`WriteMode::IfAbsent`]) is
    /// done, since whatever is stored is the same run, at least as far along; a final record
    /// ([`WriteMode::Replace`]) replaces the stored one in the second trip, a `lost` one
    /// ([`WriteMode::OverRunning`]) only a stored `running` record. `stored` names the
    /// final records whose `running` record the caller wrote before: they go to the replace
    /// straight away instead of failing an insert first.
    pub async fn write_known(
        &self,
        batch: &[RecordWrite],
        stored: impl Fn(&RecordWrite) -> bool,
    ) -> Result<(), StoreError> {
        let (mut replace, insert): (Vec<&RecordWrite>, Vec<&RecordWrite>) =
            batch.iter().partition(|w| w.mode == WriteMode::Replace && stored(w));
        if !insert.is_empty() {
            let taken = self.insert(&insert).await?;
            replace.extend(taken.into_iter().filter_map(|i| insert.get(i)).filter(|w| w.mode.is_final()));
        }
        self.replace(&replace).await
    }

    /// Inserts records (unordered); returns the positions whose id was taken already.
    async fn insert(&self, writes: &[&RecordWrite]) -> Result<Vec<usize>, StoreError> {
        use mongodb::error::ErrorKind;
        let docs: Vec<RawDocumentBuf> = writes.iter().map(|w| to_raw_document(&w.record)).collect();
        let err = match self.db.collection::<RawDocumentBuf>(COLLECTION).insert_many(docs).ordered(false).await {
            Ok(_) => return Ok(Vec::new()),
            Err(e) => e,
        };
        let ErrorKind::InsertMany(failure) = err.kind.as_ref() else { return Err(err.into()) };
        if let Some(wce) = &failure.write_concern_error {
            // Inserted, but not known to be durable: the caller keeps the batch and writes it again.
            return Err(StoreError::Unavailable(format!("write concern not satisfied: {}", wce.message)));
        }
        let errors = failure.write_errors.as_deref().unwrap_or_default();
        if let Some(real) = errors.iter().find(|e| e.code != DUPLICATE_KEY) {
            return Err(StoreError::Failed(format!(
                "{} of {} record inserts failed, first (code {}): {}",
                errors.iter().filter(|e| e.code != DUPLICATE_KEY).count(),
                writes.len(),
                real.code,
                real.message
            )));
        }
        Ok(errors.iter().map(|e| e.index).collect())
    }

    /// Replaces stored records whole (upserts by `_id`; an `OverRunning` write only a stored
    /// `running` record), in `update` commands of at most `UPDATE_COMMAND_BYTES` each.
    async fn replace(&self, writes: &[&RecordWrite]) -> Result<(), StoreError> {
        let mut updates: Vec<Document> = Vec::new();
        let mut bytes = 0usize;
        for (n, w) in writes.iter().enumerate() {
            let d = to_document(&w.record);
            let id = d.get("_id").cloned().unwrap_or(Bson::Null);
            bytes += w.record.output.len() + 1024;
            updates.push(match w.mode {
                WriteMode::OverRunning => doc! {"q": {"_id": id, "status": "running"}, "u": d, "upsert": false},
                _ => doc! {"q": {"_id": id}, "u": d, "upsert": true},
            });
            if bytes >= UPDATE_COMMAND_BYTES || n + 1 == writes.len() {
                self.update_command(std::mem::take(&mut updates)).await?;
                bytes = 0;
            }
        }
        Ok(())
    }

    async fn update_command(&self, updates: Vec<Document>) -> Result<(), StoreError> {
        let reply = self.db.run_command(doc! {"update": COLLECTION, "updates": updates, "ordered": false}).await?;
        if let Ok(errors) = reply.get_array("writeErrors") {
            // Including a duplicate key: two upserts of a new id raced; the caller writes again
            // (the batch is idempotent).
            if let Some(first) = errors.iter().filter_map(Bson::as_document).next() {
                return Err(StoreError::Failed(format!(
                    "{} record replacements failed, first: {}",
                    errors.len(),
                    first.get_str("errmsg").unwrap_or("?")
                )));
            }
        }
        if let Ok(wce) = reply.get_document("writeConcernError") {
            return Err(StoreError::Unavailable(format!(
                "write concern not satisfied: {}",
                wce.get_str("errmsg").unwrap_or("?")
            )));
        }
        Ok(())
    }

    pub async fn get(&self, id: &str) -> Result<Option<ExecutionRecord>, StoreError> {
        match self.executions.find_one(doc! {"_id": id}).projection(doc! {"words": 0}).await? {
            Some(d) => Ok(Some(from_document(&d)?)),
            None => Ok(None),
        }
    }

    /// The attempt and status of every record of `job`'s schedule ticks scheduled in
    /// `from_ms..=to_ms` (any part): what a backfill decides from. At most `limit` records are
    /// read; `None` when there are more (the caller names the range as too wide).
    pub async fn tick_records(
        &self,
        job: &str,
        (from_ms, to_ms): (UnixMs, UnixMs),
        limit: usize,
    ) -> Result<Option<Vec<(ExecutionId, Status)>>, StoreError> {
        let mut filter = doc! {"job": job, "scheduled_at": {
        "$gte": BsonDate::from_millis(from_ms), "$lte": BsonDate::from_millis(to_ms)}};
        any_status_and_trigger(&mut filter);
        let cap = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
        let docs: Vec<Document> = self
            .executions
            .find(filter)
            .projection(doc! {"_id": 1, "status": 1})
            .hint(mongodb::options::Hint::Name("exec_job".to_owned()))
            .limit(cap)
            .await?
            .try_collect()
            .await?;
        if docs.len() > limit {
            return Ok(None);
        }
        Ok(Some(docs.iter().filter_map(id_and_status).collect()))
    }

    /// The status of each of `ids` that has a record.
    pub async fn statuses(&self, ids: &[String]) -> Result<HashMap<String, Status>, StoreError> {
        let docs: Vec<Document> = self
            .executions
            .find(doc! {"_id": {"$in": ids}})
            .projection(doc! {"_id": 1, "status": 1})
            .await?
            .try_collect()
            .await?;
        Ok(docs.iter().filter_map(id_and_status).map(|(id, status)| (id.to_string(), status)).collect())
    }

    /// Records matching `s`, newest first (by scheduled time, then id). A search whose filters
    /// the index holds reads `limit` + 1 entries. One with residual filters (see [`search_plan`])
    /// reads at most `SCAN_BUDGET` documents of its index range, checked inside MongoDB: a page
    /// that ends there with fewer than `limit` records is `partial`, and its cursor is the last
    /// document read.
    pub async fn search(&self, s: &Search) -> Result<Page, StoreError> {
        let limit = s.limit.clamp(1, MAX_LIMIT);
        let plan = search_plan(s);
        let hint = mongodb::options::Hint::Name(plan.index.to_owned());
        let raw = self.db.collection::<RawDocumentBuf>(COLLECTION);
        let (mut cursor, read) = if plan.exact() {
            let (projection, read) = SearchPlan::exact_read(limit);
            let options = FindOptions::builder()
                .sort(doc! {"scheduled_at": -1, "_id": -1})
                .limit(read)
                .batch_size(u32::try_from(read).unwrap_or(1))
                .projection(projection)
                .hint(hint)
                .build();
            (raw.find(plan.indexed.clone()).with_options(options).await?, read)
        } else {
            // Stops reading once the page is full: MongoDB checks no further than the batch
            // under way.
            let options = AggregateOptions::builder().hint(hint).batch_size(RESIDUAL_BATCH).build();
            let cursor = raw.aggregate(plan.residual_pipeline()).with_options(options).await?;
            (cursor.with_type::<RawDocumentBuf>(), SCAN_BUDGET)
        };
        let (mut executions, mut examined, mut last) = (Vec::new(), 0, None);
        while let Some(d) = cursor.try_next().await? {
            examined += 1;
            if !plan.exact() {
                last = Some(position(&d)?);
            }
            if d.get_bool(RESIDUAL_SKIP).unwrap_or(false) {
                continue;
            }
            let d = Document::try_from(d.as_ref()).map_err(|e| StoreError::Failed(e.to_string()))?;
            executions.push(from_document(&d)?);
            if executions.len() as i64 > limit {
                break;
            }
        }
        if executions.len() as i64 > limit {
            executions.truncate(usize::try_from(limit).unwrap_or(0));
            let next = executions.last().map(|r| Cursor { scheduled_ms: r.scheduled_ms, id: r.id.to_string() });
            return Ok(Page { executions, next_cursor: next.map(|c| c.encode()), partial: false });
        }
        // The index range ended, or the budget did (more may match further on).
        let partial = examined == read && !plan.exact();
        let next_cursor = if partial { last.map(|c| c.encode()) } else { None };
        Ok(Page { executions, next_cursor, partial })
    }

    /// MongoDB's `explain` (execution statistics) of the query `search` runs for `s`, read to
    /// its end (at most `limit` + 1 entries, or `SCAN_BUDGET` for residual filters). For the
    /// aggregation of a residual search, the explain of its index read (its `$cursor` stage).
    pub async fn explain_search(&self, s: &Search) -> Result<Document, StoreError> {
        let plan = search_plan(s);
        let sort = doc! {"scheduled_at": -1, "_id": -1};
        let command = if plan.exact() {
            let (projection, read) = SearchPlan::exact_read(s.limit.clamp(1, MAX_LIMIT));
            doc! {
                "find": COLLECTION, "filter": plan.indexed, "sort": sort, "limit": read,
                "projection": projection, "hint": plan.index,
            }
        } else {
            doc! {"aggregate": COLLECTION, "pipeline": plan.residual_pipeline(), "cursor": {}, "hint": plan.index}
        };
        let explain = self.db.run_command(doc! {"explain": command, "verbosity": "executionStats"}).await?;
        let cursor_stage = explain
            .get_array("stages")
            .ok()
            .and_then(|stages| stages.first())
            .and_then(Bson::as_document)
            .and_then(|first| first.get_document("$cursor").ok())
            .cloned();
        Ok(cursor_stage.unwrap_or(explain))
    }

    /// Executions scheduled in `[since_ms, until_ms)` counted by status in buckets of
    /// `bucket_ms` (aligned to the epoch), optionally of one job, and only of `teams` when
    /// given ([`Search::teams`]); one aggregation served by the time index. Buckets without
    /// executions are left out.
    pub async fn activity(
        &self,
        since_ms: UnixMs,
        until_ms: UnixMs,
        bucket_ms: i64,
        (job, teams): (Option<&str>, Option<&[String]>),
    ) -> Result<Vec<ActivityBucket>, StoreError> {
        let mut matcher = doc! {"scheduled_at": {
        "$gte": BsonDate::from_millis(since_ms), "$lt": BsonDate::from_millis(until_ms)}};
        if let Some(job) = job {
            matcher.insert("job", job);
        }
        if let Some(teams) = teams {
            matcher.insert("team", team_filter(teams));
        }
        any_status_and_trigger(&mut matcher);
        let bucket = doc! {"$subtract": ["$scheduled_ms", {"$mod": ["$scheduled_ms", bucket_ms]}]};
        let pipeline = vec![
            doc! {"$match": matcher},
            doc! {"$group": {"_id": {"start": bucket, "status": "$status"}, "n": {"$sum": 1}}},
        ];
        let docs: Vec<Document> = self.executions.aggregate(pipeline).await?.try_collect().await?;
        let mut out: Vec<ActivityBucket> = Vec::new();
        for d in docs {
            let Ok(key) = d.get_document("_id") else { continue };
            let (Some(start), Ok(status)) = (int(key.get("start")), key.get_str("status")) else { continue };
            let Ok(status) = bson::from_bson::<Status>(Bson::String(status.to_owned())) else { continue };
            let count = int(d.get("n")).and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
            match out.iter_mut().find(|b| b.start_ms == start) {
                Some(b) => {
                    b.counts.insert(status, count);
                }
                None => out.push(ActivityBucket { start_ms: start, counts: [(status, count)].into_iter().collect() }),
            }
        }
        out.sort_by_key(|b| b.start_ms);
        Ok(out)
    }

    /// Outcome counts since `since_ms` and the latest execution of each job seen since then
    /// (only of records of `teams` when given, [`Search::teams`]).
    pub async fn summaries(
        &self,
        since_ms: UnixMs,
        job: Option<&str>,
        teams: Option<&[String]>,
    ) -> Result<HashMap<String, JobSummary>, StoreError> {
        let mut matcher = doc! {"scheduled_at": {"$gte": BsonDate::from_millis(since_ms)}};
        if let Some(job) = job {
            matcher.insert("job", job);
        }
        if let Some(teams) = teams {
            matcher.insert("team", team_filter(teams));
        }
        any_status_and_trigger(&mut matcher);
        let pipeline = vec![
            doc! {"$match": matcher},
            doc! {"$sort": {"scheduled_at": -1, "_id": -1}},
            doc! {"$group": {
                "_id": "$job",
                "last_id": {"$first": "$_id"},
                "last_status": {"$first": "$status"},
                "last_scheduled_at": {"$first": "$scheduled_at"},
                "total": {"$sum": 1},
                "succeeded": {"$sum": {"$cond": [{"$eq": ["$status", "succeeded"]}, 1, 0]}},
                "failed": {"$sum": {"$cond": [{"$in": ["$status", ["failed", "timed_out", "lost"]]}, 1, 0]}},
            }},
        ];
        let docs: Vec<Document> = self.executions.aggregate(pipeline).await?.try_collect().await?;
        let count = |d: &Document, k: &str| match d.get(k) {
            Some(Bson::Int32(v)) => u64::try_from(*v).unwrap_or(0),
            Some(Bson::Int64(v)) => u64::try_from(*v).unwrap_or(0),
            Some(Bson::Double(v)) => *v as u64,
            _ => 0,
        };
        let mut out = HashMap::new();
        for d in docs {
            let Ok(job) = d.get_str("_id") else { continue };
            let last = match (d.get_str("last_id"), d.get("last_status").cloned().map(bson::from_bson::<Status>)) {
                (Ok(id), Some(Ok(status))) => Some(LastExecution {
                    id: id.to_owned(),
                    status,
                    scheduled_at: rfc(d.get("last_scheduled_at")).unwrap_or_default(),
                }),
                _ => None,
            };
            out.insert(
                job.to_owned(),
                JobSummary {
                    last_execution: last,
                    succeeded_24h: count(&d, "succeeded"),
                    failed_24h: count(&d, "failed"),
                    total_24h: count(&d, "total"),
                },
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_before_the_indexes_exist_is_unavailable_not_an_internal_error() {
        let command = |code: i32, message: &str| -> mongodb::error::Error {
            let err: mongodb::error::CommandError =
                mongodb::bson::from_document(doc! {"code": code, "codeName": "BadValue", "errmsg": message})
                    .unwrap_or_else(|e| panic!("{e}"));
            mongodb::error::ErrorKind::Command(err).into()
        };
        let missing = command(2, "error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index");
        assert!(matches!(StoreError::from(missing), StoreError::Unavailable(m) if m.contains("not created yet")));
        assert!(matches!(StoreError::from(command(2, "some other bad value")), StoreError::Failed(_)));
    }
    use etcron_model::keys::Tick;

    fn record() -> ExecutionRecord {
        ExecutionRecord {
            id: ExecutionId::new("a", Tick::Scheduled(1_700_000_000_000)),
            job: "a".into(),
            team: Some("payments".into()),
            scheduled_at: etcron_model::rfc3339_ms(1_700_000_000_000),
            scheduled_ms: 1_700_000_000_000,
            claimed_at: Some(etcron_model::rfc3339_ms(1_700_000_000_004)),
            started_at: Some(etcron_model::rfc3339_ms(1_700_000_000_005)),
            finished_at: None,
            duration_ms: None,
            worker_id: "w1".into(),
            hostname: "h".into(),
            attempt: 1,
            trigger: TriggerKind::Schedule,
            status: Status::Running,
            exit_code: None,
            signal: None,
            output: "Hello, World! disk_full at /var".into(),
            output_truncated: false,
            error: Some("exit code 3".into()),
            reason: None,
            fencing_token: Some(42),
            parent: None,
            http_status: None,
            shard: None,
            params: RunParams::default(),
            jitter_ms: None,
            reports: Default::default(),
        }
    }

    #[test]
    fn documents_round_trip() {
        let r = record();
        let d = to_document(&r);
        assert!(matches!(d.get("scheduled_at"), Some(Bson::DateTime(_))));
        assert_eq!(from_document(&d).unwrap(), r);
        let with_params = ExecutionRecord {
            params: RunParams {
                env: [("DAY".to_owned(), "2026-11-01".to_owned())].into_iter().collect(),
                as_of_ms: Some(1_793_491_200_000),
                backfill: Some(etcron_model::record::BackfillRef { id: "19abc0042".to_owned(), index: 7 }),
            },
            jitter_ms: Some(12_345),
            reports: Default::default(),
            ..record()
        };
        assert_eq!(from_document(&to_document(&with_params)).unwrap(), with_params);
    }

    #[test]
    fn output_too_large_for_a_document_keeps_head_and_tail() {
        let mut r = record();
        r.output = format!("é{}end", "x".repeat(MAX_STORED_OUTPUT + 10));
        let d = to_document(&r);
        let stored = d.get_str("output").unwrap();
        assert!(stored.len() <= MAX_STORED_OUTPUT + 64, "{}", stored.len());
        assert!(stored.starts_with('é') && stored.ends_with("end") && stored.contains("bytes not stored"));
        assert_eq!(d.get_bool("output_truncated"), Ok(true));
        assert_eq!(to_document(&record()).get_str("output").unwrap(), record().output);
    }

    #[test]
    fn words_are_lowercased_deduplicated_and_bounded() {
        assert_eq!(words("Hello, hello WORLD disk_full a /var/log"), ["hello", "world", "disk_full", "var", "log"]);
        let many: String = (0..5_000).map(|i| format!("w{i} ")).collect();
        assert_eq!(words(&many).len(), MAX_WORDS);
        let d = to_document(&record());
        let indexed: Vec<&str> = d.get_array("words").unwrap().iter().filter_map(|b| b.as_str()).collect();
        assert!(indexed.contains(&"disk_full") && indexed.contains(&"exit"), "{indexed:?}");
    }

    #[test]
    fn notification_documents_round_trip() {
        let n = Delivery {
            id: "a@1700000000000#1/failure/0".into(),
            job: "a".into(),
            team: Some("payments".into()),
            execution_id: "a@1700000000000#1".into(),
            event: NotifyEvent::Failure,
            target: "https://hooks.slack.com/…".into(),
            target_name: Some("ops".into()),
            default_target: false,
            format: NotifyFormat::Slack,
            worker_id: "w1".into(),
            state: DeliveryState::Delivered,
            attempts: vec![
                Attempt {
                    at: etcron_model::rfc3339_ms(1_700_000_000_100),
                    duration_ms: 12,
                    http_status: Some(500),
                    error: Some("HTTP 500".into()),
                },
                Attempt {
                    at: etcron_model::rfc3339_ms(1_700_000_001_200),
                    duration_ms: 3,
                    http_status: Some(200),
                    error: None,
                },
            ],
            created_at: etcron_model::rfc3339_ms(1_700_000_000_050),
            finished_at: Some(etcron_model::rfc3339_ms(1_700_000_001_203)),
        };
        let d = notification_document(&n);
        assert!(matches!(d.get("created_at"), Some(Bson::DateTime(_))));
        assert_eq!(notification_from_document(&d).unwrap(), n);
        let pending = Delivery { state: DeliveryState::Pending, finished_at: None, attempts: Vec::new(), ..n };
        assert_eq!(notification_from_document(&notification_document(&pending)).unwrap(), pending);
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = Cursor { scheduled_ms: 1_700_000_000_000, id: "job@1700000000000#2".into() };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        for bad in ["", "x", "1.zz", "1.abc", "nope.00"] {
            assert!(Cursor::decode(bad).is_err(), "{bad}");
        }
    }
}
