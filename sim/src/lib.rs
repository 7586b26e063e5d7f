//! A deterministic simulation of etcron's fire path. The execution state machine
//! ([`machine`]: every transition of a claim, its transaction and its precondition) runs on
//! simulated workers ([`world`]) over an in-memory etcd ([`etcd`]: revisions, create and mod
//! revisions, leases that expire and take their keys, transactions), with a seeded RNG choosing
//! every delay, lost answer (applied or not), etcd stall, worker crash at any step, freeze and
//! task duration. After each seed the invariants ([`check`]) are checked: no execution started
//! twice, no two attempts of a tick alive at once, every started attempt and every tick
//! recorded, every claim closed, every lost attempt rerun. A failing seed prints its trace and
//! replays exactly from its number.
//!
//! What it is not (yet): the worker's own phases. It models them step for step — the claim,
//! the read-back of an unknown answer, the close, the loss handling, the not-run record, the
//! run request, the departure owed by every survivor until its done marker — so it checks the
//! protocol, and a bug re-introduced in the model ([`Holes`]) is found by a seed; the worker's
//! modules do not run in it. The worker takes the same steps: the model found, at seed 2 of its
//! first run, that a departure handled by ranks 0..=2 alone is lost when all three die, and
//! the worker now owes departures as the model does (`worker/src/cluster/departures.rs`).
//!
//! [`server`] is the next step: a model etcd served in-process over etcd's own gRPC API, so the
//! worker's real code (through `etcd-client`) runs against it on tokio's paused clock, with the
//! same faults; `tests/conformance.rs` checks it against a real etcd, op by op.

pub mod check;
pub mod etcd;
pub mod machine;
pub mod rng;
pub mod server;
pub mod value;
pub mod world;

pub use world::{Holes, Params};

/// Runs seed `seed`; the violation it found, with its trace.
#[must_use]
pub fn run_seed(seed: u64, params: &Params) -> Option<(String, Vec<String>)> {
    let out = world::World::new(seed, params.clone()).run();
    check::violation(&out).map(|v| (v, out.trace))
}

/// The first failing seed of `seeds`, if any.
#[must_use]
pub fn first_failure(seeds: std::ops::Range<u64>, params: &Params) -> Option<(u64, String, Vec<String>)> {
    seeds.into_iter().find_map(|s| run_seed(s, params).map(|(v, t)| (s, v, t)))
}
