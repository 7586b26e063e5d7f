//! Execution records to and from their MongoDB documents: the stored fields (dates as BSON
//! dates, the output capped, absent values left out), the words indexed for `q`, and the BSON
//! value readers the other parts share.

use mongodb::bson::{self, Bson, DateTime as BsonDate, Document, RawArrayBuf, RawDocumentBuf};

use etcron_model::keys::ExecutionId;
use etcron_model::record::{ExecutionRecord, RunParams, Status, TriggerKind};

use super::StoreError;

/// Most distinct words indexed per record.
const MAX_WORDS: usize = 2_000;
/// Shortest and longest indexed word.
const WORD_LEN: std::ops::RangeInclusive<usize> = 2..=64;
/// Most bytes of output stored per record: a document must stay under MongoDB's 16 MiB, and
/// `max_output` may be as large as that. Longer output keeps its head and tail.
const MAX_STORED_OUTPUT: usize = 12 * 1024 * 1024;

/// An integer BSON value of any width.
pub(super) fn int(value: Option<&Bson>) -> Option<i64> {
    match value? {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        #[allow(clippy::cast_possible_truncation)]
        Bson::Double(v) => Some(*v as i64),
        _ => None,
    }
}

/// Lowercased words of `text` for the `words` field: letters, digits and `_`.
#[must_use]
pub fn words(text: &str) -> Vec<String> {
    words_of(std::iter::once(text))
}

/// The distinct lowercased words of the texts, in order of first appearance, at most
/// `MAX_WORDS` of them.
fn words_of<'a>(texts: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for text in texts {
        for w in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !WORD_LEN.contains(&w.len()) {
                continue;
            }
            let w = w.to_lowercase();
            if seen.insert(w.clone()) {
                out.push(w);
                if out.len() >= MAX_WORDS {
                    return out;
                }
            }
        }
    }
    out
}

pub(super) fn date(rfc: Option<&str>) -> Bson {
    match rfc.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) {
        Some(t) => Bson::DateTime(BsonDate::from_millis(t.timestamp_millis())),
        None => Bson::Null,
    }
}

pub(super) fn rfc(value: Option<&Bson>) -> Option<String> {
    match value {
        Some(Bson::DateTime(d)) => Some(etcron_model::rfc3339_ms(d.timestamp_millis())),
        _ => None,
    }
}

/// The stored document of a record (see [`to_raw_document`]).
#[must_use]
pub(super) fn to_document(r: &ExecutionRecord) -> Document {
    Document::try_from(to_raw_document(r).as_ref()).unwrap_or_default()
}

