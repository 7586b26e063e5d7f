//! `spawn --jobs N`: the floor under fire lateness on this machine. N shell tasks are started at
//! the same instant through the worker's own executor (`executor::run_shell`: blocking-pool
//! posix_spawn of `/bin/sh -c`, own process group, output pipe, the task environment), with no
//! etcd and no scheduler involved; prints when each process had been spawned, relative to that
//! instant. The e2e lateness above this floor is what the scheduler itself adds.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use etcron_model::spec::Limits;
use etcron_tests::{now_ms, quantile};
use etcron_worker::tasks::shell::{run_shell, Ending, ShellJob};
use tokio::sync::{oneshot, watch};

pub async fn run(n: usize, rounds: usize, file: &std::path::Path) -> Result<()> {
    let command = format!("echo \"$ETCRON_JOB $ETCRON_SCHEDULED_AT_MS\" >> {}", file.display());
    println!("spawn: {n} shell tasks started at the same instant through the worker's executor, {rounds} rounds");
    let (_stop_tx, stop) = watch::channel(None);
    for round in 1..=rounds {
        // Start on a whole second, like a tick.
        let at = (now_ms() / 1000 + 1) * 1000;
        tokio::time::sleep(Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0))).await;
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let mut env: BTreeMap<String, String> = [
                ("ETCRON_JOB".to_owned(), format!("spawn-{i}")),
                ("ETCRON_SCHEDULED_AT_MS".to_owned(), at.to_string()),
            ]
            .into();
            env.extend(etcron_worker::tasks::shell::inherited_env(&["PATH".to_owned()]));
            let job = ShellJob {
                command: command.clone(),
                env,
                cwd: None,
                run_as: None,
                worker_id: "bench".to_owned(),
                timeout: None,
                kill_grace: Duration::from_secs(1),
                output: std::sync::Arc::new(etcron_worker::tasks::live_output::LiveOutput::new(65_536)),
                limits: Limits::default(),
                network: etcron_worker::tasks::netns::ShellNetwork::Host,
                keeper_slot: 0,
            };
            let (pid_tx, _pid_rx) = oneshot::channel();
            tasks.push(tokio::spawn(run_shell(job, stop.clone(), pid_tx)));
        }
        let mut spawned = Vec::with_capacity(n);
        let mut failed = 0;
        for t in tasks {
            let finished = t.await?;
            match (finished.ending, finished.spawned_ms) {
                (Ending::Exited(0), Some(ms)) => spawned.push(ms - at),
                _ => failed += 1,
            }
        }
        spawned.sort_unstable();
        println!(
            "  round {round}: spawned after p50 {} ms  p90 {} ms  p99 {} ms  max {} ms; failed {failed}",
            quantile(&spawned, 0.5),
            quantile(&spawned, 0.9),
            quantile(&spawned, 0.99),
            spawned.last().copied().unwrap_or(0)
        );
    }
    Ok(())
}
