//! Router tests without a socket (`app().oneshot`): input validation that must answer before
//! any etcd call (a job naming itself included), previews, unknown routes, and readiness and
//! 503s when etcd cannot be reached.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

use axum::body::Body;
use axum::http::{Request, StatusCode};
use etcron_common::etcd::{connect, EtcdConfig};
use etcron_master::api::{app, AppState};
use etcron_model::keys::Keys;
use tower::ServiceExt;

async fn state() -> AppState {
    // Nothing listens on port 1: every etcd and MongoDB call fails, which is what these tests want.
    let client =
        connect(&EtcdConfig { endpoints: vec!["127.0.0.1:1".to_owned()], ..EtcdConfig::default() }).await.unwrap();
    let store = etcron_common::store::MongoStore::connect("mongodb://127.0.0.1:1", "etcron").await.unwrap();
    let audit = etcron_master::layers::audit::AuditLog::start(&store);
    AppState {
        client,
        keys: Keys::new("/etcron").unwrap(),
        store,
        auth: etcron_master::layers::auth::Auth::open(),
        audit,
        guard: etcron_master::layers::guard::Guard { loopback_hosts_only: false },
        storage: etcron_master::duties::etcd_storage::StorageWatch::default(),
        specs: etcron_master::duties::spec_check::SpecWatch::default(),
        teams: std::sync::Arc::default(),
        limits: std::sync::Arc::default(),
        tracer: etcron_common::trace::Tracer::off(),
        job_index: etcron_master::job_index::JobIndex::default(),
        namespaces: std::sync::Arc::new(vec!["/etcron".to_owned()]),
    }
}

