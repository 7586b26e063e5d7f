//! Reading a spec: JSON bytes to `JobSpec` (size limit, duplicate keys, unknown fields, errors
//! that name the field), and its schedule parsed in its timezone and window.

use crate::schedule::{Schedule, ScheduleCache};
use crate::UnixMs;

use super::*;

impl JobSpec {
    /// Parses and validates a JSON spec (the body of `PUT /api/jobs/{job}`).
    pub fn from_json(bytes: &[u8]) -> Result<Self, SpecError> {
        Self::from_value(json_value(bytes)?)
    }

    /// Like [`JobSpec::from_json`], with the schedule of job `job` parsed through `cache` and
    /// handed back: a worker loading many jobs parses each distinct schedule once.
    pub fn from_json_cached(bytes: &[u8], job: &str, cache: &mut ScheduleCache) -> Result<(Self, Schedule), SpecError> {
        let spec = Self::decode(json_value(bytes)?)?;
        let schedule = spec.validate_with(&mut |expression, timezone| cache.get(expression, timezone))?;
        let jitter_ms = spec.jitter_ms();
        Ok((spec, schedule.jittered(job, jitter_ms)))
    }

    /// Decodes bytes that [`JobSpec::from_json`] (or `from_json_cached`) accepted before,
    /// without validating them again: one pass of serde over the bytes, the way a worker reads
    /// a spec it keeps as bytes when a tick fires.
    ///
    /// # Errors
    /// When the bytes are not a spec (they were not validated before).
    pub fn from_validated_json(bytes: &[u8]) -> Result<Self, SpecError> {
        serde_json::from_slice(bytes).map_err(|e| serde_error(".", &e.to_string(), e.is_syntax()))
    }

    /// Parses and validates a spec already decoded into a JSON value.
    pub fn from_value(value: serde_json::Value) -> Result<Self, SpecError> {
        let spec = Self::decode(value)?;
        spec.validate()?;
        Ok(spec)
    }

    /// Reads a spec from a JSON value without validating its fields.
    pub(super) fn decode(value: serde_json::Value) -> Result<Self, SpecError> {
        objects_only(&value)?;
        // `task` is internally tagged, which makes serde lose the path of errors inside it:
        // check the task on its own first so its errors name e.g. `task.command`.
        if let Some(task) = value.get("task").and_then(|t| t.as_object()) {
            let mut body = task.clone();
            if let Some(kind) = body.remove("kind").as_ref().and_then(|k| k.as_str()) {
                let body = serde_json::Value::Object(body);
                let checked = match kind {
                    "shell" => serde_path_to_error::deserialize::<_, ShellTask>(body).map(drop),
                    "http" => serde_path_to_error::deserialize::<_, HttpTask>(body).map(drop),
                    "grpc" => serde_path_to_error::deserialize::<_, GrpcTask>(body).map(drop),
                    _ => Ok(()),
                };
                if let Err(e) = checked {
                    let path = e.path().to_string();
                    let path = if path == "." { "task".to_owned() } else { format!("task.{path}") };
                    return Err(serde_error(&path, &e.into_inner().to_string(), false));
                }
            }
        }
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            serde_error(&path, &e.into_inner().to_string(), false)
        })
    }

    /// The parsed schedule of job `job`: `schedule` or `schedules` in `timezone` within
    /// `active_from` and `active_until`, its ticks moved by `jitter`. Valid specs always parse;
    /// the error is for specs read from etcd that were written by something other than the
    /// master.
    pub fn parsed_schedule(&self, job: &str) -> Result<Schedule, SpecError> {
        Ok(self.schedule_with(&mut Schedule::parse)?.jittered(job, self.jitter_ms()))
    }

    /// [`JobSpec::parsed_schedule`] through `cache` (a pass over many jobs parses each distinct
    /// schedule once).
    pub fn parsed_schedule_cached(&self, job: &str, cache: &mut ScheduleCache) -> Result<Schedule, SpecError> {
        Ok(self
            .schedule_with(&mut |expression, timezone| cache.get(expression, timezone))?
            .jittered(job, self.jitter_ms()))
    }

    /// Parses the schedule fields with `parse` into one schedule.
    pub(super) fn schedule_with(
        &self,
        parse: &mut dyn FnMut(&str, &str) -> Result<Schedule, crate::schedule::ScheduleError>,
    ) -> Result<Schedule, SpecError> {
        match (self.schedule.is_empty(), self.schedules.len()) {
            (true, 0) => return Err(SpecError::at("schedule", "a schedule is required (schedule, or schedules)")),
            (false, n) if n > 0 => {
                return Err(SpecError::at("schedules", "give either schedule or schedules, not both"))
            }
            _ => {}
        }
        let window = Window { from: self.active_from.as_deref(), until: self.active_until.as_deref() };
        schedule_of(&self.expressions(), &self.timezone, window, parse)
    }
}

/// The `active_from` and `active_until` of a schedule, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window<'a> {
    pub from: Option<&'a str>,
    pub until: Option<&'a str>,
}

