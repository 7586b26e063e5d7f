//! Stored specs this version refuses (as an upgrade with stricter rules leaves them, here written
//! straight into etcd): the master names them (`GET /api/cluster/specs`, to the callers who see
//! them), counts them (`/readyz`, `etcron_master_unschedulable_jobs`), and `etcronctl jobs
//! check` lists each with its field and the rewrite, exiting 8 until they are fixed; the
//! console's banner names them on every page (Chromium).

use std::time::Duration;

use etcron_tests::{bin, browser_with, scrape, wait_for, Cluster};
use serde_json::{json, Value};

/// Runs etcronctl against the cluster's master: exit code and stdout.
async fn ctl(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(bin("etcronctl").unwrap());
    cmd.args(args).env("ETCRON_SERVER", &c.master.url).env_remove("ETCRON_TOKEN");
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await.expect("etcronctl hung").unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_stored_specs_are_named_counted_and_checked_before_an_upgrade() -> anyhow::Result<()> {
    let cluster = Cluster::start_with("spec-check", 0, false, &["--spec-check-every", "10s"]).await?;
    let result = run(&cluster).await;
    if result.is_err() {
        cluster.dump_logs();
    }
    result
}

async fn run(cluster: &Cluster) -> anyhow::Result<()> {
    let task = json!({"kind": "shell", "command": "true"});
    cluster.put_job("weekend", json!({"schedule": "0 9 * * sat-sun", "task": task})).await?;
    // What an earlier version accepted and this one refuses, as it would be stored.
    let refused = json!({"schedule": "0 0 ?,1 * 5", "task": task, "team": "ops"});
    let mut etcd = cluster.etcd.client().await?;
    let key = format!("{}/jobs/old-question", cluster.namespace);
    etcd.put(key.as_str(), refused.to_string(), None).await?;

    let listed =
        |body: &Value| body["refused"].as_array().is_some_and(|r| r.iter().any(|x| x["job"] == "old-question"));
    let specs = wait_for(Duration::from_secs(30), "the refused spec listed", || async {
        cluster.get("/api/cluster/specs").await.ok().filter(|b| listed(b))
    })
    .await?;
    assert_eq!(specs["checked"], 2, "{specs}");
    let entry = &specs["refused"][0];
    assert_eq!((entry["team"].as_str(), entry["field"].as_str()), (Some("ops"), Some("schedule")), "{specs}");
    assert!(entry["error"].as_str().is_some_and(|e| e.contains("? (any day) stands alone")), "{specs}");

    let ready = cluster.get("/readyz").await?;
    assert_eq!(ready["job_specs"]["refused"], 1, "{ready}");
    assert!(ready["job_specs"]["warning"].as_str().is_some_and(|w| w.contains("etcronctl jobs check")), "{ready}");
    assert!(!ready.to_string().contains("old-question"), "/readyz names no job: {ready}");
    let metrics = scrape(&format!("{}/metrics", cluster.master.url), None).await?;
    assert_eq!(metrics.get("etcron_master_unschedulable_jobs", &[]), Some(1.0));
    // The console's banner, on every page (web/tests/specs.mjs; a screenshot in the logs).
    browser_with("specs.mjs", &cluster.master.url, &cluster.logs, &[], &[])?;

    let (code, stdout, stderr) = ctl(cluster, &["jobs", "check"]).await;
    assert_eq!(code, 8, "exit 8 while a spec is refused: {stdout} {stderr}");
    assert!(
        stdout.contains("old-question") && stdout.contains("schedule") && stdout.contains("stands alone"),
        "{stdout}"
    );
    assert!(!stdout.contains("weekend"), "an accepted spec is not listed: {stdout}");
    assert!(stderr.contains("1 of 2 stored jobs are refused"), "{stderr}");
    let (code, json_out, _) = ctl(cluster, &["jobs", "check", "-o", "json"]).await;
    let doc: Value = serde_json::from_str(&json_out)?;
    assert_eq!(
        (code, doc["checked"].as_u64(), doc["refused"][0]["by"].as_str()),
        (8, Some(2), Some("master")),
        "{doc}"
    );

    // Fixed the way the error says: the next check finds nothing, and the check exits 0.
    cluster.put_job("old-question", json!({"schedule": "0 0 * * 5", "task": task, "team": "ops"})).await?;
    wait_for(Duration::from_secs(30), "no refused spec listed", || async {
        cluster.get("/api/cluster/specs").await.ok().filter(|b| b["refused"].as_array().is_some_and(Vec::is_empty))
    })
    .await?;
    let metrics = scrape(&format!("{}/metrics", cluster.master.url), None).await?;
    assert_eq!(metrics.get("etcron_master_unschedulable_jobs", &[]), Some(0.0));
    let (code, stdout, stderr) = ctl(cluster, &["jobs", "check"]).await;
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(stdout.contains("2 stored jobs checked"), "{stdout}");
    Ok(())
}

/// More specs than one page, and more bytes than one gRPC answer decodes by default (4 MiB):
/// the check reads them in pages at one revision and names exactly the refused ones, the first
/// key and the last.
#[tokio::test(flavor = "multi_thread")]
async fn the_check_reads_past_one_page_and_past_four_mib() -> anyhow::Result<()> {
    let cluster = Cluster::start_with("spec-check-pages", 0, false, &["--spec-check-every", "10s"]).await?;
    let result = pages(&cluster).await;
    if result.is_err() {
        cluster.dump_logs();
    }
    result
}

async fn pages(cluster: &Cluster) -> anyhow::Result<()> {
    use etcd_client::{Txn, TxnOp};
    let refused = json!({"schedule": "0 0 ?,1 * 5", "task": {"kind": "shell", "command": "true"}}).to_string();
    let small = |i: usize| json!({"schedule": "@daily", "task": {"kind": "shell", "command": format!("echo {i}")}});
    // 300 specs of 15 KB: 4.5 MB after the first page's 1 000 keys.
    let large =
        json!({"schedule": "@daily", "task": {"kind": "shell", "command": format!("echo {}", "x".repeat(15_000))}});
    let key = |name: &str| format!("{}/jobs/{name}", cluster.namespace);
    let mut ops =
        vec![TxnOp::put(key("a-refused"), refused.clone(), None), TxnOp::put(key("z-refused"), refused, None)];
    ops.extend((0..1_000).map(|i| TxnOp::put(key(&format!("b-{i:04}")), small(i).to_string(), None)));
    ops.extend((0..300).map(|i| TxnOp::put(key(&format!("c-{i:03}")), large.to_string(), None)));
    let mut etcd = cluster.etcd.client().await?;
    // Transactions of 60 operations: at most 900 KB (etcd takes 128 operations and 1.5 MiB).
    let mut ops = ops.into_iter().peekable();
    while ops.peek().is_some() {
        let chunk: Vec<TxnOp> = ops.by_ref().take(60).collect();
        etcd.txn(Txn::new().and_then(chunk)).await?;
    }
    let specs = wait_for(Duration::from_secs(40), "a check of every spec", || async {
        cluster.get("/api/cluster/specs").await.ok().filter(|b| b["checked"] == 1_302)
    })
    .await?;
    let names: Vec<&str> =
        specs["refused"].as_array().into_iter().flatten().filter_map(|r| r["job"].as_str()).collect();
    assert_eq!(names, ["a-refused", "z-refused"], "{}", specs["refused"]);
    Ok(())
}