async fn call(req: Request<Body>) -> (StatusCode, serde_json::Value) {
    let resp = app(state().await).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

fn put(path: &str, body: &str) -> Request<Body> {
    Request::put(path).header("content-type", "application/json").body(Body::from(body.to_owned())).unwrap()
}

#[tokio::test]
async fn invalid_specs_are_refused_before_touching_etcd() {
    let (status, body) =
        call(put("/api/jobs/UPPER", r#"{"schedule":"@daily","task":{"kind":"shell","command":"true"}}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["field"], "name");
    let (status, body) =
        call(put("/api/jobs/ok", r#"{"schedule":"@daily","task":{"kind":"shell","command":"true"},"x":1}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["field"], "x");
    let (status, body) = call(put("/api/jobs/ok", "[]")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "invalid");
    let huge = format!(r#"{{"schedule":"@daily","task":{{"kind":"shell","command":"{}"}}}}"#, "x".repeat(2 << 20));
    let (status, body) = call(put("/api/jobs/ok", &huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["error"]["code"], "too_large");
}

#[tokio::test]
async fn pools_and_run_priorities_are_checked_before_touching_etcd() {
    for (path, body, field) in [
        ("/api/pools/Bad_Name", r#"{"slots":2}"#, "name"),
        ("/api/pools/db", r#"{"slots":0}"#, "slots"),
        ("/api/pools/db", r#"{"slots":10001}"#, "slots"),
        ("/api/pools/db", r#"{"slots":"2"}"#, "slots"),
        ("/api/pools/db", r#"{"slots":2,"max":3}"#, "max"),
    ] {
        let (status, answer) = call(put(path, body)).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field)),
            "{body}: {answer}"
        );
    }
    let long = format!(r#"{{"slots":1,"description":"{}"}}"#, "x".repeat(etcron_model::pool::MAX_POOL_DESCRIPTION + 1));
    assert_eq!(call(put("/api/pools/db", &long)).await.1["error"]["field"], "description");
    // A valid pool needs etcd.
    assert_eq!(call(put("/api/pools/db", r#"{"slots":2}"#)).await.0, StatusCode::SERVICE_UNAVAILABLE);
    for priority in ["101", "-1", "2.5", "\"high\""] {
        let req = Request::post("/api/jobs/a/run").body(Body::from(format!(r#"{{"priority":{priority}}}"#))).unwrap();
        let (status, answer) = call(req).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some("priority")),
            "{priority}"
        );
    }
    let req = Request::post("/api/jobs/a/run").body(Body::from(r#"{"priority":100}"#)).unwrap();
    assert_eq!(call(req).await.0, StatusCode::SERVICE_UNAVAILABLE, "a valid priority needs etcd");
}

#[tokio::test]
async fn a_valid_spec_with_etcd_down_is_a_503() {
    let (status, body) =
        call(put("/api/jobs/ok", r#"{"schedule":"@daily","task":{"kind":"shell","command":"true"}}"#)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "etcd_unavailable");
}

#[tokio::test]
async fn preconditions_other_than_create_only_are_refused_not_ignored() {
    let spec = r#"{"schedule":"@daily","task":{"kind":"shell","command":"true"}}"#;
    for value in ["\"5\"", "W/\"5\"", "abc"] {
        let req = Request::put("/api/jobs/ok").header("If-None-Match", value).body(Body::from(spec)).unwrap();
        let (status, body) = call(req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{value}: {body}");
        assert_eq!(body["error"]["field"], "If-None-Match", "{value}");
    }
    // `*` passes the check (and then needs etcd).
    let req = Request::put("/api/jobs/ok").header("If-None-Match", "*").body(Body::from(spec)).unwrap();
    assert_eq!(call(req).await.0, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn a_job_naming_itself_is_refused_before_touching_etcd() {
    for (deps, field) in [
        (r#""on_success":["ok"]"#, "on_success[0]"),
        (r#""on_success":["other"],"on_failure":["x","ok"]"#, "on_failure[1]"),
    ] {
        let body = format!(r#"{{"schedule":"@daily","task":{{"kind":"shell","command":"true"}},{deps}}}"#);
        let (status, body) = call(put("/api/jobs/ok", &body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["code"], "dependency_cycle");
        assert_eq!(body["error"]["message"], "dependency cycle: ok → ok");
        assert_eq!(body["error"]["field"], field);
    }
}

#[tokio::test]
async fn routes_that_read_etcd_answer_503_while_it_is_down() {
    // A spec with dependencies needs the other jobs to be checked: no answer without etcd.
    let deps = r#"{"schedule":"@daily","task":{"kind":"shell","command":"true"},"on_success":["b"]}"#;
    let (status, body) = call(put("/api/jobs/a", deps)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("etcd_unavailable")));
    for req in [
        Request::get("/api/jobs").body(Body::empty()).unwrap(),
        Request::get("/api/jobs/a").body(Body::empty()).unwrap(),
        Request::get("/api/workers").body(Body::empty()).unwrap(),
        Request::get("/api/pools").body(Body::empty()).unwrap(),
        Request::get("/api/pools/db").body(Body::empty()).unwrap(),
        Request::delete("/api/pools/db").body(Body::empty()).unwrap(),
        Request::delete("/api/jobs/a").body(Body::empty()).unwrap(),
    ] {
        let what = format!("{} {}", req.method(), req.uri());
        let (status, body) = call(req).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
        assert_eq!(body["error"]["code"], "etcd_unavailable", "{what}");
    }
}

#[tokio::test]
async fn preview_and_unknown_routes() {
    let (status, body) =
        call(Request::get("/api/schedule/preview?schedule=%40every%2090s&count=2").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["next"].as_array().unwrap().len(), 2);
    assert_eq!(body["description"], "Every 90 seconds");
    let (status, body) =
        call(Request::get("/api/schedule/preview?schedule=%40every%2090s&count=1000").body(Body::empty()).unwrap())
            .await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("count")));
    let (status, body) = call(Request::get("/api/nothing").body(Body::empty()).unwrap()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
}

#[tokio::test]
async fn health_and_readiness() {
    let (status, _) = call(Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(Request::get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["etcd"]["ok"], false);
    assert_eq!(body["mongodb"]["ok"], false);
    assert_eq!(body["ready"], false);
}

#[tokio::test]
async fn bad_search_parameters_are_400s_naming_the_parameter() {
    for (query, field) in [
        ("status=bogus", "status"),
        ("status=failed,nope", "status"),
        ("since=yesterday", "since"),
        ("until=2026-13-01T00:00:00Z", "until"),
        ("since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", "since"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("cursor=garbage", "cursor"),
        ("job=Bad%20Name", "job"),
        ("worker=a%20b", "worker"),
        ("trigger=cron", "trigger"),
        ("q=%21%21", "q"),
        ("colour=red", "colour"),
    ] {
        let (status, body) = call(Request::get(format!("/api/executions?{query}")).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let (status, body) = call(Request::get("/api/executions/not-an-id").body(Body::empty()).unwrap()).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("id")));
}

#[tokio::test]
async fn record_routes_answer_503_when_mongodb_is_down() {
    let (status, body) = call(Request::get("/api/executions?job=a&status=failed").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "mongodb_unavailable");
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_with_a_same_origin_policy() {
    let resp = app(state().await).oneshot(Request::get("/").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let headers = resp.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("connect-src 'self'"), "{csp}");
    let html = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    let html = String::from_utf8(html.to_vec()).unwrap();
    assert!(html.contains(r#"<main id="app""#) && html.contains("/assets/app.js"), "{html}");
    // Every asset the page names is served, with its type; nothing is loaded from elsewhere.
    for (path, kind) in [("/assets/app.js", "text/javascript"), ("/assets/style.css", "text/css")] {
        assert!(html.contains(path));
        let resp = app(state().await).oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert!(resp.headers()["content-type"].to_str().unwrap().starts_with(kind), "{path}");
    }
    assert!(!html.contains("http://") && !html.contains("https://"), "no external references");
    let (status, body) = call(Request::get("/assets/nope.js").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
}

#[tokio::test]
async fn overview_windows_are_validated_before_reading_records() {
    let (status, body) = call(Request::get("/api/overview?window=7d").body(Body::empty()).unwrap()).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("window")), "{body}");
    let (status, body) = call(Request::get("/api/overview?job=Bad!").body(Body::empty()).unwrap()).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("job")), "{body}");
    let (status, body) = call(Request::get("/api/overview?since=x").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(Request::get("/api/overview?window=24h").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "MongoDB is down: {body}");
}

#[tokio::test]
async fn with_a_token_the_api_needs_it_and_the_console_stays_open() {
    let token = "s3cret-token-0123456789";
    let mut st = state().await;
    st.auth = etcron_master::layers::auth::Auth::with_token(token).unwrap();
    let send = |req: Request<Body>| {
        let st = st.clone();
        async move { app(st).oneshot(req).await.unwrap() }
    };
    let resp = send(Request::get("/api/schedule/preview?schedule=@daily").body(Body::empty()).unwrap()).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer realm=\"etcron\"");
    let wrong = Request::get("/api/schedule/preview?schedule=@daily")
        .header("authorization", "Bearer s3cret-token-0123456780")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(wrong).await.status(), StatusCode::UNAUTHORIZED);
    let right = Request::get("/api/schedule/preview?schedule=@daily")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(right).await.status(), StatusCode::OK);
    for open in ["/", "/assets/app.js", "/healthz"] {
        assert_eq!(send(Request::get(open).body(Body::empty()).unwrap()).await.status(), StatusCode::OK, "{open}");
    }
}

#[tokio::test]
async fn roles_gate_the_routes_and_changes_are_rate_limited() {
    use etcron_master::layers::auth::{hash_token, Auth, Role, TokenConfig};
    let tokens = [
        TokenConfig {
            name: "dash".into(),
            role: Some(Role::Viewer),
            teams: Default::default(),
            sha256: hash_token("viewer-token-0123456789"),
        },
        TokenConfig {
            name: "oncall".into(),
            role: Some(Role::Operator),
            teams: Default::default(),
            sha256: hash_token("operator-token-0123456789"),
        },
    ];
    let mut st = state().await;
    st.auth = Auth::new(&tokens, Some("admin-token-0123456789")).unwrap().with_rate_limit(0.5, 2);
    let send = |method: &str, path: &str, token: &str| {
        let st = st.clone();
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Body::from(r#"{"schedule":"@daily","task":{"kind":"shell","command":"true"}}"#))
            .unwrap();
        async move {
            let resp = app(st).oneshot(req).await.unwrap();
            let status = resp.status();
            let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
            (status, serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_default(), retry)
        }
    };
    // Reading is open to every role (here it reaches the unreachable etcd: 503, past the auth layer).
    let (status, body, _) = send("GET", "/api/auth/whoami", "viewer-token-0123456789").await;
    assert_eq!((status, body["name"].as_str(), body["role"].as_str()), (StatusCode::OK, Some("dash"), Some("viewer")));
    let (status, _, _) = send("GET", "/api/jobs", "viewer-token-0123456789").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // A viewer may not run; an operator may run but not edit; an admin may edit.
    let (status, body, _) = send("POST", "/api/jobs/a/run", "viewer-token-0123456789").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("forbidden")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("needs operator"), "{body}");
    // Past the auth layer: the body (a spec) is refused as a run's parameters.
    let (status, body, _) = send("POST", "/api/jobs/a/run", "operator-token-0123456789").await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("schedule")), "{body}");
    let (status, body, _) = send("PUT", "/api/jobs/a", "operator-token-0123456789").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _, _) = send("GET", "/api/auth/tokens", "operator-token-0123456789").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body, _) = send("GET", "/api/auth/tokens", "admin-token-0123456789").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body["tokens"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["dash", "oncall", "api-token"]);
    assert!(!body.to_string().contains(&hash_token("viewer-token-0123456789")), "hashes are never shown");
    // The operator used its burst of 2 (0.5/s): the run, and the refused edit, since refusals
    // count against the budget too. The next change is a 429.
    let (status, body, retry) = send("POST", "/api/jobs/a/resume", "operator-token-0123456789").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited")));
    assert!(retry.is_some_and(|r| r.parse::<u64>().unwrap() >= 1));
    // Limits are per caller: the admin still has its burst.
    let (status, _, _) = send("PUT", "/api/jobs/a", "admin-token-0123456789").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

/// A master serving two namespaces: the header picks one (absent: the default); a namespace
/// not served is a 404 naming the header, and only once the token passed (401 before it).
#[tokio::test]
async fn the_namespace_header_picks_the_api_and_an_unknown_one_is_a_404() {
    use etcron_master::layers::namespace::dispatch;
    let served = std::sync::Arc::new(vec!["/etcron".to_owned(), "/etcron-b".to_owned()]);
    let mut a = state().await;
    a.namespaces = served.clone();
    a.auth = etcron_master::layers::auth::Auth::new(&[], Some("admin-token-0123456789")).unwrap();
    let b = AppState { keys: Keys::new("/etcron-b").unwrap(), ..a.clone() };
    let router = dispatch(vec![("/etcron".to_owned(), app(a)), ("/etcron-b".to_owned(), app(b))]);
    let send = |namespace: Option<&str>, token: Option<&str>| {
        let mut req = Request::get("/api/namespaces");
        if let Some(ns) = namespace {
            req = req.header("X-Etcron-Namespace", ns);
        }
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let router = router.clone();
        async move {
            let resp = router.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
            (status, serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_default())
        }
    };
    let token = Some("admin-token-0123456789");
    let (status, body) = send(None, token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed =
        serde_json::json!([{"namespace": "/etcron", "default": true}, {"namespace": "/etcron-b", "default": false}]);
    assert_eq!(body["namespaces"], listed);
    assert_eq!(send(Some("/etcron-b"), token).await.0, StatusCode::OK);
    assert_eq!(send(Some("/etcron"), token).await.0, StatusCode::OK);
    let (status, body) = send(Some("/etcron-c"), token).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    assert_eq!(body["error"]["field"], "X-Etcron-Namespace");
    assert!(!body.to_string().contains("/etcron-b"), "the served namespaces are not listed: {body}");
    assert_eq!(send(Some("/etcron-c"), None).await.0, StatusCode::UNAUTHORIZED, "no token: nothing learnt");
}
