//! The time arguments of every command (`backfill --from/--to`, `pause --until`, `run --at`,
//! `executions search --since/--until`, `schedule preview --after/--active-from/--active-until`)
//! read by one parser: an RFC 3339 instant, `now`, a duration back or ahead (`-3h`, `+30m`, or
//! unsigned in the argument's own direction: `--since 3h` is 3 hours ago, `pause --until 2h` in 2
//! hours), a date or a date and time without offset (`2026-03-01`, `2026-03-01 08:00`), or a time
//! of day (`08:00`: the last one passed, or the next one to come, as the argument goes). Times
//! without offset are read in a zone: the job's for a command about one job, else this
//! machine's (`schedule preview`: its `--timezone`).

use anyhow::Context as _;
use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, SecondsFormat, TimeZone, Utc};

use crate::client::{segment, Client};
use crate::exit::Usage;

/// A time argument as written: which instant it is depends on now, its direction and a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// An instant with its offset (RFC 3339).
    At(DateTime<Utc>),
    Now,
    /// A signed duration from now: `-3h`, `+30m`.
    Offset(Duration),
    /// An unsigned duration: back or ahead as the argument goes.
    Span(Duration),
    /// A date and time without offset, read in the zone (a date alone: its midnight).
    Local(NaiveDateTime),
    /// A time of day, read in the zone: the last one passed or the next one to come.
    Clock(NaiveTime),
}

/// Which way an argument points: into the past (a search, a backfill) or the future (a pause's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toward {
    Past,
    Future,
}

const LOCAL_FORMATS: [&str; 4] = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M"];

impl When {
    /// Reads a time argument (clap's value parser of every time argument).
    pub fn parse(text: &str) -> Result<When, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("now") {
            return Ok(When::Now);
        }
        if let Ok(at) = DateTime::parse_from_rfc3339(t) {
            return Ok(When::At(at.with_timezone(&Utc)));
        }
        if let Some((sign, rest)) = t.strip_prefix('-').map(|r| (-1, r)).or_else(|| t.strip_prefix('+').map(|r| (1, r)))
        {
            return span(rest).map(|d| When::Offset(d * sign)).ok_or_else(|| not_a_time(text));
        }
        if let Some(d) = span(t) {
            return Ok(When::Span(d));
        }
        if let Some(local) = LOCAL_FORMATS.iter().find_map(|f| NaiveDateTime::parse_from_str(t, f).ok()) {
            return Ok(When::Local(local));
        }
        if let Ok(date) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
            return Ok(When::Local(date.and_time(NaiveTime::MIN)));
        }
        ["%H:%M:%S", "%H:%M"]
            .iter()
            .find_map(|f| NaiveTime::parse_from_str(t, f).ok())
            .map(When::Clock)
            .ok_or_else(|| not_a_time(text))
    }

    /// Whether it is read in a zone (a date or time without offset).
    #[must_use]
    pub fn needs_zone(&self) -> bool {
        matches!(self, When::Local(_) | When::Clock(_))
    }

    /// The instant it names at `now`, pointing `toward`, read in `zone` (named `zone_name` in
    /// errors): a local time the zone skips (a spring-forward gap) is an error; one it passes
    /// twice (a fall-back) is the first of the two.
    pub fn resolve<Z: TimeZone>(
        &self,
        toward: Toward,
        (zone, zone_name): (&Z, &str),
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, String> {
        let ahead = |d: Duration| now.checked_add_signed(d).ok_or_else(|| "too far from now".to_owned());
        match *self {
            When::At(at) => Ok(at),
            When::Now => Ok(now),
            When::Offset(d) => ahead(d),
            When::Span(d) => ahead(if toward == Toward::Past { -d } else { d }),
            When::Local(local) => in_zone(local, zone, zone_name),
            When::Clock(time) => {
                let today = now.with_timezone(zone).date_naive();
                let at = in_zone(today.and_time(time), zone, zone_name)?;
                let day = match toward {
                    Toward::Past if at > now => today.pred_opt(),
                    Toward::Future if at <= now => today.succ_opt(),
                    _ => return Ok(at),
                };
                in_zone(day.ok_or("out of range")?.and_time(time), zone, zone_name)
            }
        }
    }
}

/// A duration in humantime's words (`3h`, `1h30m`, `2days`).
fn span(text: &str) -> Option<Duration> {
    let d = humantime::parse_duration(text.trim()).ok()?;
    Duration::from_std(d).ok()
}

fn in_zone<Z: TimeZone>(local: NaiveDateTime, zone: &Z, zone_name: &str) -> Result<DateTime<Utc>, String> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => Ok(at.with_timezone(&Utc)),
        LocalResult::None => Err(format!(
            "{} does not exist in {zone_name} (its clocks skip it): give an offset, e.g. {}+01:00",
            local.format("%Y-%m-%d %H:%M"),
            local.format("%Y-%m-%dT%H:%M:%S")
        )),
    }
}

fn not_a_time(text: &str) -> String {
    format!(
        "{text:?} is not a time: give an RFC 3339 instant (2026-03-01T08:00:00Z), a date or local time \
         (2026-03-01, 2026-03-01 08:00, 08:00), now, or a duration back or ahead (-3h, +30m)"
    )
}

