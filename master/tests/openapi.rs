//! The OpenAPI document (`master/src/openapi.json`): it parses, every `$ref` resolves, it lists
//! exactly the routes the router serves, its limits are the ones the code enforces, and the
//! router serves it. Whether responses match it is checked against a real master by schemathesis
//! (`tests/tests/it/api/openapi.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use etcron_common::etcd::{connect, EtcdConfig};
use etcron_master::api::{app, AppState};
use etcron_model::keys::Keys;
use serde_json::Value;
use tower::ServiceExt;

/// Every route the router serves, as `(method, path template)`. A route added to `api::app` or
/// `web::routes` goes here and into the document.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/jobs"),
    ("GET", "/api/jobs/{job}"),
    ("PUT", "/api/jobs/{job}"),
    ("DELETE", "/api/jobs/{job}"),
    ("POST", "/api/jobs/{job}/run"),
    ("POST", "/api/jobs/{job}/kill"),
    ("POST", "/api/jobs/{job}/pause"),
    ("POST", "/api/jobs/{job}/resume"),
    ("GET", "/api/jobs/{job}/history"),
    ("GET", "/api/jobs/{job}/history/diff"),
    ("POST", "/api/jobs/{job}/rollback"),
    ("POST", "/api/jobs/{job}/backfill"),
    ("GET", "/api/jobs/{job}/backfills"),
    ("GET", "/api/jobs/{job}/backfills/{id}"),
    ("POST", "/api/jobs/{job}/backfills/{id}/cancel"),
    ("POST", "/api/batch"),
    ("GET", "/api/workers"),
    ("GET", "/api/workers/departed"),
    ("GET", "/api/cluster/storage"),
    ("GET", "/api/cluster/specs"),
    ("GET", "/api/cluster/etcd"),
    ("GET", "/api/schedule/preview"),
    ("POST", "/api/workers/{id}/cordon"),
    ("POST", "/api/workers/{id}/drain"),
    ("POST", "/api/workers/{id}/uncordon"),
    ("GET", "/api/calendars"),
    ("GET", "/api/calendars/{name}"),
    ("PUT", "/api/calendars/{name}"),
    ("DELETE", "/api/calendars/{name}"),
    ("GET", "/api/pools"),
    ("GET", "/api/pools/{name}"),
    ("PUT", "/api/pools/{name}"),
    ("DELETE", "/api/pools/{name}"),
    ("GET", "/api/workflows/{run}"),
    ("POST", "/api/workflows/{run}/resume"),
    ("GET", "/api/executions"),
    ("GET", "/api/executions/{id}"),
    ("GET", "/api/executions/{id}/stream"),
    ("GET", "/api/overview"),
    ("GET", "/api/audit"),
    ("GET", "/api/notifications"),
    ("GET", "/api/auth/whoami"),
    ("GET", "/api/auth/tokens"),
    ("GET", "/api/namespaces"),
    ("GET", "/api/openapi.json"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/"),
    ("GET", "/assets/{file}"),
];

/// Routes that answer without a token.
const OPEN: &[&str] = &["/healthz", "/readyz", "/", "/assets/{file}"];

fn document() -> Value {
    serde_json::from_str(etcron_master::openapi::DOCUMENT).expect("openapi.json is JSON")
}

async fn state() -> AppState {
    // Nothing listens on port 1: the routes answer 503, which still shows they are routed.
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

/// The operations of the document as `(METHOD, path)`.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap().iter().filter(|(k, _)| *k != "parameters") {
            out.insert((method.to_uppercase(), path.clone()));
        }
    }
    out
}

/// Follows a local `$ref` (`#/components/...`).
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let target = doc.pointer(r.strip_prefix('#').expect("local $ref")).unwrap_or_else(|| panic!("{r}"));
            resolve(doc, target)
        }
        None => value,
    }
}

fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn the_document_is_openapi_3_0_3_and_every_ref_resolves() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.0.3");
    assert_eq!(doc["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(all.len() > 50, "{}", all.len());
    for r in all {
        assert!(doc.pointer(r.strip_prefix('#').unwrap()).is_some(), "dangling $ref {r}");
    }
}

#[test]
fn the_document_lists_exactly_the_routes_the_router_serves() {
    let want: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| ((*m).to_owned(), (*p).to_owned())).collect();
    assert_eq!(operations(&document()), want);
}

