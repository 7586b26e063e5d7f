//! One worker, wired: its context, session, watchers, scheduler and shutdown, from the etcd
//! connections and the record store it is given. `main.rs` runs one with real connections; the
//! simulation of the fire path (`worker/tests/sim.rs`) runs several in one process over the
//! model etcd, with simulated tasks and no MongoDB.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use etcd_client::PutOptions;
use etcron_common::backoff::Backoff;
use etcron_common::claim::{RetentionLeases, MIN_RETENTION, RETENTION_REUSE};
use etcron_common::etcd::{request, EtcdError};
use etcron_common::session::Session;
use etcron_common::store::MongoStore;
use etcron_model::keys::{Key, Keys};
use etcron_model::stored::WorkerInfo;
use tokio::sync::{mpsc, watch};

use crate::cluster::membership::Members;
use crate::cluster::watcher::{mirror, Kv, Mirror, Update};
use crate::config::Config;
use crate::context::{Context, Registry};
use crate::scheduler::Scheduler;
use crate::tasks::shell::StopReason;

/// How often the registration is refreshed when the running count changed.
const REGISTRATION_REFRESH: Duration = Duration::from_secs(2);

/// Most time shutdown waits for claim closes etcd has not taken yet.
const CLOSE_ON_SHUTDOWN: Duration = Duration::from_secs(30);

/// Most time shutdown waits for the last trace spans to be exported.
const TRACE_FLUSH_ON_SHUTDOWN: Duration = Duration::from_secs(5);

/// What a worker runs on besides its configuration.
pub struct Parts {
    /// Claims, watches, closes.
    pub client: etcd_client::Client,
    /// The session's own connection: its keep-alives never queue behind claims and watches.
    pub session_client: etcd_client::Client,
    /// Where records go; `None` keeps them in the journal and the spool (the simulation).
    pub store: Option<MongoStore>,
    /// Runs every task instead of the real ones (the simulation).
    pub simulated: Option<Arc<dyn crate::context::simulated::Tasks>>,
    /// The handlers of the process embedding this worker (`etcron-sdk`): it is then an
    /// executor, racing for those handlers' jobs only.
    pub handlers: Option<Arc<dyn crate::tasks::handler::Handlers>>,
}

/// Runs the worker until `shutdown` resolves, then drains it: no new ticks, running tasks get
/// the shutdown grace, closes etcd has not taken yet get [`CLOSE_ON_SHUTDOWN`], and the last
/// records are flushed.
///
/// # Errors
/// When its data dir or its listeners cannot be opened.
pub async fn run(config: Config, parts: Parts, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let Parts { client, session_client, store, simulated, handlers } = parts;
    let built = build(&config, client, store, Runners { simulated, handlers }).await?;
    let ctx = built.ctx.clone();
    start_duties(&ctx, built.owed, built.previous_session).await?;
    let running = start_watches(&ctx, session_client, built.lease_tx, built.again);
    shutdown.await;
    drain(&ctx, running).await;
    let _ = built.sink_stop.send(true);
    let _ = built.sink_task.await;
    // The last spans (the records' among them) go before the process does.
    ctx.tracer.flush(TRACE_FLUSH_ON_SHUTDOWN).await;
    tracing::info!(namespace = %config.namespace, "etcron-worker stopped");
    Ok(())
}

/// Hands each deadline of `session` on to the keepers (the shared page, or the simulation's
/// tasks) until the session ends. The first one is handed on before this returns, so before
/// the lease reaches anything that claims: a task started under the new lease is never judged
/// by the keepers against the deadline of the session before it (long passed: they would end
/// it at once, and the worker, which never saw that deadline lapse, would record it failed).
fn publish_deadlines(ctx: &Arc<Context>, session: &Session) {
    let mut deadlines = session.deadlines();
    publish_deadline(ctx, *deadlines.borrow_and_update());
    let ctx = ctx.clone();
    etcron_common::task::spawn(async move {
        while deadlines.changed().await.is_ok() {
            let until = *deadlines.borrow_and_update();
            publish_deadline(&ctx, until);
        }
    });
}

