//! A shell task never outlives its worker's claim. Each shell task runs under a **keeper**: the
//! worker's own binary re-executed (`etcron-worker __keep …`, shown as `etcron-keeper`), the
//! leader of the task's process group, which starts `/bin/sh` as its child and passes its exit
//! status on as its own. The keeper ends the task's whole tree — its process group and every
//! descendant orphaned to it (it is their subreaper, so `setsid` does not escape it) — when
//!
//! - **the worker is gone** (crashed, SIGKILLed, OOM-killed: the keeper holds the read end of a
//!   pipe whose only write end is the worker's, and sees end-of-file), or
//! - **the worker's session deadline passed** (a frozen or stopped worker: the worker writes the
//!   instant until which its lease certainly lives — the send time of its last acknowledged
//!   keep-alive plus the TTL, on `CLOCK_MONOTONIC` — into a shared page the keeper reads). A
//!   process serving several namespaces has a session in each: each node writes its own
//!   [`Slot`] of the page, and a task's keeper reads its node's slot alone.
//!
//! The rule, with its clock assumption: etcd expires the session no earlier than that deadline
//! (it measures the TTL from when the keep-alive *arrived*), and a survivor starts a failover
//! rerun only after the expiry plus its loss grace; the keeper kills within 250 ms of the
//! deadline. So the lost attempt's processes are gone before the rerun starts, as long as the
//! worker's monotonic clock does not run slower than etcd's by more than the grace over one TTL.
//!
//! The keeper runs as the worker's user (root on a worker switching users) and switches the
//! shell to the task's account, limits and all, so a task cannot signal or trace its keeper.
//! Nothing it does touches etcd: it only watches the worker.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use nix::libc;
use nix::sys::resource::Resource;
use nix::unistd::{Gid, Uid};

use crate::tasks::child::ChildSetup;
use crate::tasks::netns::ShellNetwork;
use crate::tasks::run_as::Account;

/// The first argument that makes `etcron-worker` a keeper.
pub const KEEP: &str = "__keep";
/// How often a keeper looks at the session deadline at most.
const LOOK: Duration = Duration::from_millis(250);
/// A keeper's exit code when it ended the task because its worker was gone or frozen (nobody
/// reads it but a worker that wakes up late).
const ENDED: i32 = 137;

/// The worker's side: the pipe keepers watch and the page with the session deadline.
struct Supervision {
    /// Read end, handed to every keeper (the write end is only the worker's, never closed).
    alive_read: OwnedFd,
    _alive_write: OwnedFd,
    /// The shared page's file, handed to every keeper.
    deadline_fd: OwnedFd,
    /// The page's slots, mapped in the worker.
    deadline: &'static [AtomicU64; SLOTS],
    /// `etcron-keeper` beside the worker's binary; `None`: the worker's own binary (`__keep`).
    program: Option<std::path::PathBuf>,
}

static SUPERVISION: OnceLock<Supervision> = OnceLock::new();

/// Turns supervision on in this process (the worker's `main`, once, before tasks run): from
/// then on shell tasks start under a keeper. Unit tests of the executor run without.
pub fn enable() -> std::io::Result<()> {
    if SUPERVISION.get().is_some() {
        return Ok(());
    }
    let (alive_read, alive_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (deadline_fd, deadline) = shared_page()?;
    // The two descriptors every keeper needs are inherited as they are, so a keeper starts
    // with no code run between fork and exec (`posix_spawn`: a fork of a worker holding
    // thousands of runs copies its page tables, milliseconds per task). Only keepers are
    // spawned with them, and each sets them close-on-exec before it starts the task; the
    // pipe's write end, whose closing tells keepers the worker is gone, stays the worker's.
    for fd in [alive_read.as_raw_fd(), deadline_fd.as_raw_fd()] {
        clear_cloexec(fd)?;
    }
    let program = installed_keeper();
    if program.is_none() {
        tracing::warn!("no etcron-keeper next to the worker's binary: each shell task's keeper is the worker's own binary, about three times the cost to start (install etcron-keeper beside etcron-worker)");
    }
    let _ = SUPERVISION.set(Supervision { alive_read, _alive_write: alive_write, deadline_fd, deadline, program });
    Ok(())
}

/// The `etcron-keeper` program beside the worker's binary, when installed: a small binary
/// starts in about a third of the worker's time, once per shell task.
fn installed_keeper() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let keeper = exe.parent()?.join(PROGRAM);
    keeper.is_file().then_some(keeper)
}

