//! What a write is refused for, and the answer that says why: the request alone (its name,
//! schedule, team policy, a job naming itself), the calendars it skips and its pool, the caller's teams, the
//! stored size and kept secrets, preconditions, the job quota and dependency cycles.

use std::collections::BTreeMap;

use etcd_client::GetOptions;
use etcron_model::dependency::{DependencyGraph, Edges};
use etcron_model::keys::{Key, Keys};
use etcron_model::now_ms;
use etcron_model::schedule::ScheduleError;
use etcron_model::spec::{check_jitter, validate_name, JobSpec, MAX_SPEC_BYTES};

use super::dependencies::{self, JobTeams};
use super::{
    etcd, quota, Change, JobStore, JobStoreError, Origin, Outcome, Precondition, Prepared, Retry, Snapshot, Write,
};
use crate::access::{team_of, Scope};

impl JobStore {
    /// Refuses (400) the pending saves that name a skip calendar or a pool that does not exist
    /// (each read only when a pending save names one); an etcd failure refuses every pending
    /// write with it.
    pub(super) async fn check_references(
        &self,
        writes: &[Write],
        pending: &mut Vec<usize>,
        outcomes: &mut [Option<Outcome>],
    ) {
        let checked = match self.check_calendars(writes, pending, outcomes).await {
            Ok(()) => self.check_pools(writes, pending, outcomes).await,
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            for i in pending.drain(..) {
                outcomes[i] = Some(Err(e.clone()));
            }
        }
    }

    /// Refuses (400, naming `pool`) the pending saves whose `pool` does not exist, with one
    /// read of the pools' names. A pool deleted between this read and the save is what workers
    /// meet as a missing pool.
    async fn check_pools(
        &self,
        writes: &[Write],
        pending: &mut Vec<usize>,
        outcomes: &mut [Option<Outcome>],
    ) -> Result<(), JobStoreError> {
        let pool_of = |i: &usize| match &writes[*i].change {
            Change::Put(spec) => spec.pool.as_deref(),
            Change::Delete => None,
        };
        if !pending.iter().any(|i| pool_of(i).is_some()) {
            return Ok(());
        }
        let prefix = self.keys.pools_prefix();
        let opts = GetOptions::new().with_prefix().with_keys_only();
        let resp = etcd("pool_names", self.client.kv_client().get(prefix.as_str(), Some(opts))).await?;
        let known: std::collections::HashSet<String> = resp
            .kvs()
            .iter()
            .filter_map(|kv| match self.keys.parse(kv.key()) {
                Some(Key::Pool(name)) => Some(name),
                _ => None,
            })
            .collect();
        pending.retain(|i| {
            let Some(pool) = pool_of(i).filter(|p| !known.contains(*p)) else { return true };
            outcomes[*i] = Some(Err(JobStoreError::Invalid {
                field: Some("pool".to_owned()),
                message: format!("no pool {pool:?}: create it first (PUT /api/pools/{pool})"),
            }));
            false
        });
        Ok(())
    }

    /// Refuses (400) the pending saves whose `skip_calendars` name a calendar that does not
    /// exist, with one read of the calendars' names. A calendar deleted between this read and
    /// the save is what workers meet as a missing calendar (they run the tick, loudly).
    async fn check_calendars(
        &self,
        writes: &[Write],
        pending: &mut Vec<usize>,
        outcomes: &mut [Option<Outcome>],
    ) -> Result<(), JobStoreError> {
        let named = |i: &usize| match &writes[*i].change {
            Change::Put(spec) => !spec.skip_calendars.is_empty(),
            Change::Delete => false,
        };
        if !pending.iter().any(named) {
            return Ok(());
        }
        let prefix = self.keys.calendars_prefix();
        let opts = GetOptions::new().with_prefix().with_keys_only();
        let resp = etcd("calendar_names", self.client.kv_client().get(prefix.as_str(), Some(opts))).await?;
        let known: std::collections::HashSet<String> = resp
            .kvs()
            .iter()
            .filter_map(|kv| match self.keys.parse(kv.key()) {
                Some(Key::Calendar(name)) => Some(name),
                _ => None,
            })
            .collect();
        pending.retain(|i| {
            let Change::Put(spec) = &writes[*i].change else { return true };
            let Some((n, missing)) = spec.skip_calendars.iter().enumerate().find(|(_, c)| !known.contains(c.as_str()))
            else {
                return true;
            };
            outcomes[*i] = Some(Err(JobStoreError::Invalid {
                field: Some(format!("skip_calendars[{n}]")),
                message: format!("no calendar {missing:?}: create it first (PUT /api/calendars/{missing})"),
            }));
            false
        });
        Ok(())
    }
}

