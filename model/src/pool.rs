//! Resource pools: a named number of slots shared by every job that names the pool
//! (`{ns}/pools/{name}`, `PUT /api/pools/{name}`). A run of such a job holds `pool_slots` of
//! them from its claim to its close: one key per held slot (`{ns}/poolslots/{name}/{i}`, on the
//! winner's session lease), created in the claim transaction only while absent, so across every
//! worker the pool is never over its slots. A tick that finds the pool full waits in the pool's
//! queue (`{ns}/poolwait/{name}/{order}`, ordered by priority, then scheduled time:
//! `Keys::pool_wait`) until its
//! start deadline.

use serde::{Deserialize, Serialize};

use crate::keys::ExecutionId;
use crate::spec::{json_value, serde_error};
use crate::spec::{SpecError, DEFAULT_PRIORITY, MAX_PRIORITY};
use crate::UnixMs;

/// Most slots a pool has.
pub const MAX_POOL_SLOTS: u32 = 10_000;
/// Longest pool description.
pub const MAX_POOL_DESCRIPTION: usize = 1024;

/// A pool as stored and as `PUT /api/pools/{name}` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// How many slots the pool's runs hold at most, together.
    pub slots: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

impl Pool {
    /// Parses and checks a pool; errors name the field.
    pub fn from_json(bytes: &[u8]) -> Result<Self, SpecError> {
        if bytes.len() > crate::spec::MAX_SPEC_BYTES {
            let message =
                format!("a pool is at most {} bytes; this one is {}", crate::spec::MAX_SPEC_BYTES, bytes.len());
            return Err(SpecError { field: None, message, too_large: true });
        }
        let value = json_value(bytes)?;
        if !value.is_object() {
            return Err(SpecError {
                field: None,
                message: "a pool must be a JSON object".to_owned(),
                too_large: false,
            });
        }
        let pool: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            serde_error(&path, &e.into_inner().to_string(), false)
        })?;
        if pool.slots == 0 || pool.slots > MAX_POOL_SLOTS {
            return Err(SpecError::at("slots", format!("must be 1 to {MAX_POOL_SLOTS}")));
        }
        if pool.description.len() > MAX_POOL_DESCRIPTION {
            return Err(SpecError::at("description", format!("at most {MAX_POOL_DESCRIPTION} bytes")));
        }
        Ok(pool)
    }
}

/// `{ns}/poolslots/{pool}/{i}`: one slot held, by this execution (on its worker's session
/// lease, so a dead worker's slots go with the session that kept its task alive).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldSlot {
    pub execution_id: ExecutionId,
    pub worker_id: String,
    pub since_ms: UnixMs,
    #[serde(default = "default_priority")]
    pub priority: u8,
}

/// `{ns}/poolwait/{pool}/{order}`: a tick waiting for the pool's slots (on the session lease of
/// a worker waiting with it). The key sorts by priority, then scheduled time (`Keys::pool_wait`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    pub execution_id: ExecutionId,
    pub scheduled_ms: UnixMs,
    pub priority: u8,
    pub since_ms: UnixMs,
}

/// A priority's place in a pool's queue (`Keys::pool_wait`): the highest priority first.
#[must_use]
pub fn place(priority: u8) -> u8 {
    MAX_PRIORITY.saturating_sub(priority.min(MAX_PRIORITY))
}

fn default_priority() -> u8 {
    DEFAULT_PRIORITY
}

/// Why a tick that waited for `pool` until its start deadline did not run: the record's reason.
#[must_use]
pub fn full_reason(pool: &str, slots: u32, waited_ms: i64, holders: &[String]) -> String {
    let seconds = waited_ms as f64 / 1000.0;
    let by = if holders.is_empty() { String::new() } else { format!(", held by {}", holders.join(", ")) };
    format!("pool {pool:?} stayed full ({slots} slots{by}) for {seconds:.1}s, past the start deadline")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn higher_priorities_take_earlier_places() {
        assert_eq!([place(100), place(90), place(50), place(0), place(255)], [0, 10, 50, 100, 0]);
    }

    #[test]
    fn pools_are_checked_naming_the_field() {
        assert_eq!(Pool::from_json(br#"{"slots":5,"description":"reporting db"}"#).unwrap().slots, 5);
        for (body, field) in [
            (r#"{"slots":0}"#, Some("slots")),
            (r#"{"slots":10001}"#, Some("slots")),
            (r#"{"slots":"5"}"#, Some("slots")),
            (r#"{"slots":5,"max":3}"#, None),
            (r#"[]"#, None),
        ] {
            let e = Pool::from_json(body.as_bytes()).unwrap_err();
            if let Some(field) = field {
                assert_eq!(e.field.as_deref(), Some(field), "{body}: {e:?}");
            }
        }
        let long = format!(r#"{{"slots":1,"description":"{}"}}"#, "x".repeat(MAX_POOL_DESCRIPTION + 1));
        assert_eq!(Pool::from_json(long.as_bytes()).unwrap_err().field.as_deref(), Some("description"));
    }
}
