//! Webhook notifications end to end: real etcd, a real `mongod`, master and workers,
//! and a webhook receiver in the test. Failure, success and recovery (also across workers),
//! missed ticks, retries with every attempt recorded, the Slack format and secret URLs, a
//! webhook that never answers while an every-second job keeps its ticks, and the workers'
//! default targets.

use std::time::Duration;

use anyhow::Result;
use etcron_model::keys::Keys;
use etcron_tests::webhook::{Received, Receiver};
use etcron_tests::{
    check_every_second, free_port, read_fired, record_command, scrape, urlencode, wait_for, wait_tick, Cluster,
    WorkerOpts,
};
use etcron_worker::notify::health;
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::{json, Value};

const UI: &str = "http://console.example";

/// Fast retries, so the tests do not wait for the production backoff.
const FAST: &str = "[notify]\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\ntimeout = \"2s\"\n";

/// A cluster whose `workers` workers read `config` (TOML) and link to [`UI`].
async fn cluster(test: &str, workers: usize, config: &str, extra: &[String]) -> Result<Cluster> {
    let mut c = Cluster::start(test, 0).await?;
    let path = c.path("worker.toml");
    std::fs::write(&path, config)?;
    for i in 1..=workers {
        let mut opts = WorkerOpts::new(&format!("w{i}"));
        opts.extra = vec!["--config".into(), path.display().to_string(), "--ui-url".into(), UI.into()];
        opts.extra.extend(extra.iter().cloned());
        c.add_worker(opts)?;
    }
    c.wait_workers(workers).await?;
    Ok(c)
}

async fn wait_received(r: &Receiver, path: &str, n: usize) -> Result<Vec<Received>> {
    wait_for(Duration::from_secs(30), &format!("{n} requests to {path}"), || async {
        let got = r.received(path);
        (got.len() >= n).then_some(got)
    })
    .await
}

async fn notifications(c: &Cluster, query: &str) -> Result<Vec<Value>> {
    Ok(c.get(&format!("/api/notifications?{query}")).await?["notifications"].as_array().unwrap().clone())
}

/// Waits until the notifications matching `query` satisfy `check`.
async fn wait_notifications<F: Fn(&[Value]) -> bool>(
    c: &Cluster,
    query: &str,
    what: &str,
    check: F,
) -> Result<Vec<Value>> {
    wait_for(Duration::from_secs(30), what, || async {
        let list = notifications(c, query).await.ok()?;
        check(&list).then_some(list)
    })
    .await
}