/// What a request alone can be refused for: the job's name and, for a save, a schedule that
/// never fires again, or a `task.user` or `selector` outside its team's policy.
pub(super) fn check_write(w: &Write, policies: &crate::team_policy::TeamPolicies) -> Result<(), JobStoreError> {
    validate_name(&w.job)?;
    match &w.change {
        Change::Put(spec) => {
            fires_again(&w.job, spec)?;
            policies.check(spec).map_err(JobStoreError::denied)?;
            // A job naming itself needs no etcd read to be refused.
            let mut own = DependencyGraph::new();
            own.set(&w.job, spec.on_success.iter().chain(&spec.on_failure));
            own.set_after(&w.job, &spec.after);
            cycle_error(&w.job, spec, &own, &|_| true).map_or(Ok(()), Err)
        }
        Change::Delete => Ok(()),
    }
}

/// An enabled job must have a fire time ahead: a past `@at` or a year field wholly in the past
/// is refused. (A disabled one may keep its spent schedule: workers disable an `@at` job after
/// its run, and such a job may be saved back as exported.) A `jitter` must be shorter than the
/// time between the job's ticks, or it would not spread them.
pub(super) fn fires_again(job: &str, spec: &JobSpec) -> Result<(), JobStoreError> {
    let schedule = spec.parsed_schedule(job)?;
    check_jitter(&schedule, spec.jitter_ms(), now_ms())?;
    if !spec.enabled {
        return Ok(());
    }
    schedule.fires_after(now_ms()).map(drop).map_err(|e| {
        let field = match e {
            ScheduleError::Window(_) => "active_until",
            _ if spec.schedules.is_empty() => "schedule",
            _ => "schedules",
        };
        JobStoreError::Invalid { field: Some(field.to_owned()), message: e.to_string() }
    })
}

/// Whether a write draws dependency edges (`on_success`, `on_failure`, `after`): then its cycle
/// check and team rule need every stored job.
pub(super) fn has_dependents(w: &Write) -> bool {
    matches!(&w.change, Change::Put(spec) if !spec.on_success.is_empty() || !spec.on_failure.is_empty() || !spec.after.is_empty())
}

/// The scope to check each write's teams with: `None` when the caller holds the route's role
/// as a global role (then every team is its), so nothing needs reading for it.
pub(super) fn teams_checked(scope: &Scope) -> Option<&Scope> {
    (scope.caller.access.role < Some(scope.needed)).then_some(scope)
}

/// With `scope` (a caller whose teams are checked, the job read in `snapshot`): the stored
/// job's team and a save's team must be the caller's, and the write is pinned to the revision
/// read (or to the job's absence), so it applies only to the job as checked.
fn check_teams(
    w: &Write,
    snapshot: Option<&Snapshot>,
    scope: &Scope,
    precondition: &mut Precondition,
) -> Result<(), JobStoreError> {
    let stored = snapshot.and_then(|s| s.jobs.get(&w.job));
    match (stored, &w.change) {
        (Some((value, _)), Change::Put(_)) if !scope.caller.access.sees(team_of(value).as_deref()) => {
            // Job names are shared by every team: the name is taken, by a job it may not see.
            return Err(JobStoreError::Conflict {
                message: format!(
                    "job name {:?} is taken by a job of a team you hold no role on; choose another name",
                    w.job
                ),
            });
        }
        (Some((value, _)), _) => scope.check_job(&w.job, team_of(value).as_deref()).map_err(JobStoreError::denied)?,
        (None, Change::Delete) => return Err(JobStoreError::no_job(&w.job)),
        (None, Change::Put(_)) => {}
    }
    if let Change::Put(spec) = &w.change {
        scope.check_team(spec.team.as_deref()).map_err(JobStoreError::denied)?;
    }
    if precondition.expected.is_none() {
        match stored {
            Some((_, rev)) => precondition.expected = Some(*rev),
            None => precondition.create_only = true,
        }
    }
    Ok(())
}

