//! Settings both binaries share: how each is resolved from flag/env and file values, with the
//! default and the check, and errors that name the setting.

/// Flags (and `ETCRON_*` env vars) both binaries take.
#[derive(Debug, Default, clap::Args)]
pub struct SharedArgs {
    /// etcd endpoints, comma-separated.
    #[arg(long, env = "ETCRON_ETCD_ENDPOINTS")]
    pub etcd_endpoints: Option<String>,
    /// Key namespace.
    #[arg(long, env = "ETCRON_NAMESPACE")]
    pub namespace: Option<String>,
    /// MongoDB URI for execution records (a URI with a password: prefer `--mongodb-uri-file`).
    #[arg(long, env = "ETCRON_MONGODB_URI", hide_env_values = true)]
    pub mongodb_uri: Option<String>,
    /// File holding the MongoDB URI (one line), read once at start; `--mongodb-uri` wins over it.
    #[arg(long, env = "ETCRON_MONGODB_URI_FILE")]
    pub mongodb_uri_file: Option<std::path::PathBuf>,
    /// MongoDB database.
    #[arg(long, env = "ETCRON_MONGODB_DB")]
    pub mongodb_db: Option<String>,
    /// Log level or `RUST_LOG`-style filter.
    #[arg(long, env = "ETCRON_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// `text` or `json`.
    #[arg(long, env = "ETCRON_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// CA certificate (PEM) that signed etcd's; turns on TLS to etcd.
    #[arg(long, env = "ETCRON_ETCD_CA_FILE")]
    pub etcd_ca_file: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for etcd's client-certificate auth; with `--etcd-key-file`.
    #[arg(long, env = "ETCRON_ETCD_CERT_FILE")]
    pub etcd_cert_file: Option<std::path::PathBuf>,
    /// Key (PEM) of `--etcd-cert-file`.
    #[arg(long, env = "ETCRON_ETCD_KEY_FILE")]
    pub etcd_key_file: Option<std::path::PathBuf>,
    /// etcd user (etcd's own auth); the password comes from `ETCRON_ETCD_PASSWORD` or
    /// `--etcd-password-file`, never from a flag.
    #[arg(long, env = "ETCRON_ETCD_USER")]
    pub etcd_user: Option<String>,
    /// File holding the etcd user's password (one line).
    #[arg(long, env = "ETCRON_ETCD_PASSWORD_FILE")]
    pub etcd_password_file: Option<std::path::PathBuf>,
    /// Export trace spans over OTLP/HTTP to this endpoint (`http://127.0.0.1:4318`: spans go to
    /// `{endpoint}/v1/traces`); off by default, and an empty value turns off the file's.
    #[arg(long, env = "ETCRON_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

impl SharedArgs {
    /// Fills `mongodb_uri` from `mongodb_uri_file` (the flag's, else the config file's) when no
    /// URI was given as a flag or variable; the error names the setting.
    pub fn read_mongodb_uri_file(&mut self, file: Option<&std::path::Path>) -> Result<(), String> {
        if self.mongodb_uri.is_some() {
            return Ok(());
        }
        let Some(path) = self.mongodb_uri_file.as_deref().or(file) else { return Ok(()) };
        let text = std::fs::read(path)
            .map_err(|e| format!("mongodb_uri_file: cannot read {}: {e}", path.display()))
            .and_then(|b| String::from_utf8(b).map_err(|_| "mongodb_uri_file: not UTF-8".to_owned()))?;
        self.mongodb_uri = Some(text.trim_end_matches(['\r', '\n']).to_owned());
        Ok(())
    }

