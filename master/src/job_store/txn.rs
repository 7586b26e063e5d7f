//! The etcd transactions of a batch: the jobs read at one revision, the changes grouped into as
//! few transactions as they fit in, each nested under its own precondition (the whole guarded
//! on the revision read when asked), and each answer read back as the change's outcome.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use etcron_model::keys::Key;
use etcron_model::now_ms;
use etcron_model::spec::JobSpec;
use etcron_model::stored::JobState;

use super::checks::{decide_locally, mark_unchanged, prepare, refused, teams_checked};
use super::dependencies::JobTeams;
use super::{
    commands, etcd, Change, JobStore, JobStoreError, Origin, Outcome, Precondition, Prepared, Retry, Snapshot, Write,
    Written, TXN_BYTES, TXN_CHANGES,
};
use crate::access::Scope;
use crate::error::etcd_failure;
use etcron_common::etcd::list::Pages;
use etcron_common::etcd::REQUEST_TIMEOUT;

/// How one transaction of the batch ended.
enum Committed {
    Done {
        revision: i64,
    },
    /// A job was written after the revision the dependency check read.
    JobsChanged,
}

impl JobStore {
    /// One pass over `pending`: read, prepare, check, write. `Err` holds the writes to try
    /// again (with why): jobs changed under the dependency check, or a save found unchanged
    /// whose job changed before its transaction.
    pub(super) async fn attempt(
        &self,
        writes: &[Write],
        pending: &[usize],
        outcomes: &mut [Option<Outcome>],
        transactions: &mut usize,
        (origin, scope): (&Origin, &Scope),
    ) -> Result<(), Vec<(usize, Retry)>> {
        let needs_graph = self.needs_all(writes, pending);
        let teams = teams_checked(scope);
        // A caller whose teams are checked has every job it writes read; every save has its
        // job read (to keep withheld secrets, and to write nothing when nothing changes).
        let wanted: Vec<&str> = pending
            .iter()
            .filter(|&&i| teams.is_some() || matches!(&writes[i].change, Change::Put(_)))
            .map(|&i| writes[i].job.as_str())
            .collect();
        let snapshot = match self.snapshot(&wanted, needs_graph).await {
            Ok(s) => s,
            Err(e) => {
                for &i in pending {
                    outcomes[i] = Some(Err(e.clone()));
                }
                return Ok(());
            }
        };
        let job_teams =
            snapshot.as_ref().filter(|s| s.complete).map(|s| JobTeams::after(s, writes, pending.iter().copied()));
        let mut ready = Vec::new();
        for &i in pending {
            let history = Some((&self.keys, origin));
            let deps = job_teams.as_ref().map(|t| (t, scope));
            match prepare(i, &writes[i], snapshot.as_ref(), history, (teams, deps)) {
                Ok(p) => ready.push(p),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        if let (Some(snapshot), Some(job_teams)) = (snapshot.as_ref().filter(|s| s.complete), &job_teams) {
            let shown = |job: &str| job_teams.shown(scope, job);
            let quota = self.limits.settings.max_jobs_per_team;
            ready = decide_locally(writes, ready, snapshot, outcomes, &shown, quota);
        }
        if let Some(snapshot) = &snapshot {
            mark_unchanged(writes, &mut ready, snapshot);
        }
        let mut guard = snapshot.as_ref().filter(|s| s.complete).map(|s| s.revision);
        let chunks = chunks(ready);
        let mut chunks = chunks.into_iter();
        let mut again = Vec::new();
        while let Some(chunk) = chunks.next() {
            *transactions += 1;
            match self.commit(writes, &chunk, guard, outcomes, &mut again).await {
                Ok(Committed::Done { revision }) => {
                    if guard.is_some() {
                        guard = Some(revision);
                    }
                }
                Ok(Committed::JobsChanged) => {
                    let left = chunk.iter().map(|p| p.index).chain(chunks.flatten().map(|p| p.index));
                    again.extend(left.map(|i| (i, Retry::JobsChanged)));
                    break;
                }
                Err(e) => {
                    // This transaction's outcome is unknown, and the later ones were not sent
                    // (nor are the ones left to compare again).
                    let left = chunk.iter().map(|p| p.index).chain(chunks.flatten().map(|p| p.index));
                    for index in left.chain(again.drain(..).map(|(i, _)| i)) {
                        outcomes[index] = Some(Err(e.clone()));
                    }
                    return Ok(());
                }
            }
        }
        if again.is_empty() {
            Ok(())
        } else {
            Err(again)
        }
    }

    /// Every job (when the dependency check needs them), or the jobs named; `None` when
    /// nothing needs reading.
    pub(super) async fn snapshot(&self, wanted: &[&str], all: bool) -> Result<Option<Snapshot>, JobStoreError> {
        let mut kv = self.client.kv_client();
        if all {
            // In pages sized by bytes, at one revision: one range of every job would exceed
            // the answer's limit past a few tens of thousands of jobs.
            let prefix = self.keys.jobs_prefix();
            let mut pages = Pages::new(&self.client, "list_jobs", prefix.as_bytes(), 0, REQUEST_TIMEOUT);
            let mut jobs = BTreeMap::new();
            while let Some(page) = pages.next().await.map_err(|e| JobStoreError::Etcd(etcd_failure(e)))? {
                for item in page {
                    if let Some(Key::Job(name)) = self.keys.parse(item.key()) {
                        let mod_revision = item.mod_revision();
                        jobs.insert(name, (item.into_key_value().1, mod_revision));
                    }
                }
            }
            return Ok(Some(Snapshot { revision: pages.revision(), jobs, complete: true }));
        }
        if wanted.is_empty() {
            return Ok(None);
        }
        let mut jobs = BTreeMap::new();
        let mut revision = 0;
        for names in wanted.chunks(TXN_CHANGES) {
            let txn = Txn::new().and_then(names.iter().map(|n| TxnOp::get(self.keys.job(n), None)).collect::<Vec<_>>());
            let resp = etcd("get_jobs", kv.txn(txn)).await?;
            revision = resp.header().map_or(revision, |h| h.revision());
            for op in resp.op_responses() {
                if let TxnOpResponse::Get(g) = op {
                    for item in g.kvs() {
                        if let Some(Key::Job(name)) = self.keys.parse(item.key()) {
                            jobs.insert(name, (item.value().to_vec(), item.mod_revision()));
                        }
                    }
                }
            }
        }
        Ok(Some(Snapshot { revision, jobs, complete: false }))
    }

    /// Sends one transaction: each change nested under its own precondition, the whole under
    /// `guard` (no job written after that revision) when the dependency check asks for it. A
    /// save found unchanged whose job was written since the read, where the write would have
    /// gone through, is left to `again`.
    async fn commit(
        &self,
        writes: &[Write],
        chunk: &[Prepared],
        guard: Option<i64>,
        outcomes: &mut [Option<Outcome>],
        again: &mut Vec<(usize, Retry)>,
    ) -> Result<Committed, JobStoreError> {
        let compares: Vec<Compare> = guard
            .map(|rev| Compare::mod_revision(self.keys.jobs_prefix(), CompareOp::Less, rev + 1).with_prefix())
            .into_iter()
            .collect();
        let mut kv = self.client.kv_client();
        if let [p] = chunk {
            // One change: its own transaction, as a single PUT or DELETE always was.
            let w = &writes[p.index];
            let resp = etcd("txn", kv.txn(self.change_txn(w, p, compares))).await?;
            let revision = resp.header().map_or(0, |h| h.revision());
            if resp.succeeded() {
                outcomes[p.index] = Some(Ok(written(&w.job, p, resp.op_responses(), revision)));
            } else if guard.is_some() {
                // The precondition was decided against the guarded read: the jobs changed.
                return Ok(Committed::JobsChanged);
            } else {
                refused(w, p, current_revision(resp.op_responses()), outcomes, again);
            }
            return Ok(Committed::Done { revision });
        }
        let mut ops: Vec<TxnOp> =
            chunk.iter().map(|p| TxnOp::txn(self.change_txn(&writes[p.index], p, Vec::new()))).collect();
        if chunk.iter().any(|p| p.value.is_some() && p.unchanged.is_none()) {
            // etcd's space quota weighs only the puts at a transaction's top level, so puts
            // nested in changes alone would pass even its NOSPACE alarm: this one small put
            // makes etcd refuse the whole batch while it refuses writes. (A chunk of unchanged
            // saves only reads: no put, no new revision.)
            ops.push(TxnOp::put(self.keys.quota_probe(), Vec::new(), None));
        }
        let resp = etcd("txn", kv.txn(Txn::new().when(compares).and_then(ops))).await?;
        if !resp.succeeded() {
            return Ok(Committed::JobsChanged);
        }
        let revision = resp.header().map_or(0, |h| h.revision());
        for (p, op) in chunk.iter().zip(resp.op_responses()) {
            let TxnOpResponse::Txn(inner) = op else {
                outcomes[p.index] = Some(Err(JobStoreError::internal(&"a nested transaction answered otherwise")));
                continue;
            };
            let w = &writes[p.index];
            if inner.succeeded() {
                outcomes[p.index] = Some(Ok(written(&w.job, p, inner.op_responses(), revision)));
            } else {
                refused(w, p, current_revision(inner.op_responses()), outcomes, again);
            }
        }
        Ok(Committed::Done { revision })
    }

    /// The transaction of one change: `compares` and its precondition, then the writes;
    /// otherwise the job as it is now (to say why it was refused).
    fn change_txn(&self, w: &Write, p: &Prepared, mut compares: Vec<Compare>) -> Txn {
        let key = self.keys.job(&w.job);
        if let Some(rev) = p.unchanged {
            // Nothing to write: the job as read, if it is still at the revision compared (the
            // client's `If-Match`, when it gave one, is that revision: see `mark_unchanged`).
            compares.push(Compare::mod_revision(key.clone(), CompareOp::Equal, rev));
            return Txn::new()
                .when(compares)
                .and_then([TxnOp::get(key.clone(), None), TxnOp::get(self.keys.paused(&w.job), None)])
                .or_else([TxnOp::get(key, None)]);
        }
        let Precondition { expected, create_only } = p.precondition;
        match &p.value {
            Some(value) => {
                compares.extend(match (expected, create_only) {
                    (Some(rev), _) => Some(Compare::mod_revision(key.clone(), CompareOp::Equal, rev)),
                    (None, true) => Some(Compare::create_revision(key.clone(), CompareOp::Equal, 0)),
                    (None, false) => None,
                });
                let mut ops = vec![
                    TxnOp::txn(self.init_state(&w.job)),
                    TxnOp::put(key.clone(), value.clone(), Some(PutOptions::new().with_prev_key())),
                    // A save leaves the pause alone; the answer shows it as it is.
                    TxnOp::get(self.keys.paused(&w.job), None),
                ];
                ops.extend(p.history.as_ref().map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None)));
                Txn::new().when(compares).and_then(ops).or_else([TxnOp::get(key, None)])
            }
            None => {
                compares.push(match expected {
                    Some(rev) => Compare::mod_revision(key.clone(), CompareOp::Equal, rev),
                    None => Compare::create_revision(key.clone(), CompareOp::Greater, 0),
                });
                let mut ops = vec![TxnOp::get(key.clone(), None)];
                ops.extend(self.delete_ops(&w.job));
                Txn::new().when(compares).and_then(ops).or_else([TxnOp::get(key, None)])
            }
        }
    }

