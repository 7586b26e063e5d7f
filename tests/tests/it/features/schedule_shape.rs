//! Several schedules per job and an active window (`schedules`, `active_from`, `active_until`)
//! on real workers racing for the same ticks: one execution per instant, nothing outside the
//! window; the job view, the preview and etcronctl honour the same rule.

use std::collections::BTreeMap;
use std::time::Duration;

use etcron_model::schedule::{format_in, Schedule};
use etcron_tests::{bin, now_ms, read_fired, record_command, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[tokio::test(flavor = "multi_thread")]
async fn merged_schedules_tick_once_per_instant_within_the_window_on_racing_workers() -> anyhow::Result<()> {
    let c = Cluster::start("schedule-shape", 2).await?;
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    // The window opens a few seconds from now (both workers have the job by then) and holds
    // twelve seconds: ticks on every even second and every third second, 6 and 12 shared.
    let from = (now_ms() / 1000 + 4) * 1000;
    let until = from + 12_000;
    let spec = json!({
        "schedules": ["*/2 * * * * *", "*/3 * * * * *"],
        "active_from": rfc3339(from), "active_until": rfc3339(until),
        "task": {"kind": "shell", "command": record_command(&out)},
    });
    c.put_job("merged", spec).await?;

    let view = c.get("/api/jobs/merged").await?;
    let first = (from / 1000..).find(|s| s % 2 == 0 || s % 3 == 0).unwrap() * 1000;
    let next: Vec<&str> = view["next_runs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(next.first().map(|t| chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis()), Some(first));
    assert!(view["schedule_description"].as_str().unwrap().contains("; "), "{view}");

    // Wait until the window has closed and a tick after it would have come due.
    let expected: Vec<i64> =
        (from / 1000..=until / 1000).filter(|s| s % 2 == 0 || s % 3 == 0).map(|s| s * 1000).collect();
    wait_for(Duration::from_secs(40), "the window's ticks", || async {
        (now_ms() > until + 3_000 && read_fired(&out).len() >= expected.len()).then_some(())
    })
    .await?;
    let fired = read_fired(&out);
    let mut per_tick: BTreeMap<i64, usize> = BTreeMap::new();
    for f in &fired {
        *per_tick.entry(f.scheduled_ms).or_default() += 1;
    }
    if per_tick.keys().copied().collect::<Vec<_>>() != expected || per_tick.values().any(|n| *n != 1) {
        c.dump_logs();
    }
    assert_eq!(per_tick.keys().copied().collect::<Vec<_>>(), expected, "exactly the window's merged ticks");
    assert!(per_tick.values().all(|n| *n == 1), "one execution per instant: {per_tick:?}");
    let workers: std::collections::BTreeSet<&str> = fired.iter().map(|f| f.worker.as_str()).collect();
    eprintln!("{} ticks ran on {workers:?}", fired.len());

    // The records agree: one schedule execution per tick, and nothing missed or skipped
    // outside the window (those ticks do not exist).
    let records = c.wait_executions("job=merged&limit=100", "the records", |l| l.len() >= expected.len()).await?;
    let mut recorded: Vec<i64> = records.iter().map(|r| r["scheduled_ms"].as_i64().unwrap()).collect();
    recorded.sort_unstable();
    assert_eq!(recorded, expected, "{records:?}");
    assert!(records.iter().all(|r| r["trigger"] == "schedule" && r["status"] == "succeeded"), "{records:?}");

    // The window has ended: the job shows no next run, and saving it enabled again is refused
    // at active_until; a window in the future is fine.
    let view = c.get("/api/jobs/merged").await?;
    assert_eq!(view["next_runs"], json!([]), "{view}");
    let mut spec = view["spec"].clone();
    let (status, body) = c.call(Method::PUT, "/api/jobs/merged", Some(spec.clone())).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("active_until")), "{body}");
    spec["active_until"] = json!("2099-01-01T00:00:00Z");
    let (status, body) = c.call(Method::PUT, "/api/jobs/merged", Some(spec.clone())).await?;
    assert_eq!(status, 200, "{body}");
    spec["schedule"] = json!("@daily");
    let (status, body) = c.call(Method::PUT, "/api/jobs/merged", Some(spec)).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("schedules")), "both: {body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn jittered_ticks_are_the_same_on_racing_workers_and_run_once_each() -> anyhow::Result<()> {
    let c = Cluster::start("schedule-jitter", 2).await?;
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    let from = (now_ms() / 1000 + 4) * 1000;
    let until = from + 10_000;
    let spec = json!({
        "schedule": "* * * * * *", "jitter": "900ms",
        "active_from": rfc3339(from), "active_until": rfc3339(until),
        "task": {"kind": "shell", "command": record_command(&out)},
    });
    c.put_job("jittered", spec.clone()).await?;
    // What every worker computes: each second's tick moved by up to 900 ms.
    let schedule =
        Schedule::parse("* * * * * *", "UTC")?.shaped(&[], Some(from), Some(until)).jittered("jittered", 900);
    let expected = schedule.upcoming(from - 1, 100);
    assert_eq!(expected.len(), 11);
    assert!(expected.iter().zip(from / 1000..).all(|(t, s)| (s * 1000..=s * 1000 + 900).contains(t)), "{expected:?}");
    let view = c.get("/api/jobs/jittered").await?;
    assert_eq!(view["next_runs"][0], json!(format_in(schedule.timezone(), expected[0])), "{view}");

    wait_for(Duration::from_secs(40), "the window's ticks", || async {
        (now_ms() > until + 3_000 && read_fired(&out).len() >= expected.len()).then_some(())
    })
    .await?;
    let fired = read_fired(&out);
    let mut ran: Vec<i64> = fired.iter().map(|f| f.scheduled_ms).collect();
    ran.sort_unstable();
    if ran != expected {
        c.dump_logs();
    }
    assert_eq!(ran, expected, "each jittered tick once, at the instant every worker agrees on");
    for f in &fired {
        let started: i64 = f.extra[0].parse()?;
        assert!(started >= f.scheduled_ms, "{f:?} started before its jittered instant");
    }
    let records = c.wait_executions("job=jittered&limit=100", "the records", |l| l.len() >= expected.len()).await?;
    for r in &records {
        let (at, jitter) = (r["scheduled_ms"].as_i64().unwrap(), r["jitter_ms"].as_i64().unwrap());
        assert_eq!((at - jitter) % 1000, 0, "the tick less its jitter is the whole second: {r}");
        assert!((0..=900).contains(&jitter), "{r}");
    }

    // A jitter as long as the time between ticks would not spread them: refused.
    let mut wide = spec;
    wide["jitter"] = json!("1s");
    wide["active_until"] = json!("2099-01-01T00:00:00Z");
    let (status, body) = c.call(Method::PUT, "/api/jobs/jittered", Some(wide)).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("jitter")), "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_preview_and_etcronctl_merge_schedules_within_a_window() -> anyhow::Result<()> {
    let c = Cluster::start("schedule-shape-preview", 0).await?;
    let v = c
        .get(
            "/api/schedule/preview?schedule=0%209%20*%20*%201-5&schedule=0%2012%20*%20*%206,0\
             &timezone=Europe/Berlin&after=2026-12-03T00:00:00Z&active_until=2026-12-07T12:00:00%2B01:00&count=10",
        )
        .await?;
    assert_eq!(
        v["next"],
        json!([
            "2026-12-03T09:00:00.000+01:00",
            "2026-12-04T09:00:00.000+01:00",
            "2026-12-05T12:00:00.000+01:00",
            "2026-12-06T12:00:00.000+01:00",
            "2026-12-07T09:00:00.000+01:00",
        ]),
        "{v}"
    );
    assert_eq!(v["schedules"], json!(["0 9 * * 1-5", "0 12 * * 6,0"]));

    for (query, field) in [
        ("schedule=@daily&schedule=@daily", "schedule"),
        ("schedule=@daily&active_from=soon", "active_from"),
        ("schedule=@daily&active_until=2020-01-01T00:00:00Z", "active_until"),
        ("schedule=@daily&schedules=@hourly", "schedules"),
        ("schedule=@hourly&jitter=5m", "job"),
        ("schedule=@hourly&jitter=1h&job=a", "jitter"),
        ("schedule=@hourly&jitter=2h&job=a", "jitter"),
    ] {
        let (status, body) = c.call(Method::GET, &format!("/api/schedule/preview?{query}"), None).await?;
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some(field)), "{query}: {body}");
    }

    // Jitter moves each fire time by up to its length, as the workers do for that job.
    let hourly = "/api/schedule/preview?schedule=@hourly&after=2026-12-03T00:00:00Z&count=24&jitter=5m";
    let a = c.get(&format!("{hourly}&job=a")).await?;
    let b = c.get(&format!("{hourly}&job=b")).await?;
    assert_ne!(a["next_ms"], b["next_ms"], "the delays depend on the job");
    let start = chrono::DateTime::parse_from_rfc3339("2026-12-03T00:00:00Z")?.timestamp_millis();
    for (i, t) in a["next_ms"].as_array().unwrap().iter().enumerate() {
        let hour = start + i64::try_from(i)? * 3_600_000;
        assert!((hour..=hour + 300_000).contains(&t.as_i64().unwrap()), "{a}");
    }
    assert!(a["description"].as_str().unwrap().ends_with("each tick delayed by up to 5m"), "{a}");

    let out = std::process::Command::new(bin("etcronctl")?)
        .args(["schedule", "preview", "0 9 * * 1-5", "0 12 * * 6,0", "--after", "2026-12-03T00:00:00Z"])
        .args(["--active-from", "2026-12-05T00:00:00Z", "--count", "2"])
        .env("ETCRON_SERVER", &c.master.url)
        .env_remove("ETCRON_TOKEN")
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    assert!(text.contains("2026-12-05T12:00:00.000+00:00\n2026-12-06T12:00:00.000+00:00"), "{text}");
    assert!(text.contains("from 2026-12-05T00:00:00.000+00:00"), "{text}");
    Ok(())
}
