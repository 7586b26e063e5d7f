//! The master's HTTP API against a real etcd: create/replace/read/delete, optimistic
//! concurrency, validation errors that name the field, manual runs, previews and 503s.

use etcron_tests::Cluster;
use reqwest::Method;
use serde_json::json;

fn shell(cmd: &str) -> serde_json::Value {
    json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": cmd}})
}

#[tokio::test(flavor = "multi_thread")]
async fn crud_with_revisions_and_conflicts() -> anyhow::Result<()> {
    let c = Cluster::start("api-crud", 0).await?;
    let (status, created) = c.call(Method::PUT, "/api/jobs/report", Some(shell("true"))).await?;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "report");
    assert_eq!(created["spec"]["timezone"], "UTC", "defaults are filled in");
    assert_eq!(created["next_runs"].as_array().map(Vec::len), Some(5));
    let rev1 = created["revision"].as_i64().unwrap();

    let (status, replaced) = c.call(Method::PUT, "/api/jobs/report", Some(shell("echo v2"))).await?;
    assert_eq!(status, 200);
    let rev2 = replaced["revision"].as_i64().unwrap();
    assert!(rev2 > rev1);
    assert_eq!(replaced["created_revision"].as_i64(), Some(rev1));

    // An edit based on the old revision is refused; one based on the current one applies.
    let stale = c
        .http
        .put(format!("{}/api/jobs/report", c.master.url))
        .header("If-Match", rev1.to_string())
        .json(&shell("echo v3"))
        .send()
        .await?;
    assert_eq!(stale.status(), 409);
    let body: serde_json::Value = stale.json().await?;
    assert_eq!(body["error"]["code"], "conflict");
    let fresh = c
        .http
        .put(format!("{}/api/jobs/report", c.master.url))
        .header("If-Match", format!("\"{rev2}\""))
        .json(&shell("echo v3"))
        .send()
        .await?;
    assert_eq!(fresh.status(), 200);
    let etag = fresh.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body: serde_json::Value = fresh.json().await?;
    assert_eq!(etag, Some(format!("\"{}\"", body["revision"])));

    // If-None-Match: * only creates.
    let again = c
        .http
        .put(format!("{}/api/jobs/report", c.master.url))
        .header("If-None-Match", "*")
        .json(&shell("true"))
        .send()
        .await?;
    assert_eq!(again.status(), 409);

    let one = c.get("/api/jobs/report").await?;
    assert_eq!(one["spec"]["task"]["command"], "echo v3");
    c.put_job("other", shell("true")).await?;
    let list = c.get("/api/jobs").await?;
    let names: Vec<&str> = list["jobs"].as_array().unwrap().iter().filter_map(|j| j["name"].as_str()).collect();
    assert_eq!(names, ["other", "report"]);

    let (status, paused) = c.call(Method::POST, "/api/jobs/report/pause", None).await?;
    assert_eq!(status, 200);
    assert_eq!(paused["paused"]["by"], "anonymous", "the pause is kept outside the spec: {paused}");
    assert_eq!(paused["spec"]["enabled"], true);
    assert_eq!(paused["next_runs"].as_array().map(Vec::len), Some(0));
    let (_, resumed) = c.call(Method::POST, "/api/jobs/report/resume", None).await?;
    assert!(resumed["paused"].is_null(), "{resumed}");
    assert_eq!(resumed["spec"]["enabled"], true);

    let (status, _) = c.call(Method::DELETE, "/api/jobs/report", None).await?;
    assert_eq!(status, 204);
    let (status, body) = c.call(Method::DELETE, "/api/jobs/report", None).await?;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
    let (status, _) = c.call(Method::GET, "/api/jobs/report", None).await?;
    assert_eq!(status, 404);

    // Workers (none here) and the etcd layout as operators see it.
    assert_eq!(c.get("/api/workers").await?["workers"], json!([]));
    let mut etcd = c.etcd.client().await?;
    let got = etcd.get(format!("{}/jobs/other", c.namespace), None).await?;
    let stored: serde_json::Value = serde_json::from_slice(got.kvs()[0].value())?;
    assert_eq!(stored["schedule"], "@every 1h");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_400_naming_the_field() -> anyhow::Result<()> {
    let c = Cluster::start("api-validation", 0).await?;
    let cases = [
        ("Bad_Name", shell("true"), 400, Some("name")),
        ("ok", json!({"schedule": "not a cron", "task": {"kind": "shell", "command": "true"}}), 400, Some("schedule")),
        (
            "ok",
            json!({"schedule": "* * * * *", "timezone": "Moon/Base", "task": {"kind": "shell", "command": "true"}}),
            400,
            Some("timezone"),
        ),
        (
            "ok",
            json!({"schedule": "* * * * *", "task": {"kind": "shell", "command": "true"}, "colour": "red"}),
            400,
            Some("colour"),
        ),
        ("ok", json!({"schedule": "* * * * *", "task": {"kind": "shell", "command": 42}}), 400, Some("task.command")),
        (
            "ok",
            json!({"schedule": "* * * * *", "enabled": "yes", "task": {"kind": "shell", "command": "true"}}),
            400,
            Some("enabled"),
        ),
        ("ok", json!({"schedule": "* * * * *"}), 400, Some("task")),
        (
            "ok",
            json!({"schedule": "* * * * *", "description": "x".repeat(70_000), "task": {"kind": "shell", "command": "true"}}),
            413,
            None,
        ),
    ];
    for (name, body, status, field) in cases {
        let (got, err) = c.call(Method::PUT, &format!("/api/jobs/{name}"), Some(body.clone())).await?;
        assert_eq!(got, status, "{name} {body}: {err}");
        assert_eq!(err["error"]["field"].as_str(), field, "{err}");
        assert!(!err["error"]["message"].as_str().unwrap_or("").is_empty());
    }
    let raw = c.http.put(format!("{}/api/jobs/ok", c.master.url)).body("{not json").send().await?;
    assert_eq!(raw.status(), 400);
    let bad_if_match = c
        .http
        .put(format!("{}/api/jobs/ok", c.master.url))
        .header("If-Match", "abc")
        .json(&shell("true"))
        .send()
        .await?;
    assert_eq!(bad_if_match.status(), 400);

    // Nothing was stored by any of the refused requests.
    assert_eq!(c.get("/api/jobs").await?["jobs"], json!([]));

    let (status, err) = c.call(Method::POST, "/api/jobs/missing/run", None).await?;
    assert_eq!((status, err["error"]["code"].as_str()), (404, Some("not_found")));
    c.put_job("real", shell("true")).await?;
    let (status, err) = c.call(Method::POST, "/api/jobs/real/kill?execution=other@1#1", None).await?;
    assert_eq!((status, err["error"]["field"].as_str()), (400, Some("execution")));
    let (status, _) = c.call(Method::POST, "/api/jobs/real/kill?execution=garbage", None).await?;
    assert_eq!(status, 400);

    let preview = c.get("/api/schedule/preview?schedule=0%209%20*%20*%201-5&timezone=Europe/Berlin&count=3").await?;
    assert_eq!(preview["next"].as_array().map(Vec::len), Some(3));
    assert!(preview["next"][0].as_str().unwrap().contains("T09:00:00"));
    for (query, field) in [
        ("schedule=*%20*", "schedule"),
        ("schedule=@daily&timezone=Nope", "timezone"),
        ("schedule=@daily&count=0", "count"),
        ("", "schedule"),
    ] {
        let (status, err) = c.call(Method::GET, &format!("/api/schedule/preview?{query}"), None).await?;
        assert_eq!((status, err["error"]["field"].as_str()), (400, Some(field)), "{query}");
    }

    // Preview from a chosen instant: New York's spring-forward day, where 02:30 runs at 03:00.
    let preview = c
        .get("/api/schedule/preview?schedule=30%202,14%20*%20*%20*&timezone=America/New_York&count=2&after=2026-03-07T20:00:00-05:00")
        .await?;
    assert_eq!(preview["next"], json!(["2026-03-08T03:00:00.000-04:00", "2026-03-08T14:30:00.000-04:00"]));
    assert_eq!(preview["description"], "At 02:30 and 14:30 every day");
    // A bad `after`, and schedules that never fire (at all, or after `after`) say so.
    for (query, field, says) in [
        ("schedule=@daily&after=yesterday", "after", "after must be an RFC 3339 instant"),
        ("schedule=@daily&after=1969-12-31T23:59:59Z", "after", "out of range"),
        ("schedule=0%200%2030%202%20*", "schedule", "never fires: no date matches"),
        ("schedule=@at%202020-01-01T00:00:00Z", "schedule", "never fires after"),
        ("schedule=0%200%200%201%201%20*%202027&after=2027-06-01T00:00:00Z", "schedule", "never fires after"),
        ("schedule=0%200%20*%20MON%20*", "schedule", "month: MON is a day name"),
        ("schedule=61%20*%20*%20*%20*", "schedule", "minute: 61 is out of range 0-59"),
    ] {
        let (status, err) = c.call(Method::GET, &format!("/api/schedule/preview?{query}"), None).await?;
        assert_eq!((status, err["error"]["field"].as_str()), (400, Some(field)), "{query}: {err}");
        assert!(err["error"]["message"].as_str().is_some_and(|m| m.contains(says)), "{query}: {err}");
    }
    // Saving: an enabled job that can never fire again is refused; a disabled spent one is kept.
    let spent = json!({"schedule": "@at 2020-01-01T00:00:00Z", "task": {"kind": "shell", "command": "true"}});
    let (status, err) = c.call(Method::PUT, "/api/jobs/spent", Some(spent.clone())).await?;
    assert_eq!((status, err["error"]["field"].as_str()), (400, Some("schedule")), "{err}");
    assert!(err["error"]["message"].as_str().is_some_and(|m| m.contains("never fires after")), "{err}");
    let past_year = json!({"schedule": "0 0 0 1 1 * 2020", "task": {"kind": "shell", "command": "true"}});
    let (status, err) = c.call(Method::PUT, "/api/jobs/spent", Some(past_year)).await?;
    assert_eq!((status, err["error"]["field"].as_str()), (400, Some("schedule")), "{err}");
    let mut disabled = spent;
    disabled["enabled"] = json!(false);
    let (status, body) = c.call(Method::PUT, "/api/jobs/spent", Some(disabled)).await?;
    assert!(status == 200 || status == 201, "{status} {body}");
    let (status, _) = c.call(Method::GET, "/api/nope", None).await?;
    assert_eq!(status, 404);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_down_gives_503_not_500_and_readyz_says_so() -> anyhow::Result<()> {
    let mut c = Cluster::start("api-etcd-down", 0).await?;
    assert_eq!(c.get("/readyz").await?["etcd"]["ok"], true);
    c.etcd.proc.kill9();
    let (status, err) = c.call(Method::GET, "/api/jobs", None).await?;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "etcd_unavailable");
    let (status, _) = c.call(Method::PUT, "/api/jobs/x", Some(shell("true"))).await?;
    assert_eq!(status, 503);
    let (status, ready) = c.call(Method::GET, "/readyz", None).await?;
    assert_eq!((status, &ready["etcd"]["ok"]), (503, &json!(false)));
    assert_eq!(c.call(Method::GET, "/healthz", None).await?.0, 200);
    // And it recovers when etcd is back.
    c.etcd.restart().await?;
    etcron_tests::wait_for(std::time::Duration::from_secs(20), "master to reach etcd again", || async {
        c.get("/api/jobs").await.ok().map(|_| ())
    })
    .await?;
    Ok(())
}