fn publish_deadline(ctx: &Context, until: tokio::time::Instant) {
    ctx.session_deadline.publish(until, |until| match &ctx.simulated {
        Some(tasks) => tasks.session_deadline(&ctx.config.worker_id, until),
        None => {
            if let Some(slot) = &ctx.keeper_slot {
                slot.set_deadline(until);
            }
        }
    });
}

/// A worker's [`Context`] without its watches, loops or session supervisor: the test boundary
/// for the fire path's phases (`crate::fire`) against a real etcd, in one process. Records stay
/// in the journal and the spool (no MongoDB); tasks run for real. The test grants the session
/// and fills the member list itself.
pub struct Standalone {
    pub ctx: Arc<Context>,
    lease: watch::Sender<Option<i64>>,
    sink_stop: watch::Sender<bool>,
    sink_task: tokio::task::JoinHandle<()>,
}

impl Standalone {
    /// Opens `config.data_dir` and builds the context, as a worker process does before it starts
    /// its loops.
    ///
    /// # Errors
    /// When the data dir or the listeners cannot be opened.
    pub async fn build(config: &Config, client: etcd_client::Client) -> anyhow::Result<Self> {
        let built = build(config, client, None, Runners { simulated: None, handlers: None }).await?;
        Ok(Self { ctx: built.ctx, lease: built.lease_tx, sink_stop: built.sink_stop, sink_task: built.sink_task })
    }

    /// Makes `session` this worker's session: its lease carries the running markers, and its
    /// deadlines reach the keepers.
    pub fn hold_session(&self, session: &Session) {
        publish_deadlines(&self.ctx, session);
        let _ = self.lease.send(Some(session.lease_id()));
    }

    /// Stops the record sink after it has written what it holds to the journal.
    pub async fn stop(self) {
        let _ = self.sink_stop.send(true);
        let _ = self.sink_task.await;
    }
}

/// A worker's context, and what its start and shutdown need besides.
struct Built {
    ctx: Arc<Context>,
    /// The session supervisor's side of `Context::lease`.
    lease_tx: watch::Sender<Option<i64>>,
    /// Run requests to race for again (`Context::race_again`), for the scheduler.
    again: mpsc::UnboundedReceiver<String>,
    /// Departures a previous life of this worker owed, and its session if it ended uncleanly.
    owed: Vec<crate::cluster::departures::Departure>,
    previous_session: Option<i64>,
    sink_stop: watch::Sender<bool>,
    sink_task: tokio::task::JoinHandle<()>,
}

/// What runs tasks besides the worker's own shell, HTTP and gRPC runners ([`Parts`]).
struct Runners {
    simulated: Option<Arc<dyn crate::context::simulated::Tasks>>,
    handlers: Option<Arc<dyn crate::tasks::handler::Handlers>>,
}

