//! What the job index holds: per stored job its team, its pool and its [`Placement`] (`None`
//! for a spec this version refuses: such a job is not scheduled), with the jobs grouped by
//! distinct placement and by pool and team, in name order, so that a page reads only what it
//! shows. Pure: [`super`] feeds it from etcd.
//!
//! Cost: about 180 bytes a job (the job map's entry, the name once, its place in the set of its
//! placement, of its pool when it has one, and of each of its labels: [`Index::approx_bytes`]
//! counts them; a test measures 180 bytes a job at 10 000 jobs of 10-byte names with a pool,
//! 211 with a label instead, ~200 MB at 1 000 000), where the
//! specs themselves weigh ~200 bytes to kilobytes each; a placement, a team and a pool are
//! held once, whatever the number of jobs sharing them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use etcron_model::spec::JobSpec;
use etcron_model::stored::Placement;
use serde::Deserialize;

/// A job name, held once and shared by the sets that name the job.
pub type Name = Arc<str>;

/// What the index keeps of one job.
#[derive(Debug)]
struct Entry {
    team: Option<Name>,
    pool: Option<Name>,
    /// `None`: the stored spec is refused by this version ([`JobSpec::from_json`]).
    placement: Option<Arc<Placement>>,
    /// Its labels (key, value), held once each.
    labels: Box<[(Name, Name)]>,
}

/// The jobs of one group (a placement; a pool's team), in name order.
type Names = BTreeSet<Name>;

/// The index of the stored jobs.
#[derive(Debug, Default)]
pub struct Index {
    jobs: HashMap<Name, Entry>,
    /// Each distinct placement of a valid spec, with its jobs.
    placements: HashMap<Arc<Placement>, Names>,
    /// pool → team (`None`: no team) → its jobs naming the pool.
    pools: HashMap<Name, BTreeMap<Option<Name>, Names>>,
    /// label key → label value → its jobs (`GET /api/jobs?label=`).
    labels: HashMap<Name, HashMap<Name, Names>>,
    /// Team and pool names, label keys and values, held once.
    interned: HashSet<Name>,
}

