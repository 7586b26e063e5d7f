//! The chaos suite: real processes, random faults, and a checker of exactly-once.
//!
//! `etcron-chaos [--seed N] [--seconds 180] [--jobs 20] [--settle 120]` starts a 3-member etcd
//! cluster, a `mongod` (one-node replica set), 2 masters and 3 workers, creates `--jobs` jobs that
//! fire every second and append `job scheduled_ms attempt worker fencing_token` to a file, then
//! for `--seconds` injects, one after another at seeded random times: SIGKILL of a worker (then
//! restart), SIGSTOP of a worker past its session TTL (then SIGCONT), SIGKILL of the etcd leader
//! (then restart), a MongoDB stop/start, a master restart, a stall of the whole etcd cluster
//! past the session TTL (SIGSTOP of every member, then SIGCONT), CPU starvation (two busy-looping
//! processes, one per core, for a few seconds) and a burst (100 one-shot `@at` jobs due at the
//! same instant, whose ticks are checked like the others). Three more jobs exercise the shapes
//! of a schedule on the same fire path: one with `jitter`, one with two merged `schedules`, and
//! one whose `skip_calendars` lists every day of the run (each of its ticks must be recorded
//! `skipped`, never run); their ticks are computed as the workers compute them. A paused job's
//! ticks are backfilled (`which: missing`, up to 3 at once) every ~20 s while the faults go on,
//! every other time by two backfills of the same range sent to both masters at once; each of its
//! ticks must be skipped or run, each (tick, attempt) at most once, and every backfill must end
//! `done` (each item with a final record). A `concurrency: queue` job whose runs outlast its
//! period keeps its queue full: each of its ticks must run (once) or be recorded skipped; its
//! SLA alerts (`late_start: 1s`, `max_duration: 1s`) go to a webhook receiver in the suite, and
//! no execution may be alerted `late` or `long_running` twice. A job that never succeeds has
//! `no_success_within: 5s`: it must be alerted `stale` at most once (one window, never closed by
//! a success). Afterwards it waits (up to
//! `--settle` seconds) for the cluster to account for every tick, then prints: faults by kind,
//! ticks due, ticks run, duplicates per (job, tick, attempt), ticks neither run nor recorded
//! `missed`/`lost`, and execution records lost (a run in the file without its record in
//! MongoDB), and alerts raised twice. It exits 1 if any of these is non-zero or a backfill never ends. The same
//! seed gives the same fault schedule. `--profile production` runs each etcd member in a network
//! namespace of its own and MongoDB as a 3-member replica set, and adds member partitions, primary
//! step-downs and kills, and rolling restarts (`PRODUCTION_FAULTS`), printing each fault's cost in
//! missed ticks.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use etcron_common::store::{MongoStore, Search};
use etcron_tests::etcd_cluster::EtcdCluster;
use etcron_tests::mongo_rs::MongoReplicaSet;
use etcron_tests::netns::Cut;
use etcron_tests::webhook::Receiver;
use etcron_tests::{
    db_name, log_dir, now_ms, read_fired, record_command, wait_for, Fired, Master, Mongo, Rng, Worker, WorkerOpts,
};
use nix::sys::signal::Signal;
use serde_json::json;

/// Session TTL of the workers (the harness default); a stop lasts longer than this.
const SESSION_TTL: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillWorker,
    StopWorker,
    KillEtcdLeader,
    MongoOutage,
    RestartMaster,
    StallEtcd,
    StarveCpu,
    Burst,
    /// Production profile: the etcd leader cut from its peers (clients still reach it).
    CutEtcdLeader,
    /// Production profile: an etcd follower cut from its peers and its clients.
    CutEtcdFollower,
    /// Production profile: the MongoDB primary steps down.
    MongoStepDown,
    /// Production profile: the MongoDB primary SIGKILLed (then started again).
    KillMongoPrimary,
    /// Production profile: every worker, then every master, stopped (SIGTERM) and started
    /// again, one at a time.
    RollingRestart,
}

/// The production profile's faults: today's, with MongoDB's outage replaced by a replica set's
/// failovers, and etcd members partitioned and every process restarted in turn.
const PRODUCTION_FAULTS: [Fault; 12] = [
    Fault::KillWorker,
    Fault::StopWorker,
    Fault::KillEtcdLeader,
    Fault::RestartMaster,
    Fault::StallEtcd,
    Fault::StarveCpu,
    Fault::Burst,
    Fault::CutEtcdLeader,
    Fault::CutEtcdFollower,
    Fault::MongoStepDown,
    Fault::KillMongoPrimary,
    Fault::RollingRestart,
];

const FAULTS: [Fault; 8] = [
    Fault::KillWorker,
    Fault::StopWorker,
    Fault::KillEtcdLeader,
    Fault::MongoOutage,
    Fault::RestartMaster,
    Fault::StallEtcd,
    Fault::StarveCpu,
    Fault::Burst,
];

/// One-shot jobs a burst creates, all due at the same instant.
const BURST_JOBS: usize = 100;

/// Busy-looping processes for `length`, one per core of this machine (2), then killed.
async fn starve_cpu(length: Duration) -> Result<()> {
    let mut hogs = Vec::new();
    for _ in 0..2 {
        hogs.push(std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn()?);
    }
    tokio::time::sleep(length).await;
    for mut hog in hogs {
        let _ = hog.kill();
        let _ = hog.wait();
    }
    Ok(())
}

/// SIGSTOP (or SIGCONT) every etcd member.
fn signal_etcd(etcd: &EtcdCluster, sig: Signal) -> Result<()> {
    for i in 0..etcd.len() {
        if let Some(pid) = etcd.pid(i) {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(pid)?), sig)?;
        }
    }
    Ok(())
}

