//! Progress and checkpoints end to end (real etcd, `mongod`, a master, real workers, tasks that
//! report with `curl` and with `::etcron` lines): the API, the stream and the record show what a
//! task reported; bad reports are refused naming the field; and a worker SIGKILLed in the middle
//! of a 100-step task is handed off: the failover rerun continues from the last checkpoint, each
//! step counted exactly once.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use etcron_model::keys::{ExecutionId, Keys};
use etcron_tests::sse::SseReader;
use etcron_tests::{urlencode, wait_for, Cluster, WorkerOpts};
use serde_json::{json, Value};

/// A POST of `body` (JSON text) to the task's progress URL; fails the task when refused.
fn post(body: &str) -> String {
    format!(
        "curl -sSf -X POST -H \"Authorization: Bearer $ETCRON_PROGRESS_TOKEN\" -H 'Content-Type: application/json' \
         -d \"{body}\" \"$ETCRON_PROGRESS_URL\""
    )
}

/// A cluster of two workers.
async fn two_workers(test: &str) -> Result<Cluster> {
    let mut c = Cluster::start(test, 0).await?;
    for i in 1..=2 {
        c.add_worker(WorkerOpts::new(&format!("w{i}")))?;
    }
    c.wait_workers(2).await?;
    Ok(c)
}

