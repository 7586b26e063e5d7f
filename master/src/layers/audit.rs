//! The audit log: every request that changes something (who, what, when, from where, the
//! answer, and the job's spec before and after, secrets withheld) goes to the MongoDB
//! collection `audit`, searchable with `GET /api/audit`.
//!
//! The middleware (around the auth layer, which names the caller in the response) writes the
//! entry after the request was answered, refusals (any 4xx but 401 and 429) included; handlers
//! add what only they know (`before`/`after`) as a response extension ([`AuditDetail`]). It
//! never reads a body itself: it keeps what the layers inside read (at most
//! [`MAX_SENT_KEPT`] bytes), so a request without a valid token costs no more than its head.
//! Entries are also logged (target `etcron::audit`), and queue in memory while MongoDB is
//! unreachable: a full queue is an error line per dropped entry, never a silent loss.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use etcron_common::store::{Cursor, MongoStore, StoreError};
use etcron_model::{now_ms, rfc3339_ms, UnixMs};
use futures::TryStreamExt;
use mongodb::bson::{self, doc, Bson, DateTime as BsonDate, Document};
use mongodb::options::{FindOptions, IndexOptions};
use mongodb::{Collection, IndexModel};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::layers::auth::{is_mutation, Caller, RateLimiter};

pub const COLLECTION: &str = "audit";
/// Entries held in memory while MongoDB is unreachable.
pub const QUEUE: usize = 10_000;
/// Most entries one search returns.
pub const MAX_LIMIT: i64 = 500;
const TTL_INDEX: &str = "audit_ttl_at";
/// Longest path kept in an entry (longer ones end with `…`).
pub const MAX_PATH: usize = 256;
/// Longest job name kept in an entry.
pub const MAX_JOB: usize = 128;
/// Longest record of what a refused change attempted (its body, secrets withheld).
pub const MAX_ATTEMPTED: usize = 512;
/// Refusals of one caller whose attempted body is kept (`MAX_ATTEMPTED_BURST` at once, then one
/// every `ATTEMPTED_EVERY`); past that, only the body's size.
pub const MAX_ATTEMPTED_BURST: u32 = 20;
pub const ATTEMPTED_EVERY: Duration = Duration::from_secs(60);
pub use crate::layers::limits::MAX_SENT_KEPT;

/// The id of a changing request: its audit entry's id, and the `request_id` of the spec
/// version it saved (handlers read it as a request extension).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// What a handler adds to the entry of its request.
#[derive(Debug, Clone, Default)]
pub struct AuditDetail {
    /// The teams of the job the request was about: before and after the change (two for a job
    /// moved to another team), see [`teams`].
    pub teams: Vec<String>,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// Anything else worth keeping: the run's execution id, the kill's target.
    pub detail: Option<Value>,
}

/// The teams an entry belongs to, from the job's team before and after the change (each
/// `None` when the job had none): sorted, without repeats.
#[must_use]
pub fn teams(of: impl IntoIterator<Item = Option<String>>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = of.into_iter().flatten().collect();
    set.into_iter().collect()
}

/// What one change of a batch did or was refused, kept as an entry of its own (`job.put` /
/// `job.delete` on the job; `job.dry_run` for a dry run's), so the audit log of a job shows
/// what a batch did or tried to do to it.
#[derive(Debug, Clone)]
pub struct JobChange {
    pub job: String,
    pub teams: Vec<String>,
    pub action: &'static str,
    pub status: u16,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// The refusal's error, or the dry run's op and outcome.
    pub detail: Option<Value>,
}

/// Longest error message kept in an entry of a refused batch change.
pub const MAX_REASON: usize = 256;

impl JobChange {
    #[must_use]
    pub fn of(job: &str, written: &crate::job_store::Written) -> Self {
        use crate::job_store::Written;
        match written {
            Written::Saved { created, spec, before, .. } => Self {
                job: job.to_owned(),
                teams: teams([before.as_deref().and_then(crate::access::team_of), spec.team.clone()]),
                action: "job.put",
                status: if *created { 201 } else { 200 },
                before: before.as_deref().and_then(audited),
                after: serde_json::to_value(spec.redacted()).ok(),
                detail: None,
            },
            Written::Deleted { before } => Self {
                job: job.to_owned(),
                teams: teams([before.as_deref().and_then(crate::access::team_of)]),
                action: "job.delete",
                status: 204,
                before: before.as_deref().and_then(audited),
                after: None,
                detail: None,
            },
        }
    }

