//! `POST /api/batch` against a real etcd and master: many jobs written in few transactions,
//! each change answered on its own (preconditions, bad specs, secrets, deletes, saves that
//! change nothing and so write nothing, through PUT too), the batch
//! checked for dependency cycles as a whole, a batch racing single saves through another
//! master never storing a cycle, and one audit entry per change.

use std::time::Duration;

use etcd_client::GetOptions;
use etcron_model::dependency::DependencyGraph;
use etcron_model::keys::{Key, Keys};
use etcron_tests::{wait_for, Cluster, Master};
use reqwest::Method;
use serde_json::{json, Value};

fn spec(on_success: &[&str]) -> Value {
    json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": "true"}, "on_success": on_success})
}

fn put(job: &str, spec: Value) -> Value {
    json!({"job": job, "op": "put", "spec": spec})
}

/// Job `s`'s spec with its secret `TOKEN` at `token`.
fn same_but(token: &str) -> Value {
    json!({"schedule": "@every 2h", "task": {"kind": "shell", "command": "true", "secret_env": {"TOKEN": token}}})
}

async fn batch(c: &Cluster, changes: Vec<Value>) -> (u16, Value) {
    c.call(Method::POST, "/api/batch", Some(json!({ "changes": changes }))).await.unwrap()
}

/// `(job, status)` of every result, in order.
fn statuses(body: &Value) -> Vec<(String, u64)> {
    body["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {body}"))
        .iter()
        .map(|r| (r["job"].as_str().unwrap().to_owned(), r["status"].as_u64().unwrap()))
        .collect()
}

