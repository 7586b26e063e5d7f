#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected
//! The worker's own fire path under deterministic simulation: several workers — the real
//! `node::run`, its scheduler, races, closes, loss handling and record sink — in one process on
//! tokio's paused clock, over the model etcd of `etcron_sim::server` (served through etcd's own
//! gRPC API in memory), with simulated tasks and a seeded RNG choosing every fault: delayed,
//! refused and lost answers (the write applied, the answer lost), lagging and broken watches,
//! sessions expired under running tasks, and leader elections (everything stalls, then every
//! lease is renewed, so a session deadline may pass without the session ending). After each
//! seed the invariants are checked on what the tasks saw and what etcd and the workers'
//! spools hold:
//!
//! - no execution (job, tick, attempt) started twice;
//! - no two attempts of one tick alive at the same instant;
//! - every started attempt has a final record; one its keeper ended (the session deadline
//!   passed) is recorded `lost`, and every `lost` one has a rerun;
//! - every tick due in the window ran or was recorded, with why;
//! - no claim is left taken once the cluster is quiet.
//!
//! A failing seed names itself and its first violation; `ETCRON_SIM_SEEDS` and
//! `ETCRON_SIM_FROM` run other seeds (`docs/testing.md`). What it leaves out, and the
//! protocol-level model (`sim/`) covers: worker crashes at any await point and restarts
//! (here a worker loses its session instead and goes on), per-worker clock offsets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser as _;
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_common::task::Group;
use etcron_model::keys::{ExecutionId, Key, Keys};
use etcron_model::record::Status;
use etcron_model::stored::{Claim, ClaimState};
use etcron_model::UnixMs;
use etcron_sim::rng::Rng;
use etcron_sim::server::{Call, Fault, ModelEtcd};
use etcron_worker::config::{Cli, Config};
use etcron_worker::context::simulated::holes;
use etcron_worker::tasks::shell::{Ending, Finished, StopReason};
use etcron_worker::timing::fire::Fire;
use tokio::sync::watch;
use tokio::time::Instant;

const NAMESPACE: &str = "/sim";
const WORKERS: usize = 3;
const JOBS: usize = 4;
/// What a compaction keeps of etcd's history: more than a departure's handling reads back (the
/// grace and three handlers' turns, 25 s); the master's compactor keeps at least five minutes.
const COMPACT_KEEPS: Duration = Duration::from_secs(30);
/// Simulated seconds of ticks per seed, and how long the cluster gets to settle after.
const RUN_FOR: Duration = Duration::from_secs(40);
const SETTLE_FOR: Duration = Duration::from_secs(60);
/// The window whose ticks must all be accounted for: after the workers registered, before the
/// end (a tick due near the end may still be waiting for its miss deadline).
const WARMUP_MS: i64 = 5_000;
const TAIL_MS: i64 = 10_000;

/// The simulated wall clock: Unix ms at the seed's start plus tokio's (paused) elapsed time.
static EPOCH: Mutex<Option<(Instant, UnixMs)>> = Mutex::new(None);

/// The true simulated time: what the checks measure with.
fn true_now() -> UnixMs {
    let epoch = *EPOCH.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (start, base) = epoch.unwrap_or((Instant::now(), 0));
    base + i64::try_from(Instant::now().duration_since(start).as_millis()).unwrap_or(i64::MAX)
}

/// Each worker life's clock offset (ms), by its task group.
static OFFSETS: Mutex<BTreeMap<u64, i64>> = Mutex::new(BTreeMap::new());

/// Most a worker's clock is off, either way.
const MAX_OFFSET_MS: u64 = 2_000;

/// The wall clock as the caller sees it: the true time, plus its worker's offset.
fn simulated_now() -> UnixMs {
    let offset = etcron_common::task::current_group().and_then(|g| lock(&OFFSETS).get(&g).copied()).unwrap_or(0);
    true_now() + offset
}

/// Log lines stamped with the simulated wall clock.
struct SimulatedTime;

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", true_now())
    }
}

/// What one attempt did on a simulated task: who ran it, when it was alive.
#[derive(Debug, Clone)]
struct Attempt {
    id: ExecutionId,
    worker: String,
    started: UnixMs,
    ended: Option<UnixMs>,
    /// Ended by its keeper: the worker's session deadline passed while it ran.
    ended_by_keeper: bool,
}

/// The simulated tasks of every worker: each runs for a seeded duration and notes when it was
/// alive.
struct Tasks {
    rng: Mutex<Rng>,
    log: Arc<Mutex<Vec<Attempt>>>,
    /// Each worker's session deadline, as its keepers would watch it.
    deadlines: Mutex<BTreeMap<String, watch::Sender<Instant>>>,
}

impl Tasks {
    fn deadline(&self, worker: &str) -> watch::Receiver<Instant> {
        let far = Instant::now() + Duration::from_secs(86_400);
        lock(&self.deadlines).entry(worker.to_owned()).or_insert_with(|| watch::channel(far).0).subscribe()
    }
}

/// Resolves when the session deadline in `deadline` has passed (a keeper ending its task).
async fn deadline_passed(mut deadline: watch::Receiver<Instant>) {
    loop {
        let until = *deadline.borrow_and_update();
        tokio::select! {
            () = tokio::time::sleep_until(until) => return,
            changed = deadline.changed() => if changed.is_err() { return },
        }
    }
}

