//! Traces on real processes: a master and a worker exporting to an OTLP/HTTP receiver the test
//! runs on loopback. A run requested through the API is one trace from the request (continuing
//! the caller's `traceparent`, or starting one) through the run request to the worker's tick,
//! claim, run, close and record spans, with their parent links and attributes; the shell task
//! gets that trace as `TRACEPARENT`, the HTTP task as a `traceparent` header and the gRPC task as
//! `traceparent` metadata, each naming the run span. Without an endpoint no span is built, and
//! tasks still get a `traceparent`: the caller's as it came, or the trace derived from the
//! execution. A schedule tick's spans are in the trace derived from its execution id. An
//! endpoint that refuses every batch costs dropped spans, counted, never a run.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use etcron_tests::grpc_server::{GrpcServer, Reflection};
use etcron_tests::webhook::Receiver;
use etcron_tests::{free_port, scrape, wait_for, Cluster, WorkerOpts};
use serde_json::{json, Value};

/// One span as the receiver got it.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    name: String,
    trace: String,
    span: String,
    parent: Option<String>,
    kind: i64,
    attributes: BTreeMap<String, String>,
}

/// Every span POSTed to the receiver's `/v1/traces`, checking each request is OTLP JSON.
fn exported(otlp: &Receiver) -> Vec<Exported> {
    let mut out = Vec::new();
    for request in otlp.received("/v1/traces") {
        assert_eq!(request.method, "POST");
        assert_eq!(request.header("content-type"), Some("application/json"));
        let body = request.json();
        for rs in body["resourceSpans"].as_array().expect("resourceSpans") {
            let service = attributes(&rs["resource"]["attributes"]).remove("service.name").unwrap_or_default();
            for ss in rs["scopeSpans"].as_array().expect("scopeSpans") {
                for s in ss["spans"].as_array().expect("spans") {
                    let start: u64 = s["startTimeUnixNano"].as_str().expect("start as a string").parse().unwrap();
                    let end: u64 = s["endTimeUnixNano"].as_str().expect("end as a string").parse().unwrap();
                    assert!(start > 0 && end >= start, "{s}");
                    out.push(Exported {
                        service: service.clone(),
                        name: s["name"].as_str().unwrap().to_owned(),
                        trace: s["traceId"].as_str().unwrap().to_owned(),
                        span: s["spanId"].as_str().unwrap().to_owned(),
                        parent: s["parentSpanId"].as_str().map(str::to_owned),
                        kind: s["kind"].as_i64().unwrap(),
                        attributes: attributes(&s["attributes"]),
                    });
                }
            }
        }
    }
    out
}

/// OTLP attributes as strings (`intValue`s are strings in OTLP's JSON already).
fn attributes(list: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for a in list.as_array().into_iter().flatten() {
        let v = &a["value"];
        let value = v["stringValue"].as_str().or_else(|| v["intValue"].as_str()).map(str::to_owned);
        let value = value.or_else(|| v["boolValue"].as_bool().map(|b| b.to_string())).unwrap_or_default();
        out.insert(a["key"].as_str().unwrap().to_owned(), value);
    }
    out
}

/// Every span a run requested through the API has, by name.
const RUN_SPANS: [&str; 7] = ["POST /api/jobs/{job}/run", "claim", "close", "record", "run", "run request", "tick"];

/// The spans of execution `id` once all of [`RUN_SPANS`] arrived (the master's and the worker's
/// exporters send on their own), by name (one each).
async fn spans_of(otlp: &Receiver, id: &str) -> Result<BTreeMap<String, Exported>> {
    wait_for(Duration::from_secs(30), &format!("the spans of {id}"), || async {
        let spans: Vec<Exported> = exported(otlp)
            .into_iter()
            .filter(|s| s.attributes.get("etcron.execution_id").map(String::as_str) == Some(id))
            .collect();
        RUN_SPANS.iter().all(|n| spans.iter().any(|s| s.name == *n)).then(|| {
            let mut by_name = BTreeMap::new();
            for s in spans {
                assert!(by_name.insert(s.name.clone(), s.clone()).is_none(), "{} twice: {s:?}", s.name);
            }
            by_name
        })
    })
    .await
}

