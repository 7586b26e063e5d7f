//! Schedules: cron expressions (5, 6 or 7 fields), `@hourly`-style aliases, `@every <duration>`
//! and one-shot `@at <RFC 3339>`, evaluated in the job's IANA timezone.
//!
//! Every worker must compute the same fire times for a job, so everything here is a pure
//! function of the expression, the timezone and an instant: `@every` is anchored to the Unix
//! epoch, not to the moment a worker happened to load the job.
//!
//! Cron expressions are parsed and evaluated here (`field`, `cron`), mapped to instants with
//! cron's daylight-saving rule (`zone`) and read out in words (`describe`). The DST rule: a
//! fixed-time job (neither minute nor hour is `*` or `*/n`) runs once at the first valid instant
//! after a spring-forward gap and only at the first occurrence in a fall-back overlap; a wildcard
//! job follows elapsed time (both occurrences in an overlap, nothing in a gap). An expression
//! that can never fire is refused when parsed, so a search for the next tick is short.

mod cron;
mod describe;
mod field;
mod zone;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

use self::cron::CronSpec;
pub use chrono_tz::Tz;

use crate::UnixMs;

/// Longest accepted schedule expression.
pub const MAX_EXPRESSION_LEN: usize = 256;
/// Shortest `@every` interval.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// Longest `@every` interval.
pub const MAX_EVERY: Duration = Duration::from_secs(366 * 24 * 3600);
/// Latest `@at` instant: 9999-12-31T00:00:00Z. RFC 3339 has four-digit years, and a later
/// instant would be in year 10000 in timezones east of UTC (fire times are shown in the job's
/// timezone), which no RFC 3339 reader accepts.
pub const MAX_AT_MS: UnixMs = 253_402_214_400_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Expression(String),
    #[error("unknown timezone {0:?}; use an IANA name such as \"UTC\" or \"Europe/Berlin\"")]
    Timezone(String),
    /// The schedule fires, but not before the end of its active window.
    #[error("{0}")]
    Window(String),
}

#[derive(Debug, Clone)]
enum Kind {
    /// Shared: [`ScheduleCache`] lets every job with the same schedule hold one.
    Cron(Arc<CronSpec>),
    /// Fires at every multiple of the interval since the Unix epoch.
    Every { interval_ms: i64 },
    /// Fires once.
    At { at_ms: UnixMs },
}

/// A parsed schedule bound to a timezone.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
    tz: Tz,
    /// More expressions and an active window; `None` for a plain one-expression schedule, so
    /// the common case costs nothing extra.
    shape: Option<Arc<Shape>>,
}

/// What a job's `schedules` and `active_from`/`active_until` add to its first expression.
#[derive(Debug)]
struct Shape {
    /// Expressions whose ticks merge with the first one's (one tick per instant).
    others: Vec<Kind>,
    /// No tick before this instant.
    from_ms: Option<UnixMs>,
    /// No tick after this instant.
    until_ms: Option<UnixMs>,
    /// Each tick moved later by a delay that is a function of the job and the tick.
    jitter: Option<Jitter>,
}

/// A job's `jitter`: the largest delay and the job's seed.
#[derive(Debug, Clone, Copy)]
struct Jitter {
    max_ms: i64,
    seed: u64,
}

impl Jitter {
    /// The delay of the tick at `nominal`, whose next tick (unjittered) is `following`: below
    /// the gap between the two, so jittered ticks keep their order.
    fn delay(self, nominal: UnixMs, following: Option<UnixMs>) -> i64 {
        let cap = following.map_or(self.max_ms, |f| self.max_ms.min(f - nominal - 1)).max(0);
        let hash = mix(self.seed ^ mix(u64::from_le_bytes(nominal.to_le_bytes())));
        i64::try_from(hash % (u64::try_from(cap).unwrap_or(0) + 1)).unwrap_or(0)
    }
}

/// The first unit in duration text `text` that is a month or a year (`M`, `month`, `y`,
/// `year`, as humantime reads them), if any.
fn calendar_unit(text: &str) -> Option<&str> {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|unit| !unit.is_empty())
        .find(|unit| matches!(*unit, "M" | "y" | "month" | "months" | "year" | "years"))
}

/// A stable 64-bit hash of `job`'s name (FNV-1a): the same on every worker, build and platform.
fn seed_of(job: &str) -> u64 {
    job.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// splitmix64's finalizer: spreads close inputs (consecutive ticks) over the whole range.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Parsed schedules shared by expression and timezone. A worker holding 100 000 jobs parses
/// each distinct schedule once and keeps one copy of it; only cron patterns are kept (`@every` and `@at` are a few bytes each).
#[derive(Debug, Default)]
pub struct ScheduleCache {
    parsed: HashMap<(String, String), Schedule>,
}

impl ScheduleCache {
    /// The schedule for `expression` in `timezone`, parsed at most once while any job holds it.
    pub fn get(&mut self, expression: &str, timezone: &str) -> Result<Schedule, ScheduleError> {
        let key = (expression.to_owned(), timezone.to_owned());
        if let Some(s) = self.parsed.get(&key) {
            return Ok(s.clone());
        }
        let schedule = Schedule::parse(expression, timezone)?;
        if matches!(schedule.kind, Kind::Cron(_)) {
            self.parsed.insert(key, schedule.clone());
        }
        Ok(schedule)
    }

    /// Forgets the schedules nobody but the cache holds any more.
    pub fn prune(&mut self) {
        self.parsed.retain(|_, s| match &s.kind {
            Kind::Cron(cron) => Arc::strong_count(cron) > 1,
            _ => false,
        });
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.parsed.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.parsed.is_empty()
    }
}

/// Parses an IANA timezone name.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    Tz::from_str(name).map_err(|_| ScheduleError::Timezone(name.to_owned()))
}