/// A task of `last` steps: step k adds k to a sum and checkpoints `{next: k, sum}` by POST
/// (durable when curl returns), then logs `k attempt worker` to `steps`; a resumed run starts
/// after its checkpoint's step. `at_step` runs before each step's checkpoint (may end the run).
fn steps_command(last: u32, pause: &str, at_step: &str, steps: &std::path::Path) -> String {
    format!(
        "next=0; sum=0; \
         if [ -n \"$ETCRON_CHECKPOINT\" ]; then \
           next=$(echo \"$ETCRON_CHECKPOINT\" | sed 's/.*\"next\":\\([0-9]*\\).*/\\1/'); \
           sum=$(echo \"$ETCRON_CHECKPOINT\" | sed 's/.*\"sum\":\\([0-9]*\\).*/\\1/'); \
           echo \"resuming after step $next from $ETCRON_RESUMED_FROM\"; fi; \
         k=$((next + 1)); \
         while [ $k -le {last} ]; do \
           sum=$((sum + k)); {pause} {at_step} \
           {post} || exit 3; \
           echo \"$k $ETCRON_ATTEMPT $ETCRON_WORKER_ID\" >> {steps}; k=$((k + 1)); \
         done; echo \"sum $sum\"",
        post = post(&format!(r#"{{\"percent\":$((k * 100 / {last})),\"checkpoint\":{{\"next\":$k,\"sum\":$sum}}}}"#)),
        steps = steps.display(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn reports_reach_the_api_the_stream_and_the_record_and_bad_ones_are_refused() -> Result<()> {
    let c = Cluster::start("progress-api", 1).await?;
    let (env, gate) = (c.path("env"), c.path("go"));
    // Reports by line and by POST; waits for the test between the two halves.
    let command = format!(
        "echo \"$ETCRON_PROGRESS_URL $ETCRON_PROGRESS_TOKEN\" > {env}; echo '::etcron progress 25 loading'; {half}; \
         while [ ! -e {gate} ]; do sleep 0.05; done; echo '::etcron progress 90 almost'; \
         echo '::etcron checkpoint {{\"offset\":900}}'; sleep 1",
        env = env.display(),
        gate = gate.display(),
        half = post(r#"{\"percent\":50,\"message\":\"half way\",\"checkpoint\":{\"offset\":100}}"#),
    );
    c.put_job("reporter", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})).await?;
    let id = c.run_now("reporter").await?;
    let path = format!("/api/executions/{}", urlencode(&id));
    // While it runs: the API answers its latest progress and checkpoint (the POST's).
    let shown = wait_for(Duration::from_secs(30), "the POSTed progress in the API", || async {
        let v = c.get(&path).await.ok()?;
        (v["status"] == "running" && v["progress"]["percent"] == 50.0).then_some(v)
    })
    .await?;
    assert_eq!(shown["progress"]["message"], "half way");
    assert_eq!(shown["checkpoint"], json!({"offset": 100}));
    // The checkpoint is in etcd, under the tick, naming the execution.
    let keys = Keys::new(&c.namespace)?;
    let exec: ExecutionId = id.parse().unwrap();
    let mut etcd = c.etcd.client().await?;
    let stored = etcd.get(keys.checkpoint(&exec), None).await?;
    let stored: Value = serde_json::from_slice(stored.kvs()[0].value())?;
    assert_eq!((stored["execution_id"].as_str(), &stored["value"]), (Some(id.as_str()), &json!({"offset": 100})));

    // Bad reports, with the task's own URL and token: named refusals, nothing changed.
    let text = std::fs::read_to_string(&env)?;
    let (url, token) = text.trim().split_once(' ').unwrap();
    let send = |body: String, token: String| {
        let http = c.http.clone();
        let url = url.to_owned();
        async move {
            let resp = http.post(url).bearer_auth(token).header("content-type", "application/json").body(body).send();
            let resp = resp.await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, wrong_token) = send(r#"{"percent": 60}"#.into(), "not-the-token".into()).await;
    assert_eq!(status, 401);
    for (body, field) in [
        (r#"{"percent": 150}"#.to_owned(), "percent"),
        (r#"{"percent": "x"}"#.to_owned(), "percent"),
        (r#"{"pct": 1}"#.to_owned(), "pct"),
        (format!(r#"{{"checkpoint": "{}"}}"#, "x".repeat(16 * 1024)), "checkpoint"),
    ] {
        let (status, answer) = send(body, token.to_owned()).await;
        assert_eq!((status, answer["error"]["field"].as_str()), (400, Some(field)), "{answer}");
    }
    let (status, _) = send(format!(r#"{{"checkpoint": "{}"}}"#, "x".repeat(21 * 1024)), token.to_owned()).await;
    assert_eq!(status, 413, "a body over the limit is not read");
    // An execution that does not run here answers as a wrong token does: nothing tells who runs
    // what.
    let resp = c.http.post(url.replace(&urlencode(&id), "reporter%40manual-x")).bearer_auth(token).body("{}").send();
    let resp = resp.await?;
    assert_eq!(resp.status(), 401, "no such execution running here");
    assert_eq!(resp.json::<Value>().await?, wrong_token, "the same answer as a wrong token");
    assert_eq!(c.get(&path).await?["progress"]["percent"], 50.0, "refused reports changed nothing");
    // Wrong tokens are limited per address (10 a minute), logged; a right token still passes,
    // and a message keeps plain text only (no escape sequences, no control characters).
    let guesser = reqwest::Client::builder().local_address("127.0.0.2".parse::<std::net::IpAddr>()?).build()?;
    let mut statuses = Vec::new();
    for i in 0..11 {
        let resp = guesser.post(url).bearer_auth(format!("{i:032x}")).body(r#"{"percent": 1}"#).send().await?;
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [[401; 10].as_slice(), &[429]].concat());
    let ansi = r#"{"message": "\u001b[31mred\u001b[0m\tdone\u0007\r\nnext"}"#;
    let resp = guesser.post(url).bearer_auth(token).body(ansi).send().await?;
    assert_eq!(resp.status(), 204, "a right token is never limited: {}", resp.text().await?);
    let shown = c.get(&path).await?;
    assert_eq!(shown["progress"]["message"], "[31mred[0m done  next", "{shown}");
    assert!(c.workers[0].proc.log_text().contains("progress report with a wrong token"), "the refusal is logged");

    // The stream carries the next reports (the lines), then the record keeps the last ones.
    // The gate opens only once the first event is read: the master may take its snapshot of the
    // latest after the stream's headers, and the task must not have moved on by then.
    let mut stream = SseReader::open(&c, &id).await;
    let first = loop {
        let ev = stream.next().await.expect("the stream starts with the latest progress");
        if ev.event == "progress" {
            break ev.data;
        }
    };
    std::fs::write(&gate, "")?;
    let mut seen = vec![first];
    let record = loop {
        let ev = stream.next().await.expect("the stream ends with the record");
        match ev.event.as_str() {
            "progress" => seen.push(ev.data),
            "status" => break ev.data,
            _ => {}
        }
    };
    assert_eq!(seen.first().unwrap()["progress"]["percent"], 50.0, "the first event carries the latest: {seen:?}");
    assert!(seen.iter().any(|p| p["progress"]["percent"] == 90.0 && p["progress"]["message"] == "almost"), "{seen:?}");
    assert!(seen.iter().any(|p| p["checkpoint"] == json!({"offset": 900})), "{seen:?}");
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["progress"]["percent"], 90.0);
    assert_eq!(record["checkpoint"], json!({"offset": 900}));
    assert!(record["output"].as_str().unwrap().contains("::etcron progress 90 almost"), "the output keeps the lines");
    // MongoDB has the same.
    let stored = c.wait_executions("job=reporter&status=succeeded", "the record", |l| l.len() == 1).await?;
    let from_db = c.get(&format!("/api/executions/{}", urlencode(stored[0]["id"].as_str().unwrap()))).await?;
    assert_eq!((&from_db["progress"]["message"], &from_db["checkpoint"]), (&json!("almost"), &json!({"offset": 900})));
    Ok(())
}

/// The worker running a 100-step task is SIGKILLed in the middle; the survivor's failover rerun
/// gets the last checkpoint and continues: every step is counted once (the sum is 5050), the
/// steps before the checkpoint ran on the first attempt and the rest on the second.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_whose_worker_dies_continues_from_its_last_checkpoint_on_another_worker() -> Result<()> {
    let mut c = two_workers("progress-handoff").await?;
    let steps = c.path("steps");
    let command = steps_command(100, "sleep 0.1;", "", &steps);
    c.put_job("long", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})).await?;
    let first = c.run_now("long").await?;
    // Kill the worker running it when it is well into the steps.
    let read_steps = || -> Vec<(u32, u32, String)> {
        std::fs::read_to_string(&steps)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut it = l.split(' ');
                Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?, it.next()?.to_owned()))
            })
            .collect()
    };
    let runner = wait_for(Duration::from_secs(60), "step 30", || async {
        read_steps().iter().find(|s| s.0 >= 30).map(|s| s.2.clone())
    })
    .await?;
    let idx = c.workers.iter().position(|w| w.opts.id == runner).unwrap();
    c.workers[idx].proc.kill9();
    let killed_at_step = read_steps().len();
    // The rerun finishes on the other worker.
    let done = c
        .wait_executions("job=long&status=succeeded", "the rerun to succeed", |l| l.len() == 1)
        .await
        .inspect_err(|_| c.dump_logs())?;
    // The list leaves checkpoints out: the record itself has them.
    let rerun = &c.get(&format!("/api/executions/{}", urlencode(done[0]["id"].as_str().unwrap()))).await?;
    assert!(done[0]["resumed_from"].get("checkpoint").is_none() && done[0].get("checkpoint").is_none(), "{}", done[0]);
    let trail = read_steps();
    let mut count: BTreeMap<u32, usize> = BTreeMap::new();
    for (k, _, _) in &trail {
        *count.entry(*k).or_default() += 1;
    }
    assert_eq!(count.keys().copied().collect::<Vec<_>>(), (1..=100).collect::<Vec<_>>(), "every step: {trail:?}");
    assert!(count.values().all(|n| *n == 1), "each step once: {count:?}");
    let resumed = &rerun["resumed_from"];
    let from_step = u32::try_from(resumed["checkpoint"]["next"].as_u64().unwrap())?;
    assert_eq!(resumed["execution_id"], first.as_str(), "{rerun}");
    assert!(
        usize::try_from(from_step)? >= killed_at_step && from_step < 100,
        "{from_step} after {killed_at_step} logged"
    );
    for (k, attempt, worker) in &trail {
        if *k <= from_step {
            assert_eq!((*attempt, worker.as_str()), (1, runner.as_str()), "step {k}");
        } else {
            assert_eq!(*attempt, 2, "step {k}");
            assert_ne!(worker, &runner, "step {k}");
        }
    }
    assert_eq!(rerun["trigger"], "failover");
    assert_eq!(rerun["checkpoint"], json!({"next": 100, "sum": 5050}));
    assert_eq!(rerun["progress"]["percent"], 100.0);
    let output = rerun["output"].as_str().unwrap();
    assert!(output.contains(&format!("resuming after step {from_step} from {first}")), "{output}");
    assert!(output.trim_end().ends_with("sum 5050"), "each step counted once: {output}");
    let lost = c.get(&format!("/api/executions/{}", urlencode(&first))).await?;
    assert_eq!(lost["status"], "lost", "{lost}");
    println!(
        "handoff: {first} on {runner} killed after step {killed_at_step} (checkpoint next={from_step}); {} on the other \
         worker resumed from it and ran steps {}..=100; sum 5050",
        rerun["id"],
        from_step + 1
    );
    Ok(())
}

/// A task asks to be moved (`rebalance` with its checkpoint) at step 20: its worker stops it
/// (the TERM may come before the POST's answer is read, so the step is logged before asking),
/// the other worker continues from the checkpoint, each step counted once.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_that_asks_to_be_moved_continues_on_the_other_worker() -> Result<()> {
    let c = two_workers("progress-rebalance").await?;
    let steps = c.path("steps");
    let moving = format!(
        "if [ $k -eq 20 ] && [ \"$ETCRON_ATTEMPT\" = 1 ]; then \
           echo \"$k $ETCRON_ATTEMPT $ETCRON_WORKER_ID\" >> {steps}; {post} || exit 3; sleep 30; exit 9; fi;",
        post = post(r#"{\"checkpoint\":{\"next\":$k,\"sum\":$sum},\"rebalance\":true}"#),
        steps = steps.display(),
    );
    let command = steps_command(40, "", &moving, &steps);
    c.put_job("movable", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})).await?;
    let first = c.run_now("movable").await?;
    let done = c
        .wait_executions("job=movable&status=succeeded", "the continuation to succeed", |l| l.len() == 1)
        .await
        .inspect_err(|_| c.dump_logs())?;
    let next = &c.get(&format!("/api/executions/{}", urlencode(done[0]["id"].as_str().unwrap()))).await?;
    let moved = c.get(&format!("/api/executions/{}", urlencode(&first))).await?;
    assert_eq!(moved["status"], "killed", "{moved}");
    assert!(moved["error"].as_str().unwrap().contains("asked to be moved (rebalance)"), "{moved}");
    assert!(moved["reason"].as_str().unwrap().contains("continues it on another worker"), "{moved}");
    assert_eq!(moved["checkpoint"], json!({"next": 20, "sum": 210}));
    assert_eq!(next["trigger"], "failover");
    assert_eq!(next["parent"], first.as_str());
    assert_ne!(next["worker_id"], moved["worker_id"], "continued on the other worker");
    assert_eq!(next["resumed_from"]["execution_id"], first.as_str());
    assert_eq!(next["resumed_from"]["checkpoint"], json!({"next": 20, "sum": 210}));
    assert!(next["output"].as_str().unwrap().trim_end().ends_with("sum 820"), "{next}");
    let trail = std::fs::read_to_string(&steps)?;
    let ks: Vec<u32> = trail.lines().map(|l| l.split(' ').next().unwrap().parse().unwrap()).collect();
    assert_eq!(ks, (1..=40).collect::<Vec<_>>(), "each step once, in order: {trail}");
    Ok(())
}

/// A task of 40 steps that logs `start|end k attempt worker ns` to `steps` and checkpoints `{next}`
/// by a POST whose failure does not stop it (`stored k …` once stored); it writes nothing to its output (no broken pipe can
/// end it): once its worker is gone, only its keeper can.
fn stubborn_command(steps: &std::path::Path) -> String {
    format!(
        "next=0; if [ -n \"$ETCRON_CHECKPOINT\" ]; then \
           next=$(echo \"$ETCRON_CHECKPOINT\" | sed 's/.*\"next\":\\([0-9]*\\).*/\\1/'); fi; \
         k=$((next + 1)); \
         while [ $k -le 40 ]; do \
           echo \"start $k $ETCRON_ATTEMPT $ETCRON_WORKER_ID $(date +%s%N)\" >> {steps}; sleep 0.25; \
           echo \"end $k $ETCRON_ATTEMPT $ETCRON_WORKER_ID $(date +%s%N)\" >> {steps}; \
           if {post} >/dev/null 2>&1; then echo \"stored $k $ETCRON_ATTEMPT $ETCRON_WORKER_ID $(date +%s%N)\" >> {steps}; fi; \
           k=$((k + 1)); \
         done",
        post = post(r#"{\"checkpoint\":{\"next\":$k}}"#),
        steps = steps.display(),
    )
}

/// `(kind, step, attempt, worker, ns)` of each line `stubborn_command` logged.
fn stubborn_lines(steps: &std::path::Path) -> Vec<(String, u32, u32, String, u128)> {
    std::fs::read_to_string(steps)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some((
                f.first()?.to_string(),
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                f.get(3)?.to_string(),
                f.get(4)?.parse().ok()?,
            ))
        })
        .collect()
}

/// Runs a stubborn job, does `to_runner` to the worker running it once step 8 ended, waits
/// until no process of the first attempt is left (within `gone_within`) and the failover rerun
/// succeeded; then every line of the first attempt precedes the rerun's, and only the step in
/// flight when the runner was lost (its checkpoint not stored) ended twice.
async fn runner_lost(
    c: &mut Cluster,
    job: &str,
    to_runner: fn(&mut etcron_tests::Proc) -> Result<()>,
    gone_within: Duration,
) -> Result<String> {
    let steps = c.path(&format!("{job}-steps"));
    c.put_job(job, json!({"schedule": "@yearly", "task": {"kind": "shell", "command": stubborn_command(&steps)}}))
        .await?;
    let first = c.run_now(job).await?;
    let runner = wait_for(Duration::from_secs(60), "step 8 ended", || async {
        stubborn_lines(&steps).iter().find(|l| l.0 == "end" && l.1 >= 8).map(|l| l.3.clone())
    })
    .await?;
    let idx = c.workers.iter().position(|w| w.opts.id == runner).unwrap();
    to_runner(&mut c.workers[idx].proc)?;
    let environ = format!("ETCRON_EXECUTION_ID={first}");
    wait_for(gone_within, "no process of the first attempt left", || async {
        let alive = std::fs::read_dir("/proc").ok()?.filter_map(|e| e.ok()).any(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == environ.as_bytes()))
        });
        (!alive).then_some(())
    })
    .await?;
    c.wait_executions(&format!("job={job}&status=succeeded"), "the rerun to succeed", |l| l.len() == 1)
        .await
        .inspect_err(|_| c.dump_logs())?;
    let trail = stubborn_lines(&steps);
    let rerun_first = trail.iter().filter(|l| l.2 == 2).map(|l| l.4).min().expect("the rerun's steps");
    let last_of_first = trail.iter().filter(|l| l.2 == 1).map(|l| l.4).max().unwrap();
    assert!(last_of_first < rerun_first, "the first attempt ran on beside its rerun: {trail:?}");
    let mut ends: BTreeMap<u32, usize> = BTreeMap::new();
    for l in trail.iter().filter(|l| l.0 == "end") {
        *ends.entry(l.1).or_default() += 1;
    }
    assert_eq!(ends.keys().copied().collect::<Vec<_>>(), (1..=40).collect::<Vec<_>>(), "every step: {trail:?}");
    // A step whose checkpoint the first attempt could not store is done again by the rerun
    // (after the first attempt ended): only the one step in flight when its worker was lost.
    let stored = trail.iter().filter(|l| l.0 == "stored" && l.2 == 1).map(|l| l.1).max().unwrap_or(0);
    let twice: Vec<u32> = ends.iter().filter(|(_, n)| **n > 1).map(|(k, _)| *k).collect();
    assert!(
        twice.is_empty() || twice == [stored + 1],
        "steps ended twice {twice:?} after checkpoint {stored}: {trail:?}"
    );
    Ok(runner)
}

