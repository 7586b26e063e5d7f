//! One cron field: its name and range, and the parsing of its list items (`*`, `?`, `a`,
//! `a-b`, each with an optional `/step`) into spans. Errors name the field.

/// Names a field may use for its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Names {
    None,
    Months,
    Days,
}

/// A cron field: how errors name it, its range, and which names it reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unit {
    pub name: &'static str,
    pub min: u32,
    pub max: u32,
    /// Highest value `*` stands for (day-of-week: 6, although 7 is also Sunday).
    pub star_max: u32,
    pub names: Names,
}

pub(super) const SECOND: Unit = Unit { name: "second", min: 0, max: 59, star_max: 59, names: Names::None };
pub(super) const MINUTE: Unit = Unit { name: "minute", min: 0, max: 59, star_max: 59, names: Names::None };
pub(super) const HOUR: Unit = Unit { name: "hour", min: 0, max: 23, star_max: 23, names: Names::None };
pub(super) const DAY_OF_MONTH: Unit = Unit { name: "day-of-month", min: 1, max: 31, star_max: 31, names: Names::None };
pub(super) const MONTH: Unit = Unit { name: "month", min: 1, max: 12, star_max: 12, names: Names::Months };
pub(super) const DAY_OF_WEEK: Unit = Unit { name: "day-of-week", min: 0, max: 7, star_max: 6, names: Names::Days };
pub(super) const YEAR: Unit = Unit { name: "year", min: 1970, max: 9999, star_max: 9999, names: Names::None };

