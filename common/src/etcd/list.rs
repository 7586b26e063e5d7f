//! Reading a whole prefix at one revision, in pages sized by bytes. etcd 3.4 answers a range
//! with a `limit` at a cost that grows with every key after the page's start (it gathers them
//! all to count them), so listing N keys in pages of P keys costs ~N²/2P: pages of a fixed 2 000
//! keys made a worker spend a minute listing 1 000 000 jobs. Pages here aim at [`PAGE_BYTES`]
//! of answer, so small values make few, large pages, and large values stay within the answer's
//! limit ([`MAX_ANSWER_BYTES`]); an answer over it is asked again in smaller pages.

use std::time::Duration;

use etcd_client::{Client, GetOptions, KeyValue, KvClient};

use super::{request_within, EtcdError};

/// Bytes of keys and values a page aims at.
pub const PAGE_BYTES: usize = 8 << 20;
/// Largest answer a listing takes (gRPC's default is 4 MiB).
pub const MAX_ANSWER_BYTES: usize = 64 << 20;
/// Keys asked for by the first page, before the size of a key-value is known.
const FIRST_PAGE: i64 = 1_000;
/// Most keys one page asks for.
const MAX_PAGE: i64 = 200_000;
/// Bytes etcd's answer adds to each key-value (revisions, version, lease, framing), counted so
/// that tiny values do not make pages of millions of keys.
const PER_KEY_OVERHEAD: usize = 48;

/// Keys the next page asks for, after a page of `count` keys that held `bytes` of keys and
/// values: as many as fit [`PAGE_BYTES`] at that size, between 1 and [`MAX_PAGE`].
#[must_use]
pub fn next_limit(bytes: usize, count: usize) -> i64 {
    if count == 0 {
        return FIRST_PAGE;
    }
    let per_key = (bytes / count).saturating_add(PER_KEY_OVERHEAD);
    i64::try_from(PAGE_BYTES / per_key).unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE)
}

/// The pages of one prefix at one revision (the revision of the first page's answer, or one
/// given).
pub struct Pages {
    kv: KvClient,
    op: &'static str,
    timeout: Duration,
    start: Vec<u8>,
    end: Vec<u8>,
    revision: i64,
    limit: i64,
    done: bool,
}

impl Pages {
    /// The pages of every key under `prefix` at `revision` (0: the current one). `op` names the
    /// requests in the etcd metrics; each page has `timeout`.
    #[must_use]
    pub fn new(client: &Client, op: &'static str, prefix: &[u8], revision: i64, timeout: Duration) -> Self {
        Self {
            kv: client.kv_client().max_decoding_message_size(MAX_ANSWER_BYTES),
            op,
            timeout,
            start: prefix.to_vec(),
            end: etcron_model::keys::prefix_end(prefix),
            revision,
            limit: FIRST_PAGE,
            done: false,
        }
    }

    /// The revision the pages are read at (0 before the first page when none was given).
    #[must_use]
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The next page; `None` after the last.
    ///
    /// # Errors
    /// What etcd answered (a compacted revision, an unavailable cluster), or a timeout.
    pub async fn next(&mut self) -> Result<Option<Vec<KeyValue>>, EtcdError> {
        if self.done {
            return Ok(None);
        }
        let mut resp = loop {
            let mut opts = GetOptions::new().with_range(self.end.clone()).with_limit(self.limit);
            if self.revision > 0 {
                opts = opts.with_revision(self.revision);
            }
            match request_within(self.op, self.timeout, self.kv.get(self.start.clone(), Some(opts))).await {
                Err(EtcdError::Failed(e)) if super::too_large(&e) && self.limit > 1 => {
                    // Larger than the answer's limit: the same page in smaller parts.
                    tracing::info!(op = self.op, keys = self.limit, error = %e, "a page was too large to read; reading fewer keys");
                    self.limit = (self.limit / 4).max(1);
                }
                other => break other?,
            }
        };
        if self.revision == 0 {
            self.revision = resp.header().map_or(0, |h| h.revision());
        }
        let kvs = resp.take_kvs();
        match kvs.last() {
            Some(last) if resp.more() => {
                self.start = last.key().to_vec();
                self.start.push(0);
            }
            _ => self.done = true,
        }
        let bytes = kvs.iter().map(|kv| kv.key().len() + kv.value().len()).sum();
        self.limit = next_limit(bytes, kvs.len());
        Ok(Some(kvs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_hold_about_page_bytes_whatever_the_size_of_a_value() {
        assert_eq!(next_limit(0, 0), FIRST_PAGE);
        // 1 000 job specs of ~200 bytes: ~33 000 keys a page, not 2 000.
        let small = next_limit(200_000, 1_000);
        assert_eq!(small, i64::try_from(PAGE_BYTES / 248).unwrap());
        // Specs of 64 KiB: ~128 a page, well within the answer's limit.
        let large = next_limit(64 << 20, 1_024);
        assert!(large >= 100 && (large as usize) * (64 << 10) <= MAX_ANSWER_BYTES, "{large}");
        // Empty values still count their overhead; the page never exceeds MAX_PAGE.
        assert_eq!(next_limit(0, 10), i64::try_from(PAGE_BYTES / PER_KEY_OVERHEAD).unwrap().min(MAX_PAGE));
        assert_eq!(next_limit(usize::MAX, 1), 1);
    }
}