/// The value a save stores: withheld (`null`) secrets filled in from the stored spec (and
/// then saved only over that revision), checked against the size limit; with `scope`, the
/// teams checked first ([`check_teams`]); with `deps` (every job's team after the batch, read
/// whenever a save has dependents), the dependents checked and the teams checked recorded
/// ([`dependencies::check`]): a spec's `dependency_teams` is always the master's.
pub(super) fn prepare(
    index: usize,
    w: &Write,
    snapshot: Option<&Snapshot>,
    history: Option<(&Keys, &Origin)>,
    (scope, deps): (Option<&Scope>, Option<(&JobTeams, &Scope)>),
) -> Result<Prepared, JobStoreError> {
    let mut precondition = w.precondition;
    if let Some(scope) = scope {
        check_teams(w, snapshot, scope, &mut precondition)?;
    }
    let Change::Put(spec) = &w.change else {
        return Ok(Prepared { index, value: None, spec: None, precondition, history: None, unchanged: None });
    };
    let mut spec = spec.clone();
    spec.dependency_teams = match deps {
        Some((teams, scope)) => dependencies::check(&spec, teams, scope)?,
        None => BTreeMap::new(),
    };
    if spec.withholds_secrets() {
        let stored = snapshot.and_then(|s| s.jobs.get(&w.job));
        let stored_spec = stored.and_then(|(value, _)| JobSpec::from_json(value).ok());
        spec.keep_secrets(stored_spec.as_ref())
            .map_err(|e| JobStoreError::Invalid { field: Some(e.field), message: e.why })?;
        if let (None, Some((_, rev))) = (precondition.expected, stored) {
            precondition.expected = Some(*rev);
        }
    }
    let value = serde_json::to_vec(&spec).map_err(|e| JobStoreError::internal(&e))?;
    // What is stored is checked, not only what was sent: defaults and kept secrets add bytes,
    // and a stored spec over the limit would be refused by every worker.
    if value.len() > MAX_SPEC_BYTES {
        return Err(JobStoreError::TooLarge {
            field: None,
            message: format!(
                "the job spec as stored (with defaults and kept secrets filled in) is {} bytes; the limit is \
                 {MAX_SPEC_BYTES}",
                value.len()
            ),
        });
    }
    let history = history.map(|(keys, origin)| origin.entry(keys, &w.job, &value, w.source.as_deref()));
    Ok(Prepared { index, value: Some(value), spec: Some(spec), precondition, history, unchanged: None })
}

/// Marks the saves of `ready` whose value is byte for byte the one `snapshot` read, at a
/// revision their precondition accepts: they write nothing (no saved version either), and
/// their transaction only checks that the job is still at that revision. Secret values count
/// like any other byte: a real save that sends a wrong one overwrites the stored secret, so it
/// confirms nothing for free (a dry run never compares them: [`JobStore::plan`]).
pub(super) fn mark_unchanged(writes: &[Write], ready: &mut [Prepared], snapshot: &Snapshot) {
    for p in ready {
        let (Some(value), Some((stored, rev))) = (&p.value, snapshot.jobs.get(&writes[p.index].job)) else {
            continue;
        };
        if value == stored && holds(true, p.precondition, Some(*rev)) {
            p.unchanged = Some(*rev);
            p.history = None;
        }
    }
}

/// A change whose transaction failed, the job being at `current`: refused as [`refusal_of`]
/// says, except a save found unchanged whose precondition still holds (the job was written
/// after the read, and the write would have gone through): that one is compared again.
pub(super) fn refused(
    w: &Write,
    p: &Prepared,
    current: Option<i64>,
    outcomes: &mut [Option<Outcome>],
    again: &mut Vec<(usize, Retry)>,
) {
    if p.unchanged.is_some() && holds(true, p.precondition, current) {
        again.push((p.index, Retry::Compared));
    } else {
        outcomes[p.index] = Some(Err(refusal_of(w, p, current)));
    }
}

