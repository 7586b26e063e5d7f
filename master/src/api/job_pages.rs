//! `GET /api/jobs` a page at a time (`limit`, `cursor`), filtered on the server (`prefix`,
//! `label`, `state`, `team`, `health`): each page reads a bounded range of `{ns}/jobs/` in name
//! order, the pauses of that range only, and the record summaries of its jobs only (of its
//! candidates, a chunk at a time, for `health`), so its cost does not grow with the number of
//! jobs. The whole list (no paging parameter) is refused over [`WHOLE_LIST_MAX`] jobs.

use std::collections::BTreeMap;

use etcd_client::{GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};
use etcron_common::store::Health;
use etcron_model::keys::Key;
use etcron_model::stored::{Pause, WorkerInfo};
use etcron_model::{now_ms, UnixMs};
use futures::{StreamExt as _, TryStreamExt as _};
use serde_json::{json, Value};

use super::jobs::{view, SUMMARY_TIMEOUT};
use crate::access::{team_of, Scope};
use crate::backend::AppState;
use crate::error::{etcd, records, ApiError, ApiResult};
use crate::query::{self, invalid, Params};

/// Most jobs a page holds.
pub const MAX_PAGE: usize = 1_000;

/// Most job keys one page reads when filters pass over jobs: a page that ends at it is
/// `partial` (its `next_cursor` goes on from the last job read).
pub const PAGE_SCAN: usize = 10_000;

/// Most jobs the whole list (`GET /api/jobs` without paging parameters) answers: over it the
/// request is refused (400 naming `limit`) before any record is read, so as to be paged.
pub const WHOLE_LIST_MAX: usize = 10_000;

/// Candidates of a `health` page whose record summaries are read in one MongoDB request.
pub const HEALTH_CHUNK: usize = 500;

/// The window of a job's record summary (and of its health): the last 24 h.
const SUMMARY_WINDOW_MS: UnixMs = 86_400_000;

/// What a job's state filter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StateFilter {
    /// Neither paused nor disabled in its spec, and a valid spec.
    Enabled,
    /// Paused, or disabled in its spec.
    Paused,
    /// A stored value the workers refuse.
    Invalid,
}

/// A page's request.
#[derive(Debug, Default)]
pub(super) struct PageQuery {
    limit: usize,
    cursor: Option<String>,
    prefix: String,
    label: Option<(String, String)>,
    state: Option<StateFilter>,
    health: Option<Health>,
    pub(super) team: Option<String>,
}

impl PageQuery {
    /// The paging parameters of `params`; `None` when none is given (the whole list, as before).
    pub(super) fn read(params: &Params) -> ApiResult<Option<Self>> {
        let mut q = PageQuery { limit: 100, ..PageQuery::default() };
        let mut paged = false;
        for (key, value) in params.iter() {
            paged |= key != "team";
            match key {
                "team" => q.team = Some(query::team(key, value)?),
                "limit" => q.limit = page_limit(value)?,
                "cursor" => q.cursor = Some(query::job(key, value)?),
                "prefix" => q.prefix = name_prefix(value)?,
                "label" => q.label = Some(label(value)?),
                "state" => q.state = Some(state(value)?),
                "health" => q.health = Some(health(value)?),
                _ => {}
            }
        }
        Ok(paged.then_some(q))
    }
}

fn page_limit(value: &str) -> ApiResult<usize> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_PAGE).contains(n))
        .ok_or_else(|| invalid("limit", format!("limit must be a number of jobs from 1 to {MAX_PAGE}")))
}

/// The start of job names: what a job name may hold (lowercase letters, digits, `-`, `_`, `.`).
fn name_prefix(value: &str) -> ApiResult<String> {
    let fits = value.len() <= etcron_model::keys::MAX_JOB_NAME_LEN
        && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
    if fits {
        Ok(value.to_owned())
    } else {
        Err(invalid("prefix", "prefix must be the start of a job name (lowercase letters, digits, '-', '_', '.')"))
    }
}

fn label(value: &str) -> ApiResult<(String, String)> {
    match value.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(invalid("label", "label must be KEY=VALUE")),
    }
}

