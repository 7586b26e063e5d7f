//! Clock skew: workers whose wall clocks run 2 s ahead and 2 s behind (libfaketime) share the
//! ticks with a true one without running any twice or missing any. The claim key is the tick,
//! not a time window, so a skewed clock changes when a worker races, never how many win.

use std::path::Path;

use etcron_tests::{check_every_second, faketime_env, now_ms, read_fired, wait_tick, Cluster, WorkerOpts};
use serde_json::json;

/// Like `record_command`, but the last field is the real time (without libfaketime).
fn record_real_time(file: &Path) -> String {
    format!(
        "echo \"$ETCRON_JOB $ETCRON_SCHEDULED_AT_MS $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN \
         $(env -u LD_PRELOAD -u FAKETIME date +%s%3N)\" >> {}",
        file.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_two_seconds_ahead_and_behind_neither_double_nor_miss_a_tick() -> anyhow::Result<()> {
    let mut c = Cluster::start("skew", 0).await?;
    for (id, skew) in [("ahead", Some("+2s")), ("behind", Some("-2s")), ("true", None)] {
        let mut opts = WorkerOpts::new(id);
        if let Some(spec) = skew {
            opts.env = faketime_env(spec)?;
        }
        c.add_worker(opts)?;
    }
    c.wait_workers(3).await?;
    let file = c.path("fired.log");
    let jobs: Vec<String> = (0..10).map(|i| format!("skew-{i}")).collect();
    for job in &jobs {
        c.put_job(
            job,
            json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_real_time(&file)}}),
        )
        .await?;
    }
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    let from = now_ms();
    wait_tick(&file, &jobs, from + 20_000).await?;
    let to = now_ms() - 1000;
    let fired = read_fired(&file);
    let report = check_every_second(&fired, &jobs, from, to);
    if !report.duplicates.is_empty() || !report.missing.is_empty() {
        c.dump_logs();
    }
    assert!(report.duplicates.is_empty(), "duplicates: {:?}", report.duplicates);
    assert!(report.missing.is_empty(), "missing: {:?}", report.missing);
    // The skew is real: the worker ahead starts ticks before they are due by the true clock, which
    // no worker does by its own clock. How much before depends on how fast the machine spawns a
    // shell, so only the sign is asserted.
    let early: Vec<i64> = fired
        .iter()
        .filter(|f| f.worker == "ahead" && f.scheduled_ms > from)
        .filter_map(|f| Some(f.extra.first()?.parse::<i64>().ok()? - f.scheduled_ms))
        .collect();
    assert!(!early.is_empty(), "the worker ahead ran ticks");
    assert!(early.iter().any(|d| *d < 0), "it never ran one before it was due by the true clock: {early:?}");
    Ok(())
}