/// The keeper's own program name.
pub const PROGRAM: &str = "etcron-keeper";

#[allow(unsafe_code)]
fn clear_cloexec(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl(2) on a descriptor this process owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether shell tasks start under a keeper in this process.
#[must_use]
pub fn enabled() -> bool {
    SUPERVISION.get().is_some()
}

/// Session deadlines the shared page holds: one 8-byte slot each in its 4096 bytes.
pub const SLOTS: usize = 4096 / 8;

/// Which slots are taken (by a node of this process).
static TAKEN: std::sync::Mutex<[bool; SLOTS]> = std::sync::Mutex::new([false; SLOTS]);

/// A node's slot of the shared page: its session deadline, read by the keepers of its tasks
/// alone. Given back (and cleared: no deadline) when the node's context is dropped.
#[derive(Debug)]
pub struct Slot(usize);

impl Slot {
    /// The first free slot; `None` when all [`SLOTS`] are taken.
    #[must_use]
    pub fn take() -> Option<Self> {
        let mut taken = TAKEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let free = taken.iter().position(|t| !t)?;
        taken[free] = true;
        Some(Self(free))
    }

    #[must_use]
    pub fn index(&self) -> usize {
        self.0
    }

    /// Publishes the instant until which the node's session lease certainly lives.
    pub fn set_deadline(&self, until: tokio::time::Instant) {
        if let Some(s) = SUPERVISION.get() {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let at = monotonic_ns().saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX));
            s.deadline[self.0].store(at, Ordering::Release);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(s) = SUPERVISION.get() {
            s.deadline[self.0].store(0, Ordering::Release);
        }
        TAKEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[self.0] = false;
    }
}

/// The worker's session deadline as its keepers see it, and how often it lapsed: a run whose
/// task was SIGKILLed while a lapse began or lasted was ended by its keeper, and is recorded
/// `lost` (then rerun per `on_worker_loss`) however soon a late keep-alive moves the deadline
/// on. Asking only "has the deadline passed?" when the run is read back misses a lapse a
/// renewal has already closed, and records the keeper's kill as a failure nobody reruns.
#[derive(Debug, Default)]
pub struct SessionDeadline(std::sync::Mutex<Lapses>);

#[derive(Debug, Default, Clone, Copy)]
struct Lapses {
    until: Option<tokio::time::Instant>,
    /// Deadlines that passed before the next one was published.
    count: u64,
}

/// A point in the deadline's history: what `SessionDeadline::lapsed_since` compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LapseMark(u64);

impl SessionDeadline {
    /// Publishes `until` through `keepers` (the shared page, or the simulation's tasks). The new
    /// deadline is handed on first and the old one judged after: a keeper that read the old one
    /// and acted on it did so before the hand-on, so by then the old one had passed and the
    /// lapse is counted.
    pub fn publish(&self, until: tokio::time::Instant, keepers: impl FnOnce(tokio::time::Instant)) {
        let mut lapses = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = lapses.until.replace(until);
        keepers(until);
        if old.is_some_and(|old| tokio::time::Instant::now() >= old) {
            lapses.count += 1;
        }
    }

    /// Now, for `lapsed_since` once the run ends (taken before its task starts).
    pub fn mark(&self) -> LapseMark {
        LapseMark(self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).count)
    }

    /// Whether the deadline has passed now (keepers are ending their tasks).
    pub fn passed(&self) -> bool {
        let lapses = *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lapses.until.is_some_and(|until| tokio::time::Instant::now() >= until)
    }

    /// Whether the deadline passed at any instant since `mark`: it lapsed and was renewed, or it
    /// has passed now.
    pub fn lapsed_since(&self, mark: LapseMark) -> bool {
        self.mark() != mark || self.passed()
    }
}

