//! Resource pools and priority on real workers: a pool is never over its slots (judged from the
//! tasks' own start and end stamps), its queue lets the higher priority go first, every tick
//! runs or is recorded, and a SIGKILLed worker leaves no slot held.

use std::collections::BTreeMap;
use std::time::Duration;

use etcron_tests::{now_ms, wait_for, Cluster};
use serde_json::json;

/// 200 jobs due at one instant in a pool of 5, each run 1 s, half of them priority 90 and
/// half priority 10, on 3 workers; a worker is SIGKILLed mid-way.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_of_five_runs_two_hundred_ticks_never_more_than_five_at_once() -> anyhow::Result<()> {
    let mut c = Cluster::start("pools-two-hundred", 3).await?;
    let (status, body) = c.call(reqwest::Method::PUT, "/api/pools/db", Some(json!({"slots": 5}))).await?;
    assert!(status == 200 || status == 201, "{status} {body}");
    let stamps = c.path("stamps.log");
    let at_ms = (now_ms() + 20_000) / 1000 * 1000;
    let at = chrono::DateTime::from_timestamp_millis(at_ms).unwrap().format("%Y-%m-%dT%H:%M:%SZ");
    // The task's own stamps: its start, then its end (also when TERMed by its keeper).
    let command = format!(
        "f={f}; echo \"S $ETCRON_JOB $ETCRON_ATTEMPT $(date +%s%3N)\" >> $f; \
         trap 'echo \"E $ETCRON_JOB $ETCRON_ATTEMPT $(date +%s%3N)\" >> $f; exit 143' TERM; \
         sleep 1 & wait; echo \"E $ETCRON_JOB $ETCRON_ATTEMPT $(date +%s%3N)\" >> $f",
        f = stamps.display()
    );
    let changes: Vec<_> = (0..200)
        .map(|i| {
            let priority = if i % 2 == 0 { 90 } else { 10 };
            json!({"job": format!("p{priority}-{i:03}"), "op": "put", "spec": {
                "schedule": format!("@at {at}"), "pool": "db", "priority": priority, "start_deadline": "150s",
                "task": {"kind": "shell", "command": command}}})
        })
        .collect();
    let (status, body) = c.call(reqwest::Method::POST, "/api/batch", Some(json!({"changes": changes}))).await?;
    assert_eq!(status, 200, "{body}");
    // Mid-way, the worker holding a slot now is killed.
    wait_for(Duration::from_secs(60), "20 runs ended", || async { (ends(&stamps).len() >= 20).then_some(()) }).await?;
    let view = c.get("/api/pools/db").await?;
    let victim = view["holders"][0]["worker_id"].as_str().unwrap_or("w1").to_owned();
    let index = c.workers.iter().position(|w| w.proc.name.ends_with(&victim)).unwrap_or(0);
    c.workers[index].proc.kill9();
    // Its tasks' keepers see it gone and SIGKILL them at once (no end stamp): they count as
    // running for a second more; their slots stay held until its session expires (3 s).
    let killed_until = now_ms() + 1_000;
    // Once its session is gone, it comes back: its journal delivers the records of the runs it
    // finished before the kill.
    c.wait_workers(2).await?;
    c.workers[index].restart()?;
    // Every job ends succeeded (a run lost with the worker is rerun and waits in the pool).
    let done = wait_for(Duration::from_secs(240), "all 200 jobs succeeded", || async {
        let v = c.get("/api/executions?status=succeeded&limit=500").await.ok()?;
        let jobs: std::collections::BTreeSet<String> =
            v["executions"].as_array()?.iter().filter_map(|e| e["job"].as_str().map(str::to_owned)).collect();
        (jobs.len() == 200).then_some(())
    })
    .await;
    if done.is_err() {
        c.dump_logs();
    }
    done?;
    let most = most_at_once(&std::fs::read_to_string(&stamps)?, killed_until);
    assert!(most <= 5, "{most} runs of the pool at one instant");
    assert!(most >= 4, "the pool was used ({most} at most at once)");
    // Starts by priority: the p99 start of the high ones well before the low ones'.
    let starts = first_starts(&std::fs::read_to_string(&stamps)?);
    let p99 = |prefix: &str| {
        let mut v: Vec<i64> = starts.iter().filter(|(j, _)| j.starts_with(prefix)).map(|(_, t)| *t).collect();
        v.sort_unstable();
        v[(v.len() * 99 / 100).min(v.len() - 1)]
    };
    let (high, low) = (p99("p90-"), p99("p10-"));
    assert!(high + 5_000 < low, "high priority p99 start {high} is not 5 s before low's {low}");
    // The starvation bound: the pool frees 5 slots a second and no higher priority keeps coming,
    // so every low-priority tick starts within its start deadline (150 s), none is missed.
    let last_low = starts.iter().filter(|(j, _)| j.starts_with("p10-")).map(|(_, t)| *t).max().unwrap_or(i64::MAX);
    assert!(last_low - at_ms < 150_000, "a low-priority tick started {} ms after its time", last_low - at_ms);
    println!(
        "pool of 5: start p99 high {} ms, low {} ms after the tick; the last low {} ms",
        high - at_ms,
        low - at_ms,
        last_low - at_ms
    );
    // No slot stays held, nothing waits.
    let view = wait_for(Duration::from_secs(30), "the pool empty", || async {
        let v = c.get("/api/pools/db").await.ok()?;
        (v["in_use"] == 0 && v["waiting"].as_array()?.is_empty()).then_some(v)
    })
    .await?;
    assert_eq!(view["slots"], 5);
    Ok(())
}

/// `(job, attempt, ms)` of every end stamp.
fn ends(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("E "))
        .map(str::to_owned)
        .collect()
}

/// The most runs between their start and end stamps at one instant (a run without an end
/// stamp — killed with its worker — counts until `open_until`).
fn most_at_once(text: &str, open_until: i64) -> usize {
    let mut events: Vec<(i64, i32)> = Vec::new();
    let mut open: BTreeMap<(String, String), i64> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(kind), Some(job), Some(attempt), Some(ms)) = (f.first(), f.get(1), f.get(2), f.get(3)) else {
            continue;
        };
        let ms: i64 = ms.parse().unwrap_or(0);
        let run = ((*job).to_owned(), (*attempt).to_owned());
        match *kind {
            "S" => {
                open.insert(run, ms);
                events.push((ms, 1));
            }
            "E" if open.remove(&run).is_some() => events.push((ms, -1)),
            _ => {}
        }
    }
    events.extend(open.values().map(|&start| (open_until.max(start + 1), -1)));
    // Ends before starts at the same millisecond: a slot handed on is not two runs at once.
    events.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Each job's first start stamp.
fn first_starts(text: &str) -> BTreeMap<String, i64> {
    let mut starts = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("S ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(job), Some(ms)) = (f.get(1), f.get(3).and_then(|m| m.parse::<i64>().ok())) {
            starts.entry((*job).to_owned()).or_insert(ms);
        }
    }
    starts
}

#[test]
fn overlapping_runs_are_counted_from_their_stamps() {
    let text = "S a 1 100\nS b 1 150\nE a 1 200\nS c 1 200\nS d 1 250\nE b 1 300\nE c 1 300\n";
    // a [100,200) b [150,300) c [200,300) d [250, 1000): at most 3 at once (b, c, d).
    assert_eq!(most_at_once(text, 1_000), 3);
    assert_eq!(most_at_once(&format!("{text}S e 1 400\nS f 1 500\n"), 1_000), 3, "d, e, f after 300");
    assert_eq!(first_starts(text)["c"], 200);
}
