//! Tasks spawned as a group's. The simulation of the fire path runs several workers in one
//! process and kills one by aborting every task it spawned — each where it was, at whatever
//! await point, as a crash leaves a process. A worker's code spawns with [`spawn`]: inside a
//! [`Group`]'s scope the task joins it (and so do the tasks it spawns); outside one (the
//! binaries) it is `tokio::spawn`.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::{AbortHandle, JoinHandle};

tokio::task_local! {
    static GROUP: Group;
}

/// The tasks of one simulated worker, and a number naming it.
#[derive(Debug, Clone, Default)]
pub struct Group {
    id: u64,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Group {
    /// A group named `id` (what [`current_group`] says in its tasks).
    #[must_use]
    pub fn new(id: u64) -> Self {
        Self { id, tasks: Arc::default() }
    }

    /// Spawns `future` as the group's first task: what it spawns joins the group.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = tokio::spawn(GROUP.scope(self.clone(), future));
        self.track(handle.abort_handle());
        handle
    }

    /// Aborts every task of the group: each is dropped at its next poll, where it was.
    pub fn abort_all(&self) {
        for task in self.tasks.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            task.abort();
        }
    }

    fn track(&self, task: AbortHandle) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget the finished now and then (at each power of two), so the list stays bounded
        // by what runs.
        if tasks.len() >= 64 && tasks.len().is_power_of_two() {
            tasks.retain(|t| !t.is_finished());
        }
        tasks.push(task);
    }
}

/// The name of the group the caller runs in, if any (the simulation gives each worker a clock
/// of its own by it).
#[must_use]
pub fn current_group() -> Option<u64> {
    GROUP.try_with(|g| g.id).ok()
}

/// `tokio::spawn`, joining the caller's group if it runs in one.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match GROUP.try_with(Group::clone) {
        Ok(group) => group.spawn(future),
        Err(_) => tokio::spawn(future),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn aborting_a_group_ends_its_tasks_and_theirs_and_no_other() {
        let group = Group::default();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<JoinHandle<()>>(1);
        let outer = group.spawn(async move {
            let inner = spawn(std::future::pending::<()>());
            tx.send(inner).await.unwrap_or_default();
            std::future::pending::<()>().await;
        });
        let inner = rx.recv().await.unwrap_or_else(|| tokio::spawn(async {}));
        let outside = spawn(std::future::pending::<()>());
        group.abort_all();
        assert!(outer.await.is_err_and(|e| e.is_cancelled()));
        assert!(inner.await.is_err_and(|e| e.is_cancelled()));
        assert!(!outside.is_finished());
        outside.abort();
    }
}
