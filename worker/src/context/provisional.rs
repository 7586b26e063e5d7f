//! Provisional records: the record of a claim this worker is about to close itself (a tick that
//! did not run, `skipped`/`missed`; a departed worker's execution, `lost`; an orphaned claim,
//! `missed`) is written to `<data_dir>/provisional/` before the close's transaction, and goes to
//! the log sink only once the claim says what the record says. A worker killed between the close
//! and the journal finds the file at its next start and settles it (`not_run::provisional_loop`);
//! a close that lost (the claim was somebody else's) deletes the file unsubmitted, so a record
//! never contradicts its claim.
//!
//! One small file per close: written under a temporary name, then renamed (a crash leaves a
//! whole file or none). Like the record journal (`log_sink`), no fsync: the files outlive the
//! process (a kill, an OOM), not the host's page cache.

use etcron_common::hash::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use etcron_common::claim::MIN_RETENTION;
use etcron_model::record::{ExecutionRecord, Status};
use etcron_model::{now_ms, UnixMs};
use serde::{Deserialize, Serialize};

use crate::metrics::METRICS;

/// The directory under the data dir.
pub const DIR: &str = "provisional";

/// Prefix of a file being written (renamed once whole).
const TMP: &str = "tmp-";

/// A claim absent this long after its provisional record was written may have ended its
/// retention (it lives at least `MIN_RETENTION` from the close, which came after the write);
/// absent earlier, the close was never applied. One minute less, for wall-clock steps.
pub const SURELY_APPLIED_WITHIN: Duration = Duration::from_secs(MIN_RETENTION.as_secs() - 60);

/// What one file holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    /// The claim whose close the record waits for.
    pub claim_key: String,
    /// When the file was written (wall clock, Unix ms).
    pub written_ms: UnixMs,
    /// The record, submitted once the claim says `record.status`.
    pub record: ExecutionRecord,
}

/// The provisional records of this worker's data dir.
#[derive(Debug)]
pub struct Provisional {
    dir: PathBuf,
    /// Files whose close is still under way in this process: the provisional loop leaves them alone.
    in_flight: Mutex<HashSet<String>>,
    /// Files left for the provisional loop (found at start, or released after an unanswered close).
    left: AtomicUsize,
    seq: AtomicU64,
}

/// One provisional record on disk, from its write until it is removed or released.
#[derive(Debug)]
#[must_use = "a provisional record is removed once its close is known, or released to the provisional loop"]
pub struct ProvisionalFile {
    /// `None` when the file could not be written (logged and counted).
    name: Option<String>,
}

/// What a read of the claim said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimRead {
    /// etcd did not answer.
    Unreadable,
    Absent,
    /// The claim's status (`None`: taken, queued, or not a claim this worker understands) and
    /// its create revision.
    Present {
        status: Option<Status>,
        create_revision: i64,
    },
}

/// What becomes of a provisional record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its close was applied (or cannot be told apart from one): submit the record
    /// (`IfAbsent`), with this fencing token when it had none yet.
    Submit { fencing_token: Option<i64> },
    /// The claim says something else, or the close never happened: no record.
    Drop,
    /// etcd did not answer: keep the file for a later pass.
    Keep,
    /// The claim is absent while its close, unanswered, may still be applied late (a
    /// transaction queued behind a partition or an election), and until the sweeps settle the
    /// tick (which creates the claim key either way): keep the file and look again.
    Wait,
}

/// Decides a provisional record of `status` written `age` ago from what its claim says: closed
/// with the record's status → submit; present with anything else (another worker's run or
/// outcome) → drop; absent → wait while the close, had it been applied, would still hold the
/// key (it may yet be applied: dropping the record then left a closed claim with no record, a
/// tick the sweeps see claimed and nobody records), else submit (the claim's retention is over:
/// `IfAbsent`, so a run's own record, written with `Replace`, still wins over it); unreadable →
/// keep.
#[must_use]
pub fn judge(claim: ClaimRead, status: Status, age: Duration) -> Verdict {
    match claim {
        ClaimRead::Unreadable => Verdict::Keep,
        ClaimRead::Present { status: Some(s), create_revision } if s == status => {
            Verdict::Submit { fencing_token: Some(create_revision) }
        }
        ClaimRead::Present { .. } => Verdict::Drop,
        ClaimRead::Absent if age < SURELY_APPLIED_WITHIN => Verdict::Wait,
        ClaimRead::Absent => Verdict::Submit { fencing_token: None },
    }
}

