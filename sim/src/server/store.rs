//! The model etcd's state machine, with no I/O: etcd's MVCC store (one revision counter, every
//! version of every key kept, reads at past revisions, compaction as a read barrier) and its
//! lessor (leases with TTLs on tokio time, their keys deleted in one revision at revoke or
//! expiry), answering etcd's own request and response messages with etcd's own errors and
//! checks, in etcd 3.4's order. Left out: auth, physical compaction (history is kept for
//! [`super::ModelEtcd::history`]; compaction only refuses reads below it), the database size
//! quota, request size limits, and lease checkpoints.

use std::collections::{BTreeMap, BTreeSet};

use etcd_client::proto::{
    PbCompactionRequest, PbCompactionResponse, PbCompare, PbDeleteRequest, PbDeleteResponse, PbKeyValue,
    PbLeaseGrantRequest, PbLeaseGrantResponse, PbLeaseLeasesResponse, PbLeaseRevokeResponse, PbLeaseStatus,
    PbLeaseTimeToLiveRequest, PbLeaseTimeToLiveResponse, PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse,
    PbResponseHeader, PbResponseOp, PbTargetUnion, PbTxnOpRequest, PbTxnOpResponse, PbTxnRequest, PbTxnResponse,
};
use tokio::time::{Duration, Instant};
use tonic::Status;

use super::{Change, ChangeKind, KeyState};

/// etcd's default `--max-txn-ops`. A txn's count is the most of its compares, success ops
/// and failure ops; a nested txn's count comes out of what its parents' counts leave.
pub const MAX_TXN_OPS: usize = 128;
/// The smallest TTL etcd grants with its default election timeout (1 s) and heartbeat
/// (100 ms): ceil(1.5 × election ticks × heartbeat) = 2 s.
pub const MIN_LEASE_TTL: i64 = 2;
/// etcd's `MaxLeaseTTL`.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;
/// The first lease id the model chooses; then each is one more.
pub const FIRST_LEASE_ID: i64 = 0x7e57_0000_0000_0001;
pub const CLUSTER_ID: u64 = 0x5e71_c0de_0000_0001;
pub const MEMBER_ID: u64 = 0x5e71_c0de_0000_0002;
pub const RAFT_TERM: u64 = 2;

/// gRPC statuses as etcd's `rpctypes` defines them.
pub mod err {
    use tonic::Status;
    pub fn compacted() -> Status {
        Status::out_of_range("etcdserver: mvcc: required revision has been compacted")
    }
    pub fn future_rev() -> Status {
        Status::out_of_range("etcdserver: mvcc: required revision is a future revision")
    }
    pub fn lease_not_found() -> Status {
        Status::not_found("etcdserver: requested lease not found")
    }
    pub fn lease_exists() -> Status {
        Status::failed_precondition("etcdserver: lease already exists")
    }
    pub fn lease_ttl_too_large() -> Status {
        Status::out_of_range("etcdserver: too large lease TTL")
    }
    pub fn empty_key() -> Status {
        Status::invalid_argument("etcdserver: key is not provided")
    }
    pub fn key_not_found() -> Status {
        Status::invalid_argument("etcdserver: key not found")
    }
    pub fn value_provided() -> Status {
        Status::invalid_argument("etcdserver: value is provided")
    }
    pub fn lease_provided() -> Status {
        Status::invalid_argument("etcdserver: lease is provided")
    }
    pub fn too_many_ops() -> Status {
        Status::invalid_argument("etcdserver: too many operations in txn request")
    }
    pub fn duplicate_key() -> Status {
        Status::invalid_argument("etcdserver: duplicate key given in txn request")
    }
    pub fn invalid_sort() -> Status {
        Status::invalid_argument("etcdserver: invalid sort option")
    }
}

/// One version of a key: what a put wrote at `rev`, or its deletion (`None`).
#[derive(Clone, Debug)]
struct Version {
    rev: i64,
    kv: Option<Stored>,
}