/// The team and pool of a value this version refuses, read on their own (as
/// [`crate::access::team_of`] reads the team): such a job still belongs to its team and names
/// its pool.
#[derive(Deserialize)]
struct Loose {
    #[serde(default)]
    pool: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl Index {
    /// Jobs indexed.
    #[must_use]
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Distinct placements of the valid specs.
    #[must_use]
    pub fn placements(&self) -> usize {
        self.placements.len()
    }

    /// A job was stored (created or changed) with `value`.
    pub fn put(&mut self, name: &str, value: &[u8]) {
        self.delete(name);
        let (team, pool, placement, labels) = match JobSpec::from_json(value) {
            Ok(spec) => (spec.team.clone(), spec.pool.clone(), Some(Placement::of(&spec)), spec.labels.clone()),
            Err(_) => {
                let loose = serde_json::from_slice::<Loose>(value).ok();
                let (pool, labels) = loose.map(|l| (l.pool, l.labels)).unwrap_or_default();
                (crate::access::team_of(value), pool, None, labels)
            }
        };
        let name: Name = Arc::from(name);
        let team = team.map(|t| self.intern(&t));
        let pool = pool.map(|p| self.intern(&p));
        let placement = placement.map(|p| {
            let p = match self.placements.get_key_value(&p) {
                Some((shared, _)) => shared.clone(),
                None => Arc::new(p),
            };
            self.placements.entry(p.clone()).or_default().insert(name.clone());
            p
        });
        if let Some(pool) = &pool {
            self.pools.entry(pool.clone()).or_default().entry(team.clone()).or_default().insert(name.clone());
        }
        let labels: Box<[(Name, Name)]> = labels
            .iter()
            .map(|(k, v)| {
                let (k, v) = (self.intern(k), self.intern(v));
                self.labels.entry(k.clone()).or_default().entry(v.clone()).or_default().insert(name.clone());
                (k, v)
            })
            .collect();
        self.jobs.insert(name, Entry { team, pool, placement, labels });
    }

    /// A job was deleted.
    pub fn delete(&mut self, name: &str) {
        let Some((name, entry)) = self.jobs.remove_entry(name) else { return };
        if let Some(p) = &entry.placement {
            if let Some(names) = self.placements.get_mut(p) {
                names.remove(&name);
                if names.is_empty() {
                    self.placements.remove(p);
                }
            }
        }
        if let Some(pool) = &entry.pool {
            if let Some(teams) = self.pools.get_mut(pool) {
                if let Some(names) = teams.get_mut(&entry.team) {
                    names.remove(&name);
                    if names.is_empty() {
                        teams.remove(&entry.team);
                    }
                }
                if teams.is_empty() {
                    self.pools.remove(pool);
                }
            }
        }
        for (k, v) in &entry.labels {
            self.unlabel(k, v, &name);
        }
        let Entry { team, pool, labels, .. } = entry;
        let labels = labels.into_vec().into_iter().flat_map(|(k, v)| [k, v]);
        for held in [team, pool].into_iter().flatten().chain(labels) {
            self.release(held);
        }
    }

    fn unlabel(&mut self, key: &Name, value: &Name, name: &Name) {
        let Some(values) = self.labels.get_mut(key) else { return };
        if let Some(names) = values.get_mut(value) {
            names.remove(name);
            if names.is_empty() {
                values.remove(value);
            }
        }
        if values.is_empty() {
            self.labels.remove(key);
        }
    }

    /// The jobs labelled `key=value` whose names start with `prefix`, from `from` on (itself
    /// included), in name order: the first `limit`, and whether more follow. Costs the names
    /// it returns, not the jobs stored (a page by label read up to 10 000 jobs from etcd).
    #[must_use]
    pub fn labeled(&self, (key, value): (&str, &str), prefix: &str, from: &str, limit: usize) -> (Vec<Name>, bool) {
        let Some(names) = self.labels.get(key).and_then(|values| values.get(value)) else { return (Vec::new(), false) };
        let from = from.max(prefix);
        let mut after = names
            .range::<str, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            .take_while(|n| n.starts_with(prefix));
        let page: Vec<Name> = after.by_ref().take(limit).cloned().collect();
        (page, after.next().is_some())
    }

    /// `None`: the job is not indexed (deleted, or never stored); else its team.
    #[must_use]
    pub fn team(&self, job: &str) -> Option<Option<&str>> {
        self.jobs.get(job).map(|e| e.team.as_deref())
    }

    /// The valid jobs whose placement `placed` refuses (no worker may run them) and whose team
    /// `sees` accepts: the first `limit` in name order, with their placement, and how many
    /// there are. Costs one `placed` a distinct placement, not one a job.
    pub fn unmatched(
        &self,
        placed: impl Fn(&Placement) -> bool,
        sees: impl Fn(Option<&str>) -> bool,
        limit: usize,
    ) -> (Vec<(Name, Arc<Placement>)>, usize) {
        let groups: Vec<(&Names, Arc<Placement>)> = self
            .placements
            .iter()
            .filter(|(p, _)| sees(p.team.as_deref()) && !placed(p))
            .map(|(p, names)| (names, p.clone()))
            .collect();
        let total = groups.iter().map(|(names, _)| names.len()).sum();
        (first_names(groups, limit), total)
    }

    /// The jobs naming `pool` whose team `sees` accepts: the first `limit` in name order, and
    /// how many there are.
    pub fn pool_jobs(&self, pool: &str, sees: impl Fn(Option<&str>) -> bool, limit: usize) -> (Vec<Name>, usize) {
        let Some(teams) = self.pools.get(pool) else { return (Vec::new(), 0) };
        let groups: Vec<(&Names, ())> =
            teams.iter().filter(|(team, _)| sees(team.as_deref())).map(|(_, names)| (names, ())).collect();
        let total = groups.iter().map(|(names, _)| names.len()).sum();
        (first_names(groups, limit).into_iter().map(|(name, ())| name).collect(), total)
    }

    /// Roughly the bytes the index holds: its tables' capacity and the names and placements
    /// they point to (allocator overhead and a set's node slack left out).
    #[must_use]
    pub fn approx_bytes(&self) -> usize {
        use std::mem::size_of;
        let arc_str = |s: &str| 2 * size_of::<usize>() + s.len();
        // A set's element, in its B-tree (nodes about 2/3 full).
        let in_set = size_of::<Name>() * 3 / 2;
        let jobs = self.jobs.capacity() * (size_of::<Name>() + size_of::<Entry>() + 1)
            + self.jobs.keys().map(|n| arc_str(n)).sum::<usize>();
        let placements = self.placements.capacity() * (size_of::<Arc<Placement>>() + size_of::<Names>() + 1)
            + self.placements.iter().map(|(p, names)| placement_bytes(p) + names.len() * in_set).sum::<usize>();
        let pools: usize = self
            .pools
            .values()
            .flat_map(BTreeMap::values)
            .map(|names| size_of::<Option<Name>>() + size_of::<Names>() + names.len() * in_set)
            .sum();
        let labels: usize = self
            .labels
            .values()
            .flat_map(HashMap::values)
            .map(|names| 2 * size_of::<Name>() + size_of::<Names>() + names.len() * in_set)
            .sum::<usize>()
            + self.jobs.values().map(|e| e.labels.len() * 2 * size_of::<Name>()).sum::<usize>();
        let interned = self.interned.iter().map(|n| size_of::<Name>() + arc_str(n)).sum::<usize>();
        jobs + placements + pools + labels + interned
    }

    fn intern(&mut self, s: &str) -> Name {
        if let Some(held) = self.interned.get(s) {
            return held.clone();
        }
        let held: Name = Arc::from(s);
        self.interned.insert(held.clone());
        held
    }

    /// `held` is no longer named by a job: dropped from the table once nothing else holds it.
    fn release(&mut self, held: Name) {
        // The table's and this one.
        if Arc::strong_count(&held) <= 2 {
            self.interned.remove(&held);
        }
    }
}

fn placement_bytes(p: &Placement) -> usize {
    let s = |o: &Option<String>| o.as_ref().map_or(0, String::len);
    std::mem::size_of::<Placement>()
        + 2 * std::mem::size_of::<usize>()
        + p.selector.iter().map(|(k, v)| 48 + k.len() + v.len()).sum::<usize>()
        + s(&p.user)
        + s(&p.team)
        + s(&p.handler)
}

/// The first `limit` names of `groups` (each in name order, no name in two), in name order,
/// each with its group's tag: a merge that reads `limit` names, not every name.
fn first_names<T: Clone>(groups: Vec<(&Names, T)>, limit: usize) -> Vec<(Name, T)> {
    let mut iters: Vec<_> = groups.iter().map(|(names, _)| names.iter()).collect();
    let mut heap = BinaryHeap::new();
    for (i, it) in iters.iter_mut().enumerate() {
        if let Some(name) = it.next() {
            heap.push(Reverse((name.clone(), i)));
        }
    }
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(Reverse((name, i))) = heap.pop() else { break };
        if let Some(next) = iters[i].next() {
            heap.push(Reverse((next.clone(), i)));
        }
        out.push((name, groups[i].1.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: serde_json::Value) -> Vec<u8> {
        let mut s = json!({"schedule": "0 * * * *", "task": {"kind": "shell", "command": "true"}});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        serde_json::to_vec(&s).unwrap()
    }

    fn names(v: &[Name]) -> Vec<&str> {
        v.iter().map(|n| &**n).collect()
    }

    fn all(_: Option<&str>) -> bool {
        true
    }

    #[test]
    fn jobs_sharing_a_placement_share_one_and_a_change_moves_them() {
        let mut ix = Index::default();
        for name in ["b", "a", "c"] {
            ix.put(name, &spec(json!({"selector": {"region": "mars"}, "team": "ops"})));
        }
        ix.put("anywhere", &spec(json!({})));
        assert_eq!((ix.len(), ix.placements()), (4, 2));
        let mars = |p: &Placement| p.selector.get("region").map(String::as_str) != Some("mars");
        let (first, total) = ix.unmatched(mars, all, 2);
        assert_eq!(total, 3);
        assert_eq!(first.iter().map(|(n, _)| &**n).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(first[0].1.team.as_deref(), Some("ops"));
        assert!(Arc::ptr_eq(&first[0].1, &first[1].1), "one placement, held once");
        // A team that is not seen hides its jobs.
        assert_eq!(ix.unmatched(mars, |t| t != Some("ops"), 10).1, 0);
        // An edit moves a job to another placement; the last job of one takes it away.
        ix.put("a", &spec(json!({})));
        ix.delete("b");
        ix.delete("c");
        assert_eq!(ix.placements(), 1);
        assert_eq!(ix.unmatched(mars, all, 10).1, 0);
        ix.delete("never-stored");
        assert_eq!(ix.len(), 2);
    }

    #[test]
    fn a_refused_spec_is_not_placed_but_keeps_its_team_and_pool() {
        let mut ix = Index::default();
        let refused = br#"{"schedule": "not a schedule", "team": "ops", "pool": "db", "task": {}}"#;
        ix.put("broken", refused);
        ix.put("junk", b"not json");
        assert_eq!(ix.team("broken"), Some(Some("ops")));
        assert_eq!(ix.team("junk"), Some(None));
        assert_eq!(ix.team("gone"), None);
        assert_eq!(ix.placements(), 0);
        assert_eq!(ix.unmatched(|_| false, all, 10).1, 0, "refused specs are not scheduled at all");
        assert_eq!(ix.pool_jobs("db", all, 10), (vec![Arc::from("broken")], 1));
        // Made valid: it is placed.
        ix.put("broken", &spec(json!({"team": "ops"})));
        assert_eq!((ix.placements(), ix.unmatched(|_| false, all, 10).1), (1, 1));
        assert_eq!(ix.pool_jobs("db", all, 10).1, 0);
    }

    #[test]
    fn jobs_by_label_page_in_name_order_within_a_prefix_and_follow_changes() {
        let mut ix = Index::default();
        for name in ["db-3", "db-1", "web-1", "db-2", "db-4"] {
            ix.put(name, &spec(json!({"labels": {"tier": "critical"}})));
        }
        ix.put("db-0", &spec(json!({"labels": {"tier": "low"}})));
        let tier = ("tier", "critical");
        assert_eq!(
            ix.labeled(tier, "", "", 10),
            (vec![Arc::from("db-1"), "db-2".into(), "db-3".into(), "db-4".into(), "web-1".into()], false)
        );
        let (page, more) = ix.labeled(tier, "db-", "db-2", 2);
        assert_eq!((names(&page), more), (vec!["db-2", "db-3"], true));
        assert_eq!(names(&ix.labeled(tier, "db-", "db-4\0", 2).0), Vec::<&str>::new(), "after the last");
        // A refused spec keeps its labels; a change of label moves the job; a delete drops it.
        ix.put("db-9", br#"{"schedule": "not a schedule", "labels": {"tier": "critical"}, "task": {}}"#);
        ix.put("db-1", &spec(json!({"labels": {"tier": "low"}})));
        ix.delete("db-3");
        assert_eq!(names(&ix.labeled(tier, "db-", "", 10).0), vec!["db-2", "db-4", "db-9"]);
        assert_eq!(names(&ix.labeled(("tier", "low"), "", "", 10).0), vec!["db-0", "db-1"]);
        for name in ["db-0", "db-1", "db-2", "db-4", "db-9", "web-1"] {
            ix.delete(name);
        }
        assert!(ix.labels.is_empty() && ix.interned.is_empty(), "nothing left held: {:?}", ix.interned);
    }

    #[test]
    fn a_pools_jobs_are_listed_in_name_order_by_team_with_their_total() {
        let mut ix = Index::default();
        for (name, team) in [("d", "ops"), ("a", "web"), ("c", "ops"), ("b", "web"), ("e", "data")] {
            ix.put(name, &spec(json!({"pool": "db", "team": team})));
        }
        ix.put("other", &spec(json!({"pool": "queue"})));
        let (first, total) = ix.pool_jobs("db", all, 3);
        assert_eq!((names(&first), total), (vec!["a", "b", "c"], 5));
        let (first, total) = ix.pool_jobs("db", |t| t == Some("ops"), 10);
        assert_eq!((names(&first), total), (vec!["c", "d"], 2));
        assert_eq!(ix.pool_jobs("none", all, 10).1, 0);
        // Names held once: the last job of a pool or team releases it.
        for name in ["a", "b", "c", "d", "e", "other"] {
            ix.delete(name);
        }
        assert!(ix.is_empty() && ix.pools.is_empty() && ix.interned.is_empty());
    }

    #[test]
    fn a_job_costs_about_200_bytes_plus_its_name() {
        let mut ix = Index::default();
        let n = 10_000;
        for i in 0..n {
            let (team, pool) = (format!("team-{}", i % 50), format!("pool-{}", i % 20));
            ix.put(&format!("job-{i:06}"), &spec(json!({"team": team, "pool": pool, "selector": {"zone": "a"}})));
        }
        let per_job = ix.approx_bytes() / n;
        println!("job index: {per_job} bytes a job ({} placements)", ix.placements());
        assert!((100..=250).contains(&per_job), "{per_job} bytes a job");
        // A label on every job (50 distinct values).
        for i in 0..n {
            let labels = json!({"tier": format!("t-{}", i % 50)});
            ix.put(&format!("job-{i:06}"), &spec(json!({"team": "a", "selector": {"zone": "a"}, "labels": labels})));
        }
        let labeled = ix.approx_bytes() / n;
        println!("job index: {labeled} bytes a job with one label");
        assert!(
            (labeled - per_job.min(labeled)) <= 100,
            "a label costs {} bytes a job",
            labeled - per_job.min(labeled)
        );
    }
}