/// Opens the worker's data dir (spool, provisional records, owed departures), starts its
/// notifier, record sink and live-output listeners, and builds the shared [`Context`].
async fn build(
    config: &Config,
    client: etcd_client::Client,
    store: Option<MongoStore>,
    Runners { simulated, handlers }: Runners,
) -> anyhow::Result<Built> {
    let keys = Keys::new(&config.namespace).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = config.data_dir.display();
    let spool = crate::context::log_sink::Spool::open(&config.data_dir)
        .with_context(|| format!("opening the record spool in {dir}"))?;
    let provisional = crate::context::provisional::Provisional::open(&config.data_dir)
        .with_context(|| format!("opening the provisional records in {dir}"))?;
    let (departures, owed, previous_session) = crate::cluster::departures::Owed::open(&config.data_dir)
        .with_context(|| format!("opening the owed departures in {dir}"))?;
    let (sink_stop, sink_stop_rx) = watch::channel(false);
    let notifier = crate::notify::notifier::Notifier::start(
        config.notify.clone(),
        client.clone(),
        keys.clone(),
        store.clone(),
        config.worker_id.clone(),
    );
    let (sink, sink_task) = crate::context::log_sink::LogSink::start(store, spool, sink_stop_rx)
        .with_context(|| format!("opening the record journal in {dir}"))?;
    let hostname = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
    let tracer = tracer(config, &hostname);
    let live = Arc::new(crate::tasks::live_output::LiveOutputs::default());
    let endpoints = listen(config, &live, &hostname).await?;
    let (lease_tx, lease_rx) = watch::channel(None);
    let (race_again, again) = mpsc::unbounded_channel();
    let taken = Arc::new(crate::cluster::taken::Taken::default());
    let keeper_slot = keeper_slot(simulated.is_some())?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        keys: keys.clone(),
        hostname,
        members: Members::default(),
        lease: lease_rx,
        session_deadline: crate::tasks::keeper::SessionDeadline::default(),
        keeper_slot,
        retention: RetentionLeases::new(client.clone(), MIN_RETENTION, RETENTION_REUSE),
        long_leases: Arc::new(RetentionLeases::new(
            client.clone(),
            etcron_model::spec::alerts::ALERT_MEMORY,
            std::time::Duration::from_secs(300),
        )),
        registry: Registry::default(),
        batchers: crate::context::batcher::Batchers::start(client, keys, config.worker_id.clone(), taken.clone()),
        taken,
        closing: crate::context::Outstanding::default(),
        slots: Arc::new(crate::context::slots::Slots::new(config.capacity as usize)),
        sink,
        provisional,
        departures,
        jobs: crate::context::JobTable::default(),
        paused: crate::context::PauseTable::default(),
        calendars: crate::cluster::calendars::CalendarTable::default(),
        pools: crate::cluster::pools::PoolTable::default(),
        backfills: crate::context::BackfillCache::default(),
        state_marks: crate::context::StateMarks::default(),
        unsettled: crate::context::unsettled::Unsettled::default(),
        notifier,
        config: config.clone(),
        live,
        task_env: crate::tasks::shell::inherited_env(&config.task_env_passthrough),
        local_output_url: Some(endpoints.progress_url),
        output_endpoint: Some(crate::context::OutputEndpoint {
            url: endpoints.output_url,
            token: endpoints.output_token,
        }),
        simulated,
        handler_names: handlers.as_ref().map(|h| h.names()).unwrap_or_default(),
        handlers,
        race_again,
        task_network: Arc::new(task_network(config, &endpoints.bound)),
        tracer,
    });
    Ok(Built { ctx, lease_tx, again, owed, previous_session, sink_stop, sink_task })
}

/// The node's own slot of the keepers' page (its tasks are judged by its session alone); none
/// for a simulated node, which has no keepers.
fn keeper_slot(simulated: bool) -> anyhow::Result<Option<crate::tasks::keeper::Slot>> {
    if simulated {
        return Ok(None);
    }
    let slots = crate::tasks::keeper::SLOTS;
    let full = || format!("every one of the keepers' {slots} session slots is taken by a node of this process");
    crate::tasks::keeper::Slot::take().with_context(full).map(Some)
}

/// The worker's tracer, its spans naming it: off without `otlp_endpoint` (no exporter runs).
fn tracer(config: &Config, hostname: &str) -> etcron_common::trace::Tracer {
    let resource = [
        ("service.name", "etcron-worker".to_owned()),
        ("service.version", etcron_model::VERSION.to_owned()),
        ("service.instance.id", config.worker_id.clone()),
        ("host.name", hostname.to_owned()),
    ];
    etcron_common::trace::Tracer::start(config.tracing.as_ref(), &resource)
}

/// Where the worker's own listeners are: followers' live output, and tasks' progress reports.
struct Endpoints {
    output_url: String,
    output_token: String,
    progress_url: String,
    /// Both listeners' bound addresses (tasks may not connect to them).
    bound: [std::net::SocketAddr; 2],
}

/// Binds the live-output server on `output_listen`, and the progress listener on its address
/// (any free port): followers holding the output server's connections never starve reports.
async fn listen(
    config: &Config,
    live: &Arc<crate::tasks::live_output::LiveOutputs>,
    hostname: &str,
) -> anyhow::Result<Endpoints> {
    let output_token = random_token();
    let bound = crate::tasks::live_output::serve(config.output_listen, live.clone(), output_token.clone())
        .await
        .with_context(|| format!("output_listen: binding {}", config.output_listen))?;
    let progress_addr = std::net::SocketAddr::new(config.output_listen.ip(), 0);
    let progress_bound = crate::tasks::live_output::serve_progress(progress_addr, live.clone())
        .await
        .with_context(|| format!("progress listener: binding {progress_addr} (the address of output_listen)"))?;
    let output_url = config.output_url.clone().unwrap_or_else(|| {
        if bound.ip().is_unspecified() {
            format!("http://{hostname}:{}", bound.port())
        } else {
            format!("http://{bound}")
        }
    });
    let progress_url = if progress_bound.ip().is_unspecified() {
        format!("http://127.0.0.1:{}", progress_bound.port())
    } else {
        format!("http://{progress_bound}")
    };
    Ok(Endpoints { output_url, output_token, progress_url, bound: [bound, progress_bound] })
}