pub(super) const MONTH_NAMES: [&str; 12] =
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
pub(super) const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The values `lo, lo+step, … ≤ hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub lo: u32,
    pub hi: u32,
    pub step: u32,
}

impl Span {
    /// The first value of the span at or after `v`.
    pub fn next_from(self, v: u32) -> Option<u32> {
        if v <= self.lo {
            return Some(self.lo);
        }
        let k = (v - self.lo).div_ceil(self.step);
        let n = self.lo.checked_add(k.checked_mul(self.step)?)?;
        (n <= self.hi).then_some(n)
    }

    pub fn values(self) -> impl Iterator<Item = u32> {
        (self.lo..=self.hi).step_by(self.step as usize)
    }
}

impl Unit {
    pub fn err(&self, msg: impl std::fmt::Display) -> String {
        format!("{}: {msg}", self.name)
    }

    /// The items of a comma-separated list; an empty item is refused.
    pub fn items<'a>(&self, field: &'a str) -> Result<Vec<&'a str>, String> {
        let items: Vec<&str> = field.split(',').collect();
        if items.iter().any(|i| i.is_empty()) {
            return Err(self.err(format!("empty item in the list {field:?}")));
        }
        if items.len() > 1 && items.iter().any(|i| i.starts_with('?')) {
            return Err(self.err(format!(
                "? (any day) stands alone and cannot be part of the list {field:?}; write the days without it"
            )));
        }
        Ok(items)
    }

    /// A plain item: `*`, `?`, `a`, `a-b`, optionally followed by `/step`.
    pub fn span(&self, item: &str) -> Result<Span, String> {
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(self.step(step)?)),
            None => (item, None),
        };
        let (lo, hi) = match base {
            "*" => (self.min, self.star_max),
            "?" => return self.question(step),
            _ => match base.split_once('-') {
                Some((a, b)) => {
                    let (lo, hi) = (self.value(a)?, self.value(b)?);
                    match (lo > hi, self.names) {
                        // Sunday is 7 too: `sat-sun` is 6-7, `mon-sun` 1-7 (as Vixie cron reads them).
                        (true, Names::Days) if hi == 0 => (lo, 7),
                        (true, _) => return Err(self.err(self.backwards(base, (a, b), step.is_some()))),
                        (false, _) => (lo, hi),
                    }
                }
                None => {
                    let v = self.value(base)?;
                    (v, if step.is_some() { self.max } else { v })
                }
            },
        };
        Ok(Span { lo, hi, step: step.unwrap_or(1) })
    }

    /// Why the range `base` (`a-b`, running backwards) is refused, with the list that means what
    /// it may have meant: ranges do not wrap around.
    fn backwards(&self, base: &str, (a, b): (&str, &str), stepped: bool) -> String {
        let named = |v: u32, text: &str| {
            let list: &[&str] = match self.names {
                Names::Months => &MONTH_NAMES,
                Names::Days => &DAY_NAMES,
                Names::None => &[],
            };
            let index = if self.names == Names::Months { v.wrapping_sub(1) } else { v };
            match list.get(index as usize) {
                Some(name) if !text.bytes().all(|c| c.is_ascii_digit()) => name.to_ascii_lowercase(),
                _ => v.to_string(),
            }
        };
        let (end, start) = (named(self.star_max, a), named(self.min, b));
        let rewrite = format!("{a}-{end},{start}-{b}");
        if stepped {
            format!(
                "the range {base} runs backwards: ranges do not wrap around; split it in two ({rewrite}) and step each"
            )
        } else {
            format!("the range {base} runs backwards: ranges do not wrap around; for the values from {a} round to {b} write {rewrite}")
        }
    }

    /// `?` (any day) belongs to the day fields and takes no step.
    fn question(&self, step: Option<u32>) -> Result<Span, String> {
        if self.name != DAY_OF_MONTH.name && self.name != DAY_OF_WEEK.name {
            return Err(self.err("? is only allowed in day-of-month and day-of-week"));
        }
        if step.is_some() {
            return Err(self.err("? cannot take a step; use * with a step"));
        }
        Ok(Span { lo: self.min, hi: self.star_max, step: 1 })
    }

    fn step(&self, text: &str) -> Result<u32, String> {
        match text.parse::<u32>() {
            Ok(n) if n >= 1 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(self.err(format!("step {text:?} must be a whole number of at least 1"))),
        }
    }

    /// A number or, in the month and day-of-week fields, a three-letter name.
    pub fn value(&self, text: &str) -> Result<u32, String> {
        if text.is_empty() {
            return Err(self.err("a value is missing"));
        }
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return match text.parse::<u32>() {
                Ok(v) if (self.min..=self.max).contains(&v) => Ok(v),
                _ => Err(self.err(format!("{text} is out of range {}-{}", self.min, self.max))),
            };
        }
        let upper = text.to_ascii_uppercase();
        let month = MONTH_NAMES.iter().position(|n| *n == upper);
        let day = DAY_NAMES.iter().position(|n| *n == upper);
        match (self.names, month, day) {
            (Names::Months, Some(i), _) => Ok(u32::try_from(i).unwrap_or(0) + 1),
            (Names::Days, _, Some(i)) => Ok(u32::try_from(i).unwrap_or(0)),
            (_, Some(_), _) => Err(self.err(format!("{text} is a month name; month names belong in the month field"))),
            (_, _, Some(_)) => {
                Err(self.err(format!("{text} is a day name; day names belong in the day-of-week field")))
            }
            (Names::Months, None, None) => {
                Err(self.err(format!("{text:?} is neither 1-12 nor a month name (JAN-DEC)")))
            }
            (Names::Days, None, None) => Err(self.err(format!("{text:?} is neither 0-7 nor a day name (SUN-SAT)"))),
            (Names::None, None, None) => Err(self.err(format!("{text:?} is not a number"))),
        }
    }
}

/// The set bits of `spans`, as one bit per value (day-of-week 7 is Sunday, bit 0).
pub(super) fn bits(spans: &[Span]) -> u64 {
    let mut out = 0u64;
    for span in spans {
        for v in span.values() {
            out |= 1 << (v % 64);
        }
    }
    out
}

/// The first set bit of `bits` at or after `from`.
pub(super) fn next_bit(bits: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let rest = bits & (!0u64 << from);
    (rest != 0).then(|| rest.trailing_zeros())
}

/// The set bits in ascending order.
pub(super) fn values(bits: u64) -> Vec<u32> {
    (0..64).filter(|b| bits & (1 << b) != 0).collect()
}