    /// A new job's catch-up state starts now, so workers never catch up on ticks from before
    /// the job existed. Only when the job does not exist yet and no state is stored: a replace,
    /// or a state left by someone else, keeps its value. Placed before the put so that its
    /// compare sees the job as it was before this transaction.
    fn init_state(&self, job: &str) -> Txn {
        let (key, state_key) = (self.keys.job(job), self.keys.state(job));
        Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, 0),
                Compare::version(state_key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(state_key, JobState { last_tick_ms: now_ms() }.to_bytes(), None)])
    }
}

/// The job's mod revision in a refused change's answer (its `get`); `None`: absent.
fn current_revision(ops: Vec<TxnOpResponse>) -> Option<i64> {
    ops.into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map(|kv| kv.mod_revision())),
            _ => None,
        })
        .flatten()
}

/// The outcome of a change whose transaction succeeded.
fn written(job: &str, p: &Prepared, ops: Vec<TxnOpResponse>, revision: i64) -> Written {
    if let (Some(rev), Some(value), Some(spec)) = (p.unchanged, &p.value, &p.spec) {
        return kept(job, (rev, value, spec), ops);
    }
    match (&p.value, &p.spec) {
        (Some(value), Some(spec)) => {
            let (mut previous, mut pause, mut job_put) = (None, None, true);
            for op in ops {
                match op {
                    // The job's put comes first; the saved version's put after it.
                    TxnOpResponse::Put(put) if job_put => {
                        job_put = false;
                        previous = put.prev_key().map(|kv| (kv.create_revision(), kv.value().to_vec()));
                    }
                    TxnOpResponse::Get(get) => {
                        pause = get.kvs().first().map(|kv| commands::stored_pause(job, kv.value()));
                    }
                    _ => {}
                }
            }
            let (created_revision, before) = match previous {
                Some((created, before)) => (created, Some(before)),
                None => (revision, None),
            };
            Written::Saved {
                created: before.is_none(),
                revision,
                created_revision,
                value: value.clone(),
                spec: spec.clone(),
                before,
                pause,
                unchanged: false,
            }
        }
        _ => {
            let before = ops.into_iter().find_map(|op| match op {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                _ => None,
            });
            Written::Deleted { before }
        }
    }
}