/// One schedule from several expressions (each with the field or parameter it came from) in
/// `timezone` within `window`, parsed with `parse`: the rule a spec's schedule and the
/// preview share. More than one expression: none may be `@at`, none listed twice.
pub fn schedule_of(
    expressions: &[(String, &str)],
    timezone: &str,
    window: Window<'_>,
    parse: &mut dyn FnMut(&str, &str) -> Result<Schedule, crate::schedule::ScheduleError>,
) -> Result<Schedule, SpecError> {
    use crate::schedule::ScheduleError;
    if expressions.len() > MAX_SCHEDULES {
        let field = expressions[MAX_SCHEDULES].0.split('[').next().unwrap_or("schedules");
        return Err(SpecError::at(field, format!("at most {MAX_SCHEDULES} expressions")));
    }
    let mut parsed = Vec::with_capacity(expressions.len());
    for (i, (field, expression)) in expressions.iter().enumerate() {
        let schedule = parse(expression, timezone).map_err(|e| match e {
            ScheduleError::Timezone(_) => SpecError::at("timezone", e.to_string()),
            _ => SpecError::at(field, e.to_string()),
        })?;
        if expressions.len() > 1 && schedule.is_one_shot() {
            return Err(SpecError::at(field, "@at is for a one-shot job: give it as the only schedule"));
        }
        if expressions[..i].iter().any(|(_, e)| e.trim() == expression.trim()) {
            return Err(SpecError::at(field, format!("{expression:?} is listed twice")));
        }
        parsed.push(schedule);
    }
    let from = window.from.map(|t| window_instant("active_from", t)).transpose()?;
    let until = window.until.map(|t| window_instant("active_until", t)).transpose()?;
    if let (Some(from), Some(until)) = (from, until) {
        if until < from {
            return Err(SpecError::at("active_until", "must not be earlier than active_from"));
        }
    }
    if parsed.is_empty() {
        return Err(SpecError::at("schedule", "a schedule is required"));
    }
    let first = parsed.remove(0);
    Ok(first.shaped(&parsed, from, until))
}

/// A `jitter` of `jitter_ms` (0: none) must be shorter than the time between the schedule's
/// ticks, or it would not spread them: checked over its next `JITTER_GAP_SAMPLE` ticks after
/// `after_ms` when a job is saved or previewed. (Workers need no such check: a tick's delay is
/// kept below the time to the next tick whatever the jitter.)
pub fn check_jitter(schedule: &Schedule, jitter_ms: i64, after_ms: UnixMs) -> Result<(), SpecError> {
    if jitter_ms <= 0 {
        return Ok(());
    }
    match schedule.shortest_gap(after_ms, JITTER_GAP_SAMPLE) {
        Some(gap) if jitter_ms >= gap => Err(SpecError::at(
            "jitter",
            format!("must be shorter than the time between the job's ticks ({gap} ms apart at the shortest)"),
        )),
        _ => Ok(()),
    }
}

/// An `active_from`/`active_until` instant: RFC 3339, within the range of `@at`.
fn window_instant(field: &str, text: &str) -> Result<UnixMs, SpecError> {
    let at = chrono::DateTime::parse_from_rfc3339(text.trim())
        .map_err(|e| SpecError::at(field, format!("must be an RFC 3339 instant such as 2026-12-01T00:00:00Z ({e})")))?;
    let ms = at.timestamp_millis();
    if !(0..=crate::schedule::MAX_AT_MS).contains(&ms) {
        return Err(SpecError::at(
            field,
            format!("must be from 1970-01-01T00:00:00Z to {}", crate::rfc3339_ms(crate::schedule::MAX_AT_MS)),
        ));
    }
    Ok(ms)
}

/// The JSON value of a spec's bytes, refused past `MAX_SPEC_BYTES`.
pub(crate) fn json_value(bytes: &[u8]) -> Result<serde_json::Value, SpecError> {
    if bytes.len() > MAX_SPEC_BYTES {
        return Err(SpecError {
            field: None,
            message: format!("job spec is {} bytes; the limit is {MAX_SPEC_BYTES}", bytes.len()),
            too_large: true,
        });
    }
    crate::json::from_slice_unique(bytes).map_err(|e| match e {
        crate::json::ParseError::Duplicate { path } => {
            SpecError::at(&path, "is given twice in one object; give each key once")
        }
        crate::json::ParseError::Syntax(e) => serde_error(".", &e.to_string(), true),
    })
}

/// serde reads a struct from a JSON array too (fields by position), so `["* * * * *", "UTC",
/// true, {...}]` would be a spec: refuse arrays wherever the spec has an object.
fn objects_only(value: &serde_json::Value) -> Result<(), SpecError> {
    if !value.is_object() {
        return Err(SpecError {
            field: None,
            message: "a job spec must be a JSON object".to_owned(),
            too_large: false,
        });
    }
    for field in ["task", "retries", "limits"] {
        if value.get(field).is_some_and(serde_json::Value::is_array) {
            return Err(SpecError::at(field, "must be a JSON object"));
        }
    }
    if let Some(targets) = value.get("notify").and_then(serde_json::Value::as_array) {
        if let Some(i) = targets.iter().position(serde_json::Value::is_array) {
            return Err(SpecError::at(&format!("notify[{i}]"), "must be a JSON object"));
        }
    }
    Ok(())
}

pub(crate) fn serde_error(path: &str, message: &str, syntax: bool) -> SpecError {
    if syntax {
        return SpecError { field: None, message: format!("body is not valid JSON: {message}"), too_large: false };
    }
    let base = if path == "." { String::new() } else { path.to_owned() };
    // serde names unknown/missing fields in backticks; make them part of the path.
    let named =
        ["unknown field `", "missing field `", "duplicate field `", "unknown variant `"].iter().find_map(|prefix| {
            message.strip_prefix(prefix).and_then(|rest| rest.split_once('`')).map(|(name, _)| (prefix, name))
        });
    let field = match named {
        Some((prefix, name)) if !prefix.starts_with("unknown variant") => {
            if base.is_empty() || base == name || base.ends_with(&format!(".{name}")) {
                if base.is_empty() {
                    name.to_owned()
                } else {
                    base
                }
            } else if base.is_empty() {
                name.to_owned()
            } else {
                format!("{base}.{name}")
            }
        }
        _ => base,
    };
    let message = strip_location(message);
    SpecError { field: (!field.is_empty()).then_some(field), message, too_large: false }
}

/// serde_json appends " at line 1 column 7"; the field path already says where.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}
