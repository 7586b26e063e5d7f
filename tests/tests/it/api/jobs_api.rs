//! The master's side of job semantics against a real etcd: dependency cycles refused (also when
//! two masters save the two halves of one at the same time), the job state key written on
//! create and kept on replace, deletes that take the state and pending run requests along, and
//! selectors matched against live workers.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::GetOptions;
use etcron_model::dependency::DependencyGraph;
use etcron_model::keys::{ExecutionId, Keys, Tick};
use etcron_model::stored::{JobState, TriggerRequest};
use etcron_tests::{now_ms, Cluster, Master, Sig, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

/// A spec that fires hourly (never during a test) and starts `on_success` / `on_failure`.
fn spec(on_success: &[&str], on_failure: &[&str]) -> Value {
    json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": "true"},
           "on_success": on_success, "on_failure": on_failure})
}

fn keys(c: &Cluster) -> Keys {
    Keys::new(&c.namespace).unwrap()
}

/// PUT through the harness; returns status and body.
async fn put(c: &Cluster, job: &str, body: Value) -> (u16, Value) {
    c.call(Method::PUT, &format!("/api/jobs/{job}"), Some(body)).await.unwrap()
}

/// The stored value and mod revision of `key`, if present.
async fn stored(c: &Cluster, key: &str) -> Option<(Vec<u8>, i64)> {
    let mut etcd = c.etcd.client().await.unwrap();
    let resp = etcd.get(key, None).await.unwrap();
    resp.kvs().first().map(|kv| (kv.value().to_vec(), kv.mod_revision()))
}

fn assert_cycle(status: u16, body: &Value, path: &str, field: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "dependency_cycle", "{body}");
    assert_eq!(body["error"]["message"], format!("dependency cycle: {path}"), "{body}");
    assert_eq!(body["error"]["field"], field, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cycles_are_refused_naming_the_path_and_the_field() -> anyhow::Result<()> {
    let c = Cluster::start("jobs-cycles", 0).await?;

    // A job that names itself, in either list.
    let (status, body) = put(&c, "self", spec(&["self"], &[])).await;
    assert_cycle(status, &body, "self → self", "on_success[0]");
    let (status, body) = put(&c, "self", spec(&["x"], &["y", "self"])).await;
    assert_cycle(status, &body, "self → self", "on_failure[1]");

    // Naming jobs that do not exist yet is fine; the third edge of a → b → c → a is refused.
    assert_eq!(put(&c, "b", spec(&["c"], &[])).await.0, 201);
    assert_eq!(put(&c, "c", spec(&["later"], &["a"])).await.0, 201);
    let (status, body) = put(&c, "a", spec(&["unrelated"], &["b"])).await;
    assert_cycle(status, &body, "a → b → c → a", "on_failure[0]");
    assert_eq!(c.call(Method::GET, "/api/jobs/a", None).await?.0, 404, "a refused job is not stored");
    assert!(stored(&c, &keys(&c).state("a")).await.is_none(), "nor is its state");

    // Replacing c without the edge back to a breaks the cycle; then a may name b.
    assert_eq!(put(&c, "c", spec(&["later"], &[])).await.0, 200);
    let (status, created) = put(&c, "a", spec(&["b"], &[])).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["spec"]["on_success"], json!(["b"]));
    // ...and c may not name a again, through either list.
    let (status, body) = put(&c, "c", spec(&[], &["a"])).await;
    assert_cycle(status, &body, "c → a → b → c", "on_failure[0]");

    // A diamond is no cycle.
    assert_eq!(put(&c, "d1", spec(&["d2", "d3"], &[])).await.0, 201);
    assert_eq!(put(&c, "d2", spec(&["d4"], &[])).await.0, 201);
    assert_eq!(put(&c, "d3", spec(&[], &["d4"])).await.0, 201);
    assert_eq!(put(&c, "d4", spec(&[], &[])).await.0, 201);

    // The client's preconditions keep their answers on the checked path.
    let rev = c.get("/api/jobs/a").await?["revision"].as_i64().unwrap();
    let url = format!("{}/api/jobs/a", c.master.url);
    let stale = c.http.put(&url).header("If-Match", (rev - 1).to_string()).json(&spec(&["b"], &[])).send().await?;
    assert_eq!(stale.status(), 409);
    let body: Value = stale.json().await?;
    assert_eq!(body["error"]["code"], "conflict");
    assert!(body["error"]["message"].as_str().unwrap().contains("changed by someone else"), "{body}");
    let exists = c.http.put(&url).header("If-None-Match", "*").json(&spec(&["b"], &[])).send().await?;
    assert_eq!(exists.status(), 409);
    let fresh = c.http.put(&url).header("If-Match", rev.to_string()).json(&spec(&["b", "d1"], &[])).send().await?;
    assert_eq!(fresh.status(), 200);
    // A precondition that holds does not let a cycle through.
    let rev = c.get("/api/jobs/c").await?["revision"].as_i64().unwrap();
    let url = format!("{}/api/jobs/c", c.master.url);
    let resp = c.http.put(&url).header("If-Match", rev.to_string()).json(&spec(&["a"], &[])).send().await?;
    let status = resp.status().as_u16();
    assert_cycle(status, &resp.json().await?, "c → a → b → c", "on_success[0]");
    Ok(())
}