/// The loops that need no watch: the sweep and provisional loops, owed departures (this worker's previous
/// life's too), stale alerts, metrics; then the start-up log lines.
async fn start_duties(
    ctx: &Arc<Context>,
    owed: Vec<crate::cluster::departures::Departure>,
    previous_session: Option<i64>,
) -> anyhow::Result<()> {
    let config = &ctx.config;
    etcron_common::task::spawn(crate::ledger::catchup::sweep_loop(ctx.clone()));
    etcron_common::task::spawn(crate::fire::not_run::provisional_loop(ctx.clone()));
    crate::ledger::loss::resume_owed(ctx, owed);
    if let Some(registered_at) = previous_session {
        // Our previous life ended uncleanly: its session's departure is ours to owe as well.
        let departed = crate::cluster::membership::Departed::After(registered_at);
        etcron_common::task::spawn(crate::ledger::loss::departed(ctx.clone(), config.worker_id.clone(), departed));
    }
    etcron_common::task::spawn(crate::fire::alerts::stale_loop(ctx.clone()));
    crate::metrics::init(config.capacity);
    crate::tasks::network::init_metrics();
    if config.metrics_node {
        crate::metrics_server::count(ctx);
    }
    if let Some(addr) = config.metrics_listen {
        crate::metrics_server::serve(addr).with_context(|| format!("metrics_listen: binding {addr}"))?;
    }
    tracing::info!(worker_id = %config.worker_id, namespace = %config.namespace, endpoints = ?config.etcd_endpoints, capacity = config.capacity, "etcron-worker starting");
    if !crate::failpoint::armed().is_empty() {
        tracing::warn!(failpoints = ?crate::failpoint::armed(), "test-only failpoints armed ({}): this worker kills itself when it reaches one", crate::failpoint::ENV);
    }
    if config.shell_task_network.isolated() {
        tracing::info!(shell_task_network = %config.shell_task_network, "task network isolation is on: each shell task runs in a network namespace of its own (only its loopback); its progress reports go through its output lines");
    }
    Ok(())
}

/// What runs until shutdown: the session supervisor and the scheduler, and the switches that
/// stop them (`sched_stop` ends scheduling; `all_stop` the watchers and the session).
struct Running {
    supervisor: tokio::task::JoinHandle<Option<Session>>,
    scheduler: tokio::task::JoinHandle<()>,
    sched_stop: watch::Sender<bool>,
    all_stop: watch::Sender<bool>,
}

