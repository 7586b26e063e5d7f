//! Every query shape `GET /api/executions` can build, explained by a real mongod: each reads
//! the index chosen for it in order (no blocking sort) and examines a number of documents set
//! by the limit, not by the size of the collection.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use etcron_common::store::{search_plan, Cursor, MongoStore, RecordWrite, Search, SCAN_BUDGET};
use etcron_model::record::{Status, TriggerKind};
use etcron_tests::records::{record_of, BASE_MS};
use etcron_tests::{log_dir, Mongo};
use mongodb::bson::{Bson, Document};

/// Jobs in the test data (few, so that each job's history is far longer than a page).
const JOBS: i64 = 10;
/// Records loaded first; the same number again before the second round.
const RECORDS: u64 = 25_000;
const LIMIT: i64 = 50;

async fn load(store: &MongoStore, from: u64, to: u64) -> Result<()> {
    let all: Vec<RecordWrite> = (from..to).map(|i| record_of(i, JOBS)).collect();
    for chunk in all.chunks(1_000) {
        store.write(chunk).await?;
    }
    Ok(())
}

/// Every combination of the filters: job, status (none, one, several), trigger, worker, time
/// (none, an hour, since only), words (none, one, two), and teams (none, one, two: a caller
/// with team roles only; without words), each with a first page and a page after a cursor
/// (added by the caller).
fn shapes(span_ms: i64) -> Vec<(String, Search)> {
    let mut out = Vec::new();
    let statuses: [(&str, Vec<Status>); 3] = [
        ("", vec![]),
        ("status=failed ", vec![Status::Failed]),
        ("status=failed,timed_out,lost ", vec![Status::Failed, Status::TimedOut, Status::Lost]),
    ];
    let hour_start = BASE_MS + span_ms / 3;
    let times: [(&str, Option<i64>, Option<i64>); 3] =
        [("", None, None), ("1h ", Some(hour_start), Some(hour_start + 3_600_000)), ("since ", Some(hour_start), None)];
    let words: [(&str, Option<&str>); 3] = [("", None), ("q ", Some("disk_full")), ("q2 ", Some("disk_full backup"))];
    for job in [None, Some("job-003")] {
        for (sn, st) in &statuses {
            for trigger in [None, Some(TriggerKind::Retry)] {
                for worker in [None, Some("w4")] {
                    for (tn, since_ms, until_ms) in &times {
                        for (qn, q) in &words {
                            for teams in [None, Some(vec!["team-1"]), Some(vec!["team-0", "team-2"])] {
                                if q.is_some() && teams.is_some() {
                                    continue;
                                }
                                let name = format!(
                                    "{}{sn}{}{}{tn}{qn}{}",
                                    job.map_or(String::new(), |j| format!("job={j} ")),
                                    trigger.map_or(String::new(), |t| format!("trigger={} ", t.as_str())),
                                    worker.map_or(String::new(), |w| format!("worker={w} ")),
                                    teams.as_ref().map_or(String::new(), |t| format!("teams={} ", t.join(","))),
                                );
                                let s = Search {
                                    job: job.map(str::to_owned),
                                    statuses: st.clone(),
                                    trigger,
                                    worker: worker.map(str::to_owned),
                                    since_ms: *since_ms,
                                    until_ms: *until_ms,
                                    q: q.map(str::to_owned),
                                    teams: teams.map(|t| t.into_iter().map(str::to_owned).collect()),
                                    limit: LIMIT,
                                    cursor: None,
                                };
                                out.push((name, s));
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Calls `visit` on every stage of a plan, the plan itself first.
fn walk(plan: &Document, visit: &mut impl FnMut(&Document)) {
    visit(plan);
    for (key, value) in plan {
        match value {
            Bson::Document(d) if key == "inputStage" => walk(d, visit),
            Bson::Array(a) if key == "inputStages" => {
                for d in a.iter().filter_map(Bson::as_document) {
                    walk(d, visit);
                }
            }
            _ => {}
        }
    }
}

fn count(stats: &Document, key: &str) -> i64 {
    match stats.get(key) {
        Some(Bson::Int32(v)) => i64::from(*v),
        Some(Bson::Int64(v)) => *v,
        _ => -1,
    }
}

/// What the query of a search examined.
#[derive(Debug)]
struct Examined {
    keys: i64,
    docs: i64,
}

/// Explains the query of a search: it reads the plan's index, with no blocking sort.
async fn examine(store: &MongoStore, name: &str, s: &Search) -> Result<Examined> {
    let expected = search_plan(s).index;
    let explain = store.explain_search(s).await?;
    let planner = explain.get_document("queryPlanner").context("queryPlanner")?;
    let plan = planner.get_document("winningPlan").context("winningPlan")?;
    let plan = plan.get_document("queryPlan").unwrap_or(plan);
    let (mut names, mut indexes) = (Vec::new(), Vec::new());
    walk(plan, &mut |stage| {
        let name = stage.get_str("stage").unwrap_or("?");
        if name == "IXSCAN" {
            indexes.push(stage.get_str("indexName").unwrap_or("?").to_owned());
        }
        names.push(name.to_owned());
    });
    ensure!(!names.iter().any(|n| n == "SORT"), "{name}: a blocking sort: {names:?}");
    ensure!(
        !indexes.is_empty() && indexes.iter().all(|i| i == expected),
        "{name}: reads {indexes:?}, not {expected} (stages {names:?})"
    );
    let stats = explain.get_document("executionStats").context("executionStats")?;
    Ok(Examined { keys: count(stats, "totalKeysExamined"), docs: count(stats, "totalDocsExamined") })
}

/// The teams a search lists (at least 1).
fn plan_teams(s: &Search) -> i64 {
    s.teams.as_ref().map_or(1, |t| i64::try_from(t.len().max(1)).unwrap_or(1))
}

/// Checks what a search examined against its bounds: `limit` + 1 documents when the index
/// holds every filter, else at most `SCAN_BUDGET`. `ties`: entries at the cursor's instant that
/// an earlier page returned (fetched, then dropped by the cursor's check of ids).
fn check_bounds(name: &str, s: &Search, records: &Examined, ties: i64) -> Result<()> {
    // One ordered range per (status, trigger) pair may each read one entry past its end; the
    // team index has such ranges per team.
    let plan = search_plan(s);
    let ranges = if plan.index == "exec_team" { 56 * plan_teams(s) } else { 48 };
    let read = if search_plan(s).exact() { LIMIT + 1 } else { SCAN_BUDGET };
    ensure!(records.docs >= 0 && records.keys >= 0, "{name}: explain gave no execution counts: {records:?}");
    ensure!(records.docs <= read + ties, "{name}: {} documents examined, more than {read}", records.docs);
    ensure!(records.keys <= read + ties + ranges, "{name}: {} keys examined for {read} documents", records.keys);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_search_reads_one_index_in_order_and_examines_what_the_limit_needs() -> Result<()> {
    let mongo = Mongo::start(&log_dir("search-plans")).await?;
    let store = mongo.store(&etcron_tests::db_name("search_plans")).await?;
    store.ensure_indexes(Duration::from_secs(86_400 * 3650)).await?;
    // Twice: the bounds are the same whatever the size of the collection.
    for (round, records) in [RECORDS, 2 * RECORDS].into_iter().enumerate() {
        load(&store, records - RECORDS, records).await?;
        let span_ms = i64::try_from(records)? / JOBS * 1000;
        let mut shapes_checked = 0;
        for (name, mut s) in shapes(span_ms) {
            let name = format!("round {round}: {name}");
            check_bounds(&name, &s, &examine(&store, &name, &s).await?, 0)?;
            // The next page, after a cursor: the same index, read from the cursor on.
            let page = store.search(&s).await?;
            if let Some(c) = page.next_cursor {
                s.cursor = Some(Cursor::decode(&c)?);
                let name = format!("{name}, page 2");
                // Page 1 may have returned one entry per job at the cursor's instant.
                check_bounds(&name, &s, &examine(&store, &name, &s).await?, JOBS)?;
            }
            shapes_checked += 1;
        }
        ensure!(shapes_checked == 360, "{shapes_checked} shapes");
    }
    Ok(())
}

/// Pages of a search with residual filters end at the scan budget (`partial`), and following
/// their cursors yields every match exactly once, newest first.
#[tokio::test(flavor = "multi_thread")]
async fn partial_pages_of_a_budgeted_search_add_up_to_every_match() -> Result<()> {
    let mongo = Mongo::start(&log_dir("search-partial")).await?;
    let store = mongo.store(&etcron_tests::db_name("search_partial")).await?;
    store.ensure_indexes(Duration::from_secs(86_400 * 3650)).await?;
    // Each job's and worker's range is twice the budget.
    load(&store, 0, 4 * RECORDS).await?;
    let executions = store.database().collection::<Document>("executions");
    // (name, search, whether some page must end at the budget: a match in 200 or 2 000 does;
    // a match in 10 fills its pages first).
    for (name, s, budgeted) in [
        ("q", Search { q: Some("disk_full".into()), limit: LIMIT, ..Search::default() }, true),
        (
            "q + worker",
            Search { q: Some("disk_full".into()), worker: Some("w4".into()), limit: LIMIT, ..Search::default() },
            true,
        ),
        (
            "job + worker",
            Search { job: Some("job-003".into()), worker: Some("w4".into()), limit: LIMIT, ..Search::default() },
            false,
        ),
        (
            // job-003 is in team-0: the team, checked on the records read, matches every one.
            "job + its team",
            Search {
                job: Some("job-003".into()),
                teams: Some(vec!["team-0".into()]),
                limit: LIMIT,
                ..Search::default()
            },
            false,
        ),
        (
            "worker + a team",
            Search { worker: Some("w4".into()), teams: Some(vec!["team-1".into()]), limit: LIMIT, ..Search::default() },
            false,
        ),
    ] {
        let expected = executions.count_documents(search_plan(&s).filter()).await?;
        let (mut got, mut partial_pages, mut last) = (Vec::new(), 0, None::<(i64, String)>);
        let mut page_search = s.clone();
        loop {
            let page = store.search(&page_search).await?;
            partial_pages += usize::from(page.partial);
            for r in &page.executions {
                let key = (r.scheduled_ms, r.id.to_string());
                ensure!(last.as_ref().is_none_or(|l| *l > key), "{name}: {key:?} out of order after {last:?}");
                last = Some(key);
                got.push(r.id.to_string());
            }
            match page.next_cursor {
                Some(c) => page_search.cursor = Some(Cursor::decode(&c)?),
                None => break,
            }
        }
        let distinct: std::collections::HashSet<&String> = got.iter().collect();
        ensure!(distinct.len() == got.len(), "{name}: a record came twice");
        ensure!(
            got.len() as u64 == expected && expected > 0,
            "{name}: {} records through the pages, {expected} match",
            got.len()
        );
        ensure!(!budgeted || partial_pages > 0, "{name}: no page ended at the scan budget");
    }
    Ok(())
}