#[derive(Clone, Debug)]
struct Stored {
    value: Vec<u8>,
    create: i64,
    version: i64,
    lease: i64,
}

#[derive(Clone, Debug)]
pub struct Lease {
    pub ttl: i64,
    pub expiry: Instant,
    keys: BTreeSet<Vec<u8>>,
}

/// A key range as etcd reads `key`/`range_end`: one key, every key from `key` on (`range_end`
/// is `\0`), or `[key, range_end)`.
#[derive(Clone, Debug)]
pub struct KeyRange {
    key: Vec<u8>,
    end: End,
}

#[derive(Clone, Debug)]
enum End {
    Single,
    Open,
    Before(Vec<u8>),
}

impl KeyRange {
    pub fn new(key: &[u8], range_end: &[u8]) -> Self {
        let end = match range_end {
            [] => End::Single,
            [0] => End::Open,
            e => End::Before(e.to_vec()),
        };
        Self { key: key.to_vec(), end }
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        match &self.end {
            End::Single => k == self.key.as_slice(),
            End::Open => k >= self.key.as_slice(),
            End::Before(e) => k >= self.key.as_slice() && k < e.as_slice(),
        }
    }
}

pub struct Store {
    rev: i64,
    compacted: i64,
    keys: BTreeMap<Vec<u8>, Vec<Version>>,
    changes: Vec<Change>,
    /// When each revision was applied (tokio time), for lagging watches.
    applied: Vec<(i64, Instant)>,
    leases: BTreeMap<i64, Lease>,
    next_lease: i64,
}

pub fn header(revision: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader { cluster_id: CLUSTER_ID, member_id: MEMBER_ID, revision, raft_term: RAFT_TERM })
}

/// The header etcd leaves on the responses of a txn's ops: the revision alone.
fn inner_header(revision: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader { revision, ..PbResponseHeader::default() })
}

fn kv_of(key: &[u8], mod_rev: i64, s: &Stored) -> PbKeyValue {
    PbKeyValue {
        key: key.to_vec(),
        create_revision: s.create,
        mod_revision: mod_rev,
        version: s.version,
        value: s.value.clone(),
        lease: s.lease,
    }
}