    /// A change of a batch refused with `status` and `error` (`{code, message, field}`); the
    /// job's team is not named (the caller may not see the job).
    #[must_use]
    pub fn refused(job: &str, delete: bool, status: u16, error: &Value) -> Self {
        Self {
            job: job.to_owned(),
            teams: Vec::new(),
            action: if delete { "job.delete" } else { "job.put" },
            status,
            before: None,
            after: None,
            detail: Some(serde_json::json!({"error": reason(error)})),
        }
    }

    /// A change of a dry run: what it would do (`outcome`), or why it would fail (`error`).
    #[must_use]
    pub fn planned(job: &str, op: &str, status: u16, outcome: &Value, error: &Value) -> Self {
        let mut detail = serde_json::json!({"op": op, "outcome": outcome});
        if !error.is_null() {
            detail["error"] = reason(error);
        }
        Self {
            job: job.to_owned(),
            teams: Vec::new(),
            action: "job.dry_run",
            status,
            before: None,
            after: None,
            detail: Some(detail),
        }
    }
}

/// An error as a batch answered it, bounded for an entry.
fn reason(error: &Value) -> Value {
    let text = |key: &str| error[key].as_str().map(|t| bounded(t, MAX_REASON));
    serde_json::json!({"code": text("code"), "message": text("message"), "field": text("field")})
}

/// The changes a `POST /api/batch` made (a response extension).
#[derive(Debug, Clone, Default)]
pub struct BatchAudit(pub Vec<JobChange>);

/// One audited request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: String,
    pub at: String,
    pub at_ms: UnixMs,
    /// The token's name (`anonymous` without auth).
    pub actor: String,
    pub role: String,
    /// The client's address, and `X-Forwarded-For` when a proxy set it.
    pub remote: Option<String>,
    pub forwarded_for: Option<String>,
    pub method: String,
    pub path: String,
    /// `job.put`, `job.delete`, `job.run`, `job.kill`, `job.pause`, `job.resume`, or `METHOD path`.
    pub action: String,
    pub job: Option<String>,
    /// The teams of the job (before and after a change that moved it): callers with team
    /// roles only see the entries of their teams. Empty for requests about no job of a team
    /// (and for refusals, which the auth layer or the job store answered before a handler knew
    /// the job's team): those are for global roles.
    #[serde(default)]
    pub teams: Vec<String>,
    /// The HTTP status of the answer.
    pub status: u16,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub detail: Option<Value>,
}

/// The action of a request, and the job it is about.
#[must_use]
pub fn action_of(method: &str, path: &str) -> (String, Option<String>) {
    let rest = path.strip_prefix("/api/jobs/");
    let job = rest.map(|r| r.split('/').next().unwrap_or_default().to_owned()).filter(|j| !j.is_empty());
    let action = match (method, rest.map(|r| r.split('/').nth(1))) {
        ("PUT", Some(None)) => "job.put".to_owned(),
        ("DELETE", Some(None)) => "job.delete".to_owned(),
        ("POST", Some(Some(a @ ("run" | "kill" | "pause" | "resume" | "rollback" | "backfill")))) => format!("job.{a}"),
        ("POST", Some(Some("backfills"))) if path.ends_with("/cancel") => "job.backfill_cancel".to_owned(),
        _ => format!("{method} {}", bounded(path, MAX_PATH)),
    };
    (action, job.map(|j| bounded(&j, MAX_JOB)))
}

/// `text` cut to at most `max` bytes (on a character boundary), marked with `…` when cut.
pub use etcron_model::output::clipped as bounded;

/// Sends entries to the writer task.
#[derive(Clone)]
pub struct AuditLog {
    tx: mpsc::Sender<AuditEntry>,
    /// Per caller: refusals whose attempted body is still kept.
    attempts: Arc<RateLimiter>,
}

fn attempts_limiter() -> Arc<RateLimiter> {
    Arc::new(RateLimiter::new(1.0 / ATTEMPTED_EVERY.as_secs_f64(), MAX_ATTEMPTED_BURST))
}

