//! The operator UI: the static files of `web/`, embedded into the binary at build time (a plain
//! `cargo build` yields a master with its UI; no node at build or run time) and served at `/`
//! and `/assets/{file}`. The page talks to the JSON API only and loads nothing from elsewhere
//! (the Content-Security-Policy says so to the browser).

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::error::ApiError;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const INDEX: &[u8] = include_bytes!("../../web/index.html");

/// Everything under `/assets/`. A file added to `web/assets/` must be listed here.
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/app.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../web/assets/style.css"),
    },
];

/// Same-origin only: scripts, styles, API calls; no inline code, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
                   object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// The UI's routes, merged into the API router.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/", get(index)).route("/assets/{file}", get(asset))
}

async fn index() -> Response {
    serve("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => serve(a.content_type, a.body),
        None => ApiError::not_found(format!("no asset {file:?}")).into_response(),
    }
}

fn serve(content_type: &'static str, body: &'static [u8]) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Assets change with the binary; revalidation is cheap next to a stale console.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
