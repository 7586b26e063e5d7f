//! The log sink: every execution record reaches MongoDB exactly once, across MongoDB outages
//! and worker restarts.
//!
//! Records are queued (bounded), written in batches (up to `BATCH` records or every
//! `FLUSH_EVERY`), and every write is an idempotent upsert by execution id. When MongoDB is down
//! or slow, batches are appended to a spool file under the data dir and replayed in order once
//! it answers again, also after a restart. While the spool holds anything, new batches go to the
//! spool too, so order is kept. A record is dropped only if even the spool cannot be written;
//! that is logged at error level and counted.
//!
//! A worker killed outright (SIGKILL, OOM) loses its memory, so every submitted record is first
//! appended to a journal file (one `write`, no fsync: the page cache outlives the process). The
//! sink empties the journal each time its queue is drained and everything taken was written
//! (to MongoDB or the spool); at start, whatever a previous instance left in the journal goes
//! to the spool ahead of anything new.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcron_common::store::{MongoStore, RecordWrite, WriteMode};
use etcron_model::keys::ExecutionId;
use tokio::sync::{mpsc, watch};

/// Records per write.
pub const BATCH: usize = 1000;
/// Longest a record waits in the queue before a write.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// Records the in-memory queue holds before new ones go straight to the spool.
pub const QUEUE: usize = 10_000;
/// How often a non-empty spool is retried.
const REPLAY_EVERY: Duration = Duration::from_secs(1);
const SPOOL_FILE: &str = "spool.jsonl";
const JOURNAL_FILE: &str = "journal.jsonl";
const REPLAY_PREFIX: &str = "replay-";

/// Counters of the sink (exported as metrics), and the trace spans of records on their way.
#[derive(Debug, Default)]
pub struct SinkStats {
    pub written: AtomicU64,
    pub spooled: AtomicU64,
    pub replayed: AtomicU64,
    pub dropped: AtomicU64,
    pub write_errors: AtomicU64,
    spans: RecordSpans,
}

/// Most `record` spans waiting for their record's write; a span past it ends at once as
/// `queued`.
pub const MAX_RECORD_SPANS: usize = QUEUE;

/// The `record` spans of final records not written yet, by execution: each ends when its
/// record's batch was written (`etcron.record.outcome` `written`), spooled (`spooled`: MongoDB
/// did not take it now; it is replayed later) or lost. Empty, and never locked, while tracing
/// is off.
#[derive(Debug, Default)]
struct RecordSpans {
    held: std::sync::atomic::AtomicUsize,
    spans: Mutex<etcron_common::hash::HashMap<ExecutionId, etcron_common::trace::Span>>,
}

impl RecordSpans {
    fn hold(&self, id: &ExecutionId, mut span: etcron_common::trace::Span) {
        let mut spans = self.spans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if spans.len() >= MAX_RECORD_SPANS {
            span.set("etcron.record.outcome", "queued");
            return;
        }
        spans.insert(id.clone(), span);
        self.held.store(spans.len(), Ordering::Relaxed);
    }

    /// Ends the spans of the final records in `batch` with `outcome`.
    fn end(&self, batch: &[RecordWrite], outcome: &'static str) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut spans = self.spans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for w in batch.iter().filter(|w| w.mode.is_final()) {
            if let Some(mut span) = spans.remove(&w.record.id) {
                span.set("etcron.record.outcome", outcome);
                if outcome == "lost" {
                    span.fail("the record could be written neither to MongoDB nor to the spool");
                }
            }
        }
        self.held.store(spans.len(), Ordering::Relaxed);
    }
}

/// Append-only spool files in one directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    lock: Mutex<()>,
    /// Something may wait in the spool: set by every append, cleared when a replay pass takes
    /// the live file aside, set again if that pass fails. Spares a directory scan per batch.
    pending: AtomicBool,
}