    /// The etcd security flags, shaped like the file's `[etcd]` table.
    #[must_use]
    pub fn etcd_security(&self) -> EtcdSecurityFile {
        EtcdSecurityFile {
            ca_file: self.etcd_ca_file.clone(),
            cert_file: self.etcd_cert_file.clone(),
            key_file: self.etcd_key_file.clone(),
            user: self.etcd_user.clone(),
            password_file: self.etcd_password_file.clone(),
        }
    }
}

/// The file's etcd security settings (each overridden by its flag or env var).
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSecurityFile {
    pub ca_file: Option<std::path::PathBuf>,
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    pub user: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
}

/// Reads the TLS files and the password and builds the etcd connection settings; errors name
/// the setting. `ETCRON_ETCD_PASSWORD` is read here (never from a flag: it would show in `ps`).
pub fn etcd_config(
    endpoints: Vec<String>,
    args: &EtcdSecurityFile,
    file: &EtcdSecurityFile,
) -> Result<crate::etcd::EtcdConfig, String> {
    let read = |setting: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("{setting}: cannot read {}: {e}", path.display()))
    };
    let ca = args.ca_file.as_ref().or(file.ca_file.as_ref());
    let cert = args.cert_file.as_ref().or(file.cert_file.as_ref());
    let key = args.key_file.as_ref().or(file.key_file.as_ref());
    let identity = match (cert, key) {
        (Some(c), Some(k)) => Some((read("etcd_cert_file", c)?, read("etcd_key_file", k)?)),
        (None, None) => None,
        _ => return Err("etcd_cert_file: needs etcd_key_file, and the other way round".to_owned()),
    };
    let ca_pem = ca.map(|p| read("etcd_ca_file", p)).transpose()?;
    let https = endpoints.iter().any(|e| e.starts_with("https://"));
    if https && endpoints.iter().any(|e| e.starts_with("http://")) {
        return Err("etcd_endpoints: mixes http:// and https://".to_owned());
    }
    let tls = (ca_pem.is_some() || identity.is_some() || https).then_some(crate::etcd::EtcdTls { ca_pem, identity });
    if tls.is_some() && endpoints.iter().any(|e| e.starts_with("http://")) {
        return Err("etcd_endpoints: http:// with TLS settings; use https:// or no scheme".to_owned());
    }
    let user = args.user.clone().or_else(|| file.user.clone());
    let password_file = args.password_file.as_ref().or(file.password_file.as_ref());
    let user = match user {
        None => None,
        Some(u) if u.is_empty() => return Err("etcd_user: must not be empty".to_owned()),
        Some(u) => {
            let password = match (std::env::var("ETCRON_ETCD_PASSWORD").ok(), password_file) {
                (Some(p), _) => p,
                (None, Some(path)) => String::from_utf8(read("etcd_password_file", path)?)
                    .map_err(|_| "etcd_password_file: not UTF-8".to_owned())?
                    .trim_end_matches(['\r', '\n'])
                    .to_owned(),
                (None, None) => {
                    return Err("etcd_user: needs a password in ETCRON_ETCD_PASSWORD or etcd_password_file".to_owned())
                }
            };
            Some((u, password))
        }
    };
    Ok(crate::etcd::EtcdConfig { endpoints, user, tls })
}

/// Resolved settings common to masters and workers.
#[derive(Debug, Clone)]
pub struct Shared {
    pub etcd_endpoints: Vec<String>,
    pub namespace: String,
    pub mongodb_uri: String,
    pub mongodb_db: String,
    pub log_level: String,
    pub json_logs: bool,
}

/// Raw values: the flag/env value first, then the file's.
#[derive(Debug, Default)]
pub struct SharedInput {
    pub etcd_endpoints: (Option<String>, Option<Vec<String>>),
    pub namespace: (Option<String>, Option<String>),
    pub mongodb_uri: (Option<String>, Option<String>),
    pub mongodb_db: (Option<String>, Option<String>),
    pub log_level: (Option<String>, Option<String>),
    pub log_format: (Option<String>, Option<String>),
}