/// `POST /api/jobs/{job}/run`, with the caller's `traceparent` when given: the execution id.
async fn run(c: &Cluster, job: &str, traceparent: Option<&str>) -> Result<String> {
    let mut req = c.http.post(format!("{}/api/jobs/{job}/run", c.master.url));
    if let Some(t) = traceparent {
        req = req.header("traceparent", t);
    }
    let resp = req.send().await?;
    anyhow::ensure!(resp.status() == 202, "run {job}: {}", resp.status());
    let body: Value = resp.json().await?;
    Ok(body["execution_id"].as_str().unwrap().to_owned())
}

/// The caller's span: the test plays a client that traces its own requests.
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread")]
async fn a_run_requested_through_the_api_is_one_trace_down_to_its_record_and_its_tasks() -> Result<()> {
    let otlp = Receiver::start().await?;
    let service = Receiver::start().await?;
    let grpc = GrpcServer::start(Reflection::V1).await?;
    let mut c = Cluster::start_with("traces", 0, false, &["--otlp-endpoint", &otlp.url]).await?;
    let mut opts = WorkerOpts::new("w1");
    opts.extra = vec!["--otlp-endpoint".to_owned(), otlp.url.clone()];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    let job = |task: Value| json!({"schedule": "@yearly", "task": task});
    c.put_job("shell", job(json!({"kind": "shell", "command": "echo \"$TRACEPARENT\""}))).await?;
    c.put_job("http", job(json!({"kind": "http", "method": "POST", "url": service.at("/task")}))).await?;
    let call = json!({"kind": "grpc", "endpoint": grpc.endpoint, "method": "etcron.test.Echo/Echo", "request": {"text": "hi"}});
    c.put_job("grpc", job(call)).await?;

    // The shell run continues the caller's trace.
    let id = run(&c, "shell", Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))).await?;
    let record = c.final_record(&id).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    let spans = spans_of(&otlp, &id).await?;
    let names: Vec<&str> = spans.keys().map(String::as_str).collect();
    assert_eq!(names, RUN_SPANS, "nothing else");
    assert!(spans.values().all(|s| s.trace == CALLER_TRACE), "{spans:#?}");
    let api = &spans["POST /api/jobs/{job}/run"];
    assert_eq!((api.service.as_str(), api.kind, api.parent.as_deref()), ("etcron-master", 2, Some(CALLER_SPAN)));
    assert_eq!(api.attributes["http.response.status_code"], "202");
    let request = &spans["run request"];
    assert_eq!((request.service.as_str(), request.kind), ("etcron-master", 4));
    assert_eq!(request.parent.as_ref(), Some(&api.span));
    let tick = &spans["tick"];
    assert_eq!((tick.service.as_str(), tick.parent.as_ref()), ("etcron-worker", Some(&request.span)));
    for name in ["claim", "run", "close"] {
        assert_eq!(spans[name].parent.as_ref(), Some(&tick.span), "{name}");
    }
    assert_eq!(spans["record"].parent.as_ref(), Some(&spans["close"].span));
    for s in ["tick", "claim", "run", "close", "record"].map(|n| &spans[n]) {
        let a = &s.attributes;
        assert_eq!((a["etcron.job"].as_str(), a["etcron.execution_id"].as_str()), ("shell", id.as_str()), "{s:?}");
        assert_eq!((a["etcron.attempt"].as_str(), a["etcron.worker_id"].as_str()), ("1", "w1"), "{s:?}");
        assert_eq!(s.service, "etcron-worker");
    }
    assert_eq!(spans["claim"].attributes["etcron.claim.outcome"], "won");
    assert_eq!(spans["close"].attributes["etcron.status"], "succeeded");
    assert_eq!(spans["record"].attributes["etcron.record.outcome"], "written");
    // The task's TRACEPARENT names the run span; the record names the trace.
    let run_span = &spans["run"].span;
    assert_eq!(record["output"].as_str().unwrap().trim(), format!("00-{CALLER_TRACE}-{run_span}-01"));
    assert_eq!(record["trace_id"], CALLER_TRACE);

    // The HTTP run: no traceparent from the caller, so the master starts the trace.
    let id = run(&c, "http", None).await?;
    assert_eq!(c.final_record(&id).await?["status"], "succeeded");
    let spans = spans_of(&otlp, &id).await?;
    let api = &spans["POST /api/jobs/{job}/run"];
    assert_eq!(api.parent, None, "a trace of its own");
    assert_ne!(api.trace, CALLER_TRACE);
    assert!(spans.values().all(|s| s.trace == api.trace), "{spans:#?}");
    let got = service.received("/task");
    let header = got[0].header("traceparent").expect("a traceparent header");
    assert_eq!(header, format!("00-{}-{}-01", api.trace, spans["run"].span));
    assert_eq!(got[0].header("x-etcron-execution-id"), Some(id.as_str()), "the X-Etcron-* headers stay");

    // The gRPC run: `traceparent` metadata.
    let id = run(&c, "grpc", None).await?;
    assert_eq!(c.final_record(&id).await?["status"], "succeeded");
    let spans = spans_of(&otlp, &id).await?;
    let calls = grpc.calls();
    let metadata = &calls.last().expect("a call").metadata;
    assert_eq!(metadata["traceparent"], format!("00-{}-{}-01", spans["run"].trace, spans["run"].span));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_no_span_is_built_and_tasks_still_get_a_traceparent() -> Result<()> {
    let mut c = Cluster::start("traces-off", 0).await?;
    let port = free_port();
    let mut opts = WorkerOpts::new("w1");
    opts.extra = vec!["--metrics-listen".to_owned(), format!("127.0.0.1:{port}")];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    c.put_job("shell", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo \"$TRACEPARENT\""}}))
        .await?;

    // The caller's context reaches the task as it came: no span of etcron's sits between.
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let id = run(&c, "shell", Some(&caller)).await?;
    let record = c.final_record(&id).await?;
    assert_eq!(record["output"].as_str().unwrap().trim(), caller);
    assert_eq!(record["trace_id"], CALLER_TRACE);

    // Without one, the trace is the one derived from the execution.
    let id = run(&c, "shell", None).await?;
    let record = c.final_record(&id).await?;
    let derived = etcron_common::trace::TraceContext::derived(&id).trace_hex();
    let output = record["output"].as_str().unwrap().trim().to_owned();
    let parsed = etcron_common::trace::TraceContext::parse(&output).expect("a valid traceparent");
    assert_eq!(parsed.trace_hex(), derived);
    assert_eq!(record["trace_id"], derived.as_str());

    // And neither process built a single span.
    let worker = scrape(&format!("http://127.0.0.1:{port}/metrics"), None).await?;
    let master = scrape(&format!("{}/metrics", c.master.url), None).await?;
    for (who, s) in [("worker", &worker), ("master", &master)] {
        assert!(s.declares("etcron_trace_spans_started_total"), "{who}");
        assert_eq!(s.value("etcron_trace_spans_started_total", &[]), 0.0, "{who}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_refuses_costs_dropped_spans_never_runs() -> Result<()> {
    let otlp = Receiver::start().await?;
    otlp.refuse_next("/v1/traces", 1_000_000, 503);
    let mut c = Cluster::start("traces-refused", 0).await?;
    let port = free_port();
    let mut opts = WorkerOpts::new("w1");
    let metrics = format!("127.0.0.1:{port}");
    opts.extra = ["--otlp-endpoint", &otlp.url, "--metrics-listen", &metrics].map(String::from).to_vec();
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    c.put_job("shell", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo \"$TRACEPARENT\""}}))
        .await?;
    for _ in 0..3 {
        let id = run(&c, "shell", None).await?;
        let record = c.final_record(&id).await?;
        assert_eq!(record["status"], "succeeded", "{record}");
        let given = etcron_common::trace::TraceContext::parse(record["output"].as_str().unwrap().trim());
        assert_eq!(given.map(|t| t.trace_hex()), record["trace_id"].as_str().map(str::to_owned));
    }
    // Each batch was tried, refused and dropped, counted as such; none was taken.
    let url = format!("http://127.0.0.1:{port}/metrics");
    let s = wait_for(Duration::from_secs(30), "spans dropped as export_failed", || async {
        let s = scrape(&url, None).await.ok()?;
        (s.value("etcron_trace_spans_dropped_total", &[("reason", "export_failed")]) > 0.0).then_some(s)
    })
    .await?;
    assert!(s.value("etcron_trace_spans_started_total", &[]) >= 15.0, "five spans a run at least");
    assert_eq!(s.value("etcron_trace_spans_exported_total", &[]), 0.0);
    assert!(otlp.received("/v1/traces").len() >= 3, "a batch is tried 3 times");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scheduled_tick_is_traced_in_the_trace_derived_from_its_execution() -> Result<()> {
    let otlp = Receiver::start().await?;
    let mut c = Cluster::start("traces-tick", 0).await?;
    for id in ["w1", "w2"] {
        let mut opts = WorkerOpts::new(id);
        opts.extra = vec!["--otlp-endpoint".to_owned(), otlp.url.clone()];
        c.add_worker(opts)?;
    }
    c.wait_workers(2).await?;
    c.put_job(
        "tick",
        json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": "echo \"$TRACEPARENT\""}}),
    )
    .await?;
    let runs = c.wait_executions("job=tick&status=succeeded", "a run of the tick", |l| !l.is_empty()).await?;
    let id = runs[0]["id"].as_str().unwrap().to_owned();
    let trace = etcron_common::trace::TraceContext::derived(&id).trace_hex();
    assert_eq!(runs[0]["trace_id"], trace.as_str());
    let spans = wait_for(Duration::from_secs(30), "the spans of the tick", || async {
        let spans: Vec<Exported> =
            exported(&otlp).into_iter().filter(|s| s.attributes.get("etcron.execution_id") == Some(&id)).collect();
        ["tick", "claim", "run", "close", "record"].iter().all(|n| spans.iter().any(|s| s.name == *n)).then_some(spans)
    })
    .await?;
    // Every span of the tick, whichever worker raced, is in its derived trace; each racing
    // worker's tick span is a root of it; one claim was won. (A worker ranked later usually
    // finds the claim taken after its head start and does not race: it exports nothing.)
    assert!(spans.iter().all(|s| s.trace == trace), "{spans:#?}");
    for tick in spans.iter().filter(|s| s.name == "tick") {
        assert_eq!((tick.parent.as_deref(), tick.kind), (None, 1), "{tick:?}");
        let worker = &tick.attributes["etcron.worker_id"];
        let claim = spans.iter().find(|s| s.name == "claim" && &s.attributes["etcron.worker_id"] == worker);
        assert_eq!(claim.and_then(|c| c.parent.as_ref()), Some(&tick.span), "{spans:#?}");
    }
    let won = spans.iter().filter(|s| s.name == "claim" && s.attributes["etcron.claim.outcome"] == "won").count();
    assert_eq!(won, 1, "{spans:#?}");
    let run = spans.iter().find(|s| s.name == "run").expect("the winner's run span");
    let record = c.final_record(&id).await?;
    assert_eq!(record["output"].as_str().unwrap().trim(), format!("00-{trace}-{}-01", run.span));
    Ok(())
}