/// A shared page (a memfd, mapped) of [`SLOTS`] deadlines: its descriptor and the mapped slots.
#[allow(unsafe_code)]
fn shared_page() -> std::io::Result<(OwnedFd, &'static [AtomicU64; SLOTS])> {
    // SAFETY: memfd_create with a NUL-terminated name; the descriptor is owned at once. The
    // mapping is of a file sized to one page (4096 bytes, zeroed), never unmapped (it lives as
    // long as the worker), page-aligned, so SLOTS AtomicU64s from its start are aligned and
    // valid for 'static.
    unsafe {
        let fd = libc::memfd_create(c"etcron-session-deadline".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd);
        if libc::ftruncate(fd.as_raw_fd(), 4096) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let page = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        );
        if page == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok((fd, &*page.cast::<[AtomicU64; SLOTS]>()))
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (what `Instant` measures on Linux, readable by another
/// process).
#[allow(unsafe_code)]
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(2) with a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000) + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// A command that runs `/bin/sh -c command` under a keeper set up as `setup` says; `None` when
/// supervision is off (the caller sets the child up itself).
#[must_use]
pub fn command(
    command: &str,
    setup: &ChildSetup,
    network: ShellNetwork,
    slot: usize,
) -> Option<tokio::process::Command> {
    let s = SUPERVISION.get()?;
    let fds = (s.alive_read.as_raw_fd(), (s.deadline_fd.as_raw_fd(), slot));
    let mut cmd = match &s.program {
        Some(keeper) => tokio::process::Command::new(keeper),
        None => {
            let mut own = tokio::process::Command::new("/proc/self/exe");
            own.arg(KEEP);
            own
        }
    };
    cmd.arg0("etcron-keeper").args(encode(fds, setup, network));
    cmd.arg("--").arg("/bin/sh").arg("-c").arg(command);
    Some(cmd)
}

/// The keeper's arguments after [`KEEP`]: `ALIVE_FD DEADLINE_FD:SLOT UID GID GROUPS RLIMITS NET`,
/// `-` for none, lists comma-separated, a limit `RESOURCE:SOFT:HARD`, `NET` `none` for a
/// network namespace of the task's own (the keeper enters it before it starts the task).
/// `DEADLINE_FD` alone reads slot 0.
fn encode(
    (alive, (deadline, slot)): (RawFd, (RawFd, usize)),
    setup: &ChildSetup,
    network: ShellNetwork,
) -> Vec<String> {
    let list = |items: Vec<String>| if items.is_empty() { "-".to_owned() } else { items.join(",") };
    let (uid, gid, groups) = match &setup.account {
        Some(a) => (a.uid.to_string(), a.gid.to_string(), list(a.groups.iter().map(ToString::to_string).collect())),
        None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
    };
    let rlimits = list(setup.rlimits.iter().map(|(r, s, h)| format!("{}:{s}:{h}", *r as i32)).collect());
    let net = if network.isolated() { "none" } else { "-" };
    vec![alive.to_string(), format!("{deadline}:{slot}"), uid, gid, groups, rlimits, net.to_owned()]
}

/// What a keeper is told: the pipe, the page and its slot, the setup, the network, and the
/// program with its arguments (after `--`).
type Decoded = (RawFd, (RawFd, usize), ChildSetup, ShellNetwork, Vec<OsString>);

/// The keeper's arguments read back.
fn decode(args: &[OsString]) -> Result<Decoded, String> {
    let text =
        |i: usize| args.get(i).and_then(|a| a.to_str()).ok_or_else(|| format!("argument {i} missing or not text"));
    let num = |i: usize| text(i)?.parse::<i64>().map_err(|e| format!("argument {i}: {e}"));
    let list = |i: usize| -> Result<Vec<&str>, String> {
        let t = text(i)?;
        Ok(if t == "-" { Vec::new() } else { t.split(',').collect() })
    };
    let alive = num(0)?;
    let (deadline, slot) = match text(1)?.split_once(':') {
        Some((fd, slot)) => (fd, slot.parse::<usize>().map_err(|e| format!("argument 1: slot: {e}"))?),
        None => (text(1)?, 0),
    };
    let deadline = deadline.parse::<i64>().map_err(|e| format!("argument 1: {e}"))?;
    if slot >= SLOTS {
        return Err(format!("argument 1: slot {slot} is past the page's {SLOTS}"));
    }
    let account = match (text(2)?, text(3)?) {
        ("-", _) | (_, "-") => None,
        (uid, gid) => Some(Account {
            uid: Uid::from_raw(uid.parse().map_err(|e| format!("uid: {e}"))?),
            gid: Gid::from_raw(gid.parse().map_err(|e| format!("gid: {e}"))?),
            groups: list(4)?
                .into_iter()
                .map(|g| g.parse().map(Gid::from_raw).map_err(|e| format!("groups: {e}")))
                .collect::<Result<_, _>>()?,
            name: String::new(),
            home: String::new(),
        }),
    };
    let mut rlimits = Vec::new();
    for item in list(5)? {
        let mut parts = item.split(':').map(str::parse::<u64>);
        let (Some(Ok(r)), Some(Ok(soft)), Some(Ok(hard))) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("rlimit {item:?}"));
        };
        rlimits.push((resource(r)?, soft, hard));
    }
    let network = match text(6)? {
        "none" => ShellNetwork::None,
        "-" => ShellNetwork::Host,
        other => return Err(format!("network {other:?}")),
    };
    if args.get(7).map(OsString::as_os_str) != Some(OsStr::new("--")) || args.len() < 9 {
        return Err("no program after --".to_owned());
    }
    let fd = |n: i64| RawFd::try_from(n).map_err(|e| e.to_string());
    Ok((fd(alive)?, (fd(deadline)?, slot), ChildSetup { rlimits, account }, network, args[8..].to_vec()))
}