struct Options {
    seed: u64,
    seconds: u64,
    jobs: usize,
    settle: u64,
    /// `production`: each etcd member in a network namespace of its own, a 3-member MongoDB
    /// replica set, and the production faults (`PRODUCTION_FAULTS`).
    production: bool,
}

fn options() -> Result<Options> {
    let mut o =
        Options { seed: u64::try_from(now_ms()).unwrap_or(1), seconds: 180, jobs: 20, settle: 120, production: false };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seed" => o.seed = value.parse()?,
            "--seconds" => o.seconds = value.parse()?,
            "--jobs" => o.jobs = value.parse()?,
            "--settle" => o.settle = value.parse()?,
            "--profile" => {
                o.production = match value.as_str() {
                    "default" => false,
                    "production" => true,
                    other => bail!("--profile: default or production, not {other}"),
                }
            }
            other => bail!("unknown flag {other}; known: --seed, --seconds, --jobs, --settle, --profile"),
        }
    }
    if o.seed == 0 {
        o.seed = 1;
    }
    Ok(o)
}

/// Where records go: one `mongod` (the default profile) or a replica set (production).
enum Db {
    One(Mongo),
    Set(MongoReplicaSet),
}

impl Db {
    fn uri(&self) -> &str {
        match self {
            Self::One(m) => &m.uri,
            Self::Set(s) => &s.uri,
        }
    }
}

struct System {
    etcd: EtcdCluster,
    mongo: Db,
    masters: Vec<Master>,
    workers: Vec<Worker>,
    master_args: Vec<String>,
    namespace: String,
    logs: std::path::PathBuf,
}

impl System {
    async fn start_master(&self) -> Result<Master> {
        let args: Vec<&str> = self.master_args.iter().map(String::as_str).collect();
        Master::start(&self.etcd.endpoints(), &self.namespace, &self.logs, &args).await
    }

    /// An answering master's URL (a restart may be under way on the other).
    fn url(&self, i: usize) -> String {
        self.masters[i % self.masters.len()].url.clone()
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = options()?;
    let mut rng = Rng(o.seed);
    println!("etcron-chaos: seed {} (rerun with --seed {}), {} s, {} jobs", o.seed, o.seed, o.seconds, o.jobs);
    let (mut sys, db) = start_system(&o).await?;
    let work = tempfile::tempdir()?;
    let file = work.path().join("fired.log");
    let http = reqwest::Client::new();
    let jobs: Vec<String> = (0..o.jobs).map(|i| format!("chaos-{i:02}")).collect();
    create_jobs(&http, &sys.url(0), &jobs, &file).await?;
    let alerts = Receiver::start().await?;
    let shaped = shaped_jobs(&http, &sys.url(0), &file, &alerts).await?;
    let mut backfills = Backfills::start(&http, &sys.url(0), &file).await?;
    wait_for(Duration::from_secs(60), "every job to fire", || async {
        let fired = read_fired(&file);
        let seen: BTreeSet<&str> = fired.iter().map(|f| f.job.as_str()).collect();
        jobs.iter().all(|j| seen.contains(j.as_str())).then_some(())
    })
    .await?;

    let faults = run_faults(&o, &mut sys, &mut rng, &http, &file, &mut backfills).await?;
    println!(
        "faults over after {:.0}s; waiting up to {}s for every tick to be accounted for",
        (faults.end_ms - faults.start_ms) as f64 / 1000.0,
        o.settle
    );

    let store = MongoStore::connect(sys.mongo.uri(), &db).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let settle_deadline = Instant::now() + Duration::from_secs(o.settle);
    let due = faults.due(&shaped, &backfills)?;
    let (start_ms, end_ms) = (faults.start_ms, faults.end_ms);
    let mut report = loop {
        let report =
            check(&store, &read_fired(&file), &jobs, &due.every_second, &due.one_by_one, start_ms, end_ms).await?;
        if (report.unaccounted.is_empty() && report.records_lost.is_empty()) || Instant::now() > settle_deadline {
            break report;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let (twice, joins) = workflow_report(&file);
    println!("workflow: {joins} fan-in joins ran, {} steps twice", twice.len());
    report.duplicates.extend(twice);

    let unfinished = backfills.wait_done(&http, &sys, settle_deadline).await;
    let (alerted, alerted_twice) = alerts_report(&alerts.all());

    let cost = fault_costs(&store, &jobs, &faults.windows).await?;
    let outcome = Outcome {
        injected: faults.injected,
        cost,
        due_total: due.every_second.len() * jobs.len() + due.one_by_one.len(),
        report,
        backfills: backfills.ids.len(),
        backfill_items: backfills.items,
        unfinished,
        alerted,
        alerted_twice,
    };
    outcome.print();
    println!("{}", outcome.summary(&o));
    if outcome.broken(jobs.len()) {
        println!("FAILED (logs in {})", sys.logs.display());
        // Not `process::exit`: returning drops `sys`, which stops every process it started.
        anyhow::bail!("the chaos run found a broken promise (see above)");
    }
    println!("ok");
    Ok(())
}

/// Starts etcd and MongoDB (as the profile says), 2 masters and 3 workers; answers the records' database too.
async fn start_system(o: &Options) -> Result<(System, String)> {
    let logs = log_dir("chaos");
    let (etcd, mongo) = if o.production {
        println!("profile: production (etcd members in network namespaces, a 3-member MongoDB replica set)");
        (EtcdCluster::start_partitionable(&logs, 3).await?, Db::Set(MongoReplicaSet::start(&logs, 3).await?))
    } else {
        (EtcdCluster::start(&logs, 3).await?, Db::One(Mongo::start_own(&logs).await?))
    };
    let db = db_name("chaos");
    let namespace = "/t-chaos".to_owned();
    let master_args = vec!["--mongodb-uri".to_owned(), mongo.uri().to_owned(), "--mongodb-db".to_owned(), db.clone()];
    let mut sys = System { etcd, mongo, masters: Vec::new(), workers: Vec::new(), master_args, namespace, logs };
    for _ in 0..2 {
        let m = sys.start_master().await?;
        sys.masters.push(m);
    }
    for i in 1..=3 {
        let mut opts = WorkerOpts::new(&format!("w{i}"));
        opts.mongodb = Some((sys.mongo.uri().to_owned(), db.clone()));
        sys.workers.push(Worker::start(&sys.etcd.endpoints(), &sys.namespace, &sys.logs, opts)?);
    }
    Ok((sys, db))
}

/// Creates the jobs that fire every second and append their ticks to `file`.
async fn create_jobs(http: &reqwest::Client, url: &str, jobs: &[String], file: &std::path::Path) -> Result<()> {
    for job in jobs {
        let spec = json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(file)}});
        let resp = http.put(format!("{url}/api/jobs/{job}")).json(&spec).send().await?;
        if !resp.status().is_success() {
            bail!("creating {job}: {}", resp.text().await?);
        }
    }
    Ok(())
}

