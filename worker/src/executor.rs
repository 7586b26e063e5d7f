//! Runs shell tasks: `/bin/sh -c` in a process group of its own, output captured bounded
//! (head + tail), and kill/timeout delivered to the whole group (TERM, then KILL after a grace).
//! Its `Finished`/`Ending`/`StopReason` also describe HTTP tasks (`http_task`).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcron_common::output::BoundedOutput;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::{oneshot, watch};

/// How long output pipes may stay open after the shell exited (background children holding
/// them); after that the rest of their output is not waited for.
const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// Why a running task is being stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// An operator's kill command.
    Killed(String),
    /// The worker lost its session lease: another worker may take over this tick.
    LeaseLost,
    /// The worker is shutting down and the grace period ran out.
    Shutdown,
}

#[derive(Debug)]
pub struct ShellJob {
    pub command: String,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub timeout: Option<Duration>,
    pub kill_grace: Duration,
    pub max_output: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    Stopped(StopReason),
    SpawnFailed(String),
    /// An HTTP task got a response: `ok` when its status is `expected`, or any 2xx when no
    /// status is expected.
    Http {
        status: u16,
        ok: bool,
        expected: Option<u16>,
    },
    /// An HTTP task got no (complete) response: DNS, connect, TLS, protocol or body errors,
    /// naming the step and the URL.
    RequestFailed(String),
}

#[derive(Debug)]
pub struct Finished {
    pub ending: Ending,
    /// Exit code / signal even when the task was stopped.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Response status of an HTTP task, also when it was stopped while reading the body;
    /// `None` for shell tasks.
    pub http_status: Option<u16>,
    pub output: String,
    pub output_truncated: bool,
}

/// Runs `job` until it exits, times out, or `stop` carries a reason. `pid_tx` receives the
/// process (group) id once spawned.
pub async fn run_shell(
    job: ShellJob,
    mut stop: watch::Receiver<Option<StopReason>>,
    pid_tx: oneshot::Sender<u32>,
) -> Finished {
    // stdout and stderr share one pipe, so the output reads in the order it was written (like
    // `2>&1`), and one reader drains both.
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return spawn_failed(format!("creating the output pipe failed: {e}")),
    };
    let writer_err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return spawn_failed(format!("creating the output pipe failed: {e}")),
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&job.command)
        .envs(&job.env)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_err))
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &job.cwd {
        cmd.current_dir(cwd);
    }
    let output = Arc::new(Mutex::new(BoundedOutput::new(job.max_output)));
    // fork/exec blocks the calling thread; on the blocking pool, many tasks due at the same
    // tick start in parallel instead of queueing behind each other on the async workers.
    // `cmd` (holding the pipe's write ends) is dropped there after the spawn, so the reader sees
    // end-of-file once the task and its children are done with the pipe.
    let spawned = tokio::task::spawn_blocking(move || cmd.spawn()).await;
    let spawned = spawned.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return spawn_failed(format!("spawning /bin/sh failed: {e}")),
    };
    let pid = child.id().unwrap_or(0);
    let _ = pid_tx.send(pid);
    let pump_task = match tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(reader)) {
        Ok(rx) => Some(tokio::spawn(pump(rx, output.clone()))),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read task output");
            None
        }
    };
    let group = Pid::from_raw(i32::try_from(pid).unwrap_or(0));
    let deadline = job.timeout.map(|t| tokio::time::Instant::now() + t);
    let timeout_fut = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    // An already-set stop reason (e.g. a kill that arrived before spawn) applies at once.
    let already = stop.borrow().clone();
    let mut stopped: Option<Ending> = already.map(Ending::Stopped);
    let status = if stopped.is_some() {
        terminate(&mut child, group, job.kill_grace).await
    } else {
        tokio::select! {
            status = child.wait() => status.ok(),
            () = timeout_fut => {
                stopped = Some(Ending::TimedOut);
                terminate(&mut child, group, job.kill_grace).await
            }
            reason = wait_stop(&mut stop) => {
                stopped = Some(Ending::Stopped(reason));
                terminate(&mut child, group, job.kill_grace).await
            }
        }
    };
    if let Some(reader) = pump_task {
        if tokio::time::timeout(PIPE_DRAIN, reader).await.is_err() {
            tracing::debug!(pid, "output pipe still open after exit; not waiting for background children");
        }
    }
    let (exit_code, signal) = match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    };
    let ending = stopped.unwrap_or(match (exit_code, signal) {
        (Some(code), _) => Ending::Exited(code),
        (None, Some(sig)) => Ending::Signaled(sig),
        (None, None) => Ending::SpawnFailed("exit status unavailable".to_owned()),
    });
    let (text, truncated) = {
        let out = output.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (out.render(), out.truncated())
    };
    Finished { ending, exit_code, signal, http_status: None, output: text, output_truncated: truncated }
}

fn spawn_failed(message: String) -> Finished {
    Finished {
        ending: Ending::SpawnFailed(message),
        exit_code: None,
        signal: None,
        http_status: None,
        output: String::new(),
        output_truncated: false,
    }
}

/// Waits until `stop` carries a reason (forever once its sender is gone).
pub(crate) async fn wait_stop(stop: &mut watch::Receiver<Option<StopReason>>) -> StopReason {
    loop {
        if let Some(reason) = stop.borrow_and_update().clone() {
            return reason;
        }
        if stop.changed().await.is_err() {
            // The sender is gone: nobody can stop this task any more.
            std::future::pending::<()>().await;
        }
    }
}

/// TERM to the whole group, KILL after `grace`, then reap the shell.
async fn terminate(child: &mut tokio::process::Child, group: Pid, grace: Duration) -> Option<std::process::ExitStatus> {
    if group.as_raw() > 0 {
        let _ = killpg(group, Signal::SIGTERM);
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => {
            // The shell is gone; members of its group that ignored TERM get KILL too.
            if group.as_raw() > 0 {
                let _ = killpg(group, Signal::SIGKILL);
            }
            status.ok()
        }
        Err(_) => {
            if group.as_raw() > 0 {
                let _ = killpg(group, Signal::SIGKILL);
            }
            child.wait().await.ok()
        }
    }
}

async fn pump(mut pipe: impl tokio::io::AsyncRead + Unpin, output: Arc<Mutex<BoundedOutput>>) {
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => output.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(&buf[..n]),
        }
    }
}
