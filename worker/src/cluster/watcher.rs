//! Mirrors an etcd prefix: list it (paginated, at one revision), then watch from revision+1.
//! A watch that fails resumes from the revision after its last event; on a compaction it
//! re-lists and hands the caller a fresh snapshot, so the caller reconciles instead of trusting
//! an event stream with a hole in it.

use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};
use tokio::sync::{mpsc, watch};

use etcron_common::backoff::Backoff;
use etcron_common::etcd::list::Pages;
use etcron_common::etcd::{request, EtcdError, REQUEST_TIMEOUT};

#[derive(Debug, Clone)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
}

#[derive(Debug)]
pub enum Update {
    /// Everything under the prefix at `revision`; replaces what the caller knew.
    Snapshot {
        kvs: Vec<Kv>,
        revision: i64,
    },
    Put(Kv),
    Delete {
        key: Vec<u8>,
        mod_revision: i64,
    },
}

/// A local copy of one prefix, kept by the watcher's updates (a reflector's store, in the
/// small): each mirror says what a listing, a put and a delete do to it, and [`Update::apply`]
/// is the one place that tells the three apart.
pub trait Mirror {
    /// Everything under the prefix at `revision`: replaces what the mirror held.
    fn listed(&mut self, kvs: Vec<Kv>, revision: i64);
    /// A key was created or changed.
    fn put(&mut self, kv: Kv);
    /// A key was deleted at `mod_revision`.
    fn deleted(&mut self, key: Vec<u8>, mod_revision: i64);
}

impl Update {
    /// Hands the update to `mirror`.
    pub fn apply(self, mirror: &mut impl Mirror) {
        match self {
            Update::Snapshot { kvs, revision } => mirror.listed(kvs, revision),
            Update::Put(kv) => mirror.put(kv),
            Update::Delete { key, mod_revision } => mirror.deleted(key, mod_revision),
        }
    }
}

/// Lists every key under `prefix` at a single revision, in pages sized by bytes
/// ([`etcron_common::etcd::list`]).
pub async fn list(client: &Client, prefix: &str) -> Result<(Vec<Kv>, i64), etcd_client::Error> {
    let mut pages = Pages::new(client, "list", prefix.as_bytes(), 0, REQUEST_TIMEOUT * 4);
    let mut out = Vec::new();
    loop {
        let page = match pages.next().await {
            Ok(Some(page)) => page,
            Ok(None) => break,
            Err(EtcdError::Failed(e)) => return Err(e),
            Err(EtcdError::Timeout) => return Err(etcd_client::Error::WatchError("listing timed out".to_owned())),
        };
        out.reserve(page.len());
        for item in page {
            let (create_revision, mod_revision) = (item.create_revision(), item.mod_revision());
            let (key, value) = item.into_key_value();
            out.push(Kv { key, value, create_revision, mod_revision });
        }
    }
    Ok((out, pages.revision()))
}

/// Runs until `stop` flips or the receiver is dropped. `name` labels log lines.
///
/// A watch that fails (its member cut off, a connection lost) is opened again from the revision
/// after the last event it delivered, on whichever member the client now routes to; only a
/// compaction (or a cancel) re-lists.
pub async fn mirror(
    client: Client,
    prefix: String,
    name: &'static str,
    tx: mpsc::Sender<Update>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut listed_before = false;
    // The revision to watch from without listing again.
    let mut resume: Option<i64> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let mut from = match resume.take() {
            Some(from) => {
                tracing::info!(watch = name, from_revision = from, "watch resumed");
                crate::metrics::METRICS.watch_resumes.with_label_values(&[name]).inc();
                from
            }
            None => match snapshot(&client, &prefix, name, &tx, &mut listed_before).await {
                Some(Ok(revision)) => revision + 1,
                Some(Err(())) => {
                    if !backoff.sleep(&mut stop).await {
                        return;
                    }
                    continue;
                }
                None => return,
            },
        };
        let mut watcher = client.watch_client();
        // No previous values: nothing here reads them, and etcd would read each one from its
        // backend for every event of every watcher.
        let opts = WatchOptions::new().with_prefix().with_start_revision(from);
        let mut stream = match request("watch", watcher.watch(prefix.clone(), Some(opts))).await {
            Ok(s) => s,
            Err(failed) => {
                // A timeout backs off like a failure: re-opening at once would add to the load
                // that kept etcd from answering.
                let error = match failed {
                    EtcdError::Timeout => "timed out".to_owned(),
                    EtcdError::Failed(e) => e.to_string(),
                };
                tracing::warn!(watch = name, %error, "starting watch failed; trying again");
                resume = Some(from);
                if !backoff.sleep(&mut stop).await {
                    return;
                }
                continue;
            }
        };
        match follow(&mut stream, name, &tx, &mut stop, (&mut from, &mut backoff)).await {
            Ended::Stopped => return,
            Ended::Compacted => {}
            Ended::Broken => resume = Some(from),
        }
        if !backoff.sleep(&mut stop).await {
            return;
        }
    }
}