/// What the fault phase did.
struct Faults {
    start_ms: i64,
    end_ms: i64,
    /// Faults injected, by kind.
    injected: BTreeMap<Fault, usize>,
    /// Each fault's window (from its start to its end), for its cost in missed ticks.
    windows: Vec<(Fault, i64, i64)>,
    /// One-shot ticks of the bursts: (job, tick).
    bursts: Vec<(String, i64)>,
}

/// The ticks the run must account for.
struct Due {
    /// Every whole second strictly inside the fault window, due for every every-second job.
    every_second: Vec<i64>,
    /// The bursts' ticks and the shaped jobs' ticks, each (job, tick).
    one_by_one: Vec<(String, i64)>,
}

impl Faults {
    /// The ticks due in the fault window: every second's, the bursts', the shaped and backfilled jobs'.
    fn due(&self, shaped: &[(String, serde_json::Value)], backfills: &Backfills) -> Result<Due> {
        let (start_ms, end_ms) = (self.start_ms, self.end_ms);
        // Due: every whole second strictly inside the fault window, for every job.
        let every_second: Vec<i64> = ((start_ms / 1000 + 1) * 1000..=end_ms - 1000).step_by(1000).collect();
        // The shaped jobs' ticks, as every worker computes them, are checked like the bursts'.
        let mut one_by_one = self.bursts.clone();
        for (job, spec) in shaped.iter().chain([(BACKFILL_JOB.to_owned(), backfills.spec.clone())].iter()) {
            let schedule = etcron_model::spec::JobSpec::from_value(spec.clone())?.parsed_schedule(job)?;
            let ticks = schedule.upcoming(start_ms, 10_000).into_iter().take_while(|t| *t <= end_ms - 1000);
            one_by_one.extend(ticks.map(|t| (job.clone(), t)));
        }
        Ok(Due { every_second, one_by_one })
    }
}

/// Injects faults one at a time at seeded random times until `--seconds` pass, backfilling between.
async fn run_faults(
    o: &Options,
    sys: &mut System,
    rng: &mut Rng,
    http: &reqwest::Client,
    file: &std::path::Path,
    backfills: &mut Backfills,
) -> Result<Faults> {
    let start_ms = now_ms();
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut windows: Vec<(Fault, i64, i64)> = Vec::new();
    let faults: &[Fault] = if o.production { &PRODUCTION_FAULTS } else { &FAULTS };
    let mut bursts: Vec<(String, i64)> = Vec::new();
    while Instant::now() < deadline {
        tokio::time::sleep(rng.millis(3_000, 8_000)).await;
        if Instant::now() >= deadline {
            break;
        }
        let fault = faults[usize::try_from(rng.below(faults.len() as u64)).unwrap_or(0)];
        let began = now_ms();
        let at = (began - start_ms) as f64 / 1000.0;
        inject(sys, rng, fault, at, http, file, &mut bursts).await?;
        *injected.entry(fault).or_default() += 1;
        windows.push((fault, began, now_ms()));
        backfills.maybe_next(http, sys).await;
    }
    let end_ms = now_ms();
    Ok(Faults { start_ms, end_ms, injected, windows, bursts })
}

/// Injects one fault, `at` seconds into the fault phase, and undoes it (restarts, heals, resumes).
async fn inject(
    sys: &mut System,
    rng: &mut Rng,
    fault: Fault,
    at: f64,
    http: &reqwest::Client,
    file: &std::path::Path,
    bursts: &mut Vec<(String, i64)>,
) -> Result<()> {
    match fault {
        Fault::KillWorker => sys.kill_worker(rng, at).await,
        Fault::StopWorker => sys.stop_worker(rng, at).await,
        Fault::KillEtcdLeader => sys.kill_etcd_leader(rng, at).await,
        Fault::MongoOutage => sys.mongo_outage(rng, at).await,
        Fault::CutEtcdLeader | Fault::CutEtcdFollower => sys.cut_etcd_member(rng, fault, at).await,
        Fault::MongoStepDown | Fault::KillMongoPrimary => sys.mongo_failover(rng, fault, at).await,
        Fault::RollingRestart => sys.rolling_restart(at).await,
        Fault::RestartMaster => sys.restart_master(rng, at).await,
        Fault::StallEtcd => sys.stall_etcd(rng, at).await,
        Fault::StarveCpu => {
            let length = rng.millis(4_000, 10_000);
            println!("{at:7.1}s  two busy-looping processes for {:.1}s", length.as_secs_f64());
            starve_cpu(length).await
        }
        Fault::Burst => burst(sys, at, http, file, bursts).await,
    }
}

