//! Schedules: cron expressions (5, 6 or 7 fields), `@hourly`-style aliases, `@every <duration>`
//! and one-shot `@at <RFC 3339>`, evaluated in the job's IANA timezone.
//!
//! Every worker must compute the same fire times for a job, so everything here is a pure
//! function of the expression, the timezone and an instant: `@every` is anchored to the Unix
//! epoch, not to the moment a worker happened to load the job.
//!
//! Daylight saving time (cron with fixed hours, via croner): a fixed-time tick that falls into a
//! spring-forward gap runs once at the first valid instant after the gap; a fixed-time tick in a
//! fall-back overlap runs once, at its first occurrence. Interval patterns (`*/15 * * * *`) follow
//! real elapsed time and never fire twice for one wall-clock time.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

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
}

#[derive(Debug, Clone)]
enum Kind {
    Cron(Box<Cron>),
    /// Fires at every multiple of the interval since the Unix epoch.
    Every {
        interval_ms: i64,
    },
    /// Fires once.
    At {
        at_ms: UnixMs,
    },
}

/// A parsed schedule bound to a timezone.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
    tz: Tz,
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
        Ok(Self { kind, tz })
    }

    /// The first fire time strictly after `after_ms`, or `None` when the schedule never fires
    /// again (a past `@at`, or a cron pattern with no future match).
    #[must_use]
    pub fn next_after(&self, after_ms: UnixMs) -> Option<UnixMs> {
        match &self.kind {
            Kind::Every { interval_ms } => {
                let next = (after_ms.div_euclid(*interval_ms) + 1).checked_mul(*interval_ms)?;
                Some(next)
            }
            Kind::At { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
            Kind::Cron(cron) => {
                // Cron resolution is one second: start from the whole second containing
                // `after_ms` and search exclusively, so the answer is strictly later.
                let secs = after_ms.div_euclid(1000);
                let start: DateTime<Tz> = self.tz.timestamp_opt(secs, 0).single()?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp_millis())
            }
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
        matches!(self.kind, Kind::At { .. })
    }

    /// A plain-language reading of the schedule.
    #[must_use]
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Cron(cron) => cron.describe(),
            Kind::Every { interval_ms } => {
                let d = Duration::from_millis(u64::try_from(*interval_ms).unwrap_or(0));
                format!("Every {}", humantime::format_duration(d))
            }
            Kind::At { at_ms } => format!("Once at {}", crate::rfc3339_ms(*at_ms)),
        }
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
        let interval = crate::duration::parse(rest).map_err(ScheduleError::Expression)?;
        if interval < MIN_EVERY || interval > MAX_EVERY {
            return Err(ScheduleError::Expression(format!(
                "@every interval must be between {} and {}",
                humantime::format_duration(MIN_EVERY),
                humantime::format_duration(MAX_EVERY)
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
    let fields = pattern.split_whitespace().count();
    if !(5..=7).contains(&fields) {
        return Err(ScheduleError::Expression(format!(
            "cron expression has {fields} fields; expected 5 (min hour day month weekday), 6 (seconds first) or 7 (seconds first, year last)"
        )));
    }
    let cron = Cron::from_str(&pattern)
        .map_err(|e| ScheduleError::Expression(format!("invalid cron expression {pattern:?}: {e}")))?;
    Ok(Kind::Cron(Box::new(cron)))
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

    fn ms(rfc: &str) -> UnixMs {
        DateTime::parse_from_rfc3339(rfc).unwrap().timestamp_millis()
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
            ("61 * * * *", "invalid cron"),
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

    #[test]
    fn describes_in_words() {
        assert_eq!(Schedule::parse("@every 90s", "UTC").unwrap().describe(), "Every 1m 30s");
        assert!(!Schedule::parse("0 9 * * 1-5", "UTC").unwrap().describe().is_empty());
    }
}
