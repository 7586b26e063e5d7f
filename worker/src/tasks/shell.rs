//! Runs shell tasks: `/bin/sh -c` in a process group of its own, output captured bounded
//! (head + tail), kill/timeout delivered to the whole group (TERM, then KILL after a grace), and
//! the job's `limits` set with `setrlimit` in the child before it runs the shell, and with
//! `shell_task_network = "none"` a network namespace of its own entered there too
//! (`task_netns`).
//! Its `Finished`/`Ending`/`StopReason` also describe HTTP and gRPC tasks (`http_task`,
//! `grpc_task`).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::tasks::child::{set_up, ChildSetup};
use crate::tasks::live_output::LiveOutput;
use crate::tasks::netns::{self, ShellNetwork};
use crate::tasks::uids::TaskAccount;
use etcron_model::spec::Limits;
use etcron_model::UnixMs;
use nix::sys::resource::{getrlimit, Resource};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::{oneshot, watch};

/// How long output pipes may stay open after the shell exited (background children holding
/// them); after that the rest of their output is not waited for.
const PIPE_DRAIN: Duration = Duration::from_secs(2);
/// The hard CPU limit is this much above the soft one: SIGXCPU at the soft limit lets a task
/// clean up (or dies of it), SIGKILL at the hard one ends a task that ignores it.
pub const CPU_KILL_AFTER: Duration = Duration::from_secs(2);

/// Why a running task is being stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// An operator's kill command.
    Killed(String),
    /// The worker lost its session lease: another worker may take over this tick.
    LeaseLost,
    /// The worker is shutting down and the grace period ran out.
    Shutdown,
    /// The task asked to be moved (`rebalance`): another worker continues it.
    Rebalance,
}

#[derive(Debug)]
pub struct ShellJob {
    pub command: String,
    /// The task's whole environment: nothing of the worker's own is inherited beyond what is
    /// here (see [`inherited_env`]).
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// The account to run as (`task.user`/`task.group`, already allowed by the worker's
    /// `run_as_users`, or the worker's `task_user`/team uid); resolved on this machine when the
    /// task starts. `None`: as the worker itself.
    pub run_as: Option<TaskAccount>,
    /// Named in errors the worker alone can see (a `cwd` missing on this machine).
    pub worker_id: String,
    pub timeout: Option<Duration>,
    pub kill_grace: Duration,
    /// Where the task's output goes (bounded; followers read it live).
    pub output: Arc<LiveOutput>,
    /// Process limits (memory, cpu, open files) of the shell and everything it starts.
    pub limits: Limits,
    /// The host's network, or a network namespace of the task's own (`shell_task_network`).
    pub network: ShellNetwork,
    /// The slot of the session deadline its keeper watches: its node's (`keeper::Slot`).
    pub keeper_slot: usize,
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
    /// A gRPC call ended with a status: `code` as gRPC names it (`OK` is the one success), the
    /// server's message (clipped).
    Grpc {
        code: &'static str,
        message: String,
    },
    /// An HTTP or gRPC task got no (complete) response: DNS, connect, TLS, protocol or body
    /// errors, naming the step and the URL; a gRPC task also when its method or request could
    /// not be resolved (descriptors, a request field), naming why.
    RequestFailed(String),
    /// An asynchronous HTTP task's status document said the remote work failed, or a handler
    /// returned an error.
    RemoteFailed(String),
    /// Never started: no capacity slot came free in time (why).
    NoCapacity(String),
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
    /// When the process was started (Unix ms, just after the spawn returned); `None` when it
    /// never was, and for HTTP tasks (which start when handed over).
    pub spawned_ms: Option<i64>,
    /// The run's result as the task itself gave it: a handler's return value, the value at an
    /// HTTP task's `result_pointer`, a gRPC response (its record's `result`; else the latest
    /// one reported to its tracker).
    pub result: Option<serde_json::Value>,
}

impl Finished {
    /// A task that was never started: `ending` says why.
    #[must_use]
    pub fn not_started(ending: Ending) -> Self {
        Self::of_request(ending, None, (String::new(), false))
    }

    /// A request's end (an HTTP or gRPC task: no process): its status and its output, and
    /// whether the output was cut.
    #[must_use]
    pub fn of_request(ending: Ending, http_status: Option<u16>, (output, output_truncated): (String, bool)) -> Self {
        Self {
            ending,
            exit_code: None,
            signal: None,
            http_status,
            output,
            output_truncated,
            spawned_ms: None,
            result: None,
        }
    }
}