/// The faults, each printed as it is injected.
impl System {
    /// SIGKILLs a worker, then restarts it.
    async fn kill_worker(&mut self, rng: &mut Rng, at: f64) -> Result<()> {
        let i = usize::try_from(rng.below(3)).unwrap_or(0);
        println!("{at:7.1}s  SIGKILL worker w{}", i + 1);
        self.workers[i].proc.kill9();
        tokio::time::sleep(rng.millis(500, 3_000)).await;
        self.workers[i].restart()?;
        Ok(())
    }

    /// SIGSTOPs a worker for longer than its session TTL, then SIGCONTs it.
    async fn stop_worker(&mut self, rng: &mut Rng, at: f64) -> Result<()> {
        let i = usize::try_from(rng.below(3)).unwrap_or(0);
        let pause = SESSION_TTL + rng.millis(1_000, 3_000);
        println!("{at:7.1}s  SIGSTOP worker w{} for {:.1}s", i + 1, pause.as_secs_f64());
        self.workers[i].proc.signal(Signal::SIGSTOP)?;
        tokio::time::sleep(pause).await;
        self.workers[i].proc.signal(Signal::SIGCONT)?;
        Ok(())
    }

    /// SIGKILLs the etcd leader, then restarts it and waits for a healthy cluster.
    async fn kill_etcd_leader(&mut self, rng: &mut Rng, at: f64) -> Result<()> {
        let leader = self.etcd.leader().await?;
        println!("{at:7.1}s  SIGKILL etcd leader m{leader}");
        self.etcd.kill(leader);
        tokio::time::sleep(rng.millis(1_000, 4_000)).await;
        self.etcd.restart(leader)?;
        self.etcd.wait_healthy().await?;
        Ok(())
    }

    /// Stops the one `mongod` for a few seconds, then starts it again.
    async fn mongo_outage(&mut self, rng: &mut Rng, at: f64) -> Result<()> {
        let down = rng.millis(2_000, 6_000);
        println!("{at:7.1}s  MongoDB down for {:.1}s", down.as_secs_f64());
        let Db::One(mongo) = &mut self.mongo else { bail!("a MongoDB outage needs the default profile") };
        mongo.stop()?;
        tokio::time::sleep(down).await;
        mongo.restart().await?;
        Ok(())
    }

    /// Cuts the etcd leader from its peers, or a follower from everyone, for a while; then heals it.
    async fn cut_etcd_member(&mut self, rng: &mut Rng, fault: Fault, at: f64) -> Result<()> {
        let leader = self.etcd.leader().await?;
        let (member, cut) = if fault == Fault::CutEtcdLeader {
            (leader, Cut::Peers)
        } else {
            ((leader + 1 + usize::try_from(rng.below(2)).unwrap_or(0)) % 3, Cut::Both)
        };
        let length = rng.millis(4_000, 12_000);
        println!("{at:7.1}s  etcd m{member} cut ({cut:?}) for {:.1}s", length.as_secs_f64());
        self.etcd.cut(member, cut)?;
        tokio::time::sleep(length).await;
        self.etcd.heal(member)?;
        self.etcd.wait_healthy().await?;
        Ok(())
    }

    /// Makes the MongoDB primary step down, or SIGKILLs and restarts it; then waits for a primary.
    async fn mongo_failover(&mut self, rng: &mut Rng, fault: Fault, at: f64) -> Result<()> {
        let Db::Set(set) = &mut self.mongo else { bail!("MongoDB failovers need the production profile") };
        if fault == Fault::MongoStepDown {
            let i = set.step_down().await?;
            println!("{at:7.1}s  MongoDB primary m{i} steps down");
        } else {
            let i = set.primary().await.context("a MongoDB primary")?;
            println!("{at:7.1}s  SIGKILL MongoDB primary m{i}");
            set.kill(i);
            tokio::time::sleep(rng.millis(2_000, 6_000)).await;
            set.restart(i)?;
        }
        set.wait_primary().await?;
        Ok(())
    }

