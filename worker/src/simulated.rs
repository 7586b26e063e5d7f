//! Simulated tasks: what the simulation of the fire path (`worker/tests/sim.rs`) runs instead
//! of shell, HTTP and gRPC tasks. A task is a future on the simulation's clock that ends when
//! its duration is over or when the worker stops it; the simulation notes when each attempt
//! was alive, to check that no two attempts of a tick overlap.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

use crate::executor::{Finished, StopReason};
use crate::fire::Fire;

/// A simulated task's run, as the run phase awaits it.
pub type Run = Pin<Box<dyn Future<Output = Finished> + Send>>;

/// Runs every task of a worker given [`crate::node::Parts::simulated`].
pub trait Tasks: Send + Sync {
    /// Runs `fire` on `worker` until it ends or `stop` carries a reason.
    fn run(&self, worker: &str, fire: &Fire, stop: watch::Receiver<Option<StopReason>>) -> Run;
}
