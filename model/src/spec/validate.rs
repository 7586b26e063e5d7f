//! Validation of a parsed spec: every field within its limits, errors naming the field (dotted
//! path, e.g. `task.command`) and saying what is wrong.

use std::collections::BTreeMap;

use crate::duration::HumanDuration;
use crate::keys::validate_job_name;
use crate::schedule::Schedule;
use crate::size::ByteSize;
use crate::spec::notify;

use super::*;

impl JobSpec {
    /// Checks every field; the schedule is parsed in the spec's timezone.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_with(&mut Schedule::parse).map(drop)
    }

    /// Checks every field, parsing the schedule with `parse`; returns the parsed schedule.
    pub(super) fn validate_with(
        &self,
        parse: &mut dyn FnMut(&str, &str) -> Result<Schedule, crate::schedule::ScheduleError>,
    ) -> Result<Schedule, SpecError> {
        let schedule = self.schedule_with(parse)?;
        match &self.task {
            Task::Shell(shell) => validate_shell(shell)?,
            Task::Http(http) => validate_http(http)?,
            Task::Grpc(grpc) => crate::spec::grpc::validate(grpc)?,
            Task::Handler(handler) => validate_handler(handler)?,
        }
        self.validate_timing()?;
        self.validate_skip_calendars()?;
        self.validate_runs()?;
        validate_map("selector", &self.selector, label_key_ok)?;
        validate_map("labels", &self.labels, label_key_ok)?;
        self.validate_dependencies()?;
        self.validate_pool()?;
        self.validate_workflow()?;
        if let Some(n) = self.max_output {
            if !MAX_OUTPUT_RANGE.contains(&n) {
                return Err(SpecError::at(
                    "max_output",
                    format!("must be between {} and {} bytes", MAX_OUTPUT_RANGE.start(), MAX_OUTPUT_RANGE.end()),
                ));
            }
        }
        if let Some(limits) = &self.limits {
            validate_limits(limits, &self.task, self.max_output)?;
        }
        if self.description.len() > MAX_DESCRIPTION_LEN {
            return Err(SpecError::at("description", format!("longer than {MAX_DESCRIPTION_LEN} bytes")));
        }
        if let Some(team) = &self.team {
            validate_team(team).map_err(|m| SpecError::at("team", m))?;
        }
        if let Some(targets) = &self.notify {
            notify::validate_targets("notify", targets)?;
        }
        Ok(schedule)
    }

    /// `timeout`, `retries` and `start_deadline`.
    fn validate_timing(&self) -> Result<(), SpecError> {
        if let Some(t) = self.timeout {
            if t.0 < MIN_TIMEOUT || t.0 > MAX_TIMEOUT {
                return Err(SpecError::at(
                    "timeout",
                    format!("must be between {} and {}", HumanDuration(MIN_TIMEOUT), HumanDuration(MAX_TIMEOUT)),
                ));
            }
        }
        if self.retries.max > MAX_RETRIES {
            return Err(SpecError::at("retries.max", format!("must be at most {MAX_RETRIES}")));
        }
        if self.retries.max_backoff.0 > MAX_BACKOFF {
            return Err(SpecError::at(
                "retries.max_backoff",
                format!("must be at most {}", HumanDuration(MAX_BACKOFF)),
            ));
        }
        if self.retries.backoff > self.retries.max_backoff {
            return Err(SpecError::at("retries.backoff", "must not exceed retries.max_backoff"));
        }
        if let Some(d) = self.start_deadline {
            if !START_DEADLINE_RANGE.contains(&d.0) {
                return Err(SpecError::at(
                    "start_deadline",
                    format!(
                        "must be between {} and {}",
                        HumanDuration(*START_DEADLINE_RANGE.start()),
                        HumanDuration(*START_DEADLINE_RANGE.end())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `jitter`, `pause_after_failures`, `alerts`, the concurrency policy and its queue,
    /// `max_catchup` and the shard count.
    fn validate_runs(&self) -> Result<(), SpecError> {
        if self.jitter.is_some_and(|j| j.0.is_zero() || j.0 > MAX_JITTER) {
            return Err(SpecError::at(
                "jitter",
                format!("must be more than 0 and at most {} (leave it out for none)", HumanDuration(MAX_JITTER)),
            ));
        }
        if self.pause_after_failures.is_some_and(|n| n == 0 || n > MAX_PAUSE_AFTER_FAILURES) {
            return Err(SpecError::at(
                "pause_after_failures",
                format!("must be between 1 and {MAX_PAUSE_AFTER_FAILURES} (leave it out to never pause)"),
            ));
        }
        if let Some(alerts) = &self.alerts {
            alerts.validate("alerts")?;
        }
        match (self.concurrency, self.max_queue) {
            (Concurrency::Queue, Some(n)) if n == 0 || n > MAX_QUEUE => {
                return Err(SpecError::at("max_queue", format!("must be between 1 and {MAX_QUEUE}")));
            }
            (Concurrency::Queue, _) if self.mode != Mode::Single => {
                return Err(SpecError::at("concurrency", "\"queue\" is for single-execution jobs (mode single)"));
            }
            (Concurrency::Queue, _) | (_, None) => {}
            (_, Some(_)) => return Err(SpecError::at("max_queue", "applies only to concurrency \"queue\"")),
        }
        if self.max_catchup == 0 || self.max_catchup > MAX_CATCHUP {
            return Err(SpecError::at("max_catchup", format!("must be between 1 and {MAX_CATCHUP}")));
        }
        if let Mode::Sharded(n) = self.mode {
            if n == 0 || n > MAX_SHARDS {
                return Err(SpecError::at("mode.sharded", format!("shard count must be between 1 and {MAX_SHARDS}")));
            }
        }
        Ok(())
    }

    /// `on_success`, `on_failure` and the teams recorded for them.
    fn validate_dependencies(&self) -> Result<(), SpecError> {
        for (field, list) in
            [("on_success", &self.on_success), ("on_failure", &self.on_failure), ("after", &self.after)]
        {
            if list.len() > MAX_DEPENDENTS {
                return Err(SpecError::at(field, format!("at most {MAX_DEPENDENTS} jobs")));
            }
            for (i, name) in list.iter().enumerate() {
                validate_job_name(name).map_err(|m| SpecError::at(&format!("{field}[{i}]"), m))?;
            }
        }
        if self.dependency_teams.len() > 2 * MAX_DEPENDENTS {
            return Err(SpecError::at("dependency_teams", format!("at most {} entries", 2 * MAX_DEPENDENTS)));
        }
        for (name, team) in &self.dependency_teams {
            validate_job_name(name).map_err(|m| SpecError::at("dependency_teams", m))?;
            if let Some(team) = team {
                validate_team(team).map_err(|m| SpecError::at("dependency_teams", m))?;
            }
        }
        Ok(())
    }

    fn validate_workflow(&self) -> Result<(), SpecError> {
        for (i, parent) in self.after.iter().enumerate() {
            if self.after[..i].contains(parent) {
                return Err(SpecError::at(&format!("after[{i}]"), format!("{parent:?} is listed twice")));
            }
        }
        let declared = |name: &str| match &self.task {
            Task::Shell(t) => t.params.0.contains_key(name),
            Task::Handler(t) => t.params.0.contains_key(name),
            Task::Http(_) | Task::Grpc(_) => false,
        };
        crate::spec::params::validate_params_from(&self.params_from, &declared, &self.after)
    }

    fn validate_pool(&self) -> Result<(), SpecError> {
        if let Some(p) = self.priority {
            if p > MAX_PRIORITY {
                return Err(SpecError::at("priority", format!("must be 0 to {}", MAX_PRIORITY)));
            }
        }
        let Some(pool) = &self.pool else {
            return match self.pool_slots {
                Some(_) => Err(SpecError::at("pool_slots", "needs a pool")),
                None => Ok(()),
            };
        };
        validate_job_name(pool).map_err(|e| SpecError::at("pool", e.replace("job name", "pool name")))?;
        let max = MAX_SLOTS_PER_RUN;
        if self.pool_slots.is_some_and(|n| n == 0 || n > max) {
            return Err(SpecError::at("pool_slots", format!("must be 1 to {max}")));
        }
        if matches!(self.concurrency, Concurrency::Queue | Concurrency::Replace) {
            return Err(SpecError::at(
                "pool",
                "a job in a pool has concurrency allow or forbid (a pool's queue and a job's queue, or a replace \
                 that ends a run holding slots, do not combine)",
            ));
        }
        if matches!(self.mode, Mode::Broadcast) {
            return Err(SpecError::at("pool", "a broadcast job cannot be in a pool"));
        }
        Ok(())
    }

    fn validate_skip_calendars(&self) -> Result<(), SpecError> {
        if self.skip_calendars.len() > MAX_SKIP_CALENDARS {
            return Err(SpecError::at("skip_calendars", format!("at most {MAX_SKIP_CALENDARS} calendars")));
        }
        for (i, name) in self.skip_calendars.iter().enumerate() {
            let field = format!("skip_calendars[{i}]");
            validate_job_name(name).map_err(|e| SpecError::at(&field, e.replace("job name", "calendar name")))?;
            if self.skip_calendars[..i].contains(name) {
                return Err(SpecError::at(&field, format!("{name:?} is listed twice")));
            }
        }
        Ok(())
    }
}

/// Checks a team name: 1 to [`MAX_TEAM_LEN`] characters, lowercase letters, digits and `-`,
/// starting with a letter or digit (`^[a-z0-9][a-z0-9-]{0,62}$`). The one rule for the spec's
/// `team`, the teams of tokens and the `team` query parameter.
pub fn validate_team(team: &str) -> Result<(), String> {
    let first_ok = team.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = team.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if team.is_empty() || team.len() > MAX_TEAM_LEN || !first_ok || !rest_ok {
        return Err(format!(
            "team {team:?} must be 1 to {MAX_TEAM_LEN} lowercase letters, digits and '-', starting with a letter or \
             digit (pattern ^[a-z0-9][a-z0-9-]{{0,62}}$)"
        ));
    }
    Ok(())
}

/// Validates a job name, naming the field `name`.
pub fn validate_name(name: &str) -> Result<(), SpecError> {
    validate_job_name(name).map_err(|m| SpecError::at("name", m))
}

fn validate_handler(handler: &crate::spec::job::HandlerTask) -> Result<(), SpecError> {
    crate::keys::validate_id(&handler.name)
        .map_err(|e| SpecError::at("task.name", format!("a handler name: {}", e.replace("id ", ""))))?;
    let names = validate_values(&handler.env, &handler.secret_env)?;
    check_values(&handler.env, &handler.secret_env, &handler.params, &names)
}

/// `task.env` and `task.secret_env` (a shell or handler task's): their names and values; the
/// names, with the field each is in.
fn validate_values<'a>(
    env: &'a std::collections::BTreeMap<String, String>,
    secret_env: &'a crate::spec::job::Secrets,
) -> Result<Vec<(&'static str, &'a String)>, SpecError> {
    validate_map("task.env", env, env_key_ok)?;
    validate_secrets("task.secret_env", secret_env, env_key_ok, env.len())?;
    Ok(env.keys().map(|k| ("task.env", k)).chain(secret_env.keys().map(|k| ("task.secret_env", k))).collect())
}

/// Each name in one of `env` and `secret_env`, and `params` none of them.
fn check_values(
    env: &std::collections::BTreeMap<String, String>,
    secret_env: &crate::spec::job::Secrets,
    params: &crate::spec::job::Params,
    names: &[(&str, &String)],
) -> Result<(), SpecError> {
    if let Some(k) = secret_env.keys().find(|k| env.contains_key(*k)) {
        return Err(SpecError::at(&format!("task.secret_env.{k}"), "is also in task.env; give each variable once"));
    }
    crate::spec::params::validate(params, names)
}

fn validate_shell(shell: &ShellTask) -> Result<(), SpecError> {
    if shell.command.trim().is_empty() {
        return Err(SpecError::at("task.command", "must not be empty"));
    }
    if shell.command.len() > MAX_COMMAND_BYTES {
        return Err(SpecError::at("task.command", format!("longer than {MAX_COMMAND_BYTES} bytes")));
    }
    if shell.command.contains('\0') {
        return Err(SpecError::at("task.command", "must not contain NUL bytes"));
    }
    let names = validate_values(&shell.env, &shell.secret_env)?;
    for &(field, k) in &names {
        if k.starts_with("ETCRON_") {
            return Err(SpecError::at(
                &format!("{field}.{k}"),
                "the ETCRON_ prefix is reserved for variables etcron sets",
            ));
        }
    }
    check_values(&shell.env, &shell.secret_env, &shell.params, &names)?;
    if let Some(cwd) = &shell.cwd {
        if !cwd.starts_with('/') || cwd.contains('\0') || cwd.len() > 4096 {
            return Err(SpecError::at("task.cwd", "must be an absolute path"));
        }
    }
    if let Some(user) = &shell.user {
        check_account_name(user).map_err(|m| SpecError::at("task.user", m))?;
    }
    if let Some(group) = &shell.group {
        check_account_name(group).map_err(|m| SpecError::at("task.group", m))?;
        if shell.user.is_none() {
            return Err(SpecError::at("task.group", "needs task.user (the group must be one of that user's)"));
        }
    }
    Ok(())
}

/// A user or group name as the user database holds it: a letter or `_` first, then letters,
/// digits, `_`, `.` and `-`. Numeric ids are refused: a name says which account was meant on
/// every worker, a number may be someone else on the next machine.
///
/// # Errors
/// What is wrong with `name`.
pub fn check_account_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if name.is_empty() || name.len() > MAX_ACCOUNT_NAME_LEN || !first_ok || !rest_ok {
        return Err(format!(
            "must be an account name of at most {MAX_ACCOUNT_NAME_LEN} characters: a letter or _ first, then \
             letters, digits, _ . - (numeric ids are not accepted), got {name:?}"
        ));
    }
    Ok(())
}

fn validate_http(http: &HttpTask) -> Result<(), SpecError> {
    const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    if !METHODS.contains(&http.method.as_str()) {
        return Err(SpecError::at("task.method", format!("must be one of {}", METHODS.join(", "))));
    }
    crate::spec::headers::check_url(&http.url, MAX_URL_LEN).map_err(|m| SpecError::at("task.url", m))?;
    if http.headers.len() > MAX_MAP_ENTRIES {
        return Err(SpecError::at("task.headers", format!("at most {MAX_MAP_ENTRIES} entries")));
    }
    if http.headers.len() + http.secret_headers.len() > MAX_MAP_ENTRIES {
        return Err(SpecError::at(
            "task.secret_headers",
            format!("at most {MAX_MAP_ENTRIES} entries with the plain ones"),
        ));
    }
    let plain = http.headers.iter().map(|(k, v)| ("task.headers", k, Some(v.as_str())));
    let secret = http.secret_headers.iter().map(|(k, v)| ("task.secret_headers", k, v.as_deref()));
    for (field, name, value) in plain.chain(secret) {
        let at = || format!("{field}.{name}");
        crate::spec::headers::check_name(name, &[]).map_err(|m| SpecError::at(&at(), m))?;
        if let Some(value) = value {
            crate::spec::headers::check_value(value).map_err(|m| SpecError::at(&at(), m))?;
        }
    }
    if let Some(k) = http.secret_headers.keys().find(|k| http.headers.keys().any(|h| h.eq_ignore_ascii_case(k))) {
        return Err(SpecError::at(
            &format!("task.secret_headers.{k}"),
            "is also in task.headers; give each header once",
        ));
    }
    if http.body.as_ref().is_some_and(|b| b.len() > MAX_HTTP_BODY) {
        return Err(SpecError::at("task.body", format!("longer than {MAX_HTTP_BODY} bytes")));
    }
    if let Some(s) = http.expect_status {
        if !(100..=599).contains(&s) {
            return Err(SpecError::at("task.expect_status", "must be an HTTP status between 100 and 599"));
        }
    }
    if let Some(poll) = &http.asynchronous {
        if http.expect_status.is_some() {
            return Err(SpecError::at(
                "task.expect_status",
                "not with task.async: a 202 answer starts the polling, any other 2xx is a success at once",
            ));
        }
        poll.validate()?;
    }
    if let Some(pointer) = &http.result_pointer {
        check_result_pointer(pointer).map_err(|m| SpecError::at("task.result_pointer", m))?;
    }
    Ok(())
}

/// An RFC 6901 JSON pointer: `""` (the whole document) or `/` steps, `~` only as `~0` or `~1`.
fn check_result_pointer(pointer: &str) -> Result<(), String> {
    if pointer.len() > MAX_RESULT_POINTER_LEN {
        return Err(format!("longer than {MAX_RESULT_POINTER_LEN} bytes"));
    }
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(format!(
            "{pointer:?} is not a JSON pointer: \"\" (the whole body) or one starting with / (e.g. \"/data/count\")"
        ));
    }
    let mut tildes = pointer.split('~').skip(1);
    if tildes.any(|after| !after.starts_with(['0', '1'])) {
        return Err(format!("{pointer:?}: a ~ in a JSON pointer is ~0 (for ~) or ~1 (for /)"));
    }
    Ok(())
}

fn validate_limits(limits: &Limits, task: &Task, max_output: Option<u64>) -> Result<(), SpecError> {
    if !matches!(task, Task::Shell(_)) {
        for (field, set) in [
            ("limits.memory", limits.memory.is_some()),
            ("limits.cpu", limits.cpu.is_some()),
            ("limits.open_files", limits.open_files.is_some()),
        ] {
            if set {
                return Err(SpecError::at(
                    field,
                    format!(
                        "applies to shell tasks only (an {} task runs inside the worker); use timeout and limits.output",
                        match task {
                            Task::Grpc(_) => "gRPC",
                            Task::Handler(_) => "handler",
                            _ => "HTTP",
                        }
                    ),
                ));
            }
        }
    }
    if let Some(m) = limits.memory {
        if !MEMORY_LIMIT_RANGE.contains(&m.0) {
            return Err(SpecError::at(
                "limits.memory",
                format!(
                    "must be between {} and {}",
                    ByteSize(*MEMORY_LIMIT_RANGE.start()),
                    ByteSize(*MEMORY_LIMIT_RANGE.end())
                ),
            ));
        }
    }
    if let Some(c) = limits.cpu {
        if !CPU_LIMIT_RANGE.contains(&c.0) || c.0.subsec_nanos() != 0 {
            return Err(SpecError::at(
                "limits.cpu",
                format!(
                    "must be whole seconds between {} and {}",
                    HumanDuration(*CPU_LIMIT_RANGE.start()),
                    HumanDuration(*CPU_LIMIT_RANGE.end())
                ),
            ));
        }
    }
    if let Some(n) = limits.open_files {
        if !OPEN_FILES_RANGE.contains(&n) {
            return Err(SpecError::at(
                "limits.open_files",
                format!("must be between {} and {}", OPEN_FILES_RANGE.start(), OPEN_FILES_RANGE.end()),
            ));
        }
    }
    if let Some(o) = limits.output {
        if !MAX_OUTPUT_RANGE.contains(&o.0) {
            return Err(SpecError::at(
                "limits.output",
                format!("must be between {} and {} bytes", MAX_OUTPUT_RANGE.start(), MAX_OUTPUT_RANGE.end()),
            ));
        }
        if max_output.is_some_and(|m| m != o.0) {
            return Err(SpecError::at(
                "limits.output",
                "is another name for max_output and differs from it; give one of them",
            ));
        }
    }
    Ok(())
}

fn label_key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.starts_with(|c: char| c.is_ascii_alphanumeric())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
}

/// Checks a manual run's environment overrides as the spec's `env` is checked (names, count,
/// sizes, no `ETCRON_` prefix), naming the entry as `{field}.{NAME}`.
///
/// # Errors
/// What is wrong, naming the field.
pub fn validate_env_overrides(field: &str, env: &BTreeMap<String, String>) -> Result<(), SpecError> {
    validate_map(field, env, env_key_ok)?;
    if let Some(k) = env.keys().find(|k| k.starts_with("ETCRON_")) {
        return Err(SpecError::at(&format!("{field}.{k}"), "the ETCRON_ prefix is reserved for variables etcron sets"));
    }
    Ok(())
}

fn validate_map(field: &str, map: &BTreeMap<String, String>, key_ok: impl Fn(&str) -> bool) -> Result<(), SpecError> {
    if map.len() > MAX_MAP_ENTRIES {
        return Err(SpecError::at(field, format!("at most {MAX_MAP_ENTRIES} entries")));
    }
    for (k, v) in map {
        if k.len() > MAX_MAP_KEY_LEN || !key_ok(k) {
            return Err(SpecError::at(&format!("{field}.{k}"), "invalid key"));
        }
        if v.len() > MAX_MAP_VALUE_LEN || v.contains('\0') {
            return Err(SpecError::at(
                &format!("{field}.{k}"),
                format!("value longer than {MAX_MAP_VALUE_LEN} bytes or contains NUL"),
            ));
        }
    }
    Ok(())
}

/// As [`validate_map`] for secret values (a `null` value is checked when it is filled in);
/// `plain` entries of the same task count toward the limit too.
fn validate_secrets(field: &str, map: &Secrets, key_ok: impl Fn(&str) -> bool, plain: usize) -> Result<(), SpecError> {
    if map.len() + plain > MAX_MAP_ENTRIES {
        return Err(SpecError::at(field, format!("at most {MAX_MAP_ENTRIES} entries with the plain ones")));
    }
    for (k, v) in map {
        if k.len() > MAX_MAP_KEY_LEN || !key_ok(k) {
            return Err(SpecError::at(&format!("{field}.{k}"), "invalid key"));
        }
        if v.as_ref().is_some_and(|v| v.len() > MAX_MAP_VALUE_LEN || v.contains('\0')) {
            return Err(SpecError::at(
                &format!("{field}.{k}"),
                format!("value longer than {MAX_MAP_VALUE_LEN} bytes or contains NUL"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod result_pointer_tests {
    use super::*;

    fn http(pointer: &str) -> Result<JobSpec, SpecError> {
        let task = serde_json::json!({"kind": "http", "url": "http://h/", "result_pointer": pointer});
        JobSpec::from_json(serde_json::json!({"schedule": "@daily", "task": task}).to_string().as_bytes())
    }

    #[test]
    fn a_result_pointer_is_an_rfc_6901_pointer_of_at_most_256_bytes() {
        for ok in ["", "/", "/data/count", "/rows/0", "/a~1b/c~0d", &format!("/{}", "x".repeat(255))] {
            let spec = http(ok).unwrap_or_else(|e| panic!("{ok:?}: {e:?}"));
            let Task::Http(task) = &spec.task else { panic!() };
            assert_eq!(task.result_pointer.as_deref(), Some(ok));
        }
        for bad in ["data", "#/data", "/a~2", "/a~", &format!("/{}", "x".repeat(256))] {
            assert_eq!(http(bad).unwrap_err().field.as_deref(), Some("task.result_pointer"), "{bad:?}");
        }
        let body = r#"{"schedule":"@daily","task":{"kind":"shell","command":"true","result_pointer":""}}"#;
        assert!(JobSpec::from_json(body.as_bytes()).is_err(), "HTTP tasks only");
    }
}