fn link(id: &str) -> String {
    format!("{UI}/#/execution/{}", urlencode(id))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_notifies_then_the_recovery_once_even_on_another_worker() -> Result<()> {
    let r = Receiver::start().await?;
    let mut c = cluster("notify-recovery", 2, FAST, &[]).await?;
    let ok = c.path("ok");
    c.put_job(
        "flaky",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": format!("test -e {}", ok.display())},
               "notify": [{"url": r.at("/alerts"), "on": ["failure", "recovery"]},
                          {"url": r.at("/all"), "on": ["success"]}]}),
    )
    .await?;
    let failed = c.run_now("flaky").await?;
    let got = wait_received(&r, "/alerts", 1).await?;
    let first = &got[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert!(first.header("user-agent").unwrap().starts_with("etcron/"), "{first:?}");
    assert_eq!(first.header("x-etcron-event"), Some("failure"));
    let delivery = format!("{failed}/failure/0");
    assert_eq!(first.header("x-etcron-delivery"), Some(delivery.as_str()));
    let body = first.json();
    assert_eq!(body["event"], "failure");
    assert_eq!(body["job"], "flaky");
    assert_eq!(body["delivery"], delivery.as_str());
    assert_eq!(body["execution"]["id"], failed.as_str());
    assert_eq!(body["execution"]["status"], "failed");
    assert_eq!(body["execution"]["error"], "exit code 1");
    assert_eq!(body["url"], link(&failed).as_str());
    assert!(chrono::DateTime::parse_from_rfc3339(body["sent_at"].as_str().unwrap()).is_ok(), "{body}");
    // The record as the API shows it, output included (the record may reach MongoDB after the
    // notification reached the receiver: records are written in batches).
    let path = format!("/api/executions/{}", urlencode(&failed));
    let shown = wait_for(Duration::from_secs(30), "the failed record", || async { c.get(&path).await.ok() }).await?;
    assert_eq!(body["execution"], shown);

    // The worker that saw the failure goes; the success runs on the other one, which reads the
    // failure from the job's health key.
    let ran_on = body["execution"]["worker_id"].as_str().unwrap().to_owned();
    let idx = c.workers.iter().position(|w| w.opts.id == ran_on).unwrap();
    c.workers[idx].proc.signal(Signal::SIGTERM)?;
    c.workers[idx].proc.wait_exit(Duration::from_secs(30))?;
    c.wait_workers(1).await?;
    std::fs::write(&ok, "")?;
    let fixed = c.run_now("flaky").await?;
    let got = wait_received(&r, "/alerts", 2).await?;
    assert_eq!(got[1].header("x-etcron-event"), Some("recovery"));
    let body = got[1].json();
    assert_eq!(body["event"], "recovery");
    assert_eq!(body["execution"]["id"], fixed.as_str());
    assert_eq!(body["execution"]["status"], "succeeded");
    assert_ne!(body["execution"]["worker_id"], ran_on.as_str(), "the recovery was seen by the other worker");
    let success = wait_received(&r, "/all", 1).await?;
    assert_eq!(success[0].json()["event"], "success");
    assert_eq!(success[0].json()["execution"]["id"], fixed.as_str());

    // Another success: no second recovery.
    let again = c.run_now("flaky").await?;
    wait_notifications(&c, &format!("execution={}", urlencode(&again)), "the second success delivered", |l| {
        l.iter().any(|n| n["event"] == "success" && n["state"] == "delivered")
    })
    .await?;
    let for_again = notifications(&c, &format!("execution={}", urlencode(&again))).await?;
    assert_eq!(for_again.len(), 1, "{for_again:?}");
    assert_eq!(r.received("/alerts").len(), 2, "one failure, one recovery");
    assert_eq!(r.received("/all").len(), 2, "a success per success, only to the target that asked");
    assert!(r.received("/alerts").iter().all(|q| q.json()["event"] != "success"));

    // The health key says ok, and goes with the job.
    let keys = Keys::new(&c.namespace)?;
    let mut etcd = c.etcd.client().await?;
    let health = etcd.get(keys.health("flaky"), None).await?;
    let value: Value = serde_json::from_slice(health.kvs()[0].value())?;
    assert_eq!(value["failing"], false);
    assert_eq!(value["execution_id"], fixed.as_str());
    let (status, _) = c.call(Method::DELETE, "/api/jobs/flaky", None).await?;
    assert_eq!(status, 204);
    assert!(etcd.get(keys.health("flaky"), None).await?.kvs().is_empty(), "deleting the job deleted its health");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missed_tick_notifies() -> Result<()> {
    let r = Receiver::start().await?;
    let c = cluster("notify-missed", 1, FAST, &[]).await?;
    c.put_job(
        "on-mars",
        json!({"schedule": "* * * * * *", "selector": {"region": "mars"},
               "task": {"kind": "shell", "command": "true"},
               "notify": [{"url": r.at("/missed"), "on": ["missed"]}]}),
    )
    .await?;
    let got = wait_received(&r, "/missed", 1).await?;
    c.call(Method::POST, "/api/jobs/on-mars/pause", None).await?;
    let body = got[0].json();
    assert_eq!(got[0].header("x-etcron-event"), Some("missed"));
    assert_eq!(body["event"], "missed");
    assert_eq!(body["execution"]["status"], "missed");
    let reason = body["execution"]["reason"].as_str().unwrap();
    assert!(reason.contains("no live worker matches selector {region=mars}"), "{reason}");
    let id = body["execution"]["id"].as_str().unwrap();
    assert_eq!(body["url"], link(id).as_str());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_delivery_is_retried_and_every_attempt_is_recorded() -> Result<()> {
    let r = Receiver::start().await?;
    r.refuse_next("/hook", 2, 500);
    let c = cluster("notify-retry", 1, FAST, &[]).await?;
    c.put_job(
        "breaks",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "exit 3"},
               "notify": [{"url": r.at("/hook"), "on": ["failure"]}]}),
    )
    .await?;
    let id = c.run_now("breaks").await?;
    let got = wait_received(&r, "/hook", 3).await?;
    let delivery = format!("{id}/failure/0");
    for q in &got {
        assert_eq!(q.header("x-etcron-delivery"), Some(delivery.as_str()), "the same delivery id on every try");
    }
    assert!(got[1].at_ms - got[0].at_ms >= 50 && got[2].at_ms - got[1].at_ms >= 50, "backoff between tries");
    let list = wait_notifications(&c, "job=breaks", "the delivery recorded as delivered", |l| {
        l.len() == 1 && l[0]["state"] == "delivered"
    })
    .await?;
    let n = &list[0];
    assert_eq!(n["id"], delivery.as_str());
    assert_eq!(n["execution_id"], id.as_str());
    assert_eq!(n["event"], "failure");
    assert_eq!(n["target"], r.at("/hook").as_str());
    assert_eq!(n["format"], "json");
    assert_eq!(n["worker_id"], "w1");
    assert_eq!(n["default_target"], false);
    assert!(n["finished_at"].is_string());
    let attempts = n["attempts"].as_array().unwrap();
    let statuses: Vec<&Value> = attempts.iter().map(|a| &a["http_status"]).collect();
    assert_eq!(statuses, [&json!(500), &json!(500), &json!(200)], "{n}");
    assert_eq!(attempts[0]["error"], "HTTP 500: receiver told to refuse");
    assert_eq!(attempts[2]["error"], Value::Null);
    // The filters.
    assert_eq!(notifications(&c, &format!("execution={}&event=failure", urlencode(&id))).await?.len(), 1);
    assert!(notifications(&c, "job=breaks&event=success").await?.is_empty());
    let (status, body) = c.call(Method::GET, "/api/notifications?event=killed", None).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("event")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_deliveries_are_text_and_secret_urls_stay_secret() -> Result<()> {
    let r = Receiver::start().await?;
    let c = cluster("notify-slack", 1, FAST, &[]).await?;
    let secret = r.at("/services/T000/B000/s3cr3t");
    c.put_job(
        "chatty",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "exit 2"},
               "notify": [{"name": "ops", "secret_url": secret, "format": "slack", "on": ["failure"],
                           "secret_headers": {"X-Token": "hunter2"}}]}),
    )
    .await?;
    // The API withholds the URL and the header; a spec saved back as read keeps both.
    let shown = c.get("/api/jobs/chatty").await?;
    let target = &shown["spec"]["notify"][0];
    assert_eq!(target["secret_url"], Value::Null);
    assert_eq!(target["secret_headers"]["X-Token"], Value::Null);
    assert!(!shown.to_string().contains("s3cr3t") && !shown.to_string().contains("hunter2"));
    c.put_job("chatty", shown["spec"].clone()).await?;
    let id = c.run_now("chatty").await?;
    let got = wait_received(&r, "/services/T000/B000/s3cr3t", 1).await?;
    assert_eq!(got[0].header("x-token"), Some("hunter2"));
    let body = got[0].json();
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    assert_eq!(
        body["text"],
        format!(":x: etcron: job `chatty` failed on worker w1 (exit code 2) — <{}|view execution>", link(&id))
    );
    let list =
        wait_notifications(&c, "job=chatty", "the delivery recorded", |l| l.len() == 1 && l[0]["state"] == "delivered")
            .await?;
    assert_eq!(list[0]["format"], "slack");
    assert_eq!(list[0]["target_name"], "ops");
    assert_eq!(list[0]["target"], format!("{}/…", r.url).as_str(), "only the host of a secret URL");
    assert!(!list[0].to_string().contains("s3cr3t"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_that_never_answers_does_not_delay_scheduling() -> Result<()> {
    let r = Receiver::start().await?;
    r.hang("/void");
    let metrics = format!("127.0.0.1:{}", free_port());
    // One slow delivery at a time and room for two more: the queue overflows within seconds.
    let config = "[notify]\nbackoff = \"100ms\"\nmax_backoff = \"100ms\"\ntimeout = \"1s\"\nmax_attempts = 2\n\
                  queue = 2\nconcurrency = 1\n";
    let c = cluster("notify-hang", 1, config, &["--metrics-listen".into(), metrics.clone()]).await?;
    let file = c.path("fired");
    c.put_job(
        "ticker",
        json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&file)},
               "notify": [{"url": r.at("/void"), "on": ["success"]}]}),
    )
    .await?;
    let jobs = vec!["ticker".to_owned()];
    let first = wait_for(Duration::from_secs(30), "the first tick", || async {
        read_fired(&file).first().map(|f| f.scheduled_ms)
    })
    .await?;
    wait_tick(&file, &jobs, first + 10_000).await?;
    let report = check_every_second(&read_fired(&file), &jobs, first - 1, first + 10_000);
    assert!(report.duplicates.is_empty() && report.missing.is_empty(), "{report:?}");
    let late: Vec<i64> =
        read_fired(&file).iter().map(|f| f.extra[0].parse::<i64>().unwrap() - f.scheduled_ms).collect();
    assert!(late.iter().all(|ms| *ms < 1000), "ticks started on time while deliveries hung: {late:?}");
    c.call(Method::POST, "/api/jobs/ticker/pause", None).await?;
    let missed = c.get("/api/executions?job=ticker&status=missed").await?;
    assert!(missed["executions"].as_array().unwrap().is_empty(), "{missed}");
    // Deliveries timed out and are recorded failed, each try with its error.
    let list =
        wait_notifications(&c, "job=ticker", "a failed delivery", |l| l.iter().any(|n| n["state"] == "failed")).await?;
    let failed = list.iter().find(|n| n["state"] == "failed").unwrap();
    let attempts = failed["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{failed}");
    for a in attempts {
        assert_eq!(a["error"], "no answer within 1s");
        assert_eq!(a["http_status"], Value::Null);
    }
    // The queue overflowed: dropped loudly.
    let scrape = scrape(&format!("http://{metrics}/metrics"), None).await?;
    assert!(scrape.value("etcron_worker_notifications_dropped_total", &[]) > 0.0, "{}", scrape.text);
    assert!(scrape.value("etcron_worker_notifications_total", &[("outcome", "failed")]) > 0.0);
    assert!(scrape.value("etcron_worker_notification_attempts_total", &[("result", "timeout")]) >= 2.0);
    assert!(c.workers[0].proc.log_text().contains("NOTIFICATION DROPPED"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_targets_apply_to_jobs_without_notify_and_an_empty_list_suppresses_them() -> Result<()> {
    let r = Receiver::start().await?;
    let config =
        format!("{FAST}\n[[notify.targets]]\nname = \"ops\"\nurl = \"{}\"\non = [\"failure\"]\n", r.at("/default"));
    let c = cluster("notify-default", 1, &config, &[]).await?;
    c.put_job("quiet", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "exit 1"}, "notify": []}))
        .await?;
    c.put_job("loud", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "exit 1"}})).await?;
    let quiet = c.run_now("quiet").await?;
    c.wait_executions("job=quiet&status=failed", "the quiet job's failure", |l| l.len() == 1).await?;
    let loud = c.run_now("loud").await?;
    let got = wait_received(&r, "/default", 1).await?;
    assert_eq!(got[0].json()["execution"]["id"], loud.as_str());
    let list = wait_notifications(&c, "job=loud", "the default delivery recorded", |l| {
        l.len() == 1 && l[0]["state"] == "delivered"
    })
    .await?;
    assert_eq!(list[0]["default_target"], true);
    assert_eq!(list[0]["target_name"], "ops");
    assert_eq!(list[0]["id"], format!("{loud}/failure/default-0").as_str());
    assert!(notifications(&c, "job=quiet").await?.is_empty(), "notify: [] sends nothing");
    assert!(r.all().iter().all(|q| q.json()["execution"]["id"] != quiet.as_str()));
    assert_eq!(r.all().len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn of_workers_finishing_together_exactly_one_sees_the_recovery() -> Result<()> {
    let c = Cluster::start("notify-health", 0).await?;
    c.put_job("j", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    let keys = Keys::new(&c.namespace)?;
    let client = c.etcd.client().await?;
    let update = |failing: bool, id: String, finished_ms: i64| {
        let (client, keys) = (client.clone(), keys.clone());
        async move {
            let outcome = health::Outcome { failing, execution_id: &id, finished_ms };
            health::update(&client, &keys, "j", None, outcome).await
        }
    };
    let first = update(true, "j@1#1".into(), 1_000).await?;
    assert!(first.changed && first.failures == 1, "the first failure changes the health: {first:?}");
    assert_eq!(update(true, "j@2#1".into(), 1_100).await?.failures, 2, "a second one counts on");
    assert!(!update(true, "j@2#1".into(), 1_100).await?.changed, "the same outcome again is not counted twice");
    let racers = (0..8).map(|k| tokio::spawn(update(false, format!("j@{}#1", 10 + k), 2_000 + k)));
    let mut recovered = 0;
    for racer in racers {
        if racer.await??.recovered {
            recovered += 1;
        }
    }
    assert_eq!(recovered, 1, "exactly one of the simultaneous successes is the recovery");
    // A failure that finished before the recovery, processed late, does not undo it.
    assert!(!update(true, "j@3#1".into(), 1_500).await?.changed);
    assert!(update(true, "j@4#1".into(), 9_000).await?.changed);
    // Deleting the job deletes its health, and a late outcome does not bring it back.
    let (status, _) = c.call(Method::DELETE, "/api/jobs/j", None).await?;
    assert_eq!(status, 204);
    let mut kv = client.kv_client();
    assert!(kv.get(keys.health("j"), None).await?.kvs().is_empty());
    assert!(!update(false, "j@5#1".into(), 10_000).await?.changed);
    assert!(kv.get(keys.health("j"), None).await?.kvs().is_empty());
    Ok(())
}

/// Eight workers counting eight final failures at once: no count is lost, and exactly one of
/// them pauses the job (the third in a row does; the sixth finds it paused already).
#[tokio::test(flavor = "multi_thread")]
async fn of_failures_counted_together_exactly_one_pauses_the_job() -> Result<()> {
    let c = Cluster::start("notify-pause-race", 0).await?;
    c.put_job("j", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "false"}})).await?;
    let keys = Keys::new(&c.namespace)?;
    let client = c.etcd.client().await?;
    let racers = (0..8).map(|k| {
        let (client, keys) = (client.clone(), keys.clone());
        tokio::spawn(async move {
            let id = format!("j@{}#1", 1000 + k);
            let outcome = health::Outcome { failing: true, execution_id: &id, finished_ms: 1_000 + k };
            let tracked = health::update(&client, &keys, "j", Some(3), outcome).await?;
            // Asked again (an unsure answer, the notifier after the close): the same answer.
            let again = health::update(&client, &keys, "j", Some(3), outcome).await?;
            anyhow::Ok((tracked, again))
        })
    });
    let mut pausers = Vec::new();
    let mut counts = Vec::new();
    for racer in racers {
        let (tracked, again) = racer.await??;
        assert!(!again.changed && again.paused == tracked.paused, "{tracked:?} then {again:?}");
        counts.push(tracked.failures);
        if tracked.paused {
            pausers.push(tracked.failures);
        }
    }
    counts.sort_unstable();
    assert_eq!(counts, (1..=8).collect::<Vec<u32>>(), "each failure counted once, none lost");
    assert_eq!(pausers, [3], "exactly one pause, by the third failure in a row");
    let pause = c.get("/api/jobs/j").await?["paused"].clone();
    assert_eq!(pause["by"], "etcron");
    assert!(pause["reason"].as_str().unwrap().starts_with("pause_after_failures: 3 final failures in a row"));
    Ok(())
}