/// Runs a request (an HTTP task's, a gRPC task's: dropping `work` aborts it) until it ends,
/// `deadline` passes or `stop` carries a reason. A stop that came before the start runs
/// nothing (a kill right after the claim sends no request).
pub async fn run_request(
    stop: &mut watch::Receiver<Option<StopReason>>,
    deadline: Option<tokio::time::Instant>,
    work: impl std::future::Future<Output = Ending>,
) -> Ending {
    if let Some(reason) = stop.borrow().clone() {
        return Ending::Stopped(reason);
    }
    let timeout = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        reason = wait_stop(stop) => Ending::Stopped(reason),
        () = timeout => Ending::TimedOut,
        ending = work => ending,
    }
}

/// Runs `job` until it exits, times out, or `stop` carries a reason. `pid_tx` receives the
/// process (group) id once spawned, with when (Unix ms).
pub async fn run_shell(
    job: ShellJob,
    mut stop: watch::Receiver<Option<StopReason>>,
    pid_tx: oneshot::Sender<(u32, i64)>,
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
    let output = job.output.clone();
    let (mut child, spawned_ms) = match spawn_shell(&job, (writer, writer_err)).await {
        Ok(spawned) => spawned,
        Err(why) => return spawn_failed(why),
    };
    let pid = child.id().unwrap_or(0);
    let _ = pid_tx.send((pid, spawned_ms));
    let pump_task = match tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(reader)) {
        Ok(rx) => Some(etcron_common::task::spawn(pump(rx, output.clone()))),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read task output");
            None
        }
    };
    let (status, stopped) = wait_or_end(&mut child, pid, &job, &mut stop).await;
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
    let (text, truncated) = output.render();
    Finished {
        ending,
        exit_code,
        signal,
        http_status: None,
        output: text,
        output_truncated: truncated,
        spawned_ms: Some(spawned_ms),
        result: None,
    }
}

/// Spawns the job's shell with its output on `writers`, under a keeper when the worker has
/// them; the child and when it was spawned, or why it was not.
///
/// fork/exec blocks the calling thread; on the blocking pool, many tasks due at the same tick
/// start in parallel instead of queueing behind each other on the async workers. The command
/// (holding the pipe's write ends) is dropped there after the spawn, so the reader sees
/// end-of-file once the task and its children are done with the pipe. The start time is read
/// on the spawning thread, as the spawn returns: by then the child has exec'd (posix_spawn),
/// while this task may wait a while to be polled again. The account is looked up there too: the
/// user database may be a file read or a network service.
async fn spawn_shell(
    job: &ShellJob,
    (writer, writer_err): (std::io::PipeWriter, std::io::PipeWriter),
) -> Result<(tokio::process::Child, UnixMs), String> {
    let rlimits = rlimits(&job.limits);
    let (run_as, worker_id, network, slot) = (job.run_as.clone(), job.worker_id.clone(), job.network, job.keeper_slot);
    let (command, env, cwd) = (job.command.clone(), job.env.clone(), job.cwd.clone());
    let spawned = tokio::task::spawn_blocking(move || {
        let account = match run_as.as_ref().map(|r| r.resolve(&worker_id)).transpose() {
            Ok(account) => account,
            Err(refused) => return (Err(Refused::Account(refused)), etcron_model::now_ms()),
        };
        let setup = ChildSetup { rlimits, account };
        // Under a keeper (the worker's own binary), which sets the shell up, so the task's tree
        // ends with the worker (`keeper`); without one (the executor's own tests), directly.
        let keeper = crate::tasks::keeper::command(&command, &setup, network, slot);
        let supervised = keeper.is_some();
        let mut cmd = keeper.unwrap_or_else(|| {
            let mut sh = Command::new("/bin/sh");
            sh.arg("-c").arg(&command);
            sh
        });
        cmd.env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(writer))
            .stderr(Stdio::from(writer_err))
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &cwd {
            cmd.current_dir(cwd);
        }
        if let Some(account) = &setup.account {
            cmd.envs(account.env());
        }
        // A keeper sets the task up itself: nothing runs between fork and exec, so the spawn
        // is a `posix_spawn` (a fork of this large process would copy its page tables).
        if !supervised && (!setup.rlimits.is_empty() || setup.account.is_some() || network.isolated()) {
            set_up_child(&mut cmd, network, setup);
        }
        (cmd.spawn().map_err(Refused::Spawn), etcron_model::now_ms())
    })
    .await;
    let (spawned, spawned_ms) =
        spawned.unwrap_or_else(|e| (Err(Refused::Spawn(std::io::Error::other(e.to_string()))), etcron_model::now_ms()));
    match spawned {
        Ok(child) => Ok((child, spawned_ms)),
        Err(Refused::Account(why)) => Err(why),
        Err(Refused::Spawn(e)) => Err(spawn_error(job.cwd.as_deref(), &job.worker_id, job.network, &e)),
    }
}