/// Starts the mirrors of etcd (workers and their departures, cordons, claims, kills; jobs, run
/// requests, pauses and calendars for the scheduler), the session supervisor and the scheduler.
fn start_watches(
    ctx: &Arc<Context>,
    session_client: etcd_client::Client,
    lease_tx: watch::Sender<Option<i64>>,
    again: mpsc::UnboundedReceiver<String>,
) -> Running {
    let (client, keys) = (&ctx.client, &ctx.keys);
    let (sched_stop_tx, sched_stop) = watch::channel(false);
    let (all_stop_tx, all_stop) = watch::channel(false);

    let (workers_tx, workers_rx) = mpsc::channel(256);
    etcron_common::task::spawn(mirror(client.clone(), keys.workers_prefix(), "workers", workers_tx, all_stop.clone()));
    let (departures_tx, mut departures) = mpsc::unbounded_channel();
    etcron_common::task::spawn(ctx.members.clone().follow(keys.clone(), workers_rx, departures_tx));
    let (cordons_tx, cordons_rx) = mpsc::channel(64);
    etcron_common::task::spawn(mirror(client.clone(), keys.cordon_prefix(), "cordon", cordons_tx, all_stop.clone()));
    etcron_common::task::spawn(ctx.members.clone().follow_cordons(keys.clone(), cordons_rx));
    let lost_ctx = ctx.clone();
    etcron_common::task::spawn(async move {
        // Our own departures too: a session of ours that expired (paused, cut off) or a dead
        // earlier instance's that we revoked. Alone in the cluster, nobody else would account
        // for what ran under it; with others, the claim keys let only one of us do it.
        while let Some((worker, departed)) = departures.recv().await {
            etcron_common::task::spawn(crate::ledger::loss::departed(lost_ctx.clone(), worker, departed));
        }
    });
    etcron_common::task::spawn(crate::cluster::taken::follow(
        client.clone(),
        keys.claims_prefix(),
        ctx.taken.clone(),
        all_stop.clone(),
    ));
    let (pools_tx, pools_rx) = mpsc::channel(1024);
    etcron_common::task::spawn(mirror(client.clone(), keys.all_pools_prefix(), "pools", pools_tx, all_stop.clone()));
    etcron_common::task::spawn(follow_pools(ctx.clone(), pools_rx));
    let (kills_tx, kills_rx) = mpsc::channel(256);
    etcron_common::task::spawn(mirror(client.clone(), keys.kill_prefix(), "kill", kills_tx, all_stop.clone()));
    etcron_common::task::spawn(follow_kills(ctx.clone(), kills_rx));
    let supervisor =
        etcron_common::task::spawn(supervise_session(ctx.clone(), session_client, lease_tx, all_stop.clone()));
    let updates = scheduler_updates(ctx, again, &sched_stop);
    let scheduler = etcron_common::task::spawn(Scheduler::new(ctx.clone()).run(updates, sched_stop));
    Running { supervisor, scheduler, sched_stop: sched_stop_tx, all_stop: all_stop_tx }
}

/// Applies the pools' mirror (`{ns}/pool…`: pools, held slots, queues) and keeps their gauges.
async fn follow_pools(ctx: Arc<Context>, mut updates: mpsc::Receiver<crate::cluster::watcher::Update>) {
    while let Some(update) = updates.recv().await {
        ctx.pools.apply(&ctx.keys, update);
        for (pool, state) in ctx.pools.all() {
            let held = i64::try_from(state.held.len()).unwrap_or(i64::MAX);
            crate::metrics::METRICS.pool_slots_held.with_label_values(&[&pool]).set(held);
            crate::metrics::METRICS.pool_slots.with_label_values(&[&pool]).set(i64::from(state.slots.unwrap_or(0)));
        }
    }
}

/// The mirrors the scheduler follows (jobs, run requests, pauses, calendars), ended by `stop`.
fn scheduler_updates(
    ctx: &Context,
    again: mpsc::UnboundedReceiver<String>,
    stop: &watch::Receiver<bool>,
) -> crate::scheduler::Updates {
    let (client, keys) = (&ctx.client, &ctx.keys);
    let (jobs_tx, jobs) = mpsc::channel(4096);
    etcron_common::task::spawn(mirror(client.clone(), keys.jobs_prefix(), "jobs", jobs_tx, stop.clone()));
    let (triggers_tx, triggers) = mpsc::channel(256);
    etcron_common::task::spawn(mirror(client.clone(), keys.trigger_prefix(), "trigger", triggers_tx, stop.clone()));
    let (paused_tx, paused) = mpsc::channel(256);
    etcron_common::task::spawn(mirror(client.clone(), keys.paused_prefix(), "paused", paused_tx, stop.clone()));
    let (calendars_tx, calendars) = mpsc::channel(64);
    etcron_common::task::spawn(mirror(
        client.clone(),
        keys.calendars_prefix(),
        "calendars",
        calendars_tx,
        stop.clone(),
    ));
    crate::scheduler::Updates { jobs, triggers, paused, calendars, again }
}

