//! Worker loss: the executions a departed worker held (listed by its inflight keys and its
//! running markers, read as of the revision before its lease expired) are recorded `lost` with
//! their failover rerun or `on_failure` jobs, a grace period after the departure, unless their
//! worker closed them first; then every job's ticks the departed worker may have left
//! unsettled are swept. Up to three survivors handle each departure, one after another, so a
//! handler that dies midway leaves the rest to the next.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::EventType;
use etcron_common::claim::{self, ClaimOutcome, Held};
use etcron_common::etcd::EtcdError;
use etcron_common::store::WriteMode;
use etcron_model::keys::{ExecutionId, Key};
use etcron_model::record::RunParams;
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_model::spec::JobSpec;
use etcron_model::stored::{Claim, RunningExecution, WorkerInfo};
use etcron_model::{now_ms, rfc3339_ms};

use crate::cluster::departures::Departure;
use crate::cluster::membership::Departed;
use crate::config::Config;
use crate::context::Context;
use crate::fire::close::CLOSE_FOR;
use crate::fire::not_run::deliver;
use crate::metrics::METRICS;
use crate::rules::after_loss;
use crate::timing::fire::{to_json, CLOSE_RETRY_MAX, LOSS_TRIES, MISSED_AFTER};

/// Longest grace the loss handling gives a departed worker.
pub const MAX_LOSS_GRACE: Duration = Duration::from_secs(5);

/// How long the loss handling leaves a departed worker to close its own claims: its session
/// TTL, at most `MAX_LOSS_GRACE` — enough for a worker that etcd could not hear (a stall, a
/// short partition) to retry its pending closes several times (every `CLOSE_RETRY_MAX` at most)
/// once etcd answers, without holding a failover rerun back by a whole default TTL.
#[must_use]
pub fn loss_grace(config: &Config) -> Duration {
    config.session_ttl.min(MAX_LOSS_GRACE)
}

/// A departure from the cluster, seen as it happened or found by a re-listing: its executions
/// are recorded `lost` as of the revision its registration was deleted at.
pub async fn departed(ctx: Arc<Context>, worker: String, departed: Departed) {
    let revision = match departed {
        Departed::At(revision) => Some(revision),
        Departed::After(seen) => find_delete(&ctx, &worker, seen).await,
    };
    match revision {
        Some(revision) => record_lost(ctx, worker, revision).await,
        // Its running markers cannot be read as of its departure: the ticks are still swept.
        None => note_departure_window(&ctx, now_ms()),
    }
}

/// The departed worker was the first-ranked one for some ticks, the one to record them
/// `missed` had nobody claimed them; it may have died before it could. Notes every job's ticks
/// since it may have stopped answering (its lease expired a TTL after that) for a sweep. Noted
/// by each handler of the departure (and by every survivor when the departure's revision is
/// unknown): the sweeps settle each tick through its claim key, so several sweepers record or
/// catch up a tick once.
fn note_departure_window(ctx: &Context, noticed: i64) {
    let ttl = i64::try_from(ctx.config.session_ttl.as_millis()).unwrap_or(i64::MAX / 4);
    let missed_after = i64::try_from(MISSED_AFTER.as_millis()).unwrap_or(0);
    ctx.unsettled.note_all(noticed - 2 * ttl - missed_after, noticed, crate::context::unsettled::Gap::WorkerDeparted);
}

/// How long the loss handling replays a registration's history to find its delete.
const FIND_DELETE_FOR: Duration = Duration::from_secs(60);

/// The revision `worker`'s registration was deleted at, after `seen` (while this worker's
/// mirror was re-listing): replayed from etcd's history with a watch from `seen + 1`. A watch
/// broken before it answered (a leader election cancels every stream) is opened again until
/// `FIND_DELETE_FOR` has passed; only a compacted history ends the search at once.
async fn find_delete(ctx: &Context, worker: &str, seen: i64) -> Option<i64> {
    let key = ctx.keys.worker(worker);
    let found = tokio::time::timeout(FIND_DELETE_FOR, async {
        loop {
            match replay_for_delete(ctx, &key, seen).await {
                Replayed::Deleted(revision) => return Some(revision),
                Replayed::Compacted => return None,
                Replayed::Broken => tokio::time::sleep(FIND_DELETE_RETRY).await,
            }
        }
    })
    .await
    .ok()
    .flatten();
    if found.is_none() {
        tracing::error!(worker, seen, "a worker departed while this worker was re-listing, and its delete could not be found in etcd's history (compacted or unreachable): its running executions are not recorded lost; its ticks are swept");
    } else {
        tracing::warn!(
            worker,
            revision = found,
            "a worker departed while this worker was re-listing; found its delete in etcd's history"
        );
    }
    found
}