fn state(value: &str) -> ApiResult<StateFilter> {
    match value {
        "enabled" => Ok(StateFilter::Enabled),
        "paused" => Ok(StateFilter::Paused),
        "invalid" => Ok(StateFilter::Invalid),
        _ => Err(invalid("state", "state must be enabled, paused or invalid")),
    }
}

fn health(value: &str) -> ApiResult<Health> {
    match value {
        "failing" => Ok(Health::Failing),
        "ok" => Ok(Health::Ok),
        "never" => Ok(Health::Never),
        _ => Err(invalid("health", "health must be failing, ok or never")),
    }
}

/// Every stored job for the whole list: one range read of the jobs prefix, refused (400 naming
/// `limit`) when it holds more than [`WHOLE_LIST_MAX`] jobs.
pub(super) async fn whole_list(st: &AppState) -> ApiResult<etcd_client::GetResponse> {
    let mut kv = st.client.kv_client();
    let opts = GetOptions::new().with_prefix().with_limit(i64::try_from(WHOLE_LIST_MAX).unwrap_or(i64::MAX));
    let resp = etcd("list_jobs", kv.get(st.keys.jobs_prefix(), Some(opts))).await?;
    if resp.more() {
        return Err(invalid(
            "limit",
            format!("more than {WHOLE_LIST_MAX} jobs: list them a page at a time (limit, cursor; see next_cursor)"),
        ));
    }
    Ok(resp)
}

/// The first key after every key starting with `start` (etcd's range end of a prefix).
fn range_end(start: &str) -> Vec<u8> {
    etcron_model::keys::prefix_end(start.as_bytes())
}

/// At most `read` keys from `from` before `end`, and whether more follow — asked first of
/// narrower ranges: etcd 3.4 walks every key of a range with a limit to count them, so a page
/// from a cursor near the start of a million jobs walked a million keys (p99 441 ms). The
/// narrower ranges hold the keys sharing all of `from` but its last byte, its last two, …,
/// widened until one holds more than `read` keys or is the whole range.
async fn bounded_range(st: &AppState, from: Vec<u8>, end: Vec<u8>, read: usize) -> ApiResult<(Vec<KeyValue>, bool)> {
    let mut kv = st.client.kv_client();
    let limit = i64::try_from(read + 1).unwrap_or(i64::MAX);
    let (mut keep, mut step) = (from.len(), 0);
    loop {
        keep = keep.saturating_sub(widen_by(step));
        step += 1;
        let narrow = etcron_model::keys::prefix_end(&from[..keep]);
        let whole = keep == 0 || narrow == [0] || narrow >= end;
        let to = if whole { end.clone() } else { narrow };
        let opts = GetOptions::new().with_range(to).with_limit(limit);
        let mut resp = etcd("list_jobs_page", kv.get(from.clone(), Some(opts))).await?;
        let more = resp.more();
        let mut kvs = resp.take_kvs();
        if kvs.len() > read || whole {
            let more = kvs.len() > read || more;
            kvs.truncate(read);
            return Ok((kvs, more));
        }
    }
}

/// Bytes the `step`th narrower range drops from the cursor: one a step for the first
/// [`BYTE_STEPS`] (each widens a range of names with digits tenfold, one of letters up to
/// 256-fold), then twice as many each step, so a page costs at most a few more requests,
/// whatever the length of the names. Doubling from the first step skipped from a hundred names
/// to the whole million (GET /api/jobs from a cursor p99 527 ms at 1M).
fn widen_by(step: u32) -> usize {
    if step < BYTE_STEPS {
        1
    } else {
        1usize << (step - BYTE_STEPS + 1).min(16)
    }
}

/// Steps of [`widen_by`] that drop one byte each.
const BYTE_STEPS: u32 = 6;

/// Reads of jobs by name in one etcd transaction (etcd takes 128 operations at most).
const TXN_GETS: usize = 100;

/// Transactions of [`TXN_GETS`] in flight at once for one page.
const TXN_IN_FLIGHT: usize = 4;

