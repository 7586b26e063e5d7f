//! A parsed cron expression and its calendar: which local (wall-clock) times match, and the
//! first matching local time at or after another. Timezones and DST are not this module's
//! business (see `zone`).

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};

use super::field::{self, next_bit, Span, Unit};

/// Latest year a schedule can fire in.
pub(super) const MAX_YEAR: i32 = 9999;
/// The Gregorian calendar repeats every 400 years.
const CYCLE_YEARS: i32 = 400;
/// Months one search may look at: a full calendar cycle. A schedule that matches at all
/// matches within it (see [`CronSpec::can_fire`]), so the search is bounded and never gives up
/// on a schedule that still fires.
const MAX_SEARCH_STEPS: usize = (CYCLE_YEARS as usize + 1) * 12 * 2 + 8;

/// Days of the month a day-of-month field selects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct MonthDays {
    /// Day numbers 1-31.
    pub days: u64,
    /// `L`: the last day of the month.
    pub last: bool,
    /// `LW`: the last weekday (Monday-Friday) of the month.
    pub last_weekday: bool,
    /// `nW`: the weekday nearest day n, within the month.
    pub nearest_weekday: u64,
    /// `*` or `?`.
    pub any: bool,
}

/// Days a day-of-week field selects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct WeekDays {
    /// Weekdays, 0 = Sunday.
    pub days: u64,
    /// `d#k`: bit k (1-5) of entry d, the k-th weekday d of the month.
    pub nth: [u8; 7],
    /// `dL`: the last weekday d of the month.
    pub last: u64,
    /// `*` or `?`.
    pub any: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CronSpec {
    pub seconds: u64,
    pub minutes: u64,
    pub hours: u64,
    pub month_days: MonthDays,
    pub months: u64,
    pub week_days: WeekDays,
    /// `None`: every year.
    pub years: Option<Vec<Span>>,
    /// Written with a seconds field.
    pub with_seconds: bool,
    /// Fixed-time job (DST rule): neither minute nor hour is a wildcard.
    pub fixed_time: bool,
}

impl CronSpec {
    /// Parses 5, 6 or 7 whitespace-separated fields.
    pub fn parse(fields: &[&str]) -> Result<Self, String> {
        let (sec, rest) = match fields.len() {
            5 => ("0", fields),
            6 | 7 => (fields[0], &fields[1..]),
            n => return Err(format!("cron expression has {n} fields; expected 5, 6 or 7")),
        };
        let (min, hour, dom, month, dow) = (rest[0], rest[1], rest[2], rest[3], rest[4]);
        let minutes = plain(&field::MINUTE, min)?;
        let hours = plain(&field::HOUR, hour)?;
        let spec = Self {
            seconds: plain(&field::SECOND, sec)?,
            minutes,
            hours,
            month_days: month_days(dom)?,
            months: plain(&field::MONTH, month)?,
            week_days: week_days(dow)?,
            years: rest.get(5).map(|y| spans(&field::YEAR, y)).transpose()?,
            with_seconds: fields.len() > 5,
            fixed_time: !(wildcard(min, minutes) || wildcard(hour, hours)),
        };
        Ok(spec)
    }

    /// Whether any date matches the day, month and year fields (times always exist). Decided
    /// over one 400-year calendar cycle of the allowed years.
    pub fn can_fire(&self) -> bool {
        let mut seen = [false; CYCLE_YEARS as usize];
        let mut year = self.next_year(1970);
        while let Some(y) = year {
            let slot = &mut seen[usize::try_from(y.rem_euclid(CYCLE_YEARS)).unwrap_or(0)];
            if !*slot {
                *slot = true;
                if field::values(self.months).into_iter().any(|m| self.day_mask(y, m) != 0) {
                    return true;
                }
            }
            if self.years.is_none() && y >= 1970 + CYCLE_YEARS {
                return false;
            }
            year = self.next_year(y + 1);
        }
        false
    }

    /// The first allowed year at or after `y`.
    pub fn next_year(&self, y: i32) -> Option<i32> {
        if y > MAX_YEAR {
            return None;
        }
        let Some(spans) = &self.years else { return Some(y) };
        let from = u32::try_from(y).unwrap_or(0);
        spans.iter().filter_map(|s| s.next_from(from)).min().and_then(|v| i32::try_from(v).ok())
    }

