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

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
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
    /// Shared: a parsed pattern is ~5.7 KB (croner keeps a table of every year), and
    /// [`ScheduleCache`] lets every job with the same schedule hold one.
    Cron(Arc<Cron>),
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
}

/// Parsed schedules shared by expression and timezone. A worker holding 100 000 jobs parses
/// each distinct schedule once and keeps one copy of it, instead of a ~5.7 KB croner pattern per
/// job; only cron patterns are kept (`@every` and `@at` are a few bytes each).
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