/// How a watch stream ended.
enum Ended {
    /// `stop` flipped, or the receiver is gone.
    Stopped,
    /// Cancelled by etcd (a compaction): the prefix is listed again.
    Compacted,
    /// Closed or failed: opened again from the revision after its last event.
    Broken,
}

/// Hands the stream's events on until it ends, moving `from` past each event delivered (and
/// `backoff` back to its start once the stream answers).
async fn follow(
    stream: &mut etcd_client::WatchStream,
    name: &'static str,
    tx: &mpsc::Sender<Update>,
    stop: &mut watch::Receiver<bool>,
    (from, backoff): (&mut i64, &mut Backoff),
) -> Ended {
    loop {
        let msg = tokio::select! {
            _ = stop.changed() => return Ended::Stopped,
            m = stream.message() => m,
        };
        match msg {
            Ok(Some(resp)) => {
                if resp.compact_revision() > 0 || resp.canceled() {
                    tracing::warn!(
                        watch = name,
                        compact_revision = resp.compact_revision(),
                        reason = resp.cancel_reason(),
                        "watch cancelled (compaction?); re-listing"
                    );
                    return Ended::Compacted;
                }
                backoff.reset();
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    *from = (*from).max(kv.mod_revision() + 1);
                    if tx.send(update(event.event_type(), kv)).await.is_err() {
                        return Ended::Stopped;
                    }
                }
            }
            Ok(None) => {
                tracing::warn!(watch = name, "watch stream closed; resuming");
                return Ended::Broken;
            }
            Err(e) => {
                tracing::warn!(watch = name, error = %e, "watch failed; resuming");
                return Ended::Broken;
            }
        }
    }
}

/// Lists the prefix and hands the caller the snapshot: its revision, `Err` when listing failed
/// (logged), `None` when the receiver is gone.
async fn snapshot(
    client: &Client,
    prefix: &str,
    name: &'static str,
    tx: &mpsc::Sender<Update>,
    listed_before: &mut bool,
) -> Option<Result<i64, ()>> {
    if std::mem::replace(listed_before, true) {
        crate::metrics::METRICS.watch_resyncs.with_label_values(&[name]).inc();
    }
    let (kvs, revision) = match list(client, prefix).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(watch = name, error = %e, "listing failed; retrying");
            return Some(Err(()));
        }
    };
    tracing::debug!(watch = name, keys = kvs.len(), revision, "listed");
    tx.send(Update::Snapshot { kvs, revision }).await.ok()?;
    Some(Ok(revision))
}

fn update(kind: EventType, kv: &etcd_client::KeyValue) -> Update {
    match kind {
        EventType::Put => Update::Put(Kv {
            key: kv.key().to_vec(),
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        }),
        EventType::Delete => Update::Delete { key: kv.key().to_vec(), mod_revision: kv.mod_revision() },
    }
}

#[cfg(test)]
mod tests {
    use etcron_model::keys::prefix_end;

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix_range() {
        assert_eq!(prefix_end(b"/etcron/jobs/"), b"/etcron/jobs0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