impl etcron_worker::context::simulated::Tasks for Tasks {
    fn run(
        &self,
        worker: &str,
        fire: &Fire,
        mut stop: watch::Receiver<Option<StopReason>>,
    ) -> etcron_worker::context::simulated::Run {
        // Mostly short runs, some that outlast a session's TTL and the loss handling's grace.
        let duration = {
            let mut rng = lock(&self.rng);
            Duration::from_millis(if rng.chance(150) { rng.between(4_000, 20_000) } else { rng.between(50, 4_000) })
        };
        // How long the worker takes to see a task its keeper killed (reaping it, reading its
        // output to the end; up to a second on a loaded worker): a keep-alive answered
        // meanwhile may renew the lapsed session.
        let noticed_after = Duration::from_millis(lock(&self.rng).between(0, 1_000));
        let index = {
            let mut log = lock(&self.log);
            log.push(Attempt {
                id: fire.id.clone(),
                worker: worker.to_owned(),
                started: true_now(),
                ended: None,
                ended_by_keeper: false,
            });
            log.len() - 1
        };
        let log = self.log.clone();
        let deadline = self.deadline(worker);
        if !KEEPERS.load(std::sync::atomic::Ordering::Relaxed) {
            return orphanable(duration, stop, Alive { log, index });
        }
        Box::pin(async move {
            // Ended however the future ends: run out, stopped, or dropped with its worker.
            let alive = Alive { log, index };
            let ending = tokio::select! {
                () = tokio::time::sleep(duration) => Ending::Exited(0),
                reason = stop.wait_for(Option::is_some) => match reason.ok().and_then(|r| r.clone()) {
                    Some(reason) => Ending::Stopped(reason),
                    None => Ending::Exited(0),
                },
                () = deadline_passed(deadline) => {
                    let mut log = lock(&alive.log);
                    log[alive.index].ended_by_keeper = true;
                    log[alive.index].ended = Some(true_now());
                    Ending::Signaled(9)
                }
            };
            if ending == Ending::Signaled(9) {
                tokio::time::sleep(noticed_after).await;
            }
            Finished { exit_code: matches!(ending, Ending::Exited(_)).then_some(0), ..Finished::not_started(ending) }
        })
    }

    fn session_deadline(&self, worker: &str, until: Instant) {
        let mut deadlines = lock(&self.deadlines);
        match deadlines.get(worker) {
            Some(tx) => {
                tx.send_replace(until);
            }
            None => {
                deadlines.insert(worker.to_owned(), watch::channel(until).0);
            }
        }
    }
}