async fn stored_graph(c: &Cluster) -> DependencyGraph {
    let keys = Keys::new(&c.namespace).unwrap();
    let mut etcd = c.etcd.client().await.unwrap();
    let resp = etcd.get(keys.jobs_prefix(), Some(GetOptions::new().with_prefix())).await.unwrap();
    let mut graph = DependencyGraph::new();
    for kv in resp.kvs() {
        if let Some(Key::Job(job)) = keys.parse(kv.key()) {
            let v: Value = serde_json::from_slice(kv.value()).unwrap();
            let edges: Vec<String> =
                v["on_success"].as_array().into_iter().flatten().map(|e| e.as_str().unwrap().to_owned()).collect();
            graph.set(&job, edges);
        }
    }
    graph
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_writes_many_jobs_in_few_transactions_and_answers_each_change() -> anyhow::Result<()> {
    let c = Cluster::start("batch-many", 0).await?;

    // 250 creates: three transactions of at most 100 changes.
    let creates: Vec<Value> = (0..250)
        .map(|i| json!({"job": format!("j{i:03}"), "op": "put", "spec": spec(&[]), "if_none_match": "*"}))
        .collect();
    let (status, body) = batch(&c, creates).await;
    assert_eq!(status, 200, "{body}");
    assert!(statuses(&body).iter().all(|(_, s)| *s == 201), "{body}");
    assert_eq!(body["transactions"], 3, "{body}");
    assert_eq!(body["results"][7]["outcome"], "created");
    assert_eq!(c.get("/api/jobs").await?["jobs"].as_array().unwrap().len(), 250);

    // Every kind of answer in one batch; each change stands on its own.
    let j000 = c.get("/api/jobs/j000").await?;
    let rev = j000["revision"].as_i64().unwrap();
    let mut edited = spec(&[]);
    edited["task"]["command"] = json!("echo edited");
    let (status, body) = batch(
        &c,
        vec![
            json!({"job": "j000", "op": "put", "spec": edited, "if_match": rev}),
            json!({"job": "j001", "op": "put", "spec": spec(&[]), "if_match": rev - 1}),
            json!({"job": "j002", "op": "put", "spec": spec(&[]), "if_none_match": "*"}),
            json!({"job": "j003", "op": "delete"}),
            json!({"job": "nope", "op": "delete"}),
            json!({"job": "bad-spec", "op": "put", "spec": {"schedule": "@every 1h", "task": {"kind": "shell", "comand": "x"}}}),
            json!({"job": "Bad Name", "op": "put", "spec": spec(&[])}),
            json!({"job": "new-secret", "op": "put", "spec": {"schedule": "@every 1h",
                   "task": {"kind": "shell", "command": "true", "secret_env": {"TOKEN": null}}}}),
            put("fresh", spec(&[])),
            json!({"job": "j004", "op": "delete", "if_match": 1}),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let want: Vec<(String, u64)> = [
        ("j000", 200),
        ("j001", 409),
        ("j002", 409),
        ("j003", 204),
        ("nope", 404),
        ("bad-spec", 400),
        ("Bad Name", 400),
        ("new-secret", 400),
        ("fresh", 201),
        ("j004", 409),
    ]
    .iter()
    .map(|(j, s)| ((*j).to_owned(), *s))
    .collect();
    assert_eq!(statuses(&body), want, "{body}");
    let r = &body["results"];
    assert!(r[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&format!("your edit was based on revision {}", rev - 1)));
    assert!(r[2]["error"]["message"].as_str().unwrap().contains("already exists"));
    assert_eq!(r[5]["error"]["field"], "spec.task.comand", "{body}");
    assert_eq!(r[6]["error"]["field"], "job", "{body}");
    assert_eq!(r[7]["error"]["field"], "spec.task.secret_env.TOKEN", "{body}");
    assert!(r[0]["revision"].as_i64().unwrap() > rev);
    assert_eq!(c.get("/api/jobs/j000").await?["spec"]["task"]["command"], "echo edited");
    assert_eq!(c.call(Method::GET, "/api/jobs/j003", None).await?.0, 404);
    assert_eq!(c.call(Method::GET, "/api/jobs/j004", None).await?.0, 200, "a stale delete deletes nothing");

    // A secret kept with null keeps the stored value, as PUT does.
    let with_secret =
        json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": "true", "secret_env": {"TOKEN": "t-1"}}});
    assert_eq!(batch(&c, vec![put("s", with_secret)]).await.1["results"][0]["status"], 201);
    let keep =
        json!({"schedule": "@every 2h", "task": {"kind": "shell", "command": "true", "secret_env": {"TOKEN": null}}});
    assert_eq!(batch(&c, vec![put("s", keep)]).await.1["results"][0]["status"], 200);
    let key = Keys::new(&c.namespace)?.job("s");
    let value = c.etcd.client().await?.get(key, None).await?.kvs()[0].value().to_vec();
    let stored: Value = serde_json::from_slice(&value)?;
    assert_eq!(
        (stored["schedule"].as_str(), stored["task"]["secret_env"]["TOKEN"].as_str()),
        (Some("@every 2h"), Some("t-1"))
    );

    // A real save of what is stored writes nothing, secret values included (a wrong value
    // overwrites the secret, so a save confirms no guess for free): the same PUT twice, the
    // second `unchanged` at the same revision and without a new saved version; a batch change
    // likewise, its outcome `unchanged`; a stale `if_match` is refused as for a write.
    let versions = || async { c.get("/api/jobs/s/history").await.unwrap()["versions"].as_array().unwrap().len() };
    let t3 = same_but("t-3");
    let (status, first) = c.call(Method::PUT, "/api/jobs/s", Some(t3.clone())).await?;
    assert_eq!((status, &first["unchanged"]), (200, &json!(false)), "{first}");
    let (rev, kept) = (first["revision"].as_i64().unwrap(), versions().await);
    let (status, again) = c.call(Method::PUT, "/api/jobs/s", Some(t3.clone())).await?;
    assert_eq!((status, &again["unchanged"], again["revision"].as_i64()), (200, &json!(true), Some(rev)), "{again}");
    let (status, body) = batch(&c, vec![json!({"job": "s", "op": "put", "spec": t3.clone(), "if_match": rev})]).await;
    let r = &body["results"][0];
    assert_eq!(
        (status, &r["status"], &r["outcome"], r["revision"].as_i64()),
        (200, &json!(200), &json!("unchanged"), Some(rev)),
        "{body}"
    );
    let (_, body) = batch(&c, vec![json!({"job": "s", "op": "put", "spec": t3.clone(), "if_match": rev - 1})]).await;
    assert_eq!(body["results"][0]["status"], 409, "{body}");
    assert_eq!((c.get("/api/jobs/s").await?["revision"].as_i64(), versions().await), (Some(rev), kept));
    let key = Keys::new(&c.namespace)?.job("s");
    let kv = c.etcd.client().await?.get(key.as_str(), None).await?.kvs()[0].clone();
    assert_eq!(kv.mod_revision(), rev, "nothing was put");
    // Another secret value is written.
    let (status, body) = batch(&c, vec![put("s", same_but("t-1"))]).await;
    assert_eq!((status, &body["results"][0]["outcome"]), (200, &json!("updated")), "{body}");
    assert!(body["results"][0]["revision"].as_i64().unwrap() > rev && versions().await == kept + 1, "{body}");

    // A dry run answers what each change would do, but never whether a secret value sent
    // equals the stored one (that would confirm guesses): the right value and a wrong one get
    // the same answer; only a spec keeping every secret (null) can be `unchanged`.
    let same =
        json!({"schedule": "@every 2h", "task": {"kind": "shell", "command": "true", "secret_env": {"TOKEN": "t-1"}}});
    let other =
        json!({"schedule": "@every 2h", "task": {"kind": "shell", "command": "true", "secret_env": {"TOKEN": "t-2"}}});
    let kept =
        json!({"schedule": "@every 2h", "task": {"kind": "shell", "command": "true", "secret_env": {"TOKEN": null}}});
    let body = json!({"dry_run": true, "changes": [put("s", kept), {"job": "j005", "op": "delete"}, put("brand-new", spec(&[]))]});
    let (status, planned) = c.call(Method::POST, "/api/batch", Some(body)).await?;
    assert_eq!(status, 200, "{planned}");
    let outcomes: Vec<&str> =
        planned["results"].as_array().unwrap().iter().map(|r| r["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["unchanged", "delete", "create"], "{planned}");
    let guess = |value: Value| {
        let body = json!({"dry_run": true, "changes": [put("s", value)]});
        async { c.call(Method::POST, "/api/batch", Some(body)).await.unwrap().1 }
    };
    let (right, wrong) = (guess(same).await, guess(other).await);
    assert_eq!(right, wrong, "the answer does not depend on the stored value");
    assert_eq!(wrong["results"][0]["outcome"], "update", "{wrong}");
    assert_eq!(wrong["results"][0]["secrets_changed"], json!(["task.secret_env.TOKEN"]), "{wrong}");
    assert!(!wrong.to_string().contains("t-1") && !wrong.to_string().contains("t-2"), "values never shown");
    assert_eq!(c.call(Method::GET, "/api/jobs/j005", None).await?.0, 200, "a dry run deletes nothing");
    assert_eq!(c.call(Method::GET, "/api/jobs/brand-new", None).await?.0, 404, "nor creates");

    // Whole-request errors change nothing.
    let (status, body) = batch(&c, vec![put("dup", spec(&[])), put("dup", spec(&[]))]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("changes[1].job")), "{body}");
    let (status, body) = batch(&c, (0..501).map(|i| put(&format!("m{i}"), spec(&[]))).collect()).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("changes")), "{body}");
    let (status, body) = batch(&c, vec![json!({"job": "x", "op": "rename"})]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("changes[0]")), "{body}");
    for job in ["dup", "m0", "x"] {
        assert_eq!(c.call(Method::GET, &format!("/api/jobs/{job}"), None).await?.0, 404, "{job}");
    }

    // One audit entry per change made, found under the job.
    let entries = wait_for(Duration::from_secs(20), "the batch's audit entries", || async {
        let page = c.get("/api/audit?job=j000").await.ok()?;
        let entries = page["entries"].as_array()?.clone();
        (entries.len() >= 2).then_some(entries)
    })
    .await?;
    let statuses: Vec<u64> = entries.iter().filter_map(|e| e["status"].as_u64()).collect();
    assert!(statuses.contains(&201) && statuses.contains(&200), "{entries:?}");
    assert!(entries.iter().all(|e| e["action"] == "job.put" && e["path"] == "/api/batch"), "{entries:?}");
    let edit = entries.iter().find(|e| e["status"] == 200).unwrap();
    assert_eq!(edit["after"]["task"]["command"], "echo edited");
    assert_eq!(edit["before"]["task"]["command"], "true");

    // Refused changes are audited too, each under its job with its status and why.
    for (job, status) in [("j001", 409), ("nope", 404), ("bad-spec", 400)] {
        let entry = wait_for(Duration::from_secs(20), &format!("the refusal of {job} audited"), || async {
            let page = c.get(&format!("/api/audit?job={job}")).await.ok()?;
            page["entries"].as_array()?.iter().find(|e| e["status"] == status).cloned()
        })
        .await?;
        assert_eq!(entry["path"], "/api/batch", "{entry}");
        assert!(entry["detail"]["error"]["code"].as_str().is_some_and(|c| !c.is_empty()), "{entry}");
        assert!(entry["detail"]["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{entry}");
        assert_eq!(entry["detail"]["batch"], true, "{entry}");
    }
    // A dry run is audited with the jobs it was about and what each would do.
    let plans = wait_for(Duration::from_secs(20), "the dry runs audited", || async {
        let page = c.get("/api/audit?job=s&action=job.dry_run").await.ok()?;
        let entries = page["entries"].as_array()?.clone();
        (entries.len() >= 3).then_some(entries)
    })
    .await?;
    let outcomes: Vec<&str> = plans.iter().filter_map(|e| e["detail"]["outcome"].as_str()).collect();
    assert!(outcomes.contains(&"unchanged") && outcomes.contains(&"update"), "{plans:?}");
    assert!(!format!("{plans:?}").contains("t-1"), "secret values never audited");
    // A save that wrote nothing is audited as such, through PUT and through a batch.
    let quiet = wait_for(Duration::from_secs(20), "the unchanged saves audited", || async {
        let page = c.get("/api/audit?job=s&action=job.put").await.ok()?;
        let kept: Vec<Value> =
            page["entries"].as_array()?.iter().filter(|e| e["detail"]["unchanged"] == true).cloned().collect();
        (kept.len() >= 2).then_some(kept)
    })
    .await?;
    let paths: Vec<&str> = quiet.iter().filter_map(|e| e["path"].as_str()).collect();
    assert!(paths.contains(&"/api/jobs/s") && paths.contains(&"/api/batch"), "{quiet:?}");
    assert!(quiet.iter().all(|e| e["status"] == 200 && e["after"].is_null()), "{quiet:?}");
    assert!(!format!("{quiet:?}").contains("t-3"), "secret values never audited");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_is_checked_for_cycles_as_a_whole_and_never_stores_one_racing_other_saves() -> anyhow::Result<()> {
    let c = Cluster::start("batch-cycles", 0).await?;
    assert_eq!(batch(&c, vec![put("a", spec(&["b"])), put("b", spec(&[]))]).await.1["transactions"], 1);

    // a → b becomes b → a in one batch; c → d → c refuses the first save that closes it.
    let (status, body) =
        batch(&c, vec![put("a", spec(&[])), put("b", spec(&["a"])), put("c", spec(&["d"])), put("d", spec(&["c"]))])
            .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        statuses(&body),
        vec![("a".into(), 200), ("b".into(), 200), ("c".into(), 400), ("d".into(), 201)],
        "{body}"
    );
    assert_eq!(body["results"][2]["error"]["code"], "dependency_cycle");
    assert_eq!(body["results"][2]["error"]["field"], "spec.on_success[0]");
    assert!(stored_graph(&c).await.jobs_on_cycles().is_empty());

    // A batch through one master and a single save through another, each closing half of a
    // cycle, ten rounds: never both.
    let args = ["--mongodb-uri", c.mongo.uri.as_str(), "--mongodb-db", c.db.as_str()];
    let other = Master::start(&c.etcd.endpoint, &c.namespace, &c.logs, &args).await?;
    for round in 0..10 {
        let (x, y) = (format!("x{round}"), format!("y{round}"));
        let filler: Vec<Value> = (0..20).map(|i| put(&format!("f{round}-{i}"), spec(&[]))).collect();
        let mut changes = filler;
        changes.push(put(&x, spec(&[&y])));
        let single = c.http.put(format!("{}/api/jobs/{y}", other.url)).json(&spec(&[&x])).send();
        let ((_, body), single) = tokio::join!(batch(&c, changes), single);
        let single = single?.status().as_u16();
        let batched = body["results"][20]["status"].as_u64().unwrap();
        assert!(!(batched == 201 && single == 201), "round {round}: both halves of a cycle were saved: {body}");
        assert!(batched == 201 || single == 201, "round {round}: one must win: {batched} {single}");
        assert!(
            statuses(&body)[..20].iter().all(|(_, s)| *s == 201),
            "round {round}: the rest of the batch is saved: {body}"
        );
    }
    let on_cycles = stored_graph(&c).await.jobs_on_cycles();
    assert!(on_cycles.is_empty(), "stored jobs on a cycle: {on_cycles:?}");
    Ok(())
}
