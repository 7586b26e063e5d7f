//! The worker's view of the cluster: the live workers (from `{ns}/workers/`) and the cordoned
//! ones (from `{ns}/cordon/`), which order the race for each tick.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use etcron_model::keys::{Key, Keys};
use etcron_model::stored::WorkerInfo;
use tokio::sync::mpsc;

use crate::cluster::watcher::{Kv, Mirror, Update};

/// Live workers by id, kept current by a mirror of `{ns}/workers/`, and the cordoned workers'
/// ids, by a mirror of `{ns}/cordon/`.
#[derive(Debug, Default, Clone)]
pub struct Members {
    inner: Arc<RwLock<BTreeMap<String, WorkerInfo>>>,
    cordoned: Arc<RwLock<BTreeSet<String>>>,
}

impl Members {
    /// Rank of `me` for `tick_key` among live workers: the cordoned after all the others, each
    /// part ordered by rendezvous hashing weighted by load ([`placement_score`]); 0 for the
    /// worker that should claim first. A worker not (yet) in the list ranks 0 too. Every worker
    /// ranks from the same registrations (the load each published, at most
    /// `REGISTRATION_REFRESH` old) and cordons, so they agree on the order.
    #[must_use]
    pub fn rank(&self, me: &str, tick_key: &str) -> usize {
        let members = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let cordoned = self.cordoned.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(my_info) = members.get(me) else {
            return 0;
        };
        let place = |id: &str, info: &WorkerInfo| (!cordoned.contains(id), placement_score(id, info, tick_key));
        let mine = (place(me, my_info), me);
        members.iter().filter(|(id, info)| id.as_str() != me && (place(id, info), id.as_str()) > mine).count()
    }

    /// Whether an operator cordoned worker `id` (or is draining it): it races for nothing new.
    #[must_use]
    pub fn cordoned(&self, id: &str) -> bool {
        self.cordoned.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains(id)
    }

    /// Applies mirror updates of `{ns}/cordon/` until the channel closes.
    pub async fn follow_cordons(self, keys: Keys, mut rx: mpsc::Receiver<Update>) {
        while let Some(update) = rx.recv().await {
            let set = self.cordoned.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            update.apply(&mut Cordons { keys: &keys, set });
        }
    }

    /// Why nobody claimed a tick of `spec` (its selector, its task's user, its team), from what
    /// this worker can see.
    #[must_use]
    pub fn miss_reason(&self, spec: &etcron_model::spec::JobSpec, after: std::time::Duration) -> String {
        let (selector, user) = (&spec.selector, spec.run_as_user());
        let members = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let matching: Vec<&WorkerInfo> = members.values().filter(|w| w.matches(selector)).collect();
        let allowed: Vec<&WorkerInfo> =
            matching.iter().copied().filter(|w| etcron_model::stored::may_run_as(&w.run_as_users, user)).collect();
        let serving: Vec<&WorkerInfo> = allowed
            .iter()
            .copied()
            .filter(|w| etcron_model::stored::serves_team(&w.teams, spec.team.as_deref()))
            .collect();
        let eligible: Vec<&WorkerInfo> = allowed.iter().copied().filter(|w| w.may_run(spec)).collect();
        let cordoned = self.cordoned.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = eligible.iter().filter(|w| !cordoned.contains(&w.id)).count();
        let wanted = || selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
        if members.is_empty() {
            format!("not claimed within {}s: no live worker", after.as_secs())
        } else if matching.is_empty() {
            format!("not claimed within {}s: no live worker matches selector {{{}}}", after.as_secs(), wanted())
        } else if allowed.is_empty() {
            format!(
                "not claimed within {}s: no live worker may run tasks as user {:?} (run_as_users in the worker config)",
                after.as_secs(),
                user.unwrap_or_default()
            )
        } else if !serving.is_empty() && eligible.is_empty() {
            match spec.task.handler() {
                Some(name) => format!("not claimed within {}s: no live executor has handler {name:?}", after.as_secs()),
                None => format!(
                    "not claimed within {}s: no live worker it matches runs {} tasks (only executors of handlers are live)",
                    after.as_secs(),
                    spec.task.kind()
                ),
            }
        } else if eligible.is_empty() {
            let team = spec.team.as_deref().map_or_else(|| "jobs without a team".to_owned(), |t| format!("team {t:?}"));
            format!(
                "not claimed within {}s: no live worker it matches runs {team} (workers bound to other teams; teams in the worker config)",
                after.as_secs()
            )
        } else if open == 0 {
            format!(
                "not claimed within {}s: all {} eligible workers are cordoned (POST /api/workers/{{id}}/uncordon)",
                after.as_secs(),
                eligible.len()
            )
        } else if eligible.iter().all(|w| w.running >= w.capacity) {
            format!("not claimed within {}s: all {} eligible workers were at capacity", after.as_secs(), eligible.len())
        } else {
            format!(
                "not claimed within {}s by any of {} eligible workers (etcd unreachable or workers overloaded)",
                after.as_secs(),
                eligible.len()
            )
        }
    }

