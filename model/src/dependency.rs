//! The graph of job dependencies (`on_success` / `on_failure` edges, and the workflow edges a
//! job's `after` draws from each parent to it) and the search for a cycle through one job.
//!
//! Pure: the caller builds the graph from every stored job, puts the job being saved in with
//! its new edges, and asks for a cycle through that job. Only a cycle through the edited job
//! can be new, because every edge the edit adds starts at that job; a cycle elsewhere (written
//! around the API) is not the edit's fault and is not reported for it.
//! Edges may name jobs that do not exist (yet): such a job simply has no edges of its own.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use serde::Deserialize;

/// A stored job's edges, read on their own: the rest of the spec is not parsed, so reading
/// every job's is cheap and a value that is otherwise invalid still counts its edges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Edges {
    #[serde(default)]
    pub on_success: Vec<String>,
    #[serde(default)]
    pub on_failure: Vec<String>,
    #[serde(default)]
    pub after: Vec<String>,
}

/// Edges from each job to the jobs its executions start (`on_success`, then `on_failure`),
/// and from each job named in another's `after` to that job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DependencyGraph {
    edges: BTreeMap<String, Vec<String>>,
    /// `after` as each job gives it.
    after: BTreeMap<String, Vec<String>>,
    /// `after` read backwards: parent → the jobs naming it.
    children: BTreeMap<String, BTreeSet<String>>,
}

/// A dependency cycle as a path that starts and ends with the same job (`a → b → a`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle(pub Vec<String>);

impl Cycle {
    /// The jobs along the cycle, the first one repeated at the end.
    #[must_use]
    pub fn path(&self) -> &[String] {
        &self.0
    }

    /// The job the cycle's first edge leads to (the first job itself for a self-loop).
    #[must_use]
    pub fn first_step(&self) -> Option<&str> {
        self.0.get(1).map(String::as_str)
    }
}

impl Cycle {
    /// The cycle as text with the jobs `shown` refuses replaced by `(a job you cannot see)`
    /// (a run of such jobs by one), so an error never names jobs of teams the caller holds no
    /// role on.
    #[must_use]
    pub fn shown(&self, shown: impl Fn(&str) -> bool) -> String {
        let mut parts: Vec<&str> = Vec::new();
        for job in &self.0 {
            let part = if shown(job) { job.as_str() } else { HIDDEN };
            if !(part == HIDDEN && parts.last() == Some(&HIDDEN)) {
                parts.push(part);
            }
        }
        parts.join(" → ")
    }
}

/// How [`Cycle::shown`] writes jobs the caller may not see.
const HIDDEN: &str = "(a job you cannot see)";

/// Whether an execution of a job of `parent_team` may trigger the dependent `child` (which is
/// of `child_team`; `None` when this worker does not know the job), given the teams the
/// master recorded at save time (`checked`, the spec's `dependency_teams`): `Err` says why
/// not. The rule that makes the save-time check hold for specs saved before it (or written
/// around the API), and for dependents moved to another team after the save:
/// - a job without a team (saved by a global admin, who operates every team) triggers any job;
/// - a job of team T triggers the jobs of T;
/// - another dependent only while it is of the team the master checked the saver's operator
///   role on (`checked[child]`).
pub fn may_trigger(
    parent_team: Option<&str>,
    child: &str,
    child_team: Option<Option<&str>>,
    checked: &BTreeMap<String, Option<String>>,
) -> Result<(), String> {
    let Some(parent_team) = parent_team else { return Ok(()) };
    let Some(child_team) = child_team else {
        return Err(format!("{child} is not a job this worker knows, so its team cannot be checked"));
    };
    if child_team == Some(parent_team) {
        return Ok(());
    }
    if checked.get(child).is_some_and(|t| t.as_deref() == child_team) {
        return Ok(());
    }
    let of = child_team.map_or_else(|| "has no team".to_owned(), |t| format!("is of team {t:?}"));
    Err(format!(
        "{child} {of}, not {parent_team:?}, and the save of this job did not check an operator role on it \
         (saved before dependencies were checked across teams, or {child} moved since): save this job again"
    ))
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(" → "))
    }
}

impl DependencyGraph {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the edges of `job`, replacing any it had.
    pub fn set<I, S>(&mut self, job: &str, dependents: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let dependents: Vec<String> = dependents.into_iter().map(Into::into).collect();
        if dependents.is_empty() {
            self.edges.remove(job);
        } else {
            self.edges.insert(job.to_owned(), dependents);
        }
    }

    /// Sets every edge of `job` (its dependents and its `after`), replacing any it had.
    pub fn set_edges(&mut self, job: &str, edges: &Edges) {
        self.set(job, edges.on_success.iter().chain(&edges.on_failure));
        self.set_after(job, &edges.after);
    }

