//! Simulated tasks: what the simulation of the fire path (`worker/tests/sim.rs`) runs instead
//! of shell, HTTP and gRPC tasks. A task is a future on the simulation's clock that ends when
//! its duration is over, when the worker stops it, or when its worker's session deadline
//! passes (as a keeper ends a real task's tree); the simulation notes when each attempt
//! was alive, to check that no two attempts of a tick overlap.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

use crate::tasks::shell::{Finished, StopReason};
use crate::timing::fire::Fire;

/// A simulated task's run, as the run phase awaits it.
pub type Run = Pin<Box<dyn Future<Output = Finished> + Send>>;

/// Runs every task of a worker given [`crate::node::Parts::simulated`].
pub trait Tasks: Send + Sync {
    /// Runs `fire` on `worker` until it ends or `stop` carries a reason.
    fn run(&self, worker: &str, fire: &Fire, stop: watch::Receiver<Option<StopReason>>) -> Run;

    /// The instant until which `worker`'s session certainly lives: what the keepers of its
    /// real tasks watch (they end their tasks once it passes without renewal).
    fn session_deadline(&self, worker: &str, until: tokio::time::Instant);
}

/// Known bugs the simulation re-introduces, one at a time, to show that it finds them: bits of
/// [`set_holes`]. Nothing but the simulation sets them; each is one branch at the point the bug
/// was (or would be).
pub mod holes {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A claim whose answer was lost is taken as lost, without reading it back: committed, it
    /// is orphaned (taken, never run, never closed).
    pub const UNKNOWN_CLAIM_DROPPED: u32 = 1;
    /// A task its keeper killed is judged by whether the session deadline has passed when the
    /// run is read back, not whether it passed while the run lasted: a late keep-alive hides
    /// the lapse, and the keeper's kill is recorded `failed` and never rerun.
    pub const KEEPER_KILL_FAILED: u32 = 2;
    /// The loss handling takes one inflight key's token for an execution two claim
    /// transactions listed (one given up, one that won later), and may take the stale one:
    /// the run is found "not its own" and never recorded.
    pub const ONE_INFLIGHT_TOKEN: u32 = 4;
    /// A claim sent again lets go of its first transaction's inflight key: applied late, that
    /// transaction won, and a worker that dies before the close leaves no key naming its token
    /// (the run is never recorded).
    pub const FIRST_SEND_LET_GO: u32 = 8;

    static HOLES: AtomicU32 = AtomicU32::new(0);

    /// Re-introduces the holes in `mask` (0: none) for the rest of the process.
    pub fn set(mask: u32) {
        HOLES.store(mask, Ordering::Relaxed);
    }

    /// Whether `hole` is re-introduced.
    #[must_use]
    pub fn open(hole: u32) -> bool {
        HOLES.load(Ordering::Relaxed) & hole != 0
    }
}
