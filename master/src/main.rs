//! `etcron-master`: serves the API until SIGTERM or Ctrl-C.

use anyhow::Context as _;
use clap::Parser;
use etcron_common::etcd::connect;
use etcron_master::api::{app, AppState};
use etcron_master::config::{Cli, Config};
use etcron_model::keys::Keys;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(etcron_master::config::Command::HashToken { name, role, teams }) = &cli.command {
        if let Some((i, (team, _))) =
            teams.iter().enumerate().find(|(i, (t, _))| teams[..*i].iter().any(|(u, _)| u == t))
        {
            eprintln!("etcron-master: --team {team:?} is given twice (--team number {}): one role per team", i + 1);
            return std::process::ExitCode::from(2);
        }
        let token = etcron_master::layers::auth::new_token();
        println!("# Give this token to {name}; it is stored nowhere, only its hash below:");
        println!("#   {token}");
        println!("[[auth.tokens]]\nname = {name:?}");
        if let Some(role) = role {
            println!("role = {role:?}");
        }
        if !teams.is_empty() {
            let entries: Vec<String> = teams.iter().map(|(team, role)| format!("{team} = {role:?}")).collect();
            println!("teams = {{ {} }}", entries.join(", "));
        }
        println!("sha256 = {:?}", etcron_master::layers::auth::hash_token(&token));
        return std::process::ExitCode::SUCCESS;
    }
    let config = match Config::resolve(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("etcron-master: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    // Before any thread starts: other processes of this uid cannot read the master's memory or
    // its credentials in /proc.
    if let Err(e) = etcron_common::harden::harden_process() {
        eprintln!("etcron-master: warning: {e}");
    }
    let (level, json) = (config.log_level.clone(), config.json_logs);
    etcron_common::settings::run_main("etcron-master", &level, json, || run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    etcron_master::metrics::init();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let local = listener.local_addr().context("reading the bound address")?;
    let served: Vec<String> =
        std::iter::once(&config.namespace).chain(config.namespaces.iter().map(|n| &n.namespace)).cloned().collect();
    tracing::info!(listen = %local, auth = config.auth.enabled(), namespaces = ?served, endpoints = ?config.etcd_endpoints, "etcron-master serving");
    let me = format!("{}:{}", config.listen, std::process::id());
    let resource = [
        ("service.name", "etcron-master".to_owned()),
        ("service.version", etcron_model::VERSION.to_owned()),
        ("service.instance.id", me.clone()),
    ];
    let tracer = etcron_common::trace::Tracer::start(config.tracing.as_ref(), &resource);
    let shared = Shared {
        // An open API answers only to loopback names, unless it was opened on purpose elsewhere.
        guard: etcron_master::layers::guard::Guard {
            loopback_hosts_only: !config.auth.enabled() && local.ip().is_loopback(),
        },
        teams: std::sync::Arc::new(config.teams.clone()),
        limits: std::sync::Arc::new(etcron_master::change_limits::ChangeLimits::new(config.change_limits)),
        tracer: tracer.clone(),
        me,
        served: std::sync::Arc::new(served),
    };
    // One API per namespace (its etcd, records database and duties); tokens, teams, limits and
    // the listener are the process's.
    let mut apps = vec![(config.namespace.clone(), app(namespace_state(&config, &shared, None).await?))];
    for extra in &config.namespaces {
        apps.push((extra.namespace.clone(), app(namespace_state(&config, &shared, Some(extra)).await?)));
    }
    etcron_master::api::stream::set_quiet_limit(config.stream_quiet_limit);
    let limits = etcron_common::serve::Limits { request: config.request_timeout, ..Default::default() };
    let router = etcron_master::layers::namespace::dispatch(apps);
    etcron_common::serve::serve(listener, router, limits, etcron_common::settings::shutdown_signal())
        .await
        .context("serving HTTP")?;
    tracer.flush(std::time::Duration::from_secs(5)).await;
    tracing::info!("etcron-master stopped");
    Ok(())
}

/// What every namespace's API shares.
struct Shared {
    guard: etcron_master::layers::guard::Guard,
    teams: std::sync::Arc<etcron_master::team_policy::TeamPolicies>,
    limits: std::sync::Arc<etcron_master::change_limits::ChangeLimits>,
    tracer: etcron_common::trace::Tracer,
    /// This master in the compactor's election.
    me: String,
    served: std::sync::Arc<Vec<String>>,
}

/// One namespace's API state: its etcd client and keys, its store and audit log (its records
/// database), its duties and job index. `extra`: a `[[namespaces]]` section; `None`: the
/// default namespace, whose duties alone set the process's gauges.
async fn namespace_state(
    config: &Config,
    shared: &Shared,
    extra: Option<&etcron_master::config::NamespaceConfig>,
) -> anyhow::Result<AppState> {
    let (namespace, etcd, db) = match extra {
        Some(n) => (&n.namespace, &n.etcd, &n.mongodb_db),
        None => (&config.namespace, &config.etcd, &config.mongodb_db),
    };
    let keys = Keys::new(namespace).map_err(|e| anyhow::anyhow!("{e}"))?;
    let client = connect(etcd).await.with_context(|| format!("connecting to etcd ({namespace})"))?;
    let store = etcron_common::store::MongoStore::connect(&config.mongodb_uri, db)
        .await
        .map_err(|e| anyhow::anyhow!("mongodb_uri: {e}"))?;
    tokio::spawn(ensure_indexes(store.clone(), config.retention, config.audit_retention));
    let audit = etcron_master::layers::audit::AuditLog::start(&store);
    let gauges = extra.is_none();
    let storage = etcron_master::duties::etcd_storage::start(client.clone(), config.storage, gauges);
    let me = shared.me.clone();
    etcron_master::duties::compactor::start(client.clone(), &keys, storage.clone(), config.compactor, me);
    etcron_master::duties::pause_expiry::start(client.clone(), keys.clone());
    let specs = etcron_master::duties::spec_check::start(client.clone(), keys.clone(), config.spec_check_every, gauges);
    let job_index = etcron_master::job_index::JobIndex::start(client.clone(), keys.clone(), gauges);
    Ok(AppState {
        client,
        keys,
        store,
        auth: config.auth.clone(),
        audit,
        guard: shared.guard,
        storage,
        specs,
        teams: shared.teams.clone(),
        limits: shared.limits.clone(),
        tracer: shared.tracer.clone(),
        job_index,
        namespaces: shared.served.clone(),
    })
}

/// Creates the record indexes (idempotent), retrying until MongoDB answers.
async fn ensure_indexes(
    store: etcron_common::store::MongoStore,
    retention: std::time::Duration,
    audit_retention: std::time::Duration,
) {
    let mut delay =
        etcron_common::backoff::Backoff::new(std::time::Duration::from_secs(1), std::time::Duration::from_secs(30));
    loop {
        let done = match store.ensure_indexes(retention).await {
            Ok(()) => etcron_master::layers::audit::ensure_indexes(&store, audit_retention).await,
            Err(e) => Err(e),
        };
        match done {
            Ok(()) => {
                tracing::info!(retention_secs = retention.as_secs(), "execution record indexes ready");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "creating execution record indexes failed; retrying");
                tokio::time::sleep(delay.next_delay()).await;
            }
        }
    }
}
