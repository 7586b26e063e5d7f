//! The elected compactor against real etcd and two real masters: exactly one master holds
//! `{ns}/compactor` and compacts etcd's history to the revision of `--compact-retention` ago;
//! `GET /api/cluster/storage` and `/readyz` report etcd's size and quota. (A full etcd, with
//! its warning in the API and the console, is `etcd_alarm.rs`.) And the workers' retention
//! leases, which bound how many claims etcd deletes at once.

use std::time::Duration;

use anyhow::Context as _;
use etcd_client::GetOptions;
use etcron_tests::{scrape, wait_for, Cluster, Master};
use serde_json::Value;

/// Compaction every 2 s keeping 3 s of history (the floor of 5 min lowered for the test).
const COMPACTOR: &[&str] = &["--compact-every", "2s", "--compact-retention", "3s", "--compact-retention-floor", "1s"];

async fn compactions(url: &str) -> anyhow::Result<f64> {
    Ok(scrape(&format!("{url}/metrics"), None)
        .await?
        .value("etcron_etcd_compactions_total", &[("outcome", "compacted")]))
}

#[tokio::test(flavor = "multi_thread")]
async fn one_master_compacts_etcd_and_every_master_reports_its_size() -> anyhow::Result<()> {
    // etcd without auto-compaction, as operators often run it: the masters compact it.
    let c =
        Cluster::start_with_etcd("etcd-storage", 0, false, COMPACTOR, &["--quota-backend-bytes=2147483648"]).await?;
    let mut args = vec!["--mongodb-uri", c.mongo.uri.as_str(), "--mongodb-db", c.db.as_str()];
    args.extend_from_slice(COMPACTOR);
    let second = Master::start(&c.etcd.endpoint, &c.namespace, &c.logs, &args).await?;
    let mut client = c.etcd.client().await?;
    let first_revision = client.put("/etcd-storage/probe", "1", None).await?.header().context("header")?.revision();
    for i in 0..50 {
        client.put("/etcd-storage/probe", i.to_string(), None).await?;
    }

    // etcd's history up to a few seconds back goes: a read at the first revision fails.
    wait_for(Duration::from_secs(60), "etcd compacted past the first writes", || {
        let mut client = client.clone();
        async move {
            client.put("/etcd-storage/probe", "tick", None).await.ok()?;
            let old = client.get("/etcd-storage/probe", Some(GetOptions::new().with_revision(first_revision))).await;
            matches!(old, Err(e) if e.to_string().contains("compacted")).then_some(())
        }
    })
    .await?;
    let (a, b) = (compactions(&c.master.url).await?, compactions(&second.url).await?);
    assert!(a + b > 0.0, "a master compacted");
    assert!(a == 0.0 || b == 0.0, "only one master compacts: {a} and {b}");
    let holder = client.get(format!("{}/compactor", c.namespace), None).await?;
    assert_eq!(holder.kvs().len(), 1, "one holder of {}/compactor", c.namespace);
    assert_ne!(holder.kvs()[0].lease(), 0, "held on a lease");

    for url in [&c.master.url, &second.url] {
        let storage: Value = wait_for(Duration::from_secs(30), "a storage reading", || async {
            let r = c.http.get(format!("{url}/api/cluster/storage")).send().await.ok()?;
            r.status().is_success().then_some(())?;
            r.json().await.ok()
        })
        .await?;
        assert!(storage["db_size_bytes"].as_i64().unwrap() > 0, "{storage}");
        assert_eq!(storage["quota_bytes"], 2_147_483_648_i64, "{storage}");
        assert!(storage["warning"].is_null(), "far under the quota: {storage}");
        assert!(storage["alarms"].as_array().unwrap().is_empty(), "{storage}");
        let ready: Value = c.http.get(format!("{url}/readyz")).send().await?.json().await?;
        assert_eq!(ready["etcd_storage"]["quota_bytes"], 2_147_483_648_i64, "{ready}");
        let m = scrape(&format!("{url}/metrics"), None).await?;
        assert!(m.value("etcron_etcd_db_size_bytes", &[]) > 0.0);
        assert_eq!(m.value("etcron_etcd_alarm_active", &[]), 0.0);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compaction_retention_under_five_minutes_is_refused() -> anyhow::Result<()> {
    let out = std::process::Command::new(etcron_tests::bin("etcron-master")?)
        .args(["--compact-retention", "1m", "--etcd-endpoints", "127.0.0.1:1"])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("compact_retention: must be at least 5m"), "{err}");
    Ok(())
}

/// Done claims go on a retention lease that a worker hands out for a short while only, so when it
/// ends etcd deletes a few seconds' worth of claims at once, not minutes of them: one lease per
/// `reuse_for`, each living the minimum retention past its last use.
#[tokio::test(flavor = "multi_thread")]
async fn retention_leases_are_reused_briefly_and_outlive_their_last_use_by_the_retention() -> anyhow::Result<()> {
    use etcron_common::claim::{RetentionLeases, MIN_RETENTION};
    let logs = etcron_tests::log_dir("retention-leases");
    let etcd = etcron_tests::Etcd::start(&logs).await?;
    let client = etcd.client().await?;
    let reuse = Duration::from_secs(2);
    let leases = RetentionLeases::new(client.clone(), MIN_RETENTION, reuse);
    let first = leases.get().await.map_err(anyhow::Error::msg)?;
    assert_eq!(leases.get().await.map_err(anyhow::Error::msg)?, first, "reused within reuse_for");
    let ttl = client.clone().lease_client().time_to_live(first, None).await?;
    let full = i64::try_from((MIN_RETENTION + reuse).as_secs())?;
    assert_eq!(ttl.granted_ttl(), full, "granted for the retention plus the reuse");
    assert!(ttl.ttl() > full - 5, "a fresh lease: {} s left", ttl.ttl());
    tokio::time::sleep(reuse + Duration::from_millis(200)).await;
    let second = leases.get().await.map_err(anyhow::Error::msg)?;
    assert_ne!(second, first, "a new lease after reuse_for");
    let left = client.clone().lease_client().time_to_live(first, None).await?.ttl();
    assert!(
        left >= i64::try_from(MIN_RETENTION.as_secs())? - 1,
        "the first lease still outlives its last use by the retention: {left} s"
    );
    Ok(())
}