impl Spool {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        let spool = Self { dir: dir.to_path_buf(), lock: Mutex::new(()), pending: AtomicBool::new(false) };
        // Left over from an earlier run: replay it before anything new.
        spool.pending.store(!spool.files()?.is_empty(), Ordering::SeqCst);
        Ok(spool)
    }

    /// Appends records, one JSON line each, and syncs them to disk.
    pub fn append(&self, records: &[RecordWrite]) -> std::io::Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut file = OpenOptions::new().create(true).append(true).open(self.dir.join(SPOOL_FILE))?;
        let mut buf = Vec::with_capacity(records.len() * 512);
        for r in records {
            serde_json::to_writer(&mut buf, r).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        file.write_all(&buf)?;
        file.sync_data()?;
        self.pending.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// True when anything may wait to be replayed.
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Bytes waiting in the spool.
    pub fn size(&self) -> u64 {
        self.files().unwrap_or_default().iter().filter_map(|p| fs::metadata(p).ok()).map(|m| m.len()).sum()
    }

    /// Replay files oldest first, then the live spool file.
    fn files(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut replay: Vec<PathBuf> = fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(REPLAY_PREFIX)))
            .collect();
        replay.sort();
        let live = self.dir.join(SPOOL_FILE);
        if fs::metadata(&live).map(|m| m.len() > 0).unwrap_or(false) {
            replay.push(live);
        }
        Ok(replay)
    }

    /// Moves the live spool file aside so appends continue in a fresh one while it is replayed.
    fn rotate(&self) -> std::io::Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Appends after this point set the flag again; the caller sets it if the pass fails.
        self.pending.store(false, Ordering::SeqCst);
        let live = self.dir.join(SPOOL_FILE);
        if fs::metadata(&live).map(|m| m.len() == 0).unwrap_or(true) {
            return Ok(());
        }
        let stamp =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        fs::rename(&live, self.dir.join(format!("{REPLAY_PREFIX}{stamp:024}.jsonl")))
    }
}

/// The write-ahead journal of submitted records (see the module docs).
#[derive(Debug)]
struct Journal {
    path: PathBuf,
    /// The open journal; its lock also orders journal appends with queue sends.
    file: Mutex<Option<File>>,
}

impl Journal {
    /// Opens the journal of `dir`, moving what a previous instance left in it to `spool`.
    fn open(dir: &Path, spool: &Spool) -> std::io::Result<Self> {
        let path = dir.join(JOURNAL_FILE);
        if fs::metadata(&path).map(|m| m.len() > 0).unwrap_or(false) {
            let left = read_spool(&path)?;
            if !left.is_empty() {
                tracing::warn!(
                    records = left.len(),
                    "the previous run of this worker ended abruptly; its unwritten execution records are spooled now"
                );
                spool.append(&left)?;
            }
        }
        let file = OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
        Ok(Self { path, file: Mutex::new(Some(file)) })
    }

    /// Appends `write`, then hands it to `then` (the queue send) under the same lock.
    fn append_then<T>(&self, write: RecordWrite, then: impl FnOnce(RecordWrite) -> T) -> T {
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(f) = file.as_mut() {
            let mut line = serde_json::to_vec(&write).unwrap_or_default();
            line.push(b'\n');
            if let Err(e) = f.write_all(&line) {
                tracing::error!(error = %e, "appending to the record journal failed; a crash now could lose this record");
            }
        }
        then(write)
    }

    /// Empties the journal if `drained()` holds under the lock (nothing submitted is still queued).
    fn checkpoint(&self, drained: impl FnOnce() -> bool) {
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !drained() {
            return;
        }
        match OpenOptions::new().create(true).write(true).truncate(true).open(&self.path) {
            Ok(f) => *file = Some(f),
            Err(e) => tracing::error!(error = %e, "emptying the record journal failed"),
        }
    }
}

/// Submits records to the sink; cheap to clone.
#[derive(Clone)]
pub struct LogSink {
    tx: mpsc::Sender<RecordWrite>,
    spool: Arc<Spool>,
    journal: Arc<Journal>,
    pub stats: Arc<SinkStats>,
}

impl LogSink {
    /// Starts the sink task, after moving what a previous instance left in the journal to the
    /// spool. Without a store, records are journaled and spooled only.
    ///
    /// # Errors
    /// When the journal in the spool's directory cannot be read or created.
    pub fn start(
        store: Option<MongoStore>,
        spool: Spool,
        stop: watch::Receiver<bool>,
    ) -> std::io::Result<(Self, tokio::task::JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let journal = Arc::new(Journal::open(&spool.dir, &spool)?);
        let spool = Arc::new(spool);
        let stats = Arc::new(SinkStats::default());
        let task = match store {
            Some(store) => {
                etcron_common::task::spawn(run(store, rx, spool.clone(), journal.clone(), stats.clone(), stop))
            }
            // No store (the simulation): every record goes from the journal to the spool.
            None => {
                drop(rx);
                etcron_common::task::spawn(async {})
            }
        };
        Ok((Self { tx, spool, journal, stats }, task))
    }

    /// [`submit`](Self::submit) with the record's trace span, ended once the record is written
    /// (or spooled, or lost).
    pub fn submit_traced(&self, write: RecordWrite, span: Option<etcron_common::trace::Span>) {
        if let Some(span) = span {
            self.stats.spans.hold(&write.record.id, span);
        }
        self.submit(write);
    }