/// An instant as the API takes it.
#[must_use]
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Where times without offset are read.
#[derive(Debug, Clone)]
pub enum Zone {
    /// A job's (or `schedule preview`'s) IANA zone.
    Named(chrono_tz::Tz),
    /// This machine's local time (`TZ`).
    Machine,
}

impl Zone {
    /// The zone of job `name` (read from the master) when one of `whens` needs a zone; this
    /// machine's otherwise (no request made).
    pub async fn of_job(client: &Client, name: &str, whens: &[Option<When>]) -> anyhow::Result<Zone> {
        if !whens.iter().flatten().any(When::needs_zone) {
            return Ok(Zone::Machine);
        }
        let job = client
            .get(&format!("/api/jobs/{}", segment(name)))
            .await
            .with_context(|| format!("reading job {name:?} for its timezone"))?;
        let tz = job["spec"]["timezone"].as_str().unwrap_or("UTC");
        Zone::named(tz).map_err(|e| Usage(format!("job {name:?}: {e}")).into())
    }

    /// An IANA zone by name.
    pub fn named(tz: &str) -> Result<Zone, String> {
        tz.parse::<chrono_tz::Tz>().map(Zone::Named).map_err(|_| format!("{tz:?} is not an IANA timezone"))
    }

    /// `when` as an RFC 3339 instant, now; a usage error (exit 2) naming `arg` when it cannot be.
    pub fn resolve(&self, arg: &str, when: When, toward: Toward) -> Result<String, Usage> {
        let now = Utc::now();
        let at = match self {
            Zone::Named(tz) => when.resolve(toward, (tz, tz.name()), now),
            Zone::Machine => when.resolve(toward, (&chrono::Local, "this machine's local time"), now),
        };
        at.map(rfc3339).map_err(|e| Usage(format!("{arg}: {e}")))
    }

    /// [`Zone::resolve`] of an optional argument.
    pub fn resolve_opt(&self, arg: &str, when: Option<When>, toward: Toward) -> Result<Option<String>, Usage> {
        when.map(|w| self.resolve(arg, w, toward)).transpose()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    fn resolve(text: &str, toward: Toward, tz: &str, now: &str) -> Result<String, String> {
        let zone: chrono_tz::Tz = tz.parse().unwrap();
        When::parse(text)?.resolve(toward, (&zone, tz), at(now)).map(rfc3339)
    }

    #[test]
    fn every_form_reads_as_one_instant() {
        let now = "2026-03-10T12:00:00Z";
        let past = |t: &str| resolve(t, Toward::Past, "Europe/Berlin", now).unwrap();
        let future = |t: &str| resolve(t, Toward::Future, "Europe/Berlin", now).unwrap();
        assert_eq!(past("2026-03-01T08:00:00+01:00"), "2026-03-01T07:00:00.000Z");
        assert_eq!(past("now"), "2026-03-10T12:00:00.000Z");
        assert_eq!(past("-3h"), "2026-03-10T09:00:00.000Z");
        assert_eq!(past("+30m"), "2026-03-10T12:30:00.000Z");
        assert_eq!(past("3h"), "2026-03-10T09:00:00.000Z", "unsigned: back for a past argument");
        assert_eq!(future("2h"), "2026-03-10T14:00:00.000Z", "and ahead for a future one");
        assert_eq!(past("2026-03-01"), "2026-02-28T23:00:00.000Z", "midnight in the job's zone");
        assert_eq!(past("2026-03-01 08:00"), "2026-03-01T07:00:00.000Z");
        assert_eq!(past("2026-03-01T08:00:30"), "2026-03-01T07:00:30.000Z");
        // A time of day: the last one passed (13:00 Berlin now): 08:00 today, 14:00 yesterday.
        assert_eq!(past("08:00"), "2026-03-10T07:00:00.000Z");
        assert_eq!(past("14:00"), "2026-03-09T13:00:00.000Z");
        assert_eq!(future("08:00"), "2026-03-11T07:00:00.000Z", "the next one to come");
        assert_eq!(future("14:00"), "2026-03-10T13:00:00.000Z");
    }

    #[test]
    fn local_times_across_daylight_saving() {
        let now = "2026-11-01T12:00:00Z";
        // Berlin skips 02:00-03:00 on 2026-03-29: refused, naming the zone and an offset to give.
        let e = resolve("2026-03-29 02:30", Toward::Past, "Europe/Berlin", now).unwrap_err();
        assert!(e.contains("does not exist in Europe/Berlin") && e.contains("+01:00"), "{e}");
        // 02:30 happens twice on 2026-10-25: the first (still +02:00).
        assert_eq!(
            resolve("2026-10-25 02:30", Toward::Past, "Europe/Berlin", now).unwrap(),
            "2026-10-25T00:30:00.000Z"
        );
        assert_eq!(resolve("2026-03-01", Toward::Past, "America/New_York", now).unwrap(), "2026-03-01T05:00:00.000Z");
    }

    #[test]
    fn what_is_not_a_time_is_named() {
        for bad in ["", "yesterday-ish", "2026-13-01", "25:00", "-", "+x", "2026-03-01 8"] {
            let e = When::parse(bad).unwrap_err();
            assert!(e.contains("is not a time") && e.contains("-3h"), "{bad}: {e}");
        }
        assert!(When::parse("08:00").unwrap().needs_zone() && !When::parse("-3h").unwrap().needs_zone());
    }
}