fn resource(n: u64) -> Result<Resource, String> {
    [Resource::RLIMIT_AS, Resource::RLIMIT_CPU, Resource::RLIMIT_NOFILE]
        .into_iter()
        .find(|r| *r as u64 == n)
        .ok_or_else(|| format!("resource {n}"))
}

/// The keeper's `main`: `args` are what follows [`KEEP`]. Never returns.
#[allow(unsafe_code)]
pub fn keep(args: &[OsString]) -> ! {
    let (alive, (deadline_fd, slot), setup, network, program) = match decode(args) {
        Ok(d) => d,
        Err(e) => fail(&format!("bad arguments: {e}")),
    };
    // The task's own network namespace, entered by the keeper (its only process so far), so
    // the worker starts keepers without code between fork and exec.
    if network.isolated() {
        if let Err(e) = crate::tasks::netns::enter_own_namespace() {
            fail(&format!(
                "entering a network namespace of the task's own ({} = \"none\") failed: {e}",
                crate::tasks::netns::SETTING
            ));
        }
    }
    let me = nix::unistd::getpid();
    // SAFETY: prctl and signal dispositions of this (single-threaded) process; the page is a
    // one-page shared mapping of the worker's memfd, read-only, never unmapped.
    let deadline: &AtomicU64 = unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        for fd in [alive, deadline_fd] {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        let page = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, deadline_fd, 0);
        if page == libc::MAP_FAILED {
            fail(&format!("mapping the session deadline: {}", std::io::Error::last_os_error()));
        }
        // `slot` < SLOTS (checked by `decode`): within the page.
        &(*page.cast::<[AtomicU64; SLOTS]>())[slot]
    };
    let mut shell = std::process::Command::new(&program[0]);
    shell.args(&program[1..]);
    // SAFETY: runs in the forked child before exec: signal(2), prctl(2), getppid(2), then the
    // setup shared with the worker's own spawns (setrlimit, setgroups, setgid, setuid) on values
    // decoded before the fork; nothing allocates.
    unsafe {
        shell.pre_exec(move || {
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(sig, libc::SIG_DFL);
            }
            // The shell dies with its keeper, should the keeper be killed alone.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != me.as_raw() {
                libc::_exit(ENDED);
            }
            crate::tasks::child::set_up(&setup.rlimits, setup.account.as_ref())
        });
    }
    let child = match shell.spawn() {
        Ok(c) => c,
        Err(e) => fail(&format!("spawning {}: {e}", program[0].to_string_lossy())),
    };
    let child_pid = i32::try_from(child.id()).unwrap_or(0);
    drop(child);
    // The task's output pipe is the task's: the keeper lets go of it.
    if let Ok(null) = std::fs::File::options().write(true).open("/dev/null") {
        // SAFETY: dup2(2) of a descriptor this process holds onto its own stdout and stderr.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
    watch_over(child_pid, me.as_raw(), alive, deadline)
}

