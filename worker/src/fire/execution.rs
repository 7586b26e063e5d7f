//! One fire of a job on this worker, as four phases, each its own module with a small value
//! passed along: `decide` (whether this worker races: part, rank, selector, room, session;
//! `Go`), `race` (the claim, batched with others; `WonClaim`), `run` (a capacity slot and the task
//! at its scheduled time; `Ran`), `close` (the claim closed `done` with its follow-ups, the final record);
//! a trace span each when tracing is on (`spans`).

use std::sync::Arc;

use tracing::Instrument;

use super::spans::FireSpans;
use super::{close, decide, race, run};
use crate::context::Context;
use crate::metrics::METRICS;
use crate::timing::fire::Fire;

/// Runs one fire end to end; see the module docs.
pub async fn run_fire(ctx: Arc<Context>, fire: Fire) {
    METRICS.ticks_due.with_label_values(&[fire.trigger.as_str()]).inc();
    let span = tracing::info_span!("execution", job = %fire.id.job, execution_id = %fire.id, worker_id = %ctx.config.worker_id);
    fire_path(ctx, fire).instrument(span).await;
}

/// Each phase after `decide` is boxed: a burst spawns a task per due tick on every worker, and
/// the phases a tick never reaches (most of them: ranked later, seen taken) cost it nothing —
/// inline, every task carried the largest phase's future (37 KB).
async fn fire_path(ctx: Arc<Context>, mut fire: Fire) {
    // Trace spans around the phases (`spans`): built only while tracing is on; they change
    // nothing of what the phases do.
    let spans = FireSpans::begin(&ctx, &fire);
    let Some(go) = decide::decide(&ctx, &fire).await else {
        spans.not_raced();
        return;
    };
    let mut claim = spans.step("claim");
    let won = Box::pin(race::claim(&ctx, &fire, go.lease, go.rank)).await;
    claim.set("etcron.claim.outcome", || if won.is_some() { "won" } else { "not won" });
    drop(claim);
    let Some(mut won) = won else { return };
    // A run that starts a workflow run carries its id from here on (its marker, its record,
    // the requests its close writes).
    fire.params.workflow = super::workflow::run_of(&ctx, &fire);
    let (run_span, trace) = spans.run(&fire);
    let ran = Box::pin(run::run(&ctx, &fire, &mut won, trace)).await;
    drop(run_span);
    Box::pin(close::close(&ctx, &fire, won, ran, spans.step("close"))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns, from its type alone (nothing is called).
    fn future_size<F: FnOnce(Arc<Context>, Fire) -> Fut, Fut: std::future::Future>(_f: F) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// A burst holds one fire task per due tick on every worker (100 000 at once): a task
    /// carrying every phase's future inline took 37 KB (release), and spawning 100 000 of them
    /// spent a third of a worker's CPU writing fresh pages.
    #[test]
    fn a_fire_task_carries_only_what_it_reaches() {
        let size = future_size(run_fire);
        println!("run_fire: {size} bytes");
        assert!(size <= 8 * 1024, "a fire's task is {size} bytes: box the phases and rare awaits it carries");
    }

    fn close_size<'a, F, Fut>(_f: F) -> usize
    where
        F: FnOnce(&'a Arc<Context>, &'a Fire, crate::fire::race::WonClaim, run::Ran, crate::fire::spans::Step) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// A burst's closes wait together while its claims are backlogged: each carries the record
    /// and its close, not the futures of the rare awaits (a lone close, a queue's hand-over):
    /// 12.6 KB, where they took 19.9 KB inline.
    #[test]
    fn a_waiting_close_carries_only_what_it_reaches() {
        let size = close_size(close::close);
        println!("close: {size} bytes");
        assert!(size <= 14 * 1024, "a close is {size} bytes: box its rare awaits");
    }
}