/// At most `read` jobs labelled `key=value` after the page's cursor, read from etcd by the
/// names the master's job index holds for the label as of etcd's revision now, and whether
/// more follow; `None` while the index is loading. A page by label cost a scan of up to
/// [`PAGE_SCAN`] jobs (p99 365 ms at 1M); it now costs the jobs it shows. A job whose labels
/// changed since is read as it is and filtered again by the page.
async fn labeled_range(
    st: &AppState,
    q: &PageQuery,
    (key, value): (&str, &str),
    read: usize,
) -> ApiResult<Option<(Vec<KeyValue>, bool)>> {
    // etcd's revision now, from the read of one key (a range would walk the keys after it).
    let now = etcd("list_jobs_revision", st.client.kv_client().get(st.keys.namespace(), None)).await?;
    let revision = now.header().map_or(0, etcd_client::ResponseHeader::revision);
    let from = q.cursor.as_ref().map(|c| format!("{c}\0")).unwrap_or_default();
    let Ok((names, more)) = st.job_index.read(revision, |ix| ix.labeled((key, value), &q.prefix, &from, read)).await
    else {
        return Ok(None);
    };
    // (Collected: an iterator borrowing the names is not held across the awaits.)
    let reads: Vec<_> = names
        .chunks(TXN_GETS)
        .map(|chunk| {
            let ops: Vec<TxnOp> = chunk.iter().map(|name| TxnOp::get(st.keys.job(name), None)).collect();
            let mut kv = st.client.kv_client();
            async move { etcd("list_jobs_by_name", kv.txn(Txn::new().and_then(ops))).await }
        })
        .collect();
    let answers: Vec<_> = futures::stream::iter(reads).buffered(TXN_IN_FLIGHT).try_collect().await?;
    let kvs = answers
        .into_iter()
        .flat_map(|answer| answer.op_responses())
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut got) => Some(got.take_kvs()),
            _ => None,
        })
        .flatten()
        .collect();
    Ok(Some((kvs, more)))
}

/// One page of jobs the caller sees: `{"jobs", "next_cursor", "partial", "records"}`.
pub(super) async fn page(st: &AppState, scope: &Scope, q: &PageQuery) -> ApiResult<Value> {
    // After the cursor, never before the prefix (a cursor from elsewhere cannot widen the range).
    let start = st.keys.job(&q.prefix);
    let from = match &q.cursor {
        Some(after) => format!("{}\0", st.keys.job(after)).max(start),
        None => start,
    };
    let end = range_end(&st.keys.job(&q.prefix));
    // Without a filter passing over jobs a page reads its jobs and one more; with one, up to
    // PAGE_SCAN of them.
    let filtered = q.label.is_some()
        || q.state.is_some()
        || q.team.is_some()
        || q.health.is_some()
        || scope.caller.access.role.is_none();
    let read = if filtered { PAGE_SCAN } else { q.limit + 1 };
    // By label: the master's job index names the jobs so labelled (with no other filter, only
    // as many as the page shows and one more); while it loads, the page scans as other filters do.
    let labeled = match &q.label {
        Some((key, value)) => {
            let alone =
                q.state.is_none() && q.team.is_none() && q.health.is_none() && scope.caller.access.role.is_some();
            labeled_range(st, q, (key, value), if alone { q.limit + 1 } else { read }).await?
        }
        None => None,
    };
    let (kvs, more_keys) = match labeled {
        Some(found) => found,
        None => bounded_range(st, from.into_bytes(), end, read).await?,
    };
    let (Some(first), Some(last)) = (kvs.first(), kvs.last()) else {
        return Ok(json!({ "jobs": [], "next_cursor": null, "partial": false, "records": {"available": true} }));
    };
    let pauses = pauses_between(st, first.key(), last.key()).await?;
    let workers = super::workers::open_workers(st).await?;
    // (Collected: an iterator with a closure over the keys is not held across the awaits.)
    let scanned: Vec<(String, &KeyValue)> = kvs
        .iter()
        .filter_map(|item| match st.keys.parse(item.key()) {
            Some(Key::Job(name)) => Some((name, item)),
            _ => None,
        })
        .collect();
    let mut scanned = scanned.into_iter().peekable();
    let (mut jobs, mut read_upto) = (Vec::new(), None);
    // Candidates a chunk at a time (the page's room; for `health`, at least HEALTH_CHUNK, whose
    // summaries are read together) until the page is full or the scan is over.
    let more = loop {
        let room = q.limit - jobs.len();
        let size = if q.health.is_some() { room.max(HEALTH_CHUNK) } else { room };
        let mut chunk = Vec::new();
        while chunk.len() < size {
            let Some((name, item)) = scanned.next() else { break };
            read_upto = Some(name.clone());
            chunk.extend(candidate(scope, q, name, item, &workers, &pauses)?);
        }
        if let Some(want) = q.health {
            chunk = healthy(st, scope, q.team.as_deref(), chunk, want).await?;
        }
        let over = chunk.len() > room;
        jobs.extend(chunk.into_iter().take(room));
        if over || jobs.len() == q.limit || scanned.peek().is_none() {
            break over || (jobs.len() == q.limit && scanned.peek().is_some());
        }
    };
    // A full page with jobs after it: the next page starts after the page's last.
    let mut next = if more { jobs.last().and_then(|j: &Value| j["name"].as_str()).map(str::to_owned) } else { None };
    // The scan ended before the range did: the next page goes on after the last job read.
    let partial = next.is_none() && more_keys;
    if partial {
        next = read_upto;
    }
    let records = if q.health.is_some() {
        json!({"available": true})
    } else {
        with_summaries(st, &mut jobs, scope, q.team.as_deref()).await
    };
    Ok(json!({ "jobs": jobs, "next_cursor": next, "partial": partial, "records": records }))
}

