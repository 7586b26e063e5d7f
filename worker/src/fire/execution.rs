//! One fire of a job on this worker, as four phases, each its own module with a small value
//! passed along: `decide` (whether this worker races: part, rank, selector, room, session;
//! `Go`), `race` (the claim, batched with others; `WonClaim`), `run` (a capacity slot and the task
//! at its scheduled time; `Ran`), `close` (the claim closed `done` with its follow-ups, the final record).

use std::sync::Arc;

use tracing::Instrument;

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

async fn fire_path(ctx: Arc<Context>, mut fire: Fire) {
    let Some(go) = decide::decide(&ctx, &fire).await else { return };
    let Some(mut won) = race::claim(&ctx, &fire, go.lease, go.rank).await else { return };
    // A run that starts a workflow run carries its id from here on (its marker, its record,
    // the requests its close writes).
    fire.params.workflow = super::workflow::run_of(&ctx, &fire);
    let ran = run::run(&ctx, &fire, &mut won).await;
    close::close(&ctx, &fire, won, ran).await;
}