fn at_rev(versions: &[Version], rev: i64) -> Option<&Version> {
    versions.iter().rev().find(|v| v.rev <= rev)
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        Self {
            rev: 1,
            compacted: 0,
            keys: BTreeMap::new(),
            changes: Vec::new(),
            applied: Vec::new(),
            leases: BTreeMap::new(),
            next_lease: FIRST_LEASE_ID,
        }
    }

    pub fn revision(&self) -> i64 {
        self.rev
    }

    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// The last revision a watch lagging `lag` may deliver at `now`, and when the next one
    /// falls due.
    pub fn due_upto(&self, now: Instant, lag: Duration) -> (i64, Option<Instant>) {
        let due = self.applied.partition_point(|(_, at)| *at + lag <= now);
        match self.applied.get(due) {
            Some((rev, at)) => (rev - 1, Some(*at + lag)),
            None => (self.rev, None),
        }
    }

    /// The key-values in `range` as of `rev`, in key order.
    fn visible(&self, range: &KeyRange, rev: i64) -> Vec<PbKeyValue> {
        let mut out = Vec::new();
        let mut push = |k: &Vec<u8>, versions: &Vec<Version>| {
            if let Some(Version { rev: mod_rev, kv: Some(s) }) = at_rev(versions, rev) {
                out.push(kv_of(k, *mod_rev, s));
            }
        };
        match &range.end {
            End::Single => {
                if let Some(v) = self.keys.get(&range.key) {
                    push(&range.key, v);
                }
            }
            End::Open => self.keys.range(range.key.clone()..).for_each(|(k, v)| push(k, v)),
            End::Before(e) if *e > range.key => {
                self.keys.range(range.key.clone()..e.clone()).for_each(|(k, v)| push(k, v));
            }
            End::Before(_) => {}
        }
        out
    }

    /// The current key-value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<PbKeyValue> {
        self.visible(&KeyRange::new(key, &[]), self.rev).pop()
    }

    /// `key` as of revision `rev` (`None` below the compacted revision, as etcd answers).
    pub fn get_at(&self, key: &[u8], rev: i64) -> Option<PbKeyValue> {
        if rev < self.compacted {
            return None;
        }
        self.visible(&KeyRange::new(key, &[]), rev).pop()
    }

    pub fn dump(&self, prefix: &[u8]) -> Vec<KeyState> {
        let range = KeyRange::new(prefix, &etcron_model::keys::prefix_end(prefix));
        self.visible(&range, self.rev)
            .into_iter()
            .map(|kv| KeyState {
                key: kv.key,
                value: kv.value,
                create_revision: kv.create_revision,
                mod_revision: kv.mod_revision,
                version: kv.version,
                lease: kv.lease,
            })
            .collect()
    }

    // ---- Range -------------------------------------------------------------------------

    fn check_read_rev(&self, rev: i64, cur: i64) -> Result<i64, Status> {
        if rev > cur {
            return Err(err::future_rev());
        }
        let rev = if rev <= 0 { cur } else { rev };
        if rev < self.compacted {
            return Err(err::compacted());
        }
        Ok(rev)
    }

    /// etcd's `Range` as of the view revision `cur` (the current one, or a write txn's own).
    fn range_at(&self, r: &PbRangeRequest, cur: i64) -> Result<PbRangeResponse, Status> {
        let rev = self.check_read_rev(r.revision, cur)?;
        let mut kvs = self.visible(&KeyRange::new(&r.key, &r.range_end), rev);
        let count = i64::try_from(kvs.len()).unwrap_or(i64::MAX);
        if r.count_only {
            kvs.clear();
        }
        kvs.retain(|kv| {
            !(r.max_mod_revision != 0 && kv.mod_revision > r.max_mod_revision
                || r.min_mod_revision != 0 && kv.mod_revision < r.min_mod_revision
                || r.max_create_revision != 0 && kv.create_revision > r.max_create_revision
                || r.min_create_revision != 0 && kv.create_revision < r.min_create_revision)
        });
        sort_kvs(&mut kvs, r.sort_order, r.sort_target);
        let mut more = false;
        if let Ok(limit) = usize::try_from(r.limit) {
            if limit > 0 && kvs.len() > limit {
                kvs.truncate(limit);
                more = true;
            }
        }
        if r.keys_only {
            kvs.iter_mut().for_each(|kv| kv.value.clear());
        }
        Ok(PbRangeResponse { header: inner_header(cur), kvs, more, count })
    }

    pub fn range(&self, r: &PbRangeRequest) -> Result<PbRangeResponse, Status> {
        check_range(r)?;
        let mut resp = self.range_at(r, self.rev)?;
        resp.header = header(self.rev);
        Ok(resp)
    }

    // ---- Put / DeleteRange ---------------------------------------------------------------

    fn check_put_state(&self, p: &PbPutRequest) -> Result<(), Status> {
        if p.lease != 0 && !self.leases.contains_key(&p.lease) {
            return Err(err::lease_not_found());
        }
        if (p.ignore_value || p.ignore_lease) && self.get(&p.key).is_none() {
            return Err(err::key_not_found());
        }
        Ok(())
    }

    pub fn put(&mut self, p: &PbPutRequest, now: Instant) -> Result<PbPutResponse, Status> {
        check_put(p)?;
        self.check_put_state(p)?;
        let mut w = Write::begin(self);
        let mut resp = w.put(p);
        w.commit(now);
        resp.header = header(self.rev);
        Ok(resp)
    }

    pub fn delete(&mut self, d: &PbDeleteRequest, now: Instant) -> Result<PbDeleteResponse, Status> {
        check_delete(d)?;
        let mut w = Write::begin(self);
        let mut resp = w.delete(d);
        w.commit(now);
        resp.header = header(self.rev);
        Ok(resp)
    }

    // ---- Txn ---------------------------------------------------------------------------

    pub fn txn(&mut self, t: &PbTxnRequest, now: Instant) -> Result<PbTxnResponse, Status> {
        check_txn(t, MAX_TXN_OPS)?;
        check_intervals(&t.success)?;
        check_intervals(&t.failure)?;
        // Every compare, nested ones included, sees the state before the txn (etcd's
        // `compareToPath` runs on the read view before any op applies).
        let mut path = Vec::new();
        self.compare_path(t, &mut path);
        let writes = txn_writes(t);
        self.check_taken(t, &path, &mut 0, writes)?;
        let mut w = Write::begin(self);
        let mut resp = w.apply_txn(t, &path, &mut 0);
        w.commit(now);
        resp.header = header(self.rev);
        Ok(resp)
    }

    fn compare_path(&self, t: &PbTxnRequest, path: &mut Vec<bool>) {
        let ok = t.compare.iter().all(|c| self.compare(c));
        path.push(ok);
        for op in if ok { &t.success } else { &t.failure } {
            if let Some(PbTxnOpRequest::RequestTxn(inner)) = &op.request {
                self.compare_path(inner, path);
            }
        }
    }

    fn compare(&self, c: &PbCompare) -> bool {
        let kvs = self.visible(&KeyRange::new(&c.key, &c.range_end), self.rev);
        if kvs.is_empty() {
            // A VALUE compare on a missing key is false; any other sees zeros.
            return c.target != TARGET_VALUE && compare_kv(c, &PbKeyValue::default());
        }
        kvs.iter().all(|kv| compare_kv(c, kv))
    }

    /// etcd's `checkRequests` on the branch each level takes: a put's lease and ignore flags
    /// (write txns only), then a range's revision, both against the state before the txn.
    fn check_taken(&self, t: &PbTxnRequest, path: &[bool], at: &mut usize, writes: bool) -> Result<(), Status> {
        let ok = path.get(*at).copied().unwrap_or(false);
        *at += 1;
        for op in if ok { &t.success } else { &t.failure } {
            match &op.request {
                Some(PbTxnOpRequest::RequestPut(p)) if writes => self.check_put_state(p)?,
                Some(PbTxnOpRequest::RequestRange(r)) if r.revision != 0 => {
                    if r.revision > self.rev {
                        return Err(err::future_rev());
                    }
                    if r.revision < self.compacted {
                        return Err(err::compacted());
                    }
                }
                Some(PbTxnOpRequest::RequestTxn(inner)) => self.check_taken(inner, path, at, writes)?,
                _ => {}
            }
        }
        Ok(())
    }

    // ---- Compaction --------------------------------------------------------------------

    pub fn compact(&mut self, c: &PbCompactionRequest) -> Result<PbCompactionResponse, Status> {
        if c.revision <= self.compacted {
            return Err(err::compacted());
        }
        if c.revision > self.rev {
            return Err(err::future_rev());
        }
        self.compacted = c.revision;
        Ok(PbCompactionResponse { header: header(self.rev) })
    }

    // ---- Leases ------------------------------------------------------------------------

    pub fn lease(&self, id: i64) -> Option<&Lease> {
        self.leases.get(&id)
    }

    pub fn lease_grant(&mut self, g: &PbLeaseGrantRequest, now: Instant) -> Result<PbLeaseGrantResponse, Status> {
        if g.ttl > MAX_LEASE_TTL {
            return Err(err::lease_ttl_too_large());
        }
        let id = if g.id == 0 {
            while self.leases.contains_key(&self.next_lease) {
                self.next_lease += 1;
            }
            self.next_lease
        } else {
            g.id
        };
        if self.leases.contains_key(&id) {
            return Err(err::lease_exists());
        }
        if g.id == 0 {
            self.next_lease += 1;
        }
        let ttl = g.ttl.max(MIN_LEASE_TTL);
        self.leases.insert(id, Lease { ttl, expiry: now + secs(ttl), keys: BTreeSet::new() });
        Ok(PbLeaseGrantResponse { header: header(self.rev), id, ttl, error: String::new() })
    }

    pub fn lease_revoke(&mut self, id: i64, now: Instant) -> Result<PbLeaseRevokeResponse, Status> {
        if !self.revoke(id, now) {
            return Err(err::lease_not_found());
        }
        Ok(PbLeaseRevokeResponse { header: header(self.rev) })
    }

    /// Revokes lease `id`, its keys deleted in one revision (in key order, as etcd's lessor);
    /// false if there is no such lease.
    pub fn revoke(&mut self, id: i64, now: Instant) -> bool {
        let Some(lease) = self.leases.remove(&id) else { return false };
        let mut w = Write::begin(self);
        for key in &lease.keys {
            w.delete(&PbDeleteRequest { key: key.clone(), ..PbDeleteRequest::default() });
        }
        w.commit(now);
        true
    }

    /// A keep-alive: the lease's TTL, its expiry pushed to `now + ttl`; 0 for no such lease.
    pub fn lease_keep_alive(&mut self, id: i64, now: Instant) -> i64 {
        match self.leases.get_mut(&id) {
            Some(l) => {
                l.expiry = now + secs(l.ttl);
                l.ttl
            }
            None => 0,
        }
    }

    pub fn lease_time_to_live(&self, r: &PbLeaseTimeToLiveRequest, now: Instant) -> PbLeaseTimeToLiveResponse {
        let Some(l) = self.leases.get(&r.id) else {
            return PbLeaseTimeToLiveResponse { header: header(self.rev), id: r.id, ttl: -1, ..Default::default() };
        };
        let remaining = i64::try_from(l.expiry.saturating_duration_since(now).as_secs()).unwrap_or(i64::MAX);
        PbLeaseTimeToLiveResponse {
            header: header(self.rev),
            id: r.id,
            ttl: remaining,
            granted_ttl: l.ttl,
            keys: if r.keys { l.keys.iter().cloned().collect() } else { Vec::new() },
        }
    }

    /// Every lease, soonest expiry first (as etcd lists them).
    pub fn lease_leases(&self) -> PbLeaseLeasesResponse {
        let mut ls: Vec<(Instant, i64)> = self.leases.iter().map(|(id, l)| (l.expiry, *id)).collect();
        ls.sort();
        PbLeaseLeasesResponse {
            header: header(self.rev),
            leases: ls.into_iter().map(|(_, id)| PbLeaseStatus { id }).collect(),
        }
    }

    /// A new leader's lessor promoting itself (etcd's `Promote`): every lease is renewed to
    /// expire one TTL after `at`, whatever its holders last sent.
    pub fn renew_all(&mut self, at: Instant) {
        for l in self.leases.values_mut() {
            l.expiry = at + secs(l.ttl);
        }
    }

    /// The soonest lease expiry.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.leases.values().map(|l| l.expiry).min()
    }

    /// Expires every lease whose TTL has passed at `now`, soonest first (ties by id); true if any.
    pub fn expire_due(&mut self, now: Instant) -> bool {
        let mut due: Vec<(Instant, i64)> =
            self.leases.iter().filter(|(_, l)| l.expiry <= now).map(|(id, l)| (l.expiry, *id)).collect();
        due.sort();
        for (_, id) in &due {
            self.revoke(*id, now);
        }
        !due.is_empty()
    }
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

