//! Worker configuration: TOML file, `ETCRON_*` env vars and flags (flag > env > file > default).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use etcron_model::duration::HumanDuration;
use serde::Deserialize;

use crate::cluster::identity;

/// Command line of `etcron-worker`. Every setting is optional here so that the file and the
/// defaults can fill what flags and env vars leave out.
#[derive(Debug, Parser)]
#[command(name = "etcron-worker", version, about = "etcron worker: runs the ticks it claims")]
pub struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "ETCRON_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub shared: etcron_common::settings::SharedArgs,
    /// Worker id (default: the one kept in the data dir, chosen on first start as
    /// `<hostname>-<6 hex digits>`).
    #[arg(long, env = "ETCRON_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Labels `k=v,k=v` matched against job selectors.
    #[arg(long, env = "ETCRON_LABELS")]
    pub labels: Option<String>,
    /// Users shell tasks may run as (`task.user`), comma-separated; needs a worker running as
    /// root. Only workers listing a job's user race for its ticks.
    #[arg(long, env = "ETCRON_RUN_AS_USERS")]
    pub run_as_users: Option<String>,
    /// Teams whose jobs this worker runs, comma-separated (`alpha,beta`); only theirs, never a
    /// job without a team. Unset or empty: a shared worker running every job.
    #[arg(long, env = "ETCRON_TEAMS")]
    pub teams: Option<String>,
    /// The account shell tasks without `task.user` run as (`root` included): the admin's
    /// choice for the whole worker. Default on a worker running as root: a uid per team
    /// (`--task-uids`); else the worker's own account.
    #[arg(long, env = "ETCRON_TASK_USER")]
    pub task_user: Option<String>,
    /// On a worker running as root without `--task-user`: the uids (`FIRST-LAST`, default
    /// `70000-70999`) given one per team to shell tasks without `task.user`.
    #[arg(long, env = "ETCRON_TASK_UIDS")]
    pub task_uids: Option<String>,
    /// The machine's uid table shared by its workers (which uid each team got), default
    /// `/var/lib/etcron/task-uids.json`.
    #[arg(long, env = "ETCRON_TASK_UID_TABLE")]
    pub task_uid_table: Option<PathBuf>,
    /// Concurrent executions.
    #[arg(long, env = "ETCRON_CAPACITY")]
    pub capacity: Option<u32>,
    /// Session lease TTL, e.g. `10s`.
    #[arg(long, env = "ETCRON_SESSION_TTL")]
    pub session_ttl: Option<HumanDuration>,
    /// Time between TERM and KILL when a task is killed or times out.
    #[arg(long, env = "ETCRON_KILL_GRACE")]
    pub kill_grace: Option<HumanDuration>,
    /// On SIGTERM, how long running tasks may finish before they are killed.
    #[arg(long, env = "ETCRON_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<HumanDuration>,
    /// Delay per rendezvous rank before a worker joins the race for a tick.
    #[arg(long, env = "ETCRON_CLAIM_STAGGER")]
    pub claim_stagger: Option<HumanDuration>,
    /// How long before a schedule tick the race for its claim starts (the task still starts
    /// at the scheduled time), so the claim's etcd round trip is not part of the lateness.
    #[arg(long, env = "ETCRON_CLAIM_AHEAD")]
    pub claim_ahead: Option<HumanDuration>,
    /// Captured output per execution in bytes (head + tail).
    #[arg(long, env = "ETCRON_MAX_OUTPUT")]
    pub max_output: Option<usize>,
    /// Directory for the record spool and the worker id (default `/var/lib/etcron/worker` for
    /// root, `$STATE_DIRECTORY/worker` under systemd, else `~/.local/state/etcron/worker`;
    /// `worker-{id}` instead of `worker` when the id is given).
    #[arg(long, env = "ETCRON_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (off by default; no authentication,
    /// so bind it to a private address).
    #[arg(long, env = "ETCRON_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Serve the live output of running executions to masters here (default `127.0.0.1:0`:
    /// loopback, any free port). Requests need the token the worker advertises in etcd.
    #[arg(long, env = "ETCRON_OUTPUT_LISTEN")]
    pub output_listen: Option<std::net::SocketAddr>,
    /// The URL masters use to reach `output_listen` (default `http://` + the bound address, or
    /// the hostname when listening on all interfaces).
    #[arg(long, env = "ETCRON_OUTPUT_URL")]
    pub output_url: Option<String>,
    /// Variables of the worker's own environment that shell tasks get, comma-separated (default
    /// `PATH,HOME,LANG,LC_ALL,TZ,USER,LOGNAME,SHELL,TMPDIR`; `""` for none). Nothing else of the
    /// worker's environment reaches a task.
    #[arg(long, env = "ETCRON_TASK_ENV_PASSTHROUGH")]
    pub task_env_passthrough: Option<String>,
    /// Addresses HTTP and gRPC tasks may connect to although they are loopback, link-local or
    /// unspecified (networks such as `127.0.0.0/8`), or control-plane endpoints (only as
    /// `host:port`, named exactly), comma-separated (default: none).
    #[arg(long, env = "ETCRON_TASK_NETWORK_ALLOW")]
    pub task_network_allow: Option<String>,
    /// Where shell tasks' sockets go: `host` (default: the host's network) or `none` (a network
    /// namespace of each task's own, with only its loopback; needs root or CAP_SYS_ADMIN).
    #[arg(long, env = "ETCRON_SHELL_TASK_NETWORK")]
    pub shell_task_network: Option<String>,
    /// Serve the executor protocol here (`crate::executor`): remote executors in any language
    /// connect with the executor token and run handlers without etcd or MongoDB credentials
    /// (off by default; needs `--executor-token-file`).
    #[arg(long, env = "ETCRON_EXECUTOR_LISTEN")]
    pub executor_listen: Option<std::net::SocketAddr>,
    /// A file holding the token remote executors authenticate with (at least 16 characters).
    #[arg(long, env = "ETCRON_EXECUTOR_TOKEN_FILE")]
    pub executor_token_file: Option<PathBuf>,
    /// `[notify]` settings: `--ui-url`, `--notify-*`.
    #[command(flatten)]
    pub notify: crate::notify::notifier::NotifyArgs,
}

