//! Webhook targets of a job spec (`notify`, and a worker's default): their validation, secrets
//! and the events they ask for.
//!
//! A target is `{"name", "url" | "secret_url", "on", "format", "headers", "secret_headers"}`.
//! `secret_url` is for webhooks whose URL is itself the credential (Slack, Mattermost, Teams):
//! like `secret_headers`, the API shows its value as `null`, and a `null` sent back keeps the
//! stored value. Records and logs show a target by [`NotifyTarget::shown_url`], which never
//! contains a secret.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::spec::headers::Secrets;
use crate::spec::SpecError;

/// Most targets per job (and in a worker's default).
pub const MAX_TARGETS: usize = 10;
/// Most headers per target, plain and secret together.
pub const MAX_TARGET_HEADERS: usize = 16;
/// Longest target URL.
pub const MAX_URL_LEN: usize = 2048;
pub use crate::spec::headers::{MAX_HEADER_NAME_LEN, MAX_HEADER_VALUE_LEN};
/// Longest target name.
pub const MAX_TARGET_NAME_LEN: usize = 64;
/// Shortest and longest `silence` of a target.
pub const SILENCE_RANGE: std::ops::RangeInclusive<std::time::Duration> =
    std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(7 * 24 * 3600);
/// Headers etcron sets on every delivery besides those no request may set
/// (`crate::spec::headers::check_name`: `Host`, `Content-Length`, `Transfer-Encoding`, `X-Etcron-*`).
pub const DELIVERY_HEADERS: [&str; 2] = ["content-type", "user-agent"];

/// What a target can be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyEvent {
    /// A final failure: `failed` or `timed_out` with no retry left, or `lost` not rerun.
    Failure,
    /// A `succeeded` execution.
    Success,
    /// A tick recorded `missed`.
    Missed,
    /// A success whose job's previous final outcome was a failure.
    Recovery,
    /// A final failure that paused its job (`pause_after_failures`).
    Paused,
    /// A tick's run started (or has not started) later than `alerts.late_start`.
    Late,
    /// An execution still running `alerts.max_duration` after it started.
    LongRunning,
    /// No success of the job within `alerts.no_success_within`.
    Stale,
    /// An execution's output matched `alerts.on_output_match`.
    OutputMatch,
}

impl NotifyEvent {
    pub const ALL: [NotifyEvent; 9] = [
        NotifyEvent::Failure,
        NotifyEvent::Success,
        NotifyEvent::Missed,
        NotifyEvent::Recovery,
        NotifyEvent::Paused,
        NotifyEvent::Late,
        NotifyEvent::LongRunning,
        NotifyEvent::Stale,
        NotifyEvent::OutputMatch,
    ];

    /// An SLA alert (`alerts` of a job): raised on its own, not the outcome of a run.
    #[must_use]
    pub fn is_alert(self) -> bool {
        matches!(self, NotifyEvent::Late | NotifyEvent::LongRunning | NotifyEvent::Stale | NotifyEvent::OutputMatch)
    }

    /// The `alerts` field that raises this event, for an alert.
    #[must_use]
    pub fn alert_field(self) -> Option<&'static str> {
        match self {
            NotifyEvent::Late => Some("late_start"),
            NotifyEvent::LongRunning => Some("max_duration"),
            NotifyEvent::Stale => Some("no_success_within"),
            NotifyEvent::OutputMatch => Some("on_output_match"),
            _ => None,
        }
    }

    /// The name in specs, payloads, headers and records.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::Failure => "failure",
            NotifyEvent::Success => "success",
            NotifyEvent::Missed => "missed",
            NotifyEvent::Recovery => "recovery",
            NotifyEvent::Paused => "paused",
            NotifyEvent::Late => "late",
            NotifyEvent::LongRunning => "long_running",
            NotifyEvent::Stale => "stale",
            NotifyEvent::OutputMatch => "output_match",
        }
    }
}

impl std::str::FromStr for NotifyEvent {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| format!("unknown event {s:?}; one of {}", Self::ALL.map(NotifyEvent::as_str).join(", ")))
    }
}

