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

/// Everything under `/assets/`. A file added to `web/assets/` must be listed here: the console
/// is ES modules importing each other by relative URL (`./api.js`), one request per file, so an
/// unlisted one is a 404 and a console that does not start.
const ASSETS: &[Asset] = &[
    Asset {
        name: "actions.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/actions.js"),
    },
    Asset {
        name: "api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/api.js"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/app.js"),
    },
    Asset {
        name: "calendars.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/calendars.js"),
    },
    Asset {
        name: "charts.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/charts.js"),
    },
    Asset {
        name: "controls.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/controls.js"),
    },
    Asset {
        name: "editor.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/editor.js"),
    },
    Asset {
        name: "execution.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/execution.js"),
    },
    Asset {
        name: "executions.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/executions.js"),
    },
    Asset {
        name: "format.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/format.js"),
    },
    Asset {
        name: "forms.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/forms.js"),
    },
    Asset {
        name: "history.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/history.js"),
    },
    Asset {
        name: "job.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/job.js"),
    },
    Asset {
        name: "jobform.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/jobform.js"),
    },
    Asset {
        name: "jobs.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/jobs.js"),
    },
    Asset {
        name: "nav.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/nav.js"),
    },
    Asset {
        name: "overview.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/overview.js"),
    },
    Asset {
        name: "pools.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/pools.js"),
    },
    Asset {
        name: "router.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/router.js"),
    },
    Asset {
        name: "stream.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/stream.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../web/assets/style.css"),
    },
    Asset {
        name: "workers.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/workers.js"),
    },
    Asset {
        name: "workflows.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/assets/workflows.js"),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::ASSETS;

    /// Every file of `web/assets/` is embedded, and nothing else: the console's modules import
    /// each other by URL, so one left out is a 404 and a console that never starts.
    #[test]
    fn every_asset_file_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web/assets");
        let mut files: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        files.sort();
        let mut listed: Vec<String> = ASSETS.iter().map(|a| a.name.to_owned()).collect();
        listed.sort();
        assert_eq!(files, listed);
        for a in ASSETS {
            let expected = if a.name.ends_with(".js") { "text/javascript" } else { "text/css" };
            assert!(a.content_type.starts_with(expected), "{}: {}", a.name, a.content_type);
        }
    }
}