    /// Applies mirror updates until the channel closes; a deleted registration is reported on
    /// `departures` with the revision of the delete. A registration that went while the mirror
    /// was re-listing (absent from the new listing, or there again but created anew) is reported
    /// with the revision it was last seen at, so the loss handling can look up its delete.
    pub async fn follow(
        self,
        keys: Keys,
        mut rx: mpsc::Receiver<Update>,
        departures: mpsc::UnboundedSender<(String, Departed)>,
    ) {
        // Create and mod revision of each registration as last seen.
        let mut seen: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        while let Some(update) = rx.recv().await {
            let members = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            update.apply(&mut Registrations { keys: &keys, members, seen: &mut seen, departures: &departures });
        }
    }
}

/// The live workers, write-locked, as the mirror of `{ns}/workers/`, with what reports
/// departures.
struct Registrations<'a> {
    keys: &'a Keys,
    members: std::sync::RwLockWriteGuard<'a, BTreeMap<String, WorkerInfo>>,
    /// Create and mod revision of each registration as last seen.
    seen: &'a mut BTreeMap<String, (i64, i64)>,
    departures: &'a mpsc::UnboundedSender<(String, Departed)>,
}

impl Mirror for Registrations<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, _revision: i64) {
        self.members.clear();
        let mut listed = BTreeMap::new();
        for kv in kvs {
            if let Some((id, info)) = registration(self.keys, &kv) {
                listed.insert(id.clone(), (kv.create_revision, kv.mod_revision));
                self.members.insert(id, info);
            }
        }
        for (id, revision) in unseen_departures(self.seen, &listed) {
            let _ = self.departures.send((id, Departed::After(revision)));
        }
        *self.seen = listed;
    }

    fn put(&mut self, kv: Kv) {
        if let Some((id, info)) = registration(self.keys, &kv) {
            self.seen.insert(id.clone(), (kv.create_revision, kv.mod_revision));
            self.members.insert(id, info);
        }
    }

    fn deleted(&mut self, key: Vec<u8>, mod_revision: i64) {
        if let Some(Key::Worker(id)) = self.keys.parse(&key) {
            self.seen.remove(&id);
            self.members.remove(&id);
            let _ = self.departures.send((id, Departed::At(mod_revision)));
        }
    }
}

/// The cordoned workers' ids, write-locked, as the mirror of `{ns}/cordon/`. A value that does
/// not parse still cordons (the key's existence is the cordon).
struct Cordons<'a> {
    keys: &'a Keys,
    set: std::sync::RwLockWriteGuard<'a, BTreeSet<String>>,
}

impl Cordons<'_> {
    fn worker(&self, key: &[u8]) -> Option<String> {
        match self.keys.parse(key) {
            Some(Key::Cordon(id)) => Some(id),
            _ => None,
        }
    }
}

impl Mirror for Cordons<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, revision: i64) {
        *self.set = kvs.iter().filter_map(|kv| self.worker(&kv.key)).collect();
        tracing::info!(cordoned = ?*self.set, revision, "cordoned workers listed");
    }

    fn put(&mut self, kv: Kv) {
        if let Some(id) = self.worker(&kv.key) {
            let cordon = etcron_model::stored::Cordon::from_stored(&kv.value);
            tracing::info!(worker = %id, drain = cordon.drain, by = ?cordon.by, "worker cordoned: it races for nothing new");
            self.set.insert(id);
        }
    }

    fn deleted(&mut self, key: Vec<u8>, _mod_revision: i64) {
        if let Some(id) = self.worker(&key) {
            tracing::info!(worker = %id, "worker uncordoned");
            self.set.remove(&id);
        }
    }
}

/// How a worker's registration went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departed {
    /// Deleted at this revision (its lease expired or was revoked).
    At(i64),
    /// Deleted some time after this revision, while the mirror was re-listing.
    After(i64),
}