/// Whether an answer is a refusal the audit log keeps: a 4xx (401 and 429 are not kept at all).
#[must_use]
pub fn is_refusal(status: u16) -> bool {
    (400..500).contains(&status)
}

/// The bytes of a request body as far as the layers inside the audit layer read it, kept while
/// they are at most [`MAX_SENT_KEPT`] (clones of the chunks read, not copies).
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<SentInner>>);

#[derive(Default)]
struct SentInner {
    chunks: Vec<axum::body::Bytes>,
    total: usize,
    complete: bool,
}

impl Sent {
    fn lock(&self) -> std::sync::MutexGuard<'_, SentInner> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, chunk: &axum::body::Bytes) {
        let mut sent = self.lock();
        sent.total += chunk.len();
        if sent.total <= MAX_SENT_KEPT {
            sent.chunks.push(chunk.clone());
        } else {
            sent.chunks.clear();
        }
    }

    /// The body read, when it was read to its end and kept; else the bytes read.
    fn taken(&self) -> Result<Vec<u8>, usize> {
        let sent = self.lock();
        if sent.complete && sent.total <= MAX_SENT_KEPT {
            Ok(sent.chunks.concat())
        } else {
            Err(sent.total)
        }
    }

    /// `body`, noting in `self` what is read of it.
    fn tap(&self, body: axum::body::Body) -> axum::body::Body {
        use futures::StreamExt as _;
        let (sent, end) = (self.clone(), self.clone());
        let stream = body
            .into_data_stream()
            .inspect(move |chunk| {
                if let Ok(chunk) = chunk {
                    sent.push(chunk);
                }
            })
            .chain(futures::stream::poll_fn(move |_| {
                end.lock().complete = true;
                std::task::Poll::Ready(None)
            }));
        axum::body::Body::from_stream(stream)
    }
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Starts the writer task (it retries while MongoDB is unreachable).
    #[must_use]
    pub fn start(store: &MongoStore) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let collection = store.database().collection::<Document>(COLLECTION);
        tokio::spawn(write_loop(collection, rx));
        Self { tx, attempts: attempts_limiter() }
    }

    /// What a refusal of `actor` attempted, as its entry keeps it: the body (see [`attempted`])
    /// while the caller's budget of kept bodies lasts, else only its size.
    fn attempted(&self, actor: &str, sent: Result<Vec<u8>, usize>) -> Value {
        match sent {
            Ok(body) if self.attempts.check(actor, Instant::now()).is_ok() => attempted(&body),
            Ok(body) => serde_json::json!({"bytes": body.len(), "kept": false}),
            Err(read) => serde_json::json!({"bytes_read": read, "kept": false}),
        }
    }

    fn record(&self, entry: AuditEntry) {
        tracing::info!(
            target: "etcron::audit",
            actor = %entry.actor, action = %entry.action, job = entry.job.as_deref().unwrap_or(""),
            status = entry.status, remote = entry.remote.as_deref().unwrap_or(""), "audit"
        );
        // Refusals (every 4xx) may fill at most half the queue: a low role's attempts never push
        // out what the roles allowed to change things did while MongoDB was away.
        if is_refusal(entry.status) && self.tx.capacity() <= QUEUE / 2 {
            crate::metrics::METRICS.audit_dropped.inc();
            tracing::error!(
                target: "etcron::audit", id = %entry.id, actor = %entry.actor, action = %entry.action,
                "audit entry of a refused request dropped: the queue is half full (MongoDB unreachable); it is only in this log"
            );
            return;
        }
        if let Err(e) = self.tx.try_send(entry) {
            let entry = match e {
                mpsc::error::TrySendError::Full(entry) | mpsc::error::TrySendError::Closed(entry) => entry,
            };
            crate::metrics::METRICS.audit_dropped.inc();
            tracing::error!(
                target: "etcron::audit", id = %entry.id, action = %entry.action, queue = QUEUE,
                "audit entry dropped: MongoDB has been unreachable for {QUEUE} entries; it is only in this log"
            );
        }
    }
}