/// Whether tasks end with their worker and at its session deadline, as keepers make real ones
/// do. Off re-introduces what the keepers closed: a worker's death did not end its tasks.
static KEEPERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// A task without a keeper: a process of its own that the worker's death does not end (a
/// task outside the worker's group); only its length or a stop ends it.
fn orphanable(
    duration: Duration,
    mut stop: watch::Receiver<Option<StopReason>>,
    alive: Alive,
) -> etcron_worker::context::simulated::Run {
    let process = tokio::spawn(async move {
        let _alive = alive;
        // A stop from a live worker ends it; a dead worker (its sender gone) does not.
        let stopped = async {
            match stop.wait_for(Option::is_some).await.ok().and_then(|r| r.clone()) {
                Some(reason) => reason,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(duration) => Ending::Exited(0),
            reason = stopped => Ending::Stopped(reason),
        }
    });
    Box::pin(async move {
        let ending = process.await.unwrap_or(Ending::Signaled(9));
        Finished { exit_code: matches!(ending, Ending::Exited(_)).then_some(0), ..Finished::not_started(ending) }
    })
}

struct Alive {
    log: Arc<Mutex<Vec<Attempt>>>,
    index: usize,
}

impl Drop for Alive {
    fn drop(&mut self) {
        lock(&self.log)[self.index].ended.get_or_insert_with(true_now);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The faults of one seed: a share of calls delayed, refused before they apply, or applied with
/// their answer lost, and of transactions applied late (after their caller gave up on them, read
/// etcd back and moved on: a claim sent again beside its first transaction). A quarter of the
/// clients whose transaction is applied late die soon after (pushed to `doomed`, with when): the
/// interleavings the loss handling must untangle, made common rather than left to luck.
fn faults(seed: u64, doomed: Arc<Mutex<Vec<(u32, Instant)>>>) -> impl FnMut(&Call, u32) -> Fault + Send + 'static {
    let mut rng = Rng::new(seed ^ 0xFA17);
    // Swarm testing, as for the faults over time (odd seeds): each kind is off for a third.
    let mut some = |lo, hi| if swarm(seed) && rng.chance(333) { 0 } else { rng.between(lo, hi) };
    let (mut lost, mut refused, mut late) = (some(0, 40), some(0, 40), some(50, 300));
    let mut doom = 250;
    match focus() {
        Focus::Mixed => {}
        // Sessions that outlive an election: no request fails on its own.
        Focus::Elections => (lost, refused, late) = (0, 0, 0),
        Focus::LateClaims => (late, doom) = (300, 500),
    }
    move |call, who| {
        if rng.chance(lost) {
            Fault::LoseAnswer
        } else if rng.chance(refused) {
            Fault::FailBefore
        } else if rng.chance(200) {
            Fault::Delay(Duration::from_millis(rng.between(1, 1_500)))
        } else if claims(call) && rng.chance(late) {
            if rng.chance(doom) {
                lock(&doomed).push((who, Instant::now() + Duration::from_millis(rng.between(0, 2_000))));
            }
            // Log-scaled, up to half a second: both before and after the caller's read back.
            let scale = rng.between(0, 9);
            Fault::ApplyLate(Duration::from_millis(rng.between(0, 1 << scale)))
        } else {
            Fault::None
        }
    }
}

/// Whether `call` is a claim transaction: one that writes an inflight key.
fn claims(call: &Call) -> bool {
    let Call::Txn { puts, .. } = call else { return false };
    puts.iter().any(|key| key.windows(10).any(|w| w == b"/inflight/"))
}

fn worker_config(id: &str, dir: &Path) -> Config {
    let cli = Cli::parse_from([
        "etcron-worker",
        "--worker-id",
        id,
        "--data-dir",
        &dir.display().to_string(),
        "--session-ttl",
        "5s",
        "--capacity",
        "64",
        "--output-listen",
        "127.0.0.1:0",
    ]);
    let mut config = Config::resolve(cli).expect("the simulated worker's configuration");
    config.namespace = NAMESPACE.to_owned();
    config
}

/// What a seed left behind, for the checks.
struct Outcome {
    attempts: Vec<Attempt>,
    /// Every record write, with the worker that wrote it, in each worker's order.
    records: Vec<(usize, RecordWrite)>,
    claims: Vec<(ExecutionId, Claim)>,
    start_ms: UnixMs,
    end_ms: UnixMs,
    /// A fingerprint of etcd's history: a replayed seed gives the same.
    fingerprint: u64,
    /// etcd's history, revision by revision.
    history: Vec<etcron_sim::server::Change>,
}

async fn put_jobs(etcd: &ModelEtcd, keys: &Keys) {
    let mut kv = etcd.client().await.kv_client();
    for j in 0..JOBS {
        // Each concurrency policy once: runs of one job overlap, are skipped, wait their turn,
        // or replace the one running.
        let schedule = ["@every 2s", "@every 3s", "@every 5s", "*/4 * * * * *"][j % 4];
        let concurrency = ["allow", "forbid", "queue", "replace"][j % 4];
        let spec = serde_json::json!({
            "schedule": schedule,
            "concurrency": concurrency,
            "task": {"kind": "shell", "command": "true"},
        });
        // As the master makes a job: with its catch-up state starting now.
        let (name, state) = (format!("job{j}"), etcron_model::stored::JobState { last_tick_ms: simulated_now() });
        kv.put(keys.job(&name), spec.to_string(), None).await.expect("the model takes the job");
        kv.put(keys.state(&name), state.to_bytes(), None).await.expect("the model takes the job state");
    }
    // Two jobs in a pool of one slot, a high and a low priority, whose ticks come due together:
    // at most one runs at any instant, the other waits in the pool's queue or is recorded missed.
    kv.put(keys.pool(POOL), r#"{"slots":1}"#, None).await.expect("the model takes the pool");
    for (name, priority) in POOL_JOBS {
        let spec = serde_json::json!({
            "schedule": "@every 2s", "pool": POOL, "priority": priority, "start_deadline": "3s",
            "task": {"kind": "shell", "command": "true"},
        });
        let state = etcron_model::stored::JobState { last_tick_ms: simulated_now() };
        kv.put(keys.job(name), spec.to_string(), None).await.expect("the model takes the job");
        kv.put(keys.state(name), state.to_bytes(), None).await.expect("the model takes the job state");
    }
}

/// The simulation's pool and the jobs in it (name, priority).
const POOL: &str = "simpool";
const POOL_JOBS: [(&str, u8); 2] = [("pooled-hi", 90), ("pooled-lo", 10)];

/// Two runs of the pool's jobs alive at once (its one slot held twice), if any.
fn pool_overlap(attempts: &[Attempt]) -> Option<String> {
    let pooled: Vec<&Attempt> = attempts.iter().filter(|a| POOL_JOBS.iter().any(|(j, _)| *j == a.id.job)).collect();
    overlap(&pooled).map(|(x, y)| format!("pool {POOL} (1 slot) ran {} at once", both(x, y)))
}

/// The first two of `attempts` alive at once.
fn overlap<'a>(attempts: &[&'a Attempt]) -> Option<(&'a Attempt, &'a Attempt)> {
    for (i, x) in attempts.iter().enumerate() {
        for y in &attempts[i + 1..] {
            let (xe, ye) = (x.ended.unwrap_or(UnixMs::MAX), y.ended.unwrap_or(UnixMs::MAX));
            if x.started < ye && y.started < xe {
                return Some((x, y));
            }
        }
    }
    None
}

/// `x and y (their spans and workers)`.
fn both(x: &Attempt, y: &Attempt) -> String {
    let (xe, ye) = (x.ended.unwrap_or(UnixMs::MAX), y.ended.unwrap_or(UnixMs::MAX));
    format!("{} and {} ({}..{} on {}, {}..{} on {})", x.id, y.id, x.started, xe, x.worker, y.started, ye, y.worker)
}

async fn run_seed(seed: u64, dir: &Path) -> Outcome {
    let start_ms = 1_800_000_000_000 + i64::try_from(seed % 1_000).unwrap_or(0) * 1_003;
    *lock(&EPOCH) = Some((Instant::now(), start_ms));
    // Each simulated worker has an admission limiter of its own (by task group); a seed's
    // workers start theirs anew.
    etcron_common::admission::forget_group_limiters();
    let keys = Keys::new(NAMESPACE).expect("namespace");
    let etcd = ModelEtcd::new();
    put_jobs(&etcd, &keys).await;
    let doomed = Arc::new(Mutex::new(Vec::new()));
    etcd.set_faults(faults(seed, doomed.clone()));
    let log = Arc::new(Mutex::new(Vec::new()));
    let tasks = Arc::new(Tasks { rng: Mutex::new(Rng::new(seed)), log: log.clone(), deadlines: Mutex::default() });
    let (stop_tx, stop) = watch::channel(false);
    let mut clocks = Rng::new(seed ^ 0xC10C);
    let offsets = (0..WORKERS)
        .map(|_| {
            i64::try_from(clocks.between(0, 2 * MAX_OFFSET_MS)).unwrap_or(0) - i64::try_from(MAX_OFFSET_MS).unwrap_or(0)
        })
        .collect();
    lock(&OFFSETS).clear();
    let mut cluster = Cluster {
        etcd: etcd.clone(),
        tasks,
        stop,
        dir: dir.to_path_buf(),
        nodes: Vec::new(),
        lives: vec![0; WORKERS],
        offsets,
        doomed,
    };
    for w in 0..WORKERS {
        let node = cluster.start(w).await;
        cluster.nodes.push(node);
    }
    let mut rng = Rng::new(seed ^ 0x5E55);
    faults_over_time(&mut cluster, &mut rng, swarm(seed)).await;
    let end_ms = true_now();
    // Quiet: no more faults, time for every owed close, loss and miss to be settled.
    etcd.set_faults(|_, _| Fault::None);
    tokio::time::sleep(SETTLE_FOR).await;
    let _ = stop_tx.send(true);
    let dirs: Vec<PathBuf> = (0..WORKERS).map(|w| cluster.data_dir(w)).collect();
    for (_, node) in cluster.nodes.drain(..) {
        let _ = node.await;
    }
    let claims = etcd
        .dump(keys.claims_prefix().as_bytes())
        .into_iter()
        .filter_map(|k| match keys.parse(&k.key) {
            Some(Key::Claim(id)) => Some((id, serde_json::from_slice(&k.value).ok()?)),
            _ => None,
        })
        .collect();
    if std::env::var_os("ETCRON_SIM_HISTORY").is_some() {
        for c in etcd.history() {
            eprintln!(
                "{} {:?} {} {} lease={}",
                c.revision,
                c.kind,
                String::from_utf8_lossy(&c.key),
                String::from_utf8_lossy(&c.value),
                c.lease
            );
        }
    }
    let attempts = lock(&log).clone();
    let fingerprint = etcd.history().iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, c| {
        c.key.iter().chain(&c.revision.to_le_bytes()).fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
    });
    Outcome { attempts, records: spooled(&dirs), claims, start_ms, end_ms, fingerprint, history: etcd.history() }
}

