//! The design's example of the SDK form: several replicas of a service, exactly one of which
//! computes the "hot list" each tick, in steps, resuming from its last checkpoint when the
//! replica running it dies.
//!
//! Against `deploy/local/up.sh`'s cluster (etcd at 127.0.0.1:2379 and MongoDB as `up.sh`
//! exported them, the master at 127.0.0.1:8070), start it twice:
//!
//! ```sh
//! export ETCRON_ETCD_ENDPOINTS=127.0.0.1:2379 ETCRON_MONGODB_URI='mongodb://127.0.0.1:27017/?replicaSet=rs0'
//! cargo run -p etcron-sdk --example hot_list -- --worker-id app-1 --data-dir /tmp/app-1 &
//! cargo run -p etcron-sdk --example hot_list -- --worker-id app-2 --data-dir /tmp/app-2 &
//! ```
//!
//! Each replica declares the job `hot-list` (`HOT_LIST_SCHEDULE`, every minute by default) with
//! `ensure_jobs` at start, then runs the handler when it wins a tick: `HOT_LIST_STEPS` steps
//! (5) of `HOT_LIST_STEP_MS` (1000) each, a checkpoint after each, a line per step in
//! `HOT_LIST_LOG` (`/tmp/hot-list.log`). Kill the replica running it (`kill -9`): the other
//! resumes from the step after the last checkpoint. Other flags and `ETCRON_*` variables are
//! a worker's (docs/configuration.md).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use etcron_sdk::{Context, Executor, HandlerResult};
use serde_json::json;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// One tick's hot list: the steps after the checkpoint, each recorded once, then checkpointed.
async fn hot_list(ctx: Context, steps: u64, step: Duration, log: String) -> HandlerResult {
    let first = ctx.checkpoint().and_then(|c| c["next_step"].as_u64()).unwrap_or(0);
    if first > 0 {
        ctx.output(&format!("resuming at step {first} (from {})\n", ctx.execution_id()));
    }
    for n in first..steps {
        tokio::select! {
            () = tokio::time::sleep(step) => {}
            () = ctx.cancelled() => return Err(format!("cancelled at step {n}").into()),
        }
        // The step's effect, stamped with the fencing token (a store would refuse an older one's).
        let line =
            format!("{} step {n} token {} pid {}\n", ctx.execution_id(), ctx.fencing_token(), std::process::id());
        std::fs::OpenOptions::new().create(true).append(true).open(&log)?.write_all(line.as_bytes())?;
        ctx.save_checkpoint(json!({ "next_step": n + 1 })).await?;
        #[allow(clippy::cast_precision_loss)] // a handful of steps
        ctx.progress((n + 1) as f64 * 100.0 / steps as f64, &format!("step {n} of {steps} done")).await;
        ctx.output(&format!("step {n} done\n"));
    }
    Ok(json!({ "steps": steps, "resumed_at": first }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(env_or("RUST_LOG", "info")).init();
    let steps: u64 = env_or("HOT_LIST_STEPS", "5").parse()?;
    let step = Duration::from_millis(env_or("HOT_LIST_STEP_MS", "1000").parse()?);
    let log = env_or("HOT_LIST_LOG", "/tmp/hot-list.log");
    let master = env_or("ETCRON_SERVER", "http://127.0.0.1:8070");
    let token = std::env::var("ETCRON_TOKEN").ok();

    // Schedules as code: every replica declares the same jobs; they converge.
    let spec = json!({
        "schedule": env_or("HOT_LIST_SCHEDULE", "@every 1m"),
        // One run at a time; a failover rerun that finds the next tick running waits its turn.
        "concurrency": "queue",
        "on_worker_loss": "rerun",
        "task": {"kind": "handler", "name": "hot-list"},
    });
    let ensured = etcron_sdk::ensure_jobs(
        &master,
        token.as_deref(),
        "hot-list-app",
        BTreeMap::from([("hot-list".to_owned(), spec)]),
    )
    .await?;
    tracing::info!(?ensured, "jobs declared");

    let executor = Executor::from_args(std::env::args_os().skip(1))?
        .handler("hot-list", move |ctx| hot_list(ctx, steps, step, log.clone()));
    tracing::info!(id = executor.id(), "executor starting");
    executor.run(async { tokio::signal::ctrl_c().await.unwrap_or_default() }).await
}
