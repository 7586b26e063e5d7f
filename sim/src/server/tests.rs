//! Unit tests of the model etcd, through etcd-client as the worker talks to it, on tokio's
//! paused clock: MVCC reads at past revisions, compaction, txn nesting and limits, lease expiry,
//! watch lag and restart, the faults, and determinism.

use std::sync::atomic::{AtomicUsize, Ordering};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::time::{sleep, Duration, Instant};

use super::*;

fn code(e: &etcd_client::Error) -> (tonic::Code, String) {
    match e {
        etcd_client::Error::GRpcStatus(s) => (s.code(), s.message().to_string()),
        other => panic!("not a gRPC status: {other}"),
    }
}

async fn value_at(c: &mut Client, key: &str, rev: i64) -> Option<(Vec<u8>, i64, i64, i64)> {
    let r = c.get(key, Some(GetOptions::new().with_revision(rev))).await.unwrap();
    r.kvs().first().map(|kv| (kv.value().to_vec(), kv.create_revision(), kv.mod_revision(), kv.version()))
}

#[tokio::test(start_paused = true)]
async fn reads_at_past_revisions_see_the_keys_as_they_were() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    assert_eq!(etcd.revision(), 1);
    let r1 = c.put("a", "1", None).await.unwrap().header().unwrap().revision();
    let r2 = c.put("a", "2", None).await.unwrap().header().unwrap().revision();
    let r3 = c.delete("a", None).await.unwrap().header().unwrap().revision();
    let r4 = c.put("a", "3", None).await.unwrap().header().unwrap().revision();
    assert_eq!((r1, r2, r3, r4), (2, 3, 4, 5));
    assert_eq!(value_at(&mut c, "a", 1).await, None);
    assert_eq!(value_at(&mut c, "a", r1).await, Some((b"1".to_vec(), r1, r1, 1)));
    assert_eq!(value_at(&mut c, "a", r2).await, Some((b"2".to_vec(), r1, r2, 2)));
    assert_eq!(value_at(&mut c, "a", r3).await, None);
    // Created again: a new create revision, version 1.
    assert_eq!(value_at(&mut c, "a", r4).await, Some((b"3".to_vec(), r4, r4, 1)));
    let e = c.get("a", Some(GetOptions::new().with_revision(r4 + 1))).await.unwrap_err();
    assert_eq!(code(&e), (tonic::Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision".into()));
    // A delete of nothing takes no revision.
    assert_eq!(c.delete("nothing", None).await.unwrap().header().unwrap().revision(), r4);
    let kinds: Vec<_> = etcd.history().iter().map(|ch| (ch.kind, ch.revision)).collect();
    assert_eq!(kinds, [(ChangeKind::Put, 2), (ChangeKind::Put, 3), (ChangeKind::Delete, 4), (ChangeKind::Put, 5)]);
    assert_eq!(
        etcd.dump(b""),
        [KeyState {
            key: b"a".to_vec(),
            value: b"3".to_vec(),
            create_revision: 5,
            mod_revision: 5,
            version: 1,
            lease: 0
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn compaction_refuses_reads_and_watches_below_it() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    for i in 0..5 {
        c.put("k", format!("{i}"), None).await.unwrap();
    }
    etcd.compact(4);
    let e = c.get("k", Some(GetOptions::new().with_revision(3))).await.unwrap_err();
    assert_eq!(code(&e), (tonic::Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted".into()));
    assert_eq!(value_at(&mut c, "k", 4).await.unwrap().0, b"2");
    let e = c.compact(4, None).await.unwrap_err();
    assert_eq!(code(&e).0, tonic::Code::OutOfRange);
    let mut w = c.watch("k", Some(WatchOptions::new().with_start_revision(3))).await.unwrap();
    assert!(w.message().await.unwrap().unwrap().created());
    let m = w.message().await.unwrap().unwrap();
    assert!(m.canceled());
    assert_eq!(m.compact_revision(), 4);
    // The history keeps what compaction hid.
    assert_eq!(etcd.history().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn txns_nest_share_one_revision_and_keep_etcds_limits() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    c.put("a", "1", None).await.unwrap();
    // The nested compare sees the state before the txn: "n1" absent although the outer put it.
    let inner = Txn::new()
        .when([Compare::version("n1", CompareOp::Equal, 0)])
        .and_then([TxnOp::put("n2", "then", None)])
        .or_else([TxnOp::put("n3", "else", None)]);
    let txn = Txn::new().when([Compare::value("a", CompareOp::Equal, "1")]).and_then([
        TxnOp::put("n1", "x", None),
        TxnOp::txn(inner),
        TxnOp::get("n", Some(GetOptions::new().with_prefix())),
    ]);
    let resp = c.txn(txn).await.unwrap();
    assert!(resp.succeeded());
    let rev = resp.header().unwrap().revision();
    assert_eq!(rev, 3);
    let TxnOpResponse::Get(read) = &resp.op_responses()[2] else { panic!("a get") };
    let keys: Vec<_> = read.kvs().iter().map(|kv| (kv.key().to_vec(), kv.mod_revision())).collect();
    assert_eq!(keys, [(b"n1".to_vec(), rev), (b"n2".to_vec(), rev)]);
    assert!(etcd.history().iter().skip(1).all(|ch| ch.revision == rev));

    let ops = |n: usize, p: &str| (0..n).map(|i| TxnOp::put(format!("{p}{i}"), "v", None)).collect::<Vec<_>>();
    let e = c.txn(Txn::new().and_then(ops(129, "x"))).await.unwrap_err();
    assert_eq!(code(&e), (tonic::Code::InvalidArgument, "etcdserver: too many operations in txn request".into()));
    let mut outer = ops(9, "o");
    outer.push(TxnOp::txn(Txn::new().and_then(ops(119, "i"))));
    assert!(c.txn(Txn::new().and_then(outer)).await.is_err(), "a nested txn counts against its parent's budget");
    let mut outer = ops(9, "o");
    outer.push(TxnOp::txn(Txn::new().and_then(ops(118, "i"))));
    c.txn(Txn::new().and_then(outer)).await.unwrap();
    let e = c.txn(Txn::new().and_then([TxnOp::put("d", "1", None), TxnOp::delete("d", None)])).await.unwrap_err();
    assert_eq!(code(&e), (tonic::Code::InvalidArgument, "etcdserver: duplicate key given in txn request".into()));
    // A txn whose branch changes nothing takes no revision.
    let before = etcd.revision();
    let txn = Txn::new().when([Compare::version("a", CompareOp::Equal, 7)]).and_then([TxnOp::put("a", "2", None)]);
    assert_eq!(c.txn(txn).await.unwrap().header().unwrap().revision(), before);
    assert_eq!(etcd.revision(), before);
}

#[tokio::test(start_paused = true)]
async fn a_lease_expires_at_its_ttl_taking_its_keys_in_one_revision() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    let start = Instant::now();
    let id = c.lease_grant(5, None).await.unwrap().id();
    for k in ["l/b", "l/a"] {
        c.put(k, "v", Some(PutOptions::new().with_lease(id))).await.unwrap();
    }
    c.put("other", "v", None).await.unwrap();
    let mut w = c.watch("l/", Some(WatchOptions::new().with_prefix())).await.unwrap();
    assert!(w.message().await.unwrap().unwrap().created());

    // A keep-alive at 3 s pushes the expiry to 8 s.
    sleep(Duration::from_secs(3)).await;
    let (mut keeper, mut stream) = c.lease_keep_alive(id).await.unwrap();
    keeper.keep_alive().await.unwrap();
    assert_eq!(stream.message().await.unwrap().unwrap().ttl(), 5);
    let ttl = c.lease_time_to_live(id, None).await.unwrap();
    assert_eq!((ttl.ttl(), ttl.granted_ttl()), (5, 5));

    // No request needed: the timer expires it, and the watch sees both deletes in one response.
    let m = w.message().await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(8));
    let events: Vec<_> = m.events().iter().map(|e| (e.event_type(), e.kv().unwrap().key().to_vec())).collect();
    assert_eq!(events, [(EventType::Delete, b"l/a".to_vec()), (EventType::Delete, b"l/b".to_vec())]);
    let revs: Vec<_> = etcd.history().iter().rev().take(2).map(|ch| (ch.kind, ch.revision)).collect();
    assert_eq!(revs, [(ChangeKind::Delete, 5), (ChangeKind::Delete, 5)]);
    assert_eq!(etcd.revision(), 5);
    assert_eq!(c.lease_time_to_live(id, None).await.unwrap().ttl(), -1);
    // The keep-alive stream answers 0 for a lease that is gone.
    keeper.keep_alive().await.unwrap();
    assert_eq!(stream.message().await.unwrap().unwrap().ttl(), 0);
    let e = c.put("l/c", "v", Some(PutOptions::new().with_lease(id))).await.unwrap_err();
    assert_eq!(code(&e), (tonic::Code::NotFound, "etcdserver: requested lease not found".into()));

    // `expire` does the same at once.
    let id = c.lease_grant(60, None).await.unwrap().id();
    c.put("l/d", "v", Some(PutOptions::new().with_lease(id))).await.unwrap();
    etcd.expire(id);
    assert!(etcd.dump(b"l/").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_stalled_etcd_applies_nothing_until_the_stall_ends() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    let id = c.lease_grant(2, None).await.unwrap().id();
    c.put("s", "v", Some(PutOptions::new().with_lease(id))).await.unwrap();
    let start = Instant::now();
    etcd.stall_until(start + Duration::from_secs(10));
    sleep(Duration::from_secs(5)).await;
    // Past the TTL, but stalled: not expired yet.
    assert_eq!(etcd.dump(b"s").len(), 1);
    let resp = c.put("t", "v", None).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    // At the stall's end the lease expired before the put applied.
    assert!(etcd.dump(b"s").is_empty());
    assert_eq!(resp.header().unwrap().revision(), 4);
}

#[tokio::test(start_paused = true)]
async fn watches_lag_and_break_and_are_resumed_from_a_revision() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    let mut w = c.watch("w", Some(WatchOptions::new().with_prefix().with_prev_key())).await.unwrap();
    assert!(w.message().await.unwrap().unwrap().created());
    etcd.set_watch_lag(Duration::from_secs(2));
    let start = Instant::now();
    c.put("w/1", "a", None).await.unwrap();
    c.put("w/1", "b", None).await.unwrap();
    let m = w.message().await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(m.events()[0].kv().unwrap().value(), b"a");
    let m = w.message().await.unwrap().unwrap();
    assert_eq!(m.events()[0].prev_kv().unwrap().value(), b"a", "prev_kv");
    assert_eq!(m.header().unwrap().revision(), 3);
    etcd.set_watch_lag(Duration::ZERO);

    etcd.break_watches();
    let e = w.message().await.unwrap_err();
    assert_eq!(code(&e).0, tonic::Code::Unavailable);
    c.put("w/2", "c", None).await.unwrap();
    // Resumed from the next revision it had not seen: nothing lost.
    let mut w = c.watch("w", Some(WatchOptions::new().with_prefix().with_start_revision(4))).await.unwrap();
    assert!(w.message().await.unwrap().unwrap().created());
    let m = w.message().await.unwrap().unwrap();
    assert_eq!(m.events()[0].kv().unwrap().key(), b"w/2");
}

#[tokio::test(start_paused = true)]
async fn faults_fail_before_lose_the_answer_after_or_delay() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    let next = std::sync::Arc::new(std::sync::Mutex::new(Fault::None));
    let hook = next.clone();
    etcd.set_faults(move |call, _| match call {
        Call::Put | Call::Txn { writes: true, .. } | Call::LeaseKeepAlive => *hook.lock().unwrap(),
        _ => Fault::None,
    });
    let set = |f| *next.lock().unwrap() = f;

    set(Fault::LoseAnswer);
    let e = c.put("lost", "v", None).await.unwrap_err();
    assert_eq!(code(&e).0, tonic::Code::Unavailable);
    assert_eq!(etcd.dump(b"lost").len(), 1, "the write applied although its answer was lost");

    set(Fault::FailBefore);
    let txn = Txn::new().and_then([TxnOp::put("failed", "v", None)]);
    let e = c.txn(txn).await.unwrap_err();
    assert_eq!(code(&e).0, tonic::Code::Unavailable);
    assert!(etcd.dump(b"failed").is_empty(), "nothing applied");

    set(Fault::Delay(Duration::from_millis(700)));
    let start = Instant::now();
    c.put("late", "v", None).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(700));

    set(Fault::ApplyLate(Duration::from_millis(300)));
    let txn = Txn::new().and_then([TxnOp::put("given-up", "v", None)]);
    let e = c.txn(txn).await.unwrap_err();
    assert_eq!(code(&e).0, tonic::Code::Unavailable);
    set(Fault::None);
    assert!(etcd.dump(b"given-up").is_empty(), "not applied when its caller was answered");
    tokio::time::sleep(Duration::from_millis(299)).await;
    assert!(etcd.dump(b"given-up").is_empty(), "not applied before its delay");
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(etcd.dump(b"given-up").len(), 1, "applied after its caller gave up on it");

    let id = c.lease_grant(10, None).await.unwrap().id();
    let (mut keeper, mut stream) = c.lease_keep_alive(id).await.unwrap();
    set(Fault::FailBefore);
    keeper.keep_alive().await.unwrap();
    assert_eq!(code(&stream.message().await.unwrap_err()).0, tonic::Code::Unavailable);
}

/// One seeded run: concurrent clients writing, leases, lost answers and delays chosen by a
/// seeded generator; its history and every answer.
fn seeded_run(seed: u64) -> (Vec<Change>, Vec<String>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    rt.block_on(async move {
        let etcd = ModelEtcd::new();
        let calls = std::sync::Arc::new(AtomicUsize::new(0));
        let n = calls.clone();
        etcd.set_faults(move |_, _| {
            let i = n.fetch_add(1, Ordering::Relaxed) as u64;
            let r = seed.wrapping_add(i).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 59;
            match r {
                0..=2 => Fault::LoseAnswer,
                3..=5 => Fault::FailBefore,
                6..=15 => Fault::Delay(Duration::from_millis(r * 37)),
                _ => Fault::None,
            }
        });
        let mut tasks = Vec::new();
        for worker in 0..3 {
            let mut c = etcd.client().await;
            tasks.push(tokio::spawn(async move {
                let mut log = Vec::new();
                let lease = c.lease_grant(3, None).await.map(|r| r.id()).unwrap_or(0);
                for i in 0..20 {
                    let key = format!("k/{}", i % 4);
                    let txn = Txn::new()
                        .when([Compare::version(key.clone(), CompareOp::Less, 3)])
                        .and_then([TxnOp::put(
                            key.clone(),
                            format!("{worker}-{i}"),
                            Some(PutOptions::new().with_lease(lease)),
                        )])
                        .or_else([TxnOp::delete(key, None)]);
                    let r = c.txn(txn).await;
                    log.push(format!(
                        "{worker}/{i}: {:?}",
                        r.map(|r| (r.succeeded(), r.header().map(|h| h.revision())))
                    ));
                    sleep(Duration::from_millis(250 * (worker + 1))).await;
                }
                log
            }));
        }
        let mut log = Vec::new();
        for t in tasks {
            log.extend(t.await.unwrap());
        }
        (etcd.history(), log)
    })
}

#[test]
fn the_same_seed_gives_the_same_history() {
    let a = seeded_run(7);
    let b = seeded_run(7);
    assert!(a.0.len() > 20, "the run wrote {} changes", a.0.len());
    assert!(a.0.iter().any(|ch| ch.kind == ChangeKind::Delete), "leases expired or txns deleted");
    assert_eq!(a, b);
    assert_ne!(a.0, seeded_run(8).0, "another seed, another history");
}

#[test]
fn leases_still_expire_on_their_own_when_the_first_clients_runtime_ended() {
    let paused = || tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let etcd = ModelEtcd::new();
    paused().block_on(async {
        etcd.client().await.put("before", "v", None).await.unwrap();
    });
    paused().block_on(async {
        let mut c = etcd.client().await;
        let start = Instant::now();
        let id = c.lease_grant(2, None).await.unwrap().id();
        c.put("l", "v", Some(PutOptions::new().with_lease(id))).await.unwrap();
        let mut w = c.watch("l", None).await.unwrap();
        assert!(w.message().await.unwrap().unwrap().created());
        let m = w.message().await.unwrap().unwrap();
        assert_eq!(m.events()[0].event_type(), EventType::Delete);
        assert_eq!(start.elapsed(), Duration::from_secs(2), "expired by the timer, at its TTL");
    });
}

#[tokio::test(start_paused = true)]
async fn a_quiet_watch_that_asked_for_progress_gets_it_every_ten_minutes() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    let start = Instant::now();
    let mut w = c.watch("p", Some(WatchOptions::new().with_progress_notify())).await.unwrap();
    assert!(w.message().await.unwrap().unwrap().created());
    c.put("other", "v", None).await.unwrap();
    let m = w.message().await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(600));
    assert!(m.events().is_empty());
    assert_eq!(m.header().unwrap().revision(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_client_is_cut_off_until_the_partition_ends_and_its_lease_expires() {
    let etcd = ModelEtcd::new();
    let (mut cut, mut other) = (etcd.client_as(1).await, etcd.client_as(2).await);
    let start = Instant::now();
    let id = cut.lease_grant(5, None).await.unwrap().id();
    cut.put("w/1", "v", Some(PutOptions::new().with_lease(id))).await.unwrap();
    let mut w = cut.watch("x", None).await.unwrap();
    assert!(w.message().await.unwrap().unwrap().created());

    etcd.partition(1, start + Duration::from_secs(8));
    // Its watch stream ends; its requests hang until the partition ends, then fail unapplied.
    assert!(w.message().await.is_err());
    let e = cut.put("x", "from the cut-off client", None).await.unwrap_err();
    assert_eq!(code(&e).0, tonic::Code::Unavailable);
    assert_eq!(start.elapsed(), Duration::from_secs(8));
    assert!(etcd.dump(b"x").is_empty());
    // The others went on; its lease expired on its TTL meanwhile (no keep-alive got through).
    other.put("y", "v", None).await.unwrap();
    assert!(etcd.dump(b"w/").is_empty());
    // After the partition it is served again.
    cut.put("x", "v", None).await.unwrap();
    assert_eq!(etcd.dump(b"x").len(), 1);
}