/// The simulated workers, and how to start one again.
struct Cluster {
    etcd: ModelEtcd,
    tasks: Arc<Tasks>,
    stop: watch::Receiver<bool>,
    dir: PathBuf,
    /// Each worker's task group and its `node::run`.
    nodes: Vec<(Group, tokio::task::JoinHandle<anyhow::Result<()>>)>,
    /// How many times each worker started: its etcd clients are known to the model by worker
    /// and life (a dead life's clients stay cut off).
    lives: Vec<u32>,
    /// How far each worker's clock is off (ms).
    offsets: Vec<i64>,
    /// Clients (`who`) the fault hook doomed, and when they die.
    doomed: Arc<Mutex<Vec<(u32, Instant)>>>,
}

impl Cluster {
    fn data_dir(&self, w: usize) -> PathBuf {
        self.dir.join(format!("w{w}"))
    }

    /// How the model knows worker `w`'s clients in its current life.
    fn who(&self, w: usize) -> u32 {
        (u32::try_from(w).unwrap_or(0) + 1) * 1_000 + self.lives.get(w).copied().unwrap_or(0)
    }

    /// Starts worker `w` on its data dir (again, after a crash), in a task group of its own.
    async fn start(&self, w: usize) -> (Group, tokio::task::JoinHandle<anyhow::Result<()>>) {
        let who = self.who(w);
        let parts = etcron_worker::node::Parts {
            client: self.etcd.client_as(who).await,
            session_client: self.etcd.client_as(who).await,
            store: None,
            simulated: Some(self.tasks.clone()),
            handlers: None,
        };
        let config = worker_config(&format!("w{w}"), &self.data_dir(w));
        let mut stop = self.stop.clone();
        let group = Group::new(u64::from(who));
        lock(&OFFSETS).insert(u64::from(who), self.offsets[w]);
        let node = group.spawn(async move {
            etcron_worker::node::run(config, parts, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
        });
        (group, node)
    }

    /// Worker `w` dies where each of its tasks was (its real tasks' keepers end them with it)
    /// and starts again on its data dir `down` later.
    async fn crash(&mut self, w: usize, down: Duration) {
        // What a dropped future still sends (a drop that deletes a key) never reaches etcd:
        // a dead process sends nothing.
        self.etcd.partition(self.who(w), Instant::now() + Duration::from_secs(1_000_000));
        self.nodes[w].0.abort_all();
        self.lives[w] += 1;
        tokio::time::sleep(down).await;
        self.nodes[w] = self.start(w).await;
    }
}

impl Cluster {
    /// Waits until `until`, crashing each worker the fault hook doomed when its time comes
    /// (down for a second; a client of a life that already ended is let go).
    async fn crash_doomed_until(&mut self, until: Instant) {
        loop {
            let due = {
                let mut doomed = lock(&self.doomed);
                doomed.sort_by_key(|&(_, at)| at);
                doomed.first().copied().filter(|&(_, at)| at <= until).inspect(|_| {
                    doomed.remove(0);
                })
            };
            let Some((who, at)) = due else {
                tokio::time::sleep_until(until).await;
                return;
            };
            tokio::time::sleep_until(at).await;
            let w = usize::try_from(who / 1_000).unwrap_or(0).wrapping_sub(1);
            if w < WORKERS && self.who(w) == who {
                tracing::warn!(target: "sim", "w{w} dies after a transaction applied late, down for 1000 ms");
                self.crash(w, Duration::from_secs(1)).await;
            }
        }
    }
}

/// What a hole's search dwells on: the interleaving that reaches it, as a directed search does
/// (the seeds then choose everything else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Focus {
    /// Every kind of fault (the seeds' own mix).
    Mixed,
    /// Leader elections, with no request failing on its own: sessions outlive their deadline.
    Elections,
    /// Claim transactions applied late, their worker often dying soon after.
    LateClaims,
}

