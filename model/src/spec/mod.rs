//! The job spec: what `PUT /api/jobs/{job}` accepts and `{ns}/jobs/{job}` stores, and the one
//! place that says whether a spec is valid.
//!
//! A spec is valid when it parses (unknown fields and duplicate keys are refused), its schedule
//! parses in its timezone, and every field is within [`limits`]. Errors name the field (dotted
//! path, e.g. `task.command`) and say what is wrong.
//!
//! | file | concern |
//! |---|---|
//! | `job` | the types and their accessors |
//! | `limits` | every limit on a spec |
//! | `parse` | bytes to `JobSpec`, the schedule in its timezone and window |
//! | `validate` | field checks |
//! | `redact` | withheld secrets and keeping stored ones |
//! | `error` | `SpecError` |
//! | `grpc`, `http_async`, `headers`, `alerts` | the parts of a spec with rules of their own |
//!
//! Callers import the flat surface (`etcron_model::spec::JobSpec`); the sub-modules are the
//! spec's own organisation.

pub mod alerts;
mod error;
pub mod grpc;
pub mod headers;
pub mod http_async;
mod job;
mod limits;
pub mod notify;
pub mod params;
mod parse;
mod redact;
#[cfg(test)]
mod tests;
mod validate;

pub use error::SpecError;
pub use job::*;
pub use limits::*;
pub use parse::{check_jitter, schedule_of, Window};
pub(crate) use parse::{json_value, serde_error};
pub use redact::{redacted_json, MissingSecret, TASK_SECRET_FIELDS};
pub use validate::{check_account_name, validate_env_overrides, validate_name, validate_team};