/// How long the search for a registration's delete waits before opening a broken watch again.
const FIND_DELETE_RETRY: Duration = Duration::from_millis(250);

/// What one watch over a registration's history found.
enum Replayed {
    Deleted(i64),
    /// The history from the revision asked for is compacted away.
    Compacted,
    /// The watch could not be opened, or broke before the delete came.
    Broken,
}

async fn replay_for_delete(ctx: &Context, key: &str, seen: i64) -> Replayed {
    let mut watcher = ctx.client.watch_client();
    let opts = etcd_client::WatchOptions::new().with_start_revision(seen + 1);
    let Ok(mut stream) = watcher.watch(key, Some(opts)).await else { return Replayed::Broken };
    while let Ok(Some(resp)) = stream.message().await {
        if resp.compact_revision() > 0 {
            return Replayed::Compacted;
        }
        if resp.canceled() {
            return Replayed::Broken;
        }
        if let Some(kv) = resp.events().iter().find(|e| e.event_type() == EventType::Delete).and_then(|e| e.kv()) {
            return Replayed::Deleted(kv.mod_revision());
        }
    }
    Replayed::Broken
}

/// How many survivors handle each departure: the first-ranked one, and the next ones in case it
/// dies (or stalls) midway.
pub const LOSS_HANDLERS: usize = 3;

/// How much later than the survivor ranked before it each further handler of a departure
/// starts (after the grace): long enough for the first-ranked one to have closed everything
/// in the usual case (a claim read and a transaction per execution), so the later ones find
/// every execution closed at the cost of one read each; short enough that a departure whose
/// first handler died is finished by the next one about 10 s later.
pub const LOSS_RESUME_DELAY: Duration = Duration::from_secs(10);

/// Records `lost` for executions that ran on a worker whose session ended (its registration
/// was deleted at `revision` by lease expiry), and requests their failover rerun when the job
/// says `on_worker_loss: rerun`. The departure is owed (`departures`) from here until it is
/// seen handled, so neither the death of its handlers nor this worker's own ends it.
pub async fn record_lost(ctx: Arc<Context>, departed: String, revision: i64) {
    let departure = Departure { worker: departed, revision };
    ctx.departures.note(&departure);
    owe(ctx, departure, false).await;
}

/// This worker revoked the session of an earlier instance of itself, whose registration was
/// deleted at `revision`: the departure is owed (on disk) before this returns, then handled as
/// one seen live.
pub fn revoked_own_session(ctx: &Arc<Context>, revision: i64) {
    let departure = Departure { worker: ctx.config.worker_id.clone(), revision };
    ctx.departures.note(&departure);
    etcron_common::task::spawn(owe(ctx.clone(), departure, false));
}

/// Finishes the departures a previous run of this worker owed (read from its data dir at start).
pub fn resume_owed(ctx: &Arc<Context>, owed: Vec<Departure>) {
    for departure in owed {
        etcron_common::task::spawn(owe(ctx.clone(), departure, true));
    }
}

/// How long a survivor owes a departure nobody is seen handling before it gives up, loudly:
/// the departed worker's keys are read from etcd's history, which the compactor keeps for
/// less than this.
pub const OWE_FOR: Duration = Duration::from_secs(3600);