/// Passes the shell's exit status on once it ends, or ends its whole tree when the worker is
/// gone (end-of-file on `alive`) or the session `deadline` has passed; looks at least every
/// `LOOK`.
#[allow(unsafe_code)]
fn watch_over(child_pid: i32, me: i32, alive: RawFd, deadline: &AtomicU64) -> ! {
    // SAFETY: pidfd_open(2) on the child just spawned (not reaped yet, so the pid is its own).
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child_pid, 0) };
    let pidfd = RawFd::try_from(pidfd).unwrap_or(-1);
    loop {
        if let Some(status) = reap(child_pid) {
            pass_on(status);
        }
        let until = deadline.load(Ordering::Acquire);
        let now = monotonic_ns();
        if until != 0 && now >= until {
            end_tree(me);
        }
        let wait = if until == 0 { LOOK } else { LOOK.min(Duration::from_nanos(until - now)) };
        let mut fds = [
            libc::pollfd { fd: alive, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: pidfd, events: libc::POLLIN, revents: 0 },
        ];
        let n = if pidfd >= 0 { 2 } else { 1 };
        // SAFETY: poll(2) on an array of `n` initialised pollfds living across the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), n, i32::try_from(wait.as_millis()).unwrap_or(250).max(1)) };
        if ready > 0 && fds[0].revents != 0 {
            // End-of-file: the worker is gone.
            end_tree(me);
        }
    }
}

/// Reaps every child that ended (orphans included); the shell's status once it ended.
#[allow(unsafe_code)]
fn reap(shell: i32) -> Option<i32> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) with a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == shell {
            found = Some(status);
        }
    }
}

/// Exits as the shell did: its exit code, or the signal that killed it.
#[allow(unsafe_code)]
fn pass_on(status: i32) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: default disposition, unblocked, then the signal to itself.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut set);
            libc::sigaddset(&raw mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
        }
    }
    std::process::exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { ENDED });
}

/// Kills every descendant (the children, then whatever is orphaned to the keeper as they die,
/// down the tree), then the process group with the keeper itself.
#[allow(unsafe_code)]
fn end_tree(me: i32) -> ! {
    for _ in 0..64 {
        let children = children_of(me);
        if children.is_empty() {
            break;
        }
        for pid in children {
            // SAFETY: kill(2) of a child of this process (it is not reaped yet: its pid is its own).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
        let _ = reap(0);
    }
    // SAFETY: kill(2) of this process's own group (the keeper leads it): what is left of the task.
    unsafe { libc::kill(-me, libc::SIGKILL) };
    std::process::exit(ENDED)
}

/// The pids whose parent is `pid` (any of its threads).
fn children_of(pid: i32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().filter_map(Result::ok);
    let lists: Vec<String> = tasks.filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok()).collect();
    if !lists.is_empty() {
        return lists.iter().flat_map(|l| l.split_whitespace()).filter_map(|p| p.parse().ok()).collect();
    }
    // Without CONFIG_PROC_CHILDREN: every process's parent, from /proc/N/stat.
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|n| {
            let stat = std::fs::read_to_string(format!("/proc/{n}/stat")).unwrap_or_default();
            // The fields after the command (in parentheses, which may hold anything): state, ppid.
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok()) == Some(pid)
        })
        .collect()
}

