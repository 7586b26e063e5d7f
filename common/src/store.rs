//! The execution-record store: MongoDB collection `executions`, `_id` = execution id; and the
//! notification deliveries: collection `notifications`, `_id` = delivery id.
//!
//! Only features MongoDB 6 has are used: the `update` command with upserts for batched,
//! idempotent writes; compound indexes for every search filter; a multikey index over the
//! words of output and error for `q`; a TTL index on `finished_at` (deliveries: `created_at`)
//! for retention.
//!
//! The parts: `bson` turns records into documents and back, `search` plans and pages the
//! searches, `notifications` holds the deliveries; this file connects, creates the indexes and
//! writes and reads records by id.

use std::collections::HashMap;
use std::time::Duration;

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::options::{ClientOptions, IndexOptions};
use mongodb::{Client, Collection, Database, IndexModel};
use serde::{Deserialize, Serialize};

use etcron_model::record::{ExecutionRecord, Status};

mod bson;
mod notifications;
mod search;

pub use bson::words;
pub use notifications::NotificationSearch;
pub use search::{
    search_plan, time_page, ActivityBucket, Cursor, Health, JobSummary, LastExecution, Page, Search, SearchPlan,
    WorkerSeen, DEFAULT_LIMIT, MAX_LIMIT, MAX_WORKERS_SEEN, SCAN_BUDGET,
};

use bson::{from_document, id_and_status, to_document, to_raw_document};
use search::SEARCH_INDEXES;

pub const COLLECTION: &str = "executions";
/// Notification deliveries, one document per delivery with all its attempts.
pub const NOTIFICATIONS: &str = "notifications";
const NOTIFICATIONS_TTL_INDEX: &str = "notif_ttl_created";
const TTL_INDEX: &str = "exec_ttl_finished";
/// MongoDB's error code for a collection that does not exist.
const NAMESPACE_NOT_FOUND: i32 = 26;
/// MongoDB's error code for creating a collection that exists.
const NAMESPACE_EXISTS: i32 = 48;
/// MongoDB's duplicate-key error code.
const DUPLICATE_KEY: i32 = 11000;
/// Most bytes of records in one `update` command (MongoDB takes 16 MiB per command document).
const UPDATE_COMMAND_BYTES: usize = 4 * 1024 * 1024;

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
}