/// Owes a departure until it is handled.
///
/// It first gives the departed worker a chance to close its own claims: a worker whose session
/// ended while etcd was out of its reach (a stall, a partition) closes the claims of the tasks
/// that finished as soon as etcd answers it again, and a run closed that way is not lost. A
/// survivor waits `loss_grace`; a worker handling its own departure knows its pending closes
/// and waits for them. What is still unclosed afterwards may not have finished: recorded lost.
///
/// Resumable: the survivors ranked first to `LOSS_HANDLERS`th for the departure (among the live
/// workers, re-ranked as they come and go) each handle it, rank `r` starting `r ×
/// LOSS_RESUME_DELAY` after the grace, unless the done marker says one finished. Every close
/// is guarded by the claim (`claim::mark_lost`), and a record is submitted only by the survivor
/// whose close took (`provisional`), so a later handler only finishes what an earlier one left
/// — one that died midway, or is slow — and says so (`etcron_worker_departures_resumed_total`).
/// The survivors ranked after them wait, looking at the marker every `LOSS_RESUME_DELAY`: when
/// the handlers die first, they move up and finish it. `restarted`: owed by a previous run of
/// this worker, whose grace is long over.
async fn owe(ctx: Arc<Context>, departure: Departure, restarted: bool) {
    let Departure { worker: departed, revision } = &departure;
    let rank_key = format!("lost/{departed}/{revision}");
    let noticed = now_ms();
    if *departed == ctx.config.worker_id {
        ctx.closing.wait_empty(CLOSE_FOR).await;
    } else if !restarted {
        tokio::time::sleep(loss_grace(&ctx.config)).await;
    }
    // The lost runs' follow-ups (the failover rerun, `on_failure`) come from their jobs' specs:
    // a worker that just started handles nothing before its first listing of the jobs.
    while !ctx.jobs.loaded() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let since = tokio::time::Instant::now();
    let first_rank = ctx.members.rank(&ctx.config.worker_id, &rank_key);
    loop {
        let rank = ctx.members.rank(&ctx.config.worker_id, &rank_key);
        let due = LOSS_RESUME_DELAY * u32::try_from(rank).unwrap_or(u32::MAX);
        let waited = since.elapsed();
        let handled = || done_marker(&ctx, &departure);
        if rank < LOSS_HANDLERS && waited >= due {
            // The first-ranked handler of a fresh departure does not look: nobody was before it.
            if (rank == 0 && !restarted) || handled().await != Some(true) {
                let promoted = first_rank >= LOSS_HANDLERS;
                if promoted {
                    tracing::warn!(worker = %departed, revision, rank, "the survivors ranked before this one for a departure died before it was seen handled: handling it");
                }
                // Ranked as when it was seen: a handler after the first (or after a restart)
                // resumes what another left.
                let rank = if restarted { first_rank.max(1) } else { first_rank };
                let handler = Handler { departed, revision: *revision, rank, noticed, promoted };
                if handle(&ctx, &handler).await {
                    mark_done(&ctx, &departure).await;
                    break;
                }
            } else {
                break;
            }
        }
        if waited >= OWE_FOR {
            METRICS.departures_abandoned.inc();
            tracing::error!(worker = %departed, revision, "nobody was seen finishing the handling of a departure within an hour: given up (the departed worker's executions may stay unclosed, without a rerun or a record)");
            break;
        }
        let wait = if rank < LOSS_HANDLERS {
            due.saturating_sub(waited).max(Duration::from_millis(100))
        } else {
            LOSS_RESUME_DELAY
        };
        tokio::time::sleep(wait).await;
        if rank >= LOSS_HANDLERS && handled().await == Some(true) {
            break;
        }
    }
    ctx.departures.settled(&departure);
}

/// Handles a departure once: every execution the departed worker held is closed `lost` unless
/// it was closed already; `true` when none is left unsettled (each closed, by this handler or
/// before it).
async fn handle(ctx: &Context, handler: &Handler<'_>) -> bool {
    let Handler { departed, revision, rank, noticed, promoted } = *handler;
    let held = held_at(ctx, departed, revision - 1).await;
    if !held.is_empty() && !promoted {
        crate::failpoint::hit(crate::failpoint::LOST_AFTER_READING_HELD);
    }
    let total = held.len();
    let (mut closed, mut unsettled) = (0usize, 0usize);
    for execution in held {
        match settle_lost(ctx, handler, execution, closed == 0).await {
            Settled::ClosedHere => closed += 1,
            Settled::ClosedBefore => {}
            Settled::Unsettled => unsettled += 1,
        }
    }
    if rank > 0 && closed > 0 {
        tracing::info!(worker = %departed, revision, rank, closed, held = total, "finished the resumed handling of a departure");
    } else if rank > 0 {
        tracing::debug!(worker = %departed, revision, rank, held = total, "a departure's handling was complete");
    }
    // Each handler notes the window (the first may have died before sweeping it): the sweeps
    // settle each tick through its claim key, so a later one mostly finds them settled. It
    // reaches back to the oldest tick the departed worker had not settled: what its ledger
    // held died with it.
    note_departure_window(ctx, noticed);
    if let Some(from) = unsettled_from(ctx, departed, revision - 1).await {
        ctx.unsettled.note_all(from, noticed, crate::context::unsettled::Gap::WorkerDeparted);
    }
    unsettled == 0
}

