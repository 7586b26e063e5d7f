//! Where shell tasks' sockets go (`shell_task_network`): the host's network (the default), or
//! with `"none"` a network namespace of each task's own, made between fork and exec, holding
//! nothing but its own loopback interface (brought up, so `127.0.0.1` and `::1` work inside).
//! Such a task reaches nothing outside it: not etcd, not MongoDB, not the worker's listeners,
//! not the host's loopback services, not another machine. A worker that cannot make one (not
//! root, no `CAP_SYS_ADMIN`) refuses to start ([`check`]), so tasks never run on the host's
//! network when the admin asked for none.

use std::fmt;
use std::io;

use nix::libc;

/// The setting.
pub const SETTING: &str = "shell_task_network";

/// Where a shell task's sockets go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShellNetwork {
    /// The worker host's network, as any process of the host.
    #[default]
    Host,
    /// A network namespace of the task's own, with only its loopback interface.
    None,
}

impl ShellNetwork {
    /// `host` or `none`; anything else is refused naming the setting.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "host" => Ok(Self::Host),
            "none" => Ok(Self::None),
            other => Err(format!("{SETTING}: {other:?} is neither \"host\" nor \"none\"")),
        }
    }

    /// True when each task gets a network namespace of its own.
    #[must_use]
    pub fn isolated(self) -> bool {
        self == Self::None
    }
}

impl fmt::Display for ShellNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Host => "host",
            Self::None => "none",
        })
    }
}

/// Moves the calling process into a new network namespace and brings its loopback interface
/// up. Meant for a forked child before it execs (a `pre_exec` hook): it only makes the
/// async-signal-safe calls unshare(2), socket(2), ioctl(2) and close(2), allocates nothing (an
/// error is the raw errno) and takes no lock. Needs `CAP_SYS_ADMIN`, so it runs before the
/// child gives up root.
#[allow(unsafe_code)]
pub fn enter_own_namespace() -> io::Result<()> {
    // SAFETY: plain system calls on values of this frame: `req` is a zeroed `ifreq` living
    // across both ioctls, naming "lo" NUL-terminated (the rest of the name stays zero); the
    // socket is closed on every path after it was opened.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo") {
            *slot = libc::c_char::try_from(*byte).unwrap_or_default();
        }
        let mut result = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
        if result == 0 {
            req.ifr_ifru.ifru_flags |= libc::c_short::try_from(libc::IFF_UP).unwrap_or_default();
            result = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
        }
        let error = (result != 0).then(io::Error::last_os_error);
        libc::close(fd);
        error.map_or(Ok(()), Err)
    }
}

/// At start-up, with `"none"`: makes a namespace as a task would (a short-lived `/bin/sh -c
/// exit` with the same hook), so that a worker that cannot make one refuses to start instead
/// of running tasks on the host's network. The error names the setting and what is missing.
pub fn check(network: ShellNetwork) -> Result<(), String> {
    if !network.isolated() {
        return Ok(());
    }
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "exit 0"]).stdin(std::process::Stdio::null());
    install(&mut cmd);
    let why = match cmd.status() {
        Ok(status) if status.success() => return Ok(()),
        Ok(status) => format!("a test process in it ended with {status}"),
        Err(e) => e.to_string(),
    };
    Err(format!(
        "{SETTING} = \"none\": this worker cannot make a network namespace for its shell tasks ({why}); \
         it needs to run as root or with CAP_SYS_ADMIN, or set {SETTING} = \"host\" to run them on the host's network"
    ))
}

/// Makes `cmd`'s child enter a namespace of its own before it execs (the start-up check; a
/// task's hook calls [`enter_own_namespace`] among its other steps).
#[allow(unsafe_code)]
fn install(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the hook only calls `enter_own_namespace`, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(enter_own_namespace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_host_or_none_and_anything_else_is_named() {
        assert_eq!(ShellNetwork::parse("host"), Ok(ShellNetwork::Host));
        assert_eq!(ShellNetwork::parse(" none "), Ok(ShellNetwork::None));
        assert_eq!(ShellNetwork::default(), ShellNetwork::Host);
        for bad in ["", "None", "bridge", "private"] {
            let err = ShellNetwork::parse(bad).unwrap_err();
            assert!(err.starts_with("shell_task_network: "), "{bad}: {err}");
        }
        assert_eq!(ShellNetwork::None.to_string(), "none");
        assert!(check(ShellNetwork::Host).is_ok(), "nothing to check on the host's network");
    }
}