/// Job `name` read as `item`, as the page shows it, when the caller sees it and it passes the
/// page's team, label and state filters.
fn candidate(
    scope: &Scope,
    q: &PageQuery,
    name: String,
    item: &KeyValue,
    workers: &[(String, WorkerInfo)],
    pauses: &BTreeMap<String, Pause>,
) -> ApiResult<Option<Value>> {
    let team = team_of(item.value());
    let listed = scope.caller.access.sees(team.as_deref())
        && q.team.as_ref().is_none_or(|w| team.as_deref() == Some(w.as_str()));
    if !listed {
        return Ok(None);
    }
    let pause = pauses.get(&name);
    let job = view(name, item.value(), item.mod_revision(), item.create_revision(), Some(workers), pause);
    let v = serde_json::to_value(job).map_err(|e| ApiError::internal(&e))?;
    Ok(kept(&v, q).then_some(v))
}

/// The jobs of `chunk` whose health is `want`, each with its record summary: one MongoDB
/// request for the chunk. Without MongoDB a health page cannot be told: 503.
async fn healthy(
    st: &AppState,
    scope: &Scope,
    team: Option<&str>,
    chunk: Vec<Value>,
    want: Health,
) -> ApiResult<Vec<Value>> {
    if chunk.is_empty() {
        return Ok(chunk);
    }
    let names: Vec<String> = chunk.iter().filter_map(|j| j["name"].as_str().map(str::to_owned)).collect();
    let teams = scope.teams(team);
    let summaries = records(st.store.summaries(now_ms() - SUMMARY_WINDOW_MS, Some(&names), teams.as_deref())).await?;
    Ok(chunk
        .into_iter()
        .filter_map(|mut j| {
            let summary = j["name"].as_str().and_then(|n| summaries.get(n)).cloned().unwrap_or_default();
            (summary.health() == want).then(|| {
                j["summary"] = serde_json::to_value(summary).unwrap_or(Value::Null);
                j
            })
        })
        .collect())
}

/// Whether a job's view passes the page's label and state filters.
fn kept(v: &Value, q: &PageQuery) -> bool {
    if let Some((k, want)) = &q.label {
        if v["spec"]["labels"][k].as_str() != Some(want.as_str()) {
            return false;
        }
    }
    let Some(state) = q.state else { return true };
    let invalid = !v["invalid"].is_null();
    let paused = !v["paused"].is_null() || v["spec"]["enabled"] == false;
    match state {
        StateFilter::Invalid => invalid,
        StateFilter::Paused => !invalid && paused,
        StateFilter::Enabled => !invalid && !paused,
    }
}