/// Applies flag > env > file > default and checks each value; the error names the setting.
pub fn resolve(input: SharedInput) -> Result<Shared, String> {
    let etcd_endpoints = match input.etcd_endpoints {
        (Some(e), _) => crate::etcd::parse_endpoints(&e),
        (None, file) => file.unwrap_or_else(|| vec!["127.0.0.1:2379".to_owned()]),
    };
    if etcd_endpoints.is_empty() {
        return Err("etcd_endpoints: at least one endpoint is required".to_owned());
    }
    let namespace = input.namespace.0.or(input.namespace.1).unwrap_or_else(|| "/etcron".to_owned());
    etcron_model::keys::Keys::new(&namespace).map_err(|e| format!("namespace: {e}"))?;
    let mongodb_uri =
        input.mongodb_uri.0.or(input.mongodb_uri.1).unwrap_or_else(|| "mongodb://127.0.0.1:27017".to_owned());
    if !(mongodb_uri.starts_with("mongodb://") || mongodb_uri.starts_with("mongodb+srv://")) {
        return Err("mongodb_uri: must start with mongodb:// or mongodb+srv://".to_owned());
    }
    let mongodb_db = input.mongodb_db.0.or(input.mongodb_db.1).unwrap_or_else(|| "etcron".to_owned());
    if mongodb_db.is_empty() || mongodb_db.len() > 63 || mongodb_db.contains(['/', '\\', '.', ' ', '"', '$']) {
        return Err(format!("mongodb_db: {mongodb_db:?} is not a valid database name"));
    }
    let log_level = input.log_level.0.or(input.log_level.1).unwrap_or_else(|| "info".to_owned());
    let json_logs = match input.log_format.0.or(input.log_format.1).as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => return Err(format!("log_format: expected text or json, got {other:?}")),
    };
    Ok(Shared { etcd_endpoints, namespace, mongodb_uri, mongodb_db, log_level, json_logs })
}

/// The file's values of the shared settings, in the order of `SharedArgs`.
pub type SharedFile =
    (Option<Vec<String>>, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>);

/// Applies flag > env > file > default to the shared settings.
pub fn resolve_args(args: SharedArgs, file: SharedFile) -> Result<Shared, String> {
    resolve(SharedInput {
        etcd_endpoints: (args.etcd_endpoints, file.0),
        namespace: (args.namespace, file.1),
        mongodb_uri: (args.mongodb_uri, file.2),
        mongodb_db: (args.mongodb_db, file.3),
        log_level: (args.log_level, file.4),
        log_format: (args.log_format, file.5),
    })
}

/// Runs a binary's async main on a multi-threaded runtime with logging set up (to stderr;
/// `RUST_LOG` overrides `level`); errors end the process with one line and a non-zero code.
pub fn run_main<F, E>(name: &str, level: &str, json: bool, main: impl FnOnce() -> F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Debug + std::fmt::Display,
{
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| level.to_owned());
    let filter =
        tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: starting the runtime failed: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "{name} failed");
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_beats_file_beats_default() {
        let s = resolve(SharedInput {
            namespace: (Some("/flag".into()), Some("/file".into())),
            mongodb_db: (None, Some("fromfile".into())),
            ..SharedInput::default()
        })
        .unwrap();
        assert_eq!(s.namespace, "/flag");
        assert_eq!(s.mongodb_db, "fromfile");
        assert_eq!(s.etcd_endpoints, vec!["127.0.0.1:2379"]);
        assert!(!s.json_logs);
    }

    #[test]
    fn errors_name_the_setting() {
        for (input, needle) in [
            (SharedInput { etcd_endpoints: (Some(" , ".into()), None), ..SharedInput::default() }, "etcd_endpoints"),
            (SharedInput { namespace: (Some("x".into()), None), ..SharedInput::default() }, "namespace"),
            (SharedInput { mongodb_uri: (Some("http://x".into()), None), ..SharedInput::default() }, "mongodb_uri"),
            (SharedInput { mongodb_db: (Some("a.b".into()), None), ..SharedInput::default() }, "mongodb_db"),
            (SharedInput { log_format: (Some("xml".into()), None), ..SharedInput::default() }, "log_format"),
        ] {
            assert!(resolve(input).unwrap_err().starts_with(needle));
        }
    }
}