static FOCUS: Mutex<Focus> = Mutex::new(Focus::Mixed);

fn focus() -> Focus {
    *lock(&FOCUS)
}

/// Whether `seed` is a swarm seed: one that weighs the kinds of fault its own way, some of them
/// off altogether (odd seeds; even ones mix every kind evenly).
fn swarm(seed: u64) -> bool {
    seed % 2 == 1
}

/// A kind of fault, by `weights` (all zero: the last kind, nothing).
fn pick(weights: &[u64], rng: &mut Rng) -> u64 {
    let total: u64 = weights.iter().sum();
    if total == 0 {
        return weights.len() as u64 - 1;
    }
    let mut at = rng.below(total);
    for (kind, &w) in weights.iter().enumerate() {
        if at < w {
            return kind as u64;
        }
        at -= w;
    }
    weights.len() as u64 - 1
}

/// Runs the cluster for [`RUN_FOR`]: now and then a worker is cut off from etcd or dies and
/// restarts, watches break or lag.
async fn faults_over_time(cluster: &mut Cluster, rng: &mut Rng, swarm: bool) {
    let until = Instant::now() + RUN_FOR;
    // Swarm testing (odd seeds): each seed weighs the kinds of fault (0 to 3 each; the last,
    // nothing) its own way, so some seeds dwell on one kind — elections, say — that an even mix
    // seldom repeats enough to reach the interleaving it leads to. Even seeds mix them evenly.
    let mut weights: Vec<u64> = (0..7).map(|_| if swarm { rng.between(0, 3) } else { 1 }).collect();
    if focus() == Focus::Elections {
        // Elections, and the tasks they cut: nothing else.
        weights = vec![0, 0, 0, 0, 0, 3, 1];
    }
    // Revisions as they were, for compactions that keep what the compactor's rule keeps.
    let mut revisions = vec![(Instant::now(), cluster.etcd.revision())];
    while Instant::now() < until {
        let next = Instant::now() + Duration::from_millis(rng.between(500, 6_000));
        cluster.crash_doomed_until(next).await;
        revisions.push((Instant::now(), cluster.etcd.revision()));
        let w = usize::try_from(rng.below(WORKERS as u64)).unwrap_or(0);
        match pick(&weights, rng) {
            // Cut off from etcd: past the session TTL its session expires (its tasks end at its
            // session deadline, as their keepers end them) and the others take over.
            0 => {
                let (who, cut) = (cluster.who(w), rng.between(500, 12_000));
                tracing::warn!(target: "sim", "w{w} cut off from etcd for {cut} ms");
                cluster.etcd.partition(who, Instant::now() + Duration::from_millis(cut));
            }
            1 => {
                let down = rng.between(0, 8_000);
                tracing::warn!(target: "sim", "w{w} dies, down for {down} ms");
                cluster.crash(w, Duration::from_millis(down)).await;
            }
            2 => cluster.etcd.break_watches(),
            3 => cluster.etcd.set_watch_lag(Duration::from_millis(rng.between(0, 2_000))),
            // The history older than `COMPACT_KEEPS` compacted: lagging watches must re-list.
            4 => {
                let old = Instant::now().checked_sub(COMPACT_KEEPS);
                if let Some(&(_, revision)) = revisions.iter().rev().find(|(at, _)| old.is_some_and(|old| *at <= old)) {
                    tracing::warn!(target: "sim", "etcd compacted at revision {revision}");
                    cluster.etcd.compact(revision);
                }
            }
            // The etcd leader lost: everything waits for an election, then the new leader
            // renews every lease. A worker whose session deadline passed meanwhile had its
            // tasks ended by their keepers, yet keeps its session.
            5 => {
                let election = rng.between(1_000, 7_000);
                tracing::warn!(target: "sim", "etcd leader lost: a new one in {election} ms");
                cluster.etcd.lose_leader(Instant::now() + Duration::from_millis(election));
            }
            _ => {}
        }
    }
}

