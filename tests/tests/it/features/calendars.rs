//! Skip calendars (`PUT /api/calendars/{name}`, a job's `skip_calendars`) on real workers
//! racing for the same ticks: a tick on a listed day is recorded `skipped` once, naming the
//! calendar, and never runs; a calendar changed mid-schedule takes effect at the next tick; the
//! API, the preview and etcronctl say the same.

use std::collections::BTreeMap;
use std::time::Duration;

use etcron_tests::{bin, now_ms, read_fired, record_command, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Today, yesterday and tomorrow in UTC as a range: a test crossing midnight still has its
/// ticks on a listed day.
fn around_today() -> Value {
    let today = chrono::Utc::now().date_naive();
    json!({"from": (today - chrono::Days::new(1)).to_string(), "to": (today + chrono::Days::new(1)).to_string()})
}

#[tokio::test(flavor = "multi_thread")]
async fn ticks_on_listed_days_are_skipped_once_and_a_changed_calendar_applies_at_the_next_tick() -> anyhow::Result<()> {
    let c = Cluster::start("calendars", 2).await?;
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    let (status, body) = c
        .call(Method::PUT, "/api/calendars/days-off", Some(json!({"ranges": [around_today()], "description": "test"})))
        .await?;
    assert_eq!(status, 201, "{body}");
    // Ten ticks, every second; the calendar lists every one of the first ones' days.
    let from = (now_ms() / 1000 + 3) * 1000;
    let until = from + 9_000;
    let spec = json!({
        "schedule": "* * * * * *", "skip_calendars": ["days-off"],
        "active_from": rfc3339(from), "active_until": rfc3339(until),
        "task": {"kind": "shell", "command": record_command(&out)},
    });
    c.put_job("off-today", spec).await?;

    // Halfway, the calendar stops listing today: the later ticks run.
    wait_for(Duration::from_secs(20), "the window's first half", || async { (now_ms() >= from + 4_500).then_some(()) })
        .await?;
    let changed_at = now_ms();
    let (status, body) = c.call(Method::PUT, "/api/calendars/days-off", Some(json!({"dates": ["2000-01-01"]}))).await?;
    assert_eq!(status, 200, "{body}");

    let expected: Vec<i64> = (from / 1000..=until / 1000).map(|s| s * 1000).collect();
    c.wait_executions("job=off-today&limit=100", "a record of every tick", |l| {
        l.iter().filter(|r| r["status"] != "running").count() >= expected.len()
    })
    .await?;
    // Every run (and a duplicate, were there one) has ended before judging.
    c.settle_claims(now_ms()).await?;
    let records = c.get("/api/executions?job=off-today&limit=100").await?["executions"].as_array().unwrap().clone();
    let mut by_tick: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
    for r in &records {
        by_tick.entry(r["scheduled_ms"].as_i64().unwrap()).or_default().push(r);
    }
    if by_tick.keys().copied().collect::<Vec<_>>() != expected {
        c.dump_logs();
    }
    assert_eq!(by_tick.keys().copied().collect::<Vec<_>>(), expected, "one record per tick: {records:?}");
    let ran: Vec<i64> = read_fired(&out).iter().map(|f| f.scheduled_ms).collect();
    for (tick, list) in &by_tick {
        assert_eq!(list.len(), 1, "tick {tick} has {} records", list.len());
        let r = list[0];
        match r["status"].as_str().unwrap() {
            "skipped" => {
                assert!(r["reason"].as_str().unwrap().contains("is listed in skip calendar \"days-off\""), "{r}");
                assert!(!ran.contains(tick), "tick {tick} was recorded skipped and ran");
                // Workers decide when they race, up to `claim_ahead` before the tick; allow for the
                // calendar's change to reach them.
                assert!(*tick < changed_at + 2_000, "tick {tick} skipped after the calendar changed");
            }
            "succeeded" => {
                assert_eq!(ran.iter().filter(|t| *t == tick).count(), 1, "tick {tick} ran once");
                assert!(*tick > changed_at - 1_000, "tick {tick} ran while the calendar listed its day");
            }
            other => panic!("tick {tick}: {other}: {r}"),
        }
    }
    let skipped = by_tick.values().filter(|l| l[0]["status"] == "skipped").count();
    assert!(skipped >= 3 && skipped <= expected.len() - 3, "{skipped} of {} skipped: {records:?}", expected.len());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn calendars_are_checked_named_in_errors_and_shown_by_the_preview_and_etcronctl() -> anyhow::Result<()> {
    let c = Cluster::start("calendars-api", 0).await?;
    for (body, field) in [
        (json!({"dates": ["2026-02-30"]}), "dates[0]"),
        (json!({"ranges": [{"from": "2026-12-02", "to": "2026-12-01"}]}), "ranges[0].to"),
        (json!({"dates": ["2026-12-25"], "timezone": "Mars/Base"}), "timezone"),
        (json!({}), "dates"),
    ] {
        let (status, e) = c.call(Method::PUT, "/api/calendars/bad", Some(body.clone())).await?;
        assert_eq!((status, e["error"]["field"].as_str()), (400, Some(field)), "{body}: {e}");
    }
    let (status, e) = c.call(Method::PUT, "/api/calendars/Bad_Name", Some(json!({"dates": ["2026-12-25"]}))).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("name")), "{e}");

    // A job may name only calendars that exist.
    let job =
        json!({"schedule": "0 9 * * *", "skip_calendars": ["holidays"], "task": {"kind": "shell", "command": "true"}});
    let (status, e) = c.call(Method::PUT, "/api/jobs/report", Some(job.clone())).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("skip_calendars[0]")), "{e}");
    let holidays = json!({"timezone": "Europe/Berlin", "dates": ["2026-12-25"], "ranges": [{"from": "2026-12-31", "to": "2027-01-01"}]});
    let (status, _) = c.call(Method::PUT, "/api/calendars/holidays", Some(holidays.clone())).await?;
    assert_eq!(status, 201);
    c.put_job("report", job).await?;
    let (status, e) = c.call(Method::DELETE, "/api/calendars/holidays", None).await?;
    assert_eq!(status, 409, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("report"), "{e}");
    let listed = c.get("/api/calendars").await?;
    assert_eq!(listed["calendars"][0]["name"], "holidays");
    assert_eq!(listed["calendars"][0]["calendar"], holidays);

    // The preview marks the fire times the calendar skips (09:00 UTC is 10:00 in Berlin).
    let v = c
        .get("/api/schedule/preview?schedule=0%209%20*%20*%20*&after=2026-12-24T00:00:00Z&count=3&skip_calendar=holidays")
        .await?;
    assert_eq!(v["skipped"], json!([{"at": "2026-12-25T09:00:00.000+00:00", "calendar": "holidays"}]), "{v}");
    let (status, e) = c.call(Method::GET, "/api/schedule/preview?schedule=@daily&skip_calendar=nope", None).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("skip_calendar")), "{e}");

    let ctl = |args: &[&str]| {
        let mut cmd = std::process::Command::new(bin("etcronctl").unwrap());
        cmd.args(args).env("ETCRON_SERVER", &c.master.url).env_remove("ETCRON_TOKEN");
        cmd.output().unwrap()
    };
    let out = ctl(&["calendars", "put", "ops-freeze", "--range", "2026-12-20..2026-12-27", "--date", "2027-01-02"]);
    assert!(out.status.success(), "{out:?}");
    let out = ctl(&["calendars", "ls"]);
    let text = String::from_utf8(out.stdout)?;
    assert!(text.contains("holidays") && text.contains("ops-freeze"), "{text}");
    let out = ctl(&["calendars", "get", "ops-freeze"]);
    assert!(String::from_utf8(out.stdout)?.contains("range:       2026-12-20 .. 2026-12-27"));
    let out = ctl(&[
        "schedule",
        "preview",
        "0 9 * * *",
        "--after",
        "2026-12-26T00:00:00Z",
        "--count",
        "2",
        "--skip-calendar",
        "ops-freeze",
    ]);
    let text = String::from_utf8(out.stdout)?;
    assert!(
        text.contains(
            "2026-12-26T09:00:00.000+00:00  skipped (calendar ops-freeze)\n2026-12-27T09:00:00.000+00:00  skipped"
        ),
        "{text}"
    );
    let out = ctl(&["calendars", "put", "ops-freeze", "--range", "2026-12-27"]);
    assert_eq!(out.status.code(), Some(2), "a range without .. is a usage error: {out:?}");
    let out = ctl(&["calendars", "delete", "ops-freeze"]);
    assert!(out.status.success(), "{out:?}");
    let (status, _) = c.call(Method::GET, "/api/calendars/ops-freeze", None).await?;
    assert_eq!(status, 404);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skipped_tick_is_recorded_by_another_worker_while_the_first_ranked_one_is_stopped() -> anyhow::Result<()> {
    // The worker ranked first for a tick records it skipped; when it is stopped (within its
    // session TTL, so still a member), the next-ranked one must record it after its head start
    // instead of leaving the tick to be found missed, or not at all.
    let c = Cluster::start("calendars-stop", 2).await?;
    c.wait_workers(2).await?;
    let (status, _) = c.call(Method::PUT, "/api/calendars/days-off", Some(json!({"ranges": [around_today()]}))).await?;
    assert_eq!(status, 201);
    let spec = json!({"schedule": "* * * * * *", "skip_calendars": ["days-off"], "task": {"kind": "shell", "command": "true"}});
    c.put_job("stopped", spec).await?;
    c.wait_executions("job=stopped&status=skipped", "a skipped tick", |l| !l.is_empty()).await?;

    let stopped_at = now_ms();
    c.workers[0].proc.signal(nix::sys::signal::Signal::SIGSTOP)?;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    c.workers[0].proc.signal(nix::sys::signal::Signal::SIGCONT)?;
    let resumed_at = now_ms();
    let ticks: Vec<i64> = (stopped_at / 1000 + 1..=(resumed_at - 300) / 1000).map(|s| s * 1000).collect();
    assert!(ticks.len() >= 2, "{ticks:?}");
    let records = c
        .wait_executions("job=stopped&limit=100", "a record of each tick while a worker was stopped", |l| {
            ticks.iter().all(|t| l.iter().any(|r| r["scheduled_ms"] == *t))
        })
        .await?;
    c.settle_claims(now_ms()).await?;
    for t in &ticks {
        let of_tick: Vec<&Value> = records.iter().filter(|r| r["scheduled_ms"] == *t).collect();
        assert_eq!(of_tick.len(), 1, "tick {t}: {of_tick:?}");
        assert_eq!(of_tick[0]["status"], "skipped", "tick {t} while w1 was stopped: {}", of_tick[0]);
    }
    Ok(())
}
