//! The fire path's phases in one process against a real etcd: two workers' contexts built by
//! `etcron_worker::node::Standalone`, no worker processes, no MongoDB. The race, the run and the
//! close are the product's own; only the loops around them (watches, scheduler, supervisor) are
//! left out, so a phase's outcome is read straight from etcd.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser as _;
use etcron_common::session::Session;
use etcron_model::record::Status;
use etcron_model::spec::JobSpec;
use etcron_model::stored::Claim;
use etcron_tests::etcd_cluster::EtcdCluster;
use etcron_tests::log_dir;
use etcron_worker::config::{Cli, Config};
use etcron_worker::fire::execution::run_fire;
use etcron_worker::node::Standalone;
use etcron_worker::timing::fire::Fire;

fn config(id: &str, dir: &Path, namespace: &str) -> Config {
    let cli = Cli::parse_from([
        "etcron-worker",
        "--worker-id",
        id,
        "--data-dir",
        &dir.display().to_string(),
        "--output-listen",
        "127.0.0.1:0",
    ]);
    let mut config = Config::resolve(cli).expect("a worker configuration");
    config.namespace = namespace.to_owned();
    config
}

/// Two workers' contexts on one etcd, each holding a session of its own.
async fn two_workers(test: &str) -> (EtcdCluster, Vec<(Standalone, Session)>, tempfile::TempDir) {
    let logs = log_dir(test);
    let etcd = EtcdCluster::start(&logs, 1).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Tasks of a worker running as root run under a team uid: they write into this dir.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mut workers = Vec::new();
    for id in ["w1", "w2"] {
        let client = etcd_client::Client::connect([etcd.endpoints()], None).await.unwrap();
        let data = dir.path().join(id);
        std::fs::create_dir_all(&data).unwrap();
        let worker = Standalone::build(&config(id, &data, &format!("/t-{test}")), client.clone()).await.unwrap();
        let session = Session::grant(&client, Duration::from_secs(10)).await.unwrap();
        worker.hold_session(&session);
        workers.push((worker, session));
    }
    (etcd, workers, dir)
}

async fn claim_of(worker: &Standalone, fire: &Fire) -> Claim {
    let mut kv = worker.ctx.client.kv_client();
    let key = worker.ctx.keys.claim(&fire.id);
    let resp = kv.get(key.clone(), None).await.unwrap();
    let value = resp.kvs().first().unwrap_or_else(|| panic!("no claim at {key}")).value();
    serde_json::from_slice(value).unwrap()
}

fn shell_spec(command: &str) -> Arc<JobSpec> {
    let json = serde_json::json!({"schedule": "@hourly", "task": {"kind": "shell", "command": command}});
    Arc::new(JobSpec::from_json(json.to_string().as_bytes()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contexts_race_for_one_tick_and_exactly_one_runs_and_closes_it() {
    let (_etcd, workers, dir) = two_workers("phases_race").await;
    let ran = dir.path().join("ran");
    let spec = shell_spec(&format!("echo \"$ETCRON_WORKER_ID\" >> {}", ran.display()));
    let fire = Fire::schedule_tick("nightly", (spec, 1), etcron_model::now_ms(), None);
    // Neither knows the other (no member list): both are first-ranked and race at once.
    tokio::join!(run_fire(workers[0].0.ctx.clone(), fire.clone()), run_fire(workers[1].0.ctx.clone(), fire.clone()));
    let lines = std::fs::read_to_string(&ran).unwrap();
    assert_eq!(lines.lines().count(), 1, "exactly one of the two ran the tick: {lines:?}");
    let claim = claim_of(&workers[0].0, &fire).await;
    assert_eq!(claim.status, Some(Status::Succeeded), "the winner closed the claim with its outcome");
    for (worker, _) in workers {
        worker.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_tick_is_recorded_through_its_claim_once_and_runs_nowhere() {
    let (_etcd, workers, dir) = two_workers("phases_skip").await;
    let ran = dir.path().join("ran");
    let spec = shell_spec(&format!("echo ran >> {}", ran.display()));
    let fire = Fire::schedule_tick("paused-job", (spec, 1), etcron_model::now_ms(), Some("paused by ops".to_owned()));
    tokio::join!(run_fire(workers[0].0.ctx.clone(), fire.clone()), run_fire(workers[1].0.ctx.clone(), fire.clone()));
    assert!(!ran.exists(), "a skipped tick runs nowhere");
    let claim = claim_of(&workers[1].0, &fire).await;
    assert_eq!(claim.status, Some(Status::Skipped), "one of the two recorded it skipped");
    for (worker, _) in workers {
        worker.stop().await;
    }
}