#[test]
fn api_routes_need_the_token_and_every_error_uses_the_error_schema() {
    let doc = document();
    assert_eq!(doc["security"], serde_json::json!([{"bearerAuth": []}]));
    for (method, path) in operations(&doc) {
        let op = &doc["paths"][&path][method.to_lowercase()];
        let what = format!("{method} {path}");
        assert!(op["operationId"].is_string(), "{what}");
        let responses = op["responses"].as_object().unwrap();
        if OPEN.contains(&path.as_str()) {
            assert_eq!(op["security"], serde_json::json!([]), "{what} is open");
        } else {
            assert!(op.get("security").is_none(), "{what} keeps the document's bearerAuth");
            for status in ["401", "403", "429"] {
                assert!(responses.contains_key(status), "{what} documents {status}");
            }
        }
        for (status, response) in responses {
            if status.as_str() < "400" || (path == "/readyz" && status == "503") {
                continue;
            }
            let schema = &resolve(&doc, response)["content"]["application/json"]["schema"];
            let error = serde_json::json!({"$ref": "#/components/schemas/Error"});
            let uses_error = resolve(&doc, schema)["allOf"].as_array().is_some_and(|parts| parts.contains(&error))
                || *schema == error;
            assert!(uses_error, "{what} {status} uses the Error schema: {schema}");
        }
    }
}

