//! Skip calendars: named lists of dates and date ranges in a timezone (`{ns}/calendars/{name}`,
//! `PUT /api/calendars/{name}`). A job's `skip_calendars` names them; a tick whose date, in the
//! calendar's timezone, one of them lists is recorded `skipped` instead of run.

use chrono::{NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::schedule::parse_timezone;
use crate::spec::SpecError;
use crate::spec::{json_value, serde_error};
use crate::UnixMs;

/// Most dates plus ranges in one calendar.
pub const MAX_CALENDAR_ENTRIES: usize = 1000;
/// Longest calendar description.
pub const MAX_CALENDAR_DESCRIPTION: usize = 1024;

/// A calendar as stored and as `PUT /api/calendars/{name}` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calendar {
    /// The IANA timezone its dates are days in.
    #[serde(default = "utc")]
    pub timezone: String,
    /// Single days, `YYYY-MM-DD`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dates: Vec<NaiveDate>,
    /// Runs of days, both ends included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<DateRange>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// `{"from": "2026-12-24", "to": "2026-12-26"}`: both days included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DateRange {
    pub from: NaiveDate,
    pub to: NaiveDate,
}

fn utc() -> String {
    "UTC".to_owned()
}

impl Calendar {
    /// Parses and checks a calendar; errors name the field (`dates[3]`, `ranges[0].to`).
    pub fn from_json(bytes: &[u8]) -> Result<Self, SpecError> {
        if bytes.len() > crate::spec::MAX_SPEC_BYTES {
            let message =
                format!("a calendar is at most {} bytes; this one is {}", crate::spec::MAX_SPEC_BYTES, bytes.len());
            return Err(SpecError { field: None, message, too_large: true });
        }
        let value = json_value(bytes)?;
        if !value.is_object() {
            return Err(SpecError {
                field: None,
                message: "a calendar must be a JSON object".to_owned(),
                too_large: false,
            });
        }
        let calendar: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            let inner =
                if inner.contains("input") { format!("{inner}; dates are YYYY-MM-DD, e.g. 2026-12-25") } else { inner };
            serde_error(&path, &inner, false)
        })?;
        calendar.validate()?;
        Ok(calendar)
    }

    fn validate(&self) -> Result<(), SpecError> {
        parse_timezone(&self.timezone).map_err(|e| SpecError::at("timezone", e.to_string()))?;
        if self.dates.len() + self.ranges.len() > MAX_CALENDAR_ENTRIES {
            return Err(SpecError::at("dates", format!("at most {MAX_CALENDAR_ENTRIES} dates and ranges together")));
        }
        if self.dates.is_empty() && self.ranges.is_empty() {
            return Err(SpecError::at("dates", "a calendar lists at least one date or range"));
        }
        if let Some(i) = self.ranges.iter().position(|r| r.to < r.from) {
            return Err(SpecError::at(&format!("ranges[{i}].to"), "must not be before from"));
        }
        if self.description.len() > MAX_CALENDAR_DESCRIPTION {
            return Err(SpecError::at("description", format!("at most {MAX_CALENDAR_DESCRIPTION} bytes")));
        }
        Ok(())
    }

    /// The date of `ms` in the calendar's timezone when the calendar lists it.
    #[must_use]
    pub fn covers(&self, ms: UnixMs) -> Option<NaiveDate> {
        let tz = parse_timezone(&self.timezone).ok()?;
        let day = Utc.timestamp_millis_opt(ms).single()?.with_timezone(&tz).date_naive();
        (self.dates.contains(&day) || self.ranges.iter().any(|r| (r.from..=r.to).contains(&day))).then_some(day)
    }
}

/// Why a tick on a date of calendar `name` is skipped: the record's reason.
#[must_use]
pub fn skip_reason(name: &str, day: NaiveDate) -> String {
    format!("skipped: {day} is listed in skip calendar {name:?}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ms(rfc: &str) -> UnixMs {
        chrono::DateTime::parse_from_rfc3339(rfc).unwrap().timestamp_millis()
    }

    #[test]
    fn dates_and_ranges_are_days_in_the_calendars_timezone() {
        let c = Calendar::from_json(
            br#"{"timezone":"Europe/Berlin","dates":["2026-12-25"],"ranges":[{"from":"2026-12-31","to":"2027-01-01"}]}"#,
        )
        .unwrap();
        let day = |d: &str| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok();
        assert_eq!(c.covers(ms("2026-12-25T09:00:00+01:00")), day("2026-12-25"));
        // 23:30 UTC on the 24th is already the 25th in Berlin; 23:30 UTC on the 25th is not.
        assert_eq!(c.covers(ms("2026-12-24T23:30:00Z")), day("2026-12-25"));
        assert_eq!(c.covers(ms("2026-12-25T23:30:00Z")), None);
        assert_eq!(c.covers(ms("2027-01-01T12:00:00+01:00")), day("2027-01-01"), "a range includes its end");
        assert_eq!(c.covers(ms("2027-01-02T00:00:00+01:00")), None);
        assert_eq!(
            skip_reason("holidays-de", day("2026-12-25").unwrap()),
            "skipped: 2026-12-25 is listed in skip calendar \"holidays-de\""
        );
        let back: Calendar = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn errors_name_the_field() {
        for (body, field) in [
            (r#"{"dates":["2026-13-01"]}"#, Some("dates[0]")),
            (r#"{"dates":["2026-12-01","25.12.2026"]}"#, Some("dates[1]")),
            (r#"{"ranges":[{"from":"2026-12-02","to":"2026-12-01"}]}"#, Some("ranges[0].to")),
            (r#"{"ranges":[{"from":"2026-12-02"}]}"#, Some("ranges[0].to")),
            (r#"{"dates":["2026-12-01"],"timezone":"Mars/Base"}"#, Some("timezone")),
            (r#"{"dates":[]}"#, Some("dates")),
            (r#"{"dates":["2026-12-01"],"weekends":true}"#, Some("weekends")),
            (r#"["2026-12-01"]"#, None),
        ] {
            assert_eq!(Calendar::from_json(body.as_bytes()).unwrap_err().field.as_deref(), field, "{body}");
        }
        let many: Vec<String> =
            (0..1001).map(|i| format!("\"{}\"", NaiveDate::from_num_days_from_ce_opt(738_000 + i).unwrap())).collect();
        let err = Calendar::from_json(format!(r#"{{"dates":[{}]}}"#, many.join(",")).as_bytes()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("dates"));
    }
}