/// The body of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    /// `{"event", "job", "execution", "url", "delivery", "sent_at"}`.
    #[default]
    Json,
    /// `{"text": ...}` for Slack and Mattermost incoming webhooks.
    Slack,
}

impl NotifyFormat {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyFormat::Json => "json",
            NotifyFormat::Slack => "slack",
        }
    }
}

/// One webhook of a job's `notify` list (or of a worker's `[[notify.targets]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyTarget {
    /// Names the target in records; also how a `null` secret finds its stored value when the
    /// list is edited (unnamed targets are matched by position).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where to POST, shown by the API as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Where to POST when the URL is the credential: the API shows `null`, and a `null` in a
    /// PUT keeps the stored value. Give `url` or `secret_url`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "given")]
    pub secret_url: Option<Option<String>>,
    /// Events sent to this target.
    #[serde(default = "default_events")]
    pub on: Vec<NotifyEvent>,
    #[serde(default)]
    pub format: NotifyFormat,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values the API never shows (e.g. `Authorization`), as `task.secret_headers`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: Secrets,
    /// After a delivery of an event of a job, the same event of that job is not sent to this
    /// target again for this long (it is recorded `silenced`): a flapping job pages once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence: Option<crate::duration::HumanDuration>,
}

/// `"secret_url": null` is "keep the stored value", which is not the same as leaving it out.
fn given<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A target that names no events is sent failures, recoveries, pauses and every SLA alert
/// (which only jobs with `alerts` raise).
fn default_events() -> Vec<NotifyEvent> {
    NotifyEvent::ALL.into_iter().filter(|e| !matches!(e, NotifyEvent::Success | NotifyEvent::Missed)).collect()
}

impl NotifyTarget {
    /// Whether this target is sent `event`.
    #[must_use]
    pub fn wants(&self, event: NotifyEvent) -> bool {
        self.on.contains(&event)
    }

    /// The URL to send to; `None` while a secret URL is withheld.
    #[must_use]
    pub fn endpoint(&self) -> Option<&str> {
        self.url.as_deref().or(self.secret_url.as_ref().and_then(Option::as_deref))
    }

    /// The target as records and logs show it: the `url` without a user or password, or only
    /// the scheme and host of a `secret_url` (`https://hooks.slack.com/…`).
    #[must_use]
    pub fn shown_url(&self) -> String {
        match (&self.url, &self.secret_url) {
            (Some(url), _) => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
                let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                let host = rest[..end].rsplit_once('@').map_or(&rest[..end], |(_, h)| h);
                format!("{scheme}://{host}{}", &rest[end..])
            }
            (None, Some(Some(url))) => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
                let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                let host = rest[..end].rsplit_once('@').map_or(&rest[..end], |(_, h)| h);
                format!("{scheme}://{host}/…")
            }
            _ => "(secret URL)".to_owned(),
        }
    }

    /// The target as the API shows it: every secret value withheld (`null`).
    #[must_use]
    pub fn redacted(&self) -> Self {
        let mut t = self.clone();
        if t.secret_url.is_some() {
            t.secret_url = Some(None);
        }
        t.url = t.url.as_deref().map(crate::spec::headers::shown_url);
        t.secret_headers.values_mut().for_each(|v| *v = None);
        t
    }

    /// Whether a secret value is withheld (`null`).
    #[must_use]
    pub fn withholds_secrets(&self) -> bool {
        matches!(self.secret_url, Some(None)) || self.secret_headers.values().any(Option::is_none)
    }

    /// Every header to send, secret values included (withheld ones left out).
    pub fn all_headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(self.secret_headers.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_deref()?))))
    }
}