/// Waits for the task to exit, or ends its process group at its timeout or when `stop` says
/// so (at once for a stop set before the spawn): its exit status, and how it was ended, if it
/// was.
async fn wait_or_end(
    child: &mut tokio::process::Child,
    pid: u32,
    job: &ShellJob,
    stop: &mut watch::Receiver<Option<StopReason>>,
) -> (Option<std::process::ExitStatus>, Option<Ending>) {
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
    if let Some(reason) = already {
        return (terminate(child, group, job.kill_grace).await, Some(Ending::Stopped(reason)));
    }
    tokio::select! {
        status = child.wait() => (status.ok(), None),
        () = timeout_fut => (terminate(child, group, job.kill_grace).await, Some(Ending::TimedOut)),
        reason = wait_stop(stop) => {
            let ending = Ending::Stopped(reason);
            (terminate(child, group, job.kill_grace).await, Some(ending))
        }
    }
}

/// The values of `names` in the worker's environment (those set, and valid UTF-8): what a task
/// inherits of it.
#[must_use]
pub fn inherited_env(names: &[String]) -> BTreeMap<String, String> {
    names.iter().filter_map(|name| Some((name.clone(), std::env::var(name).ok()?))).collect()
}

/// Why a shell was not started.
enum Refused {
    /// `task.user`/`task.group` do not resolve on this worker.
    Account(String),
    Spawn(std::io::Error),
}

/// Why the shell could not be started: a `cwd` that this worker lacks is named as such (the
/// master cannot check it at save time), anything else is the spawn's own error (which may be
/// the task's network namespace's: said when there is one).
fn spawn_error(cwd: Option<&str>, worker_id: &str, network: ShellNetwork, e: &std::io::Error) -> String {
    if let Some(cwd) = cwd {
        match std::fs::metadata(cwd) {
            Err(m) if m.kind() == std::io::ErrorKind::NotFound => {
                return format!("cwd {cwd} does not exist on worker {worker_id}")
            }
            Ok(m) if !m.is_dir() => return format!("cwd {cwd} is not a directory on worker {worker_id}"),
            Err(m) => return format!("cwd {cwd} cannot be used on worker {worker_id}: {m}"),
            Ok(_) => return format!("spawning /bin/sh in cwd {cwd} failed on worker {worker_id}: {e}"),
        }
    }
    if network.isolated() {
        return format!(
            "spawning /bin/sh in a network namespace of its own ({} = \"none\") failed on worker {worker_id}: {e}",
            netns::SETTING
        );
    }
    format!("spawning /bin/sh failed on worker {worker_id}: {e}")
}

/// The `(resource, soft, hard)` limits the child sets for `limits`, computed before the fork. A
/// process cannot raise its hard limits, so each is capped at the worker's own.
fn rlimits(limits: &Limits) -> Vec<(Resource, u64, u64)> {
    let mut wanted = Vec::new();
    if let Some(memory) = limits.memory {
        wanted.push((Resource::RLIMIT_AS, memory.0, memory.0));
    }
    if let Some(cpu) = limits.cpu {
        let secs = cpu.0.as_secs().max(1);
        wanted.push((Resource::RLIMIT_CPU, secs, secs + CPU_KILL_AFTER.as_secs()));
    }
    if let Some(files) = limits.open_files {
        wanted.push((Resource::RLIMIT_NOFILE, files, files));
    }
    wanted
        .into_iter()
        .map(|(resource, soft, hard)| {
            let own_hard = getrlimit(resource).map_or(u64::MAX, |(_, h)| h);
            if hard > own_hard {
                tracing::warn!(
                    ?resource,
                    wanted = hard,
                    allowed = own_hard,
                    "task limit capped at the worker's own hard limit"
                );
            }
            (resource, soft.min(own_hard), hard.min(own_hard))
        })
        .collect()
}