    /// Stops (SIGTERM) and starts again every worker, then every master, one at a time.
    async fn rolling_restart(&mut self, at: f64) -> Result<()> {
        println!("{at:7.1}s  rolling restart of every worker and master");
        for w in &mut self.workers {
            w.proc.signal(Signal::SIGTERM)?;
            if w.proc.wait_exit(Duration::from_secs(30)).is_err() {
                println!("           {} did not stop within 30 s: SIGKILL", w.proc.name);
            }
            w.restart()?;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        for i in 0..self.masters.len() {
            self.masters[i].proc.signal(Signal::SIGTERM)?;
            let _ = self.masters[i].proc.wait_exit(Duration::from_secs(15));
            let m = self.start_master().await?;
            self.masters[i] = m;
        }
        Ok(())
    }

    /// SIGKILLs a master and starts a new one in its place.
    async fn restart_master(&mut self, rng: &mut Rng, at: f64) -> Result<()> {
        let i = usize::try_from(rng.below(2)).unwrap_or(0);
        println!("{at:7.1}s  restart master {}", i + 1);
        self.masters[i].proc.kill9();
        let m = self.start_master().await?;
        self.masters[i] = m;
        Ok(())
    }

    /// SIGSTOPs every etcd member for longer than the session TTL, then SIGCONTs them.
    async fn stall_etcd(&mut self, rng: &mut Rng, at: f64) -> Result<()> {
        let stall = SESSION_TTL * 2 + rng.millis(0, 2_000);
        println!("{at:7.1}s  SIGSTOP every etcd member for {:.1}s", stall.as_secs_f64());
        signal_etcd(&self.etcd, Signal::SIGSTOP)?;
        tokio::time::sleep(stall).await;
        signal_etcd(&self.etcd, Signal::SIGCONT)?;
        self.etcd.wait_healthy().await?;
        Ok(())
    }
}

/// Creates `BURST_JOBS` one-shot jobs due at one instant 4 s ahead; adds their ticks to `bursts`.
async fn burst(
    sys: &System,
    at: f64,
    http: &reqwest::Client,
    file: &std::path::Path,
    bursts: &mut Vec<(String, i64)>,
) -> Result<()> {
    let tick = (now_ms() / 1000 + 4) * 1000;
    let n = bursts.len();
    println!("{at:7.1}s  {BURST_JOBS} one-shot jobs due at {tick}");
    let at = etcron_model::rfc3339_ms(tick);
    for k in 0..BURST_JOBS {
        let job = format!("burst-{n:05}-{k:03}");
        let spec = json!({"schedule": format!("@at {at}"), "task": {"kind": "shell", "command": record_command(file)}});
        // A master may be restarting: the other one takes it.
        let resp = http.put(format!("{}/api/jobs/{job}", sys.url(k))).json(&spec).send().await;
        match resp {
            Ok(r) if r.status().is_success() => bursts.push((job, tick)),
            Ok(r) => println!("           creating {job}: {}", r.status()),
            Err(e) => println!("           creating {job}: {e}"),
        }
    }
    Ok(())
}

/// Everything the run found, for the printout and the verdict.
struct Outcome {
    injected: BTreeMap<Fault, usize>,
    /// Every-second ticks recorded missed in each kind of fault's windows.
    cost: BTreeMap<Fault, usize>,
    due_total: usize,
    report: Report,
    /// Backfills created, and their items.
    backfills: usize,
    backfill_items: usize,
    /// The backfills never `done`.
    unfinished: Vec<String>,
    /// Alerts delivered by event, and those raised twice.
    alerted: BTreeMap<String, usize>,
    alerted_twice: Vec<String>,
}

impl Outcome {
    /// Prints the faults with their cost, ticks by fate, backfills, alerts and broken promises.
    fn print(&self) {
        let report = &self.report;
        println!("\nfaults injected (each one's cost: every-second ticks recorded missed from its start to 5 s after its end, or to the next fault):");
        for (fault, n) in &self.injected {
            println!("  {fault:?}: {n}, {} ticks missed", self.cost.get(fault).copied().unwrap_or(0));
        }
        println!("ticks due:                      {}", self.due_total);
        println!("ticks run:                      {}", report.ran);
        println!("ticks recorded missed:          {}", report.missed);
        println!("ticks recorded lost:            {}", report.lost);
        println!("ticks recorded skipped:         {}", report.skipped);
        println!("duplicates (job,tick,attempt):  {}", report.duplicates.len());
        println!("ticks neither run nor recorded: {}", report.unaccounted.len());
        println!("execution records lost:         {}", report.records_lost.len());
        println!("backfills (items):              {} ({})", self.backfills, self.backfill_items);
        println!("backfills never done:           {}", self.unfinished.len());
        println!("alerts delivered:               {:?}", self.alerted);
        println!("alerts raised twice:            {}", self.alerted_twice.len());
        for b in self.unfinished.iter().take(20) {
            println!("  not done: {b}");
        }
        for (what, list) in [
            ("duplicate", &report.duplicates),
            ("unaccounted", &report.unaccounted),
            ("record lost", &report.records_lost),
            ("alert", &self.alerted_twice),
        ] {
            for item in list.iter().take(20) {
                println!("  {what}: {item}");
            }
        }
    }

    /// The run's figures as one JSON object.
    fn summary(&self, o: &Options) -> serde_json::Value {
        let report = &self.report;
        json!({
            "seed": o.seed, "seconds": o.seconds, "jobs": o.jobs,
            "faults": self.injected.iter().map(|(f, n)| (format!("{f:?}"), n)).collect::<BTreeMap<_, _>>(),
            "missed_by_fault": self.cost.iter().map(|(f, n)| (format!("{f:?}"), n)).collect::<BTreeMap<_, _>>(),
            "ticks_due": self.due_total, "ticks_run": report.ran, "missed": report.missed, "lost": report.lost,
            "skipped": report.skipped,
            "duplicates": report.duplicates.len(), "unaccounted": report.unaccounted.len(),
            "records_lost": report.records_lost.len(),
            "backfills": self.backfills, "backfill_items": self.backfill_items, "backfills_not_done": self.unfinished.len(),
            "alerts": self.alerted, "alerts_twice": self.alerted_twice.len(),
        })
    }