const TARGET_VALUE: i32 = 3;

fn compare_kv(c: &PbCompare, kv: &PbKeyValue) -> bool {
    use std::cmp::Ordering;
    let ord: Ordering = match c.target {
        0 => kv.version.cmp(&match c.target_union {
            Some(PbTargetUnion::Version(v)) => v,
            _ => 0,
        }),
        1 => kv.create_revision.cmp(&match c.target_union {
            Some(PbTargetUnion::CreateRevision(v)) => v,
            _ => 0,
        }),
        2 => kv.mod_revision.cmp(&match c.target_union {
            Some(PbTargetUnion::ModRevision(v)) => v,
            _ => 0,
        }),
        TARGET_VALUE => kv.value.as_slice().cmp(match &c.target_union {
            Some(PbTargetUnion::Value(v)) => v.as_slice(),
            _ => &[],
        }),
        4 => kv.lease.cmp(&match c.target_union {
            Some(PbTargetUnion::Lease(v)) => v,
            _ => 0,
        }),
        _ => Ordering::Equal,
    };
    match c.result {
        0 => ord.is_eq(),
        1 => ord.is_gt(),
        2 => ord.is_lt(),
        3 => ord.is_ne(),
        _ => true,
    }
}

/// etcd sorts with Go's `sort.Sort`, which is stable on the short lists it sorts by
/// insertion; ties keep key order here for every length.
fn sort_kvs(kvs: &mut [PbKeyValue], order: i32, target: i32) {
    // With no order, etcd sorts ascending unless the target is the key (already in order).
    let order = if order == 0 && target != 0 { 1 } else { order };
    if order == 0 {
        return;
    }
    let key = |kv: &PbKeyValue| -> (i64, Vec<u8>) {
        match target {
            1 => (kv.version, Vec::new()),
            2 => (kv.create_revision, Vec::new()),
            3 => (kv.mod_revision, Vec::new()),
            4 => (0, kv.value.clone()),
            _ => (0, kv.key.clone()),
        }
    };
    if order == 2 {
        kvs.sort_by_key(|kv| std::cmp::Reverse(key(kv)));
    } else {
        kvs.sort_by_key(key);
    }
}

