//! Secrets a spec withholds: what views show in place of a secret (`null`, a redacted URL
//! password), and keeping stored secrets when a PUT asks to (`null` means "keep it").

use crate::spec::notify::{self, NotifyTarget};

use super::*;

/// The fields of a task that hold secrets (one per kind): `secret_env`, `secret_headers`,
/// `secret_metadata`.
pub const TASK_SECRET_FIELDS: [&str; 3] = ["secret_env", "secret_headers", "secret_metadata"];

/// A secret that a PUT asks to keep has no stored value to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSecret {
    pub field: String,
    /// Why it cannot be kept.
    pub why: String,
}

impl MissingSecret {
    fn none_stored(field: String) -> Self {
        Self {
            field,
            why: "a null secret keeps the stored value, but this job has none stored; give the value".to_owned(),
        }
    }
}

impl JobSpec {
    /// Whether any secret of the task is `null` (withheld, or "keep it" in a PUT).
    #[must_use]
    pub fn task_withholds_secrets(&self) -> bool {
        self.task.secrets().values().any(Option::is_none)
    }

    /// Whether any secret (of the task or of a `notify` target) is `null`, or a URL carries the
    /// password views show in place of the stored one.
    #[must_use]
    pub fn withholds_secrets(&self) -> bool {
        let shown_password = match &self.task {
            Task::Http(h) => crate::spec::headers::shows_password(&h.url),
            Task::Shell(_) | Task::Grpc(_) | Task::Handler(_) => false,
        } || self
            .notify
            .iter()
            .flatten()
            .any(|t| t.url.as_deref().is_some_and(crate::spec::headers::shows_password));
        shown_password
            || self.task_withholds_secrets()
            || self.notify.iter().flatten().any(NotifyTarget::withholds_secrets)
    }

    /// The spec as the API shows it: every secret value withheld (`null`).
    #[must_use]
    pub fn redacted(&self) -> Self {
        let mut spec = self.clone();
        for value in spec.task.secrets_mut().1.values_mut() {
            *value = None;
        }
        if let Task::Http(http) = &mut spec.task {
            http.url = crate::spec::headers::shown_url(&http.url);
        }
        if let Some(targets) = &mut spec.notify {
            *targets = targets.iter().map(NotifyTarget::redacted).collect();
        }
        spec
    }

    /// Fills each withheld (`null`) secret from `stored`, the spec being replaced, when it is a
    /// task of the same kind with that secret, and a URL password shown as `redacted` from the
    /// stored URL. Secrets kept for an HTTP task's URL (a gRPC task's endpoint) are kept only
    /// while it points at the same destination (scheme, host, port). Errors name the first
    /// secret that cannot be kept.
    pub fn keep_secrets(&mut self, stored: Option<&JobSpec>) -> Result<(), MissingSecret> {
        if let Task::Http(http) = &mut self.task {
            let stored_url = stored.and_then(|s| match &s.task {
                Task::Http(h) => Some(h.url.as_str()),
                _ => None,
            });
            http.url = crate::spec::headers::keep_url_password(&http.url, stored_url)
                .map_err(|why| MissingSecret { field: "task.url".to_owned(), why })?;
        }
        let moved = match (self.task.destination_url(), stored.and_then(|s| s.task.destination_url())) {
            (Some(url), Some(old)) => crate::spec::headers::destination_changed(url, old),
            _ => None,
        };
        let kept = stored.map(|s| s.task.secrets());
        let same_kind = stored.is_some_and(|s| std::mem::discriminant(&s.task) == std::mem::discriminant(&self.task));
        let (field, secrets) = self.task.secrets_mut();
        for (name, value) in secrets.iter_mut() {
            if value.is_none() {
                if let Some(why) = &moved {
                    return Err(MissingSecret { field: format!("{field}.{name}"), why: why.clone() });
                }
                *value = kept.filter(|_| same_kind).and_then(|k| k.get(name).cloned().flatten());
                if value.is_none() {
                    return Err(MissingSecret::none_stored(format!("{field}.{name}")));
                }
            }
        }
        if let Some(targets) = &mut self.notify {
            let stored = stored.and_then(|s| s.notify.as_deref()).unwrap_or_default();
            notify::keep_secrets("notify", targets, stored).map_err(|(field, why)| MissingSecret {
                field,
                why: why.unwrap_or_else(|| MissingSecret::none_stored(String::new()).why),
            })?;
        }
        Ok(())
    }
}

/// A spec as JSON with every secret withheld by the rule of [`JobSpec::redacted`], for values
/// that need not be valid specs (a value written around the API, a refused request the audit
/// log keeps): the values of `secret_env` / `secret_headers` / `secret_metadata` (task and
/// targets) and `secret_url`s become `null`, URL passwords are shown as `redacted`. A test holds the two to
/// the same answer on valid specs.
#[must_use]
pub fn redacted_json(mut value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    fn null_values(v: Option<&mut Value>) {
        match v {
            Some(Value::Object(map)) => map.values_mut().for_each(|x| *x = Value::Null),
            Some(other) => *other = Value::Null,
            None => {}
        }
    }
    fn hide_password(v: Option<&mut Value>) {
        if let Some(Value::String(url)) = v {
            *url = crate::spec::headers::shown_url(url);
        }
    }
    if let Some(task) = value.get_mut("task").and_then(Value::as_object_mut) {
        null_values(task.get_mut("secret_env"));
        null_values(task.get_mut("secret_headers"));
        null_values(task.get_mut("secret_metadata"));
        hide_password(task.get_mut("url"));
    }
    if let Some(targets) = value.get_mut("notify").and_then(Value::as_array_mut) {
        for target in targets.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(url) = target.get_mut("secret_url") {
                *url = Value::Null;
            }
            null_values(target.get_mut("secret_headers"));
            hide_password(target.get_mut("url"));
        }
    }
    value
}
