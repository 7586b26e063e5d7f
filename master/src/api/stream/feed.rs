//! One connection to the worker per execution followed on this master, shared by every client
//! following it. The first client of an execution opens the feed: a task that reads the
//! worker's newline-delimited JSON and keeps the last [`BACKLOG_BYTES`] of output, the latest
//! report and how the worker's stream ended; every client reads the feed from the output offset
//! it asks for (0, or where a reconnecting client stopped). When the last reader leaves, the
//! feed closes its connection to the worker.
//!
//! Offsets are absolute in the execution's output as the worker relays it: each output text
//! counts its UTF-8 bytes, each gap the bytes the worker's bound skipped. Every master counts
//! the same, so a client that reconnects elsewhere resumes where it was.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::HTTP;

/// Output a feed keeps for clients that join late or fall behind; older output reaches them
/// as a gap.
pub const BACKLOG_BYTES: usize = 1 << 20;
/// The worker sends a line at least every 10 s; silence for this long means it is gone.
const WORKER_SILENCE: Duration = Duration::from_secs(30);
/// Connecting to the worker: its output may open a moment after the running marker is written.
const CONNECT_ATTEMPTS: u32 = 5;
const CONNECT_RETRY: Duration = Duration::from_millis(200);

/// How the worker's stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The worker said the output ended.
    Ended,
    /// No (complete) stream from the worker: why.
    Broken(String),
}

/// What a reader is told, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Output(String),
    /// Output bytes the reader will not get (cut by the worker's bound, or older than the
    /// backlog).
    Gap(u64),
    /// The task's reports (`{progress, checkpoint}`).
    Progress(Value),
    End(End),
}

/// What a feed holds.
#[derive(Debug, Default)]
struct Backlog {
    /// Output texts at their absolute offsets, oldest first.
    texts: VecDeque<(u64, String)>,
    /// Bytes of `texts`.
    held: usize,
    /// The offset after everything the worker relayed so far (texts and gaps).
    total: u64,
    /// The latest report and its number (from 1).
    report: Option<(u64, Value)>,
    end: Option<End>,
}

impl Backlog {
    fn output(&mut self, text: String) {
        let len = text.len();
        self.texts.push_back((self.total, text));
        self.total += len as u64;
        self.held += len;
        while self.held > BACKLOG_BYTES && self.texts.len() > 1 {
            if let Some((_, old)) = self.texts.pop_front() {
                self.held -= old.len();
            }
        }
    }

    fn gap(&mut self, bytes: u64) {
        self.total += bytes;
    }

    fn report(&mut self, reports: Value) {
        let n = self.report.as_ref().map_or(1, |(n, _)| n + 1);
        self.report = Some((n, reports));
    }

    /// What a reader at `at` that last saw report `seen` has not read, moving both on.
    fn read(&self, at: &mut u64, seen: &mut u64) -> Vec<Item> {
        let mut items = Vec::new();
        if let Some((n, reports)) = &self.report {
            if n != seen {
                *seen = *n;
                items.push(Item::Progress(reports.clone()));
            }
        }
        let first = self.texts.partition_point(|(off, text)| off + text.len() as u64 <= *at);
        for (off, text) in self.texts.range(first..) {
            if *off > *at {
                items.push(Item::Gap(off - *at));
                *at = *off;
            }
            let skip = etcron_model::output::char_ceil(text, usize::try_from(*at - off).unwrap_or(usize::MAX));
            if skip < text.len() {
                items.push(Item::Output(text[skip..].to_owned()));
            }
            *at = off + text.len() as u64;
        }
        if *at < self.total {
            items.push(Item::Gap(self.total - *at));
            *at = self.total;
        }
        if let Some(end) = &self.end {
            items.push(Item::End(end.clone()));
        }
        items
    }
}

/// One execution's connection to its worker and what it relayed.
#[derive(Debug)]
pub struct Feed {
    id: String,
    backlog: Mutex<Backlog>,
    /// Bumped on every change; its receivers are the feed's readers.
    changed: watch::Sender<u64>,
}

/// Feeds open on this master, by execution.
static FEEDS: LazyLock<Mutex<HashMap<String, Arc<Feed>>>> = LazyLock::new(Mutex::default);

