//! Limits shared by the API's layers.

/// Largest request body the API reads (a job spec is further limited by the spec's own size).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Most bytes of a request body kept to say what a refusal attempted (a larger body is only
/// counted), and read by a role refusal for that: a spec's own limit.
pub const MAX_SENT_KEPT: usize = 64 * 1024;
