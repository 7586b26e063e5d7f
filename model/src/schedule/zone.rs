//! From matching local times to instants in a timezone, with cron's DST rule:
//!
//! - a **fixed-time** job (neither minute nor hour is a wildcard) runs once per matching local
//!   time: a time in a spring-forward gap runs at the first instant after the gap, a time in a
//!   fall-back overlap runs at its first occurrence only;
//! - a **wildcard** job follows elapsed time: every instant whose local time matches, so both
//!   occurrences in an overlap and nothing in a gap.

use chrono::{Duration, LocalResult, NaiveDateTime, Offset, TimeZone};
use chrono_tz::Tz;

use super::cron::CronSpec;

/// Longest fall-back overlap looked for ahead of an instant: a day and two hours, more than any
/// change of offset in the tz database (Antarctica/Vostok fell back 7 hours in 1994; 3 hours,
/// the earlier bound, lost a wildcard job's second pass there).
const OVERLAP_WINDOW_S: i64 = 26 * 3600;
/// Most local times one search may look at. Outside the last hour before a fall-back change a
/// search looks at one or two; just before one, a wildcard job may look at every matching
/// local time of the overlap (3 600 for an every-second job and a one-hour change).
const MAX_CANDIDATES: usize = 20_000;

/// The first fire time (Unix s) strictly after `after_s`.
pub(super) fn next_after(spec: &CronSpec, tz: Tz, after_s: i64) -> Option<i64> {
    let local_after = tz.timestamp_opt(after_s, 0).single()?.naive_local();
    let lookback = if spec.fixed_time { 0 } else { overlap_ahead(tz, after_s) };
    let mut cursor = local_after + Duration::seconds(1 - lookback);
    let mut best: Option<i64> = None;
    for _ in 0..MAX_CANDIDATES {
        let Some(local) = spec.next_local(cursor) else { break };
        let fire = fire_times(tz, local, spec.fixed_time);
        if best.is_some_and(|b| fire.lowest >= b) {
            break;
        }
        for t in fire.instants.into_iter().flatten().filter(|t| *t > after_s) {
            best = Some(best.map_or(t, |b| b.min(t)));
        }
        if fire.instants[1].is_none() && best.is_some_and(|b| fire.lowest >= b) {
            // Later local times fire no earlier than this one.
            break;
        }
        cursor = fire.resume.unwrap_or(local + Duration::seconds(1));
    }
    best
}

/// What one matching local time means in instants.
struct Fire {
    /// Up to two instants (both occurrences in an overlap, for a wildcard job).
    instants: [Option<i64>; 2],
    /// No later local time fires before this instant.
    lowest: i64,
    /// Where to look next when it is not the next second (the end of a gap).
    resume: Option<NaiveDateTime>,
}

fn fire_times(tz: Tz, local: NaiveDateTime, fixed_time: bool) -> Fire {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => Fire { instants: [Some(t.timestamp()), None], lowest: t.timestamp(), resume: None },
        LocalResult::Ambiguous(a, b) => {
            let (first, second) = (a.timestamp().min(b.timestamp()), a.timestamp().max(b.timestamp()));
            let instants = if fixed_time { [Some(first), None] } else { [Some(first), Some(second)] };
            Fire { instants, lowest: first, resume: None }
        }
        LocalResult::None => {
            let end = gap_end(tz, local);
            let resume = tz.timestamp_opt(end, 0).single().map(|t| t.naive_local());
            Fire { instants: [fixed_time.then_some(end), None], lowest: end, resume }
        }
    }
}

fn offset_s(tz: Tz, t: i64) -> i64 {
    tz.timestamp_opt(t, 0).single().map_or(0, |d| i64::from(d.offset().fix().local_minus_utc()))
}

fn local_s(tz: Tz, t: i64) -> i64 {
    t + offset_s(tz, t)
}

/// The first instant after the gap that local time `local` falls into.
fn gap_end(tz: Tz, local: NaiveDateTime) -> i64 {
    let wall = local.and_utc().timestamp();
    // Offsets lie within ±15 h, so the answer lies within this window.
    let (mut lo, mut hi) = (wall - 15 * 3600, wall + 15 * 3600);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if local_s(tz, mid) > wall {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// How far the local clock will fall back past `after_s`'s local time, when `after_s` lies in
/// the last stretch before a fall-back change: local times that far behind still have a second
/// occurrence ahead.
fn overlap_ahead(tz: Tz, after_s: i64) -> i64 {
    let now = offset_s(tz, after_s);
    let shift = now - offset_s(tz, after_s + OVERLAP_WINDOW_S);
    if shift <= 0 {
        return 0;
    }
    // The change: the first instant with the later offset.
    let (mut lo, mut hi) = (after_s, after_s + OVERLAP_WINDOW_S);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if offset_s(tz, mid) == now {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // Local times from the change's new local time on come again; `+ 1` because the search
    // starts one second after `after_s`'s local time.
    let behind = shift - (hi - after_s);
    if behind >= 0 {
        behind + 1
    } else {
        0
    }
}