/// Registrations seen before a re-listing that the listing no longer has, or has as a new
/// registration (another create revision: the old one was deleted, and the worker registered
/// again): each with the mod revision it was last seen at.
fn unseen_departures(seen: &BTreeMap<String, (i64, i64)>, listed: &BTreeMap<String, (i64, i64)>) -> Vec<(String, i64)> {
    seen.iter()
        .filter(|(id, (created, _))| listed.get(*id).is_none_or(|(now_created, _)| now_created != created))
        .map(|(id, (_, modified))| (id.clone(), *modified))
        .collect()
}

/// A worker registration read from etcd; a key or value that is not one is logged and left out
/// (such a "worker" never takes part in the claim order).
fn registration(keys: &Keys, kv: &crate::cluster::watcher::Kv) -> Option<(String, WorkerInfo)> {
    let Some(Key::Worker(id)) = keys.parse(&kv.key) else {
        tracing::error!(key = %String::from_utf8_lossy(&kv.key), "key under the workers prefix is not a worker key; ignored");
        return None;
    };
    match serde_json::from_slice::<WorkerInfo>(&kv.value) {
        Ok(info) => Some((id, info)),
        Err(e) => {
            tracing::error!(worker = %id, key = %String::from_utf8_lossy(&kv.key), error = %e, "worker registration in etcd is malformed; ignored");
            None
        }
    }
}

/// The free share a full (or over-full) worker still counts with: the order stays total, and
/// a full worker does not race anyway (it has no slot).
const MIN_FREE_SHARE: f64 = 0.05;

/// How much a worker's published load weighs on its place: its free share of capacity,
/// squared. One running 50 of 64 (free 0.22, weight 0.048) against an idle one (weight 1)
/// comes first for about 5 % of ticks; equally loaded workers split them evenly.
#[must_use]
pub fn load_weight(capacity: u32, running: u32) -> f64 {
    let free = f64::from(capacity.saturating_sub(running)) / f64::from(capacity.max(1));
    free.max(MIN_FREE_SHARE).powi(2)
}

