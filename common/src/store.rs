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
use mongodb::bson::{self, doc, Bson, DateTime as BsonDate, Document};
use mongodb::options::{ClientOptions, FindOptions, IndexOptions};
use mongodb::{Client, Collection, Database, IndexModel};
use serde::{Deserialize, Serialize};

use crate::keys::ExecutionId;
use crate::model::{ExecutionRecord, Status, TriggerKind};
use crate::notify::{Attempt, Delivery, DeliveryState, NotifyEvent, NotifyFormat};
use crate::UnixMs;

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

impl From<mongodb::error::Error> for StoreError {
    fn from(e: mongodb::error::Error) -> Self {
        use mongodb::error::ErrorKind;
        match *e.kind {
            ErrorKind::ServerSelection { .. } | ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => {
                StoreError::Unavailable(e.to_string())
            }
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
    pub limit: i64,
    pub cursor: Option<Cursor>,
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

/// Lowercased words of `text` for the `words` index: ASCII letters, digits and `_`.
#[must_use]
pub fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for w in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if !WORD_LEN.contains(&w.len()) {
            continue;
        }
        let w = w.to_lowercase();
        if seen.insert(w.clone()) {
            out.push(w);
            if out.len() >= MAX_WORDS {
                break;
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
        Some(Bson::DateTime(d)) => Some(crate::rfc3339_ms(d.timestamp_millis())),
        _ => None,
    }
}

/// The stored document of a record.
#[must_use]
pub fn to_document(r: &ExecutionRecord) -> Document {
    let mut text = r.output.clone();
    if let Some(e) = &r.error {
        text.push(' ');
        text.push_str(e);
    }
    if let Some(reason) = &r.reason {
        text.push(' ');
        text.push_str(reason);
    }
    doc! {
        "_id": r.id.to_string(),
        "job": &r.job,
        "scheduled_at": date(Some(&r.scheduled_at)),
        "scheduled_ms": r.scheduled_ms,
        "claimed_at": date(r.claimed_at.as_deref()),
        "started_at": date(r.started_at.as_deref()),
        "finished_at": date(r.finished_at.as_deref()),
        "duration_ms": r.duration_ms.map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
        "worker_id": &r.worker_id,
        "hostname": &r.hostname,
        "attempt": i64::from(r.attempt),
        "trigger": bson::to_bson(&r.trigger).unwrap_or(Bson::Null),
        "status": r.status.as_str(),
        "exit_code": r.exit_code,
        "signal": r.signal,
        "output": &r.output,
        "output_truncated": r.output_truncated,
        "error": r.error.as_deref(),
        "reason": r.reason.as_deref(),
        "fencing_token": r.fencing_token,
        "parent": r.parent.as_ref().map(ToString::to_string),
        "http_status": r.http_status.map(i32::from),
        "shard": r.shard.map(|(i, n)| vec![i64::from(i), i64::from(n)]),
        "words": words(&text),
    }
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
        id,
    })
}

/// Adds to `filter` the time range `[since, until]` on the date field `field` and, for a page
/// after `cursor`, the entries older than the cursor's (time, `_id`) in newest-first order.
pub fn time_page(
    filter: &mut Document,
    field: &str,
    since: Option<UnixMs>,
    until: Option<UnixMs>,
    cursor: Option<&Cursor>,
) {
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
        let at = BsonDate::from_millis(c.scheduled_ms);
        let mut same = doc! { "_id": {"$lt": &c.id} };
        same.insert(field, at);
        let mut before = Document::new();
        before.insert(field, doc! {"$lt": at});
        filter.insert("$or", vec![before, same]);
    }
}

/// A search of `GET /api/notifications`, newest first.
#[derive(Debug, Clone, Default)]
pub struct NotificationSearch {
    pub job: Option<String>,
    pub execution_id: Option<String>,
    pub event: Option<NotifyEvent>,
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
        let compound = |name: &str, first: &str| {
            let mut keys = Document::new();
            if !first.is_empty() {
                keys.insert(first, 1);
            }
            keys.insert("scheduled_at", -1);
            keys.insert("_id", -1);
            IndexModel::builder().keys(keys).options(IndexOptions::builder().name(name.to_owned()).build()).build()
        };
        let models = vec![
            compound("exec_job_time", "job"),
            compound("exec_status_time", "status"),
            compound("exec_worker_time", "worker_id"),
            compound("exec_trigger_time", "trigger"),
            compound("exec_time", ""),
            IndexModel::builder()
                .keys(doc! {"words": 1})
                .options(IndexOptions::builder().name("exec_words".to_owned()).build())
                .build(),
        ];
        self.executions.create_indexes(models).await?;
        self.ensure_ttl(&self.executions, COLLECTION, TTL_INDEX, "finished_at", retention).await?;
        self.ensure_notification_indexes(retention).await
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