/// Every record the workers wrote (no store: all of them are in the spools), with the index of
/// the worker that wrote it, in each worker's order.
fn spooled(dirs: &[PathBuf]) -> Vec<(usize, RecordWrite)> {
    let mut records = Vec::new();
    for (writer, dir) in dirs.iter().enumerate() {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    n.to_string_lossy().starts_with("spool") || n.to_string_lossy().starts_with("replay-")
                })
            })
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            records.extend(text.lines().filter_map(|l| Some((writer, serde_json::from_str::<RecordWrite>(l).ok()?))));
        }
    }
    records
}

/// The final status MongoDB ends with for each execution, whatever order the workers' sinks
/// deliver in: one worker's writes arrive in its order, different workers' in any. A `Replace`
/// wins over the other modes and the last `Replace` to arrive stays; without one, the first
/// `IfAbsent` or `OverRunning` final record to arrive stays (`OverRunning` replaces only a
/// `running` record). Final records that can leave different outcomes depending on that order
/// are a violation.
fn stored_finals(records: &[(usize, RecordWrite)]) -> Result<BTreeMap<ExecutionId, Status>, String> {
    // Per execution: each writer's last Replace, and every other final record.
    let mut replaced: BTreeMap<&ExecutionId, BTreeMap<usize, &RecordWrite>> = BTreeMap::new();
    let mut if_absent: BTreeMap<&ExecutionId, Vec<&RecordWrite>> = BTreeMap::new();
    for (writer, w) in records.iter().filter(|(_, w)| w.record.status != Status::Running) {
        match w.mode {
            WriteMode::Replace => {
                replaced.entry(&w.record.id).or_default().insert(*writer, w);
            }
            WriteMode::IfAbsent | WriteMode::OverRunning => if_absent.entry(&w.record.id).or_default().push(w),
        }
    }
    let said = |w: &RecordWrite| {
        let r = &w.record;
        format!("{} ({:?}: {})", r.status.as_str(), w.mode, r.error.as_deref().or(r.reason.as_deref()).unwrap_or(""))
    };
    let mut stored = BTreeMap::new();
    for (id, writes) in &if_absent {
        if let Some(other) = writes.iter().find(|w| w.record.status != writes[0].record.status) {
            if !replaced.contains_key(id) {
                return Err(format!(
                    "{id} may end as either of two final records: {}; or {}",
                    said(writes[0]),
                    said(other)
                ));
            }
        }
        stored.insert((*id).clone(), writes[0].record.status);
    }
    for (id, last) in &replaced {
        let mut lasts = last.iter();
        let Some((_, first)) = lasts.next() else { continue };
        if let Some((writer, other)) = lasts.find(|(_, w)| w.record.status != first.record.status) {
            return Err(format!(
                "{id} may end as either of two final records, by w{} and w{writer}: {}; or {}",
                last.keys().next().unwrap_or(&0),
                said(first),
                said(other)
            ));
        }
        stored.insert((*id).clone(), first.record.status);
    }
    Ok(stored)
}

/// Fencing tokens only grow: each attempt of an execution has a larger one than the attempt
/// before it (a rerun fences out the attempt it replaces).
fn tokens_grow(records: &[(usize, RecordWrite)]) -> Option<String> {
    let mut tokens: BTreeMap<(String, String, String), BTreeMap<u32, i64>> = BTreeMap::new();
    for (_, w) in records {
        let (id, Some(token)) = (&w.record.id, w.record.fencing_token) else { continue };
        let key = (id.job.clone(), format!("{:?}", id.tick), format!("{:?}", id.part));
        tokens.entry(key).or_default().insert(id.attempt, token);
    }
    for ((job, tick, _), by_attempt) in tokens {
        let mut last: Option<(u32, i64)> = None;
        for (attempt, token) in by_attempt {
            if let Some((before, was)) = last.filter(|(_, was)| token <= *was) {
                return Some(format!(
                    "{job} {tick}: attempt {attempt} has fencing token {token}, not above attempt {before}'s {was}"
                ));
            }
            last = Some((attempt, token));
        }
    }
    None
}

/// The queue keeps its order: each time a queued execution leaves the queue for the lock, it is
/// the first in the queue's key order.
fn queue_order_kept(history: &[etcron_sim::server::Change]) -> Option<String> {
    use etcron_sim::server::ChangeKind;
    let mut queued: BTreeMap<String, BTreeSet<Vec<u8>>> = BTreeMap::new();
    let mut i = 0;
    while i < history.len() {
        let revision = history[i].revision;
        let end = history[i..].iter().position(|c| c.revision != revision).map_or(history.len(), |n| i + n);
        let changes = &history[i..end];
        for c in changes {
            let key = String::from_utf8_lossy(&c.key);
            let Some((job, _)) = key.strip_prefix("/sim/queue/").and_then(|rest| rest.split_once("/q/")) else {
                continue;
            };
            let queue = queued.entry(job.to_owned()).or_default();
            let handed =
                changes.iter().any(|l| l.kind == ChangeKind::Put && l.key == format!("/sim/lock/{job}").as_bytes());
            if c.kind == ChangeKind::Delete && handed {
                if let Some(first) = queue.first().filter(|first| **first != c.key) {
                    return Some(format!(
                        "revision {revision}: {key} left the queue for the lock before {}",
                        String::from_utf8_lossy(first)
                    ));
                }
            }
            match c.kind {
                ChangeKind::Put => queue.insert(c.key.clone()),
                ChangeKind::Delete => queue.remove(&c.key),
            };
        }
        i = end;
    }
    None
}