fn fail(message: &str) -> ! {
    eprintln!("etcron keeper: {message}");
    std::process::exit(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lapse a late keep-alive already closed is still seen by a run that spanned it; a run
    /// that started after it, or one during which the deadline never passed, sees none.
    #[tokio::test(start_paused = true)]
    async fn a_renewed_lapse_is_still_a_lapse() {
        let deadline = SessionDeadline::default();
        let now = tokio::time::Instant::now();
        let seen = std::cell::Cell::new(None);
        deadline.publish(now + Duration::from_secs(3), |until| seen.set(Some(until)));
        assert_eq!(seen.get(), Some(now + Duration::from_secs(3)), "the keepers are handed the deadline");
        let spanning = deadline.mark();
        tokio::time::advance(Duration::from_secs(2)).await;
        deadline.publish(now + Duration::from_secs(5), |_| {});
        assert!(!deadline.lapsed_since(spanning), "renewed in time: no lapse");
        tokio::time::advance(Duration::from_millis(3_100)).await;
        assert!(deadline.lapsed_since(spanning), "the deadline has passed now");
        deadline.publish(tokio::time::Instant::now() + Duration::from_secs(3), |_| {});
        assert!(deadline.lapsed_since(spanning), "renewed after it passed: the run spanned a lapse");
        let after = deadline.mark();
        assert!(!deadline.lapsed_since(after), "a run started after the renewal spanned none");
    }

    #[test]
    fn arguments_round_trip() {
        let setup = ChildSetup {
            rlimits: vec![(Resource::RLIMIT_AS, 1 << 30, 1 << 30), (Resource::RLIMIT_CPU, 5, 65)],
            account: Some(Account {
                uid: Uid::from_raw(70_001),
                gid: Gid::from_raw(70_001),
                groups: vec![Gid::from_raw(4), Gid::from_raw(27)],
                name: String::new(),
                home: String::new(),
            }),
        };
        let mut args: Vec<OsString> =
            encode((7, (9, 3)), &setup, ShellNetwork::None).into_iter().map(OsString::from).collect();
        args.extend(["--", "/bin/sh", "-c", "echo hi"].map(OsString::from));
        let (alive, deadline, back, network, program) = decode(&args).unwrap();
        assert_eq!((alive, deadline, &back, network, program.len()), (7, (9, 3), &setup, ShellNetwork::None, 3));
        let none = ChildSetup::default();
        let mut args: Vec<OsString> =
            encode((3, (4, 0)), &none, ShellNetwork::Host).into_iter().map(OsString::from).collect();
        assert_eq!(args[2..], ["-", "-", "-", "-", "-"].map(OsString::from));
        assert!(decode(&args).unwrap_err().contains("no program"));
        args.extend(["--", "/bin/true"].map(OsString::from));
        let decoded = decode(&args).unwrap();
        assert_eq!((decoded.1, decoded.2, decoded.3), ((4, 0), none, ShellNetwork::Host));
        // A descriptor alone reads slot 0; a slot past the page is refused.
        args[1] = OsString::from("4");
        assert_eq!(decode(&args).unwrap().1, (4, 0));
        args[1] = OsString::from(format!("4:{SLOTS}"));
        assert!(decode(&args).unwrap_err().contains("past the page"));
    }

    /// Each node takes a slot of its own; a dropped node's slot is free again.
    #[test]
    fn slots_are_each_nodes_own() {
        let (a, b) = (Slot::take().unwrap(), Slot::take().unwrap());
        assert_ne!(a.index(), b.index());
        let freed = a.index();
        assert!(TAKEN.lock().unwrap()[freed]);
        drop(a);
        assert!(!TAKEN.lock().unwrap()[freed], "given back");
        assert!(TAKEN.lock().unwrap()[b.index()]);
    }

    #[test]
    fn children_are_found_by_their_parent() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(children_of(me).contains(&i32::try_from(child.id()).unwrap()));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
