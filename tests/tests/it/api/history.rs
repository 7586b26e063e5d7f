//! Spec history: every save (PUT, batch, resume, rollback) keeps its version with who, when and
//! which request, secrets withheld; a diff between two; a rollback under `If-Match` of which
//! exactly one of two racing callers wins; the history outlives an etcd compaction, keeps the
//! newest 100 within `max_history_bytes_per_job` and goes with the job.

use std::time::Duration;

use etcron_tests::{wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

fn spec(command: &str, description: &str) -> Value {
    json!({"schedule": "@yearly", "description": description,
           "task": {"kind": "shell", "command": command, "secret_env": {"PW": "hunter2"}}})
}

async fn history(c: &Cluster, job: &str) -> Value {
    c.get(&format!("/api/jobs/{job}/history")).await.unwrap()
}

fn revisions(h: &Value) -> Vec<i64> {
    h["versions"].as_array().unwrap().iter().map(|v| v["revision"].as_i64().unwrap()).collect()
}

fn versions(h: &Value) -> Vec<i64> {
    h["versions"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect()
}

async fn rollback(c: &Cluster, job: &str, revision: i64, if_match: Option<i64>) -> (u16, Value) {
    let mut req = c.http.post(format!("{}/api/jobs/{job}/rollback", c.master.url)).json(&json!({"revision": revision}));
    if let Some(rev) = if_match {
        req = req.header("If-Match", format!("\"{rev}\""));
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_save_is_kept_diffed_and_rolled_back_once() -> anyhow::Result<()> {
    let c = Cluster::start("history", 0).await?;
    let v1 = c.put_job("db", spec("pg_dump one", "first")).await?["revision"].as_i64().unwrap();
    let (status, saved) = c.call(Method::PUT, "/api/jobs/db", Some(spec("pg_dump two", "first"))).await?;
    assert_eq!(status, 200, "a replace, not a create: {saved}");
    let v2 = saved["revision"].as_i64().unwrap();
    let batch = json!({"changes": [{"job": "db", "op": "put", "spec": spec("pg_dump two", "from a batch")}]});
    let (status, answer) = c.call(Method::POST, "/api/batch", Some(batch)).await?;
    assert_eq!(status, 200, "{answer}");
    let v3 = answer["results"][0]["revision"].as_i64().unwrap();

    let h = history(&c, "db").await;
    assert_eq!(revisions(&h), [v3, v2, v1], "newest first: {h}");
    assert_eq!(versions(&h), [3, 2, 1], "the job's own numbers: {h}");
    assert_eq!(h["revision"], v3);
    let vias: Vec<&str> = h["versions"].as_array().unwrap().iter().map(|v| v["via"].as_str().unwrap()).collect();
    assert_eq!(vias, ["POST /api/batch", "PUT /api/jobs/db", "PUT /api/jobs/db"]);
    assert!(h["versions"].as_array().unwrap().iter().all(|v| v["by"] == "anonymous"));
    assert_eq!(h["versions"][0]["current"], true);
    assert_eq!(h["versions"][1]["current"], false);
    assert_eq!(h["versions"][2]["spec"]["task"]["secret_env"], json!({"PW": null}), "secrets withheld");
    assert!(!h.to_string().contains("hunter2"));
    // The request that saved a version is the audit entry of that request.
    let request = h["versions"][1]["request_id"].as_str().unwrap().to_owned();
    wait_for(Duration::from_secs(20), "the audit entry of the save", || async {
        let audit = c.get("/api/audit?job=db").await.ok()?;
        audit["entries"]
            .as_array()?
            .iter()
            .any(|e| e["id"] == request.as_str() && e["action"] == "job.put")
            .then_some(())
    })
    .await?;

    // What changed from one version to another, and to the current one.
    let d = c.get(&format!("/api/jobs/db/history/diff?from={v1}&to={v2}")).await?;
    assert_eq!(d["changes"], json!([{"path": "task.command", "old": "pg_dump one", "new": "pg_dump two"}]));
    let d = c.get(&format!("/api/jobs/db/history/diff?from={v1}")).await?;
    let paths: Vec<&str> = d["changes"].as_array().unwrap().iter().map(|x| x["path"].as_str().unwrap()).collect();
    assert_eq!((paths, d["to"].as_i64()), (vec!["description", "task.command"], Some(v3)));
    for (query, field) in [("from=abc", "from"), ("to=1", "from"), ("from=1&to=-2", "to")] {
        let (status, e) = c.call(Method::GET, &format!("/api/jobs/db/history/diff?{query}"), None).await?;
        assert_eq!((status, e["error"]["field"].as_str()), (400, Some(field)), "{query}: {e}");
    }
    let (status, e) = c.call(Method::GET, "/api/jobs/db/history/diff?from=1", None).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (404, Some("from")), "{e}");

    // Two callers roll back over the same revision at once: one wins, the other is told.
    let (a, b) = tokio::join!(rollback(&c, "db", v1, Some(v3)), rollback(&c, "db", v2, Some(v3)));
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{a:?} {b:?}");
    let (won, restored) = if a.0 == 200 { (a.1, v1) } else { (b.1, v2) };
    let v4 = won["revision"].as_i64().unwrap();
    let h = history(&c, "db").await;
    assert_eq!(revisions(&h), [v4, v3, v2, v1], "exactly one new version");
    assert_eq!(versions(&h), [4, 3, 2, 1]);
    assert_eq!(h["versions"][0]["restored"], restored);
    assert_eq!(h["versions"][0]["via"], "POST /api/jobs/db/rollback");
    let expected_command = if restored == v1 { "pg_dump one" } else { "pg_dump two" };
    assert_eq!(won["spec"]["task"]["command"], expected_command);
    // The withheld secret was kept from the stored spec.
    let mut etcd = c.etcd.client().await?;
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    let stored = etcd.get(keys.job("db"), None).await?.kvs()[0].value().to_vec();
    assert!(String::from_utf8(stored)?.contains("hunter2"), "the rollback kept the stored secret");
    // Refusals name the field; a stale If-Match is a conflict.
    for (body, status, field) in [
        (json!({}), 400, Some("revision")),
        (json!({"revision": "x"}), 400, Some("revision")),
        (json!({"revision": 5, "to": 1}), 400, Some("to")),
        (json!({"revision": 1}), 404, Some("revision")),
    ] {
        let (got, e) = c.call(Method::POST, "/api/jobs/db/rollback", Some(body.clone())).await?;
        assert_eq!((got, e["error"]["field"].as_str()), (status, field), "{body}: {e}");
    }
    assert_eq!(rollback(&c, "db", v1, Some(v3)).await.0, 409);
    assert_eq!(rollback(&c, "nope", v1, None).await.0, 404);

    // etcronctl: the list, a diff, a rollback refused over a stale revision, a bad range.
    let ctl = |args: &[&str]| {
        let mut cmd = std::process::Command::new(etcron_tests::bin("etcronctl").unwrap());
        cmd.args(args).env("ETCRON_SERVER", &c.master.url).env_remove("ETCRON_TOKEN");
        let out = cmd.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    };
    let (code, listed) = ctl(&["jobs", "history", "db"]);
    assert_eq!(code, Some(0), "{listed}");
    assert!(
        listed.contains("POST /api/jobs/db/rollback") && listed.contains(&format!("current (restores {restored})")),
        "{listed}"
    );
    let (code, diffed) = ctl(&["jobs", "history", "db", "--diff", &format!("{v1}..{v2}")]);
    assert_eq!(code, Some(0), "{diffed}");
    assert!(diffed.contains("~ task.command: \"pg_dump one\" → \"pg_dump two\""), "{diffed}");
    // A long value changed at its end is shown whole, both versions, with where they differ.
    let long = "pg_dump --format=custom --file=/var/backups/db-nightly.dump production_db_main";
    let l1 = c.put_job("long", spec(long, "x")).await?["revision"].as_i64().unwrap();
    let l2 = c.put_job("long", spec(&long.replace("main", "replica"), "x")).await?["revision"].as_i64().unwrap();
    let (code, diffed) = ctl(&["jobs", "history", "long", "--diff", &format!("{l1}..{l2}")]);
    assert_eq!(code, Some(0), "{diffed}");
    assert!(
        diffed.contains(&format!("  ~ task.command:\n      - {long}\n      + {}\n", long.replace("main", "replica"))),
        "{diffed}"
    );
    assert!(diffed.contains(&format!("^^^^^^^ from character {}", long.find("main").unwrap() + 1)), "{diffed}");
    // --diff alone: the last save.
    let (code, last) = ctl(&["jobs", "history", "long", "--diff"]);
    assert_eq!(code, Some(0), "{last}");
    assert!(last.starts_with(&format!("revision {l1} → {l2}: 1 change(s)")), "{last}");
    c.put_job("once", spec("true", "x")).await?;
    let (code, once) = ctl(&["jobs", "history", "once", "--diff"]);
    assert_eq!(code, Some(2), "one version, nothing to compare: {once}");
    // The CLI's rollback goes to the version the race above did not restore, so it changes the spec.
    let other = if restored == v1 { v2 } else { v1 };
    let (code, refused) = ctl(&["jobs", "rollback", "db", "--to", &other.to_string(), "--if-match", &v3.to_string()]);
    assert_eq!(code, Some(4), "{refused}");
    assert_eq!(ctl(&["jobs", "history", "db", "--diff", "x"]).0, Some(2));
    let (code, done) = ctl(&["jobs", "rollback", "db", "--to", &other.to_string(), "--if-match", &v4.to_string()]);
    assert_eq!(code, Some(0), "{done}");
    assert!(done.contains(&format!("rolled back to the spec of revision {other}")), "{done}");
    // It prints what it restored: the changes from the version it replaced.
    assert!(done.contains(&format!("revision {v4} → ")) && done.contains("change(s)"), "{done}");

    // A resume that enables the spec is a save too.
    let mut disabled = spec("pg_dump two", "off");
    disabled["enabled"] = json!(false);
    c.put_job("db", disabled).await?;
    assert_eq!(c.call(Method::POST, "/api/jobs/db/resume", None).await?.0, 200);
    let h = history(&c, "db").await;
    assert_eq!(h["versions"][0]["via"], "POST /api/jobs/db/resume");
    assert_eq!(h["versions"][0]["spec"]["enabled"], true);

    // The tool and the file a client names are kept with the version; etcronctl names its
    // command, and apply each job's file.
    let note = |name: &str, value: &str| c.http.put(format!("{}/api/jobs/db", c.master.url)).header(name, value);
    let resp = note("X-Etcron-Client", "deploy-bot 2.1")
        .header("X-Etcron-Source", "infra/jobs/db.toml")
        .json(&spec("pg_dump two", "noted"))
        .send()
        .await?;
    assert_eq!(resp.status(), 200);
    let h = history(&c, "db").await;
    assert_eq!(
        (&h["versions"][0]["client"], &h["versions"][0]["source"]),
        (&json!("deploy-bot 2.1"), &json!("infra/jobs/db.toml"))
    );
    let resp = note("X-Etcron-Client", &"x".repeat(300)).json(&spec("pg_dump three", "noted")).send().await?;
    let (status, e): (u16, Value) = (resp.status().as_u16(), resp.json().await?);
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("X-Etcron-Client")), "{e}");
    let long_source =
        json!({"changes": [{"job": "db", "op": "put", "spec": spec("x", "y"), "source": "s".repeat(300)}]});
    let (_, answer) = c.call(Method::POST, "/api/batch", Some(long_source)).await?;
    let refused = &answer["results"][0];
    assert_eq!(
        (refused["status"].as_u64(), refused["error"]["field"].as_str()),
        (Some(400), Some("source")),
        "{answer}"
    );
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("db.toml");
    std::fs::write(&file, "[jobs.db]\nschedule = \"@yearly\"\ndescription = \"from a file\"\n[jobs.db.task]\nkind = \"shell\"\ncommand = \"pg_dump two\"\nsecret_env = { PW = { keep = true } }\n")?;
    let (code, applied) = ctl(&["jobs", "apply", "-f", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{applied}");
    let h = history(&c, "db").await;
    let newest = &h["versions"][0];
    assert_eq!(
        (&newest["client"], &newest["source"]),
        (&json!("etcronctl jobs apply"), &json!(file.to_str().unwrap())),
        "{h}"
    );
    let (code, listed) = ctl(&["jobs", "history", "db"]);
    assert_eq!(code, Some(0), "{listed}");
    let first_row = listed.lines().nth(1).unwrap_or_default();
    assert!(
        first_row.starts_with("9 ") && first_row.contains(&format!("etcronctl jobs apply {}", file.display())),
        "{listed}"
    );
    assert!(listed.contains("etcronctl jobs rollback"), "the CLI's rollback: {listed}");

    // Compaction does not touch it: it is not etcd's MVCC history.
    let before = revisions(&h);
    let now = etcd.get("x", None).await?.header().unwrap().revision();
    etcd.compact(now, None).await?;
    assert_eq!(revisions(&history(&c, "db").await), before);

    // The newest 100 are kept.
    for i in 0..104 {
        c.put_job("db", spec(&format!("pg_dump {i}"), "many")).await?;
    }
    wait_for(Duration::from_secs(20), "the oldest versions pruned", || async {
        (history(&c, "db").await["versions"].as_array()?.len() == 100).then_some(())
    })
    .await?;
    let h = history(&c, "db").await;
    assert_eq!(h["versions"][0]["spec"]["task"]["command"], "pg_dump 103");
    // Numbered from the job's first save although the oldest are gone: 9 before, 104 since.
    assert_eq!((h["versions"][0]["version"].as_i64(), h["versions"][99]["version"].as_i64()), (Some(113), Some(14)));

    // Deleting the job deletes its history.
    assert_eq!(c.call(Method::DELETE, "/api/jobs/db", None).await?.0, 204);
    assert_eq!(c.call(Method::GET, "/api/jobs/db/history", None).await?.0, 404);
    let left = etcd.get(keys.history_of("db"), Some(etcd_client::GetOptions::new().with_prefix())).await?;
    assert!(left.kvs().is_empty());
    // A job created again under the name starts again at version 1.
    c.put_job("db", spec("true", "again")).await?;
    assert_eq!(versions(&history(&c, "db").await), [1]);
    Ok(())
}

/// With `max_history_bytes_per_job` at its least (64 KiB), ten saves of a ~15 KB spec leave in
/// etcd only the newest versions that fit in it (four), as the API lists them.
#[tokio::test(flavor = "multi_thread")]
async fn saved_versions_are_kept_within_their_bytes_per_job() -> anyhow::Result<()> {
    const MAX: u64 = 65_536;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(&config, format!("max_history_bytes_per_job = {MAX}\n"))?;
    let config = config.display().to_string();
    let c = Cluster::start_with("history-bytes", 0, false, &["--config", &config]).await?;
    // Commands of one length, each save a change.
    let command = |i: usize| format!("echo {i:02} {}", "x".repeat(15_000));
    let mut saved = Vec::new();
    for i in 0..10 {
        saved.push(c.put_job("big", spec(&command(i), "big")).await?["revision"].as_i64().unwrap());
    }

    // Pruning follows each save: wait until etcd holds no more than the setting.
    let mut etcd = c.etcd.client().await?;
    let prefix = etcron_model::keys::Keys::new(&c.namespace)?.history_of("big");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let versions = loop {
        let versions = stored_versions(&mut etcd, &prefix).await?;
        let total: u64 = versions.iter().map(|v| v.1).sum();
        if total <= MAX {
            break versions;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "max_history_bytes_per_job not held: {} versions of {total} bytes left",
            versions.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let total: u64 = versions.iter().map(|v| v.1).sum();
    let smallest = versions.iter().map(|v| v.1).min().unwrap();
    assert!(total + smallest > MAX, "room was left for one more version: {} kept, {total} bytes", versions.len());
    // The newest are the ones kept, each as saved.
    let kept: Vec<i64> = versions.iter().map(|v| v.0).collect();
    assert_eq!(kept, saved.iter().rev().take(kept.len()).copied().collect::<Vec<_>>(), "the newest kept");
    for (n, (_, _, cmd)) in versions.iter().enumerate() {
        assert_eq!(*cmd, command(9 - n));
    }
    assert_eq!(kept.len(), 4, "four versions of ~15 KB fit in 64 KiB");

    // The API lists what etcd holds.
    let h = history(&c, "big").await;
    assert_eq!(revisions(&h), kept, "{}", h["versions"].as_array().unwrap().len());
    assert_eq!(h["versions"][0]["current"], true);
    let listed: Vec<&str> =
        h["versions"].as_array().unwrap().iter().map(|v| v["spec"]["task"]["command"].as_str().unwrap()).collect();
    assert_eq!(listed, versions.iter().map(|v| v.2.as_str()).collect::<Vec<_>>());
    Ok(())
}

/// The saved versions under `prefix` in etcd, newest first: create revision, bytes, command.
async fn stored_versions(etcd: &mut etcd_client::Client, prefix: &str) -> anyhow::Result<Vec<(i64, u64, String)>> {
    let resp = etcd.get(prefix, Some(etcd_client::GetOptions::new().with_prefix())).await?;
    let mut versions = Vec::new();
    for kv in resp.kvs() {
        let v: Value = serde_json::from_slice(kv.value())?;
        let command = v["spec"]["task"]["command"].as_str().unwrap_or_default().to_owned();
        versions.push((kv.create_revision(), kv.value().len() as u64, command));
    }
    versions.sort_unstable_by_key(|v| std::cmp::Reverse(v.0));
    Ok(versions)
}
