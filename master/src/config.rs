//! Master configuration: TOML file, `ETCRON_*` env vars and flags (flag > env > file > default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use etcron_model::duration::HumanDuration;
use serde::Deserialize;

#[derive(Debug, Parser)]
#[command(name = "etcron-master", version, about = "etcron master: HTTP API and web UI")]
pub struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "ETCRON_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub shared: etcron_common::settings::SharedArgs,
    /// Address to serve the API and UI on.
    #[arg(long, env = "ETCRON_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// How long execution records are kept after they finish, e.g. `30d`.
    #[arg(long, env = "ETCRON_RETENTION")]
    pub retention: Option<HumanDuration>,
    /// Bearer token every `/api/` request must carry (one token with every permission). Prefer
    /// the environment variable: a flag is visible in the process list.
    #[arg(long, env = "ETCRON_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
    /// Serve the API without tokens on a non-loopback address (anyone who can connect is admin).
    #[arg(long, env = "ETCRON_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Changing requests (PUT, DELETE, POST) each caller may make per second on average.
    #[arg(long, env = "ETCRON_MUTATION_RATE")]
    pub mutation_rate: Option<f64>,
    /// Changing requests a caller may make at once before the rate applies.
    #[arg(long, env = "ETCRON_MUTATION_BURST")]
    pub mutation_burst: Option<u32>,
    /// Proxies (CIDRs, comma-separated) whose `X-Forwarded-For` names the client, for the
    /// wrong-token lockout and the open API's rate limit; anyone else's is ignored.
    #[arg(long, env = "ETCRON_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Option<Vec<String>>,
    /// Longest a client may take to send a whole request, head (10 s at most) and body, e.g. `40s`.
    #[arg(long, env = "ETCRON_REQUEST_TIMEOUT")]
    pub request_timeout: Option<HumanDuration>,
    /// How long an execution stream may carry nothing but keepalives before it is closed, e.g. `10m`.
    #[arg(long, env = "ETCRON_STREAM_QUIET_LIMIT")]
    pub stream_quiet_limit: Option<HumanDuration>,
    /// How often the master checks every stored job spec against this version's rules, e.g. `5m`.
    #[arg(long, env = "ETCRON_SPEC_CHECK_EVERY")]
    pub spec_check_every: Option<HumanDuration>,
    /// How long audit entries are kept, e.g. `365d`.
    #[arg(long, env = "ETCRON_AUDIT_RETENTION")]
    pub audit_retention: Option<HumanDuration>,
    /// etcd's quota in bytes, when etcd's status does not give it (etcd 3.4): 2 GiB by default.
    #[arg(long, env = "ETCRON_ETCD_QUOTA_BYTES")]
    pub etcd_quota_bytes: Option<i64>,
    /// Share of the quota at which etcd's size is warned about (0.1..1, default 0.7).
    #[arg(long, env = "ETCRON_ETCD_SIZE_WARN_RATIO")]
    pub etcd_size_warn_ratio: Option<f64>,
    /// How often the elected master compacts etcd (`0s`: never).
    #[arg(long, env = "ETCRON_COMPACT_EVERY")]
    pub compact_every: Option<HumanDuration>,
    /// How much history the compaction keeps (at least 5m).
    #[arg(long, env = "ETCRON_COMPACT_RETENTION")]
    pub compact_retention: Option<HumanDuration>,
    /// Tests only: the shortest `compact_retention` accepted (5m).
    #[arg(long, hide = true)]
    pub compact_retention_floor: Option<HumanDuration>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Prints a new random API token and the `[[auth.tokens]]` entry (with its hash) to add to
    /// the config file; the token itself is stored nowhere.
    #[command(group(clap::ArgGroup::new("roles").required(true).multiple(true).args(["role", "teams"])))]
    HashToken {
        /// Who will hold the token (recorded in the audit log).
        #[arg(long)]
        name: String,
        /// The global role (on every job): viewer, operator or admin.
        #[arg(long, value_parser = ["viewer", "operator", "admin"])]
        role: Option<String>,
        /// A role on the jobs of one team, TEAM=ROLE (repeat for several teams).
        #[arg(long = "team", value_name = "TEAM=ROLE", value_parser = parse_team_role)]
        teams: Vec<(String, String)>,
    },
}

