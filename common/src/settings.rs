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
    check_db_name("mongodb_db", &mongodb_db)?;
    let log_level = input.log_level.0.or(input.log_level.1).unwrap_or_else(|| "info".to_owned());
    let json_logs = match input.log_format.0.or(input.log_format.1).as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => return Err(format!("log_format: expected text or json, got {other:?}")),
    };
    Ok(Shared { etcd_endpoints, namespace, mongodb_uri, mongodb_db, log_level, json_logs })
}

/// A MongoDB database name MongoDB accepts; the error names `setting`.
fn check_db_name(setting: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 || name.contains(['/', '\\', '.', ' ', '"', '$']) {
        return Err(format!("{setting}: {name:?} is not a valid database name"));
    }
    Ok(())
}

/// Most namespaces one process serves, its default one included.
pub const MAX_NAMESPACES: usize = 32;

/// One `[[namespaces]]` section's shared settings as the file gives them.
#[derive(Debug, Default, Clone)]
pub struct NamespaceInput {
    pub namespace: Option<String>,
    pub etcd_endpoints: Option<Vec<String>>,
    pub mongodb_db: Option<String>,
}

/// A namespace served besides the default one: its keys, its etcd cluster, its records' database.
#[derive(Debug, Clone)]
pub struct ExtraNamespace {
    pub namespace: String,
    pub etcd_endpoints: Vec<String>,
    /// Default: the top-level `mongodb_db`.
    pub mongodb_db: String,
}

/// The `[[namespaces]]` sections checked against each other and the default namespace: each
/// names a valid namespace served once and inside no other (their keys would mix on a shared
/// cluster), at least one etcd endpoint (default: the top-level ones) and a valid database.
/// The error names the section's field (`namespaces[1].namespace`).
pub fn resolve_namespaces(default: &Shared, sections: Vec<NamespaceInput>) -> Result<Vec<ExtraNamespace>, String> {
    if sections.len() >= MAX_NAMESPACES {
        return Err(format!(
            "namespaces: at most {} sections (a process serves {MAX_NAMESPACES} namespaces at most)",
            MAX_NAMESPACES - 1
        ));
    }
    let mut served = vec![("namespace".to_owned(), default.namespace.clone())];
    let mut out = Vec::with_capacity(sections.len());
    for (i, section) in sections.into_iter().enumerate() {
        let at = format!("namespaces[{i}]");
        let namespace = section.namespace.ok_or_else(|| format!("{at}.namespace: required"))?;
        etcron_model::keys::Keys::new(&namespace).map_err(|e| format!("{at}.namespace: {e}"))?;
        for (name, other) in &served {
            if *other == namespace {
                return Err(format!("{at}.namespace: {namespace:?} is served already ({name}); each namespace once"));
            }
            let (outer, inner) = if namespace.len() < other.len() { (&namespace, other) } else { (other, &namespace) };
            if inner.starts_with(&format!("{outer}/")) {
                return Err(format!("{at}.namespace: {namespace:?} and {other:?} ({name}) nest: their keys would mix"));
            }
        }
        let etcd_endpoints = section.etcd_endpoints.unwrap_or_else(|| default.etcd_endpoints.clone());
        if etcd_endpoints.is_empty() {
            return Err(format!("{at}.etcd_endpoints: at least one endpoint is required"));
        }
        if let Some(bad) = etcd_endpoints.iter().find(|e| e.is_empty() || e.contains(char::is_whitespace)) {
            return Err(format!("{at}.etcd_endpoints: {bad:?} is not an endpoint (host:port)"));
        }
        let mongodb_db = section.mongodb_db.unwrap_or_else(|| default.mongodb_db.clone());
        check_db_name(&format!("{at}.mongodb_db"), &mongodb_db)?;
        served.push((format!("{at}.namespace"), namespace.clone()));
        out.push(ExtraNamespace { namespace, etcd_endpoints, mongodb_db });
    }
    Ok(out)
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

    #[test]
    fn namespace_sections_are_refused_naming_the_field() {
        let default = resolve(SharedInput::default()).unwrap();
        let section = |ns: &str| NamespaceInput { namespace: Some(ns.to_owned()), ..NamespaceInput::default() };
        let extra = resolve_namespaces(&default, vec![section("/b"), section("/c")]).unwrap();
        assert_eq!(extra[1].namespace, "/c");
        assert_eq!(extra[0].etcd_endpoints, default.etcd_endpoints, "the top-level endpoints by default");
        assert_eq!(extra[0].mongodb_db, "etcron");
        for (sections, needle) in [
            (
                vec![section("/b"), section("/b")],
                "namespaces[1].namespace: \"/b\" is served already (namespaces[0].namespace)",
            ),
            (vec![section("/etcron")], "namespaces[0].namespace: \"/etcron\" is served already (namespace)"),
            (vec![section("/etcron/b")], "namespaces[0].namespace: \"/etcron/b\" and \"/etcron\" (namespace) nest"),
            (vec![section("b")], "namespaces[0].namespace: "),
            (vec![NamespaceInput::default()], "namespaces[0].namespace: required"),
            (
                vec![section("/b"), NamespaceInput { etcd_endpoints: Some(vec![]), ..section("/c") }],
                "namespaces[1].etcd_endpoints: at least one",
            ),
            (vec![NamespaceInput { mongodb_db: Some("a.b".into()), ..section("/b") }], "namespaces[0].mongodb_db"),
        ] {
            let err = resolve_namespaces(&default, sections).unwrap_err();
            assert!(err.starts_with(needle), "{needle}: {err}");
        }
        let many = (0..MAX_NAMESPACES).map(|i| section(&format!("/n{i}"))).collect();
        assert!(resolve_namespaces(&default, many).unwrap_err().starts_with("namespaces: at most 31"));
    }
}
