//! Pausing is the operator's state, kept outside the spec (`{ns}/paused/{job}`): saving the spec
//! again with `enabled: true` (what `etcronctl jobs apply` does) never resumes a paused job;
//! resume deletes the pause and enables a spec that itself says `enabled: false`; a delete takes
//! the pause along; workers learn pauses from their first listing (a worker started while a job
//! is paused never runs it) and from their watch (a pause written while they run stops the runs).

use std::path::Path;
use std::time::Duration;

use etcron_model::keys::Keys;
use etcron_tests::webhook::Receiver;
use etcron_tests::{now_ms, read_fired, record_command, wait_for, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

fn every_second(file: &Path) -> Value {
    json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(file)}})
}

/// A spec that never fires during a test.
fn hourly() -> Value {
    json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": "true"}})
}

async fn pause(c: &Cluster, job: &str, body: Option<Value>) -> (u16, Value) {
    c.call(Method::POST, &format!("/api/jobs/{job}/pause"), body).await.unwrap()
}

async fn resume(c: &Cluster, job: &str) -> (u16, Value) {
    c.call(Method::POST, &format!("/api/jobs/{job}/resume"), None).await.unwrap()
}

/// POSTs a raw body to the pause route.
async fn pause_raw(c: &Cluster, job: &str, body: &'static str) -> (u16, Value) {
    let resp = c
        .http
        .post(format!("{}/api/jobs/{job}/pause", c.master.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Schedule ticks of `job` that ran after `after_ms`.
fn ran_after(file: &Path, job: &str, after_ms: i64) -> Vec<i64> {
    read_fired(file).into_iter().filter(|f| f.job == job && f.scheduled_ms > after_ms).map(|f| f.scheduled_ms).collect()
}

async fn wait_runs(file: &Path, job: &str, after_ms: i64, what: &str) -> anyhow::Result<()> {
    wait_for(Duration::from_secs(30), what, || async { (!ran_after(file, job, after_ms).is_empty()).then_some(()) })
        .await
}

/// The stored value of `key`, if any.
async fn stored(c: &Cluster, key: &str) -> Option<Vec<u8>> {
    let mut etcd = c.etcd.client().await.unwrap();
    etcd.get(key, None).await.unwrap().kvs().first().map(|kv| kv.value().to_vec())
}

/// A record's scheduled time in Unix ms.
fn scheduled_ms(record: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(record["scheduled_at"].as_str().unwrap()).unwrap().timestamp_millis()
}

fn job_in_list<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["jobs"].as_array().unwrap().iter().find(|j| j["name"] == name).unwrap()
}

/// How long after a pause commits a tick may still run: the tick raced `claim_ahead` (200 ms)
/// before its time, plus the watch delivering the pause on a loaded machine.
const SETTLE_MS: i64 = 2_000;

#[tokio::test(flavor = "multi_thread")]
async fn saving_a_paused_job_again_keeps_it_paused_until_it_is_resumed() -> anyhow::Result<()> {
    let c = Cluster::start("pause-apply", 1).await?;
    let file = c.path("fired");
    c.put_job("ticker", every_second(&file)).await?;
    wait_runs(&file, "ticker", 0, "the job runs").await?;

    // Pause with a reason: the spec is not written, the view says who, when and why.
    let before = c.get("/api/jobs/ticker").await?;
    let (status, paused) = pause(&c, "ticker", Some(json!({"reason": "db migration"}))).await;
    assert_eq!(status, 200, "{paused}");
    let paused_at = now_ms();
    assert_eq!(paused["paused"]["by"], "anonymous", "{paused}");
    assert_eq!(paused["paused"]["reason"], "db migration");
    let at = chrono::DateTime::parse_from_rfc3339(paused["paused"]["at"].as_str().unwrap())?;
    assert!((at.timestamp_millis() - paused_at).abs() < 60_000, "{paused}");
    assert_eq!(paused["spec"]["enabled"], true, "the spec keeps its declared state");
    assert_eq!(paused["revision"], before["revision"], "the spec was not written");
    assert_eq!(paused["next_runs"], json!([]));

    // What `etcronctl jobs apply` does with a file that says nothing about pausing: PUT the
    // spec again, `enabled: true` by default. The job stays paused.
    let mut again = every_second(&file);
    again["enabled"] = json!(true);
    let saved = c.put_job("ticker", again).await?;
    assert_eq!(saved["paused"]["reason"], "db migration", "the save's answer shows the pause: {saved}");
    assert_eq!(saved["next_runs"], json!([]));
    let shown = c.get("/api/jobs/ticker").await?;
    assert_eq!(shown["paused"], paused["paused"], "{shown}");
    let list = c.get("/api/jobs").await?;
    assert_eq!(job_in_list(&list, "ticker")["paused"], paused["paused"], "{list}");

    // Its ticks are recorded skipped, naming who paused it and why, and none runs.
    let skipped = c
        .wait_executions("job=ticker&status=skipped&limit=100", "3 skipped ticks after the save", |l| {
            l.iter().filter(|r| scheduled_ms(r) > paused_at + SETTLE_MS).count() >= 3
        })
        .await?;
    for r in &skipped {
        assert_eq!(r["reason"], "job paused by anonymous: db migration", "{r}");
    }
    let ran = ran_after(&file, "ticker", paused_at + SETTLE_MS);
    assert!(ran.is_empty(), "ticks ran while paused: {ran:?}");

    // A manual run still runs.
    let (status, run) = c.call(Method::POST, "/api/jobs/ticker/run", None).await?;
    assert_eq!(status, 202, "{run}");
    let id = run["execution_id"].as_str().unwrap().to_owned();
    c.wait_executions("job=ticker&trigger=manual&status=succeeded", "the manual run", |l| {
        l.iter().any(|r| r["id"] == id)
    })
    .await?;

    // Resume: the pause is gone, the spec (which says enabled) is not written, ticks run again.
    let (status, resumed) = resume(&c, "ticker").await;
    assert_eq!(status, 200, "{resumed}");
    let resumed_at = now_ms();
    assert!(resumed["paused"].is_null(), "{resumed}");
    assert_eq!(resumed["spec"]["enabled"], true);
    assert_eq!(resumed["revision"], saved["revision"], "the spec was not written");
    assert_eq!(resumed["next_runs"].as_array().map(Vec::len), Some(5));
    assert_eq!(stored(&c, &Keys::new(&c.namespace)?.paused("ticker")).await, None);
    wait_runs(&file, "ticker", resumed_at + SETTLE_MS, "a tick after the resume").await?;

    // The audit log has who paused and resumed it, and why.
    let entries = wait_for(Duration::from_secs(10), "the pause and resume audit entries", || async {
        let v = c.get("/api/audit?job=ticker").await.ok()?;
        let entries = v["entries"].as_array()?.clone();
        entries.iter().any(|e| e["action"] == "job.resume").then_some(entries)
    })
    .await?;
    let pause_entry = entries.iter().find(|e| e["action"] == "job.pause").unwrap();
    assert_eq!(pause_entry["detail"]["paused"]["reason"], "db migration", "{pause_entry}");
    assert!(pause_entry["detail"]["previous"].is_null(), "{pause_entry}");
    let resume_entry = entries.iter().find(|e| e["action"] == "job.resume").unwrap();
    assert_eq!(resume_entry["detail"]["was_paused"]["reason"], "db migration", "{resume_entry}");
    assert_eq!(resume_entry["detail"]["spec_enabled"], false, "{resume_entry}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_enables_a_spec_that_says_disabled_and_a_delete_takes_the_pause_along() -> anyhow::Result<()> {
    let c = Cluster::start("pause-declared", 1).await?;
    let keys = Keys::new(&c.namespace)?;
    let file = c.path("fired");

    // Declared disabled: not paused, but it does not fire either; its ticks say why.
    let mut disabled = every_second(&file);
    disabled["enabled"] = json!(false);
    c.put_job("declared", disabled.clone()).await?;
    let shown = c.get("/api/jobs/declared").await?;
    assert!(shown["paused"].is_null() && shown["next_runs"] == json!([]), "{shown}");
    let skipped = c.wait_executions("job=declared&status=skipped", "skipped ticks", |l| l.len() >= 2).await?;
    assert_eq!(skipped[0]["reason"], "job disabled (its spec says enabled: false)");
    assert!(ran_after(&file, "declared", 0).is_empty());

    // Resume sets the spec's `enabled` (a write of the spec), and the job runs.
    let (status, resumed) = resume(&c, "declared").await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["spec"]["enabled"], true);
    assert!(resumed["revision"].as_i64() > shown["revision"].as_i64(), "the spec was written: {resumed}");
    wait_runs(&file, "declared", now_ms() + SETTLE_MS, "the resumed job runs").await?;

    // Paused and declared disabled at once: one resume clears both.
    assert_eq!(pause(&c, "declared", None).await.0, 200);
    let saved = c.put_job("declared", disabled).await?;
    assert!(saved["paused"].is_object() && saved["spec"]["enabled"] == false, "{saved}");
    let (status, resumed) = resume(&c, "declared").await;
    assert_eq!(status, 200, "{resumed}");
    assert!(resumed["paused"].is_null() && resumed["spec"]["enabled"] == true, "{resumed}");
    // Resuming a job that runs changes nothing.
    let (status, again) = resume(&c, "declared").await;
    assert_eq!((status, &again["revision"]), (200, &resumed["revision"]), "{again}");

    // An `@at` job whose time is over (as workers leave it after its run) cannot be resumed:
    // it would never fire; PUT gives it a new time.
    let spent =
        json!({"schedule": "@at 2020-01-01T00:00:00Z", "enabled": false, "task": {"kind": "shell", "command": "true"}});
    c.put_job("spent", spent).await?;
    let (status, body) = resume(&c, "spent").await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("schedule")), "{body}");
    assert_eq!(c.get("/api/jobs/spent").await?["spec"]["enabled"], false, "nothing was written");

    // The body of a pause: optional, `reason` at most 500 characters, nothing else.
    c.put_job("quiet", hourly()).await?;
    for (body, field) in [
        (json!({"reason": "x".repeat(501)}), Some("reason")),
        (json!({"reason": 5}), Some("reason")),
        (json!({"reason": "two\nlines"}), Some("reason")),
        (json!({"why": "x"}), Some("why")),
        (json!(["reason"]), None),
    ] {
        let (status, answer) = pause(&c, "quiet", Some(body.clone())).await;
        assert_eq!((status, answer["error"]["field"].as_str()), (400, field), "{body}: {answer}");
    }
    let (status, answer) = pause_raw(&c, "quiet", "{\"reason\": ").await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = pause_raw(&c, "quiet", r#"{"reason": "a", "reason": "b"}"#).await;
    assert_eq!((status, answer["error"]["field"].as_str()), (400, Some("reason")), "{answer}");
    assert!(c.get("/api/jobs/quiet").await?["paused"].is_null(), "no refused pause was stored");
    let (status, answer) = pause(&c, "quiet", Some(json!({"reason": "é".repeat(500)}))).await;
    assert_eq!(status, 200, "500 characters (1000 bytes) are fine: {answer}");
    assert_eq!(answer["paused"]["reason"].as_str().unwrap().chars().count(), 500);
    for (body, reason) in [("", Value::Null), ("{}", Value::Null), (r#"{"reason": "  "}"#, Value::Null)] {
        let (status, answer) = pause_raw(&c, "quiet", body).await;
        assert_eq!((status, &answer["paused"]["reason"]), (200, &reason), "{body:?}: {answer}");
        assert_eq!(answer["paused"]["by"], "anonymous");
    }
    for path in ["/api/jobs/nope/pause", "/api/jobs/nope/resume"] {
        let (status, body) = c.call(Method::POST, path, None).await?;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{path}: {body}");
    }
    assert_eq!(stored(&c, &keys.paused("nope")).await, None, "no pause without a job");

    // A delete takes the pause along: a job created again under the name is not paused.
    assert!(stored(&c, &keys.paused("quiet")).await.is_some());
    let (status, _) = c.call(Method::DELETE, "/api/jobs/quiet", None).await?;
    assert_eq!(status, 204);
    assert_eq!(stored(&c, &keys.paused("quiet")).await, None);
    let created = c.put_job("quiet", hourly()).await?;
    assert!(created["paused"].is_null() && created["next_runs"] != json!([]), "{created}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_learn_pauses_from_their_listing_and_their_watch() -> anyhow::Result<()> {
    let mut c = Cluster::start("pause-workers", 0).await?;
    let keys = Keys::new(&c.namespace)?;
    let file = c.path("fired");
    for job in ["listed", "handwritten", "garbled", "watched"] {
        c.put_job(job, every_second(&file)).await?;
    }
    // Paused before any worker runs: through the API, by hand with etcdctl (`{}`: nobody
    // known), and with a value that is no pause at all (it counts as one: fail safe).
    assert_eq!(pause(&c, "listed", Some(json!({"reason": "before any worker"}))).await.0, 200);
    let mut etcd = c.etcd.client().await?;
    etcd.put(keys.paused("handwritten"), "{}", None).await?;
    etcd.put(keys.paused("garbled"), "paused!", None).await?;
    let list = c.get("/api/jobs").await?;
    let unknown =
        json!({"by": null, "at": null, "reason": null, "until": null, "execution_id": null, "next_run_after": null});
    assert_eq!(job_in_list(&list, "handwritten")["paused"], unknown, "{list}");
    assert_eq!(job_in_list(&list, "garbled")["paused"], unknown, "{list}");
    assert_eq!(job_in_list(&list, "garbled")["next_runs"], json!([]));

    // A worker that starts now learns them from its first listing: none of them ever runs.
    c.add_worker(WorkerOpts::new("w1"))?;
    c.wait_workers(1).await?;
    wait_runs(&file, "watched", 0, "the unpaused job runs").await?;
    for (job, reason) in [
        ("listed", "job paused by anonymous: before any worker"),
        ("handwritten", "job paused"),
        ("garbled", "job paused"),
    ] {
        let skipped = c
            .wait_executions(&format!("job={job}&status=skipped&trigger=schedule"), "skipped ticks", |l| l.len() >= 2)
            .await?;
        assert!(skipped.iter().all(|r| r["reason"] == reason), "{job}: {skipped:?}");
    }
    let key = keys.paused("garbled");
    let log = c.workers[0].proc.log_text();
    assert!(log.lines().any(|l| l.contains("ERROR") && l.contains(&key)), "the malformed pause is logged");

    // A pause written while the worker runs reaches it through its watch.
    let (status, _) = pause(&c, "watched", None).await;
    assert_eq!(status, 200);
    let paused_at = now_ms();
    c.wait_executions("job=watched&status=skipped", "skipped ticks after the pause", |l| {
        l.iter().filter(|r| scheduled_ms(r) > paused_at + SETTLE_MS).count() >= 3
    })
    .await?;
    let ran = ran_after(&file, "watched", paused_at + SETTLE_MS);
    assert!(ran.is_empty(), "ticks ran after the pause reached the worker: {ran:?}");
    for job in ["listed", "handwritten", "garbled"] {
        assert_eq!(ran_after(&file, job, 0), Vec::<i64>::new(), "{job} ran while paused");
    }

    // And so does a resume, of a pause from the listing and of one written by hand.
    for job in ["listed", "handwritten"] {
        assert_eq!(resume(&c, job).await.0, 200);
    }
    let resumed_at = now_ms();
    wait_runs(&file, "listed", resumed_at + SETTLE_MS, "the listed job runs after its resume").await?;
    wait_runs(&file, "handwritten", resumed_at + SETTLE_MS, "the hand-paused job runs after its resume").await?;
    assert_eq!(ran_after(&file, "garbled", 0), Vec::<i64>::new(), "garbled ran while paused");
    assert_eq!(ran_after(&file, "watched", paused_at + SETTLE_MS), Vec::<i64>::new(), "watched ran while paused");
    for worker in &c.workers {
        assert!(!worker.proc.log_text().contains("panicked"), "{} panicked", worker.opts.id);
    }
    Ok(())
}

/// A pause with `until` ends by itself: a master deletes it once its time has come, and every
/// tick of a job firing every second on two workers is either skipped (before) or run (after),
/// once, never both.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_with_until_ends_by_itself_and_each_tick_runs_or_is_skipped_once() -> anyhow::Result<()> {
    let c = Cluster::start("pause-until", 2).await?;
    let file = c.path("fired");
    c.put_job("timed", every_second(&file)).await?;
    wait_runs(&file, "timed", 0, "the job runs").await?;

    // Bad ends name `until`.
    let at = |ms: i64| etcron_model::rfc3339_ms(ms);
    for bad in [json!(at(now_ms() - 1_000)), json!("tomorrow"), json!(at(now_ms() + 367 * 86_400_000)), json!(5)] {
        let (status, body) = pause(&c, "timed", Some(json!({ "until": bad }))).await;
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some("until")), "{bad}: {body}");
    }

    let paused_at = now_ms();
    let until = paused_at + 4_000;
    let (status, body) = pause(&c, "timed", Some(json!({"reason": "short break", "until": at(until)}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["paused"]["until"], at(until));
    let key = Keys::new(&c.namespace)?.paused("timed");
    if now_ms() < until - 1_000 {
        assert!(stored(&c, &key).await.is_some(), "the pause lasts until its time");
    }
    wait_for(Duration::from_secs(15), "the pause to end by itself", || async {
        stored(&c, &key).await.is_none().then_some(())
    })
    .await?;
    assert!(now_ms() >= until, "ended before its time");
    assert!(job_in_list(&c.get("/api/jobs").await?, "timed")["paused"].is_null());
    let resumed = until + SETTLE_MS;
    wait_runs(&file, "timed", resumed, "runs after the pause ended").await?;

    // Every whole second from the pause to after the end: run or skipped, exactly once.
    let (from, to) = (paused_at + SETTLE_MS, resumed);
    let accounted = |skipped: &[Value]| {
        let fired = read_fired(&file);
        (from / 1000 + 1..=to / 1000).all(|s| {
            fired.iter().any(|f| f.job == "timed" && f.scheduled_ms == s * 1000)
                || skipped.iter().any(|r| scheduled_ms(r) == s * 1000)
        })
    };
    let skipped = c
        .wait_executions("job=timed&status=skipped&limit=500", "every tick run or recorded skipped", accounted)
        .await?;
    let fired = read_fired(&file);
    let report = etcron_tests::check_every_second(&fired, &["timed".to_owned()], 0, 0);
    assert!(report.duplicates.is_empty(), "ran twice: {:?}", report.duplicates);
    for second in (from / 1000 + 1)..=(to / 1000) {
        let tick = second * 1000;
        let ran = fired.iter().any(|f| f.job == "timed" && f.scheduled_ms == tick);
        let skip: Vec<&Value> = skipped.iter().filter(|r| scheduled_ms(r) == tick).collect();
        assert!(skip.len() <= 1, "tick {tick} recorded skipped twice");
        assert!(ran != (skip.len() == 1), "tick {tick}: ran {ran}, skipped {}", skip.len());
        if tick < until {
            assert!(!ran, "tick {tick} ran while paused until {until}");
            assert!(skip[0]["reason"].as_str().unwrap().contains(&format!("until {}", at(until))), "{}", skip[0]);
        }
    }
    assert!(fired.iter().any(|f| f.job == "timed" && f.scheduled_ms >= resumed), "runs again after the end");
    Ok(())
}

/// The paused/failure events a webhook received, by kind.
fn events(r: &Receiver, kind: &str) -> Vec<Value> {
    r.received("/hook").into_iter().map(|q| q.json()).filter(|b| b["event"] == kind).collect()
}

/// Waits until the job is paused by its failures, other than by `not_by`; the pause.
async fn wait_auto_pause(c: &Cluster, job: &str, not_by: Option<&str>) -> anyhow::Result<Value> {
    wait_for(Duration::from_secs(30), "the job paused by its failures", || async {
        let pause = c.get(&format!("/api/jobs/{job}")).await.ok()?["paused"].clone();
        (pause["by"] == "etcron" && pause["execution_id"].as_str() != not_by).then_some(pause)
    })
    .await
}

/// `pause_after_failures: 3` on two racing workers: the third final failure in a row pauses the
/// job in the transaction that closes its claim — once, with one `paused` notification, the
/// reason on the job and on that run's record — and nothing runs after; resumed while still
/// failing, it pauses again three failures later. Every tick runs at most once.
#[tokio::test(flavor = "multi_thread")]
async fn pause_after_failures_pauses_once_and_again_after_a_resume() -> anyhow::Result<()> {
    let c = Cluster::start("pause-failures", 2).await?;
    let r = Receiver::start().await?;
    let file = c.path("fired");
    let spec = json!({
        "schedule": "* * * * * *", "pause_after_failures": 3,
        "notify": [{"url": r.at("/hook"), "on": ["failure", "paused"]}],
        "task": {"kind": "shell", "command": format!("{}; exit 3", record_command(&file))},
    });
    c.put_job("flaky", spec).await?;

    let first = wait_auto_pause(&c, "flaky", None).await?;
    let pauser = first["execution_id"].as_str().unwrap().to_owned();
    let reason = first["reason"].as_str().unwrap();
    assert!(reason.starts_with("pause_after_failures: 3 final failures in a row, the last flaky@"), "{reason}");
    // The record is journaled before the claim closes and rewritten with the pause once the
    // close has counted it: wait for the final one.
    let paused_note = "job paused: 3 final failures in a row (pause_after_failures)";
    let record = wait_for(Duration::from_secs(30), "the record of the run that paused the job", || async {
        let rec = c.get(&format!("/api/executions/{}", pauser.replace('#', "%23"))).await.ok()?;
        rec["reason"].as_str().is_some_and(|why| why.contains(paused_note)).then_some(rec)
    })
    .await?;
    assert_eq!(record["status"], "failed", "{record}");
    let paused_at = chrono::DateTime::parse_from_rfc3339(first["at"].as_str().unwrap())?.timestamp_millis();

    // Nothing runs once the pause is in (ticks raced just before it may still end).
    tokio::time::sleep(Duration::from_millis(u64::try_from(SETTLE_MS)? + 1_000)).await;
    assert!(ran_after(&file, "flaky", paused_at + SETTLE_MS).is_empty(), "ran while paused");
    let before_resume = read_fired(&file).len();
    assert!(
        (3..=4).contains(&before_resume),
        "three failures, and at most one raced before the pause: {before_resume}"
    );
    wait_for(Duration::from_secs(30), "the paused notification", || async {
        (events(&r, "paused").len() == 1 && events(&r, "failure").len() == before_resume).then_some(())
    })
    .await?;
    assert_eq!(events(&r, "paused")[0]["execution"]["id"], pauser.as_str());

    // Resumed while still failing: three more failures pause it again, by another run.
    assert_eq!(resume(&c, "flaky").await.0, 200);
    let second = wait_auto_pause(&c, "flaky", Some(&pauser)).await?;
    // Every third failure in a row pauses: the sixth (counting a run raced before the pause).
    let again = second["reason"].as_str().unwrap();
    assert!(again.starts_with("pause_after_failures: 6 final failures in a row"), "{again}");
    wait_for(Duration::from_secs(30), "the second paused notification", || async {
        (events(&r, "paused").len() == 2).then_some(())
    })
    .await?;
    c.call(Method::DELETE, "/api/jobs/flaky", None).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(events(&r, "paused").len(), 2, "one notification per pause");

    // Two workers raced every tick: none ran twice.
    let fired = read_fired(&file);
    let mut ticks: Vec<i64> = fired.iter().map(|f| f.scheduled_ms).collect();
    ticks.sort_unstable();
    let before = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), before, "a tick ran twice: {fired:?}");
    Ok(())
}
