//! The model etcd (`etcron_sim::server`) against a real etcd: the same scripted sequence of
//! ~60 operations (puts with and without leases, reads at past revisions, prefix ranges with
//! limit, count_only, keys_only, filters and sorts, txns with every compare kind taking each
//! branch, nested txns, the op limit, duplicate keys, deletes, lease grant/keep-alive/
//! time-to-live/list/revoke, a watch from a past revision with prev_kv, compaction and the
//! reads and watches below it, the errors of each) runs through `etcd_client::Client` against
//! both; the answers, normalised (revisions relative to the script's start, lease ids by order
//! of appearance, remaining TTLs to "fresh"), must be equal op by op. The real etcd is the
//! `etcd` binary on PATH (Debian's etcd-server 3.4 in CI), on loopback ports picked here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::proto::{
    PbEvent, PbKeyValue, PbRangeResponse, PbResponseHeader, PbTxnOpResponse, PbTxnResponse, PbWatchResponse,
};
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, Error, GetOptions, LeaseGrantOptions, LeaseTimeToLiveOptions,
    PutOptions, SortOrder, SortTarget, Txn, TxnOp, WatchOptions,
};
use etcron_sim::server::ModelEtcd;

/// A real etcd on loopback, killed on drop.
struct RealEtcd {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    l.local_addr().expect("its address").port()
}