    /// Sets the `after` of `job` (the workflow parents it runs after), replacing any it had.
    pub fn set_after<I, S>(&mut self, job: &str, parents: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for old in self.after.remove(job).unwrap_or_default() {
            if let Some(set) = self.children.get_mut(&old) {
                set.remove(job);
                if set.is_empty() {
                    self.children.remove(&old);
                }
            }
        }
        let parents: Vec<String> = parents.into_iter().map(Into::into).collect();
        for p in &parents {
            self.children.entry(p.clone()).or_default().insert(job.to_owned());
        }
        if !parents.is_empty() {
            self.after.insert(job.to_owned(), parents);
        }
    }

    /// The jobs `job` starts (`on_success`, `on_failure`), in the order they were given.
    #[must_use]
    pub fn own_dependents(&self, job: &str) -> &[String] {
        self.edges.get(job).map_or(&[], Vec::as_slice)
    }

    /// The `after` of `job`.
    #[must_use]
    pub fn after_of(&self, job: &str) -> &[String] {
        self.after.get(job).map_or(&[], Vec::as_slice)
    }

    /// Every job that runs after `job`: its own dependents, then the jobs naming it in `after`.
    #[must_use]
    pub fn dependents(&self, job: &str) -> Vec<&str> {
        let own = self.own_dependents(job).iter().map(String::as_str);
        own.chain(self.children.get(job).into_iter().flatten().map(String::as_str)).collect()
    }