/// The `[worker]` file format; every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub etcd_endpoints: Option<Vec<String>>,
    /// `[etcd]`: TLS files, user and password file.
    #[serde(default)]
    pub etcd: etcron_common::settings::EtcdSecurityFile,
    pub namespace: Option<String>,
    pub worker_id: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub run_as_users: Option<Vec<String>>,
    pub teams: Option<Vec<String>>,
    pub task_user: Option<String>,
    pub task_uids: Option<String>,
    pub task_uid_table: Option<PathBuf>,
    pub capacity: Option<u32>,
    pub session_ttl: Option<HumanDuration>,
    pub kill_grace: Option<HumanDuration>,
    pub shutdown_grace: Option<HumanDuration>,
    pub claim_stagger: Option<HumanDuration>,
    pub claim_ahead: Option<HumanDuration>,
    pub max_output: Option<usize>,
    pub mongodb_uri: Option<String>,
    /// A file holding `mongodb_uri` (a URI with a password stays out of this file).
    pub mongodb_uri_file: Option<PathBuf>,
    pub mongodb_db: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub output_listen: Option<std::net::SocketAddr>,
    pub output_url: Option<String>,
    pub task_env_passthrough: Option<Vec<String>>,
    pub task_network_allow: Option<Vec<String>>,
    pub shell_task_network: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
    pub executor_listen: Option<std::net::SocketAddr>,
    pub executor_token_file: Option<PathBuf>,
    /// `[notify]`: webhook notification settings and default targets.
    pub notify: Option<crate::notify::notifier::NotifyFile>,
    /// `[tracing]`: where trace spans are exported (none by default).
    pub tracing: Option<etcron_common::trace::TracingFile>,
    /// `[[namespaces]]`: namespaces served besides `namespace`, each on its own etcd cluster.
    #[serde(default)]
    pub namespaces: Vec<NamespaceSection>,
}

/// One `[[namespaces]]` section: a namespace this process serves besides the default one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSection {
    pub namespace: Option<String>,
    /// Default: the top-level `etcd_endpoints`.
    pub etcd_endpoints: Option<Vec<String>>,
    /// Default: the top-level `mongodb_db`.
    pub mongodb_db: Option<String>,
    /// Default: the top-level `capacity`.
    pub capacity: Option<u32>,
}

/// A namespace served besides the default one, resolved: a node of its own runs it
/// ([`Config::nodes`]).
#[derive(Debug, Clone)]
pub struct NamespaceConfig {
    pub namespace: String,
    pub etcd_endpoints: Vec<String>,
    /// The top-level TLS and user settings, with this namespace's endpoints.
    pub etcd: etcron_common::etcd::EtcdConfig,
    pub mongodb_db: String,
    pub capacity: u32,
}