/// The oldest tick `departed` had not settled as of `revision`, as its registration said.
async fn unsettled_from(ctx: &Context, departed: &str, revision: i64) -> Option<etcron_model::UnixMs> {
    let opts = etcd_client::GetOptions::new().with_revision(revision);
    for _ in 0..LOSS_TRIES {
        let mut kv = ctx.client.kv_client();
        match etcron_common::etcd::request("list_running", kv.get(ctx.keys.worker(departed), Some(opts.clone()))).await
        {
            Ok(r) => {
                let info: WorkerInfo = serde_json::from_slice(r.kvs().first()?.value()).ok()?;
                return info.unsettled_from_ms;
            }
            Err(EtcdError::Failed(e)) if e.to_string().contains("compacted") => return None,
            _ => tokio::time::sleep(CLOSE_RETRY_MAX).await,
        }
    }
    tracing::warn!(worker = %departed, "could not read which ticks the departed worker had left unsettled; sweeping its last moments only");
    None
}

/// Whether the departure's done marker is there; `None` when etcd did not answer.
async fn done_marker(ctx: &Context, d: &Departure) -> Option<bool> {
    let mut kv = ctx.client.kv_client();
    let key = ctx.keys.departure_done(&d.worker, d.revision);
    let opts = etcd_client::GetOptions::new().with_count_only();
    match etcron_common::etcd::request("departure_read", kv.get(key, Some(opts))).await {
        Ok(resp) => Some(resp.count() > 0),
        _ => None,
    }
}

/// Writes the departure's done marker (on a retention lease). Not written (etcd failed): the
/// survivors that owe it handle it again, finding every execution closed.
async fn mark_done(ctx: &Context, d: &Departure) {
    let lease = match ctx.retention.get().await {
        Ok(lease) => lease,
        Err(e) => {
            tracing::warn!(worker = %d.worker, error = %e, "no retention lease for a departure's done marker; the survivors owing it will find it handled");
            return;
        }
    };
    let mut kv = ctx.client.kv_client();
    let key = ctx.keys.departure_done(&d.worker, d.revision);
    let value = to_json(&serde_json::json!({ "handled_by": ctx.config.worker_id, "at": rfc3339_ms(now_ms()) }));
    let put = kv.put(key, value, Some(etcd_client::PutOptions::new().with_lease(lease)));
    let failed = match etcron_common::etcd::request("departure_done", put).await {
        Ok(_) => None,
        Err(EtcdError::Failed(e)) => Some(e.to_string()),
        Err(EtcdError::Timeout) => Some("timed out".to_owned()),
    };
    if let Some(e) = failed {
        tracing::warn!(worker = %d.worker, error = %e, "writing a departure's done marker failed; the survivors owing it will find it handled");
    }
}

/// Who handles a departure: the departed worker, the revision its registration was deleted at,
/// and this survivor's rank for it when it was seen (`0` first).
struct Handler<'a> {
    departed: &'a str,
    revision: i64,
    rank: usize,
    /// When the departure was seen (its ticks are swept from a TTL before).
    noticed: i64,
    /// Ranked after the first `LOSS_HANDLERS` when the departure was seen, moved up since.
    promoted: bool,
}

/// What became of one execution a departed worker held.
enum Settled {
    /// This handler closed it `lost`.
    ClosedHere,
    /// Closed before (by its worker, or another handler), or not the departed worker's.
    ClosedBefore,
    /// etcd did not take the close: a later handler tries again.
    Unsettled,
}

/// An execution a departed worker held when its session ended.
#[derive(Debug)]
pub(crate) struct HeldExecution {
    id: ExecutionId,
    fencing_token: i64,
    /// Other tokens the execution may hold: the create revisions of further inflight keys
    /// listing it (see `held_at`).
    also: Vec<i64>,
    held: Held,
    trigger: TriggerKind,
    scheduled_ms: Option<i64>,
    started_at: Option<String>,
    /// The run's parameters, as its marker holds them (its claim tells for short runs).
    params: RunParams,
}