async fn write_loop(collection: Collection<Document>, mut rx: mpsc::Receiver<AuditEntry>) {
    let mut batch: Vec<Document> = Vec::new();
    let mut delay = etcron_common::backoff::Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        if batch.is_empty() {
            match rx.recv().await {
                Some(e) => batch.push(to_document(&e)),
                None => return,
            }
        }
        while batch.len() < 500 {
            match rx.try_recv() {
                Ok(e) => batch.push(to_document(&e)),
                Err(_) => break,
            }
        }
        // Unordered inserts keyed by id: a retry after an unknown outcome only hits duplicates.
        match collection.insert_many(batch.clone()).ordered(false).await {
            Ok(_) => {
                batch.clear();
                delay.reset();
            }
            Err(e) if only_duplicates(&e) => batch.clear(),
            Err(e) => {
                tracing::warn!(error = %e, pending = batch.len(), "writing audit entries failed; retrying");
                tokio::time::sleep(delay.next_delay()).await;
            }
        }
    }
}

fn only_duplicates(e: &mongodb::error::Error) -> bool {
    match &*e.kind {
        mongodb::error::ErrorKind::InsertMany(failure) => {
            failure.write_concern_error.is_none()
                && failure.write_errors.as_ref().is_some_and(|errs| errs.iter().all(|w| w.code == 11000))
        }
        _ => false,
    }
}

fn to_document(e: &AuditEntry) -> Document {
    let json = |v: &Option<Value>| v.as_ref().and_then(|v| bson::to_bson(v).ok()).unwrap_or(Bson::Null);
    doc! {
        "_id": &e.id, "at": BsonDate::from_millis(e.at_ms), "at_ms": e.at_ms, "actor": &e.actor, "role": &e.role,
        "remote": e.remote.clone(), "forwarded_for": e.forwarded_for.clone(), "method": &e.method, "path": &e.path,
        "action": &e.action, "job": e.job.clone(), "teams": &e.teams, "status": i32::from(e.status),
        "before": json(&e.before), "after": json(&e.after), "detail": json(&e.detail),
    }
}

fn from_document(d: &Document) -> Option<AuditEntry> {
    let s = |k: &str| d.get_str(k).ok().map(str::to_owned);
    let v = |k: &str| match d.get(k) {
        None | Some(Bson::Null) => None,
        Some(b) => serde_json::to_value(b.clone().into_relaxed_extjson()).ok(),
    };
    let at_ms = d.get_i64("at_ms").ok()?;
    Some(AuditEntry {
        id: s("_id")?,
        at: rfc3339_ms(at_ms),
        at_ms,
        actor: s("actor")?,
        role: s("role").unwrap_or_default(),
        remote: s("remote"),
        forwarded_for: s("forwarded_for"),
        method: s("method")?,
        path: s("path")?,
        action: s("action")?,
        job: s("job"),
        teams: d
            .get_array("teams")
            .map(|list| list.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect())
            .unwrap_or_default(),
        status: d.get_i32("status").ok().and_then(|v| u16::try_from(v).ok()).unwrap_or(0),
        before: v("before"),
        after: v("after"),
        detail: v("detail"),
    })
}

/// A stored spec as the audit log keeps it (secrets withheld).
pub(crate) fn audited(value: &[u8]) -> Option<Value> {
    match etcron_model::spec::JobSpec::from_json(value) {
        Ok(spec) => serde_json::to_value(spec.redacted()).ok(),
        Err(_) => serde_json::from_slice(value).ok().map(etcron_model::spec::redacted_json),
    }
}

/// What a refused change sent, as the audit log keeps it: the JSON with secrets withheld, at
/// most `MAX_ATTEMPTED` bytes of it.
fn attempted(body: &[u8]) -> Value {
    // Not JSON: its text could hold anything, a secret included; only its size is kept.
    let Some(text) = audited(body).map(|v| v.to_string()) else {
        return serde_json::json!({"bytes": body.len(), "not_json": true});
    };
    if text.len() <= MAX_ATTEMPTED {
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            return v;
        }
    }
    Value::String(bounded(&text, MAX_ATTEMPTED))
}