/// The resolved, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub etcd_endpoints: Vec<String>,
    /// How to connect to etcd (endpoints, TLS, user).
    pub etcd: etcron_common::etcd::EtcdConfig,
    pub namespace: String,
    pub worker_id: String,
    pub labels: BTreeMap<String, String>,
    /// Users shell tasks may run as; empty unless the worker runs as root.
    pub run_as_users: Vec<String>,
    /// The teams whose jobs alone this worker runs; empty: every job (a shared worker).
    pub teams: Vec<String>,
    /// Who shell tasks without `task.user` run as (`task_user`, `task_uids`).
    pub task_identity: crate::tasks::uids::TaskIdentity,
    pub capacity: u32,
    pub session_ttl: Duration,
    pub kill_grace: Duration,
    pub shutdown_grace: Duration,
    pub claim_stagger: Duration,
    /// Races for schedule ticks (of `concurrency: allow` jobs) start this long before the tick.
    pub claim_ahead: Duration,
    pub max_output: usize,
    pub mongodb_uri: String,
    pub mongodb_db: String,
    pub data_dir: PathBuf,
    /// Where `/metrics` is served; none when off.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Where the live output of running executions is served.
    pub output_listen: std::net::SocketAddr,
    /// How masters reach it; derived from the bound address when `None`.
    pub output_url: Option<String>,
    /// Names of the worker's environment variables that shell tasks inherit; nothing else is.
    pub task_env_passthrough: Vec<String>,
    /// What HTTP and gRPC tasks may reach although it is refused by default
    /// (`crate::tasks::network`).
    pub task_network_allow: Vec<crate::tasks::network::Allow>,
    /// The host's network for shell tasks, or a namespace of each one's own
    /// (`crate::tasks::netns`).
    pub shell_task_network: crate::tasks::netns::ShellNetwork,
    pub log_level: String,
    pub json_logs: bool,
    /// Webhook notifications: console URL, default targets, delivery limits.
    pub notify: crate::notify::notifier::NotifyConfig,
    /// Where remote executors connect, and the token they present; none when off.
    pub executor: Option<ExecutorGateway>,
    /// Where trace spans are exported (`otlp_endpoint`); none: no spans are built.
    pub tracing: Option<etcron_common::trace::ExportConfig>,
    /// The namespaces served besides `namespace` (`[[namespaces]]`); empty in a node's own config.
    pub namespaces: Vec<NamespaceConfig>,
    /// The etcd endpoints of every namespace this process serves: tasks may reach none of them.
    pub process_etcd_endpoints: Vec<String>,
    /// Summed into the process's `/metrics` and asked by its `/readyz`: a namespace's node, not
    /// a remote executor's.
    pub metrics_node: bool,
}

/// The directory under `data_dir` of the node serving `namespace` (besides the default one):
/// `namespaces/+etcron-b` for `/etcron-b` (`+` is no namespace character, so no two collide).
#[must_use]
pub fn namespace_dir(data_dir: &Path, namespace: &str) -> PathBuf {
    data_dir.join("namespaces").join(namespace.replace('/', "+"))
}

impl Config {
    /// One configuration per node this process runs: the default namespace's (this one), then
    /// each `[[namespaces]]` section's — its namespace, etcd, database and capacity, a data dir
    /// of its own under `data_dir` ([`namespace_dir`]), its live output on a free port of
    /// `output_listen`'s address. The executor protocol is the first's; `/metrics` is served
    /// once for all (`metrics_server::serve`).
    #[must_use]
    pub fn nodes(&self) -> Vec<Config> {
        let first = Config { namespaces: Vec::new(), ..self.clone() };
        let extra = self.namespaces.iter().map(|ns| Config {
            namespace: ns.namespace.clone(),
            etcd_endpoints: ns.etcd_endpoints.clone(),
            etcd: ns.etcd.clone(),
            mongodb_db: ns.mongodb_db.clone(),
            capacity: ns.capacity,
            data_dir: namespace_dir(&self.data_dir, &ns.namespace),
            executor: None,
            output_listen: std::net::SocketAddr::new(self.output_listen.ip(), 0),
            output_url: None,
            ..first.clone()
        });
        std::iter::once(first.clone()).chain(extra).collect()
    }
}

/// How to reach the default namespace's etcd, the `[[namespaces]]` sections resolved (errors
/// name `namespaces[i].field`), and every etcd endpoint of the process, the default's first.
fn namespaces(
    shared: &etcron_common::settings::Shared,
    sections: Vec<NamespaceSection>,
    (security, file): (&etcron_common::settings::EtcdSecurityFile, &etcron_common::settings::EtcdSecurityFile),
    default_capacity: u32,
) -> anyhow::Result<(etcron_common::etcd::EtcdConfig, Vec<NamespaceConfig>, Vec<String>)> {
    let etcd = etcron_common::settings::etcd_config(shared.etcd_endpoints.clone(), security, file)
        .map_err(anyhow::Error::msg)?;
    use etcron_common::settings::NamespaceInput;
    let capacities: Vec<Option<u32>> = sections.iter().map(|s| s.capacity).collect();
    let inputs = sections
        .into_iter()
        .map(|s| NamespaceInput { namespace: s.namespace, etcd_endpoints: s.etcd_endpoints, mongodb_db: s.mongodb_db })
        .collect();
    let extra = etcron_common::settings::resolve_namespaces(shared, inputs).map_err(anyhow::Error::msg)?;
    let mut all = shared.etcd_endpoints.clone();
    let mut out = Vec::with_capacity(extra.len());
    for (i, (ns, set)) in extra.into_iter().zip(capacities).enumerate() {
        let capacity =
            capacity(Some(set.unwrap_or(default_capacity))).map_err(|e| anyhow::anyhow!("namespaces[{i}].{e}"))?;
        let etcd = etcron_common::settings::etcd_config(ns.etcd_endpoints.clone(), security, file)
            .map_err(|e| anyhow::anyhow!("namespaces[{i}].{e}"))?;
        for endpoint in &ns.etcd_endpoints {
            if !all.contains(endpoint) {
                all.push(endpoint.clone());
            }
        }
        out.push(NamespaceConfig {
            namespace: ns.namespace,
            etcd_endpoints: ns.etcd_endpoints,
            etcd,
            mongodb_db: ns.mongodb_db,
            capacity,
        });
    }
    Ok((etcd, out, all))
}

