//! The master's index of the stored jobs (`{ns}/jobs/`): what `GET /api/workers` and the pool
//! routes read of every job (team, pool, placement: [`index`]), kept by a watch, so that a page
//! costs what it shows rather than a read of every spec. The loop lists the prefix in pages
//! ([`Pages`]) into a fresh index, swaps it in, then watches from the listing's revision + 1:
//! a failed watch resumes from the revision after its last event, a compaction lists again,
//! each retried with backoff. A reader names the etcd revision it read the rest of its page
//! at and waits (at most [`CATCH_UP`]) for the index to reach it, asking the watch for a
//! progress report when no job changed since; so a page reflects every job write made before
//! it. A page that finds no listing done waits for it as long, then answers 503 (a master
//! listing a million jobs takes a while; its other routes do not wait for it).

pub mod index;

use std::sync::{Arc, LazyLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, WatchOptions, WatchResponse};
use etcron_common::backoff::Backoff;
use etcron_common::etcd::list::Pages;
use etcron_common::etcd::{request, EtcdError, REQUEST_TIMEOUT};
use etcron_common::metrics::{counter, gauge};
use etcron_model::keys::{Key, Keys};
use prometheus::{IntCounter, IntGauge};
use tokio::sync::{watch, Notify};

pub use index::Index;

/// Most time a reader waits for the index to reach the revision it read at; past it, it reads
/// the index as it is (counted in `etcron_master_job_index_behind_total`).
pub const CATCH_UP: Duration = Duration::from_secs(2);

static INDEXED: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("etcron_master_indexed_jobs", "Jobs in this master's job index (0 until it is listed)."));
static BEHIND: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcron_master_job_index_behind_total",
        "Pages answered from a job index that had not reached the revision they read at within 2 s.",
    )
});
static WATCH_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcron_master_job_index_watch_failures_total",
        "Listings and watches of the job index that failed or were cut (each retried with backoff).",
    )
});

/// The index, shared by the loop that keeps it and the routes that read it.
#[derive(Clone, Default)]
pub struct JobIndex(Arc<Shared>);

#[derive(Default)]
struct Shared {
    /// A loop keeps it (not so for a test's index).
    kept: bool,
    /// It sets the process's gauge (the default namespace's index).
    gauge: bool,
    /// `None` until the first listing.
    index: RwLock<Option<Index>>,
    /// The etcd revision the index reflects.
    revision: watch::Sender<i64>,
    /// A reader asks the watch for a progress report.
    progress: Notify,
}

/// The index is not listed yet.
#[derive(Debug, Clone, Copy)]
pub struct Loading;

impl JobIndex {
    /// Starts the loop that lists and watches `{ns}/jobs/`; `gauge`: it sets the process's
    /// gauge of indexed jobs (the default namespace's index).
    #[must_use]
    pub fn start(client: Client, keys: Keys, gauge: bool) -> Self {
        LazyLock::force(&INDEXED);
        LazyLock::force(&BEHIND);
        LazyLock::force(&WATCH_FAILURES);
        let me = Self(Arc::new(Shared { kept: true, gauge, ..Shared::default() }));
        tokio::spawn(keep(client, keys, me.0.clone()));
        me
    }

    /// `f` of the index once it reflects etcd at `revision` (or [`CATCH_UP`] passed).
    ///
    /// # Errors
    /// [`Loading`] when the first listing is not done within [`CATCH_UP`].
    pub async fn read<R>(&self, revision: i64, f: impl FnOnce(&Index) -> R) -> Result<R, Loading> {
        let mut at = self.0.revision.subscribe();
        // Listed at a revision > 0.
        if *at.borrow() == 0 && (!self.0.kept || tokio::time::timeout(CATCH_UP, at.wait_for(|r| *r > 0)).await.is_err())
        {
            return Err(Loading);
        }
        if *at.borrow() < revision {
            self.0.progress.notify_one();
            if tokio::time::timeout(CATCH_UP, at.wait_for(|r| *r >= revision)).await.is_err() {
                BEHIND.inc();
                tracing::info!(revision, at = *at.borrow(), "the job index is behind etcd; answering from it as it is");
            }
        }
        self.0.index.read().unwrap_or_else(PoisonError::into_inner).as_ref().map(f).ok_or(Loading)
    }

    /// An index given as listed at `revision`.
    #[cfg(test)]
    fn with_index(&self, index: Index, revision: i64) {
        *self.0.index.write().unwrap_or_else(PoisonError::into_inner) = Some(index);
        self.0.revision.send_replace(revision);
    }
}

impl Shared {
    fn reached(&self, revision: i64) {
        self.revision.send_if_modified(|r| {
            let newer = revision > *r;
            *r = (*r).max(revision);
            newer
        });
    }
}