/// `--team TEAM=ROLE` of `hash-token`: a valid team name and a role.
fn parse_team_role(text: &str) -> Result<(String, String), String> {
    let (team, role) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected TEAM=ROLE"))?;
    etcron_model::spec::validate_team(team)?;
    if !["viewer", "operator", "admin"].contains(&role) {
        return Err(format!("{role:?}: the role is viewer, operator or admin"));
    }
    Ok((team.to_owned(), role.to_owned()))
}

/// `[auth]` of the config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub tokens: Vec<crate::layers::auth::TokenConfig>,
    #[serde(default)]
    pub insecure_no_auth: bool,
    /// Proxies (CIDRs) whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub etcd_endpoints: Option<Vec<String>>,
    /// `[etcd]`: TLS files, user and password file.
    #[serde(default)]
    pub etcd: etcron_common::settings::EtcdSecurityFile,
    pub namespace: Option<String>,
    pub listen: Option<SocketAddr>,
    pub mongodb_uri: Option<String>,
    /// A file holding `mongodb_uri` (a URI with a password stays out of this file).
    pub mongodb_uri_file: Option<PathBuf>,
    pub mongodb_db: Option<String>,
    pub retention: Option<HumanDuration>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
    pub mutation_rate: Option<f64>,
    pub mutation_burst: Option<u32>,
    pub audit_retention: Option<HumanDuration>,
    pub etcd_quota_bytes: Option<i64>,
    pub etcd_size_warn_ratio: Option<f64>,
    pub compact_every: Option<HumanDuration>,
    pub compact_retention: Option<HumanDuration>,
    pub request_timeout: Option<HumanDuration>,
    pub stream_quiet_limit: Option<HumanDuration>,
    pub spec_check_every: Option<HumanDuration>,
    /// Bytes of job changes a token, and a team, may write per second on average.
    pub change_bytes_rate: Option<u64>,
    /// Bytes of job changes a token, and a team, may write at once before the rate applies.
    pub change_bytes_burst: Option<u64>,
    /// Most jobs one team may hold (`0`: no quota).
    pub max_jobs_per_team: Option<u64>,
    /// Most bytes of saved versions kept per job.
    pub max_history_bytes_per_job: Option<u64>,
    #[serde(default)]
    pub auth: AuthConfig,
    /// `[teams.NAME]`: what each team's jobs may use on the workers.
    #[serde(default)]
    pub teams: std::collections::BTreeMap<String, crate::team_policy::TeamPolicy>,
    /// `[tracing]`: where trace spans are exported (none by default).
    pub tracing: Option<etcron_common::trace::TracingFile>,
    /// `[[namespaces]]`: namespaces served besides `namespace`, chosen per request by the
    /// `X-Etcron-Namespace` header.
    #[serde(default)]
    pub namespaces: Vec<NamespaceSection>,
}

/// One `[[namespaces]]` section: a namespace served besides the default one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSection {
    pub namespace: Option<String>,
    /// Default: the top-level `etcd_endpoints`.
    pub etcd_endpoints: Option<Vec<String>>,
    /// Its records and audit entries; default: the top-level `mongodb_db`.
    pub mongodb_db: Option<String>,
}