/// The executor protocol's listener and token (`crate::executor`).
#[derive(Clone)]
pub struct ExecutorGateway {
    pub listen: std::net::SocketAddr,
    pub token: String,
}

impl std::fmt::Debug for ExecutorGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorGateway").field("listen", &self.listen).field("token", &"…").finish()
    }
}

/// Shortest executor token.
pub const MIN_EXECUTOR_TOKEN: usize = 16;

/// `executor_listen` with the token of `executor_token_file`: both or neither.
fn executor_gateway(
    listen: Option<std::net::SocketAddr>,
    token_file: Option<PathBuf>,
) -> anyhow::Result<Option<ExecutorGateway>> {
    match (listen, token_file) {
        (None, None) => Ok(None),
        (Some(_), None) => bail!("executor_listen: needs executor_token_file (the token remote executors present)"),
        (None, Some(_)) => bail!("executor_token_file: set without executor_listen"),
        (Some(listen), Some(file)) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("executor_token_file: reading {}", file.display()))?;
            let token = text.trim().to_owned();
            if token.chars().count() < MIN_EXECUTOR_TOKEN || token.chars().any(char::is_whitespace) {
                bail!(
                    "executor_token_file: the token must be at least {MIN_EXECUTOR_TOKEN} characters, without spaces"
                );
            }
            Ok(Some(ExecutorGateway { listen, token }))
        }
    }
}

/// Default lead of a claim before its tick.
pub const DEFAULT_CLAIM_AHEAD: Duration = Duration::from_millis(200);
/// Longest lead: half the shortest schedule interval (1 s), so a job never has two of its
/// ticks claimed ahead at once.
pub const MAX_CLAIM_AHEAD: Duration = Duration::from_millis(500);

/// Live output is served on loopback, on a free port, unless told otherwise.
pub const DEFAULT_OUTPUT_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0));

/// What shell tasks inherit of the worker's environment unless configured otherwise: what
/// programs need to find commands, a home, a locale, a timezone and a temp dir; never the
/// worker's credentials (`ETCRON_MONGODB_URI`, `ETCRON_ETCD_PASSWORD`…) nor what the operator
/// exported for the worker itself.
pub const DEFAULT_TASK_ENV_PASSTHROUGH: [&str; 9] =
    ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR"];
/// Most names in `task_env_passthrough`.
pub const MAX_TASK_ENV_PASSTHROUGH: usize = 64;

/// Most teams a worker is bound to.
pub const MAX_TEAMS: usize = 64;

/// The teams from a flag (`a,b`) or the file, each a valid team name, at most [`MAX_TEAMS`],
/// without repeats.
fn teams(flag: Option<String>, file: Option<Vec<String>>) -> anyhow::Result<Vec<String>> {
    let mut teams: Vec<String> = match flag {
        Some(list) => list.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect(),
        None => file.unwrap_or_default(),
    };
    if teams.len() > MAX_TEAMS {
        bail!("teams: at most {MAX_TEAMS} teams");
    }
    for team in &teams {
        etcron_model::spec::validate_team(team).map_err(|m| anyhow::anyhow!("teams: {m}"))?;
    }
    teams.sort();
    teams.dedup();
    Ok(teams)
}

/// Most concurrent executions per worker.
pub const MAX_CAPACITY: u32 = 100_000;

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))
    }
}

/// The passed-through names from a flag (`a,b`), the file, or the default; each a variable
/// name that is not etcron's own (`ETCRON_*` holds the worker's settings and credentials).
fn task_env_passthrough(flag: Option<String>, file: Option<Vec<String>>) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = match (flag, file) {
        (Some(list), _) => list.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned).collect(),
        (None, Some(list)) => list,
        (None, None) => DEFAULT_TASK_ENV_PASSTHROUGH.iter().map(|&n| n.to_owned()).collect(),
    };
    if names.len() > MAX_TASK_ENV_PASSTHROUGH {
        bail!("task_env_passthrough: at most {MAX_TASK_ENV_PASSTHROUGH} names");
    }
    for name in &names {
        let ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            bail!("task_env_passthrough: {name:?} is not an environment variable name");
        }
        if name.starts_with("ETCRON_") {
            bail!("task_env_passthrough: {name} is etcron's own (settings and credentials); tasks get their ETCRON_* variables anyway");
        }
    }
    Ok(names)
}

