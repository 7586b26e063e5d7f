//! The audit log: every request that changes something (who, what, when, from where, the
//! answer, and the job's spec before and after, secrets withheld) goes to the MongoDB
//! collection `audit`, searchable with `GET /api/audit`.
//!
//! The middleware (around the auth layer, which names the caller in the response) writes the
//! entry after the request was answered, refused (403) included; handlers add what only they
//! know (`before`/`after`) as a response extension ([`AuditDetail`]). Entries are also logged
//! (target `etcron::audit`), and queue in memory while MongoDB is unreachable: a full queue is
//! an error line per dropped entry, never a silent loss.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use etcron_common::store::{Cursor, MongoStore, StoreError};
use etcron_common::{now_ms, rfc3339_ms, UnixMs};
use futures::TryStreamExt;
use mongodb::bson::{self, doc, Bson, DateTime as BsonDate, Document};
use mongodb::options::{FindOptions, IndexOptions};
use mongodb::{Collection, IndexModel};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::auth::{is_mutation, Caller};

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
pub const MAX_ATTEMPTED: usize = 4096;

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

/// What one change of a batch did, kept as an entry of its own (`job.put` / `job.delete` on
/// the job), so the audit log of a job shows the changes a batch made to it.
#[derive(Debug, Clone)]
pub struct JobChange {
    pub job: String,
    pub teams: Vec<String>,
    pub action: &'static str,
    pub status: u16,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

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
            },
            Written::Deleted { before } => Self {
                job: job.to_owned(),
                teams: teams([before.as_deref().and_then(crate::access::team_of)]),
                action: "job.delete",
                status: 204,
                before: before.as_deref().and_then(audited),
                after: None,
            },
        }
    }
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
pub use etcron_common::output::clipped as bounded;

/// Sends entries to the writer task.
#[derive(Clone)]
pub struct AuditLog {
    tx: mpsc::Sender<AuditEntry>,
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
        Self { tx }
    }

    fn record(&self, entry: AuditEntry) {
        tracing::info!(
            target: "etcron::audit",
            actor = %entry.actor, action = %entry.action, job = entry.job.as_deref().unwrap_or(""),
            status = entry.status, remote = entry.remote.as_deref().unwrap_or(""), "audit"
        );
        // Refusals may fill at most half the queue: a low role's attempts never push out what
        // the roles allowed to change things did while MongoDB was away.
        if entry.status == 403 && self.tx.capacity() <= QUEUE / 2 {
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
    let mut delay = Duration::from_millis(200);
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
                delay = Duration::from_millis(200);
            }
            Err(e) if only_duplicates(&e) => batch.clear(),
            Err(e) => {
                tracing::warn!(error = %e, pending = batch.len(), "writing audit entries failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
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
    match etcron_common::job::JobSpec::from_json(value) {
        Ok(spec) => serde_json::to_value(spec.redacted()).ok(),
        Err(_) => serde_json::from_slice(value).ok().map(etcron_common::job::redacted_json),
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
    // The body is read here (it is small: the API's limit) so a refusal can say what it refused.
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, crate::limits::MAX_BODY_BYTES).await else {
        return crate::error::ApiError::too_large(format!(
            "request body exceeds {} bytes",
            crate::limits::MAX_BODY_BYTES
        ))
        .into_response();
    };
    let request_id = format!("{at_ms:013}-{:016x}", rand::random::<u64>());
    let mut req = Request::from_parts(parts, axum::body::Body::from(body.clone()));
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
    if response.status() == axum::http::StatusCode::FORBIDDEN && !body.is_empty() {
        detail.detail = Some(serde_json::json!({"attempted": attempted(&body)}));
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
        // A batch: one entry per change made; changes refused are answered to the caller only.
        Some(BatchAudit(changes)) => {
            for change in changes {
                log.record(AuditEntry {
                    id: new_id(),
                    action: change.action.to_owned(),
                    job: Some(bounded(&change.job, MAX_JOB)),
                    teams: change.teams.clone(),
                    status: change.status,
                    before: change.before.clone(),
                    after: change.after.clone(),
                    detail: Some(serde_json::json!({"batch": true, "request_id": request_id})),
                    ..entry.clone()
                });
            }
        }
        None => log.record(entry),
    }
    response
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
        let log = AuditLog { tx };
        // MongoDB away: nothing drains the queue.
        for _ in 0..QUEUE / 2 {
            log.record(entry(403, "/api/jobs/a"));
        }
        assert_eq!(rx.len(), QUEUE / 2);
        log.record(entry(403, "/api/jobs/a"));
        assert_eq!(rx.len(), QUEUE / 2, "a refusal past half the queue is dropped");
        log.record(entry(200, "/api/jobs/a"));
        assert_eq!(rx.len(), QUEUE / 2 + 1, "an allowed change still gets in");
        let long = format!("/api/jobs/{}/x", "n".repeat(60_000));
        let e = entry(403, &long);
        assert!(e.path.len() <= MAX_PATH + 3 && e.action.len() <= MAX_PATH + 8, "{} {}", e.path.len(), e.action.len());
        assert!(e.job.unwrap().len() <= MAX_JOB + 3);
        assert_eq!(attempted(b"not json: secret=hunter2"), serde_json::json!({"bytes": 24, "not_json": true}));
        let big = serde_json::json!({"schedule": "@daily", "task": {"kind": "shell", "command": "x".repeat(10_000),
            "secret_env": {"PW": "hunter2"}}});
        let kept = attempted(big.to_string().as_bytes());
        assert!(kept.as_str().is_some_and(|t| t.len() <= MAX_ATTEMPTED + 3 && !t.contains("hunter2")), "{kept}");
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
