//! The master's `JobStore` against a real etcd, without HTTP: saves with their preconditions,
//! deletes taking what belongs to the job along, the dry-run plan comparing secret values,
//! pause and resume kept outside the spec, run requests and kill commands on their leases.

use etcd_client::GetOptions;
use etcron_master::access::{Access, Caller, Role, Scope};
use etcron_master::error::ApiError;
use etcron_master::job_store::{Change, JobStore, JobStoreError, Origin, Planned, Precondition, Write, Written};
use etcron_model::keys::{Keys, KillTarget};
use etcron_model::spec::JobSpec;
use etcron_tests::{log_dir, Etcd};
use serde_json::{json, Value};

fn spec(value: Value) -> Change {
    Change::Put(Box::new(JobSpec::from_value(value).unwrap()))
}

fn hourly(command: &str) -> Value {
    json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": command, "secret_env": {"TOKEN": "t-1"}}})
}

/// The scope of a request by `name` holding `access`, on a route that needs `needed`.
fn as_caller(name: &str, access: Access, needed: Role) -> Scope {
    Scope { caller: Caller { name: name.to_owned(), access }, needed, action: "test".to_owned() }
}

fn put(job: &str, value: Value, precondition: Precondition) -> Write {
    Write { job: job.to_owned(), change: spec(value), precondition, source: None }
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
    let admin = as_caller("alice", Access::global(Role::Admin), Role::Admin);

    // Saves: created, then refused on a stale revision, then replaced on the right one.
    let create = Precondition { expected: None, create_only: true };
    let applied = store.apply(vec![put("a", hourly("one"), create)], &Origin::default(), &admin).await;
    let Ok(Written::Saved { created: true, revision, .. }) = &applied.outcomes[0] else { panic!("{applied:?}") };
    let revision = *revision;
    assert!(value(&mut etcd, keys.state("a")).await.is_some(), "a new job's state is written with it");
    let stale = Precondition { expected: Some(revision - 1), create_only: false };
    let applied = store.apply(vec![put("a", hourly("two"), stale)], &Origin::default(), &admin).await;
    assert_eq!(ApiError::from(applied.outcomes[0].as_ref().unwrap_err().clone()).status, 409);
    let current = Precondition { expected: Some(revision), create_only: false };
    let applied = store.apply(vec![put("a", hourly("two"), current)], &Origin::default(), &admin).await;
    assert!(matches!(applied.outcomes[0], Ok(Written::Saved { created: false, .. })), "{applied:?}");
    assert_eq!(applied.transactions, 1);

    // The plan never compares secret values sent (a guess is never confirmed): the stored value
    // and another one plan alike; a secret kept (null) compares as stored. It writes nothing.
    let mut other_secret = hourly("two");
    other_secret["task"]["secret_env"]["TOKEN"] = json!("t-2");
    let mut kept_secret = hourly("two");
    kept_secret["task"]["secret_env"]["TOKEN"] = Value::Null;
    let plan = store
        .plan(
            &[put("a", kept_secret, Precondition::default()), put("a2", other_secret.clone(), Precondition::default())],
            &admin,
        )
        .await;
    assert_eq!(plan[0].as_ref().unwrap(), &Planned::Unchanged);
    assert_eq!(plan[1].as_ref().unwrap(), &Planned::Create);
    let sent = Planned::Update { secrets_changed: vec!["task.secret_env.TOKEN".into()] };
    let plan = store.plan(&[put("a", other_secret, Precondition::default())], &admin).await;
    assert_eq!(plan[0].as_ref().unwrap(), &sent);
    let plan = store.plan(&[put("a", hourly("two"), Precondition::default())], &admin).await;
    assert_eq!(plan[0].as_ref().unwrap(), &sent, "the stored value plans as any other");
    assert!(value(&mut etcd, keys.job("a2")).await.is_none());

    // Pause is a key of its own: saving the spec again leaves the job paused.
    let paused = store.pause("a", (Some("migration".into()), None), &admin).await?;
    assert_eq!(paused.pause.reason.as_deref(), Some("migration"));
    let stored = value(&mut etcd, keys.paused("a")).await.expect("the pause key");
    assert_eq!(stored.0["by"], "alice");
    let saved = store.apply(vec![put("a", hourly("three"), Precondition::default())], &Origin::default(), &admin).await;
    let Ok(Written::Saved { pause: Some(kept), .. }) = &saved.outcomes[0] else { panic!("{saved:?}") };
    assert_eq!(kept.reason.as_deref(), Some("migration"), "a save never resumes, and says so");
    // The same save again writes nothing, and answers with the job's revision and pause.
    let Ok(Written::Saved { revision, .. }) = &saved.outcomes[0] else { unreachable!() };
    let again = store.apply(vec![put("a", hourly("three"), Precondition::default())], &Origin::default(), &admin).await;
    let Ok(Written::Saved { unchanged: true, revision: same, pause: Some(kept), created: false, .. }) =
        &again.outcomes[0]
    else {
        panic!("{again:?}")
    };
    assert_eq!((same, kept.reason.as_deref()), (revision, Some("migration")));
    assert_eq!(etcd.get(keys.job("a"), None).await?.kvs()[0].mod_revision(), *revision, "nothing put");
    assert!(store.read("a", &admin).await?.1.is_some());
    let resumed = store.resume("a", &Origin::default(), &admin).await?;
    assert!(resumed.was_paused.is_some() && resumed.spec_before.is_none() && !resumed.unchanged);
    assert!(value(&mut etcd, keys.paused("a")).await.is_none());
    assert!(store.resume("a", &Origin::default(), &admin).await?.unchanged);
    assert_eq!(store.pause("nope", (None, None), &admin).await.map_err(ApiError::from).unwrap_err().status, 404);

    // A job declared disabled is enabled by resume, on the revision read.
    let mut disabled = hourly("d");
    disabled["enabled"] = json!(false);
    store.apply(vec![put("d", disabled, Precondition::default())], &Origin::default(), &admin).await.outcomes[0]
        .as_ref()
        .unwrap();
    let resumed = store.resume("d", &Origin::default(), &admin).await?;
    assert!(resumed.spec_before.is_some());
    assert_eq!(value(&mut etcd, keys.job("d")).await.unwrap().0["enabled"], true);

    // Run requests and kill commands live on a lease; a run of an unknown job is refused.
    let (request_id, execution, _) =
        store.request_run("a", "test", etcron_model::record::RunParams::default(), &admin).await?;
    assert_eq!(execution.to_string(), format!("a@manual-{request_id}#1"));
    let (_, lease) = value(&mut etcd, keys.trigger("a", &request_id)).await.expect("the run request");
    assert!(lease > 0, "on a lease");
    assert_eq!(
        store
            .request_run("nope", "test", etcron_model::record::RunParams::default(), &admin)
            .await
            .map_err(ApiError::from)
            .unwrap_err()
            .status,
        404
    );
    store.kill("a", &KillTarget::All, "test", &admin).await?;
    let (command, lease) = value(&mut etcd, keys.kill("a", &KillTarget::All)).await.expect("the kill command");
    assert!(lease > 0 && command["reason"] == "test", "{command}");

    // A delete takes the state, the pause and pending run requests along.
    store.pause("a", (None, None), &admin).await?;
    let applied = store
        .apply(
            vec![Write {
                job: "a".into(),
                change: Change::Delete,
                precondition: Precondition::default(),
                source: None,
            }],
            &Origin::default(),
            &admin,
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
            vec![Write {
                job: "a".into(),
                change: Change::Delete,
                precondition: Precondition::default(),
                source: None,
            }],
            &Origin::default(),
            &admin,
        )
        .await;
    assert_eq!(ApiError::from(applied.outcomes[0].as_ref().unwrap_err().clone()).status, 404);
    Ok(())
}