/// `labels`: the command line's `k=v,k=v`, or the file's table.
fn labels(cli: Option<String>, file: Option<BTreeMap<String, String>>) -> anyhow::Result<BTreeMap<String, String>> {
    match cli {
        Some(l) => parse_labels(&l).context("labels"),
        None => Ok(file.unwrap_or_default()),
    }
}

/// `shell_task_network`: `host` (the default) or `none`.
fn shell_network(set: Option<String>) -> anyhow::Result<crate::tasks::netns::ShellNetwork> {
    match set {
        Some(n) => crate::tasks::netns::ShellNetwork::parse(&n).map_err(anyhow::Error::msg),
        None => Ok(crate::tasks::netns::ShellNetwork::default()),
    }
}

/// Parses `k=v,k=v`.
pub fn parse_labels(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else { bail!("label {pair:?} is not k=v") };
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(out)
}

impl Config {
    pub fn resolve(mut cli: Cli) -> anyhow::Result<Self> {
        let file = match &cli.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        let (security, otlp) = (cli.shared.etcd_security(), cli.shared.otlp_endpoint.take());
        cli.shared.read_mongodb_uri_file(file.mongodb_uri_file.as_deref()).map_err(anyhow::Error::msg)?;
        let shared = etcron_common::settings::resolve_args(
            cli.shared,
            (file.etcd_endpoints, file.namespace, file.mongodb_uri, file.mongodb_db, file.log_level, file.log_format),
        )
        .map_err(anyhow::Error::msg)?;
        let explicit_id = cli.worker_id.or(file.worker_id);
        if let Some(id) = &explicit_id {
            etcron_model::keys::validate_id(id).map_err(|e| anyhow::anyhow!("worker_id: {e}"))?;
        }
        let (data_dir, worker_id) = data_dir_and_id(cli.data_dir.or(file.data_dir), explicit_id)?;
        let labels = labels(cli.labels, file.labels)?;
        let run_as_users = comma_list(cli.run_as_users, file.run_as_users);
        crate::tasks::run_as::check_config(&run_as_users, nix::unistd::geteuid().is_root())
            .map_err(anyhow::Error::msg)?;
        let teams = teams(cli.teams, file.teams)?;
        let task_identity = task_identity(
            cli.task_user.or(file.task_user),
            cli.task_uids.or(file.task_uids),
            cli.task_uid_table.or(file.task_uid_table),
        )?;
        let capacity = capacity(cli.capacity.or(file.capacity))?;
        let session_ttl = session_ttl(cli.session_ttl.or(file.session_ttl))?;
        let (kill_grace, shutdown_grace) =
            graces(cli.kill_grace.or(file.kill_grace), cli.shutdown_grace.or(file.shutdown_grace))?;
        let (claim_stagger, claim_ahead) =
            claim_timing(cli.claim_stagger.or(file.claim_stagger), cli.claim_ahead.or(file.claim_ahead))?;
        let max_output = max_output(cli.max_output.or(file.max_output))?;
        let output_listen = cli.output_listen.or(file.output_listen).unwrap_or(DEFAULT_OUTPUT_LISTEN);
        let output_url = output_url(cli.output_url.or(file.output_url))?;
        let task_env_passthrough = task_env_passthrough(cli.task_env_passthrough, file.task_env_passthrough)?;
        let task_network_allow = comma_list(cli.task_network_allow, file.task_network_allow);
        let task_network_allow = crate::tasks::network::parse_allow(&task_network_allow).map_err(anyhow::Error::msg)?;
        let shell_task_network = shell_network(cli.shell_task_network.or(file.shell_task_network))?;
        let (etcd, namespaces, process_etcd_endpoints) =
            namespaces(&shared, file.namespaces, (&security, &file.etcd), capacity)?;
        Ok(Self {
            etcd,
            namespaces,
            process_etcd_endpoints,
            metrics_node: true,
            etcd_endpoints: shared.etcd_endpoints,
            namespace: shared.namespace,
            worker_id,
            labels,
            run_as_users,
            teams,
            task_identity,
            capacity,
            session_ttl,
            kill_grace,
            shutdown_grace,
            claim_stagger,
            claim_ahead,
            max_output,
            mongodb_uri: shared.mongodb_uri,
            mongodb_db: shared.mongodb_db,
            data_dir,
            metrics_listen: cli.metrics_listen.or(file.metrics_listen),
            output_listen,
            output_url,
            task_env_passthrough,
            task_network_allow,
            shell_task_network,
            log_level: shared.log_level,
            json_logs: shared.json_logs,
            notify: crate::notify::notifier::NotifyConfig::resolve(cli.notify, file.notify)?,
            executor: executor_gateway(
                cli.executor_listen.or(file.executor_listen),
                cli.executor_token_file.or(file.executor_token_file),
            )?,
            tracing: etcron_common::trace::resolve(otlp, file.tracing.as_ref()).map_err(anyhow::Error::msg)?,
        })
    }
}