/// Fills each withheld (`null`) secret of `targets` from `stored`, the list being replaced: a
/// named target takes the secrets of the stored target of the same name, an unnamed one those
/// of the unnamed stored target at the same position. Errors name the first secret left
/// without a value (`notify[1].secret_url`).
/// Fills withheld secrets of `targets` from `stored` (see `JobSpec::keep_secrets`); `Err` names
/// the field that cannot be kept, and why when it is more than "nothing stored".
pub fn keep_secrets(
    field: &str,
    targets: &mut [NotifyTarget],
    stored: &[NotifyTarget],
) -> Result<(), (String, Option<String>)> {
    for (i, target) in targets.iter_mut().enumerate() {
        let here = format!("{field}[{i}]");
        let source = match &target.name {
            Some(name) => stored.iter().find(|s| s.name.as_ref() == Some(name)),
            None => stored.get(i).filter(|s| s.name.is_none()),
        };
        let stored_url = source.and_then(|s| s.url.as_deref());
        if let Some(url) = &mut target.url {
            *url = crate::spec::headers::keep_url_password(url, stored_url)
                .map_err(|why| (format!("{here}.url"), Some(why)))?;
        }
        if !target.withholds_secrets() {
            continue;
        }
        let moved = match (&target.url, stored_url) {
            (Some(new), Some(old)) => crate::spec::headers::destination_changed(new, old),
            _ => None,
        };
        if matches!(target.secret_url, Some(None)) {
            target.secret_url = Some(source.and_then(|s| s.secret_url.clone().flatten()));
            if matches!(target.secret_url, Some(None)) {
                return Err((format!("{here}.secret_url"), None));
            }
        }
        for (name, value) in &mut target.secret_headers {
            if value.is_none() {
                if let Some(why) = &moved {
                    return Err((format!("{here}.secret_headers.{name}"), Some(why.clone())));
                }
                *value = source.and_then(|s| s.secret_headers.get(name).cloned().flatten());
                if value.is_none() {
                    return Err((format!("{here}.secret_headers.{name}"), None));
                }
            }
        }
    }
    Ok(())
}

