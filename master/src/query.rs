//! The one reader of query strings: the parameters a route knows (400 naming any other), and
//! typed values, each error naming its parameter. The search routes (`executions`, `audit`,
//! `notifications`) read their queries through it.

use etcron_common::store::Cursor;
use etcron_model::spec::validate_name;

use crate::error::{store_error, ApiError, ApiResult};

/// A query string's pairs, in order, every name one the route knows.
#[derive(Debug)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Reads `query` (absent: no parameters); a malformed string, or a parameter not in
    /// `known`, is a 400 naming it.
    pub fn parse(query: Option<&str>, known: &[&str]) -> ApiResult<Self> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(None, format!("malformed query string: {e}")))?;
        if let Some((other, _)) = pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            return Err(ApiError::bad_request(
                Some(other.clone()),
                format!("unknown parameter {other:?}; known: {}", known.join(", ")),
            ));
        }
        Ok(Self(pairs))
    }

    /// The pairs, in the order given (a repeated parameter: the last one counts, except where
    /// a route collects them).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// A 400 naming `param`.
pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(Some(param.to_owned()), message)
}

/// A job name.
pub fn job(param: &str, value: &str) -> ApiResult<String> {
    validate_name(value).map_err(|e| invalid(param, e.message))?;
    Ok(value.to_owned())
}

/// A team name.
pub fn team(param: &str, value: &str) -> ApiResult<String> {
    etcron_model::spec::validate_team(value).map_err(|e| invalid(param, e))?;
    Ok(value.to_owned())
}

/// An RFC 3339 instant, as Unix milliseconds.
pub fn time(param: &str, value: &str) -> ApiResult<i64> {
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|t| t.timestamp_millis())
        .map_err(|e| invalid(param, format!("{param} must be an RFC 3339 time such as 2026-11-22T03:00:00Z ({e})")))
}

/// A page size between 1 and `max`.
pub fn limit(param: &str, value: &str, max: i64) -> ApiResult<i64> {
    value
        .parse::<i64>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| invalid(param, format!("{param} must be an integer between 1 and {max}")))
}

/// A page cursor this API returned.
pub fn cursor(value: &str) -> ApiResult<Cursor> {
    Cursor::decode(value).map_err(store_error)
}

/// Free text of 1 to `max` bytes.
pub fn text(param: &str, value: &str, max: usize) -> ApiResult<String> {
    if value.is_empty() || value.len() > max {
        return Err(invalid(param, format!("{param} must be 1 to {max} characters")));
    }
    Ok(value.to_owned())
}

/// `since` not after `until`.
pub fn ordered(since: Option<i64>, until: Option<i64>) -> ApiResult<()> {
    match (since, until) {
        (Some(a), Some(b)) if a > b => Err(invalid("since", "since is after until")),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_malformed_parameters_are_named() {
        let p = Params::parse(Some("job=a&limit=5"), &["job", "limit"]).unwrap();
        assert_eq!(p.iter().collect::<Vec<_>>(), [("job", "a"), ("limit", "5")]);
        assert!(Params::parse(None, &["job"]).unwrap().iter().next().is_none());
        let e = Params::parse(Some("job=a&color=red"), &["job"]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("color"));
        assert!(e.message.contains("known: job"), "{}", e.message);
        assert_eq!(limit("limit", "0", 500).unwrap_err().field.as_deref(), Some("limit"));
        assert_eq!(limit("limit", "500", 500).unwrap(), 500);
        assert_eq!(time("since", "2026-11-22T03:00:00Z").unwrap(), 1_795_316_400_000);
        assert_eq!(time("until", "yesterday").unwrap_err().field.as_deref(), Some("until"));
        assert_eq!(job("job", "Bad Name").unwrap_err().field.as_deref(), Some("job"));
        assert_eq!(text("actor", "", 128).unwrap_err().field.as_deref(), Some("actor"));
        assert_eq!(ordered(Some(2), Some(1)).unwrap_err().field.as_deref(), Some("since"));
        assert_eq!(cursor("nope").unwrap_err().field.as_deref(), Some("cursor"));
    }
}