/// A namespace served besides the default one, resolved: an API state of its own serves it.
#[derive(Debug, Clone)]
pub struct NamespaceConfig {
    pub namespace: String,
    /// The top-level TLS and user settings, with this namespace's endpoints.
    pub etcd: etcron_common::etcd::EtcdConfig,
    pub mongodb_db: String,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub etcd_endpoints: Vec<String>,
    /// How to connect to etcd (endpoints, TLS, user).
    pub etcd: etcron_common::etcd::EtcdConfig,
    pub namespace: String,
    pub listen: SocketAddr,
    pub mongodb_uri: String,
    pub mongodb_db: String,
    pub retention: Duration,
    pub log_level: String,
    pub json_logs: bool,
    pub auth: crate::layers::auth::Auth,
    pub audit_retention: Duration,
    pub storage: crate::duties::etcd_storage::StorageSettings,
    pub compactor: crate::duties::compactor::CompactorSettings,
    /// What each team's jobs may use on the workers (`[teams.NAME]`).
    pub teams: crate::team_policy::TeamPolicies,
    /// Longest a whole request (head and body) may take to arrive.
    pub request_timeout: Duration,
    /// Longest an execution stream carries nothing but keepalives before it is closed.
    pub stream_quiet_limit: Duration,
    /// How often every stored job spec is checked against this version's rules.
    pub spec_check_every: Duration,
    /// The change byte budgets, the job quota per team, the history kept per job.
    pub change_limits: crate::change_limits::ChangeLimitSettings,
    /// Where trace spans are exported (`otlp_endpoint`); none: no spans are built.
    pub tracing: Option<etcron_common::trace::ExportConfig>,
    /// The namespaces served besides `namespace` (`[[namespaces]]`).
    pub namespaces: Vec<NamespaceConfig>,
}

/// The `[[namespaces]]` sections resolved; errors name `namespaces[i].field`.
fn namespaces(
    shared: &etcron_common::settings::Shared,
    sections: Vec<NamespaceSection>,
    (security, file): (&etcron_common::settings::EtcdSecurityFile, &etcron_common::settings::EtcdSecurityFile),
) -> anyhow::Result<Vec<NamespaceConfig>> {
    let inputs = sections
        .into_iter()
        .map(|s| etcron_common::settings::NamespaceInput {
            namespace: s.namespace,
            etcd_endpoints: s.etcd_endpoints,
            mongodb_db: s.mongodb_db,
        })
        .collect();
    let extra = etcron_common::settings::resolve_namespaces(shared, inputs).map_err(anyhow::Error::msg)?;
    let mut out = Vec::with_capacity(extra.len());
    for (i, ns) in extra.into_iter().enumerate() {
        let etcd = etcron_common::settings::etcd_config(ns.etcd_endpoints, security, file)
            .map_err(|e| anyhow::anyhow!("namespaces[{i}].{e}"))?;
        out.push(NamespaceConfig { namespace: ns.namespace, etcd, mongodb_db: ns.mongodb_db });
    }
    Ok(out)
}

/// Default changing requests per second per caller, and burst.
pub const DEFAULT_MUTATION_RATE: f64 = 20.0;
pub const DEFAULT_MUTATION_BURST: u32 = 100;

/// Shortest and longest `request_timeout` (its head alone has 10 s of it).
pub const REQUEST_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(15)..=Duration::from_secs(3600);

/// Shortest and longest `stream_quiet_limit`.
pub const STREAM_QUIET_LIMIT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(86400);

/// Shortest and longest `spec_check_every`.
pub const SPEC_CHECK_EVERY_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(10)..=Duration::from_secs(86400);

/// Shortest and longest record retention.
pub const RETENTION_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(3600)..=Duration::from_secs(10 * 366 * 86400);

/// The etcd size warning's settings, checked.
fn storage_settings(
    quota: Option<i64>,
    ratio: Option<f64>,
) -> anyhow::Result<crate::duties::etcd_storage::StorageSettings> {
    let quota_bytes = quota.unwrap_or(crate::duties::etcd_storage::DEFAULT_QUOTA_BYTES);
    if !(1024 * 1024..=64 * 1024 * 1024 * 1024).contains(&quota_bytes) {
        bail!("etcd_quota_bytes: must be between 1 MiB and 64 GiB, got {quota_bytes}");
    }
    let warn_ratio = ratio.unwrap_or(crate::duties::etcd_storage::DEFAULT_WARN_RATIO);
    if !(warn_ratio.is_finite() && (0.1..=1.0).contains(&warn_ratio)) {
        bail!("etcd_size_warn_ratio: must be between 0.1 and 1, got {warn_ratio}");
    }
    Ok(crate::duties::etcd_storage::StorageSettings { warn_ratio, quota_bytes })
}