/// Checks a list of targets; errors name the field under `field` (`notify[0].on[1]`).
pub fn validate_targets(field: &str, targets: &[NotifyTarget]) -> Result<(), SpecError> {
    if targets.len() > MAX_TARGETS {
        return Err(SpecError::at(field, format!("at most {MAX_TARGETS} targets")));
    }
    for (i, t) in targets.iter().enumerate() {
        let here = format!("{field}[{i}]");
        if let Some(name) = &t.name {
            if !name_ok(name) {
                return Err(SpecError::at(
                    &format!("{here}.name"),
                    format!(
                        "must be 1..{MAX_TARGET_NAME_LEN} lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
                    ),
                ));
            }
            if targets[..i].iter().any(|o| o.name.as_ref() == Some(name)) {
                return Err(SpecError::at(&format!("{here}.name"), "another target has this name"));
            }
        }
        match (&t.url, &t.secret_url) {
            (Some(_), Some(_)) => {
                return Err(SpecError::at(&format!("{here}.secret_url"), "give url or secret_url, not both"))
            }
            (None, None) => {
                return Err(SpecError::at(&here, "needs url (shown by the API) or secret_url (withheld by the API)"))
            }
            (Some(url), None) => validate_url(&format!("{here}.url"), url)?,
            (None, Some(Some(url))) => validate_url(&format!("{here}.secret_url"), url)?,
            (None, Some(None)) => {}
        }
        if t.on.is_empty() {
            return Err(SpecError::at(
                &format!("{here}.on"),
                format!(
                    "name at least one event ({}); for no notifications give notify: []",
                    NotifyEvent::ALL.map(NotifyEvent::as_str).join(", ")
                ),
            ));
        }
        if t.silence.is_some_and(|d| !SILENCE_RANGE.contains(&d.0)) {
            return Err(SpecError::at(
                &format!("{here}.silence"),
                format!(
                    "must be between {} and {} (leave it out to send every notification)",
                    crate::duration::HumanDuration(*SILENCE_RANGE.start()),
                    crate::duration::HumanDuration(*SILENCE_RANGE.end())
                ),
            ));
        }
        for (j, e) in t.on.iter().enumerate() {
            if t.on[..j].contains(e) {
                return Err(SpecError::at(&format!("{here}.on[{j}]"), format!("{} is listed twice", e.as_str())));
            }
        }
        if t.headers.len() + t.secret_headers.len() > MAX_TARGET_HEADERS {
            return Err(SpecError::at(
                &format!("{here}.headers"),
                format!("at most {MAX_TARGET_HEADERS} headers, plain and secret together"),
            ));
        }
        let headers = t.headers.iter().map(|(k, v)| ("headers", k, Some(v.as_str())));
        let secret = t.secret_headers.iter().map(|(k, v)| ("secret_headers", k, v.as_deref()));
        for (kind, name, value) in headers.chain(secret) {
            let at = format!("{here}.{kind}.{name}");
            crate::spec::headers::check_name(name, &DELIVERY_HEADERS).map_err(|m| SpecError::at(&at, m))?;
            if let Some(value) = value {
                crate::spec::headers::check_value(value).map_err(|m| SpecError::at(&at, m))?;
            }
        }
        if let Some(k) = t.secret_headers.keys().find(|k| t.headers.keys().any(|h| h.eq_ignore_ascii_case(k))) {
            return Err(SpecError::at(
                &format!("{here}.secret_headers.{k}"),
                "is also in headers; give each header once",
            ));
        }
    }
    Ok(())
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TARGET_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// An absolute `http://` or `https://` URL with a host, without whitespace or control characters
/// (`crate::spec::headers::check_url`, the rule of HTTP task URLs too).
pub fn validate_url(field: &str, url: &str) -> Result<(), SpecError> {
    crate::spec::headers::check_url(url, MAX_URL_LEN).map_err(|m| SpecError::at(field, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(json: &str) -> Vec<NotifyTarget> {
        serde_json::from_str(json).unwrap()
    }

    fn error_field(json: &str) -> Option<String> {
        validate_targets("notify", &targets(json)).unwrap_err().field
    }

    #[test]
    fn defaults_fill_events_and_format() {
        let t = targets(r#"[{"url":"https://h/x"}]"#);
        assert_eq!(t[0].on[..3], [NotifyEvent::Failure, NotifyEvent::Recovery, NotifyEvent::Paused]);
        assert!(t[0].wants(NotifyEvent::Stale) && !t[0].wants(NotifyEvent::Success));
        assert_eq!(t[0].format, NotifyFormat::Json);
        assert!(validate_targets("notify", &t).is_ok());
        assert_eq!(t[0].endpoint(), Some("https://h/x"));
        // Left out and `null` are different things for a secret URL.
        assert_eq!(t[0].secret_url, None);
        let kept = targets(r#"[{"secret_url":null}]"#);
        assert_eq!(kept[0].secret_url, Some(None));
        assert!(kept[0].withholds_secrets());
    }

    #[test]
    fn refusals_name_the_field() {
        for (json, field) in [
            (r#"[{"url":"ftp://h/x"}]"#, "notify[0].url"),
            (r#"[{"url":"https:///x"}]"#, "notify[0].url"),
            (r#"[{"url":"https://h/ x"}]"#, "notify[0].url"),
            (r#"[{"url":"https://h/x"},{"secret_url":"notaurl"}]"#, "notify[1].secret_url"),
            (r#"[{"url":"https://h/x","secret_url":"https://h/y"}]"#, "notify[0].secret_url"),
            (r#"[{"on":["failure"]}]"#, "notify[0]"),
            (r#"[{"url":"https://h/x","on":[]}]"#, "notify[0].on"),
            (r#"[{"url":"https://h/x","on":["failure","failure"]}]"#, "notify[0].on[1]"),
            (r#"[{"url":"https://h/x","headers":{"bad name":"x"}}]"#, "notify[0].headers.bad name"),
            (r#"[{"url":"https://h/x","headers":{"X-Etcron-Event":"x"}}]"#, "notify[0].headers.X-Etcron-Event"),
            (r#"[{"url":"https://h/x","headers":{"Content-Type":"x"}}]"#, "notify[0].headers.Content-Type"),
            (r#"[{"url":"https://h/x","headers":{"A":"x\ny"}}]"#, "notify[0].headers.A"),
            (r#"[{"url":"https://h/x","headers":{"a":"1"},"secret_headers":{"A":"2"}}]"#, "notify[0].secret_headers.A"),
            (r#"[{"url":"https://h/x","name":"Bad"}]"#, "notify[0].name"),
            (r#"[{"url":"https://h/x","silence":"0s"}]"#, "notify[0].silence"),
            (r#"[{"url":"https://h/x","silence":"8d"}]"#, "notify[0].silence"),
            (r#"[{"url":"https://h/x","name":"a"},{"url":"https://h/y","name":"a"}]"#, "notify[1].name"),
        ] {
            assert_eq!(error_field(json).as_deref(), Some(field), "{json}");
        }
        let many = format!("[{}]", [r#"{"url":"https://h/x"}"#; MAX_TARGETS + 1].join(","));
        assert_eq!(error_field(&many).as_deref(), Some("notify"));
        let headers: BTreeMap<String, String> =
            (0..=MAX_TARGET_HEADERS).map(|i| (format!("H{i}"), "v".into())).collect();
        let t = NotifyTarget { headers, ..targets(r#"[{"url":"https://h/x"}]"#).remove(0) };
        assert_eq!(validate_targets("notify", &[t]).unwrap_err().field.as_deref(), Some("notify[0].headers"));
        // Unknown events and fields are refused by serde, at their path.
        assert!(serde_json::from_str::<Vec<NotifyTarget>>(r#"[{"url":"https://h/x","on":["boom"]}]"#).is_err());
        assert!(serde_json::from_str::<Vec<NotifyTarget>>(r#"[{"url":"https://h/x","fmt":"json"}]"#).is_err());
    }

    #[test]
    fn secrets_are_withheld_shown_without_credentials_and_kept_by_name_or_position() {
        let stored = targets(
            r#"[{"name":"ops","secret_url":"https://hooks.slack.com/services/T/B/XYZ","format":"slack"},
                {"url":"https://u:pw@alerts.example.com/hook?team=a","secret_headers":{"Authorization":"Bearer t"}}]"#,
        );
        assert_eq!(stored[0].shown_url(), "https://hooks.slack.com/…");
        assert_eq!(stored[1].shown_url(), "https://alerts.example.com/hook?team=a");
        let shown: Vec<NotifyTarget> = stored.iter().map(NotifyTarget::redacted).collect();
        let text = serde_json::to_string(&shown).unwrap();
        assert!(!text.contains("XYZ") && !text.contains("Bearer"), "{text}");
        assert!(text.contains(r#""secret_url":null"#), "{text}");
        // What was shown, sent back, gets the stored secrets.
        let mut again: Vec<NotifyTarget> = serde_json::from_str(&text).unwrap();
        keep_secrets("notify", &mut again, &stored).unwrap();
        assert_eq!(again, stored);
        // Named targets keep theirs when the list is reordered.
        let mut reordered = vec![shown[1].clone(), shown[0].clone()];
        let err = keep_secrets("notify", &mut reordered, &stored).unwrap_err();
        // (its URL's shown password has no stored URL at that position to come from either)
        assert_eq!(err.0, "notify[0].url", "an unnamed target is matched by position");
        let mut named_only = vec![shown[0].clone()];
        keep_secrets("notify", &mut named_only, &stored[1..]).unwrap_err();
        let mut moved = vec![targets(r#"[{"url":"https://x/y"}]"#).remove(0), shown[0].clone()];
        keep_secrets("notify", &mut moved, &stored).unwrap();
        assert_eq!(moved[1], stored[0]);
        // Nothing stored: refused, naming the entry.
        let mut fresh = shown.clone();
        assert_eq!(keep_secrets("notify", &mut fresh, &[]).unwrap_err().0, "notify[0].secret_url");
    }

    #[test]
    fn events_parse_and_print_alike() {
        for e in NotifyEvent::ALL {
            assert_eq!(e.as_str().parse::<NotifyEvent>(), Ok(e));
            assert_eq!(serde_json::to_value(e).unwrap(), e.as_str());
        }
        assert!("killed".parse::<NotifyEvent>().unwrap_err().contains("long_running"));
    }
}
