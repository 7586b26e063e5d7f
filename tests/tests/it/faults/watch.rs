//! Watch recovery: a worker whose watch fell behind a compaction re-lists and reconciles:
//! a job deleted meanwhile stops, a job created meanwhile starts, nothing is doubled.

use std::time::Duration;

use etcd_client::{CompactionOptions, PutOptions, Txn, TxnOp};
use etcron_tests::proxy::Proxy;
use etcron_tests::{now_ms, read_fired, record_command, wait_for, Etcd, Master, Worker, WorkerOpts};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_behind_a_compaction_relists_and_reconciles() -> anyhow::Result<()> {
    let logs = etcron_tests::log_dir("watch-compaction");
    let etcd = Etcd::start(&logs).await?;
    let ns = "/t-compaction";
    let master = Master::start(&etcd.endpoint, ns, &logs, &[]).await?;
    let proxy = Proxy::start(etcd.endpoint.clone()).await?;
    let mut opts = WorkerOpts::new("behind");
    opts.session_ttl = "60s".to_owned();
    let metrics_port = etcron_tests::free_port();
    opts.extra = vec!["--metrics-listen".to_owned(), format!("127.0.0.1:{metrics_port}")];
    let worker = Worker::start(&proxy.endpoint, ns, &logs, opts)?;
    let work = tempfile::tempdir()?;
    let out = work.path().join("fired.log");
    let http = reqwest::Client::new();
    let put = |name: &'static str| {
        let body = json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&out)}});
        let req = http.put(format!("{}/api/jobs/{name}", master.url)).json(&body);
        async move { anyhow::Ok(req.send().await?.status().as_u16()) }
    };
    assert_eq!(put("old").await?, 201);
    wait_for(Duration::from_secs(20), "the old job to fire", || async {
        read_fired(&out).iter().any(|f| f.job == "old").then_some(())
    })
    .await?;

    // Stall the worker's connection, then change the jobs, flood the prefix with events so the
    // stalled watch falls behind (more than etcd's send buffers, HTTP/2 windows and the
    // proxy's socket can hold), and compact history past where it stands.
    proxy.pause();
    let mut client = etcd.client().await?;
    client.delete(format!("{ns}/jobs/old"), None).await?;
    assert_eq!(put("new").await?, 201);
    let filler = "x".repeat(2_000);
    for batch in 0..300 {
        let ops: Vec<TxnOp> = (0..100)
            .map(|i| TxnOp::put(format!("{ns}/jobs/filler-{}", batch * 100 + i), filler.clone(), None::<PutOptions>))
            .collect();
        client.txn(Txn::new().and_then(ops)).await?;
    }
    client.delete(format!("{ns}/jobs/filler-"), Some(etcd_client::DeleteOptions::new().with_prefix())).await?;
    let rev = client.get("/", None).await?.header().map_or(0, |h| h.revision());
    client.compact(rev, Some(CompactionOptions::new().with_physical())).await?;
    let resumed_at = now_ms();
    proxy.resume();

    wait_for(Duration::from_secs(30), "the worker to re-list after the compaction", || async {
        worker.proc.log_text().contains("watch cancelled (compaction?); re-listing").then_some(())
    })
    .await?;
    // The re-list is counted for the operator.
    let url = format!("http://127.0.0.1:{metrics_port}/metrics");
    wait_for(Duration::from_secs(10), "the jobs watch's re-list to be counted", || async {
        let metrics = etcron_tests::scrape(&url, None).await.ok()?;
        (metrics.value("etcron_worker_watch_resyncs_total", &[("watch", "jobs")]) >= 1.0).then_some(())
    })
    .await?;
    wait_for(Duration::from_secs(20), "the new job to fire", || async {
        read_fired(&out).iter().any(|f| f.job == "new" && f.scheduled_ms > resumed_at).then_some(())
    })
    .await?;
    // Two more ticks to observe that the deleted job stays gone.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let fired = read_fired(&out);
    let old_after: Vec<_> = fired.iter().filter(|f| f.job == "old" && f.scheduled_ms > resumed_at + 1_000).collect();
    assert!(old_after.is_empty(), "deleted job still fires: {old_after:?}");
    let mut ticks: Vec<(String, i64)> = fired.iter().map(|f| (f.job.clone(), f.scheduled_ms)).collect();
    let total = ticks.len();
    ticks.sort();
    ticks.dedup();
    assert_eq!(ticks.len(), total, "a tick ran twice");
    assert!(!worker.proc.log_text().contains("panicked"));
    Ok(())
}