/// The outcome of a save found unchanged at `revision`: its transaction read the job (the value
/// it keeps) and the job's pause, in that order.
fn kept(job: &str, (revision, value, spec): (i64, &[u8], &JobSpec), ops: Vec<TxnOpResponse>) -> Written {
    let mut gets = ops.into_iter().filter_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    });
    let created_revision = gets.next().and_then(|g| g.kvs().first().map(|kv| kv.create_revision()));
    let pause = gets.next().and_then(|g| g.kvs().first().map(|kv| commands::stored_pause(job, kv.value())));
    Written::Saved {
        created: false,
        revision,
        created_revision: created_revision.unwrap_or(revision),
        value: value.to_vec(),
        spec: Box::new(spec.clone()),
        pause,
        before: Some(value.to_vec()),
        unchanged: true,
    }
}

/// Writes grouped into transactions of at most [`TXN_CHANGES`] changes and [`TXN_BYTES`].
fn chunks(ready: Vec<Prepared>) -> Vec<Vec<Prepared>> {
    let mut out: Vec<Vec<Prepared>> = Vec::new();
    let mut bytes = 0;
    for p in ready {
        let size = p.value.as_ref().map_or(0, Vec::len) + p.history.as_ref().map_or(0, |(_, v)| v.len());
        match out.last_mut() {
            Some(last) if last.len() < TXN_CHANGES && bytes + size <= TXN_BYTES => {
                bytes += size;
                last.push(p);
            }
            _ => {
                bytes = size;
                out.push(vec![p]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_store::tests::prepared;

    #[test]
    fn chunks_respect_the_change_and_byte_limits() {
        let many: Vec<Prepared> = (0..250).map(|i| prepared(i, Some(10))).collect();
        let sizes: Vec<usize> = chunks(many).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
        let big: Vec<Prepared> = (0..40).map(|i| prepared(i, Some(60 * 1024))).collect();
        let sizes: Vec<usize> = chunks(big).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![17, 17, 6], "17 × 60 KiB fit in 1 MiB, 18 do not");
        let order: Vec<usize> =
            chunks((0..5).map(|i| prepared(i, None)).collect()).into_iter().flatten().map(|p| p.index).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
        assert!(chunks(Vec::new()).is_empty());
    }
}
