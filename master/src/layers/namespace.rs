//! Several namespaces in one master: an API (`api::app`) per namespace, and the dispatch that
//! hands each request to one by its `X-Etcron-Namespace` header (absent: the default, first).
//! A request naming a namespace not served goes through the default one's layers (the guard,
//! the audit, the token check) and is then refused with 404: who may not call learns nothing.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower::ServiceExt as _;

use crate::error::ApiError;

/// The header that chooses a request's namespace.
pub const HEADER: &str = "x-etcron-namespace";

/// What the request asked for: a namespace this master does not serve.
#[derive(Debug, Clone, Copy)]
struct Unknown;

/// One router in front of each namespace's: the header's namespace, or the first (the default
/// one) without it. `apps` holds at least one.
pub fn dispatch(apps: Vec<(String, Router)>) -> Router {
    let apps = Arc::new(apps);
    Router::new().fallback_service(tower::service_fn(move |mut request: Request| {
        let apps = apps.clone();
        async move {
            let chosen = match request.headers().get(HEADER) {
                None => Some(0),
                Some(asked) => apps.iter().position(|(ns, _)| ns.as_bytes() == asked.as_bytes()),
            };
            let index = chosen.unwrap_or_else(|| {
                request.extensions_mut().insert(Unknown);
                0
            });
            let app = apps[index].1.clone();
            Ok::<Response, Infallible>(app.oneshot(request).await.unwrap_or_else(|never| match never {}))
        }
    }))
}

/// After the token check: a request that named a namespace not served is refused, naming the
/// header (the namespaces served are `GET /api/namespaces`'s to tell).
pub async fn refuse_unknown(request: Request, next: Next) -> Response {
    if request.extensions().get::<Unknown>().is_none() {
        return next.run(request).await;
    }
    let message = "X-Etcron-Namespace: no namespace of that name is served here (GET /api/namespaces lists them)";
    ApiError { field: Some("X-Etcron-Namespace".to_owned()), ..ApiError::not_found(message) }.into_response()
}