/// With every job read at one revision (and the writes guarded on it), preconditions are
/// decided here, saves that would take a team past `quota` jobs are refused
/// ([`quota::check`]), and so are saves that would close a dependency cycle. What is left is
/// to be written.
pub(super) fn decide_locally(
    writes: &[Write],
    ready: Vec<Prepared>,
    snapshot: &Snapshot,
    outcomes: &mut [Option<Outcome>],
    shown: &dyn Fn(&str) -> bool,
    quota: Option<u64>,
) -> Vec<Prepared> {
    let mut accepted = Vec::new();
    for p in ready {
        let w = &writes[p.index];
        let current = snapshot.jobs.get(&w.job).map(|(_, rev)| *rev);
        if holds(p.value.is_some(), p.precondition, current) {
            accepted.push(p);
        } else {
            outcomes[p.index] = Some(Err(refusal_of(w, &p, current)));
        }
    }
    if let Some(max) = quota {
        accepted = quota::check(writes, accepted, snapshot, outcomes, max);
    }
    let stored = stored_graph(snapshot);
    let mut graph = stored.clone();
    for p in &accepted {
        match &writes[p.index].change {
            Change::Put(spec) => {
                graph.set(&writes[p.index].job, spec.on_success.iter().chain(&spec.on_failure));
                graph.set_after(&writes[p.index].job, &spec.after);
            }
            Change::Delete => {
                graph.set(&writes[p.index].job, Vec::<String>::new());
                graph.set_after(&writes[p.index].job, Vec::<String>::new());
            }
        }
    }
    // Refusing a save puts its stored edges back, which may close another cycle: until none.
    loop {
        let refused = accepted.iter().position(|p| match &writes[p.index].change {
            Change::Put(spec) => cycle_error(&writes[p.index].job, spec, &graph, shown).is_some(),
            Change::Delete => false,
        });
        let Some(at) = refused else { break };
        let p = accepted.remove(at);
        let w = &writes[p.index];
        if let Change::Put(spec) = &w.change {
            outcomes[p.index] = cycle_error(&w.job, spec, &graph, shown).map(Err);
        }
        graph.set(&w.job, stored.own_dependents(&w.job).to_vec());
        graph.set_after(&w.job, stored.after_of(&w.job).to_vec());
    }
    accepted
}

/// Whether a precondition holds for a job at revision `current` (`None`: absent).
fn holds(save: bool, precondition: Precondition, current: Option<i64>) -> bool {
    match (precondition.expected, save) {
        (Some(rev), _) => current == Some(rev),
        (None, true) => !(precondition.create_only && current.is_some()),
        (None, false) => current.is_some(),
    }
}

/// Why a prepared write was refused, the job being at `current`: as [`refusal`], except for a
/// save pinned to the job's absence that the client did not ask for (its teams were checked
/// against that absence), which someone else's create beat.
fn refusal_of(w: &Write, p: &Prepared, current: Option<i64>) -> JobStoreError {
    if p.precondition.create_only && !w.precondition.create_only && current.is_some() {
        let message = format!("job {:?} was created by someone else meanwhile; reload and retry", w.job);
        return JobStoreError::PreconditionFailed { message };
    }
    refusal(w, p.precondition, current)
}

/// Why a write was refused, the job being at `current` (`None`: absent).
fn refusal(w: &Write, precondition: Precondition, current: Option<i64>) -> JobStoreError {
    let name = &w.job;
    let save = matches!(w.change, Change::Put(_));
    let message = match (current, precondition.expected) {
        (None, _) if !save => return JobStoreError::no_job(name),
        (Some(_), _) if !save => format!("job {name:?} was changed by someone else; reload before deleting"),
        (Some(rev), Some(want)) => format!(
            "job {name:?} was changed by someone else: it is at revision {rev}, your edit was based on \
             revision {want}; reload and re-apply your change"
        ),
        (None, Some(_)) => format!("job {name:?} was deleted by someone else; reload before saving"),
        (Some(_), None) => format!("job {name:?} already exists (If-None-Match: *)"),
        (None, None) => format!("job {name:?} changed concurrently; retry"),
    };
    JobStoreError::PreconditionFailed { message }
}

fn stored_graph(snapshot: &Snapshot) -> DependencyGraph {
    let mut graph = DependencyGraph::new();
    for (job, (value, _)) in &snapshot.jobs {
        let edges: Edges = serde_json::from_slice(value).unwrap_or_default();
        graph.set_edges(job, &edges);
    }
    graph
}