/// What `departed` held as of `revision`: the executions its inflight keys list (short runs)
/// and its running markers (runs that lasted a second), one entry per execution.
async fn held_at(ctx: &Context, departed: &str, revision: i64) -> Vec<HeldExecution> {
    let mut held: BTreeMap<ExecutionId, HeldExecution> = BTreeMap::new();
    let claimed = Claim::taken(departed);
    if let Some(resp) = list_at(ctx, departed, &ctx.keys.worker_inflight_prefix(departed), revision).await {
        for item in resp.kvs() {
            let Some(ids) = etcron_model::keys::parse_inflight_value(item.value()) else { continue };
            for id in ids {
                let trigger = if id.attempt > 1 { TriggerKind::Retry } else { TriggerKind::of_tick(&id.tick) };
                let entry = HeldExecution {
                    fencing_token: item.create_revision(),
                    also: Vec::new(),
                    held: Held::Claimed { value: to_json(&claimed) },
                    trigger,
                    scheduled_ms: id.tick.scheduled_ms(),
                    started_at: None,
                    params: RunParams::default(),
                    id,
                };
                match held.entry(entry.id.clone()) {
                    // Listed by two claim transactions (one given up with its outcome unknown,
                    // then a later one: a claim sent again, a queued claim dequeued): the claim
                    // as it is names the one that wrote it last.
                    std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().also.push(entry.fencing_token),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(entry);
                    }
                }
            }
        }
    }
    if let Some(resp) = list_at(ctx, departed, &ctx.keys.running_prefix(), revision).await {
        for item in resp.kvs() {
            let Some(Key::Running(id)) = ctx.keys.parse(item.key()) else { continue };
            let Some(running) = RunningExecution::from_stored(id, item.value(), item.create_revision()) else {
                continue;
            };
            if running.worker_id != departed {
                continue;
            }
            let entry = HeldExecution {
                id: running.execution_id.clone(),
                fencing_token: running.fencing_token.unwrap_or(item.create_revision()),
                also: Vec::new(),
                held: Held::Marked,
                trigger: running.trigger.unwrap_or_else(|| TriggerKind::of_tick(&running.execution_id.tick)),
                scheduled_ms: running.scheduled_ms,
                started_at: Some(running.started_at),
                params: running.params,
            };
            held.insert(entry.id.clone(), entry);
        }
    }
    held.into_values().collect()
}

/// The keys under `prefix` as of `revision`, retried while etcd fails (up to `LOSS_TRIES`).
async fn list_at(ctx: &Context, departed: &str, prefix: &str, revision: i64) -> Option<etcd_client::GetResponse> {
    let opts = etcd_client::GetOptions::new().with_prefix().with_revision(revision);
    for _ in 0..LOSS_TRIES {
        let mut kv = ctx.client.kv_client();
        let get = kv.get(prefix, Some(opts.clone()));
        match etcron_common::etcd::request("list_running", get).await {
            Ok(r) => return Some(r),
            Err(EtcdError::Failed(e)) if e.to_string().contains("compacted") => {
                tracing::error!(worker = %departed, error = %e, "what the departed worker was running was compacted away; its executions are not recorded lost");
                return None;
            }
            Err(EtcdError::Failed(e)) => {
                tracing::warn!(worker = %departed, error = %e, "listing what the departed worker was running failed; retrying")
            }
            Err(EtcdError::Timeout) => {
                tracing::warn!(worker = %departed, "listing what the departed worker was running timed out; retrying")
            }
        }
        tokio::time::sleep(CLOSE_RETRY_MAX).await;
    }
    tracing::error!(worker = %departed, "cannot list what the departed worker was running; its executions are not recorded lost");
    None
}

/// The claim of a departed worker's execution, still as one of its transactions left it.
struct StillHeld {
    /// As read (its value is what the lost close compares).
    held: Held,
    /// The run's parameters, as the claim holds them.
    params: Option<RunParams>,
    /// The token (of `tokens`) of the transaction that wrote it.
    token: i64,
}