/// The first invariant `out` breaks.
fn violation(out: &Outcome) -> Option<String> {
    if let Some(v) =
        tokens_grow(&out.records).or_else(|| queue_order_kept(&out.history)).or_else(|| pool_overlap(&out.attempts))
    {
        return Some(v);
    }
    let mut started = BTreeMap::new();
    for a in &out.attempts {
        if let Some(first) = started.insert(a.id.clone(), a) {
            return Some(format!(
                "{} started twice: on {} at {} and on {} at {}",
                a.id, first.worker, first.started, a.worker, a.started
            ));
        }
    }
    let mut by_tick: BTreeMap<(String, String), Vec<&Attempt>> = BTreeMap::new();
    for a in &out.attempts {
        by_tick.entry((a.id.job.clone(), format!("{:?}", a.id.tick))).or_default().push(a);
    }
    for attempts in by_tick.values() {
        if let Some((x, y)) = overlap(attempts) {
            return Some(format!("{} were alive at once", both(x, y)));
        }
    }
    let stored = match stored_finals(&out.records) {
        Ok(stored) => stored,
        Err(conflict) => return Some(conflict),
    };
    if let Some(a) = out.attempts.iter().find(|a| !stored.contains_key(&a.id)) {
        return Some(format!(
            "{} ran on {} from {} (ended {:?}) and has no final record",
            a.id, a.worker, a.started, a.ended
        ));
    }
    if let Some((a, status)) = out
        .attempts
        .iter()
        .filter(|a| a.ended_by_keeper)
        .find_map(|a| stored.get(&a.id).filter(|s| **s != Status::Lost).map(|s| (a, s)))
    {
        return Some(format!(
            "{} was ended by its keeper on {} (session deadline passed) and recorded {}, not lost",
            a.id,
            a.worker,
            status.as_str()
        ));
    }
    let attempted: BTreeSet<&ExecutionId> = out.records.iter().map(|(_, w)| &w.record.id).collect();
    // A loss past the failover limit is final, and its record says so.
    let final_loss: BTreeSet<&ExecutionId> = out
        .records
        .iter()
        .filter(|(_, w)| w.record.reason.as_deref().is_some_and(|r| r.contains("not rerun")))
        .map(|(_, w)| &w.record.id)
        .collect();
    // A rerun of a pool job may still be waiting in its pool's queue when the run ends: a rerun
    // waits up to `SLOT_WAIT_MAX` (5 min, longer than the run) before it is recorded missed.
    let waiting = |id: &ExecutionId| {
        let suffix = format!("-{}", id.to_string().replacen('@', "/", 1));
        let queues = format!("{NAMESPACE}/poolwait/");
        out.history.iter().any(|c| c.key.starts_with(queues.as_bytes()) && c.key.ends_with(suffix.as_bytes()))
    };
    if let Some((id, _)) = stored.iter().find(|(id, s)| {
        **s == Status::Lost
            && !attempted.contains(&id.next_attempt())
            && !final_loss.contains(id)
            && !waiting(&id.next_attempt())
    }) {
        return Some(format!("{id} was recorded lost and has no rerun"));
    }
    if let Some((id, claim)) = out.claims.iter().find(|(_, c)| c.state() == ClaimState::Running) {
        return Some(format!("claim of {id} is still taken by {} when the cluster is quiet", claim.worker_id));
    }
    let recorded: BTreeSet<(String, UnixMs)> =
        out.records.iter().map(|(_, w)| (w.record.job.clone(), w.record.scheduled_ms)).collect();
    let window = (out.start_ms + WARMUP_MS)..(out.end_ms - TAIL_MS);
    let pooled = POOL_JOBS.iter().map(|(job, _)| ((*job).to_owned(), 2_000));
    for (job, period) in (0..JOBS).map(|j| (format!("job{j}"), [2_000, 3_000, 5_000, 4_000][j % 4])).chain(pooled) {
        let first = (window.start + period - 1) / period * period;
        for tick in (first..window.end).step_by(usize::try_from(period).unwrap_or(1)) {
            if !recorded.contains(&(job.clone(), tick)) {
                return Some(format!("tick {tick} of {job} has no record (neither run nor recorded with why)"));
            }
        }
    }
    None
}

/// Runs `seed`: what it left behind, after printing a line about it.
fn run(seed: u64) -> Outcome {
    let dir = tempfile::tempdir().expect("a data dir");
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    // tokio's own choices seeded (`.cargo/config.toml`; a RUSTFLAGS of one's own replaces it,
    // and the seeds then run without exact replay).
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder.build().expect("a runtime");
    let out = runtime.block_on(run_seed(seed, dir.path()));
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, w) in out.records.iter().filter(|(_, w)| w.record.status != Status::Running) {
        *statuses.entry(w.record.status.as_str()).or_default() += 1;
    }
    eprintln!(
        "seed {seed}: history {:016x}, {} attempts, {} claims, final records {statuses:?}",
        out.fingerprint,
        out.attempts.len(),
        out.claims.len()
    );
    out
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok()).map_or(default, |v| v as u64)
}