/// Creates the audit indexes (idempotent) with the TTL `retention`.
pub async fn ensure_indexes(store: &MongoStore, retention: Duration) -> Result<(), StoreError> {
    let collection = store.database().collection::<Document>(COLLECTION);
    let index = |name: &str, keys: Document| {
        IndexModel::builder().keys(keys).options(IndexOptions::builder().name(name.to_owned()).build()).build()
    };
    collection
        .create_indexes([
            index("audit_time", doc! {"at": -1, "_id": -1}),
            index("audit_job_time", doc! {"job": 1, "at": -1, "_id": -1}),
            index("audit_actor_time", doc! {"actor": 1, "at": -1, "_id": -1}),
            index("audit_teams_time", doc! {"teams": 1, "at": -1, "_id": -1}),
        ])
        .await?;
    let existing: Vec<IndexModel> = collection.list_indexes().await?.try_collect().await?;
    let current = existing.iter().find_map(|m| {
        let o = m.options.as_ref()?;
        (o.name.as_deref() == Some(TTL_INDEX)).then_some(o.expire_after)
    });
    let ttl_secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
    match current {
        Some(Some(d)) if d.as_secs() == retention.as_secs() => {}
        Some(_) => {
            store
                .database()
                .run_command(doc! {"collMod": COLLECTION, "index": {"name": TTL_INDEX, "expireAfterSeconds": ttl_secs}})
                .await?;
        }
        None => {
            let ttl = IndexModel::builder()
                .keys(doc! {"at": 1})
                .options(IndexOptions::builder().name(TTL_INDEX.to_owned()).expire_after(retention).build())
                .build();
            collection.create_index(ttl).await?;
        }
    }
    Ok(())
}

/// A search of the audit log (every filter optional), newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditSearch {
    pub job: Option<String>,
    pub actor: Option<String>,
    pub action: Option<String>,
    pub since_ms: Option<UnixMs>,
    pub until_ms: Option<UnixMs>,
    /// Only entries of one of these teams (`None`: any; see `Access::visible_teams`).
    pub teams: Option<Vec<String>>,
    pub limit: i64,
    pub cursor: Option<Cursor>,
}

/// One page of entries and the cursor of the next.
pub async fn search(store: &MongoStore, s: &AuditSearch) -> Result<(Vec<AuditEntry>, Option<String>), StoreError> {
    let mut filter = Document::new();
    for (key, value) in [("job", &s.job), ("actor", &s.actor), ("action", &s.action)] {
        if let Some(v) = value {
            filter.insert(key, v);
        }
    }
    if let Some(teams) = &s.teams {
        filter.insert("teams", doc! {"$in": teams});
    }
    etcron_common::store::time_page(&mut filter, "at", s.since_ms, s.until_ms, s.cursor.as_ref());
    let limit = s.limit.clamp(1, MAX_LIMIT);
    let options = FindOptions::builder().sort(doc! {"at": -1, "_id": -1}).limit(limit + 1).build();
    let collection = store.database().collection::<Document>(COLLECTION);
    let docs: Vec<Document> = collection.find(filter).with_options(options).await?.try_collect().await?;
    let mut entries: Vec<AuditEntry> = docs.iter().filter_map(from_document).collect();
    let next = if entries.len() as i64 > limit {
        entries.truncate(usize::try_from(limit).unwrap_or(0));
        entries.last().map(|e| Cursor { scheduled_ms: e.at_ms, id: e.id.clone() }.encode())
    } else {
        None
    };
    Ok((entries, next))
}