/// The data dir (absolute; by default under the state dir, named after an explicit id) and the
/// worker id (explicit, or the one stored in the data dir, made from the host name the first
/// time).
fn data_dir_and_id(dir: Option<PathBuf>, explicit_id: Option<String>) -> anyhow::Result<(PathBuf, String)> {
    let data_dir = match dir {
        Some(dir) => std::path::absolute(&dir).with_context(|| format!("data_dir {}", dir.display()))?,
        None => {
            let state = identity::default_state_dir(|k| std::env::var(k).ok(), nix::unistd::geteuid().is_root())
                .map_err(anyhow::Error::msg)?;
            identity::default_data_dir(&state, explicit_id.as_deref())
        }
    };
    let worker_id = match explicit_id {
        Some(id) => id,
        None => {
            let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
            identity::stored_or_new_id(&data_dir, &host).map_err(anyhow::Error::msg)?
        }
    };
    Ok((data_dir, worker_id))
}

/// A list as the command line gives it (comma-separated; it replaces the file's) or as the
/// file does.
fn comma_list(cli: Option<String>, file: Option<Vec<String>>) -> Vec<String> {
    match cli {
        Some(list) => list.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect(),
        None => file.unwrap_or_default(),
    }
}

/// Who shell tasks without `task.user` run as: `task_user`, or a uid per team from `task_uids`.
fn task_identity(
    user: Option<String>,
    uids: Option<String>,
    table: Option<PathBuf>,
) -> anyhow::Result<crate::tasks::uids::TaskIdentity> {
    let table = table.unwrap_or_else(|| crate::tasks::uids::DEFAULT_TABLE.into());
    crate::tasks::uids::TaskIdentity::resolve(user, uids, &table, nix::unistd::geteuid()).map_err(anyhow::Error::msg)
}

/// `kill_grace` (at most 10 min, 5 s by default) and `shutdown_grace` (30 s by default).
fn graces(kill: Option<HumanDuration>, shutdown: Option<HumanDuration>) -> anyhow::Result<(Duration, Duration)> {
    let kill = kill.map_or(Duration::from_secs(5), |d| d.0);
    if kill > Duration::from_secs(600) {
        bail!("kill_grace: must be at most 10m");
    }
    Ok((kill, shutdown.map_or(Duration::from_secs(30), |d| d.0)))
}

/// `max_output`: between 1 KiB and 16 MiB.
fn max_output(set: Option<usize>) -> anyhow::Result<usize> {
    let max = set.unwrap_or(etcron_model::output::DEFAULT_MAX_OUTPUT);
    if !(1024..=16 * 1024 * 1024).contains(&max) {
        bail!("max_output: must be between 1024 and 16777216 bytes");
    }
    Ok(max)
}

/// `capacity`: between 1 and [`MAX_CAPACITY`], 64 by default.
fn capacity(set: Option<u32>) -> anyhow::Result<u32> {
    let capacity = set.unwrap_or(64);
    if capacity == 0 || capacity > MAX_CAPACITY {
        bail!("capacity: must be between 1 and {MAX_CAPACITY}, got {capacity}");
    }
    Ok(capacity)
}

/// `session_ttl`: whole seconds between 2 s and 5 min, 10 s by default.
fn session_ttl(set: Option<HumanDuration>) -> anyhow::Result<Duration> {
    let ttl = set.map_or(Duration::from_secs(10), |d| d.0);
    if ttl < etcron_common::session::MIN_TTL || ttl > Duration::from_secs(300) || ttl.subsec_nanos() != 0 {
        bail!("session_ttl: must be whole seconds between 2s and 5m, got {}", HumanDuration(ttl));
    }
    Ok(ttl)
}

/// `claim_stagger` (at most 1 s, 15 ms by default) and `claim_ahead` (at most
/// [`MAX_CLAIM_AHEAD`]).
fn claim_timing(stagger: Option<HumanDuration>, ahead: Option<HumanDuration>) -> anyhow::Result<(Duration, Duration)> {
    let stagger = stagger.map_or(Duration::from_millis(15), |d| d.0);
    if stagger > Duration::from_secs(1) {
        bail!("claim_stagger: must be at most 1s");
    }
    let ahead = ahead.map_or(DEFAULT_CLAIM_AHEAD, |d| d.0);
    if ahead > MAX_CLAIM_AHEAD {
        bail!("claim_ahead: must be at most {}", HumanDuration(MAX_CLAIM_AHEAD));
    }
    Ok((stagger, ahead))
}

