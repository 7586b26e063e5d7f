//! Teams, route by route, against real etcd, a real `mongod`, a master and a worker: tokens of
//! each kind — a global admin, a global viewer, team A's admin, operator and viewer, team B's
//! operator — on every route that shows or touches jobs, executions, notifications, history,
//! the audit log and the overview. A job of a team the caller holds no role on is a 404 with
//! the body of a missing job, a role too low on a team it sees a 403, and lists hold only what
//! the caller may see. One team cannot fill etcd for the others: changes spend a byte budget
//! per token and per team, and a team holds at most its quota of jobs, counted in etcd: exact
//! across masters.

use std::process::Command;
use std::time::Duration;

use etcron_common::store::{RecordWrite, WriteMode};
use etcron_master::layers::auth::hash_token;
use etcron_model::keys::{ExecutionId, Tick};
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_tests::webhook::Receiver;
use etcron_tests::{bin, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-for-teams-0123456789";
const GLOBAL_VIEWER: &str = "global-viewer-token-0123456789";
const A_ADMIN: &str = "team-a-admin-token-0123456789";
const A_OPERATOR: &str = "team-a-operator-token-0123456789";
const A_VIEWER: &str = "team-a-viewer-token-0123456789";

/// A caller: its name and token.
#[derive(Clone, Copy)]
struct Who {
    name: &'static str,
    token: &'static str,
}

async fn call(c: &Cluster, who: Who, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    c.call_as(who.token, method, path, body).await.unwrap()
}

async fn get(c: &Cluster, who: Who, path: &str) -> Value {
    let (status, body) = call(c, who, Method::GET, path, None).await;
    assert_eq!(status, 200, "{} GET {path}: {body}", who.name);
    body
}

/// The names of a list's items under `key`, each read at `field`.
fn names(list: &Value, key: &str, field: &str) -> Vec<String> {
    let mut out: Vec<String> =
        list[key].as_array().unwrap().iter().map(|i| i[field].as_str().unwrap_or_default().to_owned()).collect();
    out.sort();
    out.dedup();
    out
}

/// `etcron-master hash-token` with team roles: the token and its config entry.
fn team_token(name: &str, teams: &[&str]) -> (String, String) {
    let mut args = vec!["hash-token", "--name", name];
    for t in teams {
        args.extend(["--team", t]);
    }
    let out = Command::new(bin("etcron-master").unwrap()).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text.lines().nth(1).unwrap().trim_start_matches('#').trim().to_owned();
    let entry: String = text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    assert!(entry.contains("teams = {") && !entry.contains("role ="), "{entry}");
    (token, entry)
}

fn entry(name: &str, token: &str, roles: &str) -> String {
    format!("[[auth.tokens]]\nname = {name:?}\n{roles}\nsha256 = {:?}\n", hash_token(token))
}

/// A missing job's answer with `name`'s place taken by `as_name`, to compare bodies.
fn renamed(body: &Value, name: &str, as_name: &str) -> Value {
    serde_json::from_str(&body.to_string().replace(name, as_name)).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_shows_and_touches_only_the_callers_teams() -> anyhow::Result<()> {
    let (b_token, b_entry) = team_token("b-op", &["b=operator"]);
    let b_token: &'static str = Box::leak(b_token.into_boxed_str());
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(
        &config,
        [
            entry("global-viewer", GLOBAL_VIEWER, "role = \"viewer\""),
            entry("a-admin", A_ADMIN, "teams = { a = \"admin\" }"),
            entry("a-op", A_OPERATOR, "teams = { a = \"operator\" }"),
            entry("a-view", A_VIEWER, "teams = { a = \"viewer\" }"),
            b_entry,
        ]
        .join("\n"),
    )?;
    let config = config.display().to_string();
    let c = Cluster::start_with("teams", 1, false, &["--config", &config, "--api-token", ADMIN]).await?;
    let admin = Who { name: "api-token", token: ADMIN };
    let gview = Who { name: "global-viewer", token: GLOBAL_VIEWER };
    let a_admin = Who { name: "a-admin", token: A_ADMIN };
    let a_op = Who { name: "a-op", token: A_OPERATOR };
    let a_view = Who { name: "a-view", token: A_VIEWER };
    let b_op = Who { name: "b-op", token: b_token };
    let everyone = [admin, gview, a_admin, a_op, a_view, b_op];
    let team_a = [a_admin, a_op, a_view];

    // whoami says the global role (null for team-only tokens) and the team roles.
    let me = get(&c, b_op, "/api/auth/whoami").await;
    assert_eq!(me, json!({"name": "b-op", "role": null, "teams": {"b": "operator"}}));
    let me = get(&c, gview, "/api/auth/whoami").await;
    assert_eq!(me, json!({"name": "global-viewer", "role": "viewer", "teams": {}}));

    // The global admin creates a job in each team and one without a team; the B job and the
    // team-less one notify a webhook of each success.
    let hooks = Receiver::start().await?;
    let spec = |team: Option<&str>, command: &str, notify: bool| {
        let mut s = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}});
        if let Some(t) = team {
            s["team"] = json!(t);
        }
        if notify {
            s["notify"] = json!([{"url": hooks.at("/done"), "on": ["success"]}]);
        }
        s
    };
    c.put_job("a-job", spec(Some("a"), "echo from-a; sleep 60", false)).await?;
    c.put_job("b-job", spec(Some("b"), "echo from-b", true)).await?;
    c.put_job("plain", spec(None, "echo plain", true)).await?;
    let (status, body) = c.call(Method::PUT, "/api/jobs/bad-team", Some(spec(Some("Team A"), "true", false))).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("team")), "{body}");

    // GET /api/jobs: global roles list every job; team roles their teams' jobs; ?team= narrows.
    let all = ["a-job", "b-job", "plain"].map(str::to_owned).to_vec();
    for (who, expected) in [
        (admin, all.clone()),
        (gview, all.clone()),
        (a_admin, vec!["a-job".to_owned()]),
        (a_op, vec!["a-job".to_owned()]),
        (a_view, vec!["a-job".to_owned()]),
        (b_op, vec!["b-job".to_owned()]),
    ] {
        assert_eq!(names(&get(&c, who, "/api/jobs").await, "jobs", "name"), expected, "{}", who.name);
    }
    assert_eq!(names(&get(&c, gview, "/api/jobs?team=b").await, "jobs", "name"), ["b-job"]);
    assert!(names(&get(&c, a_view, "/api/jobs?team=b").await, "jobs", "name").is_empty());
    let (status, body) = call(&c, a_view, Method::GET, "/api/jobs?team=No_Such", None).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("team")), "{body}");

    // GET /api/jobs/{job}: another team's job is exactly a missing job.
    for who in everyone {
        let (status, body) = call(&c, who, Method::GET, "/api/jobs/a-job", None).await;
        let expected = if who.name == "b-op" { 404 } else { 200 };
        assert_eq!(status, expected, "{} GET a-job: {body}", who.name);
        if status == 200 {
            assert_eq!(body["spec"]["team"], "a");
        }
    }
    let (_, missing) = call(&c, b_op, Method::GET, "/api/jobs/no-such-job", None).await;
    for (who, job) in [(b_op, "a-job"), (a_view, "b-job"), (a_admin, "plain")] {
        let (status, body) = call(&c, who, Method::GET, &format!("/api/jobs/{job}"), None).await;
        assert_eq!(status, 404, "{} GET {job}", who.name);
        assert_eq!(renamed(&body, job, "no-such-job"), missing, "{} GET {job}: the body of a missing job", who.name);
    }

    // Runs: the global admin runs each job once (a-job keeps running for the stream and kill).
    let (status, run) = c.call(Method::POST, "/api/jobs/a-job/run", None).await?;
    assert_eq!(status, 202, "{run}");
    let a_running = run["execution_id"].as_str().unwrap().to_owned();
    for job in ["b-job", "plain"] {
        assert_eq!(c.call(Method::POST, &format!("/api/jobs/{job}/run"), None).await?.0, 202);
    }
    // POST run: operators of the job's team; a viewer's role is too low (403, whatever the
    // job); another team's job is 404.
    for (who, job, expected) in [
        (a_view, "a-job", 403),
        (gview, "b-job", 403),
        (b_op, "a-job", 404),
        (a_op, "plain", 404),
        (a_admin, "b-job", 404),
        (b_op, "b-job", 202),
    ] {
        let (status, body) = call(&c, who, Method::POST, &format!("/api/jobs/{job}/run"), None).await;
        assert_eq!(status, expected, "{} run {job}: {body}", who.name);
        if status == 403 {
            assert!(body["error"]["message"].as_str().unwrap().contains("needs operator"), "{body}");
        }
    }
    c.wait_executions("job=b-job&status=succeeded", "both runs of b-job", |l| l.len() == 2).await?;
    c.wait_executions("job=plain&status=succeeded", "the run of plain", |l| l.len() == 1).await?;
    // Its `running` record (written once it has run for a second), not only its marker.
    c.wait_executions("job=a-job&status=running", "a-job's running record", |l| l.len() == 1).await?;
    // A record from before teams (no team) of a job of team A: for global roles only.
    let old_ms = etcron_model::now_ms() - 300_000;
    let mut old = ExecutionRecord::blank(
        &ExecutionId::new("a-job", Tick::Scheduled(old_ms)),
        old_ms,
        TriggerKind::Schedule,
        Status::Succeeded,
        None,
    );
    old.finished_at = Some(etcron_model::rfc3339_ms(old_ms + 10));
    let old_id = old.id.to_string();
    c.mongo.store(&c.db).await?.write(&[RecordWrite { mode: WriteMode::Replace, record: old }]).await?;

    // GET /api/executions: only the records of the caller's teams; ?team= and ?job= narrow.
    let jobs_of = |list: &Value| names(list, "executions", "job");
    for (who, expected) in [
        (admin, all.clone()),
        (gview, all.clone()),
        (a_view, vec!["a-job".to_owned()]),
        (a_op, vec!["a-job".to_owned()]),
        (b_op, vec!["b-job".to_owned()]),
    ] {
        let list = get(&c, who, "/api/executions").await;
        assert_eq!(jobs_of(&list), expected, "{} search", who.name);
        let teams: Vec<&Value> = list["executions"].as_array().unwrap().iter().map(|r| &r["team"]).collect();
        let old_seen = list["executions"].as_array().unwrap().iter().any(|r| r["id"] == old_id.as_str());
        assert_eq!(old_seen, who.name == "api-token" || who.name == "global-viewer", "{}: {teams:?}", who.name);
    }
    assert!(get(&c, a_view, "/api/executions?job=b-job").await["executions"].as_array().unwrap().is_empty());
    assert!(get(&c, a_view, "/api/executions?team=b").await["executions"].as_array().unwrap().is_empty());
    assert_eq!(jobs_of(&get(&c, gview, "/api/executions?team=b").await), ["b-job"]);
    let b_records = get(&c, b_op, "/api/executions?job=b-job").await;
    assert!(b_records["executions"].as_array().unwrap().iter().all(|r| r["team"] == "b"), "{b_records}");

    // GET /api/executions/{id}: a record of another team is a record that does not exist.
    let b_id = b_records["executions"][0]["id"].as_str().unwrap().to_owned();
    let path = |id: &str| format!("/api/executions/{}", id.replace('#', "%23"));
    assert_eq!(get(&c, b_op, &path(&b_id)).await["team"], "b");
    let no_such = ExecutionId::new("b-job", Tick::Scheduled(1_000)).to_string();
    let (_, missing) = call(&c, a_view, Method::GET, &path(&no_such), None).await;
    for (who, id, expected) in [
        (a_view, b_id.as_str(), 404),
        (b_op, a_running.as_str(), 404),
        (a_view, a_running.as_str(), 200),
        (a_view, old_id.as_str(), 404),
        (gview, old_id.as_str(), 200),
        (gview, b_id.as_str(), 200),
    ] {
        let (status, body) = call(&c, who, Method::GET, &path(id), None).await;
        assert_eq!(status, expected, "{} GET {id}: {body}", who.name);
        if status == 404 && id == b_id {
            assert_eq!(renamed(&body, id, &no_such), missing, "the body of a record that does not exist");
        }
    }

    // The live stream: by the execution's team.
    for (who, expected) in [(a_view, 200), (gview, 200), (b_op, 404)] {
        let resp = reqwest::Client::new()
            .get(format!("{}{}/stream", c.master.url, path(&a_running)))
            .bearer_auth(who.token)
            .send()
            .await?;
        assert_eq!(resp.status().as_u16(), expected, "{} stream", who.name);
        if expected == 200 {
            let kind = resp.headers().get("content-type").unwrap().to_str()?.to_owned();
            assert!(kind.starts_with("text/event-stream"), "{kind}");
        }
    }

    // Workers: everyone sees them; running executions only of the caller's teams' jobs.
    let running = |v: &Value| -> Vec<String> {
        v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| {
                w["running_executions"].as_array().unwrap().iter().map(|r| r["job"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    assert_eq!(running(&get(&c, a_view, "/api/workers").await), ["a-job"]);
    assert!(running(&get(&c, b_op, "/api/workers").await).is_empty());

    // The overview counts only the caller's teams' records: as many as its search finds.
    for who in [gview, a_view, b_op] {
        let overview = get(&c, who, "/api/overview?window=1h").await;
        let total: u64 = overview["totals"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
        let found = get(&c, who, "/api/executions?limit=500").await["executions"].as_array().unwrap().len() as u64;
        assert_eq!(total, found, "{} overview: {overview}", who.name);
    }
    let overview = get(&c, b_op, "/api/overview?window=1h").await;
    assert_eq!(overview["totals"]["succeeded"], 2, "{overview}");

    // Notifications: the deliveries of the caller's teams' jobs.
    wait_for(Duration::from_secs(30), "the deliveries of b-job and plain", || async {
        let v = c.get("/api/notifications").await.ok()?;
        (names(&v, "notifications", "job") == ["b-job", "plain"]).then_some(())
    })
    .await?;
    assert_eq!(names(&get(&c, b_op, "/api/notifications").await, "notifications", "job"), ["b-job"]);
    assert!(get(&c, a_view, "/api/notifications").await["notifications"].as_array().unwrap().is_empty());
    let delivered = get(&c, b_op, "/api/notifications?job=b-job").await;
    assert!(delivered["notifications"].as_array().unwrap().iter().all(|n| n["team"] == "b"), "{delivered}");

    // Pause and resume: operators of the job's team.
    for (who, expected) in [(a_view, 403), (b_op, 404), (a_op, 200)] {
        for action in ["pause", "resume"] {
            let (status, body) = call(&c, who, Method::POST, &format!("/api/jobs/a-job/{action}"), None).await;
            assert_eq!(status, expected, "{} {action}: {body}", who.name);
        }
    }

    // Backfills: a dry run by the team's operator; another team's job is 404.
    let now = chrono::Utc::now();
    let range =
        json!({"from": (now - chrono::Duration::hours(1)).to_rfc3339(), "to": now.to_rfc3339(), "dry_run": true});
    for (who, expected) in [(a_op, 200), (b_op, 404), (a_view, 403)] {
        let (status, body) = call(&c, who, Method::POST, "/api/jobs/a-job/backfill", Some(range.clone())).await;
        assert_eq!(status, expected, "{} backfill: {body}", who.name);
    }
    for (who, expected) in [(a_view, 200), (b_op, 404)] {
        assert_eq!(call(&c, who, Method::GET, "/api/jobs/a-job/backfills", None).await.0, expected, "{}", who.name);
    }

    // History: readable by the job's team; a rollback needs admin on it.
    let (status, history) = call(&c, a_view, Method::GET, "/api/jobs/a-job/history", None).await;
    assert_eq!(status, 200, "{history}");
    let first = history["versions"].as_array().unwrap().last().unwrap()["revision"].as_i64().unwrap();
    for (who, expected) in [(b_op, 404), (gview, 200)] {
        let status = call(&c, who, Method::GET, "/api/jobs/a-job/history", None).await.0;
        assert_eq!(status, expected, "{} history", who.name);
    }
    let diff = format!("/api/jobs/a-job/history/diff?from={first}");
    assert_eq!(call(&c, b_op, Method::GET, &diff, None).await.0, 404);
    assert_eq!(call(&c, a_view, Method::GET, &diff, None).await.0, 200);
    let rollback = Some(json!({"revision": first}));
    assert_eq!(call(&c, a_op, Method::POST, "/api/jobs/a-job/rollback", rollback.clone()).await.0, 403);
    assert_eq!(call(&c, a_admin, Method::POST, "/api/jobs/b-job/rollback", rollback.clone()).await.0, 404);
    assert_eq!(call(&c, a_admin, Method::POST, "/api/jobs/a-job/rollback", rollback).await.0, 200);

    // Saves and deletes: admin of the job's team, and of the team a save puts it in.
    let put = |job: &str| format!("/api/jobs/{job}");
    for (who, job, team, expected, field) in [
        (a_op, "a-job", Some("a"), 403, None),              // operators do not edit
        (b_op, "a-job", Some("a"), 403, None),              // nor see (the role check comes first)
        (a_admin, "a-job", Some("a"), 200, None),           // its team's job
        (a_admin, "a-new", Some("a"), 201, None),           // a new job of its team
        (a_admin, "a-other", Some("b"), 403, Some("team")), // into another team
        (a_admin, "a-none", None, 403, Some("team")),       // without a team: global only
        (a_admin, "b-job", Some("a"), 409, None),           // a name another team's job holds
        (a_admin, "a-new", Some("b"), 403, Some("team")),   // moving it needs admin on b too
        (admin, "a-new", Some("b"), 200, None),             // which a global admin holds
    ] {
        let (status, body) =
            call(&c, who, Method::PUT, &put(job), Some(spec(team, "echo from-a; sleep 60", false))).await;
        assert_eq!((status, body["error"]["field"].as_str()), (expected, field), "{} PUT {job}: {body}", who.name);
    }
    for (who, job, expected) in [(a_admin, "a-new", 404), (a_admin, "b-job", 404), (a_op, "a-job", 403)] {
        let (status, body) = call(&c, who, Method::DELETE, &put(job), None).await;
        assert_eq!(status, expected, "{} DELETE {job}: {body}", who.name);
    }
    assert_eq!(call(&c, admin, Method::DELETE, "/api/jobs/a-new", None).await.0, 204);

    // A batch answers each change as its own request would have been answered.
    let batch = json!({"changes": [
        {"job": "a-batch", "op": "put", "spec": spec(Some("a"), "true", false)},
        {"job": "b-batch", "op": "put", "spec": spec(Some("b"), "true", false)},
        {"job": "b-job", "op": "delete"},
    ]});
    for dry_run in [true, false] {
        let mut body = batch.clone();
        body["dry_run"] = json!(dry_run);
        let (status, answer) = call(&c, a_admin, Method::POST, "/api/batch", Some(body)).await;
        assert_eq!(status, 200, "{answer}");
        let statuses: Vec<u64> =
            answer["results"].as_array().unwrap().iter().map(|r| r["status"].as_u64().unwrap()).collect();
        assert_eq!(statuses, [if dry_run { 200 } else { 201 }, 403, 404], "dry run {dry_run}: {answer}");
        assert_eq!(answer["results"][1]["error"]["field"], "spec.team", "{answer}");
    }
    assert_eq!(call(&c, a_op, Method::POST, "/api/batch", Some(batch)).await.0, 403, "a batch needs admin");

    // Kill: operators of the job's team.
    let kill = format!("/api/jobs/a-job/kill?execution={}", a_running.replace('#', "%23"));
    assert_eq!(call(&c, b_op, Method::POST, &kill, None).await.0, 404);
    assert_eq!(call(&c, a_view, Method::POST, &kill, None).await.0, 403);
    assert_eq!(call(&c, a_op, Method::POST, &kill, None).await.0, 202);
    c.wait_executions("job=a-job&status=killed", "the kill of a-job's run", |l| l.len() == 1).await?;

    // Cluster-wide routes need a global role; shared calendars are readable by anyone.
    for (who, method, path, expected) in [
        (a_admin, Method::GET, "/api/auth/tokens", 403),
        (gview, Method::GET, "/api/auth/tokens", 403),
        (a_admin, Method::GET, "/metrics", 403),
        (gview, Method::GET, "/metrics", 200),
        (a_admin, Method::PUT, "/api/calendars/holidays", 403),
        (a_view, Method::GET, "/api/calendars", 200),
        (a_view, Method::GET, "/api/cluster/storage", 200),
        (a_admin, Method::GET, "/api/cluster/etcd", 403),
        (gview, Method::GET, "/api/cluster/etcd", 200),
    ] {
        let mut req = reqwest::Client::new().request(method.clone(), format!("{}{path}", c.master.url));
        if method == Method::PUT {
            req = req.json(&json!({"timezone": "UTC", "dates": ["2030-12-25"]}));
        }
        let resp = req.bearer_auth(who.token).send().await?;
        // etcd's status is polled every 10 s: the storage route may say 503 until then.
        let status = resp.status().as_u16();
        let ok = status == expected || (path == "/api/cluster/storage" && status == 503);
        assert!(ok, "{} {method} {path}: {status}", who.name);
    }
    let tokens = get(&c, admin, "/api/auth/tokens").await;
    let b_listed = tokens["tokens"].as_array().unwrap().iter().find(|t| t["name"] == "b-op").unwrap().clone();
    assert_eq!(b_listed, json!({"name": "b-op", "role": null, "teams": {"b": "operator"}}));

    // The audit log: a team's callers see the entries of its jobs, never another team's (not
    // even their own refused attempts on it, which name the job); global roles see everything.
    wait_for(Duration::from_secs(30), "the audit entry of the kill", || async {
        let v = c.get("/api/audit?job=a-job&action=job.kill").await.ok()?;
        v["entries"].as_array()?.iter().any(|e| e["status"] == 202).then_some(())
    })
    .await?;
    for who in team_a {
        let entries = get(&c, who, "/api/audit?limit=500").await;
        let list = entries["entries"].as_array().unwrap();
        assert!(
            list.iter().all(|e| e["teams"].as_array().unwrap().contains(&json!("a"))),
            "{} audit: {entries}",
            who.name
        );
        assert!(
            list.iter().any(|e| e["action"] == "job.kill" && e["actor"] == "a-op"),
            "{} audit: {entries}",
            who.name
        );
    }
    let b_audit = get(&c, b_op, "/api/audit?limit=500").await;
    let b_list = b_audit["entries"].as_array().unwrap();
    assert!(b_list.iter().all(|e| e["job"] == "b-job" || e["job"] == "a-new"), "{b_audit}");
    assert!(b_list.iter().any(|e| e["action"] == "job.run" && e["actor"] == "b-op" && e["status"] == 202), "{b_audit}");
    let moved = b_list.iter().find(|e| e["job"] == "a-new" && e["action"] == "job.put" && e["status"] == 200);
    assert_eq!(moved.map(|e| e["teams"].clone()), Some(json!(["a", "b"])), "a move belongs to both teams: {b_audit}");
    let all_audit = get(&c, gview, "/api/audit?limit=500").await;
    let jobs_audited = names(&all_audit, "entries", "job");
    for job in ["a-job", "b-job", "plain"] {
        assert!(jobs_audited.iter().any(|j| j == job), "{job} in {jobs_audited:?}");
    }
    let refused = all_audit["entries"].as_array().unwrap().iter().any(|e| e["actor"] == "b-op" && e["job"] == "a-job");
    assert!(refused, "b-op's refused attempts on a-job are audited, for global roles");
    Ok(())
}

const ALPHA_ADMIN: &str = "alpha-admin-token-0123456789abcdef";
/// Admin of alpha and viewer of beta: it sees beta's jobs but may not start them.
const ALPHA_ADMIN_BETA_VIEWER: &str = "alpha-admin-beta-viewer-token-0123456";

/// A shell job of `team` (alpha's policy wants `pool = alpha`) that appends its worker's id to
/// `file`.
fn worker_job(team: Option<&str>, file: &std::path::Path, deps: &[&str]) -> Value {
    let command = format!("echo \"$ETCRON_WORKER_ID\" >> {}", file.display());
    let mut s = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}, "on_success": deps});
    if let Some(t) = team {
        s["team"] = json!(t);
        s["selector"] = json!({"pool": "alpha"});
    }
    s
}

/// Teams below the API: workers bound to teams run only their jobs; a save may use only the
/// team's run-as users and selectors (named in the error) and only dependents its caller
/// operates; hidden jobs are never named, in a refusal or in a cycle; and a cross-team
/// dependency stored before the rule (written into etcd here) is not triggered at run time.
#[tokio::test(flavor = "multi_thread")]
async fn teams_hold_on_workers_and_across_dependencies() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(
        &config,
        [
            entry("alpha-admin", ALPHA_ADMIN, "teams = { alpha = \"admin\" }"),
            entry("alpha-beta", ALPHA_ADMIN_BETA_VIEWER, "teams = { alpha = \"admin\", beta = \"viewer\" }"),
            "[teams.alpha]\nrun_as_users = [\"alpha-svc\"]\nselector = { pool = [\"alpha\"] }\n".to_owned(),
        ]
        .join("\n"),
    )?;
    let config = config.display().to_string();
    let mut c = Cluster::start_with("teams-workers", 0, false, &["--config", &config, "--api-token", ADMIN]).await?;
    // Both workers carry the label alpha's jobs select: only their teams tell them apart.
    for (id, team) in [("wa", "alpha"), ("wb", "beta")] {
        let mut opts = etcron_tests::WorkerOpts::new(id);
        opts.labels.insert("pool".into(), "alpha".into());
        opts.extra = vec!["--teams".into(), team.into()];
        c.add_worker(opts)?;
    }
    c.wait_workers(2).await?;
    let alpha = Who { name: "alpha-admin", token: ALPHA_ADMIN };
    let alpha_beta = Who { name: "alpha-beta", token: ALPHA_ADMIN_BETA_VIEWER };

    // The registrations show the teams.
    let workers = c.get("/api/workers").await?;
    let teams: Vec<(String, Value)> = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["id"].as_str().unwrap().to_owned(), w["teams"].clone()))
        .collect();
    assert_eq!(teams, [("wa".to_owned(), json!(["alpha"])), ("wb".to_owned(), json!(["beta"]))]);

    // Alpha's policy: task.user and selector outside it are refused, naming the field.
    let ran = c.path("ran");
    let mut as_root = worker_job(Some("alpha"), &ran, &[]);
    as_root["task"]["user"] = json!("root");
    let mut other_pool = worker_job(Some("alpha"), &ran, &[]);
    other_pool["selector"] = json!({"pool": "beta"});
    for (spec, field) in [(as_root, "task.user"), (other_pool, "selector")] {
        let (status, body) = call(&c, alpha, Method::PUT, "/api/jobs/a-policy", Some(spec)).await;
        assert_eq!((status, body["error"]["field"].as_str()), (403, Some(field)), "{body}");
    }

    // An alpha job runs on the alpha worker only, a beta job on the beta worker only.
    let (status, body) =
        call(&c, alpha, Method::PUT, "/api/jobs/a-run", Some(worker_job(Some("alpha"), &ran, &[]))).await;
    assert_eq!(status, 201, "{body}");
    let b_ran = c.path("b-ran");
    c.put_job("b-dep", worker_job(Some("beta"), &b_ran, &[])).await?;
    for _ in 0..6 {
        assert_eq!(call(&c, alpha, Method::POST, "/api/jobs/a-run/run", None).await.0, 202);
    }
    let runs = c.wait_executions("job=a-run&status=succeeded", "six runs of a-run", |l| l.len() == 6).await?;
    assert!(runs.iter().all(|r| r["worker_id"] == "wa"), "{runs:?}");
    assert_eq!(c.call(Method::POST, "/api/jobs/b-dep/run", None).await?.0, 202);
    let runs = c.wait_executions("job=b-dep&status=succeeded", "the run of b-dep", |l| l.len() == 1).await?;
    assert_eq!(runs[0]["worker_id"], "wb");

    // Dependencies: a hidden job, a job without a team and a missing one answer alike (404,
    // naming the entry, never the job); a job the caller sees but may not run is a 403.
    c.put_job("free", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    let mut bodies = Vec::new();
    for dep in ["b-dep", "free", "no-such-job"] {
        let spec = worker_job(Some("alpha"), &ran, &["a-run", dep]);
        let (status, body) = call(&c, alpha, Method::PUT, "/api/jobs/a-cross", Some(spec)).await;
        assert_eq!((status, body["error"]["field"].as_str()), (404, Some("on_success[1]")), "{dep}: {body}");
        assert!(!body.to_string().contains(dep), "{dep} named: {body}");
        bodies.push(body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    let spec = worker_job(Some("alpha"), &ran, &["b-dep"]);
    let (status, body) = call(&c, alpha_beta, Method::PUT, "/api/jobs/a-cross", Some(spec)).await;
    assert_eq!((status, body["error"]["field"].as_str()), (403, Some("on_success[0]")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("needs operator"), "{body}");

    // A cycle through a beta job (set up by the global admin) is reported without its name.
    c.put_job("a-mid", worker_job(Some("alpha"), &ran, &["b-cyc"])).await?;
    c.put_job("b-cyc", worker_job(Some("beta"), &b_ran, &["a-top"])).await?;
    let spec = worker_job(Some("alpha"), &ran, &["a-mid"]);
    let (status, body) = call(&c, alpha, Method::PUT, "/api/jobs/a-top", Some(spec)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("dependency_cycle")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("a-top → a-mid → (a job you cannot see) → a-top"), "{message}");
    assert!(!body.to_string().contains("b-cyc"), "{body}");

    // The global admin's cross-team dependency is recorded with the team it checked, and runs.
    let saved = c.put_job("a-legit", worker_job(Some("alpha"), &ran, &["b-dep"])).await?;
    assert_eq!(saved["spec"]["dependency_teams"], json!({"b-dep": "beta"}), "{saved}");
    assert_eq!(call(&c, alpha, Method::POST, "/api/jobs/a-legit/run", None).await.0, 202);
    c.wait_executions("job=b-dep&status=succeeded", "b-dep run by a-legit", |l| l.len() == 2).await?;

    // A spec stored before the rule (no recorded teams) points at beta's job and at an alpha
    // job: alpha's run triggers only the alpha one, and its record says why not the other.
    let mut etcd = c.etcd.client().await?;
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    let old = worker_job(Some("alpha"), &ran, &["b-dep", "a-run"]);
    etcd.put(keys.job("a-old"), serde_json::to_vec(&old)?, None).await?;
    wait_for(Duration::from_secs(10), "a-old visible", || async {
        (call(&c, alpha, Method::GET, "/api/jobs/a-old", None).await.0 == 200).then_some(())
    })
    .await?;
    assert_eq!(call(&c, alpha, Method::POST, "/api/jobs/a-old/run", None).await.0, 202);
    let runs = c.wait_executions("job=a-old&status=succeeded", "the run of a-old", |l| l.len() == 1).await?;
    let reason = runs[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not triggered: b-dep is of team \"beta\""), "{reason}");
    // The alpha dependent, requested in the same transaction, ran: the beta one would have too.
    c.wait_executions("job=a-run&trigger=dependency&status=succeeded", "a-run after a-old", |l| l.len() == 1).await?;
    let left = etcd.get(keys.job_trigger_prefix("b-dep"), Some(etcd_client::GetOptions::new().with_prefix())).await?;
    assert!(left.kvs().is_empty(), "a run request for b-dep was written");
    let (_, b_runs) = c.call(Method::GET, "/api/executions?job=b-dep", None).await?;
    assert_eq!(b_runs["executions"].as_array().unwrap().len(), 2, "b-dep ran again: {b_runs}");
    let worker_log = c.workers[0].proc.log_text();
    assert!(worker_log.contains("dependency not triggered"), "no log line on the alpha worker");
    Ok(())
}

const A_ADMIN_2: &str = "team-a-second-admin-token-0123456789";
const C_ADMIN: &str = "team-c-admin-token-0123456789";

/// A batch saving `jobs` of `team` whose commands are `bytes` long (the `round` in them makes
/// each batch a change).
fn big_batch(team: &str, jobs: usize, bytes: usize, round: usize) -> Value {
    let command = format!("echo {round} {}", "x".repeat(bytes));
    let changes: Vec<Value> = (0..jobs)
        .map(|i| {
            json!({"job": format!("{team}-big-{i}"), "op": "put",
                "spec": {"schedule": "@yearly", "team": team, "task": {"kind": "shell", "command": command}}})
        })
        .collect();
    json!({ "changes": changes })
}

#[tokio::test(flavor = "multi_thread")]
async fn one_team_cannot_fill_etcd_for_the_others() -> anyhow::Result<()> {
    let (b_token, b_entry) = team_token("b-admin", &["b=admin"]);
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    // Small limits, to reach them fast: 2 MiB at once and 1 KiB a second per token and per
    // team, 40 jobs per team.
    let limits = "change_bytes_rate = 1024\nchange_bytes_burst = 2097152\nmax_jobs_per_team = 40\n";
    std::fs::write(
        &config,
        [
            limits.to_owned(),
            entry("a-admin", A_ADMIN, "teams = { a = \"admin\" }"),
            entry("a-admin-2", A_ADMIN_2, "teams = { a = \"admin\" }"),
            entry("c-admin", C_ADMIN, "teams = { c = \"admin\" }"),
            b_entry,
        ]
        .join("\n"),
    )?;
    let config = config.display().to_string();
    let c = Cluster::start_with("team-limits", 0, false, &["--config", &config, "--api-token", ADMIN]).await?;
    let post = |token: &str, body: Value| {
        reqwest::Client::new().post(format!("{}/api/batch", c.master.url)).bearer_auth(token).json(&body).send()
    };

    // Team a's admin re-saves 30 jobs of 15 KB (about 0.9 MB written a batch, spec and saved
    // version): the budget holds two such batches, the third is refused whole, naming it.
    let mut refused = None;
    for round in 0..5 {
        let resp = post(A_ADMIN, big_batch("a", 30, 15_000, round)).await?;
        if resp.status() == 429 {
            let retry: u64 = resp.headers()["retry-after"].to_str()?.parse()?;
            refused = Some((round, retry, resp.json::<Value>().await?));
            break;
        }
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await?;
        assert!(body["results"].as_array().unwrap().iter().all(|r| r["outcome"] != "failed"), "{body}");
    }
    let (round, retry, body) = refused.expect("the byte budget never refused team a's batches");
    assert_eq!(round, 2, "two batches fit in the burst: {body}");
    assert!(retry >= 1, "Retry-After: {retry}");
    let message = body["error"]["message"].as_str().unwrap();
    assert_eq!(body["error"]["code"], "change_budget", "{body}");
    assert!(message.contains("token \"a-admin\"") && message.contains("change_bytes_burst"), "{message}");
    // Another token of team a is held by the team's budget...
    let resp = post(A_ADMIN_2, big_batch("a", 30, 15_000, 9)).await?;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await?;
    assert!(body["error"]["message"].as_str().unwrap().contains("team \"a\""), "{body}");
    // Saves naming team b from a token without a role on b are refused, and spend only that
    // token's budget, never team b's...
    for round in 0..2 {
        let resp = post(C_ADMIN, big_batch("b", 30, 15_000, round)).await?;
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await?;
        assert!(body["results"].as_array().unwrap().iter().all(|r| r["outcome"] == "failed"), "{body}");
    }
    // ...so team b's token still saves as much.
    let resp = post(&b_token, big_batch("b", 30, 15_000, 0)).await?;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await?;
    assert!(body["results"].as_array().unwrap().iter().all(|r| r["status"] == 201), "{body}");

    // An apply of hundreds of ordinary jobs passes the same budget at once.
    let changes: Vec<Value> = (0..300)
        .map(|i| json!({"job": format!("apply-{i}"), "op": "put",
            "spec": {"schedule": "@daily", "task": {"kind": "shell", "command": format!("/usr/local/bin/report --part {i}")}}}))
        .collect();
    let (status, body) = c.call_as(ADMIN, Method::POST, "/api/batch", Some(json!({ "changes": changes }))).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body["results"].as_array().unwrap().iter().all(|r| r["status"] == 201), "{body}");

    // Team c may hold 40 jobs: a batch of 40 passes, the 41st job is refused naming the quota,
    // in a batch and alone; a job without a team is under no quota.
    let small = |job: String, team: &str| json!({"job": job, "op": "put", "spec": {"schedule": "@daily", "team": team, "task": {"kind": "shell", "command": "true"}}});
    let changes: Vec<Value> = (0..40).map(|i| small(format!("c-{i}"), "c")).collect();
    let (status, body) = c.call_as(C_ADMIN, Method::POST, "/api/batch", Some(json!({ "changes": changes }))).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body["results"].as_array().unwrap().iter().all(|r| r["status"] == 201), "{body}");
    let changes = vec![small("c-0".to_owned(), "c"), small("c-40".to_owned(), "c")];
    let (_, body) = c.call_as(C_ADMIN, Method::POST, "/api/batch", Some(json!({ "changes": changes }))).await?;
    assert_eq!(body["results"][0]["status"], 200, "an update of a job of the team: {body}");
    assert_eq!(body["results"][1]["status"], 409, "{body}");
    assert_eq!(body["results"][1]["error"]["code"], "quota_exceeded", "{body}");
    let spec = json!({"schedule": "@daily", "team": "c", "task": {"kind": "shell", "command": "true"}});
    let (status, body) = c.call_as(C_ADMIN, Method::PUT, "/api/jobs/c-41", Some(spec.clone())).await?;
    assert_eq!(status, 409, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("team \"c\"") && message.contains("max_jobs_per_team") && message.contains("40"),
        "{message}"
    );
    // A job deleted frees its place.
    let (status, _) = c.call_as(C_ADMIN, Method::DELETE, "/api/jobs/c-39", None).await?;
    assert_eq!(status, 204);
    let (status, body) = c.call_as(C_ADMIN, Method::PUT, "/api/jobs/c-41", Some(spec)).await?;
    assert_eq!(status, 201, "{body}");

    let metrics = c.call_as(ADMIN, Method::GET, "/metrics", None).await?.1;
    let metrics = metrics.as_str().unwrap_or_default();
    for limit in ["byte_budget", "job_quota"] {
        let line = format!("etcron_master_change_refusals_total{{limit=\"{limit}\"}} ");
        let count: u64 = metrics.lines().find_map(|l| l.strip_prefix(line.as_str())).unwrap_or("0").parse()?;
        assert!(count >= 1, "{line}: {count}");
    }
    Ok(())
}