/// Whether the claim is still as one of the departed worker's transactions (`tokens`, the
/// first the likeliest) left it (see `claim::Held`): read before the lost close is tried, so
/// that a later handler of the departure spends a read, not a transaction, on an execution
/// closed already. `None` when etcd did not answer.
async fn still_held(
    ctx: &Context,
    departed: &str,
    claim_key: &str,
    tokens: &[i64],
    held: &Held,
) -> Option<Option<StillHeld>> {
    let mut kv = ctx.client.kv_client();
    let Ok(resp) = etcron_common::etcd::request("claim_read", kv.get(claim_key, None)).await else { return None };
    let item = resp.kvs().first();
    // As one of its winning txns wrote it (whose revision is the token): nothing wrote it since.
    let ours = item.and_then(|kv| tokens.iter().copied().find(|t| *t == kv.mod_revision()));
    let claim = item.and_then(|kv| serde_json::from_slice::<Claim>(kv.value()).ok());
    Some(match (held, item, ours) {
        (Held::Claimed { .. }, Some(kv), Some(token)) => {
            let taken = claim.filter(|c| c.worker_id == departed && c.status.is_none());
            taken.map(|c| StillHeld {
                held: Held::Claimed { value: kv.value().to_vec() },
                params: Some(c.params),
                token,
            })
        }
        (Held::Marked, Some(_), Some(token)) => {
            Some(StillHeld { held: Held::Marked, params: claim.map(|c| c.params), token })
        }
        (_, Some(_), None) | (Held::Claimed { .. }, None, _) => None,
        // The claim's retention ended during a run longer than it: the marker tells.
        (Held::Marked, None, _) => Some(StillHeld { held: Held::Marked, params: None, token: tokens[0] }),
    })
}

/// [`still_held`], asked until etcd answers (up to `LOSS_TRIES`).
async fn still_held_retried(
    ctx: &Context,
    departed: &str,
    claim_key: &str,
    tokens: &[i64],
    held: &Held,
) -> Option<Option<StillHeld>> {
    for _ in 0..LOSS_TRIES {
        if let Some(answer) = still_held(ctx, departed, claim_key, tokens, held).await {
            return Some(answer);
        }
        tokio::time::sleep(CLOSE_RETRY_MAX).await;
    }
    None
}

/// Closes one execution of a departed worker as `lost` (with its failover rerun or
/// `on_failure` requests), unless its worker or another survivor closed it first.
/// `first`: nothing was closed yet by this handling.
async fn settle_lost(ctx: &Context, handler: &Handler<'_>, execution: HeldExecution, first: bool) -> Settled {
    let Handler { departed, revision, rank, .. } = *handler;
    let HeldExecution { id, fencing_token, also, held, trigger, scheduled_ms, started_at, params } = execution;
    let claim_key = ctx.keys.claim(&id);
    let tokens = if crate::context::simulated::holes::open(crate::context::simulated::holes::ONE_INFLIGHT_TOKEN) {
        vec![fencing_token]
    } else {
        [&[fencing_token][..], &also].concat()
    };
    let (held, params, fencing_token) = match still_held_retried(ctx, departed, &claim_key, &tokens, &held).await {
        Some(None) if rank == 0 => {
            tracing::info!(execution_id = %id, worker = %departed, "execution of a departed worker was closed already (by that worker, or another survivor), or was not its own: not lost");
            return Settled::ClosedBefore;
        }
        Some(None) => {
            tracing::debug!(execution_id = %id, worker = %departed, rank, "execution of a departed worker was closed already");
            return Settled::ClosedBefore;
        }
        Some(Some(now)) => (now.held, now.params.unwrap_or(params), now.token),
        None => (held, params, fencing_token),
    };
    let spec = ctx.jobs.get(&id.job).map(|j| j.spec);
    let lost = LostRun { id: &id, trigger, scheduled_ms, started_at, params, fencing_token };
    let (record, follow) = lost_record(ctx, handler, spec.as_deref(), lost).await;
    // Durable before the claim closes, submitted only once the close is this survivor's: one
    // killed between the close and the journal delivers it at its next start, and one that
    // finds the execution closed by somebody else (an earlier handler, the departed worker
    // itself, late) writes nothing.
    let pending = ctx.provisional.write(&claim_key, &record);
    match close_lost(ctx, &claim_key, (fencing_token, held), follow).await {
        Some(true) => {}
        Some(false) => {
            ctx.provisional.remove(pending);
            tracing::info!(execution_id = %id, worker = %departed, "execution of a departed worker was closed already (by that worker, or another survivor), or was not its own: not lost");
            return Settled::ClosedBefore;
        }
        None => {
            // Its close may have been applied: the provisional loop looks once etcd answers, and the
            // survivors ranked after this one try the close again.
            ctx.provisional.release(pending);
            tracing::error!(execution_id = %id, worker = %departed, "etcd did not take the lost record of a departed worker's execution; its claim may stay running");
            return Settled::Unsettled;
        }
    }
    if first {
        if rank > 0 {
            METRICS.departures_resumed.inc();
            tracing::info!(worker = %departed, revision, rank, execution_id = %id, "resuming the handling of a departure: an execution of the departed worker was still unclosed (the survivor ranked before this one died or is slow)");
        }
        crate::failpoint::hit(crate::failpoint::LOST_AFTER_FIRST_CLOSE);
    }
    // Yields to the run's own final record, journaled before its close should the task have
    // ended before its worker died (T3's crash point); replaces its `running` record.
    let queue = spec.as_ref().is_some_and(|s| s.concurrency == etcron_model::spec::Concurrency::Queue);
    deliver(ctx, spec.as_deref(), record, WriteMode::OverRunning);
    ctx.provisional.remove(pending);
    if queue {
        // Its lock went with the session: the oldest execution waiting gets it now.
        crate::fire::queue::pump(ctx, &id.job, &id.part, None).await;
    }
    Settled::ClosedHere
}

