//! Mirrors an etcd prefix: list it (paginated, at one revision), then watch from revision+1.
//! On a watch error or compaction it re-lists and hands the caller a fresh snapshot, so the
//! caller reconciles instead of trusting an event stream with a hole in it.

use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use tokio::sync::{mpsc, watch};

use etcron_common::etcd::{request, request_within, REQUEST_TIMEOUT};

/// Keys fetched per page while listing.
const PAGE_SIZE: i64 = 2_000;

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

/// Lists every key under `prefix` at a single revision, page by page.
pub async fn list(client: &Client, prefix: &str) -> Result<(Vec<Kv>, i64), etcd_client::Error> {
    let mut kv = client.kv_client();
    let range_end = etcron_common::keys::prefix_end(prefix.as_bytes());
    let mut start = prefix.as_bytes().to_vec();
    let mut revision = 0;
    let mut out = Vec::new();
    loop {
        let mut opts = GetOptions::new().with_range(range_end.clone()).with_limit(PAGE_SIZE);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let resp = match request_within("list", REQUEST_TIMEOUT * 4, kv.get(start.clone(), Some(opts))).await {
            Ok(r) => r?,
            Err(_) => return Err(etcd_client::Error::WatchError("listing timed out".to_owned())),
        };
        if revision == 0 {
            revision = resp.header().map_or(0, |h| h.revision());
        }
        let more = resp.more();
        for item in resp.kvs() {
            out.push(Kv {
                key: item.key().to_vec(),
                value: item.value().to_vec(),
                create_revision: item.create_revision(),
                mod_revision: item.mod_revision(),
            });
        }
        match out.last() {
            Some(last) if more => {
                start = last.key.clone();
                start.push(0);
            }
            _ => break,
        }
    }
    Ok((out, revision))
}

/// Runs until `stop` flips or the receiver is dropped. `name` labels log lines.
pub async fn mirror(
    client: Client,
    prefix: String,
    name: &'static str,
    tx: mpsc::Sender<Update>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    let mut listed_before = false;
    loop {
        if *stop.borrow() {
            return;
        }
        if std::mem::replace(&mut listed_before, true) {
            crate::metrics::METRICS.watch_resyncs.with_label_values(&[name]).inc();
        }
        let (kvs, revision) = match list(&client, &prefix).await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(watch = name, error = %e, "listing failed; retrying");
                tokio::select! { _ = stop.changed() => return, () = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        tracing::debug!(watch = name, keys = kvs.len(), revision, "listed");
        if tx.send(Update::Snapshot { kvs, revision }).await.is_err() {
            return;
        }
        let mut watcher = client.watch_client();
        // No previous values: nothing here reads them, and etcd would read each one from its
        // backend for every event of every watcher.
        let opts = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
        let mut stream = match request("watch", watcher.watch(prefix.clone(), Some(opts))).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(watch = name, error = %e, "starting watch failed; re-listing");
                tokio::select! { _ = stop.changed() => return, () = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(_) => {
                // Backs off like a failure: re-listing at once would add a large read to the
                // load that kept etcd from answering.
                tracing::warn!(watch = name, "starting watch timed out; re-listing");
                tokio::select! { _ = stop.changed() => return, () = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        loop {
            let msg = tokio::select! {
                _ = stop.changed() => return,
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
                        break;
                    }
                    backoff = Duration::from_millis(100);
                    for event in resp.events() {
                        let Some(kv) = event.kv() else { continue };
                        let update = match event.event_type() {
                            EventType::Put => Update::Put(Kv {
                                key: kv.key().to_vec(),
                                value: kv.value().to_vec(),
                                create_revision: kv.create_revision(),
                                mod_revision: kv.mod_revision(),
                            }),
                            EventType::Delete => {
                                Update::Delete { key: kv.key().to_vec(), mod_revision: kv.mod_revision() }
                            }
                        };
                        if tx.send(update).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(None) => {
                    tracing::warn!(watch = name, "watch stream closed; re-listing");
                    break;
                }
                Err(e) => {
                    tracing::warn!(watch = name, error = %e, "watch failed; re-listing");
                    break;
                }
            }
        }
        tokio::select! { _ = stop.changed() => return, () = tokio::time::sleep(backoff) => {} }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use etcron_common::keys::prefix_end;

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix_range() {
        assert_eq!(prefix_end(b"/etcron/jobs/"), b"/etcron/jobs0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