    /// Whether any promise was broken (etcd partitions costing over one tick per job are printed).
    fn broken(&self, jobs: usize) -> bool {
        let report = &self.report;
        // One etcd member lost costs nothing (docs/operations.md): at most one tick of each job,
        // for a fault's effect that spills past its window.
        let partitions = [Fault::CutEtcdLeader, Fault::CutEtcdFollower];
        let partition_cost: usize = partitions.iter().filter_map(|f| self.cost.get(f)).sum();
        let partitions_over = partition_cost > jobs;
        if partitions_over {
            println!("  etcd member partitions cost {partition_cost} missed ticks (more than one per job)");
        }
        partitions_over
            || !report.duplicates.is_empty()
            || !report.unaccounted.is_empty()
            || !report.records_lost.is_empty()
            || !self.unfinished.is_empty()
            || !self.alerted_twice.is_empty()
    }
}

/// The job whose `skip_calendars` lists every day of the run.
const SKIPPING_JOB: &str = "chaos-days-off";

/// The `concurrency: queue` job: runs last 1.5 s and ticks come every second, so ticks wait in
/// its queue (up to 3) and the rest are skipped, naming the queue.
const QUEUE_JOB: &str = "chaos-queue";
/// The root of the chaos run's workflow (`workflow_jobs`).
const WORKFLOW_ROOT: &str = "chaos-wf-root";

/// The job that is never run: alerted `stale` once.
const STALE_JOB: &str = "chaos-stale";

/// Alerts delivered (distinct deliveries: a retry repeats its delivery id), by event, and the
/// (execution or occurrence, event) pairs alerted more than once.
fn alerts_report(received: &[etcron_tests::webhook::Received]) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut deliveries = BTreeSet::new();
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    for q in received {
        if !deliveries.insert(q.header("x-etcron-delivery").unwrap_or_default().to_owned()) {
            continue;
        }
        let body = q.json();
        let about = body["alert"]["execution_id"].as_str().unwrap_or(body["job"].as_str().unwrap_or_default());
        *per.entry((about.to_owned(), body["event"].as_str().unwrap_or_default().to_owned())).or_default() += 1;
    }
    let mut by_event: BTreeMap<String, usize> = BTreeMap::new();
    for ((_, event), n) in &per {
        *by_event.entry(event.clone()).or_default() += n;
    }
    let twice = per.iter().filter(|(_, n)| **n > 1).map(|((id, e), n)| format!("{id} alerted {e} {n} times")).collect();
    (by_event, twice)
}

/// The paused job whose ticks are backfilled while the faults go on.
const BACKFILL_JOB: &str = "chaos-backfill";

/// Time between two backfills of `BACKFILL_JOB`.
const BACKFILL_EVERY: Duration = Duration::from_secs(20);

/// The backfills of `BACKFILL_JOB` made during the run.
struct Backfills {
    spec: serde_json::Value,
    /// Backfills created, by id.
    ids: Vec<String>,
    /// Their items, in all.
    items: usize,
    /// Where the next backfill's range starts.
    from_ms: i64,
    next_at: Instant,
    rounds: usize,
}