/// The holes re-introduced one at a time, with the seeds each may take to be found: bits of
/// the worker's `simulated::holes`, or `NO_KEEPERS` for the simulation's tasks.
const HOLES: [(&str, u32, Focus, u64); 5] = [
    ("unknown-claim-dropped", holes::UNKNOWN_CLAIM_DROPPED, Focus::Mixed, 20),
    ("keeper-kill-failed", holes::KEEPER_KILL_FAILED, Focus::Elections, 20),
    ("one-inflight-token", holes::ONE_INFLIGHT_TOKEN, Focus::LateClaims, 40),
    ("first-send-let-go", holes::FIRST_SEND_LET_GO, Focus::LateClaims, 20),
    ("no-keepers", NO_KEEPERS, Focus::Mixed, 20),
];

/// Not a worker hole: tasks outlive their worker (`KEEPERS` off).
const NO_KEEPERS: u32 = 1 << 31;

/// One test, so the process-wide clock, hash keys and holes are set in one order: the seeds,
/// a replay, then each hole.
#[test]
fn the_workers_own_fire_path_keeps_exactly_once_over_the_model_etcd() {
    etcron_model::simulate_clock(simulated_now);
    // A readable trace of one seed: the workers' log lines and the faults, on simulated time.
    if let Ok(filter) = std::env::var("ETCRON_SIM_TRACE") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_timer(SimulatedTime)
            .with_writer(std::io::stderr)
            .init();
    }
    assert!(etcron_common::hash::fix_keys(), "no map was made before the simulation fixed the keys");
    let (from, seeds) = (env_u64("ETCRON_SIM_FROM", 0), env_u64("ETCRON_SIM_SEEDS", 8));
    let started = std::time::Instant::now();
    let mut first = None;
    for seed in from..from + seeds {
        let out = run(seed);
        if let Some(violation) = violation(&out) {
            panic!("seed {seed}: {violation} (replay: ETCRON_SIM_FROM={seed} ETCRON_SIM_SEEDS=1 cargo test -p etcron-worker --test sim)");
        }
        first.get_or_insert(out.fingerprint);
    }
    eprintln!("{seeds} seeds from {from}: no violation in {:.1}s", started.elapsed().as_secs_f64());
    // A seed replays exactly: the same etcd history, revision for revision.
    if let Some(first) = first.filter(|_| cfg!(tokio_unstable)) {
        assert_eq!(run(from).fingerprint, first, "seed {from} replayed differently");
    }
    if std::env::var_os("ETCRON_SIM_SEEDS").is_some() {
        return;
    }
    let only = std::env::var("ETCRON_SIM_HOLE").ok();
    for (name, hole, hole_focus, budget) in
        HOLES.into_iter().filter(|(name, ..)| only.as_deref().is_none_or(|o| o == *name))
    {
        *lock(&FOCUS) = hole_focus;
        holes::set(hole & !NO_KEEPERS);
        KEEPERS.store(hole & NO_KEEPERS == 0, std::sync::atomic::Ordering::Relaxed);
        let found = (0..budget).find_map(|seed| violation(&run(seed)).map(|v| (seed, v)));
        holes::set(0);
        KEEPERS.store(true, std::sync::atomic::Ordering::Relaxed);
        *lock(&FOCUS) = Focus::Mixed;
        let Some((seed, violation)) = found else { panic!("hole {name}: not found within {budget} seeds") };
        eprintln!("hole {name}: found at seed {seed}: {violation}");
    }
}

/// The checks that read etcd's history and the records fail on what they exist to catch.
#[test]
fn the_order_checks_catch_a_queue_jumped_and_a_token_that_did_not_grow() {
    use etcron_model::keys::Tick;
    use etcron_model::record::{ExecutionRecord, TriggerKind};
    use etcron_sim::server::{Change, ChangeKind};
    let change = |revision, kind, key: &str| Change {
        kind,
        key: key.as_bytes().to_vec(),
        value: Vec::new(),
        revision,
        create_revision: 0,
        version: 0,
        lease: 0,
    };
    let queued =
        [change(1, ChangeKind::Put, "/sim/queue/j/q/1000-a"), change(2, ChangeKind::Put, "/sim/queue/j/q/2000-b")];
    let in_order = [change(3, ChangeKind::Delete, "/sim/queue/j/q/1000-a"), change(3, ChangeKind::Put, "/sim/lock/j")];
    let jumped = [change(3, ChangeKind::Delete, "/sim/queue/j/q/2000-b"), change(3, ChangeKind::Put, "/sim/lock/j")];
    assert_eq!(queue_order_kept(&[queued.to_vec(), in_order.to_vec()].concat()), None);
    assert!(queue_order_kept(&[queued.to_vec(), jumped.to_vec()].concat()).is_some_and(|v| v.contains("2000-b")));

    let record = |attempt, token| {
        let id = ExecutionId { attempt, ..ExecutionId::new("j", Tick::Scheduled(1_000)) };
        let mut r = ExecutionRecord::blank(&id, 1_000, TriggerKind::Schedule, Status::Lost, None);
        r.fencing_token = Some(token);
        (0, RecordWrite { mode: WriteMode::Replace, record: r })
    };
    assert_eq!(tokens_grow(&[record(1, 10), record(2, 20)]), None);
    assert!(tokens_grow(&[record(1, 20), record(2, 10)]).is_some());
}