/// A job of `team` (none: no `team`).
fn of_team(team: Option<&str>, command: &str) -> Value {
    let mut spec = json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": command}});
    if let Some(team) = team {
        spec["team"] = json!(team);
    }
    spec
}

/// Every write through the store is checked against the caller's teams, on the job as read.
#[tokio::test(flavor = "multi_thread")]
async fn the_job_store_checks_every_write_against_the_callers_teams() -> anyhow::Result<()> {
    let logs = log_dir("job-store-teams");
    let server = Etcd::start(&logs).await?;
    let mut etcd = server.client().await?;
    let keys = Keys::new("/store-teams")?;
    let store = JobStore::new(etcd.clone(), keys.clone());
    let admin = as_caller("root", Access::global(Role::Admin), Role::Admin);
    let team = |role: Role, needed: Role| {
        let access = Access { role: None, teams: [("pay".to_owned(), role)].into_iter().collect() };
        as_caller("pay-person", access, needed)
    };
    let pay_admin = team(Role::Admin, Role::Admin);
    let status = |outcome: &Result<Written, JobStoreError>| match outcome {
        Ok(Written::Saved { created: true, .. }) => 201,
        Ok(Written::Saved { .. }) => 200,
        Ok(Written::Deleted { .. }) => 204,
        Err(e) => ApiError::from(e.clone()).status.as_u16(),
    };
    let field = |outcome: &Result<Written, JobStoreError>| match outcome {
        Err(e) => ApiError::from(e.clone()).field,
        Ok(_) => None,
    };
    for (job, t) in [("pay-1", Some("pay")), ("search-1", Some("search")), ("plain", None)] {
        let applied =
            store.apply(vec![put(job, of_team(t, "one"), Precondition::default())], &Origin::default(), &admin).await;
        assert_eq!(status(&applied.outcomes[0]), 201);
    }

    // One batch, each change decided on its own: the team admin may write its team's jobs only.
    let any = Precondition::default();
    let writes = vec![
        put("pay-1", of_team(Some("pay"), "two"), any),  // its team: saved
        put("pay-2", of_team(Some("pay"), "new"), any),  // a new job of its team: created
        put("search-1", of_team(Some("pay"), "x"), any), // a name another team's job holds
        put("pay-3", of_team(Some("search"), "x"), any), // a job into another team
        put("pay-4", of_team(None, "x"), any),           // a job without a team
        put("plain", of_team(Some("pay"), "x"), any),    // taking a team-less job
        Write { job: "search-1".into(), change: Change::Delete, precondition: any, source: None },
        Write { job: "absent".into(), change: Change::Delete, precondition: any, source: None },
    ];
    let planned = store.plan(&writes, &pay_admin).await;
    let applied = store.apply(writes, &Origin::default(), &pay_admin).await;
    let got: Vec<(u16, Option<String>)> = applied.outcomes.iter().map(|o| (status(o), field(o))).collect();
    let at_team = Some("team".to_owned());
    assert_eq!(
        got,
        [
            (200, None),
            (201, None),
            (409, None),
            (403, at_team.clone()),
            (403, at_team),
            (409, None),
            (404, None),
            (404, None)
        ],
        "{applied:?}"
    );
    let planned_ok: Vec<bool> = planned.iter().map(Result::is_ok).collect();
    assert_eq!(planned_ok, [true, true, false, false, false, false, false, false], "the dry run decides alike");
    let (hidden, missing) = (applied.outcomes[6].as_ref().unwrap_err(), applied.outcomes[7].as_ref().unwrap_err());
    assert_eq!(
        hidden.to_string().replace("search-1", "absent"),
        missing.to_string(),
        "another team's job: as a missing one"
    );
    assert_eq!(value(&mut etcd, keys.job("search-1")).await.unwrap().0["task"]["command"], "one", "untouched");

    // Moving a job to another team needs admin on both; a global admin may.
    let both = Access {
        role: None,
        teams: [("pay".to_owned(), Role::Admin), ("search".to_owned(), Role::Admin)].into_iter().collect(),
    };
    let applied =
        store.apply(vec![put("pay-2", of_team(Some("search"), "moved"), any)], &Origin::default(), &pay_admin).await;
    assert_eq!(status(&applied.outcomes[0]), 403);
    let applied = store
        .apply(
            vec![put("pay-2", of_team(Some("search"), "moved"), any)],
            &Origin::default(),
            &as_caller("both", both, Role::Admin),
        )
        .await;
    assert_eq!(status(&applied.outcomes[0]), 200);
    assert_eq!(
        store.read("pay-2", &pay_admin).await.map_err(ApiError::from).unwrap_err().status,
        404,
        "moved out of sight"
    );

    // Operator commands: on the team's jobs only, a role too low within the team is 403.
    let pay_operator = team(Role::Operator, Role::Operator);
    let pay_viewer = team(Role::Viewer, Role::Operator);
    store.pause("pay-1", (None, None), &pay_operator).await?;
    assert_eq!(
        store.resume("search-1", &Origin::default(), &pay_operator).await.map_err(ApiError::from).unwrap_err().status,
        404
    );
    assert_eq!(store.pause("pay-1", (None, None), &pay_viewer).await.map_err(ApiError::from).unwrap_err().status, 403);
    let params = etcron_model::record::RunParams::default;
    let (_, _, run_team) = store.request_run("pay-1", "test", params(), &pay_operator).await?;
    assert_eq!(run_team.as_deref(), Some("pay"));
    assert_eq!(
        store.request_run("plain", "test", params(), &pay_operator).await.map_err(ApiError::from).unwrap_err().status,
        404
    );
    assert_eq!(
        store
            .kill("search-1", &KillTarget::All, "test", &pay_operator)
            .await
            .map_err(ApiError::from)
            .unwrap_err()
            .status,
        404
    );
    assert_eq!(
        store.kill("pay-1", &KillTarget::All, "test", &pay_viewer).await.map_err(ApiError::from).unwrap_err().status,
        403
    );
    let kills = etcd.get(keys.kill("search-1", &KillTarget::All), None).await?;
    assert_eq!(kills.count(), 0, "a refused kill writes nothing");
    Ok(())
}
