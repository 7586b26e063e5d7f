//! Execution records in a real `mongod`: one per execution and per tick that did
//! not run, searchable by every filter, kept across MongoDB outages and worker restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context as _;

use etcron_common::store::{RecordWrite, Search, WriteMode};
use etcron_model::keys::{ExecutionId, Tick};
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_tests::{now_ms, read_fired, urlencode, wait_for, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

fn shell(schedule: &str, cmd: &str) -> Value {
    json!({"schedule": schedule, "task": {"kind": "shell", "command": cmd}})
}

#[tokio::test(flavor = "multi_thread")]
async fn every_outcome_is_recorded_and_searchable() -> anyhow::Result<()> {
    let c = Cluster::start("records-outcomes", 2).await?;
    let started = now_ms();
    c.put_job("ok", shell("@yearly", "echo hello-from-ok; echo to-stderr >&2")).await?;
    c.put_job("bad", shell("@yearly", "echo disk_full on /var >&2; exit 3")).await?;
    c.put_job(
        "slow",
        json!({"schedule": "@yearly", "timeout": "1s", "task": {"kind": "shell", "command": "sleep 30"}}),
    )
    .await?;
    c.put_job("long", shell("@yearly", "sleep 300")).await?;
    c.put_job(
        "chatty",
        json!({"schedule": "@yearly", "max_output": 1024, "task": {"kind": "shell", "command": "seq 1 5000"}}),
    )
    .await?;
    for job in ["ok", "bad", "slow", "long", "chatty"] {
        let (status, _) = c.call(Method::POST, &format!("/api/jobs/{job}/run"), None).await?;
        assert_eq!(status, 202);
    }
    // The long one shows up as running first, then is killed.
    let running = c.wait_executions("job=long&status=running", "a running record", |l| l.len() == 1).await?;
    assert_eq!(running[0]["trigger"], "manual");
    c.call(Method::POST, "/api/jobs/long/kill", None).await?;

    let all = c
        .wait_executions("limit=50", "5 finished records", |l| {
            l.len() == 5 && l.iter().all(|r| r["status"] != "running")
        })
        .await?;
    let by_job: BTreeMap<&str, &Value> = all.iter().map(|r| (r["job"].as_str().unwrap(), r)).collect();
    assert_eq!(by_job["ok"]["status"], "succeeded");
    assert_eq!(by_job["ok"]["exit_code"], 0);
    assert_eq!(by_job["bad"]["status"], "failed");
    assert_eq!(by_job["bad"]["exit_code"], 3);
    assert_eq!(by_job["slow"]["status"], "timed_out");
    assert_eq!(by_job["long"]["status"], "killed");
    assert_eq!(by_job["chatty"]["status"], "succeeded");
    for r in &all {
        assert_eq!(r["trigger"], "manual");
        assert_eq!(r["attempt"], 1);
        assert!(r["fencing_token"].as_i64().unwrap() > 0);
        assert!(r["id"].as_str().unwrap().contains("@manual-"));
        assert!(r["worker_id"] == "w1" || r["worker_id"] == "w2");
        for field in ["scheduled_at", "claimed_at", "started_at", "finished_at"] {
            assert!(r[field].is_string(), "{field} missing in {r}");
        }
        assert!(r.get("output").is_none(), "search results leave the output out");
    }

    // One record with its output.
    let ok = c.get(&format!("/api/executions/{}", urlencode(by_job["ok"]["id"].as_str().unwrap()))).await?;
    assert_eq!(ok["output"], "hello-from-ok\nto-stderr\n");
    let chatty = c.get(&format!("/api/executions/{}", urlencode(by_job["chatty"]["id"].as_str().unwrap()))).await?;
    assert_eq!(chatty["output_truncated"], true);
    let out = chatty["output"].as_str().unwrap();
    assert!(out.starts_with("1\n2\n") && out.ends_with("4999\n5000\n") && out.contains("bytes omitted"), "{out}");
    assert!(out.len() < 1200);
    let (status, _) = c.call(Method::GET, "/api/executions/ok@manual-nothere%231", None).await?;
    assert_eq!(status, 404);

    // Every filter.
    let ids = |l: &[Value]| l.iter().map(|r| r["job"].as_str().unwrap().to_owned()).collect::<BTreeSet<_>>();
    let cref = &c;
    let q = |query: &str| {
        let path = format!("/api/executions?{query}");
        async move { cref.get(&path).await.map(|v| v["executions"].as_array().cloned().unwrap_or_default()) }
    };
    assert_eq!(ids(&q("job=bad").await?), BTreeSet::from(["bad".to_owned()]));
    assert_eq!(ids(&q("status=failed&status=timed_out").await?), BTreeSet::from(["bad".to_owned(), "slow".to_owned()]));
    assert_eq!(
        ids(&q("status=killed,succeeded").await?),
        BTreeSet::from(["long".to_owned(), "ok".to_owned(), "chatty".to_owned()])
    );
    assert_eq!(ids(&q("q=DISK_FULL").await?), BTreeSet::from(["bad".to_owned()]));
    assert_eq!(ids(&q("q=hello-from-ok").await?), BTreeSet::from(["ok".to_owned()]));
    assert!(q("q=nothing-matches-this").await?.is_empty());
    assert_eq!(q("trigger=manual").await?.len(), 5);
    assert!(q("trigger=schedule").await?.is_empty());
    let w1 = q("worker=w1").await?.len();
    let w2 = q("worker=w2").await?.len();
    assert_eq!(w1 + w2, 5);
    let since = etcron_model::rfc3339_ms(started - 1);
    let until = etcron_model::rfc3339_ms(now_ms() + 1);
    assert_eq!(q(&format!("since={}&until={}", urlencode(&since), urlencode(&until))).await?.len(), 5);
    assert!(q(&format!("until={}", urlencode(&etcron_model::rfc3339_ms(started - 60_000)))).await?.is_empty());

    // The job views carry a summary.
    let jobs = c.get("/api/jobs").await?;
    assert_eq!(jobs["records"]["available"], true);
    let bad = jobs["jobs"].as_array().unwrap().iter().find(|j| j["name"] == "bad").unwrap();
    assert_eq!(bad["summary"]["failed_24h"], 1);
    assert_eq!(bad["summary"]["last_execution"]["status"], "failed");
    let one = c.get("/api/jobs/ok").await?;
    assert_eq!(one["summary"]["succeeded_24h"], 1);
    assert_eq!(one["summary"]["last_execution"]["id"], by_job["ok"]["id"]);

    // A search by words carries the output line that matched; other searches do not.
    assert_eq!(q("q=DISK_FULL").await?[0]["output_match"], "disk_full on /var");
    assert_eq!(q("q=from%20ok").await?[0]["output_match"], "hello-from-ok");
    assert!(q("job=bad").await?[0].get("output_match").is_none(), "only a search by words");
    // The first line holding a word, cut to 80 characters before it and 120 after.
    let mut wide = synthetic("wide", now_ms(), 1);
    wide.record.output = format!("first line\n{} needle {}\nneedle again\n", "a".repeat(200), "b".repeat(300));
    c.mongo.store(&c.db).await?.write(&[wide]).await?;
    let found = q("job=wide&q=NEEDLE").await?;
    assert_eq!(found[0]["output_match"], format!("{} needle {}", "a".repeat(79), "b".repeat(119)));
    Ok(())
}

fn synthetic(job: &str, ms: i64, n: u32) -> RecordWrite {
    RecordWrite {
        mode: WriteMode::Replace,
        record: ExecutionRecord {
            id: ExecutionId { attempt: n, ..ExecutionId::new(job, Tick::Scheduled(ms)) },
            job: job.to_owned(),
            team: None,
            scheduled_at: etcron_model::rfc3339_ms(ms),
            scheduled_ms: ms,
            claimed_at: None,
            started_at: None,
            finished_at: Some(etcron_model::rfc3339_ms(ms + 5)),
            duration_ms: Some(5),
            worker_id: "w".into(),
            hostname: "h".into(),
            attempt: n,
            trigger: TriggerKind::Schedule,
            status: Status::Succeeded,
            exit_code: Some(0),
            signal: None,
            output: format!("line {n}"),
            output_truncated: false,
            error: None,
            reason: None,
            fencing_token: Some(i64::from(n)),
            parent: None,
            http_status: None,
            shard: None,
            params: etcron_model::record::RunParams::default(),
            jitter_ms: None,
            workflow: None,
            priority: None,
            pool: None,
            trace_id: None,
            reports: Default::default(),
        },
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pagination_with_concurrent_inserts_has_no_duplicates_or_gaps() -> anyhow::Result<()> {
    let c = Cluster::start("records-pagination", 0).await?;
    let store = c.mongo.store(&c.db).await?;
    // Recent times: older records would be deleted by the TTL index (30 days) while the test
    // pages through them (mongod's TTL monitor runs every second here).
    let base = now_ms() - 86_400_000;
    // 300 records; several share a scheduled time, so the id breaks ties.
    let original: Vec<RecordWrite> =
        (0..300).map(|i| synthetic("paged", base + (i / 3) * 1000, u32::try_from(i % 3 + 1).unwrap())).collect();
    store.write(&original).await?;
    let expected: BTreeSet<String> = original.iter().map(|w| w.record.id.to_string()).collect();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut newer = 0i64;
    loop {
        let mut path = "/api/executions?job=paged&limit=7".to_owned();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", urlencode(c)));
        }
        let page = c.get(&path).await?;
        for r in page["executions"].as_array().unwrap() {
            seen.push(r["id"].as_str().unwrap().to_owned());
        }
        // Meanwhile new records arrive (newer and older than the cursor).
        newer += 1;
        store.write(&[synthetic("paged", base + 10_000_000 + newer, 1), synthetic("other", base + newer, 1)]).await?;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let originals_seen: Vec<&String> = seen.iter().filter(|id| expected.contains(*id)).collect();
    let unique: BTreeSet<&String> = originals_seen.iter().copied().collect();
    assert_eq!(originals_seen.len(), unique.len(), "a record was returned twice");
    assert_eq!(unique.len(), expected.len(), "records were skipped");
    // Newest first.
    let ms: Vec<i64> = seen
        .iter()
        .filter_map(|id| id.parse::<ExecutionId>().ok())
        .filter_map(|id| match id.tick {
            Tick::Scheduled(ms) if ms < base + 10_000_000 => Some(ms),
            _ => None,
        })
        .collect();
    assert!(ms.windows(2).all(|w| w[0] >= w[1]), "not newest first");
    // The store's own search agrees with the API.
    let direct = store.search(&Search { job: Some("paged".into()), limit: 500, ..Search::default() }).await?;
    assert_eq!(direct.executions.len(), 300 + usize::try_from(newer).unwrap());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mongodb_outage_loses_and_doubles_no_record() -> anyhow::Result<()> {
    let mut c = Cluster::start_with("records-outage", 2, true, &[]).await?;
    let out = c.path("fired.log");
    let jobs = c.every_second_jobs("tick", 5, &out).await?;
    wait_for(Duration::from_secs(20), "every job to fire", || async {
        let f = read_fired(&out);
        jobs.iter().all(|j| f.iter().any(|x| &x.job == j)).then_some(())
    })
    .await?;
    c.mongo.stop()?;
    let stopped_at = now_ms();
    // The outage: 10 s of ticks with nowhere to write records.
    wait_for(Duration::from_secs(30), "10 s of ticks during the outage", || async {
        read_fired(&out).iter().any(|f| f.scheduled_ms > stopped_at + 10_000).then_some(())
    })
    .await?;
    let (status, ready) = c.call(Method::GET, "/readyz", None).await?;
    assert_eq!((status, &ready["mongodb"]["ok"], &ready["etcd"]["ok"]), (503, &json!(false), &json!(true)));
    let (status, err) = c.call(Method::GET, "/api/executions", None).await?;
    assert_eq!((status, err["error"]["code"].as_str()), (503, Some("mongodb_unavailable")));
    let (status, jobs_view) = c.call(Method::GET, "/api/jobs", None).await?;
    assert_eq!(status, 200, "job routes keep working without MongoDB");
    assert_eq!(jobs_view["records"]["available"], false);
    c.mongo.restart().await?;
    let restarted_at = now_ms();
    // Stop the jobs, then every fired tick must have exactly one final record.
    for job in &jobs {
        c.call(Method::DELETE, &format!("/api/jobs/{job}"), None).await?;
    }
    let deleted_at = now_ms();
    c.settle_claims(deleted_at).await?;
    let fired: Vec<_> = read_fired(&out).into_iter().filter(|f| f.scheduled_ms <= deleted_at).collect();
    let store = c.mongo.store(&c.db).await?;
    let records = wait_for(Duration::from_secs(60), "a record for every fired tick", || async {
        let mut all = Vec::new();
        for job in &jobs {
            let page = store.search(&Search { job: Some(job.clone()), limit: 500, ..Search::default() }).await.ok()?;
            all.extend(page.executions);
        }
        let done = all.iter().filter(|r| r.status == Status::Succeeded).count();
        (done >= fired.len()).then_some(all)
    })
    .await?;
    let by_tick: BTreeMap<(String, i64), Vec<&ExecutionRecord>> = records.iter().fold(BTreeMap::new(), |mut m, r| {
        m.entry((r.job.clone(), r.scheduled_ms)).or_insert_with(Vec::new).push(r);
        m
    });
    for f in &fired {
        let recs = by_tick.get(&(f.job.clone(), f.scheduled_ms)).unwrap_or_else(|| panic!("no record for {f:?}"));
        assert_eq!(recs.len(), 1, "{f:?}");
        assert_eq!(recs[0].status, Status::Succeeded);
        assert_eq!(recs[0].fencing_token, Some(f.fencing_token));
    }
    let extra: Vec<_> =
        records.iter().filter(|r| !fired.iter().any(|f| f.job == r.job && f.scheduled_ms == r.scheduled_ms)).collect();
    assert!(extra.is_empty(), "records without a run: {extra:?}");
    let during = fired.iter().filter(|f| f.scheduled_ms > stopped_at && f.scheduled_ms <= restarted_at).count();
    println!(
        "outage of {} ms: {} ticks fired ({during} while MongoDB was down), {} records, {} duplicates, {} missing",
        restarted_at - stopped_at,
        fired.len(),
        records.len(),
        records.len() - by_tick.len(),
        fired.iter().filter(|f| !by_tick.contains_key(&(f.job.clone(), f.scheduled_ms))).count()
    );
    assert!(c.workers.iter().any(|w| w.proc.log_text().contains("replayed spooled execution records")));
    Ok(())
}

/// Finished records in a worker's data dir: the live spool file plus the ones moved aside by
/// replay attempts.
fn spooled(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .map(|text| text.lines().filter(|l| l.contains("\"succeeded\"")).count())
                .sum()
        })
        .unwrap_or(0)
}

/// Runs a job 3 times on the cluster's only worker while MongoDB is down, waits for the 3
/// final records in its data dir `data`, then SIGKILLs the worker, brings MongoDB back and
/// starts the worker again with the same settings. The execution ids.
async fn spool_three_runs_and_restart(c: &mut Cluster, data: &std::path::Path) -> anyhow::Result<Vec<String>> {
    c.put_job("manual", shell("@yearly", "echo spooled-run")).await?;
    c.mongo.stop()?;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (_, body) = c.call(Method::POST, "/api/jobs/manual/run", None).await?;
        ids.push(body["execution_id"].as_str().context("execution_id")?.to_owned());
    }
    wait_for(Duration::from_secs(30), "3 finished records in the spool", || async {
        (spooled(data) >= 3).then_some(())
    })
    .await?;
    c.workers[0].proc.kill9();
    c.mongo.restart().await?;
    c.workers[0].restart()?;
    Ok(ids)
}

/// Waits for the final record of each of `ids` to be replayed into MongoDB and for the spool in
/// `data` to be emptied; the records.
async fn replayed(c: &Cluster, ids: &[String], data: &std::path::Path) -> anyhow::Result<Vec<ExecutionRecord>> {
    let store = c.mongo.store(&c.db).await?;
    let mut records = Vec::new();
    for id in ids {
        // A spooled `running` record may land first (its final record is in a later spool
        // file): what counts is that the final one arrives.
        let rec = wait_for(Duration::from_secs(30), "the spooled final record to be replayed", || async {
            store.get(id).await.ok().flatten().filter(|r| r.status != Status::Running)
        })
        .await?;
        assert_eq!(rec.status, Status::Succeeded);
        assert_eq!(rec.output, "spooled-run\n");
        records.push(rec);
    }
    wait_for(Duration::from_secs(10), "the spool to be emptied", || async { (spooled(data) == 0).then_some(()) })
        .await?;
    Ok(records)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_with_records_in_its_spool_replays_them_after_restart() -> anyhow::Result<()> {
    let mut c = Cluster::start_with("records-spool-restart", 1, true, &[]).await?;
    let data = c.logs.join("data-w1");
    let ids = spool_three_runs_and_restart(&mut c, &data).await?;
    replayed(&c, &ids, &data).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_retention_index_has_the_configured_ttl_and_deletes() -> anyhow::Result<()> {
    let mut c = Cluster::start_with("records-retention", 0, false, &["--retention", "7d"]).await?;
    let store = c.mongo.store(&c.db).await?;
    wait_for(Duration::from_secs(30), "the TTL index", || async {
        (store.retention().await.ok().flatten() == Some(Duration::from_secs(7 * 86_400))).then_some(())
    })
    .await?;
    // The collection is clustered by execution id (no separate _id index).
    let options = store
        .database()
        .run_command(mongodb::bson::doc! {"listCollections": 1, "filter": {"name": "executions"}})
        .await?;
    let info = format!("{options}");
    anyhow::ensure!(info.contains("clusteredIndex"), "executions is not clustered: {info}");
    anyhow::ensure!(info.contains("block_compressor=zstd"), "executions is not compressed with zstd: {info}");
    // The TTL monitor really deletes: a record that finished 8 days ago goes, one of now stays.
    let old = now_ms() - 8 * 86_400_000;
    let (gone, kept) = (synthetic("ttl-old", old, 1), synthetic("ttl-new", now_ms(), 1));
    store.write(&[gone.clone(), kept.clone()]).await?;
    wait_for(Duration::from_secs(60), "the TTL monitor to delete the old record", || async {
        store.get(&gone.record.id.to_string()).await.ok()?.is_none().then_some(())
    })
    .await?;
    anyhow::ensure!(store.get(&kept.record.id.to_string()).await?.is_some(), "the recent record was deleted too");
    // An index an earlier version made is dropped at the next start (every index costs inserts).
    let executions = store.database().collection::<mongodb::bson::Document>("executions");
    executions
        .create_index(
            mongodb::IndexModel::builder()
                .keys(mongodb::bson::doc! {"words": 1})
                .options(mongodb::options::IndexOptions::builder().name("exec_words".to_owned()).build())
                .build(),
        )
        .await?;
    // Restarting with another retention changes the TTL in place.
    c.master.proc.kill9();
    let args = ["--mongodb-uri", c.mongo.uri.as_str(), "--mongodb-db", c.db.as_str(), "--retention", "36h"];
    c.master = etcron_tests::Master::start(&c.etcd.endpoint, &c.namespace, &c.logs, &args).await?;
    wait_for(Duration::from_secs(30), "the TTL to change", || async {
        (store.retention().await.ok().flatten() == Some(Duration::from_secs(36 * 3600))).then_some(())
    })
    .await?;
    wait_for(Duration::from_secs(30), "the obsolete index to be dropped", || async {
        let names = executions.list_index_names().await.ok()?;
        (!names.iter().any(|n| n == "exec_words")).then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn ticks_that_did_not_run_are_recorded_with_the_reason() -> anyhow::Result<()> {
    let mut c = Cluster::start("records-ledger", 2).await?;
    // Disabled in its spec: every tick is recorded `skipped`, once.
    c.put_job(
        "paused",
        json!({"schedule": "* * * * * *", "enabled": false, "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    // No worker has zone=mars: ticks are recorded `missed`, naming the selector.
    c.put_job("nowhere", json!({"schedule": "*/2 * * * * *", "selector": {"zone": "mars"}, "task": {"kind": "shell", "command": "true"}})).await?;
    let skipped = c.wait_executions("job=paused", "3 skipped ticks", |l| l.len() >= 3).await?;
    for r in &skipped {
        assert_eq!(r["status"], "skipped");
        assert_eq!(r["reason"], "job disabled (its spec says enabled: false)");
    }
    let ticks: Vec<&str> = skipped.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ticks.iter().collect::<BTreeSet<_>>().len(), ticks.len());
    let missed = c.wait_executions("job=nowhere&status=missed", "a missed tick", |l| !l.is_empty()).await?;
    let reason = missed[0]["reason"].as_str().unwrap();
    assert!(reason.contains("no live worker matches selector {zone=mars}"), "{reason}");

    // Lost: the worker running it dies.
    let mut opts = WorkerOpts::new("doomed");
    opts.labels.insert("pool".into(), "doomed".into());
    c.add_worker(opts)?;
    c.wait_workers(3).await?;
    c.put_job("victim", json!({"schedule": "@yearly", "selector": {"pool": "doomed"}, "task": {"kind": "shell", "command": "sleep 300"}})).await?;
    let (_, run) = c.call(Method::POST, "/api/jobs/victim/run", None).await?;
    let id = run["execution_id"].as_str().unwrap().to_owned();
    c.wait_executions("job=victim&status=running", "the victim running", |l| l.len() == 1).await?;
    c.workers[2].proc.kill9();
    let lost = c.wait_executions("job=victim&status=lost", "the lost record", |l| l.len() == 1).await?;
    assert_eq!(lost[0]["id"], id.as_str());
    assert_eq!(lost[0]["worker_id"], "doomed");
    assert!(lost[0]["reason"].as_str().unwrap().contains("worker doomed lost its session"));
    Ok(())
}

/// The record writes on a real `mongod`: inserts first, a taken id settled by the write's mode,
/// in whatever order and however often the writes arrive (replays from the spool).
#[tokio::test(flavor = "multi_thread")]
async fn record_writes_are_idempotent_in_any_order() -> anyhow::Result<()> {
    let c = Cluster::start("records-idempotent", 0).await?;
    let store = c.mongo.store(&c.db).await?;
    let at = now_ms();
    let running = |w: &RecordWrite| {
        let mut r = w.clone();
        r.mode = WriteMode::IfAbsent;
        r.record.status = Status::Running;
        r.record.finished_at = None;
        r
    };
    let status = |w: &RecordWrite| {
        let id = w.record.id.to_string();
        let store = store.clone();
        async move { store.get(&id).await.map(|r| r.map(|r| r.status)) }
    };
    // Running, then final in a later batch (its insert finds the id taken: replaced).
    let a = synthetic("idem-a", at, 1);
    store.write(&[running(&a)]).await?;
    anyhow::ensure!(status(&a).await? == Some(Status::Running));
    store.write(std::slice::from_ref(&a)).await?;
    anyhow::ensure!(status(&a).await? == Some(Status::Succeeded));
    // Replays: the running record never overwrites; the final one again is harmless, also when
    // the writer says it stored the running record (straight to the replace).
    store.write(&[running(&a), a.clone()]).await?;
    store.write_known(std::slice::from_ref(&a), |_| true).await?;
    anyhow::ensure!(status(&a).await? == Some(Status::Succeeded));
    // Final first, running after (out of order across batches in flight).
    let b = synthetic("idem-b", at, 1);
    store.write(std::slice::from_ref(&b)).await?;
    store.write(&[running(&b)]).await?;
    anyhow::ensure!(status(&b).await? == Some(Status::Succeeded));
    // A final record whose running record went elsewhere: the replace upserts it.
    let d = synthetic("idem-d", at, 1);
    store.write_known(std::slice::from_ref(&d), |_| true).await?;
    anyhow::ensure!(status(&d).await? == Some(Status::Succeeded));
    let executions = store.database().collection::<mongodb::bson::Document>("executions");
    anyhow::ensure!(executions.count_documents(mongodb::bson::doc! {}).await? == 3, "one document per execution");
    Ok(())
}

/// A run writes its `running` record only once it has lasted a second; until a record exists,
/// `GET /api/executions/{id}` answers from the execution's running marker in etcd. The marker
/// is written here by hand (nothing runs), so what answers is the marker, whatever the timing.
#[tokio::test(flavor = "multi_thread")]
async fn an_execution_without_a_record_is_answered_from_its_running_marker() -> anyhow::Result<()> {
    let c = Cluster::start("records-marker", 0).await?;
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    let id = ExecutionId::new("early", Tick::Scheduled(1_795_547_592_000));
    let path = format!("/api/executions/{}", urlencode(&id.to_string()));
    let (status, body) = c.call(Method::GET, &path, None).await?;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");

    let marker = etcron_model::stored::RunningExecution {
        worker_id: "w9".to_owned(),
        execution_id: id.clone(),
        pid: None,
        started_at: "2026-11-24T19:13:12.003Z".to_owned(),
        task_started_ms: Some(1_795_547_592_009),
        fencing_token: None,
        trigger: Some(TriggerKind::Schedule),
        scheduled_ms: Some(1_795_547_592_000),
        params: etcron_model::record::RunParams::default(),
    };
    let mut etcd = c.etcd.client().await?;
    etcd.put(keys.running(&id), serde_json::to_vec(&marker)?, None).await?;
    let shown = c.get(&path).await?;
    assert_eq!(shown["id"], id.to_string());
    assert_eq!(shown["status"], "running");
    assert_eq!(shown["worker_id"], "w9");
    assert_eq!(shown["trigger"], "schedule");
    assert_eq!(shown["claimed_at"], "2026-11-24T19:13:12.003Z");
    assert_eq!(shown["started_at"], "2026-11-24T19:13:12.009Z");
    assert_eq!(shown["scheduled_at"], "2026-11-24T19:13:12.000Z");

    // Once a record exists, it is what answers.
    let store = c.mongo.store(&c.db).await?;
    let mut record = ExecutionRecord::from_marker(&marker);
    record.status = Status::Succeeded;
    record.finished_at = Some("2026-11-24T19:13:12.010Z".to_owned());
    store.write(&[RecordWrite { mode: WriteMode::Replace, record }]).await?;
    let shown = c.get(&path).await?;
    assert_eq!(shown["status"], "succeeded");
    Ok(())
}

/// A worker started with neither an id nor a data dir (as a package installs it) comes back
/// from a restart as the same worker in the same data dir, and replays the records it spooled
/// while MongoDB was down. A second worker pointed at the same data dir refuses to start.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_with_the_default_id_and_data_dir_replays_its_spool_after_restart() -> anyhow::Result<()> {
    let mut c = Cluster::start_with("records-default-identity", 0, true, &[]).await?;
    let state = c.logs.join("state");
    let mut opts = WorkerOpts::new("default");
    opts.default_identity = true;
    opts.env.push(("STATE_DIRECTORY".to_owned(), state.display().to_string()));
    c.add_worker(opts.clone())?;
    c.wait_workers(1).await?;
    let data = state.join("worker");
    let id = std::fs::read_to_string(data.join("worker-id"))?.trim().to_owned();
    assert_eq!(registered(&c).await, Some(vec![id.clone()]));

    let mut second = opts.clone();
    second.id = "second".to_owned();
    let mut second = etcron_tests::Worker::start(&c.etcd.endpoint, &c.namespace, &c.logs, second)?;
    assert_eq!(second.proc.wait_exit(Duration::from_secs(20))?, Some(2), "a second worker on the data dir must refuse");
    let said = second.proc.log_text();
    assert!(said.contains("is in use by another worker"), "{said}");

    let ids = spool_three_runs_and_restart(&mut c, &data).await?;
    wait_for(Duration::from_secs(30), "the restarted worker registered under its id", || async {
        (registered(&c).await? == vec![id.clone()]).then_some(())
    })
    .await?;
    for rec in replayed(&c, &ids, &data).await? {
        assert_eq!(rec.worker_id, id);
    }
    Ok(())
}

/// The ids of the registered workers.
async fn registered(c: &Cluster) -> Option<Vec<String>> {
    let v = c.get("/api/workers").await.ok()?;
    v["workers"].as_array()?.iter().map(|w| w["id"].as_str().map(str::to_owned)).collect()
}