/// The stored document of a record, built as raw BSON (what the driver sends: no map of
/// fields is made on the record path). Absent values are left out rather than stored null.
#[must_use]
pub(super) fn to_raw_document(r: &ExecutionRecord) -> RawDocumentBuf {
    let (output, cut) = stored_output(&r.output);
    let mut d = RawDocumentBuf::new();
    d.append("_id", r.id.to_string());
    d.append("job", r.job.as_str());
    if let Some(team) = &r.team {
        d.append("team", team.as_str());
    }
    let mut date = |key: &str, rfc: Option<&str>| {
        if let Some(t) = rfc.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) {
            d.append(key, BsonDate::from_millis(t.timestamp_millis()));
        }
    };
    date("scheduled_at", Some(&r.scheduled_at));
    date("claimed_at", r.claimed_at.as_deref());
    date("started_at", r.started_at.as_deref());
    date("finished_at", r.finished_at.as_deref());
    d.append("scheduled_ms", r.scheduled_ms);
    if let Some(ms) = r.duration_ms {
        d.append("duration_ms", i64::try_from(ms).unwrap_or(i64::MAX));
    }
    d.append("worker_id", r.worker_id.as_str());
    d.append("hostname", r.hostname.as_str());
    d.append("attempt", i64::from(r.attempt));
    d.append("trigger", r.trigger.as_str());
    d.append("status", r.status.as_str());
    let mut opt_i64 = |key: &str, v: Option<i64>| {
        if let Some(v) = v {
            d.append(key, v);
        }
    };
    opt_i64("exit_code", r.exit_code.map(i64::from));
    opt_i64("signal", r.signal.map(i64::from));
    opt_i64("fencing_token", r.fencing_token);
    opt_i64("http_status", r.http_status.map(i64::from));
    d.append("output", output.as_ref());
    d.append("output_truncated", r.output_truncated || cut);
    let mut opt_str = |key: &str, v: Option<&str>| {
        if let Some(v) = v {
            d.append(key, v);
        }
    };
    opt_str("error", r.error.as_deref());
    opt_str("reason", r.reason.as_deref());
    opt_str("parent", r.parent.as_ref().map(ToString::to_string).as_deref());
    if let Some((i, n)) = r.shard {
        let mut shard = RawArrayBuf::new();
        shard.push(i64::from(i));
        shard.push(i64::from(n));
        d.append("shard", shard);
    }
    if !r.params.is_empty() {
        d.append("params", params_document(&r.params));
    }
    if let Some(ms) = r.jitter_ms {
        d.append("jitter_ms", ms);
    }
    for (key, v) in [("workflow", &r.workflow), ("pool", &r.pool), ("trace_id", &r.trace_id)] {
        if let Some(v) = v {
            d.append(key, v.as_str());
        }
    }
    if let Some(p) = r.priority {
        d.append("priority", i32::from(p));
    }
    reports_document(&mut d, &r.reports);
    let mut terms = RawArrayBuf::new();
    let extra = [r.error.as_deref(), r.reason.as_deref()];
    for w in words_of(std::iter::once(output.as_ref()).chain(extra.into_iter().flatten())) {
        terms.push(w);
    }
    d.append("words", terms);
    d
}

/// What the task reported, as stored: `progress`, `checkpoint`, `resumed_from` and `result` as documents
/// (a value BSON cannot hold is left out).
fn reports_document(d: &mut RawDocumentBuf, reports: &etcron_model::record::TaskReports) {
    let fields = [
        ("progress", reports.progress.as_ref().and_then(|p| mongodb::bson::to_bson(p).ok())),
        ("checkpoint", reports.checkpoint.as_ref().and_then(|c| mongodb::bson::to_bson(c).ok())),
        ("resumed_from", reports.resumed_from.as_ref().and_then(|r| mongodb::bson::to_bson(r).ok())),
        ("result", reports.result.as_ref().and_then(|r| mongodb::bson::to_bson(r).ok())),
    ];
    for (key, value) in fields {
        if let Some(raw) = value.and_then(|v| mongodb::bson::RawBson::try_from(v).ok()) {
            d.append(key, raw);
        }
    }
}

/// The reports of a stored record (each as JSON; one that does not read is left out).
fn reports_of(d: &Document) -> etcron_model::record::TaskReports {
    let json = |key: &str| d.get(key).map(|b| b.clone().into_relaxed_extjson());
    etcron_model::record::TaskReports {
        progress: json("progress").and_then(|v| serde_json::from_value(v).ok()),
        checkpoint: json("checkpoint"),
        resumed_from: json("resumed_from").and_then(|v| serde_json::from_value(v).ok()),
        result: json("result"),
    }
}

/// A run's parameters as stored: `{env: {NAME: value}, as_of_ms}`.
fn params_document(params: &RunParams) -> RawDocumentBuf {
    let mut p = RawDocumentBuf::new();
    if !params.env.is_empty() {
        let mut env = RawDocumentBuf::new();
        for (k, v) in &params.env {
            env.append(k.as_str(), v.as_str());
        }
        p.append("env", env);
    }
    if let Some(ms) = params.as_of_ms {
        p.append("as_of_ms", ms);
    }
    if let Some(b) = &params.backfill {
        let mut backfill = RawDocumentBuf::new();
        backfill.append("id", b.id.as_str());
        backfill.append("index", i64::from(b.index));
        p.append("backfill", backfill);
    }
    p
}