impl Schedule {
    /// Parses `expression` in the timezone `timezone` (IANA name).
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let tz = parse_timezone(timezone)?;
        let kind = parse_kind(expression)?;
        Ok(Self { kind, tz, shape: None })
    }

    /// This schedule with the ticks of `others` merged in (an instant two of them share is one
    /// tick) and kept within `from_ms..=until_ms`. `others` must be in this schedule's
    /// timezone and none may be one-shot (`@at`).
    #[must_use]
    pub fn shaped(self, others: &[Schedule], from_ms: Option<UnixMs>, until_ms: Option<UnixMs>) -> Self {
        if others.is_empty() && from_ms.is_none() && until_ms.is_none() {
            return self;
        }
        debug_assert!(others.iter().all(|o| o.tz == self.tz && o.shape.is_none()));
        let others = others.iter().map(|o| o.kind.clone()).collect();
        let jitter = self.shape.as_ref().and_then(|s| s.jitter);
        Self { shape: Some(Arc::new(Shape { others, from_ms, until_ms, jitter })), ..self }
    }

    /// This schedule with every tick of job `job` moved later by up to `max_ms` (0: none): by
    /// a delay that is a function of the job's name and the tick, so every worker computes the
    /// same, and less than the time to the next tick, so ticks keep their order.
    #[must_use]
    pub fn jittered(self, job: &str, max_ms: i64) -> Self {
        if max_ms <= 0 {
            return self;
        }
        let jitter = Some(Jitter { max_ms, seed: seed_of(job) });
        let shape = match &self.shape {
            Some(s) => Shape { others: s.others.clone(), jitter, ..**s },
            None => Shape { others: Vec::new(), from_ms: None, until_ms: None, jitter },
        };
        Self { shape: Some(Arc::new(shape)), ..self }
    }

    /// How much jitter moved the tick at `tick` (a value `next_after` gave), or `None` for a
    /// schedule without jitter or an instant that is not one of its ticks.
    #[must_use]
    pub fn jitter_at(&self, tick: UnixMs) -> Option<i64> {
        let shape = self.shape.as_ref()?;
        let jitter = shape.jitter?;
        let mut nominal = self.unjittered_next(shape, tick.saturating_sub(jitter.max_ms + 1))?;
        loop {
            let following = self.unjittered_next(shape, nominal);
            let delay = jitter.delay(nominal, following);
            match (nominal + delay).cmp(&tick) {
                std::cmp::Ordering::Equal => return Some(delay),
                std::cmp::Ordering::Greater => return None,
                std::cmp::Ordering::Less => nominal = following?,
            }
        }
    }

    /// The shortest time between two of the next `count` ticks after `after_ms` (jitter left
    /// out), or `None` when fewer than two follow.
    #[must_use]
    pub fn shortest_gap(&self, after_ms: UnixMs, count: usize) -> Option<i64> {
        let plain = match &self.shape {
            Some(s) if s.jitter.is_some() => {
                Self { shape: Some(Arc::new(Shape { others: s.others.clone(), jitter: None, ..**s })), ..self.clone() }
            }
            _ => self.clone(),
        };
        plain.upcoming(after_ms, count).windows(2).map(|w| w[1] - w[0]).min()
    }

    /// The first fire time strictly after `after_ms`, or `None` when the schedule never fires
    /// again (a past `@at`, a cron pattern with no future match, the end of the active window).
    #[must_use]
    pub fn next_after(&self, after_ms: UnixMs) -> Option<UnixMs> {
        let Some(shape) = &self.shape else { return next_of(&self.kind, self.tz, after_ms) };
        let Some(jitter) = shape.jitter else { return self.unjittered_next(shape, after_ms) };
        // A tick moves by less than `max_ms` and ticks keep their order: the first one whose
        // moved instant is after `after_ms` is among the ticks from `after_ms - max_ms` on.
        let mut nominal = self.unjittered_next(shape, after_ms.saturating_sub(jitter.max_ms + 1))?;
        loop {
            let following = self.unjittered_next(shape, nominal);
            let tick = nominal + jitter.delay(nominal, following);
            if tick > after_ms {
                return Some(tick);
            }
            nominal = following?;
        }
    }

    /// The next tick of a shaped schedule, before jitter.
    fn unjittered_next(&self, shape: &Shape, after_ms: UnixMs) -> Option<UnixMs> {
        let next = shape_next(&self.kind, self.tz, shape, after_ms)?;
        shape.until_ms.is_none_or(|until| next <= until).then_some(next)
    }

    /// The first fire time after `after_ms`, or an error saying there is none (a past `@at`, a
    /// year field wholly in the past, an active window that has ended or holds no tick): what
    /// saving a job and previewing a schedule check.
    pub fn fires_after(&self, after_ms: UnixMs) -> Result<UnixMs, ScheduleError> {
        if let Some(next) = self.next_after(after_ms) {
            return Ok(next);
        }
        let unbounded = self.shape.as_ref().and_then(|s| shape_next(&self.kind, self.tz, s, after_ms));
        match (unbounded, self.shape.as_ref().and_then(|s| s.until_ms)) {
            (Some(_), Some(until)) => Err(ScheduleError::Window(format!(
                "no tick between {} and active_until {}",
                format_in(self.tz, after_ms),
                format_in(self.tz, until)
            ))),
            _ => Err(ScheduleError::Expression(format!(
                "never fires after {}: its last fire time has passed",
                format_in(self.tz, after_ms)
            ))),
        }
    }

    /// The next `count` fire times strictly after `after_ms`.
    #[must_use]
    pub fn upcoming(&self, after_ms: UnixMs, count: usize) -> Vec<UnixMs> {
        let mut out = Vec::with_capacity(count.min(1000));
        let mut cursor = after_ms;
        while out.len() < count {
            match self.next_after(cursor) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }

    #[must_use]
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// True for a one-shot `@at` schedule.
    #[must_use]
    pub fn is_one_shot(&self) -> bool {
        matches!(self.kind, Kind::At { .. }) && self.shape.as_ref().is_none_or(|s| s.others.is_empty())
    }

    /// A plain-language reading of the schedule.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut text = describe_kind(&self.kind);
        let Some(shape) = &self.shape else { return text };
        for other in &shape.others {
            text.push_str("; ");
            text.push_str(&describe_kind(other));
        }
        if let Some(from) = shape.from_ms {
            text.push_str(&format!(", from {}", format_in(self.tz, from)));
        }
        if let Some(until) = shape.until_ms {
            text.push_str(&format!(", until {}", format_in(self.tz, until)));
        }
        if let Some(jitter) = shape.jitter {
            let max = Duration::from_millis(u64::try_from(jitter.max_ms).unwrap_or(0));
            text.push_str(&format!(", each tick delayed by up to {}", humantime::format_duration(max)));
        }
        text
    }
}

/// The first fire time of one expression strictly after `after_ms`.
fn next_of(kind: &Kind, tz: Tz, after_ms: UnixMs) -> Option<UnixMs> {
    match kind {
        Kind::Every { interval_ms } => {
            // No later than the latest `@at`, so every fire time has a four-digit year.
            let next = (after_ms.div_euclid(*interval_ms) + 1).checked_mul(*interval_ms)?;
            (next <= MAX_AT_MS).then_some(next)
        }
        Kind::At { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
        Kind::Cron(cron) => {
            // Cron resolution is one second: search strictly after the whole second containing
            // `after_ms`, so the answer is strictly later.
            let next = zone::next_after(cron, tz, after_ms.div_euclid(1000))?;
            next.checked_mul(1000)
        }
    }
}

/// The earliest tick of any of a shaped schedule's expressions strictly after `after_ms` and
/// not before `active_from`, ignoring `active_until`.
fn shape_next(first: &Kind, tz: Tz, shape: &Shape, after_ms: UnixMs) -> Option<UnixMs> {
    // Strictly after `from - 1` is at or after `from`, for every kind of expression.
    let after = match shape.from_ms {
        Some(from) if after_ms < from => from - 1,
        _ => after_ms,
    };
    std::iter::once(first).chain(&shape.others).filter_map(|k| next_of(k, tz, after)).min()
}

fn describe_kind(kind: &Kind) -> String {
    match kind {
        Kind::Cron(cron) => describe::cron(cron),
        Kind::Every { interval_ms } => describe::every(Duration::from_millis(u64::try_from(*interval_ms).unwrap_or(0))),
        Kind::At { at_ms } => format!("Once at {}", crate::rfc3339_ms(*at_ms)),
    }
}

/// Formats `ms` in timezone `tz` as RFC 3339 with the zone's offset.
#[must_use]
pub fn format_in(tz: Tz, ms: UnixMs) -> String {
    match Utc.timestamp_millis_opt(ms).single() {
        Some(t) => t.with_timezone(&tz).to_rfc3339_opts(chrono::SecondsFormat::Millis, false),
        None => ms.to_string(),
    }
}

fn parse_kind(expression: &str) -> Result<Kind, ScheduleError> {
    let expr = expression.trim();
    if expr.is_empty() {
        return Err(ScheduleError::Expression("schedule is empty".to_owned()));
    }
    if expr.len() > MAX_EXPRESSION_LEN {
        return Err(ScheduleError::Expression(format!("schedule is longer than {MAX_EXPRESSION_LEN} characters")));
    }
    if let Some(rest) = strip_keyword(expr, "@every") {
        if let Some(unit) = calendar_unit(rest) {
            return Err(ScheduleError::Expression(format!(
                "@every {}: {unit:?} is a month or a year, which have no fixed length; write days (\"30d\"), hours, minutes or seconds, or use a cron expression for calendar months",
                rest.trim()
            )));
        }
        let interval = crate::duration::parse(rest).map_err(ScheduleError::Expression)?;
        if interval < MIN_EVERY || interval > MAX_EVERY {
            return Err(ScheduleError::Expression(format!(
                "@every interval must be between {} and {}d",
                humantime::format_duration(MIN_EVERY),
                MAX_EVERY.as_secs() / 86_400
            )));
        }
        if interval.subsec_nanos() % 1_000_000 != 0 {
            return Err(ScheduleError::Expression("@every interval must be whole milliseconds".to_owned()));
        }
        let interval_ms = i64::try_from(interval.as_millis())
            .map_err(|_| ScheduleError::Expression("@every interval too large".to_owned()))?;
        return Ok(Kind::Every { interval_ms });
    }
    if let Some(rest) = strip_keyword(expr, "@at") {
        let at = DateTime::parse_from_rfc3339(rest.trim()).map_err(|e| {
            ScheduleError::Expression(format!("@at needs an RFC 3339 instant such as 2026-12-01T00:00:00Z ({e})"))
        })?;
        let at_ms = at.timestamp_millis();
        if at_ms > MAX_AT_MS {
            return Err(ScheduleError::Expression(format!(
                "@at must be no later than {}",
                crate::rfc3339_ms(MAX_AT_MS)
            )));
        }
        return Ok(Kind::At { at_ms });
    }
    let pattern = match expr.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *".to_owned(),
        "@monthly" => "0 0 1 * *".to_owned(),
        "@weekly" => "0 0 * * 0".to_owned(),
        "@daily" | "@midnight" => "0 0 * * *".to_owned(),
        "@hourly" => "0 * * * *".to_owned(),
        other if other.starts_with('@') => {
            return Err(ScheduleError::Expression(format!(
                "unknown schedule keyword {:?}; use @yearly, @monthly, @weekly, @daily, @hourly, @every <duration> or @at <RFC 3339>",
                other.split_whitespace().next().unwrap_or(other)
            )))
        }
        _ => expr.to_owned(),
    };
    let fields: Vec<&str> = pattern.split_whitespace().collect();
    if !(5..=7).contains(&fields.len()) {
        return Err(ScheduleError::Expression(format!(
            "cron expression has {} fields; expected 5 (min hour day month weekday), 6 (seconds first) or 7 (seconds first, year last)",
            fields.len()
        )));
    }
    let cron = CronSpec::parse(&fields).map_err(ScheduleError::Expression)?;
    if !cron.can_fire() {
        return Err(ScheduleError::Expression(format!(
            "{pattern:?} never fires: no date matches its day-of-month, month, day-of-week and year fields"
        )));
    }
    Ok(Kind::Cron(Arc::new(cron)))
}