    /// Queues a record; never blocks and never drops silently.
    pub fn submit(&self, write: RecordWrite) {
        self.journal.append_then(write, |w| {
            if let Err(mpsc::error::TrySendError::Full(w) | mpsc::error::TrySendError::Closed(w)) = self.tx.try_send(w) {
                tracing::warn!(execution_id = %w.record.id, "record queue full or closed; writing the record to the spool directly");
                spool_or_drop(&self.spool, &self.stats, &[w]);
            }
        });
    }

    #[must_use]
    pub fn queued(&self) -> usize {
        QUEUE - self.tx.capacity()
    }

    /// Bytes waiting in the spool.
    #[must_use]
    pub fn spool_size(&self) -> u64 {
        self.spool.size()
    }
}

fn spool_or_drop(spool: &Spool, stats: &SinkStats, batch: &[RecordWrite]) {
    match spool.append(batch) {
        Ok(()) => {
            stats.spooled.fetch_add(batch.len() as u64, Ordering::Relaxed);
            stats.spans.end(batch, "spooled");
        }
        Err(e) => {
            stats.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
            stats.spans.end(batch, "lost");
            for w in batch {
                tracing::error!(execution_id = %w.record.id, status = w.record.status.as_str(), error = %e, "EXECUTION RECORD LOST: MongoDB unavailable and the spool cannot be written");
            }
        }
    }
}

/// Ids of executions whose `running` record this sink has written and whose final record it has
/// not: their final record replaces the stored one without trying an insert first.
#[derive(Debug, Default)]
struct StoredRunning(etcron_common::hash::HashSet<ExecutionId>);

/// Most ids `StoredRunning` keeps (a worker runs at most its capacity at once; runs whose final
/// record went elsewhere, e.g. to the spool, only cost a failed insert once forgotten).
const STORED_RUNNING_MAX: usize = 100_000;

impl StoredRunning {
    fn contains(&self, id: &ExecutionId) -> bool {
        self.0.contains(id)
    }

    /// Notes a batch MongoDB took.
    fn note(&mut self, batch: &[RecordWrite]) {
        for w in batch {
            match w.mode {
                WriteMode::IfAbsent => {
                    if self.0.len() >= STORED_RUNNING_MAX {
                        self.0.clear();
                    }
                    self.0.insert(w.record.id.clone());
                }
                WriteMode::Replace | WriteMode::OverRunning => {
                    self.0.remove(&w.record.id);
                }
            }
        }
    }
}

/// Drops every `running` write (`IfAbsent`) whose final record is in the same batch: the final
/// record replaces it anyway, so a task shorter than a batch costs MongoDB one write, not two.
/// Order among the remaining writes is kept.
fn coalesce(batch: &mut Vec<RecordWrite>) {
    let finals: etcron_common::hash::HashSet<String> =
        batch.iter().filter(|w| w.mode.is_final()).map(|w| w.record.id.to_string()).collect();
    if !finals.is_empty() {
        batch.retain(|w| w.mode.is_final() || !finals.contains(&w.record.id.to_string()));
    }
}

/// Batch writes in flight at once: while MongoDB inserts one batch, the next is collected and
/// sent, so the worker's and MongoDB's work overlap (BENCHMARKS.md: sink).
pub const IN_FLIGHT: usize = 2;

/// The batch writes under way; each hands its batch back with the outcome.
struct Writes {
    tasks: tokio::task::JoinSet<(Vec<RecordWrite>, Result<(), etcron_common::store::StoreError>)>,
    /// Set when a write task panicked with its batch: the journal is then never emptied, so the
    /// next start spools that batch again (writes are idempotent).
    keep_journal: bool,
}

impl Writes {
    fn start(&mut self, store: &MongoStore, batch: Vec<RecordWrite>, running: &StoredRunning) {
        let stored: etcron_common::hash::HashSet<ExecutionId> = batch
            .iter()
            .filter(|w| w.mode == WriteMode::Replace && running.contains(&w.record.id))
            .map(|w| w.record.id.clone())
            .collect();
        let store = store.clone();
        self.tasks.spawn(async move {
            let outcome = store.write_known(&batch, |w| stored.contains(&w.record.id)).await;
            (batch, outcome)
        });
    }