// ---- Request checks (etcd's v3rpc `check*Request`) -------------------------------------

fn check_range(r: &PbRangeRequest) -> Result<(), Status> {
    if r.key.is_empty() {
        return Err(err::empty_key());
    }
    if !(0..=2).contains(&r.sort_order) || !(0..=4).contains(&r.sort_target) {
        return Err(err::invalid_sort());
    }
    Ok(())
}

fn check_put(p: &PbPutRequest) -> Result<(), Status> {
    if p.key.is_empty() {
        return Err(err::empty_key());
    }
    if p.ignore_value && !p.value.is_empty() {
        return Err(err::value_provided());
    }
    if p.ignore_lease && p.lease != 0 {
        return Err(err::lease_provided());
    }
    Ok(())
}

fn check_delete(d: &PbDeleteRequest) -> Result<(), Status> {
    if d.key.is_empty() {
        return Err(err::empty_key());
    }
    Ok(())
}

/// etcd's `checkTxnRequest`: a level's op count is the most of its compares, success ops and
/// failure ops; a nested txn gets what its parent's count leaves of the budget.
fn check_txn(t: &PbTxnRequest, budget: usize) -> Result<(), Status> {
    let count = t.compare.len().max(t.success.len()).max(t.failure.len());
    if count > budget {
        return Err(err::too_many_ops());
    }
    if t.compare.iter().any(|c| c.key.is_empty()) {
        return Err(err::empty_key());
    }
    for op in t.success.iter().chain(&t.failure) {
        match &op.request {
            Some(PbTxnOpRequest::RequestRange(r)) => check_range(r)?,
            Some(PbTxnOpRequest::RequestPut(p)) => check_put(p)?,
            Some(PbTxnOpRequest::RequestDeleteRange(d)) => check_delete(d)?,
            Some(PbTxnOpRequest::RequestTxn(inner)) => check_txn(inner, budget - count)?,
            None => return Err(err::key_not_found()),
        }
    }
    Ok(())
}