    /// The first matching local time at or after `start`; `None` past the last allowed year.
    pub fn next_local(&self, start: NaiveDateTime) -> Option<NaiveDateTime> {
        let (mut y, mut m, mut d) = (start.year(), start.month(), start.day());
        let mut time = (start.hour(), start.minute(), start.second());
        for _ in 0..MAX_SEARCH_STEPS {
            let ny = self.next_year(y)?;
            if ny != y {
                (y, m, d, time) = (ny, 1, 1, (0, 0, 0));
            }
            let Some(nm) = next_bit(self.months, m) else {
                (y, m, d, time) = (y + 1, 1, 1, (0, 0, 0));
                continue;
            };
            if nm != m {
                (m, d, time) = (nm, 1, (0, 0, 0));
            }
            let Some(nd) = next_bit(self.day_mask(y, m), d) else {
                (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                (d, time) = (1, (0, 0, 0));
                continue;
            };
            if nd != d {
                (d, time) = (nd, (0, 0, 0));
            }
            if let Some((h, mi, s)) = self.next_time(time) {
                return NaiveDate::from_ymd_opt(y, m, d)?.and_hms_opt(h, mi, s);
            }
            (d, time) = (d + 1, (0, 0, 0));
        }
        None
    }

    /// The first matching time of day at or after `(h, m, s)`.
    fn next_time(&self, (h, m, s): (u32, u32, u32)) -> Option<(u32, u32, u32)> {
        let mut hour = next_bit(self.hours, h);
        while let Some(hh) = hour {
            let mut minute = next_bit(self.minutes, if hh == h { m } else { 0 });
            while let Some(mm) = minute {
                let from = if hh == h && mm == m { s } else { 0 };
                if let Some(ss) = next_bit(self.seconds, from) {
                    return Some((hh, mm, ss));
                }
                minute = next_bit(self.minutes, mm + 1);
            }
            hour = next_bit(self.hours, hh + 1);
        }
        None
    }

    /// The days (bits 1-31) of month `m` of year `y` that match the day fields: either field
    /// when both are restricted (cron's rule), else the restricted one.
    pub fn day_mask(&self, y: i32, m: u32) -> u64 {
        let Some(first) = NaiveDate::from_ymd_opt(y, m, 1) else { return 0 };
        let len = days_in_month(y, m);
        let first_weekday = first.weekday().num_days_from_sunday();
        let (dom, dow) = (&self.month_days, &self.week_days);
        match (dom.any, dow.any) {
            (true, true) => month_mask(len),
            (true, false) => week_mask(dow, first_weekday, len),
            (false, true) => dom_mask(dom, first_weekday, len),
            (false, false) => dom_mask(dom, first_weekday, len) | week_mask(dow, first_weekday, len),
        }
    }
}

/// A field of plain items only, as bits.
fn plain(unit: &Unit, text: &str) -> Result<u64, String> {
    Ok(field::bits(&spans(unit, text)?))
}

fn spans(unit: &Unit, text: &str) -> Result<Vec<Span>, String> {
    unit.items(text)?.into_iter().map(|item| unit.span(item)).collect()
}

/// Cron's "wildcard" field for the DST rule: `*`, or `*/n` selecting more than one value.
/// (`*/24` in the hour field is hour 0, a fixed time like `0`.)
fn wildcard(text: &str, bits: u64) -> bool {
    (text == "*" || (text.starts_with("*/") && !text.contains(','))) && bits.count_ones() > 1
}

fn month_days(text: &str) -> Result<MonthDays, String> {
    let unit = field::DAY_OF_MONTH;
    let mut out = MonthDays { any: text == "*" || text == "?", ..MonthDays::default() };
    for item in unit.items(text)? {
        match item.to_ascii_uppercase().as_str() {
            "L" => out.last = true,
            "LW" => out.last_weekday = true,
            up if up.ends_with('W') => out.nearest_weekday |= 1 << unit.value(&item[..item.len() - 1])?,
            _ => out.days |= field::bits(&[unit.span(item)?]),
        }
    }
    Ok(out)
}

fn week_days(text: &str) -> Result<WeekDays, String> {
    let unit = field::DAY_OF_WEEK;
    let mut out = WeekDays { any: text == "*" || text == "?", ..WeekDays::default() };
    for item in unit.items(text)? {
        if let Some((day, nth)) = item.split_once('#') {
            let k = match nth.parse::<u32>() {
                Ok(k) if (1..=5).contains(&k) && nth.bytes().all(|b| b.is_ascii_digit()) => k,
                _ => return Err(unit.err(format!("in {item:?}, #{nth} must be #1 to #5"))),
            };
            out.nth[(unit.value(day)? % 7) as usize] |= 1 << k;
        } else if item.len() > 1 && item.to_ascii_uppercase().ends_with('L') {
            out.last |= 1 << (unit.value(&item[..item.len() - 1])? % 7);
        } else {
            let bits = field::bits(&[unit.span(item)?]);
            // 7 is Sunday too.
            out.days |= (bits & 0x7f) | ((bits >> 7) & 1);
        }
    }
    Ok(out)
}

pub(super) fn days_in_month(y: i32, m: u32) -> u32 {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    match (NaiveDate::from_ymd_opt(ny, nm, 1), NaiveDate::from_ymd_opt(y, m, 1)) {
        (Some(next), Some(this)) => u32::try_from((next - this).num_days()).unwrap_or(0),
        _ => 0,
    }
}

/// Bits 1..=len.
fn month_mask(len: u32) -> u64 {
    ((1u64 << (len + 1)) - 1) & !1
}

/// 0 = Sunday.
fn weekday_of(day: u32, first_weekday: u32) -> u32 {
    (first_weekday + day - 1) % 7
}

fn is_weekend(day: u32, first_weekday: u32) -> bool {
    matches!(weekday_of(day, first_weekday), 0 | 6)
}

/// The weekday nearest `day` without leaving the month (`W`).
fn nearest_weekday(day: u32, first_weekday: u32, len: u32) -> u32 {
    match weekday_of(day, first_weekday) {
        6 if day == 1 => 3,
        6 => day - 1,
        0 if day == len => day - 2,
        0 => day + 1,
        _ => day,
    }
}

fn dom_mask(dom: &MonthDays, first_weekday: u32, len: u32) -> u64 {
    let mut mask = dom.days & month_mask(len);
    if dom.last {
        mask |= 1 << len;
    }
    if dom.last_weekday {
        let mut d = len;
        while is_weekend(d, first_weekday) {
            d -= 1;
        }
        mask |= 1 << d;
    }
    for day in field::values(dom.nearest_weekday & month_mask(len)) {
        mask |= 1 << nearest_weekday(day, first_weekday, len);
    }
    mask
}

fn week_mask(dow: &WeekDays, first_weekday: u32, len: u32) -> u64 {
    let mut mask = 0;
    for day in 1..=len {
        let wd = weekday_of(day, first_weekday);
        let nth = (day - 1) / 7 + 1;
        if dow.days & (1 << wd) != 0
            || dow.nth[wd as usize] & (1 << nth) != 0
            || (dow.last & (1 << wd) != 0 && day + 7 > len)
        {
            mask |= 1 << day;
        }
    }
    mask
}
