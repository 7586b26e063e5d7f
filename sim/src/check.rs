//! The invariants every seed must keep, checked on what it did.

use std::collections::BTreeMap;

use crate::machine::{claim_key, Exec, Outcome, Value};
use crate::world::Outcomes;

/// The first invariant `o` breaks, in words.
#[must_use]
pub fn violation(o: &Outcomes) -> Option<String> {
    let mut starts: BTreeMap<Exec, usize> = BTreeMap::new();
    for r in &o.runs {
        *starts.entry(r.e).or_default() += 1;
    }
    if let Some((e, n)) = starts.iter().find(|(_, n)| **n > 1) {
        return Some(format!("{e:?} started {n} times"));
    }
    // No two attempts of one tick alive at the same instant.
    for a in &o.runs {
        for b in o.runs.iter().filter(|b| (b.e.0, b.e.1) == (a.e.0, a.e.1) && b.e.2 > a.e.2) {
            let a_end = a.end.unwrap_or(u64::MAX);
            if b.start < a_end {
                return Some(format!("{:?} started at {} while {:?} ran until {a_end}", b.e, b.start, a.e));
            }
        }
    }
    // Every started attempt has a final record.
    if let Some(r) = o.runs.iter().find(|r| !o.records.contains_key(&r.e)) {
        return Some(format!("{:?} ran on w{} but has no record", r.e, r.worker));
    }
    // A run that started is never closed as one that did not (an orphan's `Missed`).
    if let Some(r) = o.runs.iter().find(|r| o.claims.get(&claim_key(r.e)) == Some(&Value::Closed(Outcome::Missed))) {
        return Some(format!("{:?} ran on w{} but its claim was closed missed", r.e, r.worker));
    }
    // Every tick of the window ran or is recorded with why.
    if let Some((job, t)) = o.ticks.iter().find(|(j, t)| !o.records.contains_key(&(*j, *t, 1))) {
        return Some(format!("tick {job}@{t} has no record (claim: {:?})", o.claims.get(&claim_key((*job, *t, 1)))));
    }
    // Every claim is closed, and every closed claim has its record.
    for (key, value) in &o.claims {
        match value {
            Value::Taken { worker } => return Some(format!("{key} still taken by w{worker} at the end")),
            Value::Closed(_) => {}
            other => return Some(format!("{key} holds {other:?}")),
        }
    }
    // A lost attempt is rerun (its request claimed, the rerun recorded).
    for (e, outcome) in &o.records {
        if *outcome == Outcome::Lost && o.claims.get(&claim_key(*e)) == Some(&Value::Closed(Outcome::Lost)) {
            let next = (e.0, e.1, e.2 + 1);
            if e.2 < 4 && !o.records.contains_key(&next) {
                return Some(format!("{e:?} was lost and its rerun {next:?} has no record"));
            }
        }
    }
    if let Some(k) = o.requests_left.first() {
        return Some(format!("run request {k} was never claimed"));
    }
    None
}