/// The rate limit on changes per caller: `mutation_rate` per second, `mutation_burst` at once.
fn mutation_limit(rate: Option<f64>, burst: Option<u32>) -> anyhow::Result<(f64, u32)> {
    let rate = rate.unwrap_or(DEFAULT_MUTATION_RATE);
    if !(rate.is_finite() && (0.01..=100_000.0).contains(&rate)) {
        bail!("mutation_rate: must be between 0.01 and 100000 requests per second, got {rate}");
    }
    let burst = burst.unwrap_or(DEFAULT_MUTATION_BURST);
    if !(1..=1_000_000).contains(&burst) {
        bail!("mutation_burst: must be between 1 and 1000000, got {burst}");
    }
    Ok((rate, burst))
}

/// The compactor's period and the history it keeps, at least `floor` (what workers read).
fn compactor(
    every: Option<HumanDuration>,
    retention: Option<HumanDuration>,
    floor: Option<HumanDuration>,
) -> anyhow::Result<crate::duties::compactor::CompactorSettings> {
    let floor = floor.map_or(crate::duties::compactor::MIN_RETENTION, |d| d.0);
    let compactor = crate::duties::compactor::CompactorSettings {
        every: every.map_or(crate::duties::compactor::DEFAULT_EVERY, |d| d.0),
        retention: retention.map_or(crate::duties::compactor::DEFAULT_RETENTION, |d| d.0),
    };
    if compactor.retention < floor {
        bail!(
            "compact_retention: must be at least {} (workers read that much of etcd's history), got {}",
            HumanDuration(floor),
            HumanDuration(compactor.retention)
        );
    }
    Ok(compactor)
}

/// The bounds of `retention` and `audit_retention`, as their errors say them.
const RETENTION: (&std::ops::RangeInclusive<Duration>, &str) = (&RETENTION_RANGE, "1h and 3660d");

/// A duration setting (`set`, or `default`) within `range`, its bounds said as `said`.
fn within(
    name: &str,
    set: Option<HumanDuration>,
    default: Duration,
    (range, said): (&std::ops::RangeInclusive<Duration>, &str),
) -> anyhow::Result<Duration> {
    let value = set.map_or(default, |d| d.0);
    if !range.contains(&value) {
        bail!("{name}: must be between {said}, got {}", HumanDuration(value));
    }
    Ok(value)
}

/// The byte budgets of job changes and the job quota per team (`max_jobs_per_team = 0`: none).
fn change_limits(
    (bytes_rate, bytes_burst): (Option<u64>, Option<u64>),
    (max_jobs, max_history_bytes): (Option<u64>, Option<u64>),
) -> anyhow::Result<crate::change_limits::ChangeLimitSettings> {
    let defaults = crate::change_limits::ChangeLimitSettings::default();
    crate::change_limits::ChangeLimitSettings {
        bytes_rate: bytes_rate.unwrap_or(defaults.bytes_rate),
        bytes_burst: bytes_burst.unwrap_or(defaults.bytes_burst),
        max_jobs_per_team: match max_jobs {
            Some(0) => None,
            Some(n) => Some(n),
            None => defaults.max_jobs_per_team,
        },
        max_history_bytes_per_job: max_history_bytes.unwrap_or(defaults.max_history_bytes_per_job),
    }
    .checked()
    .map_err(anyhow::Error::msg)
}

/// `trusted_proxies`, parsed; an entry that is no address block is an error naming it.
fn trusted_proxies(list: Option<Vec<String>>) -> anyhow::Result<Vec<crate::layers::client::Cidr>> {
    let list = list.unwrap_or_default();
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            crate::layers::client::Cidr::parse(text).map_err(|e| anyhow::anyhow!("trusted_proxies[{i}]: {e}"))
        })
        .collect()
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))
    }
}

