//! Searches of the execution records: the filters and the index each search reads (its plan),
//! pages newest first with their cursors, and the other queries over a time range (a job's
//! ticks, activity buckets, per-job summaries).

use std::collections::HashMap;

use futures::TryStreamExt;
use mongodb::bson::{self, doc, Bson, DateTime as BsonDate, Document, RawDocumentBuf};
use mongodb::options::{AggregateOptions, FindOptions};
use serde::Serialize;

use etcron_model::keys::ExecutionId;
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_model::UnixMs;

use super::bson::{from_document, id_and_status, int, rfc, words};
use super::{MongoStore, StoreError, COLLECTION};

/// Most records per search page.
pub const MAX_LIMIT: i64 = 500;
/// Default records per search page.
pub const DEFAULT_LIMIT: i64 = 50;

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
pub(super) fn team_filter(teams: &[String]) -> Bson {
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
    /// For a search with words (`q`), by execution id: the first line of a record's stored output
    /// holding one of them (see [`MATCH_BEFORE`]); none for a record whose error alone holds them.
    pub matches: std::collections::BTreeMap<String, String>,
}

/// Most characters of an output line kept before the word it matched; [`MATCH_AFTER`] after it.
pub const MATCH_BEFORE: usize = 80;
pub const MATCH_AFTER: usize = 120;

/// The field a residual search adds to a match: its output line holding a word of `q`.
const MATCH_FIELD: &str = "output_match";

/// The statuses of a run that ended with an outcome: a job's health looks at its latest such.
const FINISHED: [&str; 4] = ["succeeded", "failed", "timed_out", "lost"];

/// A job's health in a summary's window: its latest run that ended with an outcome
/// ([`JobSummary::last_finished`]) failed (`failed`, `timed_out`, `lost`), succeeded, or none
/// ended in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Failing,
    Ok,
    Never,
}

impl JobSummary {
    /// The job's health ([`Health`]).
    pub fn health(&self) -> Health {
        match self.last_finished.as_ref().map(|l| l.status) {
            None => Health::Never,
            Some(Status::Succeeded) => Health::Ok,
            Some(_) => Health::Failing,
        }
    }
}

/// Per-job outcome counts and latest execution.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobSummary {
    pub last_execution: Option<LastExecution>,
    /// The latest that ended succeeded, failed, timed out or lost (a job's health: see
    /// [`Health`]); one running, killed, skipped or missed is passed over.
    pub last_finished: Option<LastExecution>,
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

