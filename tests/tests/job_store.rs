#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected
//! The master's `JobStore` against a real etcd, without HTTP: saves with their preconditions,
//! deletes taking what belongs to the job along, the dry-run plan comparing secret values,
//! pause and resume kept outside the spec, run requests and kill commands on their leases.

use etcd_client::GetOptions;
use etcron_common::job::JobSpec;
use etcron_common::keys::{Keys, KillTarget};
use etcron_master::job_store::{Change, JobStore, Origin, Planned, Precondition, Write, Written};
use etcron_tests::{log_dir, Etcd};
use serde_json::{json, Value};

fn spec(value: Value) -> Change {
    Change::Put(Box::new(JobSpec::from_value(value).unwrap()))
}

fn hourly(command: &str) -> Value {
    json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": command, "secret_env": {"TOKEN": "t-1"}}})
}

fn put(job: &str, value: Value, precondition: Precondition) -> Write {
    Write { job: job.to_owned(), change: spec(value), precondition }
}

async fn value(etcd: &mut etcd_client::Client, key: String) -> Option<(Value, i64)> {
    let resp = etcd.get(key, None).await.unwrap();
    resp.kvs().first().map(|kv| (serde_json::from_slice(kv.value()).unwrap(), kv.lease()))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_job_store_owns_every_job_write() -> anyhow::Result<()> {
    let logs = log_dir("job-store");
    let server = Etcd::start(&logs).await?;
    let mut etcd = server.client().await?;
    let keys = Keys::new("/store-test")?;
    let store = JobStore::new(etcd.clone(), keys.clone());

    // Saves: created, then refused on a stale revision, then replaced on the right one.
    let create = Precondition { expected: None, create_only: true };
    let applied = store.apply(vec![put("a", hourly("one"), create)], &Origin::default()).await;
    let Ok(Written::Saved { created: true, revision, .. }) = &applied.outcomes[0] else { panic!("{applied:?}") };
    let revision = *revision;
    assert!(value(&mut etcd, keys.state("a")).await.is_some(), "a new job's state is written with it");
    let stale = Precondition { expected: Some(revision - 1), create_only: false };
    let applied = store.apply(vec![put("a", hourly("two"), stale)], &Origin::default()).await;
    assert_eq!(applied.outcomes[0].as_ref().unwrap_err().status, 409);
    let current = Precondition { expected: Some(revision), create_only: false };
    let applied = store.apply(vec![put("a", hourly("two"), current)], &Origin::default()).await;
    assert!(matches!(applied.outcomes[0], Ok(Written::Saved { created: false, .. })), "{applied:?}");
    assert_eq!(applied.transactions, 1);

    // The plan compares secret values on the server and writes nothing.
    let mut other_secret = hourly("two");
    other_secret["task"]["secret_env"]["TOKEN"] = json!("t-2");
    let plan = store
        .plan(&[
            put("a", hourly("two"), Precondition::default()),
            put("a2", other_secret.clone(), Precondition::default()),
        ])
        .await;
    assert_eq!(plan[0].as_ref().unwrap(), &Planned::Unchanged);
    assert_eq!(plan[1].as_ref().unwrap(), &Planned::Create);
    let plan = store.plan(&[put("a", other_secret, Precondition::default())]).await;
    assert_eq!(plan[0].as_ref().unwrap(), &Planned::Update { secrets_changed: vec!["task.secret_env.TOKEN".into()] });
    assert!(value(&mut etcd, keys.job("a2")).await.is_none());

    // Pause is a key of its own: saving the spec again leaves the job paused.
    let paused = store.pause("a", "alice", Some("migration".into()), None).await?;
    assert_eq!(paused.pause.reason.as_deref(), Some("migration"));
    let stored = value(&mut etcd, keys.paused("a")).await.expect("the pause key");
    assert_eq!(stored.0["by"], "alice");
    let saved = store.apply(vec![put("a", hourly("three"), Precondition::default())], &Origin::default()).await;
    let Ok(Written::Saved { pause: Some(kept), .. }) = &saved.outcomes[0] else { panic!("{saved:?}") };
    assert_eq!(kept.reason.as_deref(), Some("migration"), "a save never resumes, and says so");
    assert!(store.read("a").await?.1.is_some());
    let resumed = store.resume("a", &Origin::default()).await?;
    assert!(resumed.was_paused.is_some() && resumed.spec_before.is_none() && !resumed.unchanged);
    assert!(value(&mut etcd, keys.paused("a")).await.is_none());
    assert!(store.resume("a", &Origin::default()).await?.unchanged);
    assert_eq!(store.pause("nope", "alice", None, None).await.unwrap_err().status, 404);

    // A job declared disabled is enabled by resume, on the revision read.
    let mut disabled = hourly("d");
    disabled["enabled"] = json!(false);
    store.apply(vec![put("d", disabled, Precondition::default())], &Origin::default()).await.outcomes[0]
        .as_ref()
        .unwrap();
    let resumed = store.resume("d", &Origin::default()).await?;
    assert!(resumed.spec_before.is_some());
    assert_eq!(value(&mut etcd, keys.job("d")).await.unwrap().0["enabled"], true);

    // Run requests and kill commands live on a lease; a run of an unknown job is refused.
    let (request_id, execution) = store.request_run("a", "test", etcron_common::model::RunParams::default()).await?;
    assert_eq!(execution.to_string(), format!("a@manual-{request_id}#1"));
    let (_, lease) = value(&mut etcd, keys.trigger("a", &request_id)).await.expect("the run request");
    assert!(lease > 0, "on a lease");
    assert_eq!(
        store.request_run("nope", "test", etcron_common::model::RunParams::default()).await.unwrap_err().status,
        404
    );
    store.kill("a", &KillTarget::All, "test").await?;
    let (command, lease) = value(&mut etcd, keys.kill("a", &KillTarget::All)).await.expect("the kill command");
    assert!(lease > 0 && command["reason"] == "test", "{command}");

    // A delete takes the state, the pause and pending run requests along.
    store.pause("a", "alice", None, None).await?;
    let applied = store
        .apply(
            vec![Write { job: "a".into(), change: Change::Delete, precondition: Precondition::default() }],
            &Origin::default(),
        )
        .await;
    assert!(matches!(applied.outcomes[0], Ok(Written::Deleted { before: Some(_) })), "{applied:?}");
    for key in [keys.job("a"), keys.state("a"), keys.paused("a")] {
        assert!(value(&mut etcd, key.clone()).await.is_none(), "{key} deleted");
    }
    let triggers = etcd.get(keys.job_trigger_prefix("a"), Some(GetOptions::new().with_prefix())).await?;
    assert_eq!(triggers.count(), 0);
    let applied = store
        .apply(
            vec![Write { job: "a".into(), change: Change::Delete, precondition: Precondition::default() }],
            &Origin::default(),
        )
        .await;
    assert_eq!(applied.outcomes[0].as_ref().unwrap_err().status, 404);
    Ok(())
}