    /// Counts a finished write, or spools its batch.
    fn finish_write(
        &mut self,
        done: Result<(Vec<RecordWrite>, Result<(), etcron_common::store::StoreError>), tokio::task::JoinError>,
        ctx: (&Spool, &SinkStats, &mut StoredRunning),
    ) {
        let (spool, stats, running) = ctx;
        match done {
            Ok((batch, Ok(()))) => {
                stats.written.fetch_add(batch.len() as u64, Ordering::Relaxed);
                stats.spans.end(&batch, "written");
                running.note(&batch);
            }
            Ok((batch, Err(e))) => {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(records = batch.len(), error = %e, "writing execution records failed; spooling them");
                spool_or_drop(spool, stats, &batch);
            }
            Err(e) => {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                self.keep_journal = true;
                tracing::error!(error = %e, "a record write task failed; its records stay in the journal and are spooled at the next start");
            }
        }
    }
}

async fn run(
    store: MongoStore,
    mut rx: mpsc::Receiver<RecordWrite>,
    spool: Arc<Spool>,
    journal: Arc<Journal>,
    stats: Arc<SinkStats>,
    mut stop: watch::Receiver<bool>,
) {
    let mut batch: Vec<RecordWrite> = Vec::with_capacity(BATCH);
    let mut running = StoredRunning::default();
    let mut writes = Writes { tasks: tokio::task::JoinSet::new(), keep_journal: false };
    let mut replay_tick = tokio::time::interval(REPLAY_EVERY);
    replay_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = false;
    loop {
        // Collect a batch: up to BATCH records, or whatever came within FLUSH_EVERY; a write
        // slot must be free first.
        let first = tokio::select! {
            r = rx.recv(), if !closing && writes.tasks.len() < IN_FLIGHT => r,
            Some(done) = writes.tasks.join_next(), if !writes.tasks.is_empty() => {
                writes.finish_write(done, (&spool, &stats, &mut running));
                None
            }
            _ = replay_tick.tick() => None,
            _ = stop.changed(), if !closing => { closing = true; None }
        };
        if let Some(w) = first {
            batch.push(w);
            let deadline = tokio::time::Instant::now() + FLUSH_EVERY;
            while batch.len() < BATCH {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(w)) => batch.push(w),
                    _ => break,
                }
            }
        }
        if closing {
            // Drain what is queued; anything MongoDB does not take now goes to the spool.
            rx.close();
            while let Some(w) = rx.recv().await {
                batch.push(w);
            }
        }
        if !batch.is_empty() {
            coalesce(&mut batch);
            if spool.pending() {
                // Keep order: older records are waiting in the spool.
                spool_or_drop(&spool, &stats, &batch);
                batch.clear();
            } else {
                writes.start(&store, std::mem::replace(&mut batch, Vec::with_capacity(BATCH)), &running);
            }
        }
        if closing {
            while let Some(done) = writes.tasks.join_next().await {
                writes.finish_write(done, (&spool, &stats, &mut running));
            }
        }
        if writes.tasks.is_empty() {
            // Everything taken is in MongoDB or the spool: if nothing else waits in the queue,
            // the journal holds nothing that is not safe elsewhere.
            if !writes.keep_journal {
                journal.checkpoint(|| rx.is_empty());
            }
            if spool.pending() {
                replay(&store, &spool, &stats).await;
            }
        }
        if closing {
            if spool.pending() {
                tracing::warn!(
                    bytes = spool.size(),
                    "stopping with execution records in the spool; they are replayed at the next start"
                );
            }
            return;
        }
    }
}

/// Replays spool files oldest first; stops at the first failure (the file stays and is
/// retried whole later: writes are idempotent).
async fn replay(store: &MongoStore, spool: &Spool, stats: &SinkStats) {
    if !replay_pass(store, spool, stats).await {
        spool.pending.store(true, Ordering::SeqCst);
    }
}

/// One pass over the spool files; false when something was left for a later pass.
async fn replay_pass(store: &MongoStore, spool: &Spool, stats: &SinkStats) -> bool {
    if let Err(e) = spool.rotate() {
        tracing::error!(error = %e, "rotating the spool failed");
        return false;
    }
    let files = match spool.files() {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "reading the spool directory failed");
            return false;
        }
    };
    for path in files
        .into_iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(REPLAY_PREFIX)))
    {
        let mut records = match read_spool(&path) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "reading a spool file failed");
                return false;
            }
        };
        // A run spooled while it went on has its `running` and final records here: the final
        // one alone is written (as a live batch would be), so no reader sees it go back.
        coalesce(&mut records);
        for chunk in records.chunks(BATCH) {
            if let Err(e) = store.write(chunk).await {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "MongoDB still unavailable; spool kept");
                return false;
            }
        }
        stats.replayed.fetch_add(records.len() as u64, Ordering::Relaxed);
        stats.written.fetch_add(records.len() as u64, Ordering::Relaxed);
        tracing::info!(records = records.len(), file = %path.display(), "replayed spooled execution records");
        if let Err(e) = fs::remove_file(&path) {
            tracing::error!(file = %path.display(), error = %e, "removing a replayed spool file failed; it will be replayed again (harmless)");
            return false;
        }
    }
    true
}