/// Starts `etcd` on fresh loopback ports, again on new ones if it cannot take them.
async fn start_etcd() -> RealEtcd {
    let found = Command::new("etcd").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "the conformance test needs the real `etcd` binary on PATH (Debian: apt-get install etcd-server)"
    );
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("a data dir");
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "conformance", "--data-dir"])
            .arg(dir.path())
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("conformance={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        let mut etcd = RealEtcd { child, url, _dir: dir };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < deadline {
            if etcd.child.try_wait().ok().flatten().is_some() {
                break; // a port was taken: again on new ones
            }
            if let Ok(mut c) = Client::connect([&etcd.url], None).await {
                if c.get("probe", None).await.is_ok() {
                    return etcd;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = etcd.child.kill();
    }
    panic!("etcd did not start on loopback in 5 tries");
}

/// Makes two servers' answers comparable: revisions relative to the script's start, lease
/// ids by order of appearance, the member's ids and term dropped.
struct Norm {
    base: i64,
    leases: Vec<i64>,
}

impl Norm {
    fn rev(&self, r: i64) -> i64 {
        if r == 0 {
            0
        } else {
            r - self.base
        }
    }
    fn lease(&mut self, id: i64) -> i64 {
        if id == 0 {
            return 0;
        }
        let i = self.leases.iter().position(|l| *l == id).unwrap_or_else(|| {
            self.leases.push(id);
            self.leases.len() - 1
        });
        1000 + i64::try_from(i).unwrap()
    }
    fn header(&self, h: &mut Option<PbResponseHeader>) {
        if let Some(h) = h {
            *h = PbResponseHeader { revision: self.rev(h.revision), ..PbResponseHeader::default() };
        }
    }
    fn kv(&mut self, kv: &mut PbKeyValue) {
        kv.create_revision = self.rev(kv.create_revision);
        kv.mod_revision = self.rev(kv.mod_revision);
        kv.lease = self.lease(kv.lease);
    }
    fn range(&mut self, r: &mut PbRangeResponse) {
        self.header(&mut r.header);
        r.kvs.iter_mut().for_each(|kv| self.kv(kv));
    }
    fn txn(&mut self, t: &mut PbTxnResponse) {
        self.header(&mut t.header);
        for op in &mut t.responses {
            match &mut op.response {
                Some(PbTxnOpResponse::ResponseRange(r)) => self.range(r),
                Some(PbTxnOpResponse::ResponsePut(p)) => {
                    self.header(&mut p.header);
                    if let Some(kv) = &mut p.prev_kv {
                        self.kv(kv);
                    }
                }
                Some(PbTxnOpResponse::ResponseDeleteRange(d)) => {
                    self.header(&mut d.header);
                    d.prev_kvs.iter_mut().for_each(|kv| self.kv(kv));
                }
                Some(PbTxnOpResponse::ResponseTxn(t)) => self.txn(t),
                None => {}
            }
        }
    }
    fn event(&mut self, e: &mut PbEvent) {
        if let Some(kv) = &mut e.kv {
            self.kv(kv);
        }
        if let Some(kv) = &mut e.prev_kv {
            self.kv(kv);
        }
    }
    fn watch(&mut self, w: &mut PbWatchResponse) {
        self.header(&mut w.header);
        w.compact_revision = self.rev(w.compact_revision);
        w.events.iter_mut().for_each(|e| self.event(e));
    }
}

fn err(e: &Error) -> String {
    match e {
        Error::GRpcStatus(s) => format!("ERR {:?}: {}", s.code(), s.message()),
        other => format!("ERR {other}"),
    }
}

/// The answers of one server to the script, one line per operation.
struct Record {
    norm: Norm,
    lines: Vec<String>,
}

impl Record {
    fn line(&mut self, label: &str, s: String) {
        self.lines.push(format!("{label}: {s}"));
    }
    fn get(&mut self, label: &str, r: Result<etcd_client::GetResponse, Error>) -> Option<PbRangeResponse> {
        match r {
            Ok(r) => {
                let mut pb = r.0;
                let raw = pb.clone();
                self.norm.range(&mut pb);
                self.line(label, format!("{pb:?}"));
                Some(raw)
            }
            Err(e) => {
                self.line(label, err(&e));
                None
            }
        }
    }
    /// Records a put; its raw revision.
    fn put(&mut self, label: &str, r: Result<etcd_client::PutResponse, Error>) -> i64 {
        match r {
            Ok(r) => {
                let mut pb = r.0;
                let rev = pb.header.as_ref().map_or(0, |h| h.revision);
                self.norm.header(&mut pb.header);
                if let Some(kv) = &mut pb.prev_kv {
                    self.norm.kv(kv);
                }
                self.line(label, format!("{pb:?}"));
                rev
            }
            Err(e) => {
                self.line(label, err(&e));
                0
            }
        }
    }
    fn delete(&mut self, label: &str, r: Result<etcd_client::DeleteResponse, Error>) {
        match r {
            Ok(r) => {
                let mut pb = r.0;
                self.norm.header(&mut pb.header);
                pb.prev_kvs.iter_mut().for_each(|kv| self.norm.kv(kv));
                self.line(label, format!("{pb:?}"));
            }
            Err(e) => self.line(label, err(&e)),
        }
    }
    fn txn(&mut self, label: &str, r: Result<etcd_client::TxnResponse, Error>) {
        match r {
            Ok(r) => {
                let mut pb = r.0;
                self.norm.txn(&mut pb);
                self.line(label, format!("{pb:?}"));
            }
            Err(e) => self.line(label, err(&e)),
        }
    }
    fn result<T: std::fmt::Debug>(&mut self, label: &str, r: Result<T, Error>) {
        match r {
            Ok(v) => self.line(label, format!("{v:?}")),
            Err(e) => self.line(label, err(&e)),
        }
    }
}

fn put_op(k: &str, v: &str) -> TxnOp {
    TxnOp::put(k, v, None)
}

/// The script. Values read from one answer (revisions, lease ids) feed later requests, so
/// each server is driven by its own answers.
async fn script(c: &mut Client) -> Vec<String> {
    let start = c.get("k/", Some(GetOptions::new().with_prefix())).await.expect("a first read");
    let base = start.header().expect("a header").revision();
    let mut rec = Record { norm: Norm { base, leases: Vec::new() }, lines: Vec::new() };
    let prefix = || Some(GetOptions::new().with_prefix());

    // Puts, leases, reads at past revisions.
    let r1 = rec.put("put k/a", c.put("k/a", "1", None).await);
    rec.put("put k/b", c.put("k/b", "2", None).await);
    rec.put("put k/c prev_kv (none)", c.put("k/c", "3", Some(PutOptions::new().with_prev_key())).await);
    rec.put("put k/a again prev_kv", c.put("k/a", "10", Some(PutOptions::new().with_prev_key())).await);
    let grant = c.lease_grant(60, None).await.expect("a lease");
    let l1 = grant.id();
    let mut pb = grant.0.clone();
    pb.id = rec.norm.lease(pb.id);
    rec.norm.header(&mut pb.header);
    rec.line("grant 60", format!("{pb:?}"));
    rec.put("put k/l1 leased", c.put("k/l1", "x", Some(PutOptions::new().with_lease(l1))).await);
    rec.put("put k/l2 leased", c.put("k/l2", "y", Some(PutOptions::new().with_lease(l1))).await);
    rec.put("put unknown lease", c.put("k/z", "z", Some(PutOptions::new().with_lease(0x1234_5678))).await);
    rec.put("put empty key", c.put("", "z", None).await);
    rec.get("get k/a at its first revision", c.get("k/a", Some(GetOptions::new().with_revision(r1))).await);
    rec.get("get k/ at the first put", c.get("k/", Some(GetOptions::new().with_prefix().with_revision(r1))).await);
    rec.get("get k/ prefix", c.get("k/", prefix()).await);
    rec.get("get k/ limit 2", c.get("k/", Some(GetOptions::new().with_prefix().with_limit(2))).await);
    rec.get("get k/ count_only", c.get("k/", Some(GetOptions::new().with_prefix().with_count_only())).await);
    rec.get("get k/ keys_only", c.get("k/", Some(GetOptions::new().with_prefix().with_keys_only())).await);
    rec.get("get from k/b", c.get("k/b", Some(GetOptions::new().with_from_key())).await);
    rec.get("get [k/a, k/c)", c.get("k/a", Some(GetOptions::new().with_range("k/c"))).await);
    rec.get("get empty range", c.get("k/c", Some(GetOptions::new().with_range("k/a"))).await);
    for (label, target, order) in [
        ("sort mod desc", SortTarget::Mod, SortOrder::Descend),
        ("sort create asc", SortTarget::Create, SortOrder::Ascend),
        ("sort key desc", SortTarget::Key, SortOrder::Descend),
        ("sort version desc", SortTarget::Version, SortOrder::Descend),
        ("sort value asc", SortTarget::Value, SortOrder::Ascend),
        ("sort create none", SortTarget::Create, SortOrder::None),
    ] {
        let opts = GetOptions::new().with_prefix().with_sort(target, order).with_limit(3);
        rec.get(label, c.get("k/", Some(opts)).await);
    }
    let opts = GetOptions::new().with_prefix().with_min_mod_revision(r1 + 2).with_max_create_revision(r1 + 4);
    rec.get("get mod/create filters", c.get("k/", Some(opts)).await);
    rec.get("get future revision", c.get("k/a", Some(GetOptions::new().with_revision(base + 1000))).await);

    // Txns: each compare kind, both branches, nested, limits, duplicates.
    let txn = Txn::new()
        .when([Compare::version("k/a", CompareOp::Equal, 2)])
        .and_then([put_op("k/t1", "s"), TxnOp::get("k/t1", None), TxnOp::get("k/a", None)])
        .or_else([put_op("k/t2", "f")]);
    rec.txn("txn version equal (success)", c.txn(txn).await);
    let txn = Txn::new()
        .when([Compare::create_revision("k/b", CompareOp::Equal, r1)])
        .and_then([put_op("k/t2", "s")])
        .or_else([TxnOp::get("k/b", None), TxnOp::delete("k/c", Some(DeleteOptions::new().with_prev_key()))]);
    rec.txn("txn create equal (failure)", c.txn(txn).await);
    let txn = Txn::new()
        .when([
            Compare::mod_revision("k/a", CompareOp::Greater, r1),
            Compare::value("k/b", CompareOp::Equal, "2"),
            Compare::lease("k/l1", CompareOp::Equal, l1),
            Compare::create_revision("k/a", CompareOp::Less, r1 + 1),
        ])
        .and_then([TxnOp::get("k/", prefix())]);
    rec.txn("txn mod/value/lease/create (success, read only)", c.txn(txn).await);
    let txn = Txn::new()
        .when([Compare::lease("k/l1", CompareOp::NotEqual, l1), Compare::mod_revision("k/b", CompareOp::Equal, r1)])
        .and_then([TxnOp::get("k/l1", None)])
        .or_else([TxnOp::get("k/l2", Some(GetOptions::new().with_revision(r1 + 1)))]);
    rec.txn("txn lease not equal, mod equal (failure)", c.txn(txn).await);
    let txn = Txn::new()
        .when([Compare::value("k/missing", CompareOp::NotEqual, "x")])
        .and_then([put_op("k/t3", "s")])
        .or_else([put_op("k/t3", "f")]);
    rec.txn("txn value on a missing key (failure)", c.txn(txn).await);
    let txn = Txn::new()
        .when([
            Compare::version("k/missing", CompareOp::Equal, 0),
            Compare::create_revision("k/missing", CompareOp::Equal, 0),
            Compare::mod_revision("k/missing", CompareOp::Less, 1),
            Compare::lease("k/missing", CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::delete("k/nothing", None)]);
    rec.txn("txn zeros of a missing key; deletes nothing", c.txn(txn).await);
    let txn = Txn::new()
        .when([Compare::version("k/", CompareOp::Greater, 0).with_prefix()])
        .and_then([TxnOp::get("k/a", None)])
        .or_else([TxnOp::get("k/b", None)]);
    rec.txn("txn compare over a range with a missing value", c.txn(txn).await);
    let txn = Txn::new()
        .when([Compare::value("k/", CompareOp::Greater, "0").with_prefix()])
        .and_then([TxnOp::get("k/a", None)])
        .or_else([TxnOp::get("k/b", None)]);
    rec.txn("txn value compare over a range", c.txn(txn).await);
    let inner = Txn::new()
        .when([Compare::version("k/n1", CompareOp::Equal, 0)])
        .and_then([put_op("k/n2", "then"), TxnOp::get("k/n", prefix())])
        .or_else([put_op("k/n3", "else")]);
    let txn = Txn::new().when([Compare::version("k/a", CompareOp::Greater, 0)]).and_then([
        put_op("k/n1", "outer"),
        TxnOp::txn(inner),
        TxnOp::get("k/n", prefix()),
    ]);
    rec.txn("nested txn: compares see the state before the txn", c.txn(txn).await);
    let inner = Txn::new()
        .when([Compare::version("k/n1", CompareOp::Equal, 0)])
        .and_then([put_op("k/n4", "then")])
        .or_else([put_op("k/n4", "else")]);
    let txn = Txn::new().and_then([TxnOp::txn(inner)]);
    rec.txn("nested txn: the same key in both branches", c.txn(txn).await);
    let ops: Vec<TxnOp> = (0..129).map(|i| put_op(&format!("k/many/{i:03}"), "v")).collect();
    rec.txn("txn of 129 ops", c.txn(Txn::new().and_then(ops)).await);
    let ops: Vec<TxnOp> = (0..128).map(|i| put_op(&format!("k/max/{i:03}"), "v")).collect();
    rec.txn("txn of 128 ops", c.txn(Txn::new().and_then(ops)).await);
    let inner: Vec<TxnOp> = (0..100).map(|i| put_op(&format!("k/in/{i:03}"), "v")).collect();
    let mut outer: Vec<TxnOp> = (0..100).map(|i| put_op(&format!("k/out/{i:03}"), "v")).collect();
    outer.push(TxnOp::txn(Txn::new().and_then(inner)));
    rec.txn("txn of 101 ops, one a txn of 100", c.txn(Txn::new().and_then(outer)).await);
    for (label, n) in [("txn of 10 ops, one a txn of 118", 118), ("txn of 10 ops, one a txn of 119", 119)] {
        let inner: Vec<TxnOp> = (0..n).map(|i| put_op(&format!("k/nest/{n}/{i:03}"), "v")).collect();
        let mut outer: Vec<TxnOp> = (0..9).map(|i| put_op(&format!("k/top/{n}/{i:03}"), "v")).collect();
        outer.push(TxnOp::txn(Txn::new().and_then(inner)));
        rec.txn(label, c.txn(Txn::new().and_then(outer)).await);
    }
    let compares: Vec<Compare> = (0..129).map(|_| Compare::version("k/a", CompareOp::Greater, 0)).collect();
    rec.txn("txn of 129 compares", c.txn(Txn::new().when(compares)).await);
    rec.txn("txn put twice", c.txn(Txn::new().and_then([put_op("k/d", "1"), put_op("k/d", "2")])).await);
    let txn = Txn::new().and_then([put_op("k/d", "1"), TxnOp::delete("k/d", None)]);
    rec.txn("txn put and delete", c.txn(txn).await);
    let txn = Txn::new().and_then([TxnOp::delete("k/", Some(DeleteOptions::new().with_prefix())), put_op("k/d", "1")]);
    rec.txn("txn delete a prefix and put in it", c.txn(txn).await);
    let txn = Txn::new().and_then([TxnOp::delete("k/d", None), TxnOp::delete("k/d", None)]);
    rec.txn("txn delete twice", c.txn(txn).await);
    let txn = Txn::new().and_then([put_op("k/d", "1"), TxnOp::txn(Txn::new().and_then([put_op("k/d", "2")]))]);
    rec.txn("txn put and a nested put", c.txn(txn).await);
    let txn = Txn::new().and_then([TxnOp::put("k/e", "1", Some(PutOptions::new().with_lease(0x1234_5678)))]);
    rec.txn("txn put with an unknown lease", c.txn(txn).await);
    let txn = Txn::new().and_then([TxnOp::get("k/a", Some(GetOptions::new().with_revision(base + 1000)))]);
    rec.txn("txn read at a future revision", c.txn(txn).await);
    let txn = Txn::new().and_then([
        TxnOp::delete("k/t1", Some(DeleteOptions::new().with_prev_key())),
        TxnOp::get("k/t", prefix()),
        put_op("k/t4", "v"),
        TxnOp::get("k/t", prefix()),
    ]);
    rec.txn("txn ops see earlier ops", c.txn(txn).await);

    // Put flags.
    let o = PutOptions::new().with_ignore_value();
    rec.put("put ignore_value on a missing key", c.put("k/missing", "", Some(o)).await);
    let o = PutOptions::new().with_ignore_value().with_prev_key();
    rec.put("put ignore_value", c.put("k/l1", "", Some(o)).await);
    rec.put("put ignore_value with a value", c.put("k/l1", "v", Some(PutOptions::new().with_ignore_value())).await);
    rec.put("put ignore_lease", c.put("k/l2", "y2", Some(PutOptions::new().with_ignore_lease())).await);
    rec.get("get k/l", c.get("k/l", prefix()).await);

    // Deletes.
    rec.delete("delete k/b prev_kv", c.delete("k/b", Some(DeleteOptions::new().with_prev_key())).await);
    rec.delete("delete a missing key", c.delete("k/b", None).await);
    rec.delete("delete k/t prefix", c.delete("k/t", Some(DeleteOptions::new().with_prefix())).await);
    rec.delete("delete k/many prefix", c.delete("k/m", Some(DeleteOptions::new().with_prefix())).await);

    // Leases.
    let ttl = c.lease_time_to_live(l1, Some(LeaseTimeToLiveOptions::new().with_keys())).await;
    match ttl {
        Ok(r) => {
            let mut pb = r.0;
            rec.norm.header(&mut pb.header);
            pb.id = rec.norm.lease(pb.id);
            let fresh = pb.granted_ttl - pb.ttl <= 2;
            pb.ttl = 0;
            pb.keys.sort();
            rec.line("time to live", format!("fresh {fresh} {pb:?}"));
        }
        Err(e) => rec.line("time to live", err(&e)),
    }
    let own = c.lease_grant(1, Some(LeaseGrantOptions::new().with_id(4242))).await;
    rec.result("grant ttl 1 with an id", own.map(|r| (r.ttl(), r.id() == 4242)));
    let again = c.lease_grant(30, Some(LeaseGrantOptions::new().with_id(4242))).await;
    rec.result("grant an id in use", again.map(|r| r.id()));
    rec.result("grant a too large ttl", c.lease_grant(9_000_000_001, None).await.map(|r| r.id()));
    let leases = c.leases().await.map(|r| {
        let mut ids: Vec<i64> = r.leases().iter().map(|l| rec.norm.lease(l.id())).collect();
        ids.sort_unstable();
        ids
    });
    rec.result("leases", leases);
    match c.lease_keep_alive(4242).await {
        Ok((mut keeper, mut stream)) => {
            let sent = keeper.keep_alive().await;
            let next = stream.message().await.map(|m| m.map(|m| (m.id(), m.ttl())));
            rec.result("keep-alive", sent.and(next));
        }
        Err(e) => rec.line("keep-alive", err(&e)),
    }
    rec.result("keep-alive an unknown lease", c.lease_keep_alive(0x1234_5678).await.map(|_| ()));
    rec.result("revoke 4242", c.lease_revoke(4242).await.map(|r| r.header().map(|h| rec.norm.rev(h.revision()))));
    let revoked = c.lease_revoke(l1).await.map(|r| r.header().map(|h| rec.norm.rev(h.revision())));
    rec.result("revoke the first lease", revoked);
    rec.get("its keys are gone", c.get("k/l", prefix()).await);
    rec.result("revoke it again", c.lease_revoke(l1).await.map(|_| ()));
    let gone = c.lease_time_to_live(l1, None).await.map(|r| (r.ttl(), r.granted_ttl()));
    rec.result("time to live of a revoked lease", gone);

    // A watch from the first put, with prev_kv: every event since, in order.
    let now = c.get("k/a", None).await.expect("a read").header().expect("a header").revision();
    let opts = WatchOptions::new().with_prefix().with_start_revision(r1).with_prev_key();
    let mut watch = c.watch("k/", Some(opts)).await.expect("a watch");
    let mut seen = 0;
    while seen < now {
        let msg = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
        let Ok(Ok(Some(resp))) = msg else {
            rec.line("watch", format!("ended early: {msg:?}"));
            break;
        };
        let mut pb = resp.0;
        seen = seen.max(pb.events.last().and_then(|e| e.kv.as_ref()).map_or(0, |kv| kv.mod_revision));
        if pb.created {
            seen = seen.max(r1 - 1);
        }
        rec.norm.watch(&mut pb);
        pb.header = None; // etcd batches a catching-up watch on its own timing
        let events = std::mem::take(&mut pb.events);
        rec.line("watch response", format!("{pb:?}"));
        for e in events {
            rec.line("watch event", format!("{e:?}"));
        }
    }
    drop(watch);

    // Compaction.
    let at = r1 + 3;
    rec.result("compact", c.compact(at, None).await.map(|r| r.header().map(|h| rec.norm.rev(h.revision()))));
    rec.get("get below the compaction", c.get("k/a", Some(GetOptions::new().with_revision(at - 1))).await);
    rec.get("get at the compaction", c.get("k/a", Some(GetOptions::new().with_revision(at))).await);
    rec.result("compact again at it", c.compact(at, None).await.map(|_| ()));
    rec.result("compact in the future", c.compact(base + 1000, None).await.map(|_| ()));
    let txn = Txn::new().and_then([TxnOp::get("k/a", Some(GetOptions::new().with_revision(at - 1)))]);
    rec.txn("txn read below the compaction", c.txn(txn).await);
    let opts = WatchOptions::new().with_prefix().with_start_revision(at - 1);
    let mut watch = c.watch("k/", Some(opts)).await.expect("a watch");
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
        let Ok(Ok(Some(resp))) = msg else {
            rec.line("watch below the compaction", format!("ended: {msg:?}"));
            break;
        };
        let mut pb = resp.0;
        rec.norm.watch(&mut pb);
        rec.line("watch below the compaction", format!("{pb:?}"));
    }
    rec.lines
}

#[tokio::test]
async fn the_model_answers_as_a_real_etcd_does() {
    let real = start_etcd().await;
    let mut client = Client::connect([&real.url], None).await.expect("a client of the real etcd");
    let want = script(&mut client).await;
    drop(real);

    let model = ModelEtcd::new();
    let got = script(&mut model.client().await).await;

    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w, g, "op {i} differs (left: real etcd, right: the model)");
    }
    assert_eq!(want.len(), got.len(), "the runs differ in length:\nreal: {want:#?}\nmodel: {got:#?}");
    assert!(want.len() > 60, "the script ran {} ops", want.len());
}
