//! Unit tests of the model etcd, through etcd-client as the worker talks to it.

use super::*;

#[tokio::test(start_paused = true)]
async fn smoke() {
    let etcd = ModelEtcd::new();
    let mut c = etcd.client().await;
    c.put("a", "1", None).await.unwrap();
    let r = c.get("a", None).await.unwrap();
    assert_eq!(r.kvs()[0].value(), b"1");
    let mut s = c.watch("a", None).await.unwrap();
    let m = s.message().await.unwrap().unwrap();
    assert!(m.created());
    c.put("a", "2", None).await.unwrap();
    let m = s.message().await.unwrap().unwrap();
    assert_eq!(m.events()[0].kv().unwrap().value(), b"2");
}
