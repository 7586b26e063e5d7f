//! What a benchmark window cost etcd's storage: `dbSize` / `dbSizeInUse` growth from the
//! maintenance status, and every write under the namespace by key kind (the first path segment
//! after the namespace: `claims`, `running`, `state`, ...), counted from a watch over the window.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use etcd_client::{Client, EventType, WatchOptions};

/// Puts and deletes of one key kind and the bytes they carried (key + value).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    puts: u64,
    deletes: u64,
    key_bytes: u64,
    value_bytes: u64,
}

/// A running measurement: start it before the window, `finish` it after.
pub struct Writes {
    client: Client,
    ns: String,
    start: (i64, i64, i64),
    tallies: Arc<Mutex<BTreeMap<String, Tally>>>,
    task: tokio::task::JoinHandle<()>,
}

/// `(dbSize, dbSizeInUse, revision)` now.
pub async fn status(client: &Client) -> Result<(i64, i64, i64)> {
    let s = client.maintenance_client().status().await?;
    let rev = s.header().map_or(0, etcd_client::ResponseHeader::revision);
    Ok((s.db_size(), s.raft_used_db_size(), rev))
}

impl Writes {
    pub async fn start(client: Client, ns: &str) -> Result<Self> {
        let start = status(&client).await?;
        let tallies: Arc<Mutex<BTreeMap<String, Tally>>> = Arc::default();
        let prefix = format!("{ns}/");
        let opts = WatchOptions::new().with_prefix().with_start_revision(start.2 + 1);
        let mut stream = client.watch_client().watch(prefix.as_str(), Some(opts)).await?;
        let sink = tallies.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(resp)) = stream.message().await {
                let mut t = sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    let rest = kv.key().get(prefix.len()..).unwrap_or_default();
                    let kind =
                        String::from_utf8_lossy(rest.split(|b| *b == b'/').next().unwrap_or_default()).into_owned();
                    let entry = t.entry(kind).or_default();
                    if e.event_type() == EventType::Delete {
                        entry.deletes += 1;
                    } else {
                        entry.puts += 1;
                    }
                    entry.key_bytes += kv.key().len() as u64;
                    entry.value_bytes += kv.value().len() as u64;
                }
            }
        });
        Ok(Self { client, ns: ns.to_owned(), start, tallies, task })
    }

    /// Prints the growth per fire and the writes by key kind.
    pub async fn finish(self, fires: f64) -> Result<()> {
        // Let the watch catch up with the last writes of the window.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let end = status(&self.client).await?;
        self.task.abort();
        let per = |d: i64| d as f64 / fires.max(1.0);
        println!(
            "  etcd storage/fire     dbSize {:.0} B  dbSizeInUse {:.0} B  revisions {:.2}   (dbSize {:.1} -> {:.1} MiB, compaction off)",
            per(end.0 - self.start.0),
            per(end.1 - self.start.1),
            per(end.2 - self.start.2),
            self.start.0 as f64 / 1048576.0,
            end.0 as f64 / 1048576.0
        );
        let tallies = self.tallies.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let (mut events, mut bytes) = (0u64, 0u64);
        for (kind, t) in &tallies {
            events += t.puts + t.deletes;
            bytes += t.key_bytes + t.value_bytes;
            println!(
                "    {:<10} puts/fire {:.3}  deletes/fire {:.3}  key B/event {:.0}  value B/put {:.0}",
                format!("{}/{kind}", self.ns),
                t.puts as f64 / fires,
                t.deletes as f64 / fires,
                t.key_bytes as f64 / (t.puts + t.deletes).max(1) as f64,
                t.value_bytes as f64 / t.puts.max(1) as f64
            );
        }
        println!(
            "    all        events/fire {:.2}  key+value B/fire {:.0}",
            events as f64 / fires,
            bytes as f64 / fires
        );
        Ok(())
    }
}