impl Config {
    pub fn resolve(mut cli: Cli) -> anyhow::Result<Self> {
        let file = cli.config.as_ref().map_or_else(|| Ok(FileConfig::default()), |p| FileConfig::load(p))?;
        let (security, otlp) = (cli.shared.etcd_security(), cli.shared.otlp_endpoint.take());
        cli.shared.read_mongodb_uri_file(file.mongodb_uri_file.as_deref()).map_err(anyhow::Error::msg)?;
        let shared = etcron_common::settings::resolve_args(
            cli.shared,
            (file.etcd_endpoints, file.namespace, file.mongodb_uri, file.mongodb_db, file.log_level, file.log_format),
        )
        .map_err(anyhow::Error::msg)?;
        let listen = cli.listen.or(file.listen).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8070)));
        let retention =
            within("retention", cli.retention.or(file.retention), Duration::from_secs(30 * 86400), RETENTION)?;
        let (rate, burst) =
            mutation_limit(cli.mutation_rate.or(file.mutation_rate), cli.mutation_burst.or(file.mutation_burst))?;
        let auth =
            crate::layers::auth::Auth::new(&file.auth.tokens, cli.api_token.as_deref().filter(|t| !t.is_empty()))
                .map_err(anyhow::Error::msg)?
                .with_rate_limit(rate, burst)
                .with_trusted_proxies(trusted_proxies(cli.trusted_proxies.or(file.auth.trusted_proxies))?);
        // Open beyond loopback without tokens only when the operator says so.
        let safe = auth.enabled() || listen.ip().is_loopback();
        if !(safe || cli.insecure_no_auth || file.auth.insecure_no_auth) {
            bail!(
                "listen: refusing to serve the API on {listen} without tokens (anyone who can connect could change \
                 jobs); add [[auth.tokens]] to the config or set ETCRON_API_TOKEN, or pass --insecure-no-auth"
            );
        }
        let audit_retention = within(
            "audit_retention",
            cli.audit_retention.or(file.audit_retention),
            Duration::from_secs(365 * 86400),
            RETENTION,
        )?;
        let storage = storage_settings(
            cli.etcd_quota_bytes.or(file.etcd_quota_bytes),
            cli.etcd_size_warn_ratio.or(file.etcd_size_warn_ratio),
        )?;
        let (request_timeout, stream_quiet_limit, spec_check_every) = timings(
            cli.request_timeout.or(file.request_timeout),
            cli.stream_quiet_limit.or(file.stream_quiet_limit),
            cli.spec_check_every.or(file.spec_check_every),
        )?;
        let compactor = compactor(
            cli.compact_every.or(file.compact_every),
            cli.compact_retention.or(file.compact_retention),
            cli.compact_retention_floor,
        )?;
        let change_limits = change_limits(
            (file.change_bytes_rate, file.change_bytes_burst),
            (file.max_jobs_per_team, file.max_history_bytes_per_job),
        )?;
        let teams = crate::team_policy::TeamPolicies::new(file.teams).map_err(anyhow::Error::msg)?;
        let namespaces = namespaces(&shared, file.namespaces, (&security, &file.etcd))?;
        Ok(Self {
            namespaces,
            change_limits,
            teams,
            auth,
            request_timeout,
            stream_quiet_limit,
            spec_check_every,
            audit_retention,
            storage,
            compactor,
            etcd: etcron_common::settings::etcd_config(shared.etcd_endpoints.clone(), &security, &file.etcd)
                .map_err(anyhow::Error::msg)?,
            etcd_endpoints: shared.etcd_endpoints,
            namespace: shared.namespace,
            listen,
            mongodb_uri: shared.mongodb_uri,
            mongodb_db: shared.mongodb_db,
            retention,
            log_level: shared.log_level,
            json_logs: shared.json_logs,
            tracing: etcron_common::trace::resolve(otlp, file.tracing.as_ref()).map_err(anyhow::Error::msg)?,
        })
    }
}

