//! What the simulated keys hold: execution ids, outcomes and the values of claims, inflight
//! keys and run requests.

/// Execution ids are `job@tick#attempt`.
pub type Exec = (u32, u64, u32);

/// How an execution ended, as its closed claim and its record say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Ran,
    Lost,
    Missed,
}

/// What the simulated keys hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A claim as its winner wrote it.
    Taken { worker: usize },
    /// A closed claim.
    Closed(Outcome),
    /// An inflight key: the execution it names is looked after by the session's worker.
    Inflight(Exec),
    /// A run request for the execution its key names.
    Request,
    /// A departure's done marker: its handling finished.
    Handled,
}