/// A run's parameters back from a stored record (none when absent or unreadable).
fn params_of(d: &Document) -> RunParams {
    let Ok(p) = d.get_document("params") else { return RunParams::default() };
    let env = p
        .get_document("env")
        .map(|env| env.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    let as_of_ms = match p.get("as_of_ms") {
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        _ => None,
    };
    let backfill = p.get_document("backfill").ok().and_then(|b| {
        let index = match b.get("index")? {
            Bson::Int64(v) => u32::try_from(*v).ok()?,
            Bson::Int32(v) => u32::try_from(*v).ok()?,
            _ => return None,
        };
        Some(etcron_model::record::BackfillRef { id: b.get_str("id").ok()?.to_owned(), index })
    });
    RunParams { env, as_of_ms, backfill, workflow: None }
}

/// The output as stored: at most `MAX_STORED_OUTPUT` bytes, the head and the tail around a
/// marker; true when cut.
fn stored_output(output: &str) -> (std::borrow::Cow<'_, str>, bool) {
    if output.len() <= MAX_STORED_OUTPUT {
        return (std::borrow::Cow::Borrowed(output), false);
    }
    let floor = |mut i: usize| {
        while !output.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let head = floor(MAX_STORED_OUTPUT / 2);
    let tail = floor(output.len() - MAX_STORED_OUTPUT / 2);
    let cut = tail - head;
    (
        std::borrow::Cow::Owned(format!("{}\n[... {cut} bytes not stored ...]\n{}", &output[..head], &output[tail..])),
        true,
    )
}

/// The execution id and status of a document (ids or statuses written by a newer version are
/// left out).
pub(super) fn id_and_status(d: &Document) -> Option<(ExecutionId, Status)> {
    let id = d.get_str("_id").ok()?.parse().ok()?;
    let status = bson::from_bson::<Status>(d.get("status")?.clone()).ok()?;
    Some((id, status))
}

/// A stored document back as a record (`output` may be absent in search results).
pub(super) fn from_document(d: &Document) -> Result<ExecutionRecord, StoreError> {
    let bad = |what: &str| StoreError::Failed(format!("stored record has no valid {what}"));
    let id: ExecutionId = d.get_str("_id").map_err(|_| bad("_id"))?.parse().map_err(|_| bad("_id"))?;
    let str_of = |k: &str| d.get_str(k).ok().map(str::to_owned);
    let int_of = |k: &str| match d.get(k) {
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Double(v)) => Some(*v as i64),
        _ => None,
    };
    let status: Status = bson::from_bson(d.get("status").cloned().unwrap_or(Bson::Null)).map_err(|_| bad("status"))?;
    let trigger: TriggerKind =
        bson::from_bson(d.get("trigger").cloned().unwrap_or(Bson::Null)).map_err(|_| bad("trigger"))?;
    Ok(ExecutionRecord {
        job: str_of("job").unwrap_or_else(|| id.job.clone()),
        team: str_of("team"),
        scheduled_at: rfc(d.get("scheduled_at")).unwrap_or_default(),
        scheduled_ms: int_of("scheduled_ms").unwrap_or(0),
        claimed_at: rfc(d.get("claimed_at")),
        started_at: rfc(d.get("started_at")),
        finished_at: rfc(d.get("finished_at")),
        duration_ms: int_of("duration_ms").and_then(|v| u64::try_from(v).ok()),
        worker_id: str_of("worker_id").unwrap_or_default(),
        hostname: str_of("hostname").unwrap_or_default(),
        attempt: int_of("attempt").and_then(|v| u32::try_from(v).ok()).unwrap_or(1),
        trigger,
        status,
        exit_code: int_of("exit_code").and_then(|v| i32::try_from(v).ok()),
        signal: int_of("signal").and_then(|v| i32::try_from(v).ok()),
        output: str_of("output").unwrap_or_default(),
        output_truncated: d.get_bool("output_truncated").unwrap_or(false),
        error: str_of("error"),
        reason: str_of("reason"),
        fencing_token: int_of("fencing_token"),
        parent: str_of("parent").and_then(|p| p.parse().ok()),
        http_status: int_of("http_status").and_then(|v| u16::try_from(v).ok()),
        shard: match d.get_array("shard") {
            Ok(a) if a.len() == 2 => {
                let n = |b: &Bson| match b {
                    Bson::Int32(v) => u32::try_from(*v).ok(),
                    Bson::Int64(v) => u32::try_from(*v).ok(),
                    _ => None,
                };
                n(&a[0]).zip(n(&a[1]))
            }
            _ => None,
        },
        params: params_of(d),
        jitter_ms: int_of("jitter_ms"),
        workflow: str_of("workflow"),
        priority: int_of("priority").and_then(|v| u8::try_from(v).ok()),
        pool: str_of("pool"),
        trace_id: str_of("trace_id"),
        reports: reports_of(d),
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcron_model::keys::Tick;

    fn record() -> ExecutionRecord {
        ExecutionRecord {
            id: ExecutionId::new("a", Tick::Scheduled(1_700_000_000_000)),
            job: "a".into(),
            team: Some("payments".into()),
            scheduled_at: etcron_model::rfc3339_ms(1_700_000_000_000),
            scheduled_ms: 1_700_000_000_000,
            claimed_at: Some(etcron_model::rfc3339_ms(1_700_000_000_004)),
            started_at: Some(etcron_model::rfc3339_ms(1_700_000_000_005)),
            finished_at: None,
            duration_ms: None,
            worker_id: "w1".into(),
            hostname: "h".into(),
            attempt: 1,
            trigger: TriggerKind::Schedule,
            status: Status::Running,
            exit_code: None,
            signal: None,
            output: "Hello, World! disk_full at /var".into(),
            output_truncated: false,
            error: Some("exit code 3".into()),
            reason: None,
            fencing_token: Some(42),
            parent: None,
            http_status: None,
            shard: None,
            params: RunParams::default(),
            jitter_ms: None,
            workflow: None,
            priority: None,
            pool: None,
            trace_id: None,
            reports: Default::default(),
        }
    }

    #[test]
    fn documents_round_trip() {
        let r = record();
        let d = to_document(&r);
        assert!(matches!(d.get("scheduled_at"), Some(Bson::DateTime(_))));
        assert_eq!(from_document(&d).unwrap(), r);
        let with_params = ExecutionRecord {
            params: RunParams {
                env: [("DAY".to_owned(), "2026-11-01".to_owned())].into_iter().collect(),
                as_of_ms: Some(1_793_491_200_000),
                backfill: Some(etcron_model::record::BackfillRef { id: "19abc0042".to_owned(), index: 7 }),
                workflow: None,
            },
            jitter_ms: Some(12_345),
            workflow: Some("1764547200000-0a1b2c3d4e5f".to_owned()),
            priority: Some(90),
            pool: Some("reporting-db".to_owned()),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
            reports: Default::default(),
            ..record()
        };
        assert_eq!(from_document(&to_document(&with_params)).unwrap(), with_params);
    }

    #[test]
    fn output_too_large_for_a_document_keeps_head_and_tail() {
        let mut r = record();
        r.output = format!("é{}end", "x".repeat(MAX_STORED_OUTPUT + 10));
        let d = to_document(&r);
        let stored = d.get_str("output").unwrap();
        assert!(stored.len() <= MAX_STORED_OUTPUT + 64, "{}", stored.len());
        assert!(stored.starts_with('é') && stored.ends_with("end") && stored.contains("bytes not stored"));
        assert_eq!(d.get_bool("output_truncated"), Ok(true));
        assert_eq!(to_document(&record()).get_str("output").unwrap(), record().output);
    }

    #[test]
    fn words_are_lowercased_deduplicated_and_bounded() {
        assert_eq!(words("Hello, hello WORLD disk_full a /var/log"), ["hello", "world", "disk_full", "var", "log"]);
        let many: String = (0..5_000).map(|i| format!("w{i} ")).collect();
        assert_eq!(words(&many).len(), MAX_WORDS);
        let d = to_document(&record());
        let indexed: Vec<&str> = d.get_array("words").unwrap().iter().filter_map(|b| b.as_str()).collect();
        assert!(indexed.contains(&"disk_full") && indexed.contains(&"exit"), "{indexed:?}");
    }
}