/// The middleware: records each `/api/` request that changes something, after it answered.
pub async fn record(State(log): State<AuditLog>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if !path.starts_with("/api/") || !is_mutation(req.method()) {
        return next.run(req).await;
    }
    let method = req.method().as_str().to_owned();
    let remote = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.to_string());
    let forwarded_for = req.headers().get("x-forwarded-for").and_then(|v| v.to_str().ok()).map(|v| bounded(v, 256));
    let at_ms = now_ms();
    // The body is not read here: the layers inside read what they need (nothing without a
    // valid token), and what they read is kept to say what a refusal attempted.
    let sent = Sent::default();
    let (parts, body) = req.into_parts();
    let request_id = format!("{at_ms:013}-{:016x}", rand::random::<u64>());
    let mut req = Request::from_parts(parts, sent.tap(body));
    req.extensions_mut().insert(RequestId(request_id.clone()));
    let response = next.run(req).await;
    // Requests without a valid token, and those over the rate limit, are logged by the auth
    // layer but not kept here: anyone could fill the collection with them.
    let Some(caller) = response.extensions().get::<Caller>().cloned() else {
        return response;
    };
    if response.status() == axum::http::StatusCode::TOO_MANY_REQUESTS {
        return response;
    }
    let mut detail = response.extensions().get::<AuditDetail>().cloned().unwrap_or_default();
    let taken = sent.taken();
    if is_refusal(response.status().as_u16()) && taken.as_ref().map_or_else(|read| *read > 0, |b| !b.is_empty()) {
        let attempted = log.attempted(&caller.name, taken);
        let mut kept = match detail.detail.take() {
            Some(Value::Object(map)) => map,
            Some(other) => [("detail".to_owned(), other)].into_iter().collect(),
            None => serde_json::Map::new(),
        };
        kept.insert("attempted".to_owned(), attempted);
        detail.detail = Some(Value::Object(kept));
    }
    let (action, job) = action_of(&method, &path);
    let role = caller.roles();
    let actor = caller.name;
    let new_id = || format!("{at_ms:013}-{:016x}", rand::random::<u64>());
    let entry = AuditEntry {
        id: request_id.clone(),
        at: rfc3339_ms(at_ms),
        at_ms,
        actor,
        role,
        remote,
        forwarded_for,
        method,
        path: bounded(&path, MAX_PATH),
        action,
        job,
        teams: detail.teams,
        status: response.status().as_u16(),
        before: detail.before,
        after: detail.after,
        detail: detail.detail,
    };
    match response.extensions().get::<BatchAudit>() {
        // A batch: one entry per change, made, refused or planned.
        Some(BatchAudit(changes)) if !changes.is_empty() => record_batch(&log, &entry, changes, new_id),
        _ => log.record(entry),
    }
    response
}