/// A departed worker's execution, as the loss handling records it.
struct LostRun<'a> {
    id: &'a ExecutionId,
    trigger: TriggerKind,
    scheduled_ms: Option<i64>,
    started_at: Option<String>,
    params: RunParams,
    fencing_token: i64,
}

/// The `lost` record of a departed worker's execution, and the follow-ups its close carries
/// (the failover rerun or `on_failure` requests, the next backfill item).
async fn lost_record(
    ctx: &Context,
    handler: &Handler<'_>,
    spec: Option<&JobSpec>,
    lost: LostRun<'_>,
) -> (ExecutionRecord, Vec<etcd_client::TxnOp>) {
    let Handler { departed, revision, .. } = *handler;
    let LostRun { id, trigger, scheduled_ms, started_at, params, fencing_token } = lost;
    let scheduled_ms = params.as_of_ms.or(scheduled_ms).unwrap_or_else(now_ms);
    let mut reason = format!(
        "worker {departed} lost its session (lease expired at revision {revision}) while running this execution"
    );
    let mut follow = Vec::new();
    let now = now_ms();
    if let Some(spec) = spec {
        let team_of = |job: &str| ctx.jobs.get(job).map(|j| j.spec.team.clone());
        let (ops, note) = after_loss(&ctx.keys, id, (spec, &team_of), (scheduled_ms, &params), fencing_token, now);
        follow = ops;
        if let Some(note) = note {
            reason.push_str(&format!("; {note}"));
        }
    }
    follow.extend(crate::fire::backfill::next_op(ctx, &id.job, trigger, &params).await);
    let mut record = ExecutionRecord::blank(id, scheduled_ms, trigger, Status::Lost, spec);
    record.claimed_at.clone_from(&started_at);
    record.started_at = started_at;
    record.finished_at = Some(rfc3339_ms(now));
    record.worker_id = departed.to_owned();
    record.reason = Some(reason);
    record.fencing_token = Some(fencing_token);
    record.params = params;
    record.workflow = record.params.workflow.take();
    (record, follow)
}

/// Closes the claim (still as its winner's transaction left it) `lost` with `follow` in the
/// same transaction: recorded once, whichever survivors try, and never after its worker closed
/// it. `Some(true)`: closed here; `Some(false)`: closed before, or not the departed worker's;
/// `None`: etcd did not take it within `LOSS_TRIES`.
async fn close_lost(
    ctx: &Context,
    claim_key: &str,
    (fencing_token, held): (i64, Held),
    follow: Vec<etcd_client::TxnOp>,
) -> Option<bool> {
    let claim = Claim::closed(Status::Lost);
    for _ in 0..LOSS_TRIES {
        let outcome = match ctx.retention.get().await {
            Ok(lease) => {
                let (value, extra) = (to_json(&claim), follow.clone());
                claim::mark_lost(&ctx.client, claim_key, fencing_token, held.clone(), value, lease, extra).await
            }
            Err(e) => ClaimOutcome::Unknown(format!("retention lease unavailable: {e}")),
        };
        match outcome {
            ClaimOutcome::Won { .. } | ClaimOutcome::Blocked { .. } => return Some(true),
            ClaimOutcome::Lost | ClaimOutcome::PoolFull => return Some(false),
            ClaimOutcome::Unknown(e) => {
                tracing::warn!(claim = claim_key, error = %e, "recording a lost execution: outcome unknown; retrying");
                tokio::time::sleep(CLOSE_RETRY_MAX).await;
            }
        }
    }
    None
}