/// The pauses of the jobs from `first` to `last` (their keys), by job.
async fn pauses_between(
    st: &AppState,
    first: &[u8],
    last: &[u8],
) -> ApiResult<BTreeMap<String, etcron_model::stored::Pause>> {
    let name = |key: &[u8]| match st.keys.parse(key) {
        Some(Key::Job(n)) => n,
        _ => String::new(),
    };
    let (from, to) = (st.keys.paused(&name(first)), format!("{}\0", st.keys.paused(&name(last))));
    let mut kv = st.client.kv_client();
    let resp = etcd("list_paused_page", kv.get(from, Some(GetOptions::new().with_range(to)))).await?;
    Ok(super::jobs::pauses_of(st, &resp))
}

/// Each job's record summary of the last 24 h (its jobs' only), or why there is none.
async fn with_summaries(st: &AppState, jobs: &mut [Value], scope: &Scope, team: Option<&str>) -> Value {
    let names: Vec<String> = jobs.iter().filter_map(|j| j["name"].as_str().map(str::to_owned)).collect();
    if names.is_empty() {
        return json!({"available": true});
    }
    let teams = scope.teams(team);
    let read = st.store.summaries(now_ms() - SUMMARY_WINDOW_MS, Some(&names), teams.as_deref());
    match tokio::time::timeout(SUMMARY_TIMEOUT, read).await {
        Ok(Ok(summaries)) => {
            for j in jobs.iter_mut() {
                let summary = j["name"].as_str().and_then(|n| summaries.get(n)).cloned().unwrap_or_default();
                j["summary"] = serde_json::to_value(summary).unwrap_or(Value::Null);
            }
            json!({"available": true})
        }
        Ok(Err(e)) => json!({"available": false, "error": e.to_string()}),
        Err(_) => json!({"available": false, "error": "MongoDB did not answer in time"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked_and_name_their_field() {
        let parse = |q: &str| PageQuery::read(&Params::parse(Some(q), &super::super::jobs::LIST_PARAMS).unwrap());
        assert!(parse("team=payments").unwrap().is_none(), "team alone: the whole list");
        let q = parse("limit=50&prefix=db-&label=tier%3Dcritical&state=paused&health=failing").unwrap().unwrap();
        assert_eq!((q.limit, q.prefix.as_str(), q.state), (50, "db-", Some(StateFilter::Paused)));
        assert_eq!(q.health, Some(Health::Failing));
        assert_eq!(q.label, Some(("tier".to_owned(), "critical".to_owned())));
        for (bad, field) in [
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("prefix=DB", "prefix"),
            ("label=x", "label"),
            ("state=sleeping", "state"),
            ("health=bad", "health"),
            ("cursor=Bad", "cursor"),
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{bad}");
        }
    }

    #[test]
    fn narrower_ranges_widen_a_byte_at_a_time_then_by_doubling() {
        let dropped: Vec<usize> = (0..9).map(widen_by).collect();
        assert_eq!(dropped, [1, 1, 1, 1, 1, 1, 2, 4, 8]);
        // A page from a cursor among 1M names of 7 digits is found 4 bytes up (1 000 names),
        // never skipping from 100 names to the whole million.
        let after: Vec<usize> = (0..4).scan(0, |sum, s| Some(std::mem::replace(sum, *sum + widen_by(s)) + 1)).collect();
        assert_eq!(after, [1, 2, 3, 4]);
        assert_eq!(widen_by(u32::MAX), 1 << 16, "bounded");
    }

    #[test]
    fn range_end_is_the_first_key_after_the_prefix() {
        assert_eq!(range_end("ns/jobs/db"), b"ns/jobs/dc".to_vec());
        assert_eq!(range_end("ns/jobs/"), b"ns/jobs0".to_vec());
    }
}