#[test]
fn the_documented_limits_are_the_enforced_ones() {
    use etcron_model::spec::*;
    let doc = document();
    let schema = |name: &str| doc["components"]["schemas"][name].clone();
    let spec = schema("JobSpec");
    let p = &spec["properties"];
    let shell = schema("ShellTask");
    let http = schema("HttpTask");
    let grpc = schema("GrpcTask");
    let g = &grpc["properties"];
    let labels = schema("Labels");
    let notify_target = schema("NotifyTarget");
    let target = &notify_target["properties"];
    let checks: &[(&Value, u64)] = &[
        (&shell["properties"]["command"]["maxLength"], MAX_COMMAND_BYTES as u64),
        (&shell["properties"]["env"]["maxProperties"], MAX_MAP_ENTRIES as u64),
        (&shell["properties"]["env"]["additionalProperties"]["maxLength"], MAX_MAP_VALUE_LEN as u64),
        (&http["properties"]["headers"]["maxProperties"], MAX_MAP_ENTRIES as u64),
        (&http["properties"]["headers"]["additionalProperties"]["maxLength"], MAX_MAP_VALUE_LEN as u64),
        (&http["properties"]["body"]["maxLength"], MAX_HTTP_BODY as u64),
        (&g["endpoint"]["maxLength"], etcron_model::spec::grpc::MAX_ENDPOINT_LEN as u64),
        (&g["method"]["maxLength"], etcron_model::spec::grpc::MAX_METHOD_LEN as u64),
        (&g["metadata"]["maxProperties"], etcron_model::spec::grpc::MAX_METADATA_ENTRIES as u64),
        (&g["secret_metadata"]["maxProperties"], etcron_model::spec::grpc::MAX_METADATA_ENTRIES as u64),
        (&g["metadata"]["additionalProperties"]["maxLength"], etcron_model::spec::grpc::MAX_METADATA_VALUE_LEN as u64),
        (
            &g["descriptor_set"]["maxLength"],
            (etcron_model::spec::grpc::MAX_DESCRIPTOR_SET_BYTES as u64).div_ceil(3) * 4,
        ),
        (&labels["maxProperties"], MAX_MAP_ENTRIES as u64),
        (&labels["additionalProperties"]["maxLength"], MAX_MAP_VALUE_LEN as u64),
        (&p["description"]["maxLength"], MAX_DESCRIPTION_LEN as u64),
        (&schema("Retries")["properties"]["max"]["maximum"], u64::from(MAX_RETRIES)),
        (&schema("Mode")["oneOf"][1]["properties"]["sharded"]["maximum"], u64::from(MAX_SHARDS)),
        (&p["on_success"]["maxItems"], MAX_DEPENDENTS as u64),
        (&p["on_failure"]["maxItems"], MAX_DEPENDENTS as u64),
        (&p["after"]["maxItems"], MAX_DEPENDENTS as u64),
        (&p["params_from"]["maxProperties"], etcron_model::spec::params::MAX_PARAMS_FROM as u64),
        (&p["params_from"]["additionalProperties"]["maxLength"], etcron_model::spec::params::MAX_PATH_LEN as u64),
        (&p["max_output"]["minimum"], *MAX_OUTPUT_RANGE.start()),
        (&p["max_output"]["maximum"], *MAX_OUTPUT_RANGE.end()),
        (&p["max_catchup"]["maximum"], u64::from(MAX_CATCHUP)),
        (&p["max_catchup"]["default"], u64::from(DEFAULT_MAX_CATCHUP)),
        (&schema("ScheduleExpression")["maxLength"], etcron_model::schedule::MAX_EXPRESSION_LEN as u64),
        (&schema("JobName")["maxLength"], etcron_model::keys::MAX_JOB_NAME_LEN as u64),
        (&schema("Team")["maxLength"], etcron_model::spec::MAX_TEAM_LEN as u64),
        (&schema("Id")["maxLength"], etcron_model::keys::MAX_ID_LEN as u64),
        (&p["notify"]["maxItems"], etcron_model::spec::notify::MAX_TARGETS as u64),
        (&target["url"]["maxLength"], etcron_model::spec::notify::MAX_URL_LEN as u64),
        (&target["secret_url"]["maxLength"], etcron_model::spec::notify::MAX_URL_LEN as u64),
        (&target["name"]["maxLength"], etcron_model::spec::notify::MAX_TARGET_NAME_LEN as u64),
        (&target["headers"]["maxProperties"], etcron_model::spec::notify::MAX_TARGET_HEADERS as u64),
        (
            &target["headers"]["additionalProperties"]["maxLength"],
            etcron_model::spec::notify::MAX_HEADER_VALUE_LEN as u64,
        ),
        (&schema("PauseRequest")["properties"]["reason"]["maxLength"], etcron_model::stored::MAX_PAUSE_REASON as u64),
        (&p["schedules"]["maxItems"], MAX_SCHEDULES as u64),
        (&p["skip_calendars"]["maxItems"], MAX_SKIP_CALENDARS as u64),
        (&schema("Calendar")["properties"]["dates"]["maxItems"], etcron_model::calendar::MAX_CALENDAR_ENTRIES as u64),
        (
            &schema("Calendar")["properties"]["description"]["maxLength"],
            etcron_model::calendar::MAX_CALENDAR_DESCRIPTION as u64,
        ),
        (&schema("Pool")["properties"]["slots"]["maximum"], u64::from(etcron_model::pool::MAX_POOL_SLOTS)),
        (&schema("Pool")["properties"]["description"]["maxLength"], etcron_model::pool::MAX_POOL_DESCRIPTION as u64),
        (&p["pool_slots"]["maximum"], u64::from(etcron_model::spec::MAX_SLOTS_PER_RUN)),
        (&p["priority"]["maximum"], u64::from(etcron_model::spec::MAX_PRIORITY)),
        (&p["priority"]["default"], u64::from(etcron_model::spec::DEFAULT_PRIORITY)),
        (&schema("RunBody")["properties"]["priority"]["maximum"], u64::from(etcron_model::spec::MAX_PRIORITY)),
    ];
    for (i, (documented, enforced)) in checks.iter().enumerate() {
        assert_eq!(documented.as_u64(), Some(*enforced), "limit #{i}");
    }
    let search = doc["paths"]["/api/executions"]["get"]["parameters"].as_array().unwrap();
    let limit = search.iter().find(|p| p["name"] == "limit").unwrap();
    assert_eq!(limit["schema"]["maximum"].as_i64(), Some(etcron_common::store::MAX_LIMIT));
    assert_eq!(limit["schema"]["default"].as_i64(), Some(etcron_common::store::DEFAULT_LIMIT));
    let batch = schema("Batch");
    assert_eq!(batch["properties"]["changes"]["maxItems"].as_u64(), Some(etcron_master::api::MAX_BATCH_CHANGES as u64));
    let preview = doc["paths"]["/api/schedule/preview"]["get"]["parameters"].as_array().unwrap();
    let count = preview.iter().find(|p| p["name"] == "count").unwrap();
    assert_eq!(count["schema"]["maximum"].as_u64(), Some(etcron_master::api::MAX_PREVIEW as u64));
    // deny_unknown_fields on the Rust side is additionalProperties: false here.
    for name in [
        "JobSpec",
        "ShellTask",
        "HttpTask",
        "GrpcTask",
        "Retries",
        "NotifyTarget",
        "Batch",
        "BatchChange",
        "Calendar",
        "Pool",
    ] {
        assert_eq!(schema(name)["additionalProperties"], false, "{name}");
    }
}

#[tokio::test]
async fn the_router_serves_the_document_and_every_documented_route() {
    let resp =
        app(state().await).oneshot(Request::get("/api/openapi.json").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), document());
    // Every listed route reaches a handler: neither the fallback's 404 nor a 405. (Concurrently:
    // with the stores down, each request waits for its store's timeout.)
    let st = state().await;
    let checks = ROUTES.iter().map(|(method, path)| {
        let router = app(st.clone());
        async move {
            let uri = path.replace("{job}", "a").replace("{id}", "a@1%231").replace("{file}", "app.js");
            let req = Request::builder().method(Method::from_bytes(method.as_bytes()).unwrap()).uri(&uri);
            let resp = router.oneshot(req.body(Body::from("{}")).unwrap()).await.unwrap();
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
            assert_ne!(body["error"]["message"], "no such route", "{method} {uri}");
        }
    });
    futures::future::join_all(checks).await;
}
