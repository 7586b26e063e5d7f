//! Settings both binaries share: how each is resolved from flag/env and file values, with the
//! default and the check, and errors that name the setting.

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
    crate::keys::Keys::new(&namespace).map_err(|e| format!("namespace: {e}"))?;
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