/// Shutdown: no new ticks; running tasks get the shutdown grace, then are killed; closes etcd
/// has not taken yet get [`CLOSE_ON_SHUTDOWN`]; the session is revoked; deliveries drain.
async fn drain(ctx: &Arc<Context>, running: Running) {
    let config = &ctx.config;
    tracing::info!(running = ctx.registry.running(), grace = ?config.shutdown_grace, "shutting down: no new ticks; letting running tasks finish");
    let _ = running.sched_stop.send(true);
    let _ = running.scheduler.await;
    if !ctx.registry.wait_empty(config.shutdown_grace).await {
        tracing::warn!(running = ctx.registry.running(), "shutdown grace over; killing running tasks");
        ctx.registry.stop_all(&StopReason::Shutdown);
        if !ctx.registry.wait_empty(config.kill_grace + Duration::from_secs(5)).await {
            tracing::error!(running = ctx.registry.running(), "tasks still running after kill; exiting anyway");
        }
    }
    // A finished task's close etcd has not taken yet keeps trying for a while: leaving now would
    // hand the run to the loss handling (recorded lost, and rerun) although it finished.
    if ctx.closing.wait_empty(CLOSE_ON_SHUTDOWN).await {
        ctx.departures.session_ended_cleanly();
    } else {
        tracing::error!(
            pending = ctx.closing.count(),
            "claim closes still pending at exit; the loss handling will record those runs lost"
        );
    }
    let _ = running.all_stop.send(true);
    if let Ok(Some(session)) = running.supervisor.await {
        session.close().await;
    }
    // Deliveries of the last outcomes get a moment; then the records of the last executions
    // are flushed (to MongoDB, or to the spool) by the caller.
    ctx.notifier.drain(crate::notify::notifier::DRAIN_ON_SHUTDOWN).await;
}

/// Keeps a session: grants it (on `session_client`, the session's own connection), registers the
/// worker under it, refreshes the registration, and when the lease is lost stops everything that
/// ran under it and starts over with a new one. Returns the live session at shutdown so the
/// caller can revoke it after draining.
async fn supervise_session(
    ctx: Arc<Context>,
    session_client: etcd_client::Client,
    lease_tx: watch::Sender<Option<i64>>,
    mut stop: watch::Receiver<bool>,
) -> Option<Session> {
    let started_at = etcron_model::rfc3339_ms(etcron_model::now_ms());
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let session = loop {
            match Session::grant(&session_client, ctx.config.session_ttl).await {
                Ok(s) => break s,
                Err(e) => {
                    tracing::warn!(error = %e, namespace = %ctx.config.namespace, "cannot get a session lease; retrying");
                    if !backoff.sleep(&mut stop).await {
                        return None;
                    }
                }
            }
        };
        backoff.reset();
        // Keepers end the session's tasks once its deadline passes without renewal (a frozen
        // worker); the last one stays when the session is lost.
        publish_deadlines(&ctx, &session);
        let lease = session.lease_id();
        tracing::info!(lease_id = lease, ttl = ?ctx.config.session_ttl, namespace = %ctx.config.namespace, "session lease granted");
        if !take_over_registration(&ctx, lease, &mut stop).await {
            return Some(session);
        }
        // What the registration says: the running count and the oldest unsettled tick.
        let mut published: Option<(u32, Option<etcron_model::UnixMs>)> = None;
        let running = ctx.registry.watch_count();
        let mut refresh = tokio::time::interval(REGISTRATION_REFRESH);
        loop {
            let state = (u32::try_from(*running.borrow()).unwrap_or(u32::MAX), ctx.unsettled.oldest());
            let registered =
                if published == Some(state) { None } else { register(&ctx, lease, state, &started_at).await };
            if let Some(revision) = registered {
                if published.is_none() {
                    ctx.departures.session_registered(revision);
                    let _ = lease_tx.send(Some(lease));
                    tracing::info!(worker_id = %ctx.config.worker_id, namespace = %ctx.config.namespace, "registered");
                }
                published = Some(state);
            }
            tokio::select! {
                () = session.done() => break,
                _ = stop.changed() => return Some(session),
                _ = refresh.tick() => {}
            }
        }
        let _ = lease_tx.send(None);
        crate::metrics::METRICS.lease_losses.inc();
        tracing::error!(
            lease_id = lease,
            running = ctx.registry.running(),
            namespace = %ctx.config.namespace,
            "session lease lost: killing executions that ran under it, then re-registering"
        );
        ctx.registry.stop_all(&StopReason::LeaseLost);
        if !ctx.registry.wait_empty(ctx.config.kill_grace + Duration::from_secs(5)).await {
            tracing::error!(running = ctx.registry.running(), "executions still running after the lease loss kill");
        }
    }
}

