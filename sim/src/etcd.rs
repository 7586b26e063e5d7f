//! An in-memory model of the etcd the fire path uses: one revision counter, keys with their
//! create and mod revisions, leases that expire on the simulated clock and take their keys with
//! them, and transactions of compares and puts/deletes applied atomically. What the model leaves
//! out: watches (the world delivers what a watch would, after a lag), compaction, ranges.

use std::collections::BTreeMap;

use crate::value::Value;

pub type LeaseId = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub value: Value,
    pub create_rev: i64,
    pub mod_rev: i64,
    pub lease: Option<LeaseId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key does not exist (`create_revision == 0`).
    Absent(String),
    /// The key's mod revision is this.
    ModRev(String, i64),
    /// The key exists with this value.
    Is(String, Value),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put { key: String, value: Value, lease: Option<LeaseId> },
    Delete(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub when: Vec<Compare>,
    pub then: Vec<Op>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub expires_at: u64,
    pub ttl: u64,
}

#[derive(Debug, Default)]
pub struct Etcd {
    pub revision: i64,
    pub kvs: BTreeMap<String, Kv>,
    pub leases: BTreeMap<LeaseId, Lease>,
    next_lease: LeaseId,
    /// Keys deleted with an expired lease, with the revision of the delete: what a watch of
    /// registrations reports as departures.
    pub expired: Vec<(LeaseId, i64)>,
}

impl Etcd {
    pub fn grant(&mut self, now: u64, ttl: u64) -> LeaseId {
        self.next_lease += 1;
        self.leases.insert(self.next_lease, Lease { expires_at: now + ttl, ttl });
        self.next_lease
    }

    /// Renews `lease`; false when it is gone.
    pub fn keep_alive(&mut self, lease: LeaseId, now: u64) -> bool {
        match self.leases.get_mut(&lease) {
            Some(l) => {
                l.expires_at = now + l.ttl;
                true
            }
            None => false,
        }
    }

    /// Expires the leases due by `now`, deleting their keys (one revision for each lease).
    pub fn expire(&mut self, now: u64) {
        let due: Vec<LeaseId> = self.leases.iter().filter(|(_, l)| l.expires_at <= now).map(|(id, _)| *id).collect();
        for id in due {
            self.leases.remove(&id);
            self.revision += 1;
            self.kvs.retain(|_, kv| kv.lease != Some(id));
            self.expired.push((id, self.revision));
        }
    }

    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Kv> {
        self.kvs.get(key)
    }

    fn holds(&self, c: &Compare) -> bool {
        match c {
            Compare::Absent(k) => !self.kvs.contains_key(k),
            Compare::ModRev(k, rev) => self.kvs.get(k).is_some_and(|kv| kv.mod_rev == *rev),
            Compare::Is(k, v) => self.kvs.get(k).is_some_and(|kv| kv.value == *v),
        }
    }

    /// Applies `txn` if every compare holds: whether it did, and the revision it wrote at.
    pub fn txn(&mut self, txn: &Txn) -> (bool, i64) {
        if !txn.when.iter().all(|c| self.holds(c)) {
            return (false, self.revision);
        }
        // etcd refuses a put on a lease it does not have ("requested lease not found").
        let missing_lease =
            txn.then.iter().any(|op| matches!(op, Op::Put { lease: Some(l), .. } if !self.leases.contains_key(l)));
        if missing_lease {
            return (false, self.revision);
        }
        if txn.then.is_empty() {
            return (true, self.revision);
        }
        self.revision += 1;
        let rev = self.revision;
        for op in &txn.then {
            match op {
                Op::Put { key, value, lease } => {
                    let lease = *lease;
                    let create_rev = self.kvs.get(key).map_or(rev, |kv| kv.create_rev);
                    self.kvs.insert(key.clone(), Kv { value: value.clone(), create_rev, mod_rev: rev, lease });
                }
                Op::Delete(key) => {
                    self.kvs.remove(key);
                }
            }
        }
        (true, rev)
    }

    /// Every key under `prefix`, in order.
    pub fn range<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a String, &'a Kv)> + 'a {
        self.kvs.range(prefix.to_owned()..).take_while(move |(k, _)| k.starts_with(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_only_put_wins_once_and_leases_take_their_keys() {
        let mut e = Etcd::default();
        let lease = e.grant(0, 100);
        let claim = |v| Txn {
            when: vec![Compare::Absent("c".into())],
            then: vec![Op::Put { key: "c".into(), value: v, lease: Some(lease) }],
        };
        let (won, rev) = e.txn(&claim(Value::Taken { worker: 1 }));
        assert!(won);
        assert_eq!(e.get("c").unwrap().create_rev, rev);
        assert!(!e.txn(&claim(Value::Taken { worker: 2 })).0, "the second create loses");
        e.expire(99);
        assert!(e.get("c").is_some());
        e.expire(100);
        assert!(e.get("c").is_none(), "gone with its lease");
        assert_eq!(e.expired.len(), 1);
    }
}
