//! Limits shared by the API's layers.

/// Largest request body the API reads (a job spec is further limited by the spec's own size).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