/// Before registering under a new lease: a registration of this worker id under another lease
/// is either a dead earlier instance of this worker on this host (restarted faster than its
/// session TTL) or our own previous session. Its lease is revoked at once, which deletes its
/// registration, running markers and running claims in one step, so the other workers account
/// for what it ran (recorded `lost`, rerun per `on_worker_loss`) exactly as if it had expired;
/// overwriting the registration instead would hide the departure. A registration by a live
/// process (or another host) is waited out: two workers must not share an id. `false` when
/// told to stop while waiting.
async fn take_over_registration(ctx: &Arc<Context>, lease: i64, stop: &mut watch::Receiver<bool>) -> bool {
    let key = ctx.keys.worker(&ctx.config.worker_id);
    let mut warned = false;
    loop {
        let mut kv = ctx.client.kv_client();
        let existing = match request("get_registration", kv.get(key.as_str(), None)).await {
            Ok(r) => r.kvs().first().map(|kv| (kv.lease(), serde_json::from_slice::<WorkerInfo>(kv.value()).ok())),
            // Not known yet: registering now could overwrite an earlier instance's registration,
            // and its departure (what it ran, recorded lost and rerun) would never be seen.
            _ => {
                tokio::select! {
                    _ = stop.changed() => return false,
                    () = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        let Some((old_lease, info)) = existing else { return true };
        if old_lease == lease || old_lease == 0 {
            return true;
        }
        let ours = info.as_ref().is_some_and(|i| {
            i.hostname == ctx.hostname
                && (i.pid == std::process::id()
                    || nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(i.pid).unwrap_or(0)), None)
                        .is_err())
        });
        if ours {
            let pid = info.map_or(0, |i| i.pid);
            tracing::warn!(old_lease, pid, "an earlier instance of this worker is still registered; revoking its session so its executions are accounted for");
            let mut leases = ctx.client.lease_client();
            match request("lease_revoke", leases.revoke(old_lease)).await {
                Ok(revoked) => {
                    // Its registration went at the revoke's revision: owed from now on, on disk
                    // before this life's registration replaces the earlier one's in the data
                    // dir (this life may die before any watch tells it of the delete).
                    if let Some(revision) = revoked.header().map(etcd_client::ResponseHeader::revision) {
                        crate::ledger::loss::revoked_own_session(ctx, revision);
                    }
                    return true;
                }
                // Expired meanwhile: its keys went with it, the departure is seen.
                Err(EtcdError::Failed(e)) if e.to_string().contains("lease not found") => return true,
                // Not revoked (or not known to be): registering over it would hide the
                // departure. Read again and retry.
                Err(failed) => {
                    let error = match failed {
                        EtcdError::Timeout => "timed out".to_owned(),
                        EtcdError::Failed(e) => e.to_string(),
                    };
                    tracing::warn!(old_lease, %error, "revoking the earlier session failed; retrying");
                    tokio::select! {
                        _ = stop.changed() => return false,
                        () = tokio::time::sleep(Duration::from_millis(500)) => continue,
                    }
                }
            }
        }
        if !warned {
            let (host, pid) = info.map_or((String::new(), 0), |i| (i.hostname, i.pid));
            tracing::error!(%host, pid, "worker id {} is registered by another live process; waiting for it to go (two workers must not share an id)", ctx.config.worker_id);
            warned = true;
        }
        tokio::select! {
            _ = stop.changed() => return false,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Where tasks may connect: the allowed entries, and the control plane (etcd, MongoDB, and the
/// worker's own listeners) refused unless named exactly.
fn task_network(config: &Config, own: &[std::net::SocketAddr]) -> crate::tasks::network::TaskNetwork {
    use crate::tasks::network::{control_plane, TaskNetwork};
    let listeners: Vec<_> = own.iter().copied().chain(config.metrics_listen).collect();
    let control = control_plane(&config.process_etcd_endpoints, &config.mongodb_uri, &listeners);
    let network = TaskNetwork::new(config.task_network_allow.clone(), control);
    if !config.task_network_allow.is_empty() {
        tracing::info!(task_network_allow = ?network.allowed(), "HTTP and gRPC tasks may also connect to these");
    }
    network
}

/// 128 random bits, hex: the token masters present to read live output.
fn random_token() -> String {
    use std::fmt::Write as _;
    let bytes: [u8; 16] = rand::random();
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The revision the registration was written at; `None` when it was not.
/// The events this worker's default notify targets listen for, each once, in order.
fn default_notify_events(config: &Config) -> Vec<etcron_model::spec::notify::NotifyEvent> {
    etcron_model::spec::notify::NotifyEvent::ALL
        .into_iter()
        .filter(|e| config.notify.targets.iter().any(|t| t.wants(*e)))
        .collect()
}

async fn register(
    ctx: &Context,
    lease: i64,
    (running, unsettled_from_ms): (u32, Option<etcron_model::UnixMs>),
    started_at: &str,
) -> Option<i64> {
    let info = WorkerInfo {
        id: ctx.config.worker_id.clone(),
        hostname: ctx.hostname.clone(),
        pid: std::process::id(),
        labels: ctx.config.labels.clone(),
        run_as_users: ctx.config.run_as_users.clone(),
        task_network_allow: ctx.task_network.allowed(),
        teams: ctx.config.teams.clone(),
        unsettled_from_ms,
        handlers: ctx.handler_names.clone(),
        default_notify: default_notify_events(&ctx.config),
        os_user: Some(crate::tasks::uids::process_account()),
        task_user: Some(ctx.config.task_identity.describe()),
        capacity: ctx.config.capacity,
        running,
        version: etcron_model::VERSION.to_owned(),
        started_at: started_at.to_owned(),
        output_url: ctx.output_endpoint.as_ref().map(|e| e.url.clone()),
        output_token: ctx.output_endpoint.as_ref().map(|e| e.token.clone()),
    };
    let value = serde_json::to_vec(&info).unwrap_or_default();
    let mut kv = ctx.client.kv_client();
    let put = kv.put(ctx.keys.worker(&ctx.config.worker_id), value, Some(PutOptions::new().with_lease(lease)));
    match request("register", put).await {
        Ok(resp) => Some(resp.header().map_or(0, etcd_client::ResponseHeader::revision)),
        Err(EtcdError::Failed(e)) => {
            tracing::warn!(error = %e, "registering worker failed; will retry");
            None
        }
        Err(EtcdError::Timeout) => {
            tracing::warn!("registering worker timed out; will retry");
            None
        }
    }
}

async fn follow_kills(ctx: Arc<Context>, mut rx: mpsc::Receiver<Update>) {
    while let Some(update) = rx.recv().await {
        update.apply(&mut Kills(&ctx));
    }
}

/// The registry's kill commands as the mirror of `{ns}/kill/`.
struct Kills<'a>(&'a Context);

impl Mirror for Kills<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, _revision: i64) {
        self.0.registry.clear_kills();
        for kv in kvs {
            apply_kill(self.0, kv);
        }
    }

    fn put(&mut self, kv: Kv) {
        apply_kill(self.0, kv);
    }

    fn deleted(&mut self, key: Vec<u8>, _mod_revision: i64) {
        self.0.registry.remove_kill(&key);
    }
}

/// Applies a kill command read from etcd. A key that is not a kill key, or a value that is not
/// a kill command (`{}` is the least one), is logged and ignored: only well-formed commands
/// stop tasks.
fn apply_kill(ctx: &Context, kv: Kv) {
    let key = String::from_utf8_lossy(&kv.key).into_owned();
    let Some(Key::Kill { job, target }) = ctx.keys.parse(&kv.key) else {
        tracing::error!(
            key,
            "key under the kill prefix is not a kill key ({{ns}}/kill/{{job}}/{{execution id|all}}); ignored"
        );
        return;
    };
    match serde_json::from_slice::<etcron_model::stored::KillCommand>(&kv.value) {
        Ok(command) => ctx.registry.apply_kill(kv.key, job, target, kv.mod_revision, command.reason),
        Err(e) => tracing::error!(
            key,
            error = %e,
            "kill command in etcd is malformed (expected a JSON object such as {{\"reason\":\"...\"}}); ignored"
        ),
    }
}