/// Makes the child enter a network namespace of its own (with `network` `none`), set its
/// limits and take on its account between fork and exec, so they hold from the shell's first
/// instruction and for everything it starts. The namespace comes first (a socket is opened for
/// it before an open files limit could forbid one), then the limits: both need the child to
/// still be root (`CAP_SYS_ADMIN`; raising hard limits).
#[allow(unsafe_code)]
fn set_up_child(cmd: &mut Command, network: ShellNetwork, setup: ChildSetup) {
    // SAFETY: the closure runs in the forked child, where only async-signal-safe calls are
    // allowed. It only calls unshare(2), socket(2), ioctl(2), close(2) (`task_netns`) and
    // [`set_up`]'s calls with values computed before the fork; it allocates nothing, takes no
    // lock and touches no shared state.
    unsafe {
        cmd.pre_exec(move || {
            if network.isolated() {
                netns::enter_own_namespace()?;
            }
            set_up(&setup.rlimits, setup.account.as_ref())
        });
    }
}

/// What a failed shell task's record says about its `limits`: which one it hit when that can be
/// told (SIGXCPU, an allocation failure or "too many open files" in the output), else which ones
/// applied. `None` when no process limit was set or the task did not fail.
#[must_use]
pub fn limit_note(limits: &Limits, finished: &Finished) -> Option<String> {
    if !limits.limits_processes() {
        return None;
    }
    let sigxcpu = Signal::SIGXCPU as i32;
    let sigkill = Signal::SIGKILL as i32;
    let applied = format!("limits: {}", limits.describe());
    let output = finished.output.to_ascii_lowercase();
    let said = |needles: &[&str]| needles.iter().any(|n| output.contains(n));
    let note = match (&finished.ending, limits.cpu) {
        (Ending::Signaled(sig), Some(cpu)) if *sig == sigxcpu => format!("CPU limit of {cpu} reached (SIGXCPU)"),
        (Ending::Exited(code), Some(cpu)) if *code == 128 + sigxcpu => {
            format!("a process of the task reached the CPU limit of {cpu} (SIGXCPU; {applied})")
        }
        (Ending::Signaled(sig), Some(cpu)) if *sig == sigkill => format!(
            "SIGKILL: the CPU limit of {cpu} may have been reached (its hard limit, {} later, kills; {applied})",
            humantime::format_duration(CPU_KILL_AFTER)
        ),
        (Ending::Exited(0), _) => return None,
        (Ending::Exited(_) | Ending::Signaled(_), _) => match (limits.memory, limits.open_files) {
            (Some(memory), _)
                if said(&[
                    "cannot allocate memory",
                    "out of memory",
                    "memory exhausted",
                    "memoryerror",
                    "bad_alloc",
                    "failed to allocate",
                    "allocation failed",
                    "memory allocation",
                ]) =>
            {
                format!("memory limit of {memory} reached (the task reported an allocation failure; {applied})")
            }
            (_, Some(files)) if said(&["too many open files"]) => {
                format!("open files limit of {files} reached (the task reported \"too many open files\"; {applied})")
            }
            _ => applied,
        },
        _ => return None,
    };
    Some(note)
}