impl Backfills {
    /// Creates the job, paused (its ticks are recorded `skipped` until backfilled).
    async fn start(http: &reqwest::Client, url: &str, file: &std::path::Path) -> Result<Self> {
        let spec = json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(file)}});
        let resp = http.put(format!("{url}/api/jobs/{BACKFILL_JOB}")).json(&spec).send().await?;
        if !resp.status().is_success() {
            bail!("creating {BACKFILL_JOB}: {}", resp.text().await?);
        }
        let resp = http.post(format!("{url}/api/jobs/{BACKFILL_JOB}/pause")).json(&json!({})).send().await?;
        if !resp.status().is_success() {
            bail!("pausing {BACKFILL_JOB}: {}", resp.text().await?);
        }
        let now = now_ms();
        Ok(Self { spec, ids: Vec::new(), items: 0, from_ms: now, next_at: Instant::now() + BACKFILL_EVERY, rounds: 0 })
    }

    /// Every `BACKFILL_EVERY`: backfills the ticks since the last range up to 2 s ago (the
    /// newest may still be claimed by the schedule), every other time twice at once.
    async fn maybe_next(&mut self, http: &reqwest::Client, sys: &System) {
        if Instant::now() < self.next_at {
            return;
        }
        self.next_at = Instant::now() + BACKFILL_EVERY;
        self.rounds += 1;
        let to_ms = now_ms() - 2_000;
        let body = json!({"from": etcron_model::rfc3339_ms(self.from_ms), "to": etcron_model::rfc3339_ms(to_ms),
                          "which": "missing", "overlap": "parallel", "max_parallel": 3, "max_runs": 500});
        let post = |i: usize| {
            let request = http.post(format!("{}/api/jobs/{BACKFILL_JOB}/backfill", sys.url(i))).json(&body).send();
            async move {
                match request.await {
                    Ok(r) => {
                        let status = r.status();
                        let v: serde_json::Value = r.json().await.unwrap_or_default();
                        (status.as_u16(), v)
                    }
                    Err(e) => (0, json!({ "error": e.to_string() })),
                }
            }
        };
        let answers = if self.rounds.is_multiple_of(2) {
            let (a, b) = tokio::join!(post(0), post(1));
            vec![a, b]
        } else {
            vec![post(self.rounds).await]
        };
        let mut made = false;
        for (status, v) in answers {
            match (status, v["id"].as_str()) {
                (201, Some(id)) => {
                    println!("           backfill {id}: {} ticks", v["counts"]["total"]);
                    self.items += usize::try_from(v["counts"]["total"].as_u64().unwrap_or(0)).unwrap_or(0);
                    self.ids.push(id.to_owned());
                    made = true;
                }
                _ => println!("           backfill refused ({status}): {v}"),
            }
        }
        if made {
            self.from_ms = to_ms + 1;
        }
    }

    /// Waits until every backfill is `done`; answers those that are not.
    async fn wait_done(&self, http: &reqwest::Client, sys: &System, deadline: Instant) -> Vec<String> {
        loop {
            let mut unfinished = Vec::new();
            for id in &self.ids {
                let url = format!("{}/api/jobs/{BACKFILL_JOB}/backfills/{id}", sys.url(0));
                let v: serde_json::Value = match http.get(url).send().await {
                    Ok(r) => r.json().await.unwrap_or_default(),
                    Err(_) => serde_json::Value::Null,
                };
                if v["state"] != "done" {
                    unfinished.push(format!("{id}: {} {}", v["state"], v["counts"]));
                }
            }
            if unfinished.is_empty() || Instant::now() > deadline {
                return unfinished;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// Creates the calendar and the jobs with a shaped schedule; answers each job with its spec.
async fn shaped_jobs(
    http: &reqwest::Client,
    url: &str,
    file: &std::path::Path,
    alerts: &Receiver,
) -> Result<Vec<(String, serde_json::Value)>> {
    let today = chrono::Utc::now().date_naive();
    let days =
        json!({"from": (today - chrono::Days::new(1)).to_string(), "to": (today + chrono::Days::new(1)).to_string()});
    let resp = http.put(format!("{url}/api/calendars/chaos-days")).json(&json!({"ranges": [days]})).send().await?;
    if !resp.status().is_success() {
        bail!("creating the calendar: {}", resp.text().await?);
    }
    let task = json!({"kind": "shell", "command": record_command(file)});
    let jobs = vec![
        ("chaos-jitter".to_owned(), json!({"schedule": "* * * * * *", "jitter": "800ms", "task": task})),
        ("chaos-merged".to_owned(), json!({"schedules": ["*/2 * * * * *", "*/3 * * * * *"], "task": task})),
        (SKIPPING_JOB.to_owned(), json!({"schedule": "* * * * * *", "skip_calendars": ["chaos-days"], "task": task})),
        (
            QUEUE_JOB.to_owned(),
            json!({"schedule": "* * * * * *", "concurrency": "queue", "max_queue": 3,
                   "task": {"kind": "shell", "command": format!("{}; sleep 1.5", record_command(file))},
                   "alerts": {"late_start": "1s", "max_duration": "1s"},
                   "notify": [{"url": alerts.at("/alerts"), "on": ["late", "long_running"]}]}),
        ),
    ];
    let pool = http.put(format!("{url}/api/pools/chaos-pool")).json(&json!({"slots": 2})).send().await?;
    if !pool.status().is_success() {
        bail!("creating the pool: {}", pool.text().await?);
    }
    let pooled = |priority: u32, slots: u32, schedule: &str| {
        json!({"schedule": schedule, "pool": "chaos-pool", "pool_slots": slots, "priority": priority,
               "start_deadline": "4s",
               "task": {"kind": "shell", "command": format!("{}; sleep 0.6", record_command(file))}})
    };
    let mut jobs = jobs;
    jobs.extend([
        ("chaos-pool-hi".to_owned(), pooled(90, 1, "* * * * * *")),
        ("chaos-pool-lo".to_owned(), pooled(10, 1, "* * * * * *")),
        ("chaos-pool-wide".to_owned(), pooled(50, 2, "*/2 * * * * *")),
    ]);
    jobs.push((WORKFLOW_ROOT.to_owned(), workflow_jobs(http, url, file).await?));
    // Never succeeds (and never runs: `@yearly`): one `stale` window for the whole run.
    let stale = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "false"},
                       "alerts": {"no_success_within": "5s"},
                       "notify": [{"url": alerts.at("/alerts"), "on": ["stale"]}]});
    let resp = http.put(format!("{url}/api/jobs/{STALE_JOB}")).json(&stale).send().await?;
    if !resp.status().is_success() {
        bail!("creating {STALE_JOB}: {}", resp.text().await?);
    }
    for (job, spec) in &jobs {
        let resp = http.put(format!("{url}/api/jobs/{job}")).json(spec).send().await?;
        if !resp.status().is_success() {
            bail!("creating {job}: {}", resp.text().await?);
        }
    }
    Ok(jobs)
}

/// A workflow rooted in a job every 2 s: `chaos-wf-a` and `chaos-wf-b` after it, `chaos-wf-join`
/// after both (fan-in). The children write their execution ids to `workflow.log` beside
/// `file`; the root's spec is answered (its ticks are checked like the other shaped jobs').
async fn workflow_jobs(http: &reqwest::Client, url: &str, file: &std::path::Path) -> Result<serde_json::Value> {
    let log = file.with_file_name("workflow.log");
    let step = |after: &[&str]| {
        json!({"schedule": "@yearly", "after": after,
               "task": {"kind": "shell", "command": format!("echo \"$ETCRON_EXECUTION_ID\" >> {}", log.display())}})
    };
    let root = json!({"schedule": "*/2 * * * * *", "task": {"kind": "shell", "command": format!(
        "{}; echo '::etcron result {{\"n\": 1}}'", record_command(file))}});
    for (job, spec) in [
        (WORKFLOW_ROOT, root.clone()),
        ("chaos-wf-a", step(&[WORKFLOW_ROOT])),
        ("chaos-wf-b", step(&[WORKFLOW_ROOT])),
        ("chaos-wf-join", step(&["chaos-wf-a", "chaos-wf-b"])),
    ] {
        let resp = http.put(format!("{url}/api/jobs/{job}")).json(&spec).send().await?;
        if !resp.status().is_success() {
            bail!("creating {job}: {}", resp.text().await?);
        }
    }
    Ok(root)
}

/// Workflow steps that ran twice (the same execution id, attempt included), and how many joins ran.
fn workflow_report(file: &std::path::Path) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(file.with_file_name("workflow.log")).unwrap_or_default();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for id in text.lines() {
        *seen.entry(id.trim()).or_default() += 1;
    }
    let twice =
        seen.iter().filter(|(_, n)| **n > 1).map(|(id, n)| format!("workflow step {id} ran {n} times")).collect();
    (twice, seen.keys().filter(|id| id.starts_with("chaos-wf-join@")).count())
}

