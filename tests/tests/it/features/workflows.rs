//! Workflows on real workers: `extract → (ta, tb) → load` joined by `after`, results passed
//! along (`params_from`, `ETCRON_PARENT_RESULT`, `ETCRON_PARENTS`), `load` once per workflow
//! run with both results, and a failed step resumed: only it and what follows run again.

use std::time::Duration;

use etcron_tests::{wait_for, Cluster};
use serde_json::{json, Value};

/// The records of `job` (newest first).
async fn records(c: &Cluster, job: &str) -> Vec<Value> {
    let v = c.get(&format!("/api/executions?job={job}&limit=100")).await.unwrap_or_default();
    v["executions"].as_array().cloned().unwrap_or_default()
}

/// Waits until `job` has a final record of workflow run `run` with `status`.
async fn step_done(c: &Cluster, job: &str, run: &str, status: &str) -> anyhow::Result<Value> {
    wait_for(Duration::from_secs(40), &format!("{job} {status} in {run}"), || async {
        records(c, job).await.into_iter().find(|r| r["workflow"] == run && r["status"] == status)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_passes_results_fans_in_once_and_resumes_the_failed_step() -> anyhow::Result<()> {
    let c = Cluster::start("workflows", 2).await?;
    let (log, fail) = (c.path("steps.log"), c.path("tb.fail"));
    let (log, fail) = (log.display(), fail.display());
    let shell = |command: String| json!({"kind": "shell", "command": command});
    c.put_job(
        "extract",
        json!({"schedule": "@yearly", "task": shell(format!(
            "echo extract >> {log}; echo '::etcron result {{\"date\":\"2026-11-28\",\"rows\":3}}'"))}),
    )
    .await?;
    c.put_job(
        "ta",
        json!({"schedule": "@yearly", "after": ["extract"], "params_from": {"DATE": "$.date"},
               "task": {"kind": "shell", "params": ["DATE"], "command": format!(
                   "echo \"ta $DATE $ETCRON_PARENT_RESULT\" >> {log}; echo '::etcron result {{\"a\":1}}'")}}),
    )
    .await?;
    c.put_job(
        "tb",
        json!({"schedule": "@yearly", "after": ["extract"], "task": shell(format!(
            "echo tb >> {log}; if [ -e {fail} ]; then exit 3; fi; echo '::etcron result {{\"b\":2}}'"))}),
    )
    .await?;
    c.put_job(
        "load",
        json!({"schedule": "@yearly", "after": ["ta", "tb"],
               "task": shell(format!("echo \"load $ETCRON_PARENTS\" >> {log}"))}),
    )
    .await?;
    // A cycle through `after` is refused at save, naming the field.
    let cyclic = json!({"schedule": "@yearly", "after": ["load"], "on_success": ["extract"],
                        "task": shell("true".to_owned())});
    let (status, body) = c.call(reqwest::Method::PUT, "/api/jobs/loop", Some(cyclic)).await?;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("cycle"), "{body}");

    // Run 1: tb fails, so load waits; ta got extract's result.
    std::fs::write(c.path("tb.fail"), "")?;
    c.run_now("extract").await?;
    let root = wait_for(Duration::from_secs(30), "extract's record", || async {
        records(&c, "extract").await.into_iter().find(|r| r["status"] == "succeeded")
    })
    .await?;
    assert_eq!(root["result"], json!({"date": "2026-11-28", "rows": 3}));
    let run = root["workflow"].as_str().expect("the root's record names its workflow run").to_owned();
    let ta = step_done(&c, "ta", &run, "succeeded").await?;
    assert_eq!(ta["params"]["env"]["DATE"], "2026-11-28", "params_from took the date");
    let tb = step_done(&c, "tb", &run, "failed").await?;
    // Every claim closed (tb's close wrote whatever follows it): no run request of load.
    c.settle_claims(etcron_tests::now_ms()).await?;
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    let pending = c
        .etcd
        .client()
        .await?
        .get(keys.job_trigger_prefix("load"), Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    assert!(pending.kvs().is_empty() && records(&c, "load").await.is_empty(), "load triggered although tb failed");

    // Resume: tb runs again (its next attempt), then load, once, with both results.
    std::fs::remove_file(c.path("tb.fail"))?;
    let (status, body) = c.call(reqwest::Method::POST, &format!("/api/workflows/{run}/resume"), None).await?;
    assert_eq!(status, 202, "{body}");
    let rerun: Vec<&str> = body["rerun"].as_array().unwrap().iter().filter_map(|r| r["job"].as_str()).collect();
    assert_eq!(rerun, ["tb"]);
    let tb2 = step_done(&c, "tb", &run, "succeeded").await?;
    assert_eq!(tb2["attempt"], tb["attempt"].as_u64().unwrap() + 1);
    let load = step_done(&c, "load", &run, "succeeded").await?;
    assert_eq!(load["workflow"], run.as_str());
    let text = std::fs::read_to_string(c.path("steps.log"))?;
    let count = |p: &str| text.lines().filter(|l| l.split_whitespace().next() == Some(p)).count();
    assert_eq!((count("extract"), count("ta"), count("tb"), count("load")), (1, 1, 2, 1), "{text}");
    let ta_line = text.lines().find(|l| l.starts_with("ta ")).unwrap();
    assert!(ta_line.contains("2026-11-28") && ta_line.contains("\"rows\":3"), "{ta_line}");
    let parents: Value = serde_json::from_str(text.lines().find(|l| l.starts_with("load ")).unwrap()[5..].trim())?;
    assert_eq!(parents, json!({"ta": {"a": 1}, "tb": {"b": 2}}));
    // The graph: every step succeeded now.
    let graph = c.get(&format!("/api/workflows/{run}")).await?;
    assert_eq!(graph["state"], "succeeded", "{graph}");

    // Run 2, nothing fails: load once more, for the new run only.
    c.run_now("extract").await?;
    let second = wait_for(Duration::from_secs(40), "a second workflow run", || async {
        records(&c, "load").await.into_iter().find(|r| r["workflow"] != run.as_str() && r["status"] == "succeeded")
    })
    .await?;
    let loads = records(&c, "load").await;
    for r in [run.as_str(), second["workflow"].as_str().unwrap()] {
        assert_eq!(loads.iter().filter(|l| l["workflow"] == r).count(), 1, "load once per workflow run {r}");
    }
    Ok(())
}
