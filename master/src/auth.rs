//! Bearer-token authentication of `/api/` routes. With no token configured the API is open
//! (the master listens on loopback by default); with `ETCRON_API_TOKEN` set every `/api/`
//! request needs `Authorization: Bearer <token>`. The console and its assets, `/healthz` and
//! `/readyz` stay open, so a browser can load the page and then ask for the token.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The accepted tokens (today one, with every permission).
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("enabled", &self.token.is_some()).finish()
    }
}

/// Shortest token accepted: a guessable token is no protection.
pub const MIN_TOKEN_LEN: usize = 16;

impl Auth {
    /// No authentication.
    #[must_use]
    pub fn open() -> Self {
        Self::default()
    }

    /// One token with every permission.
    ///
    /// # Errors
    /// When the token is shorter than [`MIN_TOKEN_LEN`] or holds whitespace or control characters.
    pub fn with_token(token: &str) -> Result<Self, String> {
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!("api token: must be at least {MIN_TOKEN_LEN} characters"));
        }
        if token.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || !b.is_ascii()) {
            return Err("api token: must be printable ASCII without spaces".to_owned());
        }
        Ok(Self { token: Some(Arc::from(token.as_bytes())) })
    }

    #[must_use]
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    fn accepts(&self, presented: &[u8]) -> bool {
        self.token.as_deref().is_none_or(|want| constant_time_eq(want, presented))
    }
}

/// Compares in time that depends only on the lengths, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// The middleware: `/api/` routes answer 401 without the right bearer token.
pub async fn require_token(State(auth): State<Auth>, req: Request, next: Next) -> Response {
    if !auth.enabled() || !req.uri().path().starts_with("/api/") {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match presented {
        Some(token) if auth.accepts(token.as_bytes()) => next.run(req).await,
        presented => {
            let message = if presented.is_some() {
                "the bearer token is not valid"
            } else {
                "this API needs a bearer token: send Authorization: Bearer <token>"
            };
            let mut resp = ApiError {
                status: StatusCode::UNAUTHORIZED,
                code: "unauthorized",
                message: message.to_owned(),
                field: Some("Authorization".to_owned()),
            }
            .into_response();
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"etcron\""));
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        let auth = Auth::with_token("0123456789abcdef").unwrap();
        assert!(auth.accepts(b"0123456789abcdef"));
        assert!(!auth.accepts(b"0123456789abcdeX"));
        assert!(!auth.accepts(b"0123456789abcdef0"));
        assert!(!auth.accepts(b""));
        assert!(Auth::open().accepts(b""));
        assert!(Auth::with_token("short").is_err());
        assert!(Auth::with_token("0123456789 abcdef").is_err());
    }
}