/// Builds the dependency graph of every job stored in the namespace.
async fn stored_graph(c: &Cluster) -> DependencyGraph {
    let k = keys(c);
    let mut etcd = c.etcd.client().await.unwrap();
    let resp = etcd.get(k.jobs_prefix(), Some(GetOptions::new().with_prefix())).await.unwrap();
    let mut graph = DependencyGraph::new();
    for kv in resp.kvs() {
        let Some(etcron_model::keys::Key::Job(job)) = k.parse(kv.key()) else { continue };
        let spec: Value = serde_json::from_slice(kv.value()).unwrap();
        let names = |list: &str| {
            spec[list].as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect::<Vec<_>>())
        };
        graph.set(
            &job,
            names("on_success").unwrap_or_default().into_iter().chain(names("on_failure").unwrap_or_default()),
        );
    }
    graph
}

#[tokio::test(flavor = "multi_thread")]
async fn two_masters_saving_both_halves_of_a_cycle_never_both_succeed() -> anyhow::Result<()> {
    let c = Cluster::start("jobs-race", 0).await?;
    let args = ["--mongodb-uri", c.mongo.uri.as_str(), "--mongodb-db", c.db.as_str()];
    let other = Master::start(&c.etcd.endpoint, &c.namespace, &c.logs, &args).await?;
    let send = |url: String, body: Value| {
        let req = c.http.put(url).json(&body);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    for round in 0..10 {
        let (a, b) = (format!("ra{round}"), format!("rb{round}"));
        let (ra, rb) = tokio::join!(
            send(format!("{}/api/jobs/{a}", c.master.url), spec(&[&b], &[])),
            send(format!("{}/api/jobs/{b}", other.url), spec(&[], &[&a])),
        );
        let ok = |(status, _): &(u16, Value)| status == &201;
        assert!(!(ok(&ra) && ok(&rb)), "round {round}: both halves of a cycle were saved: {ra:?} {rb:?}");
        assert!(ok(&ra) || ok(&rb), "round {round}: one of them must win: {ra:?} {rb:?}");
        for (status, body) in [&ra, &rb] {
            if *status != 201 {
                let code = body["error"]["code"].as_str().unwrap_or("");
                assert!(
                    (*status, code) == (400, "dependency_cycle") || (*status, code) == (409, "conflict"),
                    "round {round}: {status} {body}"
                );
            }
        }
    }
    let on_cycles = stored_graph(&c).await.jobs_on_cycles();
    assert!(on_cycles.is_empty(), "stored jobs on a cycle: {on_cycles:?}");
    let rechecks = [&c.master.proc, &other.proc]
        .iter()
        .map(|p| p.log_text().matches("jobs changed during the dependency check").count())
        .sum::<usize>();
    eprintln!("saves that found the jobs changed and checked again: {rechecks}");
    Ok(())
}

fn job_state(bytes: &[u8]) -> JobState {
    serde_json::from_slice(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn create_writes_the_state_replace_keeps_it() -> anyhow::Result<()> {
    let c = Cluster::start("jobs-state", 0).await?;
    let k = keys(&c);
    for (job, body) in [("plain", spec(&[], &[])), ("with-deps", spec(&["plain"], &[]))] {
        let before = now_ms();
        assert_eq!(put(&c, job, body.clone()).await.0, 201);
        let after = now_ms();
        let (value, rev) = stored(&c, &k.state(job)).await.expect("state written on create");
        let state = job_state(&value);
        assert!((before..=after).contains(&state.last_tick_ms), "{job}: {state:?} not in {before}..={after}");
        assert_eq!(value, state.to_bytes(), "{job}: stored in the fixed form");

        let mut replaced = body.clone();
        replaced["description"] = json!("replaced");
        assert_eq!(put(&c, job, replaced).await.0, 200);
        assert_eq!(c.call(Method::POST, &format!("/api/jobs/{job}/pause"), None).await?.0, 200);
        assert_eq!(stored(&c, &k.state(job)).await, Some((value, rev)), "{job}: replace and pause keep the state");
    }

    // A state already stored (workers keep it moving forward) is never overwritten by a create.
    let mut etcd = c.etcd.client().await?;
    let old = JobState { last_tick_ms: 1_700_000_000_000 }.to_bytes();
    etcd.put(k.state("pre"), old.clone(), None).await?;
    assert_eq!(put(&c, "pre", spec(&[], &[])).await.0, 201);
    assert_eq!(stored(&c, &k.state("pre")).await.map(|(v, _)| v), Some(old));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_takes_the_state_and_pending_run_requests_along() -> anyhow::Result<()> {
    let c = Cluster::start("jobs-delete", 0).await?;
    let k = keys(&c);
    // `dx2` shares a name prefix with `dx`: nothing of it may go.
    for job in ["dx", "dx2"] {
        assert_eq!(put(&c, job, spec(&[], &[])).await.0, 201);
    }
    let mut etcd = c.etcd.client().await?;
    let request = serde_json::to_vec(&TriggerRequest::manual(now_ms(), "test"))?;
    for (job, id) in [("dx", "r1"), ("dx", "retry-2"), ("dx2", "r1")] {
        etcd.put(k.trigger(job, id), request.clone(), None).await?;
    }
    // What running executions own: claim, running marker, lock. They stay.
    let execution = ExecutionId::new("dx", Tick::Scheduled(1_700_000_000_000));
    let owned = [k.claim(&execution), k.running(&execution), k.lock("dx", &etcron_model::keys::Part::Whole)];
    for key in &owned {
        etcd.put(key.as_str(), "{}", None).await?;
    }

    let (status, _) = c.call(Method::DELETE, "/api/jobs/dx", None).await?;
    assert_eq!(status, 204);
    assert!(stored(&c, &k.job("dx")).await.is_none());
    assert!(stored(&c, &k.state("dx")).await.is_none(), "state deleted with the job");
    let pending = etcd.get(k.job_trigger_prefix("dx"), Some(GetOptions::new().with_prefix())).await?;
    assert_eq!(pending.kvs().len(), 0, "pending run requests deleted with the job");
    for key in &owned {
        assert!(stored(&c, key).await.is_some(), "{key} belongs to a running execution and stays");
    }
    assert!(stored(&c, &k.job("dx2")).await.is_some());
    assert!(stored(&c, &k.state("dx2")).await.is_some());
    assert!(stored(&c, &k.trigger("dx2", "r1")).await.is_some(), "another job's request stays");

    // A job created again under the same name starts with a fresh state.
    let before = now_ms();
    assert_eq!(put(&c, "dx", spec(&[], &[])).await.0, 201);
    let (value, _) = stored(&c, &k.state("dx")).await.expect("state written again");
    assert!(job_state(&value).last_tick_ms >= before);
    Ok(())
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// `eligible_workers` of every job in `GET /api/jobs`.
async fn eligible(c: &Cluster) -> BTreeMap<String, Value> {
    let list = c.get("/api/jobs").await.unwrap();
    list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["name"].as_str().unwrap().to_owned(), j["eligible_workers"].clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn selectors_are_matched_against_live_workers() -> anyhow::Result<()> {
    let mut c = Cluster::start("jobs-selectors", 0).await?;
    for (id, pairs) in [
        ("eu-batch", &[("region", "eu"), ("tier", "batch")][..]),
        ("eu-web", &[("region", "eu"), ("tier", "web")][..]),
        ("us-batch", &[("region", "us"), ("tier", "batch")][..]),
    ] {
        let mut opts = WorkerOpts::new(id);
        opts.labels = labels(pairs);
        c.add_worker(opts)?;
    }
    c.wait_workers(3).await?;
    let with_selector = |pairs: &[(&str, &str)]| {
        let mut s = spec(&[], &[]);
        s["selector"] = json!(labels(pairs));
        s
    };
    c.put_job("anywhere", spec(&[], &[])).await?;
    c.put_job("eu", with_selector(&[("region", "eu")])).await?;
    c.put_job("eu-batch-only", with_selector(&[("region", "eu"), ("tier", "batch")])).await?;
    c.put_job("mars", with_selector(&[("region", "mars")])).await?;

    let expected: BTreeMap<String, Value> =
        [("anywhere", 3), ("eu", 2), ("eu-batch-only", 1), ("mars", 0)].map(|(j, n)| (j.to_owned(), json!(n))).into();
    assert_eq!(eligible(&c).await, expected);
    let one = c.get("/api/jobs/mars").await?;
    assert_eq!(one["eligible_workers"], 0);
    assert_eq!(c.get("/api/jobs/eu").await?["eligible_workers"], 2);
    let workers = c.get("/api/workers").await?;
    assert_eq!(workers["workers"].as_array().map(Vec::len), Some(3));
    assert_eq!(workers["unmatched_jobs"], json!([{"job": "mars", "selector": {"region": "mars"}}]));
    assert_eq!(workers["unmatched_total"], 1);

    // The only worker a job may run on leaves: the job becomes unmatched.
    let leaving = c.workers.iter().position(|w| w.opts.id == "eu-batch").unwrap();
    c.workers[leaving].proc.signal(Sig::SIGTERM)?;
    c.wait_workers(2).await?;
    let workers = c.get("/api/workers").await?;
    assert_eq!(
        workers["unmatched_jobs"],
        json!([{"job": "eu-batch-only", "selector": {"region": "eu", "tier": "batch"}},
               {"job": "mars", "selector": {"region": "mars"}}])
    );
    assert_eq!(c.get("/api/jobs/eu-batch-only").await?["eligible_workers"], 0);
    assert_eq!(eligible(&c).await["anywhere"], 2);
    c.workers[leaving].proc.wait_exit(Duration::from_secs(30))?;
    let (eu, mars) = (with_selector(&[("region", "eu")]), with_selector(&[("region", "mars")]));
    unmatched_are_bounded_and_follow_edits(&c, eu, &mars).await
}

/// The unmatched jobs (from the master's job index) follow an edit made just before the read,
/// and list the first 100 by name with the total.
async fn unmatched_are_bounded_and_follow_edits(c: &Cluster, eu: Value, mars: &Value) -> anyhow::Result<()> {
    c.put_job("mars", eu).await?;
    let workers = c.get("/api/workers").await?;
    assert_eq!(workers["unmatched_jobs"][1], Value::Null, "an edit is seen by the next read: {workers}");
    assert_eq!(workers["unmatched_total"], 1, "{workers}");
    let many: Vec<Value> = (0..101).map(|i| json!({"job": format!("z-{i:03}"), "op": "put", "spec": mars})).collect();
    assert_eq!(c.call(Method::POST, "/api/batch", Some(json!({"changes": many}))).await?.0, 200);
    let workers = c.get("/api/workers").await?;
    let names: Vec<&str> =
        workers["unmatched_jobs"].as_array().unwrap().iter().map(|j| j["job"].as_str().unwrap()).collect();
    assert_eq!((names.len(), names[0], names[1], names[99]), (100, "eu-batch-only", "z-000", "z-098"));
    assert_eq!(workers["unmatched_total"], 102, "{workers}");
    assert_eq!(workers["unmatched_jobs"][1]["selector"], json!({"region": "mars"}));
    Ok(())
}
