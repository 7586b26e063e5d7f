//! The master's doors, against real etcd, a real `mongod` and master processes:
//! tokens from `hash-token` with roles, secrets that reach the task but never the API, the
//! audit log (kept across a MongoDB outage), no CORS, and refusing an open non-loopback listen.

use std::process::Command;
use std::time::Duration;

use etcron_tests::{bin, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-for-tests-0123456789";

/// `etcron-master hash-token`: the token it printed and the config entry.
fn hash_token(name: &str, role: &str) -> (String, String) {
    let out = Command::new(bin("etcron-master").unwrap())
        .args(["hash-token", "--name", name, "--role", role])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text.lines().nth(1).unwrap().trim_start_matches('#').trim().to_owned();
    assert_eq!(token.len(), 64, "{text}");
    let entry: String = text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    assert!(!entry.contains(&token), "the config holds the hash, not the token");
    (token, entry)
}

async fn call_as(c: &Cluster, token: &str, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    c.call_as(token, method, path, body).await.unwrap()
}

/// Polls the audit log until `check` accepts the entries of `job`.
async fn audit(c: &Cluster, job: &str, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    wait_for(Duration::from_secs(30), &format!("audit entries of {job}"), || async {
        let v = c.get(&format!("/api/audit?job={job}")).await.ok()?;
        let entries = v["entries"].as_array()?.clone();
        check(&entries).then_some(entries)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn roles_secrets_and_the_audit_log_work_end_to_end() -> anyhow::Result<()> {
    let (viewer, viewer_entry) = hash_token("dashboard", "viewer");
    let (operator, operator_entry) = hash_token("on-call", "operator");
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(&config, format!("{viewer_entry}\n{operator_entry}\n"))?;
    let config = config.display().to_string();
    let mut c = Cluster::start_with("security-roles", 1, true, &["--config", &config, "--api-token", ADMIN]).await?;

    // The admin creates a job with a secret; the task gets it, the API never shows it.
    let out = c.path("out");
    let spec = json!({"schedule": "@yearly", "task": {"kind": "shell",
        "command": format!("echo \"$PW\" > {}", out.display()), "secret_env": {"PW": "hunter2"}}});
    c.put_job("secretive", spec).await?;
    let (status, shown) = call_as(&c, &viewer, Method::GET, "/api/jobs/secretive", None).await;
    assert_eq!(status, 200);
    assert_eq!(shown["spec"]["task"]["secret_env"]["PW"], Value::Null);
    assert!(!shown.to_string().contains("hunter2"));
    let (status, listed) = call_as(&c, &viewer, Method::GET, "/api/jobs", None).await;
    assert_eq!(status, 200);
    assert!(!listed.to_string().contains("hunter2"));

    // A viewer reads but may not run; an operator runs, kills and pauses but may not edit.
    let (status, body) = call_as(&c, &viewer, Method::POST, "/api/jobs/secretive/run", None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "{body}");
    let (status, _) = call_as(&c, "not-a-token-0123456789", Method::GET, "/api/jobs", None).await;
    assert_eq!(status, 401);
    let (status, run) = call_as(&c, &operator, Method::POST, "/api/jobs/secretive/run", None).await;
    assert_eq!(status, 202, "{run}");
    c.wait_executions("job=secretive&status=succeeded", "the operator's run", |l| l.len() == 1).await?;
    assert_eq!(std::fs::read_to_string(&out)?.trim(), "hunter2", "the secret reached the task");
    let (status, _) = call_as(&c, &operator, Method::POST, "/api/jobs/secretive/pause", None).await;
    assert_eq!(status, 200);
    let edit = json!({"schedule": "@daily", "task": {"kind": "shell", "command": "true"}});
    let (status, _) = call_as(&c, &operator, Method::PUT, "/api/jobs/secretive", Some(edit)).await;
    assert_eq!(status, 403);

    // A replace that sends the secret back as null keeps it; a new job cannot keep what it lacks.
    let mut replace = shown["spec"].clone();
    replace["description"] = json!("edited without seeing the secret");
    c.put_job("secretive", replace.clone()).await?;
    std::fs::remove_file(&out)?;
    c.call(Method::POST, "/api/jobs/secretive/run", None).await?;
    c.wait_executions("job=secretive&status=succeeded", "the run after the edit", |l| l.len() == 2).await?;
    assert_eq!(std::fs::read_to_string(&out)?.trim(), "hunter2", "the secret survived the edit");
    let (status, body) = c.call(Method::PUT, "/api/jobs/fresh", Some(replace)).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("task.secret_env.PW")), "{body}");

    // The audit log: who did what, with the spec before and after, secrets withheld.
    let entries = audit(&c, "secretive", |e| e.len() >= 7).await;
    let actions: Vec<(&str, &str, u64)> = entries
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["actor"].as_str().unwrap(), e["status"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("job.run", "api-token", 202),
            ("job.put", "api-token", 200),
            ("job.put", "on-call", 403),
            ("job.pause", "on-call", 200),
            ("job.run", "on-call", 202),
            ("job.run", "dashboard", 403),
            ("job.put", "api-token", 201),
        ],
        "newest first; refusals (403) are kept, requests without a valid token are not"
    );
    let put = &entries[1];
    assert_eq!(put["before"]["description"], Value::Null);
    assert_eq!(put["after"]["description"], "edited without seeing the secret");
    assert_eq!(put["after"]["task"]["secret_env"]["PW"], Value::Null);
    assert!(put["remote"].as_str().unwrap().starts_with("127.0.0.1:"), "{put}");
    assert_eq!(entries[3]["detail"]["paused"]["by"], "on-call", "{}", entries[3]);
    assert!(entries[3]["before"].is_null(), "a pause does not write the spec: {}", entries[3]);
    assert!(entries[4]["detail"]["execution_id"].as_str().unwrap().starts_with("secretive@manual-"));
    assert!(!Value::Array(entries.clone()).to_string().contains("hunter2"));
    let by_actor = c.get("/api/audit?actor=on-call&action=job.pause").await?;
    assert_eq!(by_actor["entries"].as_array().unwrap().len(), 1);
    let (status, body) = c.call(Method::GET, "/api/audit?limit=0", None).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("limit")));

    // An entry made while MongoDB is down is written once it is back.
    c.mongo.stop()?;
    let (status, _) = c.call(Method::DELETE, "/api/jobs/secretive", None).await?;
    assert_eq!(status, 204, "job routes do not need MongoDB");
    c.mongo.restart().await?;
    let entries = audit(&c, "secretive", |e| e.first().is_some_and(|e| e["action"] == "job.delete")).await;
    assert_eq!(entries[0]["before"]["description"], "edited without seeing the secret");
    assert_eq!(entries.iter().filter(|e| e["action"] == "job.delete").count(), 1);

    // No CORS: a preflight from another origin is not granted.
    let resp = reqwest::Client::new()
        .request(Method::OPTIONS, format!("{}/api/jobs", c.master.url))
        .header("Origin", "https://evil.example")
        .header("Access-Control-Request-Method", "DELETE")
        .send()
        .await?;
    assert!(resp.headers().get("access-control-allow-origin").is_none());
    Ok(())
}

#[test]
fn an_open_api_on_a_non_loopback_address_is_refused() {
    let out = Command::new(bin("etcron-master").unwrap())
        .args(["--listen", "0.0.0.0:0", "--etcd-endpoints", "127.0.0.1:1"])
        .env_remove("ETCRON_API_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without tokens") && err.contains("--insecure-no-auth"), "{err}");
}
