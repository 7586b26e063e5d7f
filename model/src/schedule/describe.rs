//! Plain-language readings of schedules, built from the values a cron expression selects (not
//! its text), so `*/90 * * * *` reads "every hour at :00" and `2-12/3` keeps its offset.

use std::time::Duration;

use super::cron::CronSpec;
use super::field::{self, Span};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const ORDINALS: [&str; 6] = ["", "first", "second", "third", "fourth", "fifth"];

/// A reading of a cron expression.
pub(super) fn cron(spec: &CronSpec) -> String {
    let (time, at_clock) = time(spec);
    let mut parts = vec![time];
    match days(spec) {
        Some(days) => parts.push(days),
        None if at_clock => parts.push("every day".to_owned()),
        None => {}
    }
    parts.extend(months(spec));
    parts.extend(years(spec));
    capitalize(&parts.join(" "))
}

/// A reading of `@every`: in the largest unit that divides the interval.
pub(super) fn every(interval: Duration) -> String {
    let ms = interval.as_millis();
    let units = [(86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"), (1, "millisecond")];
    let (size, unit) = units.into_iter().find(|(size, _)| ms.is_multiple_of(*size)).unwrap_or((1, "millisecond"));
    match ms / size {
        1 => format!("Every {unit}"),
        n => format!("Every {n} {unit}s"),
    }
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// The time-of-day part, and whether it names clock times (which then need "every day").
fn time(spec: &CronSpec) -> (String, bool) {
    let secs = field::values(spec.seconds);
    let mins = field::values(spec.minutes);
    let hours = field::values(spec.hours);
    if let ([s], [m]) = (secs.as_slice(), mins.as_slice()) {
        let past = if *s == 0 { format!(":{m:02}") } else { format!(":{m:02}:{s:02}") };
        let clock = |h: &u32| format!("{h:02}{past}");
        return match hours.len() {
            24 => (format!("every hour at {past}"), false),
            n if n <= 6 => (format!("at {}", join(&hours.iter().map(clock).collect::<Vec<_>>())), true),
            _ => match covering_step(&hours, 24) {
                Some(step) => (format!("every {step} hours at {past}"), false),
                None => (format!("at {past} past hours {}", list(&hours, |h| h.to_string())), false),
            },
        };
    }
    let mut parts = Vec::new();
    let seconds_inner = spec.with_seconds && secs != [0];
    if seconds_inner {
        parts.push(innermost(&secs, 60, "second"));
        if mins.len() < 60 {
            parts.push(format!("during {}", restriction(&mins, "minute", |m| format!(":{m:02}"))));
        }
    } else {
        parts.push(innermost(&mins, 60, "minute"));
    }
    if hours.len() < 24 {
        parts.push(format!("during {}", restriction(&hours, "hour", |h| h.to_string())));
    }
    (parts.join(" "), false)
}

/// The innermost varying unit: "every 15 minutes", "every 7 minutes from :00 through :28",
/// "at minutes :15 and :45".
fn innermost(values: &[u32], range: u32, unit: &str) -> String {
    let fmt = |v: &u32| format!(":{v:02}");
    if values.len() == usize::try_from(range).unwrap_or(0) {
        return format!("every {unit}");
    }
    if let Some(step) = covering_step(values, range) {
        return format!("every {step} {unit}s");
    }
    if let Some(step) = progression(values) {
        let (first, last) = (values[0], values[values.len() - 1]);
        return format!("every {step} {unit}s from {} through {}", fmt(&first), fmt(&last));
    }
    let plural = if values.len() == 1 { "" } else { "s" };
    format!("at {unit}{plural} {}", list(values, fmt))
}

/// "hours 9 through 17", "minute :05".
fn restriction(values: &[u32], unit: &str, fmt: impl Fn(&u32) -> String) -> String {
    let plural = if values.len() == 1 { "" } else { "s" };
    format!("{unit}{plural} {}", list(values, fmt))
}

/// The step of values `0, s, 2s, …` that cover `0..range` (`s` dividing `range`).
fn covering_step(values: &[u32], range: u32) -> Option<u32> {
    let step = progression(values)?;
    (values[0] == 0 && range.is_multiple_of(step) && values[values.len() - 1] + step == range).then_some(step)
}

/// The common difference (> 1) of three or more evenly spaced values.
fn progression(values: &[u32]) -> Option<u32> {
    if values.len() < 3 {
        return None;
    }
    let step = values[1] - values[0];
    (step > 1 && values.windows(2).all(|w| w[1] - w[0] == step)).then_some(step)
}

/// Values as a list: evenly spaced ones as "a through b in steps of s", runs of three or more
/// as "a through b", the rest one by one.
fn list(values: &[u32], fmt: impl Fn(&u32) -> String) -> String {
    if let Some(step) = progression(values) {
        let (first, last) = (values[0], values[values.len() - 1]);
        return format!("{} through {} in steps of {step}", fmt(&first), fmt(&last));
    }
    let mut items = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            items.push(format!("{} through {}", fmt(&values[i]), fmt(&values[j])));
        } else {
            items.extend(values[i..=j].iter().map(&fmt));
        }
        i = j + 1;
    }
    join(&items)
}

/// "a", "a and b", "a, b and c".
fn join(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The day part: `None` for every day.
fn days(spec: &CronSpec) -> Option<String> {
    let (dom, dow) = (&spec.month_days, &spec.week_days);
    match (dom.any, dow.any) {
        (true, true) => None,
        (false, true) => Some(format!("on {}", month_days(spec))),
        (true, false) => Some(format!("on {}", week_days(spec))),
        // Cron's rule: either day field may match.
        (false, false) => Some(format!("on {} or on {}", month_days(spec), week_days(spec))),
    }
}

fn month_days(spec: &CronSpec) -> String {
    let dom = &spec.month_days;
    let mut items = Vec::new();
    let days = field::values(dom.days);
    if !days.is_empty() {
        let plural = if days.len() == 1 { "" } else { "s" };
        items.push(format!("day{plural} {}", list(&days, u32::to_string)));
    }
    if dom.last {
        items.push("the last day".to_owned());
    }
    if dom.last_weekday {
        items.push("the last weekday".to_owned());
    }
    for day in field::values(dom.nearest_weekday) {
        items.push(format!("the weekday nearest day {day}"));
    }
    format!("{} of the month", join(&items))
}

fn week_days(spec: &CronSpec) -> String {
    let dow = &spec.week_days;
    let mut items = Vec::new();
    let days = field::values(dow.days);
    if !days.is_empty() {
        items.push(list(&days, |d| WEEKDAYS[*d as usize % 7].to_owned()));
    }
    let mut of_month = Vec::new();
    for (d, nth) in dow.nth.iter().enumerate() {
        for k in field::values(u64::from(*nth)) {
            of_month.push(format!("the {} {}", ORDINALS[k as usize % 6], WEEKDAYS[d]));
        }
    }
    for d in field::values(dow.last) {
        of_month.push(format!("the last {}", WEEKDAYS[d as usize % 7]));
    }
    if !of_month.is_empty() {
        items.push(format!("{} of the month", join(&of_month)));
    }
    join(&items)
}

fn months(spec: &CronSpec) -> Option<String> {
    let months = field::values(spec.months);
    (months.len() < 12).then(|| format!("in {}", list(&months, |m| MONTHS[(*m as usize + 11) % 12].to_owned())))
}

fn years(spec: &CronSpec) -> Option<String> {
    let spans = spec.years.as_ref()?;
    let items: Vec<String> = spans.iter().map(|s| year_span(*s)).collect();
    Some(format!("in {}", join(&items)))
}

fn year_span(s: Span) -> String {
    let last = s.values().last().unwrap_or(s.lo);
    match (s.lo == last, s.step) {
        (true, _) => s.lo.to_string(),
        (false, 1) => format!("{} through {last}", s.lo),
        (false, step) => format!("{} through {last} every {step} years", s.lo),
    }
}