/// Weighted rendezvous hashing: `weight / -ln(u)`, `u` the worker's hash of the tick as a
/// uniform number in (0, 1]. A worker comes first with probability its weight over the sum of
/// the weights; with equal weights the order is the plain hash's.
fn placement_score(worker: &str, info: &WorkerInfo, tick_key: &str) -> OrderedScore {
    #[allow(clippy::cast_precision_loss)] // 53 bits: exact in an f64
    let u = ((score(worker, tick_key) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let weight = load_weight(info.capacity, info.running);
    // u = 1 gives -ln(u) = 0: the best place, kept finite.
    OrderedScore(weight / (-u.ln()).max(f64::MIN_POSITIVE))
}

/// A finite, non-negative score, totally ordered.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedScore(f64);

impl Eq for OrderedScore {}

impl PartialOrd for OrderedScore {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderedScore {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// FNV-1a over `worker \0 tick`, finished with a 64-bit mixer: the same on every worker.
fn score(worker: &str, tick_key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in worker.bytes().chain(std::iter::once(0)).chain(tick_key.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relisting_reports_registrations_that_went_or_were_created_anew() {
        let map = |items: &[(&str, i64, i64)]| -> BTreeMap<String, (i64, i64)> {
            items.iter().map(|(id, c, m)| ((*id).to_owned(), (*c, *m))).collect()
        };
        let seen = map(&[("w1", 10, 12), ("w2", 20, 25), ("w3", 30, 30)]);
        // w1 refreshed its registration (same create revision): still there. w2 is gone. w3
        // was deleted and registered again (a new create revision). w4 is new.
        let listed = map(&[("w1", 10, 40), ("w3", 41, 41), ("w4", 42, 42)]);
        assert_eq!(unseen_departures(&seen, &listed), vec![("w2".to_owned(), 25), ("w3".to_owned(), 30)]);
        assert!(unseen_departures(&seen, &seen).is_empty());
        assert!(unseen_departures(&BTreeMap::new(), &listed).is_empty(), "a first listing reports nobody");
    }

    fn members(ids: &[&str]) -> Members {
        loaded(&ids.iter().map(|id| (*id, 1, 0)).collect::<Vec<_>>())
    }

    /// Members with (id, capacity, running).
    fn loaded(workers: &[(&str, u32, u32)]) -> Members {
        let m = Members::default();
        for (id, capacity, running) in workers {
            let info = WorkerInfo {
                id: (*id).to_owned(),
                hostname: "h".into(),
                pid: 1,
                labels: BTreeMap::new(),
                capacity: *capacity,
                running: *running,
                version: "0".into(),
                started_at: String::new(),
                output_url: None,
                output_token: None,
                run_as_users: Vec::new(),
                task_network_allow: Vec::new(),
                teams: Vec::new(),
                task_user: None,
                unsettled_from_ms: None,
                handlers: Vec::new(),
                default_notify: Vec::new(),
                os_user: None,
            };
            m.inner.write().unwrap().insert((*id).to_owned(), info);
        }
        m
    }

    #[test]
    fn ranks_are_a_permutation_and_spread_the_first_place() {
        let ids = ["w1", "w2", "w3"];
        let m = members(&ids);
        let mut firsts = BTreeMap::new();
        for tick in 0..3000 {
            let key = format!("job-{}/{}", tick % 50, tick);
            let mut ranks: Vec<usize> = ids.iter().map(|id| m.rank(id, &key)).collect();
            ranks.sort_unstable();
            assert_eq!(ranks, vec![0, 1, 2], "{key}");
            let first = ids.iter().find(|id| m.rank(id, &key) == 0).unwrap();
            *firsts.entry(*first).or_insert(0) += 1;
        }
        for id in ids {
            let n = firsts[id];
            assert!((700..=1300).contains(&n), "{id} ranked first {n} times of 3000");
        }
    }

    #[test]
    fn cordoned_workers_rank_last_and_a_tick_nobody_may_take_says_why() {
        let m = members(&["a", "b", "c"]);
        m.cordoned.write().unwrap().insert("b".to_owned());
        for tick in 0..200 {
            let key = format!("job/{tick}");
            assert_eq!(m.rank("b", &key), 2, "the cordoned one last for {key}");
            let mut open = [m.rank("a", &key), m.rank("c", &key)];
            open.sort_unstable();
            assert_eq!(open, [0, 1]);
        }
        let spec = |task: &str| {
            etcron_model::spec::JobSpec::from_json(format!(r#"{{"schedule":"@hourly","task":{task}}}"#).as_bytes())
                .unwrap()
        };
        let after = std::time::Duration::from_secs(5);
        let handler = spec(r#"{"kind":"handler","name":"hot-list"}"#);
        assert!(m.miss_reason(&handler, after).contains(r#"no live executor has handler "hot-list""#));
        m.cordoned.write().unwrap().extend(["a".to_owned(), "c".to_owned()]);
        let shell = spec(r#"{"kind":"shell","command":"true"}"#);
        assert!(
            m.miss_reason(&shell, after).contains("all 3 eligible workers are cordoned"),
            "{}",
            m.miss_reason(&shell, after)
        );
    }

    #[test]
    fn unknown_worker_ranks_first() {
        assert_eq!(members(&["a", "b"]).rank("c", "x/1"), 0);
    }

    #[test]
    fn equally_loaded_workers_keep_the_plain_rendezvous_order() {
        let ids = ["w1", "w2", "w3", "w4"];
        let m = loaded(&ids.iter().map(|id| (*id, 64, 10)).collect::<Vec<_>>());
        for tick in 0..500 {
            let key = format!("job-{}/{}", tick % 7, tick);
            for id in ids {
                let plain = ids.iter().filter(|o| **o != id && score(o, &key) > score(id, &key)).count();
                assert_eq!(m.rank(id, &key), plain, "{id} for {key}");
            }
        }
    }

    #[test]
    fn a_busy_worker_comes_first_for_few_ticks_and_a_full_one_for_almost_none() {
        let count_firsts = |m: &Members, id: &str| {
            (0..4000).filter(|tick| m.rank(id, &format!("job-{}/{tick}", tick % 13)) == 0).count()
        };
        // 50 of 64 running against an idle worker: weights 0.048 and 1, about 95 % to the idle.
        let m = loaded(&[("busy", 64, 50), ("idle", 64, 0)]);
        let idle = count_firsts(&m, "idle");
        assert!(idle >= 3_700, "the idle worker came first for {idle} of 4000 ticks");
        assert_eq!(idle + count_firsts(&m, "busy"), 4000, "exactly one first per tick");
        let m = loaded(&[("full", 64, 64), ("idle", 64, 0)]);
        assert!(count_firsts(&m, "full") <= 40, "a full worker came first for a few ticks at most");
        assert!((load_weight(64, 50) - 0.047_9).abs() < 0.001);
        assert!((load_weight(0, 5) - MIN_FREE_SHARE.powi(2)).abs() < 1e-12, "capacity 0 counts as full");
    }
}