/// Lists, then watches, for the life of the process.
async fn keep(client: Client, keys: Keys, shared: Arc<Shared>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut listed_before = false;
    // The revision to watch from without listing again.
    let mut resume: Option<i64> = None;
    loop {
        let from = match resume.take() {
            Some(from) => from,
            None => match list(&client, &keys, &shared, listed_before).await {
                Ok(revision) => {
                    listed_before = true;
                    revision + 1
                }
                Err(e) => {
                    WATCH_FAILURES.inc();
                    tracing::warn!(error = %e, "listing the job index failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
            },
        };
        resume = follow(&client, &keys, &shared, from, &mut backoff).await;
        WATCH_FAILURES.inc();
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Lists `{ns}/jobs/` into a fresh index and swaps it in: the revision listed at.
async fn list(client: &Client, keys: &Keys, shared: &Shared, again: bool) -> Result<i64, String> {
    let started = Instant::now();
    let mut pages = Pages::new(client, "list_job_index", keys.jobs_prefix().as_bytes(), 0, REQUEST_TIMEOUT * 4);
    let mut index = Index::default();
    loop {
        match pages.next().await {
            Ok(Some(page)) => {
                for kv in page {
                    if let Some(Key::Job(name)) = keys.parse(kv.key()) {
                        index.put(&name, kv.value());
                    }
                }
            }
            Ok(None) => break,
            Err(EtcdError::Failed(e)) => return Err(e.to_string()),
            Err(EtcdError::Timeout) => return Err("a page timed out".to_owned()),
        }
    }
    let revision = pages.revision();
    let (jobs, placements, bytes) = (index.len(), index.placements(), index.approx_bytes());
    *shared.index.write().unwrap_or_else(PoisonError::into_inner) = Some(index);
    if shared.gauge {
        INDEXED.set(i64::try_from(jobs).unwrap_or(i64::MAX));
    }
    shared.reached(revision);
    let seconds = started.elapsed().as_secs_f64();
    if again {
        tracing::info!(jobs, placements, bytes, seconds, revision, "job index listed again (etcd compacted the watch)");
    } else {
        tracing::info!(jobs, placements, bytes, seconds, revision, "job index listed");
    }
    Ok(revision)
}

/// Watches from `from` until the watch ends: `Some(revision)` to resume from, `None` to list
/// again (a compaction).
async fn follow(client: &Client, keys: &Keys, shared: &Shared, mut from: i64, backoff: &mut Backoff) -> Option<i64> {
    let opts = WatchOptions::new().with_prefix().with_start_revision(from);
    let mut stream = match request("watch_job_index", client.watch_client().watch(keys.jobs_prefix(), Some(opts))).await
    {
        Ok(stream) => stream,
        Err(EtcdError::Failed(e)) => {
            tracing::warn!(error = %e, "watching the jobs for the job index failed; retrying");
            return Some(from);
        }
        Err(EtcdError::Timeout) => {
            tracing::warn!("watching the jobs for the job index timed out; retrying");
            return Some(from);
        }
    };
    loop {
        let message = tokio::select! {
            () = shared.progress.notified() => None,
            m = stream.message() => Some(m),
        };
        let resp = match message {
            None => match stream.request_progress().await {
                Ok(()) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "asking the job index's watch for progress failed; resuming");
                    return Some(from);
                }
            },
            Some(Ok(Some(resp))) => resp,
            Some(Ok(None)) => {
                tracing::warn!("the job index's watch closed; resuming");
                return Some(from);
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the job index's watch failed; resuming");
                return Some(from);
            }
        };
        if resp.compact_revision() > 0 || resp.canceled() {
            tracing::warn!(
                compact_revision = resp.compact_revision(),
                reason = resp.cancel_reason(),
                "the job index's watch was cancelled (compaction?); listing again"
            );
            return None;
        }
        backoff.reset();
        from = apply(keys, shared, &resp).unwrap_or(from).max(from);
    }
}

/// Applies a watch answer: the revision to resume from after its events (`None`: none).
fn apply(keys: &Keys, shared: &Shared, resp: &WatchResponse) -> Option<i64> {
    if resp.events().is_empty() {
        // A progress report: nothing under the prefix changed up to its revision. (The answer
        // that creates the watch says nothing of the events still to come.)
        if !resp.created() {
            if let Some(h) = resp.header() {
                shared.reached(h.revision());
            }
        }
        return None;
    }
    let mut last = 0;
    {
        let mut guard = shared.index.write().unwrap_or_else(PoisonError::into_inner);
        let index = guard.get_or_insert_with(Index::default);
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            last = last.max(kv.mod_revision());
            let Some(Key::Job(name)) = keys.parse(kv.key()) else { continue };
            match event.event_type() {
                EventType::Put => index.put(&name, kv.value()),
                EventType::Delete => index.delete(&name),
            }
        }
        if shared.gauge {
            INDEXED.set(i64::try_from(index.len()).unwrap_or(i64::MAX));
        }
    }
    shared.reached(last);
    Some(last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_reader_waits_for_its_revision_and_is_refused_before_the_listing() {
        let ix = JobIndex::default();
        assert!(ix.read(0, Index::len).await.is_err(), "not listed yet");
        let mut listed = Index::default();
        listed.put("a", br#"{"schedule": "@daily", "task": {"kind": "shell", "command": "true"}}"#);
        ix.with_index(listed, 10);
        assert_eq!(ix.read(10, Index::len).await.ok(), Some(1));
        // Behind: the reader asks for progress and waits until the index reaches its revision.
        let shared = ix.0.clone();
        let report = tokio::spawn(async move {
            shared.progress.notified().await;
            shared.reached(12);
        });
        let started = tokio::time::Instant::now();
        assert_eq!(ix.read(12, Index::len).await.ok(), Some(1));
        assert!(started.elapsed() < CATCH_UP);
        report.await.unwrap();
        // Never reached: answered as it is after CATCH_UP.
        assert_eq!(ix.read(20, Index::len).await.ok(), Some(1));
        assert!(started.elapsed() >= CATCH_UP);
    }
}