/// `output_url`, without a trailing slash: an http:// or https:// URL.
fn output_url(set: Option<String>) -> anyhow::Result<Option<String>> {
    let url = set.map(|u| u.trim_end_matches('/').to_owned());
    if let Some(url) = &url {
        let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.contains(char::is_whitespace)) {
            bail!("output_url: must be an http:// or https:// URL, got {url:?}");
        }
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a data dir of the test's own: the default one is the machine's.
    fn cli(args: &[&str]) -> Cli {
        let data = tempfile_dir().join("data");
        let mut all = vec!["etcron-worker", "--data-dir", data.to_str().unwrap()];
        all.extend_from_slice(args);
        Cli::parse_from(all)
    }

    #[test]
    fn flags_override_the_file_and_defaults_fill_the_rest() {
        let dir = tempfile_dir();
        let path = dir.join("w.toml");
        std::fs::write(&path, "namespace = \"/from-file\"\ncapacity = 8\nlabels = { region = \"eu\" }\n").unwrap();
        let c = Config::resolve(cli(&["--config", path.to_str().unwrap(), "--capacity", "3"])).unwrap();
        assert_eq!(c.namespace, "/from-file");
        assert_eq!(c.capacity, 3);
        assert_eq!(c.labels.get("region").map(String::as_str), Some("eu"));
        assert!(c.teams.is_empty(), "no teams: a shared worker");
        let c = Config::resolve(cli(&["--teams", "beta, alpha,beta"])).unwrap();
        assert_eq!(c.teams, ["alpha", "beta"]);
        assert_eq!(c.session_ttl, Duration::from_secs(10));
        assert_eq!(c.etcd_endpoints, vec!["127.0.0.1:2379"]);
    }

    #[test]
    fn bad_values_are_refused_with_the_setting_named() {
        for (args, needle) in [
            (vec!["--capacity", "0"], "capacity"),
            (vec!["--namespace", "nope"], "namespace"),
            (vec!["--worker-id", "bad id"], "worker_id"),
            (vec!["--session-ttl", "1s"], "session_ttl"),
            (vec!["--claim-ahead", "2s"], "claim_ahead"),
            (vec!["--labels", "novalue"], "labels"),
            (vec!["--log-format", "xml"], "log_format"),
            (vec!["--output-url", "worker-1:8071"], "output_url"),
            (vec!["--task-env-passthrough", "PATH,ETCRON_MONGODB_URI"], "task_env_passthrough"),
            (vec!["--task-env-passthrough", "A-B"], "task_env_passthrough"),
            (vec!["--task-network-allow", "127.0.0.0/8,10.0.0.0/40"], "task_network_allow"),
            (vec!["--shell-task-network", "bridge"], "shell_task_network: \"bridge\" is neither"),
            (vec!["--teams", "alpha,Beta"], "teams"),
            (vec!["--task-uids", "5"], "task_uids"),
            (vec!["--task-user", "0"], "task_user"),
            (vec!["--mongodb-uri-file", "/nonexistent/uri"], "mongodb_uri_file: cannot read /nonexistent/uri"),
        ] {
            let err = format!("{:#}", Config::resolve(cli(&args)).unwrap_err());
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn tasks_inherit_only_the_listed_variables() {
        let c = Config::resolve(cli(&[])).unwrap();
        assert_eq!(c.task_env_passthrough, DEFAULT_TASK_ENV_PASSTHROUGH.map(str::to_owned));
        let c = Config::resolve(cli(&["--task-env-passthrough", "PATH, JAVA_HOME"])).unwrap();
        assert_eq!(c.task_env_passthrough, ["PATH", "JAVA_HOME"]);
        assert!(Config::resolve(cli(&["--task-env-passthrough", ""])).unwrap().task_env_passthrough.is_empty());
        let dir = tempfile_dir();
        let path = dir.join("env.toml");
        std::fs::write(&path, "task_env_passthrough = [\"PATH\", \"PGHOST\"]\n").unwrap();
        let c = Config::resolve(cli(&["--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(c.task_env_passthrough, ["PATH", "PGHOST"]);
    }

    #[test]
    fn shell_tasks_use_the_hosts_network_unless_the_admin_says_none() {
        use crate::tasks::netns::ShellNetwork;
        assert_eq!(Config::resolve(cli(&[])).unwrap().shell_task_network, ShellNetwork::Host);
        let c = Config::resolve(cli(&["--shell-task-network", "none"])).unwrap();
        assert_eq!(c.shell_task_network, ShellNetwork::None);
        let dir = tempfile_dir();
        let path = dir.join("netns.toml");
        std::fs::write(&path, "shell_task_network = \"none\"\n").unwrap();
        let c = Config::resolve(cli(&["--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(c.shell_task_network, ShellNetwork::None);
        let c = Config::resolve(cli(&["--config", path.to_str().unwrap(), "--shell-task-network", "host"])).unwrap();
        assert_eq!(c.shell_task_network, ShellNetwork::Host, "the flag wins");
        std::fs::write(&path, "shell_task_network = \"isolated\"\n").unwrap();
        let err = format!("{:#}", Config::resolve(cli(&["--config", path.to_str().unwrap()])).unwrap_err());
        assert!(err.contains("shell_task_network: \"isolated\""), "{err}");
    }

    #[test]
    fn the_mongodb_uri_may_come_from_a_file() {
        let dir = tempfile_dir();
        let path = dir.join("mongodb-uri");
        std::fs::write(&path, "mongodb://etcron:pw@db1/?replicaSet=rs0\n").unwrap();
        let c = Config::resolve(cli(&["--mongodb-uri-file", path.to_str().unwrap()])).unwrap();
        assert_eq!(c.mongodb_uri, "mongodb://etcron:pw@db1/?replicaSet=rs0");
        let toml = dir.join("uri.toml");
        std::fs::write(&toml, format!("mongodb_uri_file = {:?}\n", path.to_str().unwrap())).unwrap();
        let c = Config::resolve(cli(&["--config", toml.to_str().unwrap()])).unwrap();
        assert_eq!(c.mongodb_uri, "mongodb://etcron:pw@db1/?replicaSet=rs0");
        let c = Config::resolve(cli(&["--config", toml.to_str().unwrap(), "--mongodb-uri", "mongodb://h/"])).unwrap();
        assert_eq!(c.mongodb_uri, "mongodb://h/", "the flag wins");
    }

    #[test]
    fn namespace_sections_make_a_node_each() {
        let dir = tempfile_dir();
        let path = dir.join("ns.toml");
        let text = "namespace = \"/a\"\ncapacity = 8\n\n[[namespaces]]\nnamespace = \"/b\"\n\
                    etcd_endpoints = [\"127.0.0.1:23790\"]\nmongodb_db = \"etcron_b\"\ncapacity = 3\n\n\
                    [[namespaces]]\nnamespace = \"/c/d\"\n";
        std::fs::write(&path, text).unwrap();
        let c = Config::resolve(cli(&["--config", path.to_str().unwrap(), "--metrics-listen", "127.0.0.1:0"])).unwrap();
        assert_eq!(c.process_etcd_endpoints, ["127.0.0.1:2379", "127.0.0.1:23790"], "tasks may reach neither");
        let nodes = c.nodes();
        let seen: Vec<_> = nodes.iter().map(|n| (n.namespace.as_str(), n.mongodb_db.as_str(), n.capacity)).collect();
        assert_eq!(seen, [("/a", "etcron", 8), ("/b", "etcron_b", 3), ("/c/d", "etcron", 8)]);
        assert_eq!(nodes[1].etcd.endpoints, ["127.0.0.1:23790"]);
        assert_eq!(nodes[0].data_dir, c.data_dir, "the default namespace keeps the data dir");
        assert_eq!(nodes[2].data_dir, c.data_dir.join("namespaces").join("+c+d"));
        assert!(nodes.iter().all(|n| n.worker_id == c.worker_id && n.namespaces.is_empty()));
        assert!(nodes[1].executor.is_none() && nodes[1].output_url.is_none());
        // Without sections: one node, as before.
        assert_eq!(Config::resolve(cli(&[])).unwrap().nodes().len(), 1);
    }

    #[test]
    fn a_namespace_served_twice_is_refused_naming_the_section() {
        let dir = tempfile_dir();
        let path = dir.join("twice.toml");
        for (text, needle) in [
            (
                "[[namespaces]]\nnamespace = \"/b\"\n[[namespaces]]\nnamespace = \"/b\"\n",
                "namespaces[1].namespace: \"/b\" is served already (namespaces[0].namespace)",
            ),
            (
                "[[namespaces]]\nnamespace = \"/etcron\"\n",
                "namespaces[0].namespace: \"/etcron\" is served already (namespace)",
            ),
            ("[[namespaces]]\nnamespace = \"b\"\n", "namespaces[0].namespace"),
            ("[[namespaces]]\nnamespace = \"/b\"\netcd_endpoints = []\n", "namespaces[0].etcd_endpoints"),
            ("[[namespaces]]\nnamespace = \"/b\"\ncapacity = 0\n", "namespaces[0].capacity"),
            ("[[namespaces]]\nnamespace = \"/b\"\nlabels = {}\n", "labels"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = format!("{:#}", Config::resolve(cli(&["--config", path.to_str().unwrap()])).unwrap_err());
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let dir = tempfile_dir();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "capacityy = 3\n").unwrap();
        let err = format!("{:#}", Config::resolve(cli(&["--config", path.to_str().unwrap()])).unwrap_err());
        assert!(err.contains("capacityy"), "{err}");
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "etcron-worker-config-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_example_config_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/worker.toml");
        let file = FileConfig::load(&path).unwrap();
        assert!(file.etcd_endpoints.is_some());
        let cli = Cli::parse_from(["etcron-worker", "--config", path.to_str().unwrap()]);
        Config::resolve(cli).unwrap();
    }
}