#[derive(Debug, Clone, Serialize)]
pub struct LastExecution {
    pub id: String,
    pub status: Status,
    pub scheduled_at: String,
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
pub(super) const SEARCH_INDEXES: [(&str, Option<&str>); 4] =
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
        // A match of words comes back with its output line that holds one (only matches: the
        // documents read and not matched cost no regex).
        let matched = if self.words.is_empty() {
            Bson::String("$$ROOT".to_owned())
        } else {
            Bson::Document(doc! {"$mergeObjects": ["$$ROOT", {MATCH_FIELD: self.match_line()}]})
        };
        vec![
            doc! {"$match": self.indexed.clone()},
            doc! {"$sort": {"scheduled_at": -1, "_id": -1}},
            doc! {"$limit": SCAN_BUDGET},
            doc! {"$replaceWith": {"$cond": [
                {"$and": checks},
                matched,
                {"_id": "$_id", "scheduled_at": "$scheduled_at", RESIDUAL_SKIP: true},
            ]}},
            doc! {"$project": {"words": 0, "output": 0}},
        ]
    }

    /// The expression of a record's first output line holding one of the words (whole, any
    /// case), at most [`MATCH_BEFORE`] characters before it and [`MATCH_AFTER`] after; `null`
    /// when the output holds none. Words are letters, digits and `_`: nothing to escape.
    fn match_line(&self) -> Document {
        let pattern = format!(r"[^\n]{{0,{MATCH_BEFORE}}}\b(?:{})\b[^\n]{{0,{MATCH_AFTER}}}", self.words.join("|"));
        doc! {"$let": {
            "vars": {"m": {"$regexFind": {"input": {"$ifNull": ["$output", ""]}, "regex": pattern, "options": "i"}}},
            "in": "$$m.match",
        }}
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

impl MongoStore {
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
        let mut matches = std::collections::BTreeMap::new();
        while let Some(d) = cursor.try_next().await? {
            examined += 1;
            if !plan.exact() {
                last = Some(position(&d)?);
            }
            if d.get_bool(RESIDUAL_SKIP).unwrap_or(false) {
                continue;
            }
            let d = Document::try_from(d.as_ref()).map_err(|e| StoreError::Failed(e.to_string()))?;
            let record = from_document(&d)?;
            if let Ok(line) = d.get_str(MATCH_FIELD) {
                matches.insert(record.id.to_string(), line.trim_end_matches('\r').to_owned());
            }
            executions.push(record);
            if executions.len() as i64 > limit {
                break;
            }
        }
        if executions.len() as i64 > limit {
            executions.truncate(usize::try_from(limit).unwrap_or(0));
            let next = executions.last().map(|r| Cursor { scheduled_ms: r.scheduled_ms, id: r.id.to_string() });
            matches.retain(|id, _| executions.iter().any(|r| r.id.to_string() == *id));
            return Ok(Page { executions, next_cursor: next.map(|c| c.encode()), partial: false, matches });
        }
        // The index range ended, or the budget did (more may match further on).
        let partial = examined == read && !plan.exact();
        let next_cursor = if partial { last.map(|c| c.encode()) } else { None };
        Ok(Page { executions, next_cursor, partial, matches })
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
    /// (of `jobs` only when given: a page of them reads their records only; only of records of
    /// `teams` when given, [`Search::teams`]).
    pub async fn summaries(
        &self,
        since_ms: UnixMs,
        jobs: Option<&[String]>,
        teams: Option<&[String]>,
    ) -> Result<HashMap<String, JobSummary>, StoreError> {
        let mut matcher = doc! {"scheduled_at": {"$gte": BsonDate::from_millis(since_ms)}};
        match jobs {
            Some([job]) => {
                matcher.insert("job", job.as_str());
            }
            Some(jobs) => {
                matcher.insert("job", doc! {"$in": jobs});
            }
            None => {}
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
                // The latest run that ended with an outcome: by (time, id), as the sort above.
                "finished": {"$max": {"$cond": [{"$in": ["$status", FINISHED.to_vec()]}, {"t": "$scheduled_at", "i": "$_id", "s": "$status"}, null]}},
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
            let finished = d.get_document("finished").ok().and_then(|f| {
                let status = bson::from_bson::<Status>(f.get("s")?.clone()).ok()?;
                Some(LastExecution { id: f.get_str("i").ok()?.to_owned(), status, scheduled_at: rfc(f.get("t"))? })
            });
            out.insert(
                job.to_owned(),
                JobSummary {
                    last_execution: last,
                    last_finished: finished,
                    succeeded_24h: count(&d, "succeeded"),
                    failed_24h: count(&d, "failed"),
                    total_24h: count(&d, "total"),
                },
            );
        }
        Ok(out)
    }
}

/// A worker as the records of a time range show it: how many executions it recorded, and its
/// latest (by scheduled time).
#[derive(Debug, Clone, Serialize)]
pub struct WorkerSeen {
    pub id: String,
    pub executions: u64,
    /// When its latest record ended (its scheduled time for one that has not).
    pub last_seen: String,
    pub last_execution: LastExecution,
    pub last_job: String,
}

/// Most workers [`MongoStore::workers_seen`] returns.
pub const MAX_WORKERS_SEEN: i64 = 100;

/// Most records [`MongoStore::workers_seen`] reads: the newest of its time range, so that a
/// page of the console costs the same at any fire rate (a worker whose last record is older
/// than them is not found).
pub const WORKERS_SEEN_SCAN: i64 = 20_000;

impl MongoStore {
    /// The workers that recorded executions scheduled since `since_ms` (only records of `teams`
    /// when given, [`Search::teams`]), the one seen last first, at most [`MAX_WORKERS_SEEN`]; one
    /// aggregation served by the status index's time ranges, over the newest
    /// [`WORKERS_SEEN_SCAN`] records of the range at most.
    pub async fn workers_seen(
        &self,
        since_ms: UnixMs,
        teams: Option<&[String]>,
    ) -> Result<Vec<WorkerSeen>, StoreError> {
        let mut matcher = doc! {"scheduled_at": {"$gte": BsonDate::from_millis(since_ms)}};
        if let Some(teams) = teams {
            matcher.insert("team", team_filter(teams));
        }
        any_status_and_trigger(&mut matcher);
        matcher.insert("worker_id", doc! {"$nin": ["", Bson::Null]});
        let pipeline = vec![
            doc! {"$match": matcher},
            doc! {"$sort": {"scheduled_at": -1, "_id": -1}},
            doc! {"$limit": WORKERS_SEEN_SCAN},
            doc! {"$group": {
                "_id": "$worker_id",
                "n": {"$sum": 1},
                "last_id": {"$first": "$_id"},
                "last_job": {"$first": "$job"},
                "last_status": {"$first": "$status"},
                "last_scheduled_at": {"$first": "$scheduled_at"},
                "last_seen": {"$max": {"$ifNull": ["$finished_at", "$scheduled_at"]}},
            }},
            doc! {"$sort": {"last_seen": -1, "_id": 1}},
            doc! {"$limit": MAX_WORKERS_SEEN},
        ];
        let docs: Vec<Document> = self.executions.aggregate(pipeline).await?.try_collect().await?;
        Ok(docs
            .iter()
            .filter_map(|d| {
                let status = bson::from_bson::<Status>(d.get("last_status")?.clone()).ok()?;
                Some(WorkerSeen {
                    id: d.get_str("_id").ok()?.to_owned(),
                    executions: int(d.get("n")).and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                    last_seen: rfc(d.get("last_seen"))?,
                    last_execution: LastExecution {
                        id: d.get_str("last_id").ok()?.to_owned(),
                        status,
                        scheduled_at: rfc(d.get("last_scheduled_at")).unwrap_or_default(),
                    },
                    last_job: d.get_str("last_job").ok()?.to_owned(),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = Cursor { scheduled_ms: 1_700_000_000_000, id: "job@1700000000000#2".into() };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        for bad in ["", "x", "1.zz", "1.abc", "nope.00"] {
            assert!(Cursor::decode(bad).is_err(), "{bad}");
        }
    }
}
