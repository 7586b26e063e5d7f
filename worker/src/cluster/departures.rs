//! Departures a survivor owes: every survivor that sees a worker depart writes it to
//! `<data_dir>/departures/` before anything else, and forgets it only once the departure was
//! handled — by itself, or by another survivor whose done marker (`{ns}/departures/{worker}/
//! {revision}`, on a retention lease) it reads. So the handling of a departure outlives its
//! handlers: when the survivors ranked first die midway, the others move up in rank and finish
//! it (`loss::owe`), and a survivor that dies itself finishes what it owed at its next start
//! (same data dir).
//!
//! One small file per departure, written under a temporary name and renamed, like the
//! provisional records (no fsync: they outlive the process, not the host's page cache).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::metrics::METRICS;

/// The directory under the data dir.
pub const DIR: &str = "departures";

/// Prefix of a file being written (renamed once whole).
const TMP: &str = "tmp-";

/// This worker's own current session: the revision its registration was first written at. A
/// worker that finds it at start (its previous life ended without a clean shutdown) owes that
/// session's departure too, found in etcd's history from there: when every worker was down as
/// it expired, nobody else saw it go.
const SESSION: &str = "session.json";

#[derive(Debug, Serialize, Deserialize)]
struct Session {
    registered_at: i64,
}

/// One departure: the worker and the revision its registration was deleted at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Departure {
    pub worker: String,
    pub revision: i64,
}

impl Departure {
    /// The file's name: the revision, then the worker id in hex (any id is a safe name).
    fn file_name(&self) -> String {
        let hex: String = self.worker.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{:020}-{hex}.json", self.revision)
    }
}

/// The departures this worker owes, on disk.
#[derive(Debug)]
pub struct Owed {
    dir: PathBuf,
}

impl Owed {
    /// Opens (creates) `<data_dir>/departures`: the departures a previous run of this worker
    /// owed and did not finish, oldest first, and the registration revision of its own last
    /// session when it did not end cleanly. Half-written and unreadable files are dropped.
    ///
    /// # Errors
    /// When the directory cannot be created or listed.
    pub fn open(data_dir: &Path) -> std::io::Result<(Self, Vec<Departure>, Option<i64>)> {
        let dir = data_dir.join(DIR);
        fs::create_dir_all(&dir)?;
        let previous = fs::read(dir.join(SESSION))
            .ok()
            .and_then(|b| serde_json::from_slice::<Session>(&b).ok())
            .map(|s| s.registered_at);
        let mut names: Vec<String> = fs::read_dir(&dir)?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != SESSION)
            .collect();
        names.sort();
        let mut left = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let parsed = (!name.starts_with(TMP))
                .then(|| fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Departure>(&b).ok()))
                .flatten();
            match parsed {
                Some(d) => left.push(d),
                None => {
                    tracing::warn!(file = %path.display(), "dropping a half-written or unreadable owed departure");
                    let _ = fs::remove_file(&path);
                }
            }
        }
        if !left.is_empty() {
            tracing::warn!(departures = left.len(), dir = %dir.display(), "the previous run of this worker ended owing the handling of departures; finishing them unless another survivor did");
        }
        METRICS.departures_owed.set(i64::try_from(left.len()).unwrap_or(i64::MAX));
        Ok((Self { dir }, left, previous))
    }

    /// Notes this worker's new session, registered at `revision` (see [`SESSION`]).
    pub fn session_registered(&self, revision: i64) {
        let tmp = self.dir.join(format!("{TMP}{SESSION}"));
        let written = serde_json::to_vec(&Session { registered_at: revision })
            .map_err(std::io::Error::other)
            .and_then(|bytes| fs::write(&tmp, bytes))
            .and_then(|()| fs::rename(&tmp, self.dir.join(SESSION)));
        if let Err(e) = written {
            tracing::error!(dir = %self.dir.display(), error = %e, "noting this worker's session in its data dir failed (were every worker down as it ends, its departure would go unhandled)");
        }
    }

    /// This worker's session ended cleanly (everything it ran closed): nothing to owe for it.
    pub fn session_ended_cleanly(&self) {
        let _ = fs::remove_file(self.dir.join(SESSION));
    }

    /// Notes a departure this worker now owes. A file that cannot be written is logged; the
    /// handling goes on in memory (only a crash of this worker would then forget it).
    pub fn note(&self, d: &Departure) {
        let name = d.file_name();
        // Seen twice (the membership watch and a restart's own earlier session): counted once.
        let new = !self.dir.join(&name).exists();
        let tmp = self.dir.join(format!("{TMP}{name}"));
        let written = serde_json::to_vec(d)
            .map_err(std::io::Error::other)
            .and_then(|bytes| fs::write(&tmp, bytes))
            .and_then(|()| fs::rename(&tmp, self.dir.join(&name)));
        match written {
            Ok(()) if new => METRICS.departures_owed.inc(),
            Ok(()) => {}
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                tracing::error!(worker = %d.worker, revision = d.revision, dir = %self.dir.display(), error = %e, "writing an owed departure failed; handling it anyway (a crash of this worker before it is handled would forget it)");
            }
        }
    }

    /// The departure was handled (here or elsewhere), or is given up: its file goes.
    pub fn settled(&self, d: &Departure) {
        match fs::remove_file(self.dir.join(d.file_name())) {
            Ok(()) => METRICS.departures_owed.dec(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::error!(worker = %d.worker, error = %e, "removing a settled departure's file failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owed_departures_outlive_the_process_until_settled() {
        let dir = tempfile::tempdir().unwrap();
        let (owed, left, previous) = Owed::open(dir.path()).unwrap();
        assert!(left.is_empty() && previous.is_none());
        owed.session_registered(99);
        let a = Departure { worker: "w/ä 1".to_owned(), revision: 42 };
        let b = Departure { worker: "w2".to_owned(), revision: 7 };
        owed.note(&a);
        owed.note(&b);
        fs::write(dir.path().join(DIR).join("tmp-half"), b"{").unwrap();
        fs::write(dir.path().join(DIR).join("junk.json"), b"not json").unwrap();
        let (owed, left, previous) = Owed::open(dir.path()).unwrap();
        assert_eq!(left, vec![b.clone(), a.clone()], "oldest revision first, junk dropped");
        assert_eq!(previous, Some(99), "the last session, not ended cleanly");
        owed.session_ended_cleanly();
        owed.settled(&a);
        owed.settled(&a);
        let (_, left, previous) = Owed::open(dir.path()).unwrap();
        assert_eq!((left, previous), (vec![b], None));
        assert_eq!(fs::read_dir(dir.path().join(DIR)).unwrap().count(), 1, "the half-written and junk files are gone");
    }
}
