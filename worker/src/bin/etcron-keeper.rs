//! The keeper of one shell task (`worker/src/tasks/keeper.rs`): a small program of its own, so
//! starting one per task costs a small binary's exec rather than the worker's. The worker runs
//! it from its own directory, or itself (`etcron-worker __keep …`) when it is not installed.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    etcron_worker::tasks::keeper::keep(&args)
}