/// 400 `dependency_cycle` when `graph` has a cycle through `name`; the field is the entry of
/// the spec's list the cycle leaves by; the jobs `shown` refuses (the caller does not see them)
/// are not named.
fn cycle_error(
    name: &str,
    spec: &JobSpec,
    graph: &DependencyGraph,
    shown: &dyn Fn(&str) -> bool,
) -> Option<JobStoreError> {
    let cycle = graph.cycle_through(name)?;
    let step = cycle.first_step().unwrap_or(name);
    // The edge the cycle leaves by, else the `after` entry it comes back by.
    let back = cycle.path().len().checked_sub(2).and_then(|i| cycle.path().get(i)).map_or(name, String::as_str);
    let field =
        [("on_success", &spec.on_success, step), ("on_failure", &spec.on_failure, step), ("after", &spec.after, back)]
            .into_iter()
            .find_map(|(list, jobs, at)| jobs.iter().position(|j| j == at).map(|i| format!("{list}[{i}]")));
    Some(JobStoreError::Cycle { field, message: format!("dependency cycle: {}", cycle.shown(shown)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_store::tests::{answer, spec, write};

    #[test]
    fn preconditions_hold_as_http_says() {
        let if_match = |rev| Precondition { expected: Some(rev), create_only: false };
        let create = Precondition { expected: None, create_only: true };
        let any = Precondition::default();
        assert!(holds(true, if_match(5), Some(5)));
        assert!(!holds(true, if_match(5), Some(6)));
        assert!(!holds(true, if_match(5), None));
        assert!(holds(true, create, None));
        assert!(!holds(true, create, Some(3)));
        assert!(holds(true, any, None) && holds(true, any, Some(3)));
        assert!(holds(false, any, Some(3)) && !holds(false, any, None), "a delete needs the job");
        assert!(holds(false, if_match(3), Some(3)) && !holds(false, if_match(3), Some(4)));
    }

    #[test]
    fn refusals_say_what_happened() {
        let put = write("a", spec(&[]), Precondition { expected: Some(4), create_only: false });
        assert!(answer(&refusal(&put, put.precondition, Some(9)))
            .message
            .contains("at revision 9, your edit was based on revision 4"));
        assert_eq!(answer(&refusal(&put, put.precondition, None)).status, 409);
        let del = write("a", Change::Delete, Precondition::default());
        assert_eq!(answer(&refusal(&del, del.precondition, None)).status, 404);
        assert_eq!(answer(&refusal(&del, del.precondition, Some(2))).status, 409);
        let create = write("a", spec(&[]), Precondition { expected: None, create_only: true });
        assert!(answer(&refusal(&create, create.precondition, Some(2))).message.contains("already exists"));
    }

    #[test]
    fn a_save_of_the_stored_value_writes_nothing_at_the_revision_read() {
        let Change::Put(stored) = spec(&[]) else { unreachable!() };
        let value = serde_json::to_vec(&stored).unwrap();
        let snapshot = Snapshot {
            revision: 9,
            jobs: ["same", "stale", "create", "pinned", "gone"]
                .iter()
                .map(|j| ((*j).to_owned(), (value.clone(), 7)))
                .chain([("other".to_owned(), (b"{\"schedule\":\"@daily\"}".to_vec(), 7))])
                .collect(),
            complete: false,
        };
        let (any, at) = (Precondition::default(), |rev| Precondition { expected: Some(rev), create_only: false });
        let writes = vec![
            write("same", spec(&[]), any),    // 0: unchanged
            write("stale", spec(&[]), at(6)), // 1: refused as a write
            write("create", spec(&[]), Precondition { expected: None, create_only: true }), // 2: likewise
            write("pinned", spec(&[]), at(7)), // 3: unchanged
            write("other", spec(&[]), any),   // 4: differs
            write("absent", spec(&[]), any),  // 5: a create
            write("gone", Change::Delete, any), // 6: a delete
        ];
        let keys = Keys::new("/t").unwrap();
        let origin = Origin::default();
        let mut ready: Vec<Prepared> = writes
            .iter()
            .enumerate()
            .map(|(i, w)| prepare(i, w, Some(&snapshot), Some((&keys, &origin)), (None, None)).unwrap())
            .collect();
        mark_unchanged(&writes, &mut ready, &snapshot);
        let marked: Vec<Option<i64>> = ready.iter().map(|p| p.unchanged).collect();
        assert_eq!(marked, [Some(7), None, None, Some(7), None, None, None]);
        assert!(ready[0].history.is_none() && ready[3].history.is_none(), "no saved version either");
        assert!(ready[4].history.is_some() && ready[5].history.is_some());

        // Its transaction failed: the job is at another revision now. A save that asked for no
        // revision is compared again (its write would have gone through); one pinned to the
        // revision read is refused, as its write would be.
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let mut again = Vec::new();
        refused(&writes[0], &ready[0], Some(8), &mut outcomes, &mut again);
        refused(&writes[0], &ready[0], None, &mut outcomes, &mut again);
        assert_eq!(again, [(0, Retry::Compared), (0, Retry::Compared)], "deleted meanwhile: created again");
        refused(&writes[3], &ready[3], Some(8), &mut outcomes, &mut again);
        let refusal = |o: &Option<Outcome>| o.as_ref().and_then(|o| o.as_ref().err()).map(answer);
        assert!(refusal(&outcomes[3]).is_some_and(|e| e.status == 409 && e.message.contains("at revision 8")));
        refused(&writes[1], &ready[1], Some(8), &mut outcomes, &mut again);
        assert!(refusal(&outcomes[1]).is_some_and(|e| e.status == 409));
        assert_eq!(again.len(), 2, "a write is never compared again");
    }

    #[test]
    fn a_cycle_of_after_edges_alone_is_refused_and_reads_every_job() {
        // Stored: b runs after a. Saving a to run after b closes a → b → a by `after` alone.
        let snapshot = Snapshot {
            revision: 10,
            jobs: [("b".to_owned(), (br#"{"after":["a"]}"#.to_vec(), 10))].into_iter().collect(),
            complete: true,
        };
        let json =
            serde_json::json!({"schedule": "@daily", "after": ["b"], "task": {"kind": "shell", "command": "true"}});
        let writes =
            vec![write("a", Change::Put(Box::new(JobSpec::from_value(json).unwrap())), Precondition::default())];
        assert!(has_dependents(&writes[0]), "a save with `after` reads every job for the cycle check");
        let ready: Vec<Prepared> = vec![prepare(0, &writes[0], None, None, (None, None)).unwrap()];
        let mut outcomes: Vec<Option<Outcome>> = vec![None];
        assert!(decide_locally(&writes, ready, &snapshot, &mut outcomes, &|_| true, None).is_empty());
        let Some(Err(e)) = &outcomes[0] else { panic!("a → b → a must be refused") };
        let e = answer(e);
        assert_eq!((e.code, e.field.as_deref()), ("dependency_cycle", Some("after[0]")));
    }

    #[test]
    fn the_batch_is_checked_for_cycles_as_a_whole() {
        // Stored: a → b. The batch turns it into b → a and adds c → c.
        let stored =
            |deps: &[&str]| (serde_json::to_vec(&serde_json::json!({"on_success": deps})).unwrap_or_default(), 10);
        let snapshot = Snapshot {
            revision: 10,
            jobs: [("a".to_owned(), stored(&["b"])), ("b".to_owned(), stored(&[]))].into_iter().collect(),
            complete: true,
        };
        let any = Precondition::default();
        let writes = vec![write("a", spec(&[]), any), write("b", spec(&["a"]), any), write("c", spec(&["c"]), any)];
        let ready = |writes: &[Write]| -> Vec<Prepared> {
            writes.iter().enumerate().filter_map(|(i, w)| prepare(i, w, None, None, (None, None)).ok()).collect()
        };
        let mut outcomes: Vec<Option<Outcome>> = vec![None, None, None];
        let accepted = decide_locally(&writes, ready(&writes), &snapshot, &mut outcomes, &|_| true, None);
        assert_eq!(accepted.iter().map(|p| p.index).collect::<Vec<_>>(), vec![0, 1], "the swap applies together");
        let Some(Err(e)) = &outcomes[2] else { panic!("c → c must be refused") };
        let e = answer(e);
        assert_eq!((e.code, e.field.as_deref()), ("dependency_cycle", Some("on_success[0]")));

        // Without the change to a (refused by its precondition), b → a closes a → b → a.
        let stale = Precondition { expected: Some(3), create_only: false };
        let writes = vec![write("a", spec(&[]), stale), write("b", spec(&["a"]), any)];
        let mut outcomes: Vec<Option<Outcome>> = vec![None, None];
        let accepted = decide_locally(&writes, ready(&writes), &snapshot, &mut outcomes, &|_| true, None);
        assert!(accepted.is_empty());
        assert!(matches!(&outcomes[0], Some(Err(e)) if answer(e).status == 409));
        assert!(matches!(&outcomes[1], Some(Err(e)) if answer(e).code == "dependency_cycle"));
    }
}