/// A delete's interval as etcd's `checkIntervals` builds it: a point, or `[key, range_end)`
/// compared as plain strings (so a `\0` end covers nothing there, as in etcd).
#[derive(Clone, Debug)]
struct Interval(Vec<u8>, Option<Vec<u8>>);

impl Interval {
    fn hits(&self, k: &[u8]) -> bool {
        match &self.1 {
            None => self.0 == k,
            Some(e) => k >= self.0.as_slice() && k < e.as_slice(),
        }
    }
}

/// etcd's `checkIntervals`: no key put twice, nor put and deleted, in one txn (a key put in
/// both branches of a nested txn is allowed: only one runs).
fn check_intervals(ops: &[etcd_client::proto::PbTxnRequestOp]) -> Result<(BTreeSet<Vec<u8>>, Vec<Interval>), Status> {
    let mut dels: Vec<Interval> = Vec::new();
    for op in ops {
        if let Some(PbTxnOpRequest::RequestDeleteRange(d)) = &op.request {
            let end = (!d.range_end.is_empty()).then(|| d.range_end.clone());
            dels.push(Interval(d.key.clone(), end));
        }
    }
    let mut puts: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut child_dels = Vec::new();
    for op in ops {
        let Some(PbTxnOpRequest::RequestTxn(t)) = &op.request else { continue };
        let (puts_then, dels_then) = check_intervals(&t.success)?;
        let (puts_else, dels_else) = check_intervals(&t.failure)?;
        for k in &puts_then {
            if puts.contains(k) || dels.iter().any(|d| d.hits(k)) {
                return Err(err::duplicate_key());
            }
            puts.insert(k.clone());
        }
        for k in &puts_else {
            if puts.contains(k) && !puts_then.contains(k) || dels.iter().any(|d| d.hits(k)) {
                return Err(err::duplicate_key());
            }
            puts.insert(k.clone());
        }
        child_dels.extend(dels_then);
        child_dels.extend(dels_else);
    }
    dels.extend(child_dels);
    for op in ops {
        let Some(PbTxnOpRequest::RequestPut(p)) = &op.request else { continue };
        if puts.contains(&p.key) || dels.iter().any(|d| d.hits(&p.key)) {
            return Err(err::duplicate_key());
        }
        puts.insert(p.key.clone());
    }
    Ok((puts, dels))
}