fn read_spool(path: &Path) -> std::io::Result<Vec<RecordWrite>> {
    let reader = BufReader::new(File::open(path)?);
    let mut out = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(r) => out.push(r),
            // A torn last line from a crash mid-append: everything before it is intact.
            Err(e) => {
                tracing::error!(file = %path.display(), line = n + 1, error = %e, "skipping unreadable spool line")
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcron_model::keys::Tick;
    use etcron_model::record::{ExecutionRecord, Status, TriggerKind};

    fn write(n: i64) -> RecordWrite {
        RecordWrite {
            mode: WriteMode::Replace,
            record: ExecutionRecord {
                worker_id: "w".into(),
                hostname: "h".into(),
                exit_code: Some(0),
                ..ExecutionRecord::blank(
                    &ExecutionId::new("a", Tick::Scheduled(n)),
                    n,
                    TriggerKind::Schedule,
                    Status::Succeeded,
                    None,
                )
            },
        }
    }

    #[test]
    fn a_running_write_followed_by_its_final_record_in_one_batch_is_dropped() {
        let running = |n| RecordWrite { mode: WriteMode::IfAbsent, ..write(n) };
        // 1: started and finished within the batch; 2: only started; 3: finished, started earlier.
        let mut batch = vec![running(1), running(2), write(1), write(3)];
        coalesce(&mut batch);
        let left: Vec<(WriteMode, i64)> = batch.iter().map(|w| (w.mode, w.record.scheduled_ms)).collect();
        assert_eq!(left, vec![(WriteMode::IfAbsent, 2), (WriteMode::Replace, 1), (WriteMode::Replace, 3)]);
        let mut only_running = vec![running(4)];
        coalesce(&mut only_running);
        assert_eq!(only_running.len(), 1);
    }

    #[test]
    fn spool_keeps_order_across_rotation_and_skips_torn_lines() {
        let dir = std::env::temp_dir().join(format!("etcron-spool-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let spool = Spool::open(&dir).unwrap();
        assert!(!spool.pending());
        spool.append(&[write(1), write(2)]).unwrap();
        spool.rotate().unwrap();
        spool.append(&[write(3)]).unwrap();
        // A crash in the middle of an append leaves a torn line.
        let mut f = OpenOptions::new().append(true).open(dir.join(SPOOL_FILE)).unwrap();
        f.write_all(b"{\"mode\":\"repl").unwrap();
        assert!(spool.pending());
        let mut seen = Vec::new();
        for file in spool.files().unwrap() {
            seen.extend(read_spool(&file).unwrap().into_iter().map(|w| w.record.scheduled_ms));
        }
        assert_eq!(seen, vec![1, 2, 3]);
        assert!(spool.size() > 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_journal_keeps_records_until_a_checkpoint_and_hands_leftovers_to_the_spool() {
        let path = std::env::temp_dir().join(format!("etcron-journal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        let dir = Path::new(&path);
        let spool = Spool::open(dir).unwrap();
        let journal = Journal::open(dir, &spool).unwrap();
        assert!(!spool.pending(), "nothing left over");
        journal.append_then(write(1), drop);
        journal.append_then(write(2), drop);
        assert_eq!(read_spool(&dir.join(JOURNAL_FILE)).unwrap().len(), 2);
        journal.checkpoint(|| false);
        assert_eq!(read_spool(&dir.join(JOURNAL_FILE)).unwrap().len(), 2, "not drained: kept");
        journal.checkpoint(|| true);
        assert!(read_spool(&dir.join(JOURNAL_FILE)).unwrap().is_empty());
        // A crash leaves records in the journal: the next start spools them, in order.
        journal.append_then(write(3), drop);
        journal.append_then(write(4), drop);
        drop(journal);
        let journal = Journal::open(dir, &spool).unwrap();
        assert!(spool.pending());
        let spooled = read_spool(&dir.join(SPOOL_FILE)).unwrap();
        let ticks: Vec<i64> = spooled.iter().map(|w| w.record.scheduled_ms).collect();
        assert_eq!(ticks, vec![3, 4]);
        assert!(read_spool(&dir.join(JOURNAL_FILE)).unwrap().is_empty());
        drop(journal);
        fs::remove_dir_all(dir).unwrap();
    }
}