fn strip_keyword<'a>(expr: &'a str, keyword: &str) -> Option<&'a str> {
    let head = expr.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let rest = &expr[keyword.len()..];
    (rest.starts_with(char::is_whitespace)).then_some(rest.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_shares_one_parsed_pattern_per_schedule_and_forgets_unused_ones() {
        let mut cache = ScheduleCache::default();
        let a = cache.get("0 5 * * *", "UTC").unwrap();
        let b = cache.get("0 5 * * *", "UTC").unwrap();
        let other_tz = cache.get("0 5 * * *", "Europe/Berlin").unwrap();
        let every = cache.get("@every 30s", "UTC").unwrap();
        assert_eq!(cache.len(), 2, "one entry per (pattern, timezone); @every is not kept");
        match (&a.kind, &b.kind) {
            (Kind::Cron(x), Kind::Cron(y)) => assert!(Arc::ptr_eq(x, y)),
            _ => panic!("cron schedules"),
        }
        assert_eq!(a.next_after(0), Schedule::parse("0 5 * * *", "UTC").unwrap().next_after(0));
        assert_ne!(a.next_after(0), other_tz.next_after(0));
        assert!(cache.get("not a schedule", "UTC").is_err());
        drop((a, every));
        cache.prune();
        assert_eq!(cache.len(), 2, "b and other_tz still hold theirs");
        drop((b, other_tz));
        cache.prune();
        assert!(cache.is_empty());
    }

    fn ms(rfc: &str) -> UnixMs {
        DateTime::parse_from_rfc3339(rfc).unwrap().timestamp_millis()
    }

    #[test]
    fn jitter_moves_each_tick_by_a_function_of_the_job_and_the_tick_and_keeps_their_order() {
        let minutely = || Schedule::parse("* * * * *", "UTC").unwrap();
        let a = minutely().jittered("report", 30_000);
        let from = ms("2026-01-01T00:00:00Z");
        let ticks = a.upcoming(from, 200);
        assert_eq!(ticks, minutely().jittered("report", 30_000).upcoming(from, 200), "the same on every worker");
        assert_ne!(ticks, minutely().jittered("backup", 30_000).upcoming(from, 200), "another job spreads differently");
        let delays: Vec<i64> = ticks.iter().map(|t| t.rem_euclid(60_000)).collect();
        assert!(delays.iter().all(|d| (0..=30_000).contains(d)), "{delays:?}");
        assert!(delays.iter().collect::<std::collections::BTreeSet<_>>().len() > 150, "spread: {delays:?}");
        let mean = delays.iter().sum::<i64>() / 200;
        assert!((10_000..20_000).contains(&mean), "mean delay {mean} ms");
        for (t, d) in ticks.iter().zip(&delays) {
            assert_eq!(a.jitter_at(*t), Some(*d), "the record's jitter for {t}");
            assert_eq!(a.next_after(t - 1), Some(*t), "the next tick just before {t} is {t}");
        }
        assert_eq!(a.jitter_at(ticks[0] + 1), None, "not a tick");
        assert_eq!(minutely().jitter_at(from), None, "no jitter");

        // Jitter longer than the gap: the delay stays below the time to the next tick.
        let every = Schedule::parse("@every 2s", "UTC").unwrap().jittered("fast", 3_600_000);
        let fast = every.upcoming(from, 100);
        assert!(fast.windows(2).all(|w| w[0] < w[1]), "in order");
        assert!(fast.iter().zip(0..).all(|(t, i)| (from + 2_000 * i..from + 2_000 * (i + 1)).contains(t)), "{fast:?}");
        assert!(every.describe().ends_with(", each tick delayed by up to 1h"), "{}", every.describe());
        assert_eq!(every.shortest_gap(from, 10), Some(2_000), "the gap is the schedule's own");

        // A window bounds the ticks before jitter; jitter survives shaping either way.
        let until = from + 10 * 60_000;
        let shaped = minutely().shaped(&[], Some(from), Some(until)).jittered("report", 30_000);
        let inside = shaped.upcoming(0, 100);
        assert_eq!(inside, ticks.iter().copied().filter(|t| *t < until + 30_000).collect::<Vec<_>>());
    }

    #[test]
    fn merged_schedules_fire_once_per_instant_within_the_window() {
        let parts = [Schedule::parse("*/3 * * * * *", "UTC").unwrap()];
        let merged = Schedule::parse("*/2 * * * * *", "UTC").unwrap().shaped(&parts, None, None);
        let secs: Vec<i64> = merged.upcoming(ms("2026-01-01T00:00:00Z"), 8).iter().map(|t| t / 1000 % 60).collect();
        assert_eq!(secs, [2, 3, 4, 6, 8, 9, 10, 12], "second 6 is one tick, not two");
        assert_eq!(merged.describe(), "Every 2 seconds; Every 3 seconds");

        let from = ms("2026-01-01T05:30:00Z");
        let until = ms("2026-01-01T08:00:00Z");
        let hourly = Schedule::parse("@every 1h", "UTC").unwrap().shaped(&[], Some(from), Some(until));
        assert_eq!(hourly.upcoming(0, 10), [ms("2026-01-01T06:00:00Z"), ms("2026-01-01T07:00:00Z"), until]);
        assert_eq!(hourly.next_after(until), None);
        assert!(hourly
            .describe()
            .ends_with(", from 2026-01-01T05:30:00.000+00:00, until 2026-01-01T08:00:00.000+00:00"));
        let on_from = Schedule::parse("@every 1h", "UTC").unwrap().shaped(&[], Some(ms("2026-01-01T06:00:00Z")), None);
        assert_eq!(on_from.next_after(0), Some(ms("2026-01-01T06:00:00Z")), "active_from itself may be a tick");
        let cron_from =
            Schedule::parse("0 * * * *", "UTC").unwrap().shaped(&[], Some(ms("2026-01-01T06:00:00.500Z")), None);
        assert_eq!(cron_from.next_after(0), Some(ms("2026-01-01T07:00:00Z")), "nothing before active_from");

        match hourly.fires_after(until) {
            Err(ScheduleError::Window(why)) => {
                assert!(why.contains("active_until 2026-01-01T08:00:00.000+00:00"), "{why}")
            }
            other => panic!("a window that has ended: {other:?}"),
        }
        let past = Schedule::parse("@at 2020-01-01T00:00:00Z", "UTC").unwrap().shaped(&[], None, Some(until));
        assert!(
            matches!(past.fires_after(until), Err(ScheduleError::Expression(_))),
            "no tick at all is the expression's"
        );
        assert!(past.is_one_shot(), "a window keeps @at one-shot");
    }

    fn next_n(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
        let s = Schedule::parse(expr, tz).unwrap();
        s.upcoming(ms(from), n).into_iter().map(|t| format_in(s.timezone(), t)).collect()
    }

    #[test]
    fn five_field_cron_in_utc() {
        assert_eq!(
            next_n("*/15 * * * *", "UTC", "2026-01-01T00:07:30Z", 3),
            ["2026-01-01T00:15:00.000+00:00", "2026-01-01T00:30:00.000+00:00", "2026-01-01T00:45:00.000+00:00"]
        );
    }

    #[test]
    fn six_field_cron_has_seconds_first() {
        assert_eq!(
            next_n("*/20 * * * * *", "UTC", "2026-01-01T00:00:00.500Z", 3),
            ["2026-01-01T00:00:20.000+00:00", "2026-01-01T00:00:40.000+00:00", "2026-01-01T00:01:00.000+00:00"]
        );
    }

    #[test]
    fn seven_field_cron_has_year_last() {
        assert_eq!(next_n("0 0 12 1 1 * 2030", "UTC", "2026-01-01T00:00:00Z", 2), ["2030-01-01T12:00:00.000+00:00"]);
    }

    #[test]
    fn next_is_strictly_after_even_on_an_exact_tick() {
        let s = Schedule::parse("* * * * * *", "UTC").unwrap();
        let t = ms("2026-01-01T00:00:05Z");
        assert_eq!(s.next_after(t), Some(t + 1000));
        assert_eq!(s.next_after(t - 1), Some(t));
    }

    #[test]
    fn aliases() {
        assert_eq!(next_n("@hourly", "UTC", "2026-01-01T00:30:00Z", 1), ["2026-01-01T01:00:00.000+00:00"]);
        assert_eq!(next_n("@daily", "UTC", "2026-01-01T00:30:00Z", 1), ["2026-01-02T00:00:00.000+00:00"]);
        assert_eq!(next_n("@midnight", "UTC", "2026-01-01T00:30:00Z", 1), ["2026-01-02T00:00:00.000+00:00"]);
        // 2026-01-04 is a Sunday.
        assert_eq!(next_n("@weekly", "UTC", "2026-01-01T00:30:00Z", 1), ["2026-01-04T00:00:00.000+00:00"]);
        assert_eq!(next_n("@monthly", "UTC", "2026-01-01T00:30:00Z", 1), ["2026-02-01T00:00:00.000+00:00"]);
        assert_eq!(next_n("@yearly", "UTC", "2026-01-01T00:30:00Z", 1), ["2027-01-01T00:00:00.000+00:00"]);
        assert_eq!(next_n("@annually", "UTC", "2026-01-01T00:30:00Z", 1), ["2027-01-01T00:00:00.000+00:00"]);
    }

    #[test]
    fn every_is_anchored_to_the_epoch() {
        let s = Schedule::parse("@every 30s", "UTC").unwrap();
        assert_eq!(s.next_after(ms("2026-01-01T00:00:10Z")), Some(ms("2026-01-01T00:00:30Z")));
        assert_eq!(s.next_after(ms("2026-01-01T00:00:30Z")), Some(ms("2026-01-01T00:01:00Z")));
        let s = Schedule::parse("@every 1500ms", "UTC").unwrap();
        assert_eq!(s.next_after(0), Some(1500));
        assert_eq!(s.next_after(1499), Some(1500));
        assert_eq!(s.next_after(1500), Some(3000));
    }

    #[test]
    fn at_fires_once() {
        let s = Schedule::parse("@at 2026-12-01T00:00:00Z", "UTC").unwrap();
        assert!(s.is_one_shot());
        let at = ms("2026-12-01T00:00:00Z");
        assert_eq!(s.next_after(at - 1), Some(at));
        assert_eq!(s.next_after(at), None);
        let s = Schedule::parse("@at 2026-12-01T01:00:00+01:00", "Europe/Berlin").unwrap();
        assert_eq!(s.next_after(0), Some(at));
        // The latest instant still has a four-digit year where the day starts first.
        let last = Schedule::parse("@at 9999-12-31T00:00:00Z", "Pacific/Kiritimati").unwrap();
        assert_eq!(format_in(last.timezone(), MAX_AT_MS), "9999-12-31T14:00:00.000+14:00");
        assert_eq!(last.next_after(0), Some(MAX_AT_MS));
    }

    #[test]
    fn timezone_shifts_fixed_times() {
        assert_eq!(next_n("0 9 * * *", "Asia/Tokyo", "2025-12-31T12:00:00Z", 1), ["2026-01-01T09:00:00.000+09:00"]);
    }

    #[test]
    fn dst_gap_new_york_runs_once_at_first_valid_instant() {
        // 2026-03-08: clocks jump 02:00 -> 03:00 in America/New_York; 02:30 does not exist.
        let got = next_n("30 2 * * *", "America/New_York", "2026-03-07T12:00:00-05:00", 3);
        assert_eq!(
            got,
            ["2026-03-08T03:00:00.000-04:00", "2026-03-09T02:30:00.000-04:00", "2026-03-10T02:30:00.000-04:00"]
        );
    }

    #[test]
    fn dst_overlap_new_york_runs_once() {
        // 2026-11-01: clocks fall back 02:00 -> 01:00; 01:30 happens twice.
        let got = next_n("30 1 * * *", "America/New_York", "2026-10-31T12:00:00-04:00", 3);
        assert_eq!(
            got,
            ["2026-11-01T01:30:00.000-04:00", "2026-11-02T01:30:00.000-05:00", "2026-11-03T01:30:00.000-05:00"]
        );
    }

    #[test]
    fn dst_gap_berlin_runs_once() {
        // 2026-03-29: clocks jump 02:00 -> 03:00 in Europe/Berlin.
        let got = next_n("15 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00+01:00", 2);
        assert_eq!(got, ["2026-03-29T03:00:00.000+02:00", "2026-03-30T02:15:00.000+02:00"]);
    }

    #[test]
    fn dst_overlap_berlin_runs_once() {
        // 2026-10-25: clocks fall back 03:00 -> 02:00; 02:15 happens twice.
        let got = next_n("15 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00+02:00", 2);
        assert_eq!(got, ["2026-10-25T02:15:00.000+02:00", "2026-10-26T02:15:00.000+01:00"]);
    }

    #[test]
    fn interval_patterns_follow_real_time_across_the_overlap() {
        // Every 30 minutes across Berlin's fall-back hour: real time advances 30 min per tick.
        let s = Schedule::parse("*/30 * * * *", "Europe/Berlin").unwrap();
        let ticks = s.upcoming(ms("2026-10-25T01:45:00+02:00"), 6);
        for pair in ticks.windows(2) {
            assert_eq!(pair[1] - pair[0], 30 * 60 * 1000, "{ticks:?}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let cases = [
            ("", "empty"),
            ("* * *", "3 fields"),
            ("@fortnightly", "unknown schedule keyword"),
            ("@every soon", "invalid duration"),
            ("@every 10ms", "between"),
            ("@at tomorrow", "RFC 3339"),
            ("@at 9999-12-31T23:59:59Z", "no later than 9999-12-31T00:00:00.000Z"),
            ("@at 9999-12-31T23:59:59-23:59", "no later than"),
        ];
        for (expr, needle) in cases {
            let err = Schedule::parse(expr, "UTC").unwrap_err().to_string();
            assert!(err.contains(needle), "{expr:?}: {err}");
        }
        let err = Schedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(err, ScheduleError::Timezone("Mars/Olympus".to_owned()));
    }

    fn parse_error(expr: &str) -> String {
        match Schedule::parse(expr, "UTC") {
            Ok(_) => panic!("{expr:?} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn errors_name_the_field_and_its_range() {
        let cases = [
            ("61 * * * *", "minute: 61 is out of range 0-59"),
            ("* 24 * * *", "hour: 24 is out of range 0-23"),
            ("0 0 0 0 * *", "day-of-month: 0 is out of range 1-31"),
            ("0 0 32 * *", "day-of-month: 32 is out of range 1-31"),
            ("0 0 1 13 *", "month: 13 is out of range 1-12"),
            ("0 0 * * 8", "day-of-week: 8 is out of range 0-7"),
            ("60 * * * * *", "second: 60 is out of range 0-59"),
            ("0 0 0 1 1 * 1969", "year: 1969 is out of range 1970-9999"),
            ("0 0-99999999999 * * *", "hour: 99999999999 is out of range 0-23"),
            ("*/0 * * * *", "minute: step \"0\" must be a whole number of at least 1"),
            ("0 5-2 * * *", "hour: the range 5-2 runs backwards"),
            ("x * * * *", "minute: \"x\" is not a number"),
            ("0 0 * * 5#6", "day-of-week: in \"5#6\", #6 must be #1 to #5"),
        ];
        for (expr, want) in cases {
            let err = parse_error(expr);
            assert!(err.contains(want), "{expr:?}: {err}");
        }
    }

    #[test]
    fn a_range_ending_on_sunday_reads_sunday_as_7_and_other_backward_ranges_say_how_to_write_them() {
        // 2026-01-02 is a Friday.
        let weekend = next_n("0 9 * * sat-sun", "UTC", "2026-01-02T00:00:00Z", 3);
        assert_eq!(
            weekend,
            ["2026-01-03T09:00:00.000+00:00", "2026-01-04T09:00:00.000+00:00", "2026-01-10T09:00:00.000+00:00"]
        );
        assert_eq!(next_n("0 9 * * 6-0", "UTC", "2026-01-02T00:00:00Z", 3), weekend);
        let daily = next_n("0 9 * * mon-sun", "UTC", "2026-01-02T00:00:00Z", 7);
        assert_eq!(daily, next_n("0 9 * * *", "UTC", "2026-01-02T00:00:00Z", 7));
        let cases = [
            ("0 0 * * fri-tue", "day-of-week: the range fri-tue runs backwards: ranges do not wrap around; for the values from fri round to tue write fri-sat,sun-tue"),
            ("0 0 * nov-feb *", "write nov-dec,jan-feb"),
            ("0 5-2 * * *", "hour: the range 5-2 runs backwards: ranges do not wrap around; for the values from 5 round to 2 write 5-23,0-2"),
            ("0 22-2/2 * * *", "split it in two (22-23,0-2) and step each"),
        ];
        for (expr, want) in cases {
            let err = parse_error(expr);
            assert!(err.contains(want), "{expr:?}: {err}");
        }
        // The advice, taken, means the values round the end of the range.
        assert_eq!(
            next_n("0 0 * * fri-sat,sun-tue", "UTC", "2026-01-01T12:00:00Z", 5),
            [
                "2026-01-02T00:00:00.000+00:00",
                "2026-01-03T00:00:00.000+00:00",
                "2026-01-04T00:00:00.000+00:00",
                "2026-01-05T00:00:00.000+00:00",
                "2026-01-06T00:00:00.000+00:00"
            ]
        );
    }

    #[test]
    fn a_question_mark_stands_alone() {
        for expr in ["0 0 ?,1 * 5", "0 0 1,? * 5", "0 0 * * ?,MON"] {
            let err = parse_error(expr);
            assert!(err.contains("? (any day) stands alone and cannot be part of the list"), "{expr:?}: {err}");
        }
        assert!(Schedule::parse("0 0 ? * 5", "UTC").is_ok());
    }

    #[test]
    fn every_refuses_months_and_years_and_states_its_limit_in_days() {
        for expr in ["@every 5M", "@every 1y", "@every 2months", "@every 1year 2d"] {
            let err = parse_error(expr);
            assert!(err.contains("a month or a year, which have no fixed length"), "{expr:?}: {err}");
        }
        assert!(parse_error("@every 367d").contains("between 1s and 366d"));
        assert_eq!(Schedule::parse("@every 5m", "UTC").unwrap().describe(), "Every 5 minutes");
        assert_eq!(Schedule::parse("@every 30d", "UTC").unwrap().describe(), "Every 30 days");
    }

    #[test]
    fn a_wildcard_job_keeps_its_second_pass_through_a_seven_hour_fall_back() {
        // Antarctica/Vostok fell back 7 hours in February 1994 (+07 to -00): a wildcard job runs at
        // every elapsed instant whose local time matches, both passes of the repeated hours included.
        use chrono::Offset as _;
        let tz: chrono_tz::Tz = "Antarctica/Vostok".parse().unwrap();
        let offset = |t: i64| i64::from(tz.timestamp_opt(t, 0).unwrap().offset().fix().local_minus_utc());
        let (mut lo, mut hi) = (ms("1994-01-01T00:00:00Z") / 1000, ms("1994-06-01T00:00:00Z") / 1000);
        assert!(offset(lo) - offset(hi) >= 6 * 3600, "the tz data has Vostok's 1994 change");
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if offset(mid) == offset(lo) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // Every elapsed minute whose local time matches, from `from` on: what a wildcard job runs.
        let brute = |matches: &dyn Fn(u32, u32) -> bool, from: i64, n: usize| -> Vec<i64> {
            use chrono::Timelike as _;
            let mut t = (from / 60 + 1) * 60;
            let mut out = Vec::new();
            while out.len() < n {
                let local = tz.timestamp_opt(t, 0).unwrap();
                if matches(local.hour(), local.minute()) {
                    out.push(t * 1000);
                }
                t += 60;
            }
            out
        };
        type Matches<'a> = &'a dyn Fn(u32, u32) -> bool;
        let cases: [(&str, Matches); 4] = [
            ("0 * * * *", &|_, m| m == 0),
            // Six hours apart: 18:00 comes again an hour after the change, six hours after its
            // first pass (a 3-hour look ahead, from that first pass, missed it).
            ("0 */6 * * *", &|h, m| h % 6 == 0 && m == 0),
            ("30 */2 * * *", &|h, m| h % 2 == 0 && m == 30),
            ("*/20 1-23/3 * * *", &|h, m| h % 3 == 1 && m % 20 == 0),
        ];
        for (expr, matches) in cases {
            let s = Schedule::parse(expr, "Antarctica/Vostok").unwrap();
            for minutes in (-600..=480).step_by(10) {
                let from = hi + minutes * 60 - 1;
                assert_eq!(
                    s.upcoming(from * 1000, 12),
                    brute(matches, from, 12),
                    "{expr} from {minutes} min after the change"
                );
            }
        }
    }

    #[test]
    fn names_only_in_their_own_field() {
        let cases = [
            ("0 0 * MON *", "month: MON is a day name; day names belong in the day-of-week field"),
            ("0 0 * * JAN", "day-of-week: JAN is a month name; month names belong in the month field"),
            ("0 0 MON * *", "day-of-month: MON is a day name"),
            ("0 JAN * * *", "hour: JAN is a month name"),
            ("1,,2 * * * *", "minute: empty item in the list \"1,,2\""),
            ("0 0 1, * *", "day-of-month: empty item"),
            ("0 0 ?/2 * *", "day-of-month: ? cannot take a step"),
            ("0 0 * * ?/2", "day-of-week: ? cannot take a step"),
            ("? * * * *", "minute: ? is only allowed in day-of-month and day-of-week"),
            ("0 0 * FOO *", "month: \"FOO\" is neither 1-12 nor a month name"),
        ];
        for (expr, want) in cases {
            let err = parse_error(expr);
            assert!(err.contains(want), "{expr:?}: {err}");
        }
        // Names where they belong, in any case, alone and in ranges.
        assert_eq!(
            next_n("0 0 * jan-Feb mon-FRI", "UTC", "2026-01-30T12:00:00Z", 3),
            ["2026-02-02T00:00:00.000+00:00", "2026-02-03T00:00:00.000+00:00", "2026-02-04T00:00:00.000+00:00"]
        );
        assert_eq!(next_n("0 0 1 DEC ?", "UTC", "2026-01-30T12:00:00Z", 1), ["2026-12-01T00:00:00.000+00:00"]);
    }

    #[test]
    fn schedules_that_never_fire_are_refused_when_parsed() {
        for expr in
            ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 0 31 2,4,6,9,11 *", "0 0 0 29 2 * 2029-2031", "0 0 0 30W 2 *"]
        {
            let err = parse_error(expr);
            assert!(err.contains("never fires"), "{expr:?}: {err}");
        }
        // Rare is not never: 29 February, and a fifth Friday in February (2036).
        assert_eq!(next_n("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", 1), ["2028-02-29T00:00:00.000+00:00"]);
        assert_eq!(next_n("0 0 * 2 5#5", "UTC", "2026-01-01T00:00:00Z", 1), ["2036-02-29T00:00:00.000+00:00"]);
    }

    #[test]
    fn schedules_whose_last_tick_is_past_answer_none() {
        let now = ms("2026-06-01T00:00:00Z");
        let past_year = Schedule::parse("0 0 12 1 1 * 2020-2025", "UTC").unwrap();
        let past_at = Schedule::parse("@at 2020-01-01T00:00:00Z", "UTC").unwrap();
        let rare = Schedule::parse("0 0 0 29 2 * 2024-9999", "Europe/Berlin").unwrap();
        assert_eq!(past_year.next_after(now), None);
        assert_eq!(past_at.next_after(now), None);
        assert!(rare.next_after(now).is_some());
        assert!(past_year.fires_after(now).is_err_and(|e| e.to_string().contains("never fires after")));
        assert!(past_at.fires_after(now).is_err_and(|e| e.to_string().contains("never fires after")));
        assert!(rare.fires_after(now).is_ok());
    }

    #[test]
    fn next_after_moves_forward_from_every_hour_of_two_years() {
        // (How fast it is, is for `etcron-bench`: tests do not time.)
        let cases = [
            ("*/15 * * * * *", "America/New_York"),
            ("30 2,14 * * *", "America/New_York"),
            ("0 0 L * *", "Australia/Lord_Howe"),
            ("0 0 * * 5#5", "UTC"),
            ("* * * * * *", "Europe/Berlin"),
        ];
        for (expr, tz) in cases {
            let s = Schedule::parse(expr, tz).unwrap();
            // Two years of hourly starting points, across both DST changes.
            let mut t = ms("2026-01-01T00:00:00Z");
            for _ in 0..(2 * 365 * 24) {
                assert!(s.next_after(t).is_some_and(|n| n > t), "{expr} in {tz} after {t}");
                t += 3_600_000;
            }
        }
    }

    #[test]
    fn describes_in_words() {
        let cases = [
            ("@every 90s", "Every 90 seconds"),
            ("@every 366d", "Every 366 days"),
            ("@every 1d", "Every day"),
            ("@every 1500ms", "Every 1500 milliseconds"),
            ("*/90 * * * *", "Every hour at :00"),
            ("0 * * * *", "Every hour at :00"),
            ("*/15 * * * *", "Every 15 minutes"),
            ("0-30/7 * * * *", "Every 7 minutes from :00 through :28"),
            ("2-12/3 * * * *", "Every 3 minutes from :02 through :11"),
            ("0 2-12/3 * * *", "At 02:00, 05:00, 08:00 and 11:00 every day"),
            ("0 */2 * * *", "Every 2 hours at :00"),
            ("30 2,14 * * *", "At 02:30 and 14:30 every day"),
            ("0 9 * * 1-5", "At 09:00 on Monday through Friday"),
            ("*/5 9-17 * * MON-FRI", "Every 5 minutes during hours 9 through 17 on Monday through Friday"),
            ("0 0 LW * *", "At 00:00 on the last weekday of the month"),
            ("0 0 L * *", "At 00:00 on the last day of the month"),
            ("0 0 15W * *", "At 00:00 on the weekday nearest day 15 of the month"),
            ("0 0 * * 5#2", "At 00:00 on the second Friday of the month"),
            ("0 0 * * 5L", "At 00:00 on the last Friday of the month"),
            ("0 0 1,15 * 1", "At 00:00 on days 1 and 15 of the month or on Monday"),
            ("0 0 * * 7", "At 00:00 on Sunday"),
            ("0 0 1 1,7 *", "At 00:00 on day 1 of the month in January and July"),
            ("*/20 * * * * *", "Every 20 seconds"),
            ("5 30 2 * * *", "At 02:30:05 every day"),
            ("0 0 12 1 1 * 2030", "At 12:00 on day 1 of the month in January in 2030"),
        ];
        for (expr, want) in cases {
            assert_eq!(Schedule::parse(expr, "UTC").unwrap().describe(), want, "{expr}");
        }
    }

    #[test]
    fn dst_rule_for_lists_ranges_and_wildcards_in_many_zones() {
        let cases: &[(&str, &str, &str, &[&str])] = &[
            // New York, 2026-03-08 02:00 -> 03:00: fixed times in the gap run at 03:00.
            (
                "30 2,14 * * *",
                "America/New_York",
                "2026-03-07T20:00:00-05:00",
                &["2026-03-08T03:00:00.000-04:00", "2026-03-08T14:30:00.000-04:00", "2026-03-09T02:30:00.000-04:00"],
            ),
            (
                "30 2 * * *",
                "America/New_York",
                "2026-03-07T20:00:00-05:00",
                &["2026-03-08T03:00:00.000-04:00", "2026-03-09T02:30:00.000-04:00"],
            ),
            (
                "0,30 2 * * *",
                "America/New_York",
                "2026-03-07T20:00:00-05:00",
                &["2026-03-08T03:00:00.000-04:00", "2026-03-09T02:00:00.000-04:00"],
            ),
            // Wildcards follow elapsed time: nothing in the gap.
            (
                "30 * * * *",
                "America/New_York",
                "2026-03-08T01:00:00-05:00",
                &["2026-03-08T01:30:00.000-05:00", "2026-03-08T03:30:00.000-04:00"],
            ),
            // New York, 2026-11-01 02:00 -> 01:00: fixed times once, wildcards twice.
            (
                "0,30 1 * * *",
                "America/New_York",
                "2026-10-31T20:00:00-04:00",
                &["2026-11-01T01:00:00.000-04:00", "2026-11-01T01:30:00.000-04:00", "2026-11-02T01:00:00.000-05:00"],
            ),
            (
                "30 1,13 * * *",
                "America/New_York",
                "2026-10-31T20:00:00-04:00",
                &["2026-11-01T01:30:00.000-04:00", "2026-11-01T13:30:00.000-05:00", "2026-11-02T01:30:00.000-05:00"],
            ),
            (
                "0 1-3 * * *",
                "America/New_York",
                "2026-10-31T20:00:00-04:00",
                &["2026-11-01T01:00:00.000-04:00", "2026-11-01T02:00:00.000-05:00", "2026-11-01T03:00:00.000-05:00"],
            ),
            (
                "*/30 * * * *",
                "America/New_York",
                "2026-11-01T00:45:00-04:00",
                &[
                    "2026-11-01T01:00:00.000-04:00",
                    "2026-11-01T01:30:00.000-04:00",
                    "2026-11-01T01:00:00.000-05:00",
                    "2026-11-01T01:30:00.000-05:00",
                    "2026-11-01T02:00:00.000-05:00",
                ],
            ),
            // From inside the first pass, a wildcard job still has the second pass ahead.
            (
                "0 * * * *",
                "America/New_York",
                "2026-11-01T01:00:00-04:00",
                &["2026-11-01T01:00:00.000-05:00", "2026-11-01T02:00:00.000-05:00"],
            ),
            ("0 1 * * *", "America/New_York", "2026-11-01T01:00:00-04:00", &["2026-11-02T01:00:00.000-05:00"]),
            // Berlin, 2026-03-29 02:00 -> 03:00 and 2026-10-25 03:00 -> 02:00.
            (
                "15 2,14 * * *",
                "Europe/Berlin",
                "2026-03-28T20:00:00+01:00",
                &["2026-03-29T03:00:00.000+02:00", "2026-03-29T14:15:00.000+02:00"],
            ),
            (
                "0,30 2 * * *",
                "Europe/Berlin",
                "2026-10-24T20:00:00+02:00",
                &["2026-10-25T02:00:00.000+02:00", "2026-10-25T02:30:00.000+02:00", "2026-10-26T02:00:00.000+01:00"],
            ),
            // Sydney, 2026-10-04 02:00 -> 03:00 and 2026-04-05 03:00 -> 02:00.
            (
                "30 2,3 * * *",
                "Australia/Sydney",
                "2026-10-03T20:00:00+10:00",
                &["2026-10-04T03:00:00.000+11:00", "2026-10-04T03:30:00.000+11:00", "2026-10-05T02:30:00.000+11:00"],
            ),
            (
                "0 2-3 * * *",
                "Australia/Sydney",
                "2026-04-04T20:00:00+11:00",
                &["2026-04-05T02:00:00.000+11:00", "2026-04-05T03:00:00.000+10:00"],
            ),
            // Lord Howe shifts by 30 minutes: 02:00 -> 02:30 on 2026-10-04, 02:00 -> 01:30 on 2026-04-05.
            (
                "15 2,14 * * *",
                "Australia/Lord_Howe",
                "2026-10-03T20:00:00+10:30",
                &["2026-10-04T02:30:00.000+11:00", "2026-10-04T14:15:00.000+11:00"],
            ),
            (
                "45 1,13 * * *",
                "Australia/Lord_Howe",
                "2026-04-04T20:00:00+11:00",
                &["2026-04-05T01:45:00.000+11:00", "2026-04-05T13:45:00.000+10:30"],
            ),
            (
                "*/15 * * * *",
                "Australia/Lord_Howe",
                "2026-04-05T01:40:00+11:00",
                &[
                    "2026-04-05T01:45:00.000+11:00",
                    "2026-04-05T01:30:00.000+10:30",
                    "2026-04-05T01:45:00.000+10:30",
                    "2026-04-05T02:00:00.000+10:30",
                ],
            ),
            // Santiago changes at midnight: 2026-09-06 00:00 -> 01:00, 2026-04-05 00:00 -> 2026-04-04 23:00.
            (
                "0 0,12 * * *",
                "America/Santiago",
                "2026-09-05T20:00:00-04:00",
                &["2026-09-06T01:00:00.000-03:00", "2026-09-06T12:00:00.000-03:00", "2026-09-07T00:00:00.000-03:00"],
            ),
            (
                "0 0 * * *",
                "America/Santiago",
                "2026-09-05T20:00:00-04:00",
                &["2026-09-06T01:00:00.000-03:00", "2026-09-07T00:00:00.000-03:00"],
            ),
            (
                "0 */24 * * *",
                "America/Santiago",
                "2026-09-05T20:00:00-04:00",
                &["2026-09-06T01:00:00.000-03:00", "2026-09-07T00:00:00.000-03:00"],
            ),
            (
                "30 23 * * *",
                "America/Santiago",
                "2026-04-04T20:00:00-03:00",
                &["2026-04-04T23:30:00.000-03:00", "2026-04-05T23:30:00.000-04:00"],
            ),
            (
                "30 * * * *",
                "America/Santiago",
                "2026-04-04T23:00:00-03:00",
                &["2026-04-04T23:30:00.000-03:00", "2026-04-04T23:30:00.000-04:00", "2026-04-05T00:30:00.000-04:00"],
            ),
            // Dublin (tzdb's negative DST): 01:00 -> 02:00 on 2026-03-29, 02:00 -> 01:00 on 2026-10-25.
            (
                "30 1,13 * * *",
                "Europe/Dublin",
                "2026-03-28T20:00:00+00:00",
                &["2026-03-29T02:00:00.000+01:00", "2026-03-29T13:30:00.000+01:00"],
            ),
            (
                "30 1 * * *",
                "Europe/Dublin",
                "2026-10-24T20:00:00+01:00",
                &["2026-10-25T01:30:00.000+01:00", "2026-10-26T01:30:00.000+00:00"],
            ),
            // Kolkata has no DST.
            (
                "30 2,14 * * *",
                "Asia/Kolkata",
                "2026-03-07T20:00:00+05:30",
                &["2026-03-08T02:30:00.000+05:30", "2026-03-08T14:30:00.000+05:30"],
            ),
        ];
        for (expr, tz, from, want) in cases {
            assert_eq!(next_n(expr, tz, from, want.len()), *want, "{expr} in {tz} from {from}");
        }
    }

    #[test]
    fn calendar_features_keep_working() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("0 0 L * *", "2026-02-01T00:00:00Z", &["2026-02-28T00:00:00.000+00:00", "2026-03-31T00:00:00.000+00:00"]),
            // May 2026 ends on a Sunday; 15 August 2026 is a Saturday, 1 August too.
            ("0 0 LW 5 *", "2026-01-01T00:00:00Z", &["2026-05-29T00:00:00.000+00:00"]),
            ("0 0 15W 8 *", "2026-01-01T00:00:00Z", &["2026-08-14T00:00:00.000+00:00"]),
            ("0 0 1W 8 *", "2026-01-01T00:00:00Z", &["2026-08-03T00:00:00.000+00:00"]),
            ("0 0 * 3 5#2", "2026-01-01T00:00:00Z", &["2026-03-13T00:00:00.000+00:00"]),
            ("0 0 * 2 6L", "2026-01-01T00:00:00Z", &["2026-02-28T00:00:00.000+00:00"]),
            // Both day fields restricted: either matches (13 March 2026 is a Friday).
            (
                "0 0 13 3 5",
                "2026-03-01T00:00:00Z",
                &["2026-03-06T00:00:00.000+00:00", "2026-03-13T00:00:00.000+00:00", "2026-03-20T00:00:00.000+00:00"],
            ),
            ("0 0 10 3 5", "2026-03-07T00:00:00Z", &["2026-03-10T00:00:00.000+00:00", "2026-03-13T00:00:00.000+00:00"]),
            // 7 is Sunday, alone and at the end of a range.
            ("0 0 * * 7", "2026-01-01T00:00:00Z", &["2026-01-04T00:00:00.000+00:00"]),
            (
                "0 0 * * 6-7",
                "2026-01-01T00:00:00Z",
                &["2026-01-03T00:00:00.000+00:00", "2026-01-04T00:00:00.000+00:00"],
            ),
            ("0 0 * * SUN", "2026-01-01T00:00:00Z", &["2026-01-04T00:00:00.000+00:00"]),
            (
                "0 0 1 */5 *",
                "2026-01-01T00:00:00Z",
                &["2026-06-01T00:00:00.000+00:00", "2026-11-01T00:00:00.000+00:00"],
            ),
        ];
        for (expr, from, want) in cases {
            assert_eq!(next_n(expr, "UTC", from, want.len()), *want, "{expr} from {from}");
        }
        // @every is epoch-anchored in every zone, DST or not.
        let s = Schedule::parse("@every 1h", "America/New_York").unwrap();
        assert_eq!(s.upcoming(ms("2026-11-01T05:30:00Z"), 2), [ms("2026-11-01T06:00:00Z"), ms("2026-11-01T07:00:00Z")]);
    }

    /// Property tests: any input is safe to parse and evaluate, and generated valid schedules
    /// give strictly increasing fire times that the schedule itself accepts.
    mod properties {
        use std::collections::BTreeSet;

        use chrono::{Datelike, Timelike};
        use proptest::prelude::*;

        use super::*;
        use crate::check::check;

        /// 1970-01-01 .. 2100-01-01 in ms.
        const INSTANTS: std::ops::Range<UnixMs> = 0..4_102_444_800_000;

        /// One cron field of values `lo..=max`: its text and the values it allows. Values named
        /// in the text stop at `hi` (days at 28, so that every month has them).
        fn field(lo: u32, hi: u32, max: u32) -> BoxedStrategy<(String, BTreeSet<u32>)> {
            prop_oneof![
                Just(("*".to_owned(), (lo..=max).collect())),
                (lo..=hi).prop_map(|v| (v.to_string(), BTreeSet::from([v]))),
                (1..=hi - lo).prop_map(move |step| (format!("*/{step}"), (lo..=max).step_by(step as usize).collect())),
                (lo..=hi, lo..=hi).prop_map(|(a, b)| {
                    let (a, b) = (a.min(b), a.max(b));
                    (format!("{a}-{b}"), (a..=b).collect())
                }),
                proptest::collection::btree_set(lo..=hi, 1..4)
                    .prop_map(|set| { (set.iter().map(ToString::to_string).collect::<Vec<_>>().join(","), set) }),
            ]
            .boxed()
        }

        /// A valid crontab: the expression and, per field (sec, min, hour, dom, month, dow),
        /// the allowed values. Days of month stop at 28 so every month/day pair exists.
        #[derive(Debug, Clone)]
        struct Crontab {
            expression: String,
            sets: [BTreeSet<u32>; 6],
            dom_star: bool,
            dow_star: bool,
        }

        impl Crontab {
            /// Whether `t` (in `tz`) matches every field, as Vixie cron reads them: when both
            /// day fields are restricted, either may match.
            fn matches(&self, t: DateTime<Tz>) -> bool {
                let [sec, min, hour, dom, month, dow] = &self.sets;
                let dom_ok = dom.contains(&t.day());
                let dow_ok = dow.contains(&t.weekday().num_days_from_sunday());
                let day_ok = match (self.dom_star, self.dow_star) {
                    (true, _) => dow_ok,
                    (false, true) => dom_ok,
                    (false, false) => dom_ok || dow_ok,
                };
                sec.contains(&t.second())
                    && min.contains(&t.minute())
                    && hour.contains(&t.hour())
                    && month.contains(&t.month())
                    && day_ok
            }
        }

        fn crontab() -> impl Strategy<Value = Crontab> {
            let fields = (field(0, 59, 59), field(0, 59, 59), field(0, 23, 23), field(1, 28, 31), field(1, 12, 12));
            (any::<bool>(), fields, field(0, 6, 6)).prop_map(|(with_seconds, (sec, min, hour, dom, month), dow)| {
                let (sec_text, sec_set) = if with_seconds { sec } else { ("0".to_owned(), BTreeSet::from([0])) };
                let mut fields = vec![min.0, hour.0, dom.0.clone(), month.0, dow.0.clone()];
                if with_seconds {
                    fields.insert(0, sec_text);
                }
                Crontab {
                    expression: fields.join(" "),
                    sets: [sec_set, min.1, hour.1, dom.1, month.1, dow.1],
                    dom_star: dom.0 == "*",
                    dow_star: dow.0 == "*",
                }
            })
        }

        /// `@every` expressions with their interval in ms.
        fn every() -> impl Strategy<Value = (String, i64)> {
            prop_oneof![
                (1i64..=86_400).prop_map(|s| (format!("@every {s}s"), s * 1000)),
                (1i64..=1440).prop_map(|m| (format!("@every {m}m"), m * 60_000)),
                (1i64..=48, 0i64..60).prop_map(|(h, m)| (format!("@every {h}h {m}m"), (h * 60 + m) * 60_000)),
                (1i64..=366).prop_map(|d| (format!("@EVERY  {d}d"), d * 86_400_000)),
                (1000i64..=100_000).prop_map(|ms| (format!("@every {ms}ms"), ms)),
            ]
        }

        fn any_timezone() -> impl Strategy<Value = Tz> {
            proptest::sample::select(chrono_tz::TZ_VARIANTS.to_vec())
        }

        /// Checks what holds for every schedule: `n` times (fewer only when it ends), strictly
        /// increasing, after `now`, each one the schedule's next fire time from just before it.
        fn check_upcoming(s: &Schedule, now: UnixMs, n: usize) -> Result<Vec<UnixMs>, TestCaseError> {
            let times = s.upcoming(now, n);
            prop_assert!(times.len() <= n);
            let mut prev = now;
            for &t in &times {
                prop_assert!(t > prev, "{t} not after {prev} in {times:?}");
                prop_assert_eq!(s.next_after(t - 1), Some(t), "the schedule does not fire at {}", t);
                prev = t;
            }
            Ok(times)
        }

        #[test]
        fn arbitrary_text_never_panics() {
            let text = prop_oneof![
                any::<String>(),
                "[0-9*/,LW#?a-z -]{0,40}",
                "@(every|at|daily|hourly|yearly|EVERY) ?[0-9a-z:.+ -]{0,30}",
                ("[0-9*/,-]{1,8}", 1usize..9).prop_map(|(f, n)| vec![f; n].join(" ")),
            ];
            check(400, (text, INSTANTS), |(expr, now)| {
                if let Ok(s) = Schedule::parse(&expr, "UTC") {
                    let _ = s.describe();
                    check_upcoming(&s, now, 3)?;
                }
                Ok(())
            });
        }

        #[test]
        fn crontab_fire_times_match_every_field() {
            check(200, (crontab(), INSTANTS, 1usize..20), |(cron, now, n)| {
                let s = Schedule::parse(&cron.expression, "UTC").map_err(|e| TestCaseError::fail(e.to_string()))?;
                let times = check_upcoming(&s, now, n)?;
                prop_assert_eq!(times.len(), n);
                for t in times {
                    let at = Utc.timestamp_millis_opt(t).single().map(|u| u.with_timezone(&Tz::UTC));
                    prop_assert!(at.is_some_and(|at| cron.matches(at)), "{} fires at {}", cron.expression, t);
                }
                Ok(())
            });
        }

        #[test]
        fn every_fires_on_multiples_of_its_interval() {
            check(200, (every(), INSTANTS, 1usize..20), |((expr, interval), now, n)| {
                let s = Schedule::parse(&expr, "UTC").map_err(|e| TestCaseError::fail(e.to_string()))?;
                let times = check_upcoming(&s, now, n)?;
                prop_assert_eq!(times.len(), n);
                prop_assert!(times[0] - now <= interval);
                for pair in times.windows(2) {
                    prop_assert_eq!(pair[1] - pair[0], interval);
                }
                prop_assert!(times.iter().all(|t| t % interval == 0));
                Ok(())
            });
        }

        #[test]
        fn at_fires_once_if_still_ahead() {
            let offset_min = -12 * 60..=14 * 60i32;
            check(200, (INSTANTS, offset_min, INSTANTS), |(at, offset, now)| {
                let zone = chrono::FixedOffset::east_opt(offset * 60).ok_or_else(|| TestCaseError::reject("offset"))?;
                let text = Utc
                    .timestamp_millis_opt(at)
                    .single()
                    .ok_or_else(|| TestCaseError::reject("instant"))?
                    .with_timezone(&zone)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
                let s = Schedule::parse(&format!("@at {text}"), "Asia/Kolkata")
                    .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                let times = check_upcoming(&s, now, 3)?;
                prop_assert_eq!(times, if at > now { vec![at] } else { vec![] });
                Ok(())
            });
        }

        #[test]
        fn any_timezone_across_dst_changes() {
            // Days in the months where clocks change, in either hemisphere, and schedules that
            // hit the hours around the change.
            let day = (1970i32..2040, prop::sample::select(vec![3u32, 4, 9, 10, 11]), 1u32..=28);
            let expr = prop_oneof![
                crontab().prop_map(|c| c.expression),
                (0u32..60, 0u32..4).prop_map(|(m, h)| format!("{m} {h},{} * * *", h + 1)),
                Just("*/30 * * * *".to_owned()),
                Just("0 0 * * * *".to_owned()),
                every().prop_map(|e| e.0),
            ];
            check(300, (any_timezone(), day, expr, 1usize..40), |(tz, (y, m, d), expr, n)| {
                let s = Schedule::parse(&expr, tz.name()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let now = Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).single().map_or(0, |t| t.timestamp_millis());
                check_upcoming(&s, now, n)?;
                let _ = s.describe();
                Ok(())
            });
        }
    }
}
