//! The limits on a spec's maps (environment variables, headers, labels, selectors) and the rule
//! for an environment variable's name: one place for `job` (env, secret_env) and `params` (run
//! parameters), which must agree.

/// Most environment variables, headers, labels or selector entries.
pub const MAX_MAP_ENTRIES: usize = 64;
/// Longest label/selector/env key.
pub const MAX_MAP_KEY_LEN: usize = 128;
/// Longest label/selector/env/header value.
pub const MAX_MAP_VALUE_LEN: usize = 4096;

/// An environment variable's name: letters, digits and `_`, not starting with a digit.
pub(crate) fn env_key_ok(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