/// One audit entry per change of a batch request (`entry` is the request's own), each naming
/// the request it came with.
fn record_batch(log: &AuditLog, entry: &AuditEntry, changes: &[JobChange], new_id: impl Fn() -> String) {
    for change in changes {
        let mut detail = serde_json::json!({"batch": true, "request_id": entry.id});
        if let Some(Value::Object(more)) = &change.detail {
            detail.as_object_mut().into_iter().for_each(|d| d.extend(more.clone()));
        }
        log.record(AuditEntry {
            id: new_id(),
            action: change.action.to_owned(),
            job: Some(bounded(&change.job, MAX_JOB)),
            teams: change.teams.clone(),
            status: change.status,
            before: change.before.clone(),
            after: change.after.clone(),
            detail: Some(detail),
            ..entry.clone()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_named_from_the_route() {
        assert_eq!(action_of("PUT", "/api/jobs/a"), ("job.put".to_owned(), Some("a".to_owned())));
        assert_eq!(action_of("DELETE", "/api/jobs/a"), ("job.delete".to_owned(), Some("a".to_owned())));
        assert_eq!(action_of("POST", "/api/jobs/a/run"), ("job.run".to_owned(), Some("a".to_owned())));
        assert_eq!(action_of("POST", "/api/jobs/a/resume"), ("job.resume".to_owned(), Some("a".to_owned())));
        assert_eq!(action_of("POST", "/api/jobs/a/backfill"), ("job.backfill".to_owned(), Some("a".to_owned())));
        assert_eq!(
            action_of("POST", "/api/jobs/a/backfills/x1/cancel"),
            ("job.backfill_cancel".to_owned(), Some("a".to_owned()))
        );
        assert_eq!(action_of("POST", "/api/jobs/a/other"), ("POST /api/jobs/a/other".to_owned(), Some("a".to_owned())));
        assert_eq!(action_of("POST", "/api/nope"), ("POST /api/nope".to_owned(), None));
    }

    fn entry(status: u16, path: &str) -> AuditEntry {
        let (action, job) = action_of("PUT", path);
        AuditEntry {
            id: format!("{:016x}", rand::random::<u64>()),
            at: rfc3339_ms(1_795_333_638_000),
            at_ms: 1_795_333_638_000,
            actor: "a".into(),
            role: "viewer".into(),
            remote: None,
            forwarded_for: None,
            method: "PUT".into(),
            path: bounded(path, MAX_PATH),
            action,
            job,
            teams: Vec::new(),
            status,
            before: None,
            after: None,
            detail: None,
        }
    }

    #[test]
    fn refusals_never_take_the_second_half_of_the_queue_and_fields_are_bounded() {
        let (tx, rx) = mpsc::channel(QUEUE);
        let log = AuditLog { tx, attempts: attempts_limiter() };
        // MongoDB away: nothing drains the queue. Every 4xx is a refusal, not only 403.
        for i in 0..QUEUE / 2 {
            log.record(entry([403, 404, 400, 409, 408][i % 5], "/api/jobs/a"));
        }
        assert_eq!(rx.len(), QUEUE / 2);
        for status in [403, 404, 400, 409, 422] {
            log.record(entry(status, "/api/jobs/a"));
            assert_eq!(rx.len(), QUEUE / 2, "a refusal ({status}) past half the queue is dropped");
        }
        log.record(entry(200, "/api/jobs/a"));
        log.record(entry(503, "/api/jobs/a"));
        assert_eq!(rx.len(), QUEUE / 2 + 2, "an allowed change, or one that failed, still gets in");
        let long = format!("/api/jobs/{}/x", "n".repeat(60_000));
        let e = entry(403, &long);
        assert!(e.path.len() <= MAX_PATH + 3 && e.action.len() <= MAX_PATH + 8, "{} {}", e.path.len(), e.action.len());
        assert!(e.job.unwrap().len() <= MAX_JOB + 3);
        assert_eq!(attempted(b"not json: secret=hunter2"), serde_json::json!({"bytes": 24, "not_json": true}));
        let big = serde_json::json!({"schedule": "@daily", "task": {"kind": "shell", "command": "x".repeat(10_000),
            "secret_env": {"PW": "hunter2"}}});
        let kept = attempted(big.to_string().as_bytes());
        assert!(kept.as_str().is_some_and(|t| t.len() <= MAX_ATTEMPTED + 3 && !t.contains("hunter2")), "{kept}");
        let medium = serde_json::json!({"schedule": "@daily", "task": {"kind": "shell", "command": "x".repeat(1000)}});
        let kept = attempted(medium.to_string().as_bytes());
        assert!(kept.as_str().is_some_and(|t| t.len() <= 515), "a refusal keeps a summary, not the body: {kept}");
    }

    #[test]
    fn each_caller_keeps_a_bounded_number_of_attempted_bodies() {
        let (tx, _rx) = mpsc::channel(QUEUE);
        let log = AuditLog { tx, attempts: attempts_limiter() };
        let body = br#"{"schedule": "@daily", "task": {"kind": "shell", "command": "true"}}"#.to_vec();
        let kept: Vec<Value> =
            (0..MAX_ATTEMPTED_BURST + 5).map(|_| log.attempted("viewer", Ok(body.clone()))).collect();
        let full = kept.iter().filter(|v| v["schedule"] == "@daily").count();
        assert_eq!(full, MAX_ATTEMPTED_BURST as usize, "{kept:?}");
        assert_eq!(kept.last(), Some(&serde_json::json!({"bytes": body.len(), "kept": false})));
        assert_eq!(log.attempted("other", Ok(body.clone()))["schedule"], "@daily", "per caller");
        assert_eq!(log.attempted("other", Err(70_000)), serde_json::json!({"bytes_read": 70_000, "kept": false}));
    }

    #[test]
    fn entries_round_trip_through_documents() {
        let e = AuditEntry {
            id: "1795333638000-00000000000000ff".into(),
            at: rfc3339_ms(1_795_333_638_000),
            at_ms: 1_795_333_638_000,
            actor: "alice".into(),
            role: "admin".into(),
            remote: Some("127.0.0.1:5000".into()),
            forwarded_for: None,
            method: "PUT".into(),
            path: "/api/jobs/a".into(),
            action: "job.put".into(),
            job: Some("a".into()),
            teams: vec!["payments".into()],
            status: 201,
            before: None,
            after: Some(serde_json::json!({"schedule": "@daily", "task": {"kind": "shell", "command": "true"}})),
            detail: None,
        };
        assert_eq!(from_document(&to_document(&e)), Some(e));
    }
}