fn spawn_failed(message: String) -> Finished {
    Finished::not_started(Ending::SpawnFailed(message))
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

async fn pump(mut pipe: impl tokio::io::AsyncRead + Unpin, output: Arc<LiveOutput>) {
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => output.push(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use etcron_model::duration::HumanDuration;
    use etcron_model::size::ByteSize;

    use super::*;

    fn finished(ending: Ending, output: &str) -> Finished {
        Finished {
            ending,
            exit_code: None,
            signal: None,
            http_status: None,
            output: output.to_owned(),
            output_truncated: false,
            spawned_ms: None,
            result: None,
        }
    }

    #[test]
    fn limit_notes_say_which_limit_was_hit_when_it_can_be_told() {
        let all = Limits {
            memory: Some(ByteSize(64 << 20)),
            cpu: Some(HumanDuration::from_secs(2)),
            open_files: Some(32),
            output: None,
        };
        let note = |ending, output| limit_note(&all, &finished(ending, output));
        assert_eq!(note(Ending::Signaled(24), "").as_deref(), Some("CPU limit of 2s reached (SIGXCPU)"));
        assert!(note(Ending::Exited(152), "").is_some_and(|n| n.contains("CPU limit of 2s")));
        assert!(note(Ending::Signaled(9), "").is_some_and(|n| n.contains("may have been reached")));
        let mem = note(Ending::Exited(1), "tail: memory exhausted\n").unwrap();
        assert!(mem.starts_with("memory limit of 64MiB reached"), "{mem}");
        let files = note(Ending::Exited(7), "bash: /dev/null: Too many open files").unwrap();
        assert!(files.starts_with("open files limit of 32 reached"), "{files}");
        assert_eq!(note(Ending::Exited(3), "no idea").as_deref(), Some("limits: memory 64MiB, cpu 2s, open files 32"));
        assert_eq!(note(Ending::Exited(0), "memory exhausted"), None);
        assert_eq!(note(Ending::TimedOut, ""), None);
        // Without process limits there is nothing to say.
        assert_eq!(limit_note(&Limits::default(), &finished(Ending::Signaled(24), "")), None);
        // SIGXCPU without a CPU limit is not blamed on one.
        let memory_only = Limits { memory: Some(ByteSize(1 << 20)), ..Limits::default() };
        assert_eq!(
            limit_note(&memory_only, &finished(Ending::Signaled(24), "")).as_deref(),
            Some("limits: memory 1MiB")
        );
    }

    fn shell(command: &str, cwd: Option<&str>) -> ShellJob {
        ShellJob {
            command: command.to_owned(),
            env: BTreeMap::from([("JOB_VAR".to_owned(), "from-the-job".to_owned())]),
            cwd: cwd.map(str::to_owned),
            run_as: None,
            worker_id: "w-test".to_owned(),
            timeout: Some(Duration::from_secs(30)),
            kill_grace: Duration::from_secs(1),
            output: Arc::new(LiveOutput::new(64 * 1024)),
            limits: Limits::default(),
            network: ShellNetwork::Host,
            keeper_slot: 0,
        }
    }

    async fn run(job: ShellJob) -> Finished {
        let (_stop_tx, stop_rx) = watch::channel(None);
        run_shell(job, stop_rx, oneshot::channel().0).await
    }

    #[tokio::test]
    async fn a_task_gets_its_own_environment_and_nothing_of_the_workers() {
        // cargo runs tests with CARGO_* variables (and HOME, PATH…) in this process's environment.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let done = run(shell("env", None)).await;
        assert_eq!(done.ending, Ending::Exited(0), "{}", done.output);
        assert!(done.output.contains("JOB_VAR=from-the-job"), "{}", done.output);
        assert!(!done.output.contains("CARGO_MANIFEST_DIR"), "{}", done.output);
        let inherited = inherited_env(&["CARGO_MANIFEST_DIR".to_owned(), "ETCRON_SURELY_UNSET_42".to_owned()]);
        assert_eq!(inherited.keys().collect::<Vec<_>>(), ["CARGO_MANIFEST_DIR"]);
    }

    #[tokio::test]
    async fn a_missing_cwd_is_named_with_the_worker() {
        let done = run(shell("true", Some("/surely/not/here-42"))).await;
        assert_eq!(
            done.ending,
            Ending::SpawnFailed("cwd /surely/not/here-42 does not exist on worker w-test".to_owned())
        );
        let done = run(shell("true", Some("/etc/hostname"))).await;
        assert_eq!(
            done.ending,
            Ending::SpawnFailed("cwd /etc/hostname is not a directory on worker w-test".to_owned())
        );
    }

    #[tokio::test]
    async fn a_task_in_a_namespace_of_its_own_sees_only_its_loopback_and_it_is_up() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: making a network namespace needs root (CI runs the tests as root)");
            return;
        }
        // /proc/net/dev lists the interfaces of the reader's namespace. A connection to a port
        // nobody listens on is refused on a loopback that is up, unreachable on one that is down.
        let command = "echo \"interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\"; \
                       bash -c 'echo > /dev/tcp/127.0.0.1/1' 2>&1; true";
        let mut job = shell(command, None);
        job.network = ShellNetwork::None;
        let done = run(job).await;
        assert_eq!(done.ending, Ending::Exited(0), "{}", done.output);
        assert!(done.output.starts_with("interfaces: lo \n"), "only its own loopback:\n{}", done.output);
        assert!(done.output.contains("Connection refused"), "its loopback is up:\n{}", done.output);
    }

    #[test]
    fn rlimits_are_capped_at_the_workers_own() {
        let limits = Limits {
            memory: Some(ByteSize(64 << 20)),
            cpu: Some(HumanDuration::from_secs(5)),
            open_files: Some(u64::MAX),
            output: None,
        };
        let set = rlimits(&limits);
        assert_eq!(set[0], (Resource::RLIMIT_AS, 64 << 20, 64 << 20));
        assert_eq!(set[1], (Resource::RLIMIT_CPU, 5, 7));
        let (_, own) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(set[2], (Resource::RLIMIT_NOFILE, own, own));
        assert!(rlimits(&Limits::default()).is_empty());
    }
}
