//! Human-readable durations (`"10s"`, `"5m"`, `"1h 30m"`) as they appear in job specs and configs.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as a human-readable string in JSON/TOML, e.g. `"10s"` or `"5m"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    #[must_use]
    pub const fn from_secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }

    #[must_use]
    pub fn as_millis_u64(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Parses `"10s"`, `"250ms"`, `"1h 30m"`; the error says what was expected.
pub fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty duration; expected e.g. \"30s\", \"5m\" or \"1h\"".to_owned());
    }
    humantime::parse_duration(trimmed)
        .map_err(|e| format!("invalid duration {trimmed:?} ({e}); expected e.g. \"30s\", \"5m\" or \"1h\""))
}

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map(Self)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse(&text).map(Self).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        let d: HumanDuration = "1h 30m".parse().unwrap();
        assert_eq!(d.0, Duration::from_secs(5400));
        assert_eq!(d.to_string(), "1h 30m");
        let json = serde_json::to_string(&HumanDuration::from_millis(250)).unwrap();
        assert_eq!(json, "\"250ms\"");
        let back: HumanDuration = serde_json::from_str(&json).unwrap();
        assert_eq!(back, HumanDuration::from_millis(250));
    }

    #[test]
    fn rejects_garbage_with_a_hint() {
        let err = parse("ten seconds").unwrap_err();
        assert!(err.contains("expected e.g."), "{err}");
        assert!(parse("").is_err());
        assert!(serde_json::from_str::<HumanDuration>("5").is_err());
    }
}