    /// Writes a batch in one round trip; each write is an upsert by `_id`, so replaying a batch
    /// is harmless.
    pub async fn write(&self, batch: &[RecordWrite]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let updates: Vec<Document> = batch
            .iter()
            .map(|w| {
                let d = to_document(&w.record);
                let id = d.get("_id").cloned().unwrap_or(Bson::Null);
                let u = match w.mode {
                    WriteMode::IfAbsent => doc! {"$setOnInsert": d},
                    WriteMode::Replace => d,
                };
                doc! {"q": {"_id": id}, "u": u, "upsert": true}
            })
            .collect();
        let reply = self.db.run_command(doc! {"update": COLLECTION, "updates": updates, "ordered": false}).await?;
        if let Ok(errors) = reply.get_array("writeErrors") {
            // 11000: two upserts of a new id raced; the other one inserted it, which is fine
            // for IfAbsent and retried by the caller for Replace (the batch is idempotent).
            let real: Vec<String> = errors
                .iter()
                .filter_map(|e| e.as_document())
                .filter(|e| e.get_i32("code").unwrap_or(0) != 11000)
                .map(|e| e.get_str("errmsg").unwrap_or("?").to_owned())
                .collect();
            if !real.is_empty() {
                return Err(StoreError::Failed(format!("{} write errors, first: {}", real.len(), real[0])));
            }
            if !errors.is_empty() && batch.iter().any(|w| w.mode == WriteMode::Replace) {
                return Err(StoreError::Failed("upsert race (duplicate key); retry".to_owned()));
            }
        }
        Ok(())
    }

    pub async fn get(&self, id: &str) -> Result<Option<ExecutionRecord>, StoreError> {
        match self.executions.find_one(doc! {"_id": id}).projection(doc! {"words": 0}).await? {
            Some(d) => Ok(Some(from_document(&d)?)),
            None => Ok(None),
        }
    }

    pub async fn search(&self, s: &Search) -> Result<Page, StoreError> {
        let mut filter = Document::new();
        if let Some(job) = &s.job {
            filter.insert("job", job);
        }
        match s.statuses.as_slice() {
            [] => {}
            [one] => {
                filter.insert("status", one.as_str());
            }
            many => {
                filter.insert("status", doc! {"$in": many.iter().map(|st| st.as_str()).collect::<Vec<_>>()});
            }
        }
        if let Some(worker) = &s.worker {
            filter.insert("worker_id", worker);
        }
        if let Some(trigger) = &s.trigger {
            filter.insert("trigger", bson::to_bson(trigger).unwrap_or(Bson::Null));
        }
        if let Some(q) = &s.q {
            let terms = words(q);
            if !terms.is_empty() {
                filter.insert("words", doc! {"$all": terms});
            }
        }
        time_page(&mut filter, "scheduled_at", s.since_ms, s.until_ms, s.cursor.as_ref());
        let limit = s.limit.clamp(1, MAX_LIMIT);
        let options = FindOptions::builder()
            .sort(doc! {"scheduled_at": -1, "_id": -1})
            .limit(limit + 1)
            .projection(doc! {"output": 0, "words": 0})
            .build();
        let docs: Vec<Document> = self.executions.find(filter).with_options(options).await?.try_collect().await?;
        let mut executions = docs.iter().map(from_document).collect::<Result<Vec<_>, _>>()?;
        let next_cursor = if executions.len() as i64 > limit {
            executions.truncate(usize::try_from(limit).unwrap_or(0));
            executions.last().map(|r| Cursor { scheduled_ms: r.scheduled_ms, id: r.id.to_string() }.encode())
        } else {
            None
        };
        Ok(Page { executions, next_cursor })
    }

    /// Executions scheduled in `[since_ms, until_ms)` counted by status in buckets of
    /// `bucket_ms` (aligned to the epoch), optionally of one job; one aggregation served by the
    /// time index. Buckets without executions are left out.
    pub async fn activity(
        &self,
        since_ms: UnixMs,
        until_ms: UnixMs,
        bucket_ms: i64,
        job: Option<&str>,
    ) -> Result<Vec<ActivityBucket>, StoreError> {
        let mut matcher = doc! {"scheduled_at": {
        "$gte": BsonDate::from_millis(since_ms), "$lt": BsonDate::from_millis(until_ms)}};
        if let Some(job) = job {
            matcher.insert("job", job);
        }
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

    /// Outcome counts since `since_ms` and the latest execution of each job seen since then.
    pub async fn summaries(
        &self,
        since_ms: UnixMs,
        job: Option<&str>,
    ) -> Result<HashMap<String, JobSummary>, StoreError> {
        let mut matcher = doc! {"scheduled_at": {"$gte": BsonDate::from_millis(since_ms)}};
        if let Some(job) = job {
            matcher.insert("job", job);
        }
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
    use crate::keys::Tick;

    fn record() -> ExecutionRecord {
        ExecutionRecord {
            id: ExecutionId::new("a", Tick::Scheduled(1_700_000_000_000)),
            job: "a".into(),
            scheduled_at: crate::rfc3339_ms(1_700_000_000_000),
            scheduled_ms: 1_700_000_000_000,
            claimed_at: Some(crate::rfc3339_ms(1_700_000_000_004)),
            started_at: Some(crate::rfc3339_ms(1_700_000_000_005)),
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
        }
    }

    #[test]
    fn documents_round_trip() {
        let r = record();
        let d = to_document(&r);
        assert!(matches!(d.get("scheduled_at"), Some(Bson::DateTime(_))));
        assert_eq!(from_document(&d).unwrap(), r);
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
                    at: crate::rfc3339_ms(1_700_000_000_100),
                    duration_ms: 12,
                    http_status: Some(500),
                    error: Some("HTTP 500".into()),
                },
                Attempt {
                    at: crate::rfc3339_ms(1_700_000_001_200),
                    duration_ms: 3,
                    http_status: Some(200),
                    error: None,
                },
            ],
            created_at: crate::rfc3339_ms(1_700_000_000_050),
            finished_at: Some(crate::rfc3339_ms(1_700_000_001_203)),
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
