//! Master configuration: TOML file, `ETCRON_*` env vars and flags (flag > env > file > default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use etcron_common::duration::HumanDuration;
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub etcd_endpoints: Option<Vec<String>>,
    pub namespace: Option<String>,
    pub listen: Option<SocketAddr>,
    pub mongodb_uri: Option<String>,
    pub mongodb_db: Option<String>,
    pub retention: Option<HumanDuration>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub etcd_endpoints: Vec<String>,
    pub namespace: String,
    pub listen: SocketAddr,
    pub mongodb_uri: String,
    pub mongodb_db: String,
    pub retention: Duration,
    pub log_level: String,
    pub json_logs: bool,
    pub auth: crate::auth::Auth,
}

/// Shortest and longest record retention.
pub const RETENTION_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(3600)..=Duration::from_secs(10 * 366 * 86400);

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))
    }
}

impl Config {
    pub fn resolve(cli: Cli) -> anyhow::Result<Self> {
        let file = match &cli.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        let shared = etcron_common::settings::resolve_args(
            cli.shared,
            (file.etcd_endpoints, file.namespace, file.mongodb_uri, file.mongodb_db, file.log_level, file.log_format),
        )
        .map_err(anyhow::Error::msg)?;
        let listen = cli.listen.or(file.listen).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8070)));
        let retention = cli.retention.or(file.retention).map_or(Duration::from_secs(30 * 86400), |d| d.0);
        if !RETENTION_RANGE.contains(&retention) {
            bail!("retention: must be between 1h and 3660d, got {}", HumanDuration(retention));
        }
        let auth = match cli.api_token.as_deref() {
            Some(token) => crate::auth::Auth::with_token(token).map_err(anyhow::Error::msg)?,
            None => crate::auth::Auth::open(),
        };
        Ok(Self {
            auth,
            etcd_endpoints: shared.etcd_endpoints,
            namespace: shared.namespace,
            listen,
            mongodb_uri: shared.mongodb_uri,
            mongodb_db: shared.mongodb_db,
            retention,
            log_level: shared.log_level,
            json_logs: shared.json_logs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = Config::resolve(Cli::parse_from(["etcron-master"])).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8070");
        assert_eq!(c.namespace, "/etcron");
        let c = Config::resolve(Cli::parse_from([
            "etcron-master",
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
    fn the_example_config_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/master.toml");
        let file = FileConfig::load(&path).unwrap();
        assert!(file.etcd_endpoints.is_some());
        let cli = Cli::parse_from(["etcron-master", "--config", path.to_str().unwrap()]);
        Config::resolve(cli).unwrap();
    }
}