impl Provisional {
    /// Opens (creates) `<data_dir>/provisional`, dropping files a crash left half-written.
    ///
    /// # Errors
    /// When the directory cannot be created or listed.
    pub fn open(data_dir: &Path) -> std::io::Result<Self> {
        let dir = data_dir.join(DIR);
        fs::create_dir_all(&dir)?;
        let mut left = 0;
        for entry in fs::read_dir(&dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.starts_with(TMP) {
                // Written before its close's transaction was sent: nothing was closed.
                let _ = fs::remove_file(dir.join(&name));
            } else {
                left += 1;
            }
        }
        if left > 0 {
            tracing::warn!(files = left, dir = %dir.display(), "the previous run of this worker ended between closing claims and recording them; settling those records once etcd answers");
        }
        METRICS.provisional_waiting.set(i64::try_from(left).unwrap_or(i64::MAX));
        Ok(Self { dir, in_flight: Mutex::default(), left: AtomicUsize::new(left), seq: AtomicU64::new(0) })
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes the record of a claim about to be closed. A file that cannot be written is
    /// logged and counted, and the close goes on without it (as a record the journal cannot
    /// take does): refusing to close would leave the tick unrecorded for certain.
    pub fn write(&self, claim_key: &str, record: &ExecutionRecord) -> ProvisionalFile {
        let stored = Stored { claim_key: claim_key.to_owned(), written_ms: now_ms(), record: record.clone() };
        let stamp =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let name = format!("{stamp:024}-{:06}.json", self.seq.fetch_add(1, Ordering::Relaxed));
        self.in_flight().insert(name.clone());
        let tmp = self.dir.join(format!("{TMP}{name}"));
        let written = serde_json::to_vec(&stored)
            .map_err(std::io::Error::other)
            .and_then(|bytes| fs::write(&tmp, bytes))
            .and_then(|()| fs::rename(&tmp, self.dir.join(&name)));
        match written {
            Ok(()) => ProvisionalFile { name: Some(name) },
            Err(e) => {
                self.in_flight().remove(&name);
                let _ = fs::remove_file(&tmp);
                METRICS.provisional_errors.inc();
                tracing::error!(execution_id = %record.id, dir = %self.dir.display(), error = %e, "writing a provisional record failed; closing its claim anyway (a crash right after the close would lose the record)");
                ProvisionalFile { name: None }
            }
        }
    }

    /// The close is known (the record was submitted, or is not to be): the file goes.
    pub fn remove(&self, pending: ProvisionalFile) {
        if let Some(name) = pending.name {
            self.delete(&name);
            self.in_flight().remove(&name);
        }
    }

    /// The close's outcome is unknown: the file stays for the provisional loop.
    pub fn release(&self, pending: ProvisionalFile) {
        if let Some(name) = pending.name {
            self.in_flight().remove(&name);
            let left = self.left.fetch_add(1, Ordering::SeqCst) + 1;
            METRICS.provisional_waiting.set(i64::try_from(left).unwrap_or(i64::MAX));
        }
    }

    /// Whether anything may wait for the provisional loop.
    #[must_use]
    pub fn has_left(&self) -> bool {
        self.left.load(Ordering::SeqCst) > 0
    }

    /// The files no close in this process is handling, by name, oldest first; unreadable ones
    /// are logged and deleted (nothing could ever settle them).
    #[must_use]
    pub fn leftovers(&self) -> Vec<(String, Stored)> {
        let names = match fs::read_dir(&self.dir) {
            Ok(entries) => {
                let mut names: Vec<String> =
                    entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                names.sort();
                names
            }
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "listing provisional records failed");
                return Vec::new();
            }
        };
        // Taken after the listing: a file listed and not in flight now is a leftover, or one
        // whose close ended in between (gone by now, skipped below).
        let in_flight = self.in_flight().clone();
        let mut found = Vec::new();
        for name in names.into_iter().filter(|n| !n.starts_with(TMP) && !in_flight.contains(n)) {
            let path = self.dir.join(&name);
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "reading a provisional record failed; trying again later");
                    continue;
                }
            };
            match serde_json::from_slice::<Stored>(&bytes) {
                Ok(stored) => found.push((name, stored)),
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "unreadable provisional record deleted");
                    self.settled(&name);
                }
            }
        }
        found
    }

    /// Deletes a settled leftover.
    pub fn settled(&self, name: &str) {
        self.delete(name);
        let before = self.left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)));
        let left = before.unwrap_or(0).saturating_sub(1);
        METRICS.provisional_waiting.set(i64::try_from(left).unwrap_or(i64::MAX));
    }

    fn delete(&self, name: &str) {
        let path = self.dir.join(name);
        if let Err(e) = fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::error!(file = %path.display(), error = %e, "removing a provisional record failed; it will be settled again (its record is written only if absent)");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use etcron_model::keys::{ExecutionId, Tick};
    use etcron_model::record::TriggerKind;

    fn record(n: i64, status: Status) -> ExecutionRecord {
        ExecutionRecord::blank(&ExecutionId::new("j", Tick::Scheduled(n)), n, TriggerKind::Schedule, status, None)
    }

    #[test]
    fn a_record_goes_only_where_its_claim_agrees() {
        let young = Duration::from_secs(5);
        let old = MIN_RETENTION + Duration::from_secs(1);
        let closed = |s| ClaimRead::Present { status: Some(s), create_revision: 42 };
        assert_eq!(judge(closed(Status::Missed), Status::Missed, young), Verdict::Submit { fencing_token: Some(42) });
        assert_eq!(judge(closed(Status::Lost), Status::Lost, old), Verdict::Submit { fencing_token: Some(42) });
        // Another worker's run, or another outcome: no record from here.
        assert_eq!(judge(closed(Status::Succeeded), Status::Lost, young), Verdict::Drop);
        assert_eq!(judge(closed(Status::Skipped), Status::Missed, young), Verdict::Drop);
        let taken = ClaimRead::Present { status: None, create_revision: 7 };
        assert_eq!(judge(taken, Status::Skipped, old), Verdict::Drop);
        // Absent: not applied yet (it may be, late, until the sweeps create the key); past its
        // retention, cannot tell.
        assert_eq!(judge(ClaimRead::Absent, Status::Skipped, young), Verdict::Wait);
        assert_eq!(judge(ClaimRead::Absent, Status::Skipped, Duration::ZERO), Verdict::Wait);
        assert_eq!(
            judge(ClaimRead::Absent, Status::Skipped, SURELY_APPLIED_WITHIN),
            Verdict::Submit { fencing_token: None }
        );
        assert_eq!(judge(ClaimRead::Unreadable, Status::Skipped, old), Verdict::Keep);
    }

    #[test]
    fn files_outlive_the_process_until_removed_and_skip_closes_under_way() {
        let dir = std::env::temp_dir().join(format!("etcron-provisional-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = Provisional::open(&dir).unwrap();
        assert!(!store.has_left());
        let a = store.write("k/a", &record(1, Status::Missed));
        let b = store.write("k/b", &record(2, Status::Skipped));
        let c = store.write("k/c", &record(3, Status::Lost));
        assert!(store.leftovers().is_empty(), "closes under way are left alone");
        store.remove(a);
        store.release(b);
        assert!(store.has_left());
        let left = store.leftovers();
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].1.claim_key.as_str(), left[0].1.record.status), ("k/b", Status::Skipped));
        store.settled(&left[0].0);
        assert!(!store.has_left());
        // A crash: `c` (its close under way) and a half-written file stay behind.
        drop(c);
        fs::write(dir.join(DIR).join(format!("{TMP}x.json")), b"{\"claim").unwrap();
        fs::write(dir.join(DIR).join("garbage.json"), b"not json").unwrap();
        drop(store);
        let store = Provisional::open(&dir).unwrap();
        assert!(store.has_left());
        let left = store.leftovers();
        assert_eq!(left.iter().map(|(_, s)| s.claim_key.as_str()).collect::<Vec<_>>(), vec!["k/c"]);
        assert_eq!(fs::read_dir(dir.join(DIR)).unwrap().count(), 1, "the half-written and unreadable files are gone");
        fs::remove_dir_all(&dir).unwrap();
    }
}