/// `request_timeout`, `stream_quiet_limit` and `spec_check_every`, each checked against its range.
fn timings(
    request_timeout: Option<HumanDuration>,
    stream_quiet_limit: Option<HumanDuration>,
    spec_check_every: Option<HumanDuration>,
) -> anyhow::Result<(Duration, Duration, Duration)> {
    let request_timeout = within(
        "request_timeout",
        request_timeout,
        etcron_common::serve::REQUEST,
        (&REQUEST_TIMEOUT_RANGE, "15s and 1h"),
    )?;
    let stream_quiet_limit = within(
        "stream_quiet_limit",
        stream_quiet_limit,
        crate::api::stream::QUIET_LIMIT,
        (&STREAM_QUIET_LIMIT_RANGE, "1s and 24h"),
    )?;
    let spec_check_every = within(
        "spec_check_every",
        spec_check_every,
        crate::duties::spec_check::CHECK_EVERY,
        (&SPEC_CHECK_EVERY_RANGE, "10s and 24h"),
    )?;
    Ok((request_timeout, stream_quiet_limit, spec_check_every))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_check_interval_has_a_default_and_a_range() {
        let c = Config::resolve(Cli::parse_from(["etcron-master"])).unwrap();
        assert_eq!(c.spec_check_every, crate::duties::spec_check::CHECK_EVERY);
        let c = Config::resolve(Cli::parse_from(["etcron-master", "--spec-check-every", "30s"])).unwrap();
        assert_eq!(c.spec_check_every, Duration::from_secs(30));
        let err = Config::resolve(Cli::parse_from(["etcron-master", "--spec-check-every", "1s"])).unwrap_err();
        assert!(err.to_string().contains("spec_check_every"), "{err}");
    }

    #[test]
    fn defaults_and_overrides() {
        let c = Config::resolve(Cli::parse_from(["etcron-master"])).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8070");
        assert_eq!(c.namespace, "/etcron");
        let err = Config::resolve(Cli::parse_from(["etcron-master", "--listen", "0.0.0.0:9000"])).unwrap_err();
        assert!(format!("{err:#}").contains("without tokens"), "{err:#}");
        let c = Config::resolve(Cli::parse_from([
            "etcron-master",
            "--insecure-no-auth",
            "--listen",
            "0.0.0.0:9000",
            "--etcd-endpoints",
            "a:1,b:2",
        ]))
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.etcd_endpoints, vec!["a:1", "b:2"]);
        let err = Config::resolve(Cli::parse_from(["etcron-master", "--namespace", "x"])).unwrap_err();
        assert!(format!("{err:#}").contains("namespace"));
    }

    #[test]
    fn request_timeout_and_trusted_proxies_are_checked() {
        let c = Config::resolve(Cli::parse_from(["etcron-master"])).unwrap();
        assert_eq!(c.request_timeout, etcron_common::serve::REQUEST);
        let err = Config::resolve(Cli::parse_from(["etcron-master", "--request-timeout", "5s"])).unwrap_err();
        assert!(format!("{err:#}").contains("request_timeout"), "{err:#}");
        let args = ["etcron-master", "--trusted-proxies", "10.0.0.0/8,fd00::/8"];
        assert!(Config::resolve(Cli::parse_from(args)).is_ok());
        let err = Config::resolve(Cli::parse_from(["etcron-master", "--trusted-proxies", "10.0.0.0/8,lb.example"]))
            .unwrap_err();
        assert!(format!("{err:#}").contains("trusted_proxies[1]"), "{err:#}");
    }

    #[test]
    fn namespace_sections_are_resolved_and_a_repeat_refused() {
        let path = std::env::temp_dir().join(format!("etcron-master-ns-{}.toml", std::process::id()));
        let text =
            "[[namespaces]]\nnamespace = \"/b\"\netcd_endpoints = [\"127.0.0.1:23790\"]\nmongodb_db = \"etcron_b\"\n";
        std::fs::write(&path, text).unwrap();
        let c = Config::resolve(Cli::parse_from(["etcron-master", "--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(c.namespaces.len(), 1);
        assert_eq!((c.namespaces[0].namespace.as_str(), c.namespaces[0].mongodb_db.as_str()), ("/b", "etcron_b"));
        assert_eq!(c.namespaces[0].etcd.endpoints, ["127.0.0.1:23790"]);
        std::fs::write(&path, format!("{text}[[namespaces]]\nnamespace = \"/b\"\n")).unwrap();
        let err = Config::resolve(Cli::parse_from(["etcron-master", "--config", path.to_str().unwrap()])).unwrap_err();
        assert!(format!("{err:#}").contains("namespaces[1].namespace: \"/b\" is served already"), "{err:#}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_example_config_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/master.toml");
        let file = FileConfig::load(&path).unwrap();
        assert!(file.etcd_endpoints.is_some());
        let cli = Cli::parse_from(["etcron-master", "--config", path.to_str().unwrap()]);
        Config::resolve(cli).unwrap();
    }
}
