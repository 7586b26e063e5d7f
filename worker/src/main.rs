//! `etcron-worker`: starts the session, the watchers and the scheduler, and shuts down cleanly
//! on SIGTERM or Ctrl-C.

use anyhow::Context as _;
use clap::Parser;
use etcron_common::etcd::connect;
use etcron_worker::config::{Cli, Config};

/// mimalloc: a burst of 100 000 ticks allocates and frees a few small blocks per tick on every
/// thread at once, where glibc's allocator spent a third of the worker's CPU (its arenas'
/// consolidation and free lists; BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A shell task's keeper is this binary run again (`keeper`): nothing of the worker starts.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == etcron_worker::tasks::keeper::KEEP) {
        etcron_worker::tasks::keeper::keep(&args[2..]);
    }
    let config = match Config::resolve(Cli::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("etcron-worker: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    // Held until the process ends: one worker per data dir (its spool and its id).
    let _data_dir = match etcron_worker::cluster::identity::lock_data_dir(&config.data_dir) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("etcron-worker: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // A worker asked to run shell tasks in namespaces of their own that cannot make one does
    // not start (rather than run them on the host's network).
    if let Err(e) = etcron_worker::tasks::netns::check(config.shell_task_network) {
        eprintln!("etcron-worker: {e}");
        return std::process::ExitCode::from(2);
    }
    // Shell tasks start under keepers that end their trees when the worker dies or freezes.
    if let Err(e) = etcron_worker::tasks::keeper::enable() {
        eprintln!("etcron-worker: cannot supervise shell tasks (a pipe and a shared page for their keepers): {e}");
        return std::process::ExitCode::from(2);
    }
    // Test-only crash points (docs/testing.md), read before the environment is scrubbed.
    if let Err(e) = etcron_worker::failpoint::init() {
        eprintln!("etcron-worker: {e}");
        return std::process::ExitCode::from(2);
    }
    // Before any thread starts: tasks running as the worker's uid cannot read its memory, its
    // descriptors or its environment in /proc, and its credentials leave its environment block.
    if let Err(e) = etcron_common::harden::harden_process() {
        eprintln!("etcron-worker: warning: {e}");
    }
    let (level, json) = (config.log_level.clone(), config.json_logs);
    etcron_common::settings::run_main("etcron-worker", &level, json, || run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    // One node per namespace served (`[[namespaces]]`), all stopped by the one signal.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let stop = std::sync::Arc::new(stop);
    let signal = stop.clone();
    tokio::spawn(async move {
        etcron_common::settings::shutdown_signal().await;
        let _ = signal.send(true);
    });
    let nodes = config.nodes();
    let mut running = tokio::task::JoinSet::new();
    for (i, node) in nodes.into_iter().enumerate() {
        let mut stopped = stopped.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let parts = connect_node(&node, i == 0).await?;
        let namespace = node.namespace.clone();
        running.spawn(async move {
            let ran = etcron_worker::node::run(node, parts, shutdown).await;
            ran.with_context(|| format!("namespace {namespace}"))
        });
    }
    // A node that cannot start ends the process (its data dir or listeners); the others drain.
    let mut outcome = Ok(());
    while let Some(done) = running.join_next().await {
        let ran = done.map_err(anyhow::Error::from).and_then(|r| r);
        if let Err(e) = ran {
            if outcome.is_ok() {
                tracing::error!(error = format!("{e:#}"), "a namespace's node stopped; stopping the others");
                let _ = stop.send(true);
                outcome = Err(e);
            }
        }
    }
    outcome
}

/// A node's etcd connections (the session on its own) and record store; the executor protocol
/// beside the first node (the default namespace's), whose nodes end with the process.
async fn connect_node(config: &Config, first: bool) -> anyhow::Result<etcron_worker::node::Parts> {
    let ns = &config.namespace;
    let client = connect(&config.etcd).await.with_context(|| format!("connecting to etcd ({ns})"))?;
    let session_client = connect(&config.etcd).await.with_context(|| format!("connecting to etcd ({ns})"))?;
    let store = etcron_common::store::MongoStore::connect(&config.mongodb_uri, &config.mongodb_db)
        .await
        .context("mongodb_uri")?;
    if first {
        if let Some(listener) = etcron_worker::executor::bind(config).await? {
            let (host, store) = (config.clone(), store.clone());
            tokio::spawn(async move {
                if let Err(e) = etcron_worker::executor::serve(listener, host, Some(store)).await {
                    tracing::error!(error = %e, "the executor protocol stopped");
                }
            });
        }
    }
    Ok(etcron_worker::node::Parts { client, session_client, store: Some(store), simulated: None, handlers: None })
}