/// Whether a txn has a put or delete in any branch (etcd's `!isTxnReadonly`).
pub fn txn_writes(t: &PbTxnRequest) -> bool {
    t.success.iter().chain(&t.failure).any(|op| match &op.request {
        Some(PbTxnOpRequest::RequestPut(_) | PbTxnOpRequest::RequestDeleteRange(_)) => true,
        Some(PbTxnOpRequest::RequestTxn(inner)) => txn_writes(inner),
        _ => false,
    })
}

/// The keys `t` puts in any branch, nested transactions' included.
pub fn txn_puts(t: &PbTxnRequest) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for op in t.success.iter().chain(&t.failure) {
        match &op.request {
            Some(PbTxnOpRequest::RequestPut(p)) => keys.push(p.key.clone()),
            Some(PbTxnOpRequest::RequestTxn(inner)) => keys.extend(txn_puts(inner)),
            _ => {}
        }
    }
    keys
}

// ---- A write: every change at one new revision ----------------------------------------

struct Write<'a> {
    store: &'a mut Store,
    /// The revision the writes take.
    rev: i64,
    changed: bool,
}

impl<'a> Write<'a> {
    fn begin(store: &'a mut Store) -> Self {
        let rev = store.rev + 1;
        Self { store, rev, changed: false }
    }

    /// The revision reads in this write see: its own once it has changed something.
    fn view(&self) -> i64 {
        if self.changed {
            self.rev
        } else {
            self.rev - 1
        }
    }

