//! `etcron-master`: serves the API until SIGTERM or Ctrl-C.

use anyhow::Context as _;
use clap::Parser;
use etcron_common::etcd::{connect, EtcdConfig};
use etcron_common::keys::Keys;
use etcron_master::api::{app, AppState};
use etcron_master::config::{Cli, Config};

fn main() -> std::process::ExitCode {
    let config = match Config::resolve(Cli::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("etcron-master: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log_level.clone());
    let filter =
        tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if config.json_logs {
        builder.json().init();
    } else {
        builder.init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("etcron-master: starting the runtime failed: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etcron-master: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let keys = Keys::new(&config.namespace).map_err(|e| anyhow::anyhow!("{e}"))?;
    let client = connect(&EtcdConfig { endpoints: config.etcd_endpoints.clone(), user: None })
        .await
        .context("connecting to etcd")?;
    let store = etcron_common::store::MongoStore::connect(&config.mongodb_uri, &config.mongodb_db)
        .await
        .map_err(|e| anyhow::anyhow!("mongodb_uri: {e}"))?;
    tokio::spawn(ensure_indexes(store.clone(), config.retention));
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let local = listener.local_addr().context("reading the bound address")?;
    tracing::info!(listen = %local, namespace = %config.namespace, endpoints = ?config.etcd_endpoints, "etcron-master serving");
    axum::serve(listener, app(AppState { client, keys, store }))
        .with_graceful_shutdown(etcron_common::settings::shutdown_signal())
        .await
        .context("serving HTTP")?;
    tracing::info!("etcron-master stopped");
    Ok(())
}

/// Creates the record indexes (idempotent), retrying until MongoDB answers.
async fn ensure_indexes(store: etcron_common::store::MongoStore, retention: std::time::Duration) {
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        match store.ensure_indexes(retention).await {
            Ok(()) => {
                tracing::info!(retention_secs = retention.as_secs(), "execution record indexes ready");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "creating execution record indexes failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
}
