//! Checks every request meets before a handler: the `Host` it names (open mode: loopback names
//! only, so DNS rebinding cannot reach an open API), proof of same origin for changes (`Origin`
//! and `Sec-Fetch-Site`, which browsers send and scripts on other origins cannot forge), and
//! query parameters the route takes (as `openapi.json` lists them: one place for that rule).
//! Also the headers every API answer carries.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::layers::auth::is_mutation;

/// What the guard allows.
#[derive(Debug, Clone, Copy)]
pub struct Guard {
    /// Only loopback names in `Host` (an open API on a loopback address).
    pub loopback_hosts_only: bool,
}

fn refused(code: &'static str, field: &str, message: String) -> Response {
    ApiError { status: StatusCode::FORBIDDEN, code, message, field: Some(field.to_owned()) }.into_response()
}

/// The host of a `Host` header value, without its port.
fn host_name(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    value.rsplit_once(':').map_or(value, |(h, _)| h)
}

fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Why a request's origin headers show another origin, if they do.
fn cross_origin(headers: &HeaderMap) -> Option<(&'static str, String)> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("?");
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(host));
        if !same {
            return Some(("Origin", format!("a change from origin {origin} refused: only pages served by this master ({host}) may change things")));
        }
    }
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(site) = site.filter(|s| !matches!(*s, "same-origin" | "none")) {
        return Some((
            "Sec-Fetch-Site",
            format!("a change from a {site} page refused: only pages served by this master may change things"),
        ));
    }
    None
}

/// The middleware (outermost of the API's checks).
pub async fn check(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    if guard.loopback_hosts_only {
        let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !is_loopback_name(host_name(host)) {
            return refused(
                "host_not_allowed",
                "Host",
                format!("Host {host:?} refused: an API without tokens answers only to loopback names (localhost, 127.0.0.1, [::1])"),
            );
        }
    }
    if is_mutation(req.method()) {
        if let Some((field, message)) = cross_origin(req.headers()) {
            tracing::warn!(method = %req.method(), path = %req.uri().path(), %message, "request refused: cross-origin change");
            return refused("cross_origin", field, message);
        }
    }
    let api = req.uri().path().starts_with("/api/");
    let mut resp = next.run(req).await;
    if api {
        let headers = resp.headers_mut();
        headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// The query parameters each route takes, by method and route template, from `openapi.json`.
fn routes() -> &'static HashMap<(String, String), Vec<String>> {
    static ROUTES: OnceLock<HashMap<(String, String), Vec<String>>> = OnceLock::new();
    ROUTES.get_or_init(|| {
        let doc: serde_json::Value = serde_json::from_str(crate::openapi::DOCUMENT).unwrap_or_default();
        let mut out = HashMap::new();
        let Some(paths) = doc["paths"].as_object() else { return out };
        for (path, ops) in paths {
            for (method, op) in ops.as_object().into_iter().flatten() {
                let params = op["parameters"].as_array().into_iter().flatten().filter_map(|p| {
                    let p = match p["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/parameters/")) {
                        Some(name) => &doc["components"]["parameters"][name],
                        None => p,
                    };
                    (p["in"] == "query").then(|| p["name"].as_str().map(str::to_owned)).flatten()
                });
                out.insert((method.to_ascii_uppercase(), path.clone()), params.collect());
            }
        }
        out
    })
}

/// The query parameters of `method template` that `query` names but the route does not take,
/// and the ones it takes; nothing for a route the document does not list.
#[must_use]
pub fn unknown_params(method: &Method, template: &str, query: &str) -> (Vec<String>, &'static [String]) {
    let Some(known) = routes().get(&(method.as_str().to_owned(), template.to_owned())) else {
        return (Vec::new(), &[]);
    };
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
    let mut unknown: Vec<String> = pairs.into_iter().map(|(k, _)| k).filter(|k| !known.contains(k)).collect();
    unknown.dedup();
    (unknown, known)
}

/// The route-level middleware: a query parameter the route does not take is a 400 naming it
/// (a typo such as `?exection=` must not widen what a request does).
pub async fn query_params(req: Request, next: Next) -> Response {
    let template = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_owned());
    if let (Some(template), Some(query)) = (template, req.uri().query()) {
        let (unknown, known) = unknown_params(req.method(), &template, query);
        if let Some(first) = unknown.first() {
            let takes = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
            return ApiError::bad_request(
                first.clone(),
                format!("unknown query parameter {first:?} for {} {template} (it takes: {takes})", req.method()),
            )
            .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_query_parameters_are_named_from_the_openapi_document() {
        assert_eq!(unknown_params(&Method::POST, "/api/jobs/{job}/kill", "exection=a").0, vec!["exection"]);
        assert!(unknown_params(&Method::POST, "/api/jobs/{job}/kill", "execution=a").0.is_empty());
        assert_eq!(unknown_params(&Method::GET, "/api/jobs", "x=1&x=2").0, vec!["x"]);
        assert!(unknown_params(&Method::GET, "/api/executions", "job=a&q=b&limit=3").0.is_empty());
        assert!(unknown_params(&Method::PUT, "/api/jobs/{job}", "").0.is_empty());
    }

    #[test]
    fn origins_and_hosts() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8070"));
        assert!(cross_origin(&h).is_none(), "no Origin: not a browser page");
        h.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:8070"));
        assert!(cross_origin(&h).is_none());
        h.insert(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert_eq!(cross_origin(&h).map(|c| c.0), Some("Origin"));
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert_eq!(cross_origin(&h).map(|c| c.0), Some("Sec-Fetch-Site"));
        assert_eq!(host_name("[::1]:80"), "::1");
        assert!(is_loopback_name(host_name("localhost:8070")) && is_loopback_name(host_name("127.0.0.2")));
        assert!(!is_loopback_name(host_name("evil.example:8070")));
    }
}