fn feeds() -> std::sync::MutexGuard<'static, HashMap<String, Arc<Feed>>> {
    FEEDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Feed {
    fn lock(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn change(&self, f: impl FnOnce(&mut Backlog)) {
        f(&mut self.lock());
        self.changed.send_modify(|n| *n += 1);
    }

    /// Ends the feed (once) and takes it out of [`FEEDS`], so a later client opens a new one.
    fn end(self: &Arc<Self>, end: End) {
        self.change(|b| {
            b.end.get_or_insert(end);
        });
        let mut open = feeds();
        if open.get(&self.id).is_some_and(|f| Arc::ptr_eq(f, self)) {
            open.remove(&self.id);
        }
    }

    /// Waits until the feed has no reader left; then it is out of [`FEEDS`] (checked under
    /// its lock, so a client joining at that moment opens a new feed rather than a dying one).
    async fn unread(self: &Arc<Self>) {
        loop {
            self.changed.closed().await;
            let mut open = feeds();
            if self.changed.receiver_count() == 0 {
                if open.get(&self.id).is_some_and(|f| Arc::ptr_eq(f, self)) {
                    open.remove(&self.id);
                }
                return;
            }
        }
    }
}

/// A client's place in a feed.
pub struct Reader {
    feed: Arc<Feed>,
    rx: watch::Receiver<u64>,
    at: u64,
    seen: u64,
}

impl Reader {
    /// What is new since the last call (everything from the reader's offset the first time);
    /// ends with [`Item::End`] once the worker's stream is over.
    pub fn take(&mut self) -> Vec<Item> {
        self.rx.borrow_and_update();
        self.feed.lock().read(&mut self.at, &mut self.seen)
    }

    /// Waits for something new.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A reader of `id`'s feed from output offset `after`, opening the feed (a connection to the
/// worker at `url` with `token`) when it has none.
pub fn follow(id: &str, url: &str, token: &str, after: u64) -> Reader {
    let mut open = feeds();
    if let Some(feed) = open.get(id) {
        let rx = feed.changed.subscribe();
        return Reader { feed: feed.clone(), rx, at: after, seen: 0 };
    }
    let feed = Arc::new(Feed { id: id.to_owned(), backlog: Mutex::default(), changed: watch::channel(0).0 });
    let rx = feed.changed.subscribe();
    open.insert(id.to_owned(), feed.clone());
    crate::metrics::METRICS.stream_feeds.inc();
    let (pumped, url, token) = (feed.clone(), url.to_owned(), token.to_owned());
    tokio::spawn(async move {
        let end = tokio::select! {
            end = from_worker(&pumped, &url, &token) => Some(end),
            () = pumped.unread() => None,
        };
        if let Some(end) = end {
            if let End::Broken(why) = &end {
                tracing::info!(execution_id = %pumped.id, why, "live output unavailable; waiting for the record");
            }
            pumped.end(end);
        }
        crate::metrics::METRICS.stream_feeds.dec();
    });
    Reader { feed, rx, at: after, seen: 0 }
}

/// Reads the worker's newline-delimited JSON (`{"output"}`, `{"gap"}`, `{"progress"}`, `{}`,
/// `{"end"}`) into `feed` until it ends.
async fn from_worker(feed: &Feed, url: &str, token: &str) -> End {
    let target = format!("{url}/executions/{}/output", etcron_model::percent_encode(&feed.id));
    let mut attempt = 0;
    let mut resp = loop {
        attempt += 1;
        match HTTP.get(&target).bearer_auth(token).send().await {
            Ok(r) if r.status().is_success() => break r,
            // Not followable (yet): the marker is written before the task starts; HTTP tasks
            // have no live output at all.
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND && attempt < CONNECT_ATTEMPTS => {}
            Ok(r) => return End::Broken(format!("worker answered {}", r.status())),
            Err(e) if attempt < CONNECT_ATTEMPTS => tracing::debug!(error = %e, "connecting to the worker"),
            Err(e) => return End::Broken(format!("cannot reach the worker at {url}: {e}")),
        }
        tokio::time::sleep(CONNECT_RETRY).await;
    };
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let bytes = match tokio::time::timeout(WORKER_SILENCE, resp.chunk()).await {
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) => return End::Broken("the worker closed the stream early".to_owned()),
            Ok(Err(e)) => return End::Broken(format!("reading from the worker: {e}")),
            Err(_) => return End::Broken(format!("the worker sent nothing for {}s", WORKER_SILENCE.as_secs())),
        };
        buf.extend_from_slice(&bytes);
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let Ok(msg) = serde_json::from_slice::<Value>(&line) else { continue };
            if let Some(text) = msg.get("output").and_then(Value::as_str) {
                let text = text.to_owned();
                feed.change(|b| b.output(text));
            } else if let Some(n) = msg.get("gap").and_then(Value::as_u64) {
                feed.change(|b| b.gap(n));
            } else if let Some(reports) = msg.get("progress").filter(|p| p.is_object()) {
                let reports = reports.clone();
                feed.change(|b| b.report(reports));
            } else if msg.get("end").is_some() {
                return End::Ended;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                Item::Output(t) => t.clone(),
                Item::Gap(n) => format!("[gap {n}]"),
                Item::Progress(v) => format!("[progress {v}]"),
                Item::End(e) => format!("[end {e:?}]"),
            })
            .collect()
    }

    #[test]
    fn readers_resume_at_their_offset_with_gaps_where_output_was_cut() {
        let mut b = Backlog::default();
        b.output("abc".into());
        b.gap(5);
        b.output("d\u{e9}f".into());
        let (mut at, mut seen) = (0, 0);
        assert_eq!(texts(&b.read(&mut at, &mut seen)), ["abc", "[gap 5]", "d\u{e9}f"]);
        assert_eq!(at, 12);
        assert!(b.read(&mut at, &mut seen).is_empty(), "nothing new");
        // A client that reconnects having read 2 bytes gets the rest of the first text on.
        let mut at = 2;
        assert_eq!(texts(&b.read(&mut at, &mut 0)), ["c", "[gap 5]", "d\u{e9}f"]);
        // Inside a character: the rest starts at the next whole one.
        let mut at = 10;
        assert_eq!(texts(&b.read(&mut at, &mut 0)), ["f"]);
        b.report(serde_json::json!({"progress": {"percent": 5.0}}));
        b.gap(4);
        b.end = Some(End::Ended);
        assert_eq!(
            texts(&b.read(&mut at, &mut seen)),
            ["[progress {\"progress\":{\"percent\":5.0}}]", "[gap 4]", "[end Ended]"]
        );
    }

    #[test]
    fn the_backlog_keeps_the_newest_output_and_late_readers_get_a_gap() {
        let mut b = Backlog::default();
        let chunk = "x".repeat(BACKLOG_BYTES / 4);
        for _ in 0..6 {
            b.output(chunk.clone());
        }
        assert!(b.held <= BACKLOG_BYTES, "{}", b.held);
        let (mut at, mut seen) = (0, 0);
        let items = b.read(&mut at, &mut seen);
        assert_eq!(items[0], Item::Gap(2 * chunk.len() as u64));
        assert_eq!(items.len(), 5, "the gap then the 4 texts kept");
        assert_eq!(at, 6 * chunk.len() as u64);
    }

    #[tokio::test]
    async fn a_feed_is_shared_and_closes_when_its_last_reader_leaves() {
        // Nothing listens on port 9 of loopback: the feed's connection fails, which ends it.
        let id = "unit-feed@1#1";
        let mut first = follow(id, "http://127.0.0.1:9", "t", 0);
        let mut second = follow(id, "http://127.0.0.1:9", "t", 0);
        assert!(Arc::ptr_eq(&first.feed, &second.feed), "one feed per execution");
        let end = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(Item::End(e)) = first.take().pop() {
                    return e;
                }
                first.changed().await;
            }
        })
        .await
        .unwrap();
        assert!(matches!(end, End::Broken(ref why) if why.contains("cannot reach the worker")), "{end:?}");
        assert!(matches!(second.take().pop(), Some(Item::End(_))), "both readers are told");
        assert!(!feeds().contains_key(id), "an ended feed is out of the map");
        let third = follow(id, "http://127.0.0.1:9", "t", 0);
        assert!(!Arc::ptr_eq(&first.feed, &third.feed), "a later client opens a new feed");
        drop(third);
        // The new feed's task sees no reader and takes it out.
        tokio::time::timeout(Duration::from_secs(10), async {
            while feeds().contains_key(id) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
    }
}
