//! Admission control of etcd requests, on real processes: while etcd is stalled again and again
//! (SIGSTOP for half the session TTL, longer than a request's deadline) under jobs firing every
//! second on two workers, the workers' etcd request limits are cut, requests wait for a slot
//! instead of piling onto etcd, and yet no worker loses its session: keep-alives have their own
//! connection and never wait for a slot.
//!
//! A real "etcdserver: too many requests" cannot be provoked reliably here (etcd sends it only
//! when its applied index lags the committed one by 5 000 entries, which one etcd on a shared
//! machine reaches only by chance), so this tests the timeout path; the classification of
//! `ResourceExhausted` is unit-tested in `common/src/etcd.rs`.

use std::time::Duration;

use etcron_tests::{free_port, scrape, wait_for, Cluster, Scrape, WorkerOpts};
use nix::sys::signal::Signal;
use serde_json::json;

/// Session TTL of the workers; etcd is stalled for half of it.
const TTL: Duration = Duration::from_secs(14);
/// Longer than a request's deadline (5 s), so requests sent at the start of a stall time out
/// while it lasts.
const STALL: Duration = Duration::from_secs(7);
const STALLS: usize = 3;
const JOBS: usize = 30;

async fn metrics(url: &str) -> Scrape {
    wait_for(Duration::from_secs(30), "the worker's metrics", || async { scrape(url, None).await.ok() })
        .await
        .expect("metrics endpoint")
}

fn won(s: &Scrape) -> f64 {
    s.value("etcron_worker_claims_total", &[("outcome", "won")])
}

/// Waits until every worker won claims after `since` (scrapes taken before): ticks run again.
async fn until_claiming(urls: &[String], since: &[Scrape], what: &str) -> anyhow::Result<()> {
    for (url, before) in urls.iter().zip(since) {
        let floor = won(before) + 3.0;
        wait_for(Duration::from_secs(60), what, || async {
            let s = scrape(url, None).await.ok()?;
            (won(&s) >= floor).then_some(())
        })
        .await?;
    }
    Ok(())
}

/// The lease each worker's registration is attached to.
async fn registration_leases(c: &Cluster) -> anyhow::Result<Vec<i64>> {
    let keys = etcron_model::keys::Keys::new(&c.namespace).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut client = c.etcd.client().await?;
    let mut leases = Vec::new();
    for w in &c.workers {
        let resp = client.get(keys.worker(&w.opts.id), None).await?;
        let kv = resp.kvs().first().ok_or_else(|| anyhow::anyhow!("worker {} not registered", w.opts.id))?;
        leases.push(kv.lease());
    }
    Ok(leases)
}

#[tokio::test(flavor = "multi_thread")]
async fn stalls_of_a_busy_etcd_cut_the_request_limit_and_expire_no_session() -> anyhow::Result<()> {
    let mut c = Cluster::start_with("admission", 0, false, &[]).await?;
    let mut urls = Vec::new();
    for id in ["w1", "w2"] {
        let port = free_port();
        let mut opts = WorkerOpts::new(id);
        opts.session_ttl = format!("{}s", TTL.as_secs());
        opts.extra = vec!["--metrics-listen".to_owned(), format!("127.0.0.1:{port}")];
        c.add_worker(opts)?;
        urls.push(format!("http://127.0.0.1:{port}/metrics"));
    }
    c.wait_workers(2).await?;
    let mut before = Vec::new();
    for url in &urls {
        let s = metrics(url).await;
        assert_eq!(s.value("etcron_etcd_admission_limit", &[]), 32.0, "a worker starts at the initial limit");
        before.push(s);
    }
    for i in 0..JOBS {
        c.put_job(
            &format!("job-{i}"),
            json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": "true"}}),
        )
        .await?;
    }
    until_claiming(&urls, &before, "both workers to run ticks").await?;
    let leases = registration_leases(&c).await?;

    for round in 1..=STALLS {
        let mut before = Vec::new();
        for url in &urls {
            before.push(metrics(url).await);
        }
        c.etcd.proc.signal(Signal::SIGSTOP)?;
        tokio::time::sleep(STALL).await;
        c.etcd.proc.signal(Signal::SIGCONT)?;
        until_claiming(&urls, &before, &format!("both workers to run ticks again after stall {round}")).await?;
    }

    let mut report = Vec::new();
    let mut failed = false;
    for (url, w) in urls.iter().zip(&c.workers) {
        let s = metrics(url).await;
        let losses = s.value("etcron_worker_session_lease_losses_total", &[]);
        let cuts = s.value("etcron_etcd_admission_decreases_total", &[("cause", "timeout")]);
        let waited = s.value("etcron_etcd_admission_waits_total", &[]);
        let limit = s.value("etcron_etcd_admission_limit", &[]);
        let log = w.proc.log_text();
        report.push(format!("{}: lease losses {losses}, cuts {cuts}, waits {waited}, limit {limit}", w.opts.id));
        failed |= losses != 0.0
            || log.contains("session lease lost")
            || cuts < 1.0
            || waited < 1.0
            || !(2.0..=512.0).contains(&limit)
            || !log.contains("etcd is overloaded");
    }
    if failed {
        c.dump_logs();
    }
    for line in &report {
        eprintln!("{line}");
    }
    assert!(!failed, "{report:?}");
    // Same registrations under the same leases: no session was lost and granted again.
    assert_eq!(registration_leases(&c).await?, leases);
    Ok(())
}