const Q_ADMIN: &str = "team-q-admin-token-0123456789";

/// A spec of team `team` that does nothing.
fn quiet(team: &str) -> Value {
    json!({"schedule": "@yearly", "team": team, "task": {"kind": "shell", "command": "true"}})
}

/// Sends every request of `requests` (method, URL, body) at once, from tasks held at one
/// barrier; the answers (status, body) in order.
async fn race(requests: Vec<(Method, String, Value)>) -> Vec<(u16, Value)> {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(requests.len()));
    let http = reqwest::Client::new();
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|(method, url, body)| {
            let (barrier, request) = (barrier.clone(), http.request(method, url).bearer_auth(Q_ADMIN).json(&body));
            tokio::spawn(async move {
                barrier.wait().await;
                let resp = request.send().await.unwrap();
                (resp.status().as_u16(), resp.json::<Value>().await.unwrap_or(Value::Null))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// The jobs of `team` as etcd holds them.
async fn jobs_in_etcd(c: &Cluster, team: &str) -> Vec<String> {
    let keys = etcron_model::keys::Keys::new(&c.namespace).unwrap();
    let mut etcd = c.etcd.client().await.unwrap();
    let resp = etcd.get(keys.jobs_prefix(), Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    resp.kvs()
        .iter()
        .filter(|kv| serde_json::from_slice::<Value>(kv.value()).unwrap()["team"] == team)
        .map(|kv| kv.key_str().unwrap().rsplit('/').next().unwrap().to_owned())
        .collect()
}

/// Every answer but one is `409 quota_exceeded` naming team q's quota of 10; the one is a 201.
fn one_created(answers: &[(u16, Value)]) {
    let created = answers.iter().filter(|(status, _)| *status == 201).count();
    assert_eq!(created, 1, "exactly one save fills the last place: {answers:?}");
    for (status, body) in answers.iter().filter(|(status, _)| *status != 201) {
        assert_eq!((*status, body["error"]["code"].as_str()), (409, Some("quota_exceeded")), "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("team \"q\"") && message.contains("(max_jobs_per_team) is 10"), "{message}");
    }
}

/// The job quota is counted in etcd, not in a master: two masters on one etcd, each sent ten
/// creates of team q's last place at once, store exactly one; so do racing batches.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_quota_holds_exactly_across_two_masters() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    let text = ["max_jobs_per_team = 10\n".to_owned(), entry("q-admin", Q_ADMIN, "teams = { q = \"admin\" }")];
    std::fs::write(&config, text.join("\n"))?;
    let config = config.display().to_string();
    let args = ["--config", config.as_str(), "--api-token", ADMIN];
    let c = Cluster::start_with("team-quota-masters", 0, false, &args).await?;
    let mut second_args = vec!["--mongodb-uri", c.mongo.uri.as_str(), "--mongodb-db", c.db.as_str()];
    second_args.extend(args);
    let second = etcron_tests::Master::start(&c.etcd.endpoint, &c.namespace, &c.logs, &second_args).await?;
    let masters = [c.master.url.clone(), second.url.clone()];

    // Nine of ten places taken.
    let changes: Vec<Value> =
        (0..9).map(|i| json!({"job": format!("q-{i}"), "op": "put", "spec": quiet("q")})).collect();
    let (status, body) = c.call_as(Q_ADMIN, Method::POST, "/api/batch", Some(json!({ "changes": changes }))).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body["results"].as_array().unwrap().iter().all(|r| r["status"] == 201), "{body}");

    // Twenty creates of different jobs, ten through each master, at once.
    let puts = (0..20).map(|i| (Method::PUT, format!("{}/api/jobs/q-race-{i}", masters[i % 2]), quiet("q"))).collect();
    one_created(&race(puts).await);
    assert_eq!(jobs_in_etcd(&c, "q").await.len(), 10, "etcd holds team q's quota");

    // Racing batches of two new jobs each, five through each master, for the place a delete
    // freed: one change of all of them is saved.
    let (status, _) = c.call_as(Q_ADMIN, Method::DELETE, "/api/jobs/q-0", None).await?;
    assert_eq!(status, 204);
    let batches = (0..10)
        .map(|i| {
            let changes: Vec<Value> =
                (0..2).map(|j| json!({"job": format!("q-batch-{i}-{j}"), "op": "put", "spec": quiet("q")})).collect();
            (Method::POST, format!("{}/api/batch", masters[i % 2]), json!({ "changes": changes }))
        })
        .collect();
    let answers = race(batches).await;
    let mut results = Vec::new();
    for (status, body) in answers {
        assert_eq!(status, 200, "{body}");
        results.extend(
            body["results"].as_array().unwrap().iter().map(|r| (r["status"].as_u64().unwrap() as u16, r.clone())),
        );
    }
    one_created(&results);
    let held = jobs_in_etcd(&c, "q").await;
    assert_eq!(held.len(), 10, "etcd holds team q's quota: {held:?}");
    let (_, listed) = c.call_as(ADMIN, Method::GET, "/api/jobs?team=q", None).await?;
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(10), "{listed}");
    Ok(())
}
