//! SLA alerts end to end (real etcd, `mongod`, a master, two workers racing, a webhook receiver
//! in the test): `late` and `long_running` once per execution whichever worker raises them,
//! `stale` once per window by one of the two workers checking every job, not while paused and
//! counted from the resume, `output_match` per matching execution, and a target's `silence`
//! sending a flapping job's event once and recording the rest `silenced`; an alert no target
//! listens for warned of at save and apply, recorded `no_target` and shown by `describe`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Result;
use etcron_model::keys::Keys;
use etcron_tests::webhook::{Received, Receiver};
use etcron_tests::{free_port, ms, now_ms, scrape, urlencode, wait_for, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

/// Fast retries, so the tests do not wait for the production backoff.
const FAST: &str = "[notify]\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\ntimeout = \"2s\"\n";

/// A cluster of two workers, each with its metrics endpoint (returned).
async fn cluster(test: &str) -> Result<(Cluster, Vec<String>)> {
    let mut c = Cluster::start(test, 0).await?;
    let path = c.path("worker.toml");
    std::fs::write(&path, FAST)?;
    let mut metrics = Vec::new();
    for i in 1..=2 {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut opts = WorkerOpts::new(&format!("w{i}"));
        opts.extra = vec!["--config".into(), path.display().to_string(), "--metrics-listen".into(), listen.clone()];
        c.add_worker(opts)?;
        metrics.push(format!("http://{listen}/metrics"));
    }
    c.wait_workers(2).await?;
    Ok((c, metrics))
}

/// Alerts of `event` the workers raised, summed over both.
async fn raised(metrics: &[String], event: &str) -> Result<f64> {
    let mut sum = 0.0;
    for url in metrics {
        sum += scrape(url, None).await?.value("etcron_worker_alerts_raised_total", &[("event", event)]);
    }
    Ok(sum)
}

/// Deliveries to `path` by event, each delivery id once (a retry repeats its id).
fn by_event(got: &[Received]) -> HashMap<String, Vec<Value>> {
    let mut seen = std::collections::HashSet::new();
    let mut out: HashMap<String, Vec<Value>> = HashMap::new();
    for q in got {
        if seen.insert(q.header("x-etcron-delivery").unwrap().to_owned()) {
            let body = q.json();
            out.entry(body["event"].as_str().unwrap().to_owned()).or_default().push(body);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn late_and_long_running_are_raised_once_per_execution_whichever_worker_sees_them() -> Result<()> {
    let r = Receiver::start().await?;
    let (c, metrics) = cluster("alerts-late").await?;
    // Every second a three-second run: ticks wait in the queue (late), every run outlasts
    // max_duration. Ticks stop after `active_until`, so the queue drains.
    let until = chrono::DateTime::from_timestamp_millis(now_ms() + 9_000).unwrap().to_rfc3339();
    c.put_job(
        "slowq",
        json!({"schedule": "* * * * * *", "active_until": until, "concurrency": "queue", "max_queue": 2,
               "task": {"kind": "shell", "command": "sleep 3"},
               "alerts": {"late_start": "1s", "max_duration": "2s"},
               "notify": [{"url": r.at("/sla"), "on": ["late", "long_running"]}]}),
    )
    .await?;
    // Every run ended: nothing waits or runs, and the last run's record is in.
    let records = wait_for(Duration::from_secs(60), "the queue drained and every run recorded", || async {
        let job = c.get("/api/jobs/slowq").await.ok()?;
        let running = c.get("/api/executions?job=slowq&status=running").await.ok()?;
        let done = c.get("/api/executions?job=slowq&status=succeeded&limit=100").await.ok()?;
        let quiet = job["queue"].as_array().is_some_and(Vec::is_empty)
            && running["executions"].as_array().is_some_and(Vec::is_empty)
            // The last tick's run may wait for two runs of 3 s, then run 3 s itself: a run
            // dequeued less than a second ago is neither queued nor recorded running yet.
            && now_ms() > ms(&json!(until)) + 10_000;
        quiet.then(|| done["executions"].as_array().unwrap().clone())
    })
    .await?;
    assert!(records.len() >= 3, "{records:?}");
    let lateness: HashMap<String, i64> = records
        .iter()
        .map(|e| (e["id"].as_str().unwrap().to_owned(), ms(&e["started_at"]) - ms(&e["scheduled_at"])))
        .collect();
    let late_ones = lateness.values().filter(|l| **l > 1_100).count();
    assert!(late_ones >= 2, "ticks waited in the queue: {lateness:?}");
    // Every run raised long_running; every late one `late`. Wait for the deliveries, then
    // check that none came twice.
    wait_for(Duration::from_secs(30), "the alerts delivered", || async {
        let got = by_event(&r.received("/sla"));
        let long = got.get("long_running").map_or(0, Vec::len);
        let late = got.get("late").map_or(0, Vec::len);
        (long >= records.len() && late >= late_ones).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = r.received("/sla");
    let got = by_event(&all);
    let mut per: HashMap<(String, String), usize> = HashMap::new();
    for q in &all {
        let body = q.json();
        let id = body["alert"]["execution_id"].as_str().unwrap().to_owned();
        *per.entry((id, body["event"].as_str().unwrap().to_owned())).or_default() += 1;
    }
    assert!(per.values().all(|n| *n == 1), "one delivery per execution and event: {per:?}");
    let long: Vec<&str> = got["long_running"].iter().map(|b| b["alert"]["execution_id"].as_str().unwrap()).collect();
    assert_eq!(long.len(), records.len(), "{long:?} for {lateness:?}");
    for (id, late) in &lateness {
        let alerted = got.get("late").is_some_and(|l| l.iter().any(|b| b["alert"]["execution_id"] == id.as_str()));
        if *late > 1_100 {
            assert!(alerted, "{id} started {late} ms late without an alert");
        } else if *late < 900 {
            assert!(!alerted, "{id} started {late} ms late and was alerted");
        }
    }
    let body = &got["late"][0];
    assert_eq!(body["job"], "slowq");
    assert_eq!(body["execution"], Value::Null);
    assert_eq!(body["alert"]["threshold"], "1s");
    assert!(body["alert"]["message"].as_str().unwrap().starts_with("late_start: execution slowq@"), "{body}");
    assert_eq!(got["long_running"][0]["alert"]["threshold"], "2s");
    // The workers raised exactly as many as were delivered: no occurrence twice.
    assert_eq!(raised(&metrics, "long_running").await?, long.len() as f64);
    assert_eq!(raised(&metrics, "late").await?, got["late"].len() as f64);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_is_raised_once_per_window_not_while_paused_and_counted_from_the_resume() -> Result<()> {
    let r = Receiver::start().await?;
    let (c, metrics) = cluster("alerts-stale").await?;
    let saved = now_ms();
    c.put_job(
        "dry",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"},
               "alerts": {"no_success_within": "4s"},
               "notify": [{"url": r.at("/stale"), "on": ["stale"]}]}),
    )
    .await?;
    let stale = |n: usize| {
        let r = &r;
        async move {
            wait_for(Duration::from_secs(30), &format!("{n} stale alerts"), || async {
                let got = r.received("/stale");
                (got.len() >= n).then_some(got)
            })
            .await
        }
    };
    // Never succeeded: stale four seconds after the workers first looked, once, although
    // both workers check it.
    let first = stale(1).await?;
    let body = first[0].json();
    assert_eq!(body["event"], "stale");
    assert_eq!(body["alert"]["execution_id"], Value::Null);
    assert!(body["alert"]["message"].as_str().unwrap().contains("when its no_success_within was first checked"));
    assert!(first[0].at_ms >= saved + 4_000, "not before the window ended");
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(r.received("/stale").len(), 1, "raised once for the window, not every check");

    // A success starts a new window: stale again four seconds after it.
    let (status, run) = c.call(Method::POST, "/api/jobs/dry/run", None).await?;
    assert_eq!(status, 202, "{run}");
    let id = run["execution_id"].as_str().unwrap().to_owned();
    let done = c.wait_executions("job=dry&status=succeeded", "the success", |l| l.len() == 1).await?;
    let finished = ms(&done[0]["finished_at"]);
    let second = stale(2).await?;
    let body = second[1].json();
    assert_eq!(body["alert"]["occurrence"], format!("dry@stale-{finished}").as_str(), "{body} after {id}");
    assert!(second[1].at_ms >= finished + 4_000);
    // Its delivery is found by its occurrence, through the API and etcronctl.
    let occurrence = format!("dry@stale-{finished}");
    let found = wait_for(Duration::from_secs(30), "the stale delivery recorded", || async {
        let list = c.get(&format!("/api/notifications?execution={}", urlencode(&occurrence))).await.ok()?;
        let list = list["notifications"].as_array()?.clone();
        (list.len() == 1).then_some(list)
    })
    .await?;
    assert_eq!(
        (found[0]["event"].as_str(), found[0]["execution_id"].as_str()),
        (Some("stale"), Some(occurrence.as_str()))
    );
    let out = tokio::process::Command::new(etcron_tests::bin("etcronctl")?)
        .args(["notifications", "--job", "dry", "--event", "stale"])
        .env("ETCRON_SERVER", &c.master.url)
        .env_remove("ETCRON_TOKEN")
        .output()
        .await?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(table.lines().filter(|l| l.contains("stale")).count(), 2, "{table}");
    assert!(table.contains(&occurrence), "{table}");

    // Paused: not stale however long; resumed: the window runs from the resume. A success
    // starts a window, which ends while the job is paused.
    let (status, _) = c.call(Method::POST, "/api/jobs/dry/run", None).await?;
    assert_eq!(status, 202);
    c.wait_executions("job=dry&status=succeeded", "the second success", |l| l.len() == 2).await?;
    let (status, _) = c.call(Method::POST, "/api/jobs/dry/pause", Some(json!({"reason": "maintenance"}))).await?;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(r.received("/stale").len(), 2, "no stale while paused");
    let resumed = now_ms();
    let (status, _) = c.call(Method::POST, "/api/jobs/dry/resume", None).await?;
    assert_eq!(status, 200);
    let third = stale(3).await?;
    assert!(third[2].at_ms >= resumed + 3_500, "counted from the resume: {} after {resumed}", third[2].at_ms);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let all = r.received("/stale");
    assert_eq!(all.len(), 3, "{:?}", all.iter().map(Received::json).collect::<Vec<_>>());
    assert_eq!(raised(&metrics, "stale").await?, 3.0, "each window raised by one worker");

    // What alerts keep goes with the job.
    let keys = Keys::new(&c.namespace)?;
    let mut etcd = c.etcd.client().await?;
    let prefix = keys.job_alerts_prefix("dry");
    let opts = Some(etcd_client::GetOptions::new().with_prefix());
    assert!(!etcd.get(prefix.as_str(), opts.clone()).await?.kvs().is_empty());
    let (status, _) = c.call(Method::DELETE, "/api/jobs/dry", None).await?;
    assert_eq!(status, 204);
    assert!(etcd.get(prefix.as_str(), opts).await?.kvs().is_empty(), "deleting the job deleted its alerts' keys");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn output_match_alerts_and_a_silence_window_pages_a_flapping_job_once() -> Result<()> {
    let r = Receiver::start().await?;
    let (c, _metrics) = cluster("alerts-output").await?;
    // Bad input: named fields.
    for (spec, field) in [
        (json!({"alerts": {"on_output_match": "("}}), "alerts.on_output_match"),
        (json!({"alerts": {"late_start": "0s"}}), "alerts.late_start"),
        (json!({"alerts": {"no_success_within": "1y"}}), "alerts.no_success_within"),
        (json!({"notify": [{"url": r.at("/x"), "silence": "8d"}]}), "notify[0].silence"),
        (json!({"notify": [{"url": r.at("/x"), "on": ["late", "sla"]}]}), "notify[0].on[1]"),
    ] {
        let mut body = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}});
        body.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        let (status, answer) = c.call(Method::PUT, "/api/jobs/bad", Some(body)).await?;
        assert_eq!(status, 400, "{answer}");
        let named = answer["error"]["field"].as_str().unwrap_or_default();
        assert!(named.starts_with(field), "{field}: {answer}");
    }
    let until = chrono::DateTime::from_timestamp_millis(now_ms() + 6_000).unwrap().to_rfc3339();
    c.put_job(
        "noisy",
        json!({"schedule": "* * * * * *", "active_until": until,
               "task": {"kind": "shell", "command": "echo 'ERROR: disk full'; exit 1"},
               "alerts": {"on_output_match": "ERROR: .* full"},
               "notify": [{"name": "pager", "url": r.at("/pager"), "on": ["failure", "output_match"], "silence": "1h"},
                          {"url": r.at("/log"), "on": ["output_match"]}]}),
    )
    .await?;
    c.put_job(
        "calm",
        json!({"schedule": "* * * * * *", "active_until": until,
               "task": {"kind": "shell", "command": "echo all fine"},
               "alerts": {"on_output_match": "ERROR"},
               "notify": [{"url": r.at("/calm"), "on": ["output_match"]}]}),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(u64::try_from(ms(&json!(until)) - now_ms() + 1_500).unwrap_or(0))).await;
    // The last records reach MongoDB in the sinks' next batches.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let failed = c.wait_executions("job=noisy&status=failed&limit=100", "the failures", |l| l.len() >= 3).await?;
    let n = failed.len();
    // Every matching execution: one output_match to the target without silence.
    let log = wait_for(Duration::from_secs(30), "an output_match per execution", || async {
        let got = by_event(&r.received("/log"));
        got.get("output_match").filter(|l| l.len() >= n).cloned()
    })
    .await?;
    let mut ids: Vec<&str> = log.iter().map(|b| b["execution"]["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "each execution once: {ids:?}");
    assert!(log[0]["execution"]["output"].as_str().unwrap().contains("ERROR: disk full"));
    // The pager heard each event once; the rest were recorded silenced.
    let pager = wait_for(Duration::from_secs(30), "the pager's deliveries recorded", || async {
        let list = c.get("/api/notifications?job=noisy&limit=500").await.ok()?;
        let list: Vec<Value> =
            list["notifications"].as_array()?.iter().filter(|d| d["target_name"] == "pager").cloned().collect();
        (list.len() >= 2 * n).then_some(list)
    })
    .await?;
    for event in ["failure", "output_match"] {
        let of: Vec<&Value> = pager.iter().filter(|d| d["event"] == event).collect();
        let sent = of.iter().filter(|d| d["state"] != "silenced").count();
        assert_eq!(sent, 1, "{event}: {of:?}");
        assert_eq!(of.len(), n, "{event}: every execution's notification recorded");
        assert!(of.iter().filter(|d| d["state"] == "silenced").all(|d| d["attempts"].as_array().unwrap().is_empty()));
    }
    let to_pager = by_event(&r.received("/pager"));
    assert_eq!((to_pager["failure"].len(), to_pager["output_match"].len()), (1, 1), "{to_pager:?}");
    // A filter by event and the listing of the silenced.
    let silenced = c.get("/api/notifications?job=noisy&event=output_match&limit=500").await?;
    assert!(silenced["notifications"].as_array().unwrap().iter().any(|d| d["state"] == "silenced"));
    // Output that does not match raises nothing.
    let calm = c.wait_executions("job=calm&status=succeeded", "the calm runs", |l| l.len() >= 3).await?;
    assert!(!calm.is_empty());
    assert!(r.received("/calm").is_empty());
    let id = failed[0]["id"].as_str().unwrap();
    let mine = c.get(&format!("/api/notifications?execution={}", urlencode(id))).await?;
    assert!(mine["notifications"].as_array().unwrap().iter().any(|d| d["event"] == "output_match"));
    Ok(())
}

/// Runs etcronctl against the cluster's master: exit code, stdout, stderr.
async fn ctl(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(etcron_tests::bin("etcronctl").unwrap());
    cmd.args(args).env("ETCRON_SERVER", &c.master.url).env_remove("ETCRON_TOKEN");
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await.expect("etcronctl hung").unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_alert_no_target_listens_for_is_warned_at_save_and_recorded_no_target() -> Result<()> {
    let r = Receiver::start().await?;
    let (c, metrics) = cluster("alerts-unrouted").await?;
    // The usual choice: a target for failures only, and an SLA alert.
    let spec = json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": "sleep 3"},
        "alerts": {"max_duration": "1s"}, "notify": [{"name": "oncall", "url": r.at("/fail"), "on": ["failure"]}]});
    let (status, body) = c.call(Method::PUT, "/api/jobs/unheard", Some(spec.clone())).await?;
    assert_eq!(status, 201, "the save goes through: {body}");
    let warnings = body["warnings"].as_array().expect("warned");
    assert_eq!(warnings.len(), 1, "{body}");
    assert_eq!(warnings[0]["field"], "alerts.max_duration");
    assert!(warnings[0]["message"].as_str().unwrap().contains("no target in notify listens for"), "{body}");
    // Without notify, the live workers' default targets decide: these workers have none.
    let mut bare = spec.clone();
    bare.as_object_mut().unwrap().remove("notify");
    let (_, body) = c.call(Method::PUT, "/api/jobs/bare", Some(bare)).await?;
    assert!(body["warnings"][0]["message"].as_str().unwrap().contains("no live worker's default target"), "{body}");
    // A target that listens: no warning.
    let mut heard = spec.clone();
    heard["notify"][0]["on"] = json!(["failure", "long_running"]);
    let (_, body) = c.call(Method::PUT, "/api/jobs/heard", Some(heard)).await?;
    assert!(body.get("warnings").is_none(), "{body}");

    // Raised, it is recorded `no_target`, counted, and sent nowhere.
    let id = c.run_now("unheard").await?;
    let path = format!("/api/notifications?job=unheard&execution={}", urlencode(&id));
    let delivery = wait_for(Duration::from_secs(30), "the unrouted alert recorded", || async {
        let list = c.get(&path).await.ok()?;
        list["notifications"].as_array()?.iter().find(|d| d["state"] == "no_target").cloned()
    })
    .await?;
    assert_eq!((delivery["event"].as_str(), delivery["target"].as_str()), (Some("long_running"), Some("")));
    assert_eq!(raised(&metrics, "long_running").await?, 1.0);
    let mut unrouted = 0.0;
    for url in &metrics {
        unrouted += scrape(url, None).await?.value("etcron_worker_notifications_total", &[("outcome", "no_target")]);
    }
    assert_eq!(unrouted, 1.0);
    assert!(r.received("/fail").is_empty(), "nothing was sent to the failure target");

    // describe says who hears each alert, lists the targets, and shows the unrouted raise.
    let (code, stdout, stderr) = ctl(&c, &["jobs", "describe", "unheard"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("running over 1s → nobody (no target listens for long_running)"), "{stdout}");
    assert!(stdout.contains("notify:       oncall: failure"), "{stdout}");
    assert!(
        stdout.contains("no_target") && stdout.contains("not sent: no target listens for long_running"),
        "{stdout}"
    );
    let (_, stdout, _) = ctl(&c, &["notifications", "--job", "unheard"]).await;
    assert!(stdout.contains("no_target"), "{stdout}");
    // apply says so too, and still saves.
    let file = c.path("unheard2.json");
    std::fs::write(&file, json!({"jobs": {"unheard2": spec}}).to_string())?;
    let (code, _, stderr) = ctl(&c, &["jobs", "apply", "-f", file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning: job \"unheard2\": alerts.max_duration: raises long_running"), "{stderr}");
    Ok(())
}