    /// A shortest cycle through `job`, if there is one: breadth-first from `job`'s dependents
    /// back to `job`. Ties go to the edge listed first.
    #[must_use]
    pub fn cycle_through(&self, job: &str) -> Option<Cycle> {
        // parent[x] = the job whose edge first reached x.
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut queue: VecDeque<&str> = VecDeque::new();
        queue.push_back(job);
        while let Some(at) = queue.pop_front() {
            for next in self.dependents(at) {
                if next == job {
                    // Walk back from `at` to `job`, then close the loop.
                    let mut path = vec![job.to_owned()];
                    let mut cur = at;
                    while cur != job {
                        path.push(cur.to_owned());
                        cur = parent.get(cur).copied().unwrap_or(job);
                    }
                    path[1..].reverse();
                    path.push(job.to_owned());
                    return Some(Cycle(path));
                }
                if seen.insert(next) {
                    parent.insert(next, at);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// Every job that lies on some cycle (for checking a whole stored graph).
    #[must_use]
    pub fn jobs_on_cycles(&self) -> Vec<String> {
        let jobs: BTreeSet<&String> = self.edges.keys().chain(self.after.keys()).chain(self.children.keys()).collect();
        jobs.into_iter().filter(|j| self.cycle_through(j).is_some()).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> DependencyGraph {
        let mut g = DependencyGraph::new();
        for (job, deps) in edges {
            g.set(job, deps.iter().copied());
        }
        g
    }

    fn path(c: Option<Cycle>) -> Option<Vec<String>> {
        c.map(|c| c.0)
    }

    #[test]
    fn after_edges_run_from_each_parent_to_the_job() {
        // extract → (a, b) → load, drawn by `after` alone; load's on_success back to extract
        // closes a cycle through both kinds of edge.
        let mut g = DependencyGraph::new();
        g.set_after("a", ["extract"]);
        g.set_after("b", ["extract"]);
        g.set_after("load", ["a", "b"]);
        assert_eq!(g.dependents("extract"), ["a", "b"]);
        assert!(g.cycle_through("load").is_none());
        g.set("load", ["extract"]);
        assert_eq!(path(g.cycle_through("load")).unwrap(), ["load", "extract", "a", "load"]);
        assert_eq!(g.jobs_on_cycles(), ["a", "b", "extract", "load"]);
        // Replacing a job's `after` drops its old edges.
        g.set_after("a", Vec::<String>::new());
        g.set_after("b", Vec::<String>::new());
        assert!(g.cycle_through("load").is_none());
        assert!(g.dependents("extract").is_empty());
    }

    fn names(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn hidden_jobs_are_left_out_of_a_cycle_shown() {
        let c = Cycle(["a", "h1", "h2", "b", "h3", "a"].iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(c.shown(|j| !j.starts_with('h')), "a → (a job you cannot see) → b → (a job you cannot see) → a");
        assert_eq!(c.shown(|_| true), c.to_string());
    }

    #[test]
    fn dependents_are_triggered_within_the_team_or_as_checked_at_save() {
        let none = BTreeMap::new();
        assert!(may_trigger(None, "x", Some(Some("beta")), &none).is_ok(), "a job without a team: any");
        assert!(may_trigger(None, "x", None, &none).is_ok());
        assert!(may_trigger(Some("alpha"), "x", Some(Some("alpha")), &none).is_ok(), "same team");
        let e = may_trigger(Some("alpha"), "x", Some(Some("beta")), &none).unwrap_err();
        assert!(e.contains("team \"beta\"") && e.contains("save this job again"), "{e}");
        assert!(may_trigger(Some("alpha"), "x", Some(None), &none).unwrap_err().contains("has no team"));
        assert!(may_trigger(Some("alpha"), "x", None, &none).is_err(), "unknown: not triggered");
        let checked: BTreeMap<String, Option<String>> =
            [("x".to_owned(), Some("beta".to_owned())), ("y".to_owned(), None)].into_iter().collect();
        assert!(may_trigger(Some("alpha"), "x", Some(Some("beta")), &checked).is_ok(), "checked at save");
        assert!(may_trigger(Some("alpha"), "y", Some(None), &checked).is_ok());
        assert!(may_trigger(Some("alpha"), "x", Some(Some("gamma")), &checked).is_err(), "moved since");
        assert!(may_trigger(Some("alpha"), "y", Some(Some("gamma")), &checked).is_err());
    }

    #[test]
    fn self_loop() {
        let g = graph(&[("a", &["a"])]);
        let cycle = g.cycle_through("a").unwrap();
        assert_eq!(cycle.to_string(), "a → a");
        assert_eq!(cycle.first_step(), Some("a"));
    }

    #[test]
    fn two_cycle() {
        let g = graph(&[("a", &["b"]), ("b", &["a"])]);
        assert_eq!(path(g.cycle_through("a")), names(&["a", "b", "a"]));
        assert_eq!(path(g.cycle_through("b")), names(&["b", "a", "b"]));
    }

    #[test]
    fn three_cycle_is_reported_from_the_job_asked_about() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]);
        let c = g.cycle_through("c").unwrap();
        assert_eq!(c.to_string(), "c → a → b → c");
        assert_eq!(c.first_step(), Some("a"));
        assert_eq!(path(g.cycle_through("a")), names(&["a", "b", "c", "a"]));
    }

    #[test]
    fn the_shortest_cycle_is_reported() {
        // a → b → c → d → a and a → x → a: the short one is the useful message.
        let g = graph(&[("a", &["b", "x"]), ("b", &["c"]), ("c", &["d"]), ("d", &["a"]), ("x", &["a"])]);
        assert_eq!(path(g.cycle_through("a")), names(&["a", "x", "a"]));
    }

    #[test]
    fn a_cycle_elsewhere_is_not_the_edited_jobs() {
        // b ⇄ c exists already (written around the API); a → b reaches it but a is on no cycle.
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]);
        assert_eq!(g.cycle_through("a"), None);
        assert_eq!(path(g.cycle_through("b")), names(&["b", "c", "b"]));
        assert_eq!(g.jobs_on_cycles(), ["b", "c"]);
    }

    #[test]
    fn diamond_is_no_cycle() {
        let g = graph(&[("a", &["b", "c"]), ("b", &["d"]), ("c", &["d"])]);
        for job in ["a", "b", "c", "d"] {
            assert_eq!(g.cycle_through(job), None, "{job}");
        }
        assert!(g.jobs_on_cycles().is_empty());
    }

    #[test]
    fn edges_to_missing_jobs_are_allowed() {
        let g = graph(&[("a", &["later", "b"]), ("b", &["also-later"])]);
        assert_eq!(g.cycle_through("a"), None);
        assert_eq!(g.cycle_through("later"), None);
    }

    #[test]
    fn replacing_edges_removes_the_old_ones() {
        let mut g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]);
        assert!(g.cycle_through("a").is_some());
        g.set("c", Vec::<String>::new());
        assert_eq!(g.cycle_through("a"), None);
        assert!(g.dependents("c").is_empty());
        g.set("c", ["b"]);
        assert_eq!(path(g.cycle_through("c")), names(&["c", "b", "c"]));
    }

    #[test]
    fn duplicate_edges_and_long_chains() {
        let mut g = DependencyGraph::new();
        for i in 0..1000 {
            g.set(&format!("j{i}"), [format!("j{}", i + 1), format!("j{}", i + 1)]);
        }
        assert_eq!(g.cycle_through("j0"), None);
        g.set("j1000", ["j0"]);
        let c = g.cycle_through("j500").unwrap();
        assert_eq!(c.path().len(), 1002);
        assert_eq!(c.path().first(), c.path().last());
    }
}
