//! `GET /api/jobs` a page at a time: pages by cursor in name order that together list every job
//! once, server-side filters (name prefix, label, state, team, health), each page's record
//! summaries, parameters refused naming the field, etcronctl listing through pages, and the
//! whole list refused over `WHOLE_LIST_MAX` jobs.

use std::collections::BTreeSet;

use etcd_client::{Txn, TxnOp};
use etcron_model::keys::Keys;
use etcron_tests::Cluster;
use reqwest::Method;
use serde_json::{json, Value};

fn spec(labels: Value) -> Value {
    json!({"schedule": "@yearly", "labels": labels, "task": {"kind": "shell", "command": "echo paged"}})
}

fn names(page: &Value) -> Vec<String> {
    page["jobs"].as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_are_listed_a_page_at_a_time_with_filters_on_the_server() -> anyhow::Result<()> {
    let c = Cluster::start("job-pages", 1).await?;
    let mut all = BTreeSet::new();
    for i in 0..23 {
        let name = format!("a-{i:02}");
        let tier = if i % 5 == 0 { "gold" } else { "plain" };
        c.put_job(&name, spec(json!({"tier": tier}))).await?;
        all.insert(name);
    }
    for i in 0..4 {
        let name = format!("b-{i:02}");
        c.put_job(&name, spec(json!({}))).await?;
        all.insert(name);
    }
    assert_eq!(c.call(Method::POST, "/api/jobs/a-03/pause", None).await?.0, 200);

    // Pages of 10 by cursor: every job once, in name order; the last page has no cursor.
    let (mut listed, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/jobs?limit=10&cursor={c}"),
            None => "/api/jobs?limit=10".to_owned(),
        };
        let page = c.get(&path).await?;
        pages += 1;
        assert!(page["jobs"].as_array().unwrap().len() <= 10, "{page}");
        assert_eq!(page["partial"], false, "no filter: never cut by the scan: {page}");
        listed.extend(names(&page));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(listed, all.iter().cloned().collect::<Vec<_>>(), "each once, in order");

    // Filters on the server.
    assert_eq!(names(&c.get("/api/jobs?limit=100&prefix=b-").await?), ["b-00", "b-01", "b-02", "b-03"]);
    let gold = names(&c.get("/api/jobs?limit=100&label=tier%3Dgold").await?);
    assert_eq!(gold, ["a-00", "a-05", "a-10", "a-15", "a-20"]);
    let paused = c.get("/api/jobs?limit=100&state=paused").await?;
    assert_eq!(names(&paused), ["a-03"]);
    assert_eq!(paused["jobs"][0]["paused"]["by"], "anonymous", "{paused}");
    let enabled = names(&c.get("/api/jobs?limit=100&state=enabled").await?);
    assert_eq!(enabled.len(), all.len() - 1);
    assert_eq!(names(&c.get("/api/jobs?limit=100&prefix=a-1&label=tier%3Dgold").await?), ["a-10", "a-15"]);
    // By label, pages of 2 from the master's index of labels: every gold job once, in order.
    let first = c.get("/api/jobs?limit=2&label=tier%3Dgold").await?;
    assert_eq!(
        (names(&first), first["next_cursor"].as_str()),
        (vec!["a-00".to_owned(), "a-05".to_owned()], Some("a-05"))
    );
    let second = c.get("/api/jobs?limit=2&label=tier%3Dgold&cursor=a-05").await?;
    assert_eq!(names(&second), ["a-10", "a-15"]);
    let last = c.get("/api/jobs?limit=2&label=tier%3Dgold&cursor=a-15").await?;
    assert_eq!((names(&last), &last["next_cursor"]), (vec!["a-20".to_owned()], &Value::Null));
    // A label changed (or given) shows at once in the next page: the index is read at etcd's
    // revision of the request.
    c.put_job("a-05", spec(json!({"tier": "plain"}))).await?;
    c.put_job("b-03", spec(json!({"tier": "gold"}))).await?;
    let gold = names(&c.get("/api/jobs?limit=100&label=tier%3Dgold").await?);
    assert_eq!(gold, ["a-00", "a-10", "a-15", "a-20", "b-03"]);
    c.put_job("a-05", spec(json!({"tier": "gold"}))).await?;
    c.put_job("b-03", spec(json!({}))).await?;
    // A cursor outside the prefix never widens it.
    assert_eq!(names(&c.get("/api/jobs?limit=100&prefix=b-&cursor=a-05").await?).len(), 4);
    assert_eq!(names(&c.get("/api/jobs?limit=100&prefix=a-&cursor=b-00").await?).len(), 0);

    // A page's summaries: the job that ran has its record counted.
    c.wait_workers(1).await?;
    let (status, run) = c.call(Method::POST, "/api/jobs/b-01/run", None).await?;
    assert!((200..300).contains(&status), "{run}");
    c.wait_executions("job=b-01&status=succeeded", "b-01's run", |l| !l.is_empty()).await?;
    let page = c.get("/api/jobs?limit=2&prefix=b-").await?;
    assert_eq!(names(&page), ["b-00", "b-01"]);
    assert_eq!(page["jobs"][1]["summary"]["total_24h"], 1, "{page}");
    assert_eq!(page["jobs"][0]["summary"]["total_24h"], 0, "{page}");
    assert_eq!(page["next_cursor"], "b-01");

    // Health, on the server, from the same summaries: the last run that ended failed,
    // succeeded, or none did in the window.
    let failing = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "exit 3"}});
    c.put_job("c-fail", failing).await?;
    all.insert("c-fail".to_owned());
    let run = c.run_now("c-fail").await?;
    c.record_when(&run, "failed").await?;
    let failing = c.get("/api/jobs?health=failing").await?;
    assert_eq!(names(&failing), ["c-fail"]);
    assert_eq!(failing["jobs"][0]["summary"]["last_finished"]["status"], "failed", "{failing}");
    let ok = c.get("/api/jobs?limit=1&health=ok").await?;
    assert_eq!(names(&ok), ["b-01"]);
    assert_eq!((ok["next_cursor"].as_str(), &ok["partial"]), (None, &json!(false)), "{ok}");
    let never = names(&c.get("/api/jobs?limit=1000&health=never").await?);
    assert_eq!(never.len(), all.len() - 2);
    assert!(!never.contains(&"b-01".to_owned()) && !never.contains(&"c-fail".to_owned()));
    assert_eq!(names(&c.get("/api/jobs?prefix=a-&health=failing").await?).len(), 0);

    // Refusals name the parameter.
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("prefix=A", "prefix"),
        ("label=tier", "label"),
        ("state=sleeping", "state"),
        ("health=sick", "health"),
        ("cursor=..%2F", "cursor"),
    ] {
        let (status, e) = c.call(Method::GET, &format!("/api/jobs?{query}"), None).await?;
        assert_eq!((status, e["error"]["field"].as_str()), (400, Some(field)), "{query}: {e}");
    }

    // The whole list without paging parameters, as before; etcronctl lists through pages.
    assert_eq!(names(&c.get("/api/jobs").await?).len(), all.len());
    let out = std::process::Command::new(etcron_tests::bin("etcronctl")?)
        .args(["jobs", "ls", "-o", "json"])
        .env("ETCRON_SERVER", &c.master.url)
        .env_remove("ETCRON_TOKEN")
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(names(&doc), all.iter().cloned().collect::<Vec<_>>());

    // Over WHOLE_LIST_MAX (10 000) jobs, written straight into etcd, the whole list is refused
    // naming `limit`; pages still answer, a filtered one cut by the scan budget says so.
    write_jobs(&c, 10_001).await?;
    let (status, e) = c.call(Method::GET, "/api/jobs", None).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("limit")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("a page at a time"), "{e}");
    assert_eq!(c.call(Method::GET, "/api/jobs?team=payments", None).await?.0, 400);
    assert_eq!(names(&c.get("/api/jobs?limit=1000").await?).len(), 1000);
    // Health in chunks over the scan budget: the failing job, then the scan's end said.
    let failing = c.get("/api/jobs?health=failing").await?;
    assert_eq!(names(&failing), ["c-fail"]);
    assert_eq!(failing["partial"], true, "{failing}");
    assert!(failing["next_cursor"].as_str().is_some_and(|n| n.starts_with("z-")), "{failing}");
    Ok(())
}

/// Writes `n` jobs `z-00000`… straight into etcd (as the master stores them), 128 a transaction.
async fn write_jobs(c: &Cluster, n: usize) -> anyhow::Result<()> {
    let keys = Keys::new(&c.namespace)?;
    let mut kv = c.etcd.client().await?.kv_client();
    let value = serde_json::to_vec(&spec(json!({})))?;
    for start in (0..n).step_by(128) {
        let ops =
            (start..(start + 128).min(n)).map(|i| TxnOp::put(keys.job(&format!("z-{i:05}")), value.clone(), None));
        kv.txn(Txn::new().and_then(ops.collect::<Vec<_>>())).await?;
    }
    Ok(())
}
