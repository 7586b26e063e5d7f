//! The OpenAPI 3.0.3 document of the API (`openapi.json` beside this file), served at
//! `GET /api/openapi.json`. It is written by hand; the schemathesis test in `tests/` runs it
//! against a real master, so it stays true to the handlers.

use axum::http::header;
use axum::response::IntoResponse;

/// The document, embedded at build time.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// `GET /api/openapi.json`.
pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}