    fn record(&mut self, key: &[u8], kv: Option<Stored>) {
        let change = match &kv {
            Some(s) => Change {
                kind: ChangeKind::Put,
                key: key.to_vec(),
                value: s.value.clone(),
                revision: self.rev,
                create_revision: s.create,
                version: s.version,
                lease: s.lease,
            },
            None => Change {
                kind: ChangeKind::Delete,
                key: key.to_vec(),
                value: Vec::new(),
                revision: self.rev,
                create_revision: 0,
                version: 0,
                lease: 0,
            },
        };
        self.store.changes.push(change);
        let versions = self.store.keys.entry(key.to_vec()).or_default();
        if versions.last().is_some_and(|v| v.rev == self.rev) {
            versions.pop();
        }
        versions.push(Version { rev: self.rev, kv });
        self.changed = true;
    }

    fn detach(&mut self, key: &[u8], lease: i64) {
        if let Some(l) = self.store.leases.get_mut(&lease) {
            l.keys.remove(key);
        }
    }

    fn put(&mut self, p: &PbPutRequest) -> PbPutResponse {
        let prev = self.store.visible(&KeyRange::new(&p.key, &[]), self.view()).pop();
        let value = match (&prev, p.ignore_value) {
            (Some(prev), true) => prev.value.clone(),
            _ => p.value.clone(),
        };
        let lease = match (&prev, p.ignore_lease) {
            (Some(prev), true) => prev.lease,
            _ => p.lease,
        };
        let (create, version) = prev.as_ref().map_or((self.rev, 1), |kv| (kv.create_revision, kv.version + 1));
        if let Some(old) = prev.as_ref().map(|kv| kv.lease).filter(|l| *l != 0) {
            self.detach(&p.key, old);
        }
        if let Some(l) = self.store.leases.get_mut(&lease) {
            l.keys.insert(p.key.clone());
        }
        self.record(&p.key, Some(Stored { value, create, version, lease }));
        PbPutResponse { header: inner_header(self.rev), prev_kv: if p.prev_kv { prev } else { None } }
    }

    fn delete(&mut self, d: &PbDeleteRequest) -> PbDeleteResponse {
        let gone = self.store.visible(&KeyRange::new(&d.key, &d.range_end), self.view());
        for kv in &gone {
            if kv.lease != 0 {
                self.detach(&kv.key, kv.lease);
            }
            self.record(&kv.key, None);
        }
        let revision = if self.changed { self.rev } else { self.rev - 1 };
        PbDeleteResponse {
            header: inner_header(revision),
            deleted: i64::try_from(gone.len()).unwrap_or(i64::MAX),
            prev_kvs: if d.prev_kv { gone } else { Vec::new() },
        }
    }

    fn apply_txn(&mut self, t: &PbTxnRequest, path: &[bool], at: &mut usize) -> PbTxnResponse {
        let ok = path.get(*at).copied().unwrap_or(false);
        *at += 1;
        let mut responses = Vec::new();
        for op in if ok { &t.success } else { &t.failure } {
            let response = match &op.request {
                Some(PbTxnOpRequest::RequestRange(r)) => {
                    let view = self.view();
                    // Checked before the txn began: a range in it cannot fail.
                    let resp = self.store.range_at(r, view).unwrap_or_default();
                    Some(PbTxnOpResponse::ResponseRange(resp))
                }
                Some(PbTxnOpRequest::RequestPut(p)) => Some(PbTxnOpResponse::ResponsePut(self.put(p))),
                Some(PbTxnOpRequest::RequestDeleteRange(d)) => {
                    Some(PbTxnOpResponse::ResponseDeleteRange(self.delete(d)))
                }
                Some(PbTxnOpRequest::RequestTxn(inner)) => {
                    let mut resp = self.apply_txn(inner, path, at);
                    // etcd leaves a nested txn's header empty.
                    resp.header = Some(PbResponseHeader::default());
                    Some(PbTxnOpResponse::ResponseTxn(resp))
                }
                None => None,
            };
            responses.push(PbResponseOp { response });
        }
        PbTxnResponse { header: None, succeeded: ok, responses }
    }

    fn commit(self, now: Instant) {
        if self.changed {
            self.store.rev = self.rev;
            self.store.applied.push((self.rev, now));
        }
    }
}
