//! The fire path as one state machine per execution: the values its keys hold, and every
//! transition with who may take it, in which etcd transaction, under which precondition, and
//! what each crash point leaves behind. The simulation's actors build their transactions here
//! only, so this table is the one place a reader and a reviewer look.
//!
//! ```text
//!                       claim (worker w, fencing token = create revision)
//!   Free ─────────────────────────────────────────────► Taken{w}
//!    │   when: claims/E absent                            │   │   │
//!    │   then: claims/E = Taken{w} (retention lease),     │   │   │ close (w): ModRev(claims/E, token)
//!    │         inflight/w/E (w's session lease)           │   │   └──► Closed(Ran) ...... record journaled BEFORE
//!    │                                                    │   │ lose (a survivor, rank 0..=2 after the grace):
//!    │ not-run (rank 0..=2 of the tick, MISSED_AFTER)     │   │   ModRev(claims/E, token)
//!    │   when: claims/E absent                            │   └────► Closed(Lost) + requests/E' (E' = attempt+1)
//!    │   then: claims/E = Closed(Missed)                  │          lost record journaled BEFORE
//!    ▼   provisional record durable BEFORE, journaled     │ orphan (w, its session ended before it learnt it won):
//!  Closed(Missed)        after (kept only if ours)        └────► Closed(Missed), ModRev(claims/E, token)
//!
//!   requests/E' ──claim (any worker): claims/E' absent ∧ requests/E' exists ──► Taken{w}, requests/E' deleted
//! ```
//!
//! Crash points and what they leave: before a claim, nothing; after a claim, a Taken claim whose
//! inflight key dies with the session (the loss handling closes it Lost and reruns); after a
//! close's journal entry but before the close, a record of a run that happened (the loss
//! handling closes the claim Lost, whose IfAbsent record yields to the run's); after a not-run
//! close, a provisional record settled at restart against the claim; midway through a
//! departure, the claims left Taken, which the next rank finishes.

#[must_use]
pub fn exec_key(e: Exec) -> String {
    format!("{:02}@{:08}#{}", e.0, e.1, e.2)
}

#[must_use]
pub fn claim_key(e: Exec) -> String {
    format!("claims/{}", exec_key(e))
}

#[must_use]
pub fn inflight_key(worker: usize, e: Exec) -> String {
    format!("inflight/{worker}/{}", exec_key(e))
}

#[must_use]
pub fn inflight_prefix(worker: usize) -> String {
    format!("inflight/{worker}/")
}

#[must_use]
pub fn request_key(e: Exec) -> String {
    format!("requests/{}", exec_key(e))
}

use crate::etcd::{Compare, LeaseId, Op, Txn};
pub use crate::value::{Exec, Outcome, Value};

/// Free → Taken{w}: the claim, with the inflight key on `w`'s session.
#[must_use]
pub fn claim(e: Exec, worker: usize, session: LeaseId) -> Txn {
    Txn {
        when: vec![Compare::Absent(claim_key(e))],
        then: vec![
            Op::Put { key: claim_key(e), value: Value::Taken { worker }, lease: None },
            Op::Put { key: inflight_key(worker, e), value: Value::Inflight(e), lease: Some(session) },
        ],
    }
}

/// requests/E → Taken{w}: a requested execution's claim consumes its request.
#[must_use]
pub fn claim_requested(e: Exec, worker: usize, session: LeaseId) -> Txn {
    let mut t = claim(e, worker, session);
    t.when.push(Compare::Is(request_key(e), Value::Request));
    t.then.push(Op::Delete(request_key(e)));
    t
}

/// Taken{w} → Closed(outcome): the winner's close (`Ran`), or its orphan's (`Missed`), fenced by
/// the claim's token.
#[must_use]
pub fn close(e: Exec, worker: usize, token: i64, outcome: Outcome) -> Txn {
    Txn {
        when: vec![Compare::ModRev(claim_key(e), token)],
        then: vec![
            Op::Put { key: claim_key(e), value: Value::Closed(outcome), lease: None },
            Op::Delete(inflight_key(worker, e)),
        ],
    }
}

/// Taken{w} → Closed(Lost) with the rerun's request (when `rerun`), by a survivor.
#[must_use]
pub fn lose(e: Exec, token: i64, rerun: bool) -> Txn {
    let mut then = vec![Op::Put { key: claim_key(e), value: Value::Closed(Outcome::Lost), lease: None }];
    if rerun {
        then.push(Op::Put { key: request_key((e.0, e.1, e.2 + 1)), value: Value::Request, lease: None });
    }
    Txn { when: vec![Compare::ModRev(claim_key(e), token)], then }
}

#[must_use]
pub fn departure_key(session: LeaseId) -> String {
    format!("departures/{session}")
}

/// A departure handled: every execution its session held closed. The survivors owing it stop.
#[must_use]
pub fn departure_done(session: LeaseId) -> Txn {
    Txn { when: vec![], then: vec![Op::Put { key: departure_key(session), value: Value::Handled, lease: None }] }
}

/// Free → Closed(Missed): a tick nobody claimed.
#[must_use]
pub fn not_run(e: Exec) -> Txn {
    Txn {
        when: vec![Compare::Absent(claim_key(e))],
        then: vec![Op::Put { key: claim_key(e), value: Value::Closed(Outcome::Missed), lease: None }],
    }
}