/// Every-second ticks recorded `missed` in each fault's window (its start to 5 s after its end,
/// or to the next fault's start if that comes first), summed by kind of fault.
async fn fault_costs(
    store: &MongoStore,
    jobs: &[String],
    windows: &[(Fault, i64, i64)],
) -> Result<BTreeMap<Fault, usize>> {
    let mut cost: BTreeMap<Fault, usize> = BTreeMap::new();
    let next_starts = windows.iter().skip(1).map(|w| w.1).chain([i64::MAX]);
    for (&(fault, from, to), next) in windows.iter().zip(next_starts) {
        let to = (to + 5_000).min(next) - 5_000;
        let mut n = 0;
        for job in jobs {
            let search = Search {
                job: Some(job.clone()),
                statuses: vec![etcron_model::record::Status::Missed],
                since_ms: Some(from),
                until_ms: Some(to + 5_000),
                limit: etcron_common::store::MAX_LIMIT,
                ..Search::default()
            };
            n += store.search(&search).await.map_err(|e| anyhow::anyhow!("reading records: {e}"))?.executions.len();
        }
        *cost.entry(fault).or_default() += n;
    }
    Ok(cost)
}

struct Report {
    ran: usize,
    missed: usize,
    lost: usize,
    /// Ticks of `SKIPPING_JOB` and `BACKFILL_JOB` recorded `skipped`.
    skipped: usize,
    duplicates: Vec<String>,
    unaccounted: Vec<String>,
    records_lost: Vec<String>,
}

/// Compares what the tasks wrote with the records in MongoDB.
async fn check(
    store: &MongoStore,
    fired: &[Fired],
    jobs: &[String],
    due: &[i64],
    bursts: &[(String, i64)],
    start_ms: i64,
    end_ms: i64,
) -> Result<Report> {
    let mut per_attempt: BTreeMap<(String, i64, u32), usize> = BTreeMap::new();
    for f in fired {
        *per_attempt.entry((f.job.clone(), f.scheduled_ms, f.attempt)).or_default() += 1;
    }
    let duplicates = per_attempt
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|((j, t, a), n)| format!("{j}@{t}#{a} ran {n} times"))
        .collect();
    let ran: BTreeSet<(String, i64)> = fired.iter().map(|f| (f.job.clone(), f.scheduled_ms)).collect();
    // Every record of the window (and a margin for late catch-up runs), all pages.
    let mut records: BTreeMap<String, etcron_model::record::Status> = BTreeMap::new();
    let mut by_tick: BTreeMap<(String, i64), Vec<etcron_model::record::Status>> = BTreeMap::new();
    let burst_jobs: BTreeSet<&String> = bursts.iter().map(|(j, _)| j).collect();
    for job in jobs.iter().chain(burst_jobs) {
        let mut search = Search {
            job: Some(job.clone()),
            since_ms: Some(start_ms - 5_000),
            until_ms: Some(end_ms + 5_000),
            limit: etcron_common::store::MAX_LIMIT,
            ..Search::default()
        };
        loop {
            let page = match store.search(&search).await {
                Ok(p) => p,
                Err(e) => bail!("reading records: {e}"),
            };
            for r in &page.executions {
                records.insert(r.id.to_string(), r.status);
                by_tick.entry((r.job.clone(), r.scheduled_ms)).or_default().push(r.status);
            }
            match page.next_cursor {
                Some(c) => {
                    search.cursor = Some(etcron_common::store::Cursor::decode(&c).map_err(|e| anyhow::anyhow!("{e}"))?)
                }
                None => break,
            }
        }
    }
    use etcron_model::record::Status;
    let (mut ran_n, mut missed, mut lost, mut skipped, mut unaccounted) = (0, 0, 0, 0, Vec::new());
    let every_second = jobs.iter().flat_map(|job| due.iter().map(move |&t| (job.clone(), t)));
    for tick in every_second.chain(bursts.iter().cloned()) {
        let statuses = by_tick.get(&tick).cloned().unwrap_or_default();
        // Every day of `SKIPPING_JOB` is listed: its ticks are skipped (or missed, lost), never run.
        // `BACKFILL_JOB` is paused: its ticks are skipped, or run by a backfill. `QUEUE_JOB`'s
        // ticks run one after another, or are skipped when its queue is full.
        let skipping = tick.0 == SKIPPING_JOB;
        let may_skip = skipping || tick.0 == BACKFILL_JOB || tick.0 == QUEUE_JOB;
        if skipping && ran.contains(&tick) {
            unaccounted.push(format!("{}@{} ran on a day its skip calendar lists", tick.0, tick.1));
        } else if ran.contains(&tick) {
            ran_n += 1;
        } else if may_skip && statuses.contains(&Status::Skipped) {
            skipped += 1;
        } else if statuses.contains(&Status::Missed) {
            missed += 1;
        } else if statuses.contains(&Status::Lost) {
            lost += 1;
        } else {
            unaccounted.push(format!("{}@{} (records: {statuses:?})", tick.0, tick.1));
        }
    }
    let records_lost = per_attempt
        .keys()
        .filter(|(_, t, _)| *t > start_ms - 5_000 && *t < end_ms + 5_000)
        .map(|(j, t, a)| format!("{j}@{t}#{a}"))
        .filter(|id| !records.contains_key(id))
        .collect();
    Ok(Report { ran: ran_n, missed, lost, skipped, duplicates, unaccounted, records_lost })
}