/// Issue: a worker SIGKILLed while running a checkpointing task left the task running as an
/// orphan beside its failover rerun (steps ran twice, at once), under any supervision that does
/// not kill the worker's tree (a plain process manager, a worker started by hand). Now its
/// keeper ends the task as the worker dies; and a worker frozen (SIGSTOP) past its session
/// deadline has its task ended at that deadline, before the rerun starts elsewhere.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_or_frozen_workers_task_ends_before_its_failover_rerun_starts() -> Result<()> {
    let mut c = two_workers("progress-orphan").await?;
    let killed = runner_lost(
        &mut c,
        "killed",
        |p| {
            p.kill9();
            Ok(())
        },
        Duration::from_secs(3),
    )
    .await?;
    let idx = c.workers.iter().position(|w| w.opts.id == killed).unwrap();
    c.workers[idx].restart()?;
    c.wait_workers(2).await?;
    let stop = |p: &mut etcron_tests::Proc| p.signal(nix::sys::signal::Signal::SIGSTOP);
    let frozen = runner_lost(&mut c, "frozen", stop, Duration::from_secs(30)).await?;
    let idx = c.workers.iter().position(|w| w.opts.id == frozen).unwrap();
    c.workers[idx].proc.signal(nix::sys::signal::Signal::SIGCONT)?;
    Ok(())
}
