//! The fire path: one fire of a job on this worker, from the tick to its record
//! ([`execution`]: decide, race, run, close, each a module with a small value in and out), and
//! what runs beside it — settling fires that do not run here (`skipped`, `missed`), records,
//! `concurrency: queue`, backfill chains, SLA alerts and the fire's trace spans. Imports the
//! folders below it, never `ledger` or the scheduler.

pub mod alerts;
pub mod backfill;
pub mod close;
pub mod decide;
pub mod execution;
pub mod not_run;
pub mod pool;
pub mod queue;
pub mod race;
pub mod record;
pub mod run;
pub mod spans;
pub mod workflow;
