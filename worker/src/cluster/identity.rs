//! Who this worker is across restarts: its data dir (the record spool and journal) and its id.
//!
//! A worker restarted with the default settings must come back as the same worker, in the same
//! data dir, or the records spooled while MongoDB was unreachable would never be replayed. So:
//! - the default data dir is absolute and fixed: `$STATE_DIRECTORY/worker` under systemd's
//!   `StateDirectory=`, else `/var/lib/etcron/worker` for root, else
//!   `$XDG_STATE_HOME/etcron/worker` (`~/.local/state/etcron/worker`); `worker-{id}` instead of
//!   `worker` when the id is given, so several workers with their own ids share a host;
//! - the default id is kept in the data dir (`worker-id`, written on first start as
//!   `<hostname>-<6 random hex digits>`);
//! - one process at a time holds a data dir (an exclusive lock on `{data_dir}/lock`): a second
//!   worker pointed at it refuses to start instead of sharing the spool and the id.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read as _, Write as _};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The file in the data dir holding the worker id chosen on first start.
pub const ID_FILE: &str = "worker-id";
/// The file in the data dir a running worker holds locked (its pid inside).
pub const LOCK_FILE: &str = "lock";

/// Base directory for the default data dir, from the environment (`var`) and whether the
/// process runs as root. An error when none applies (no `HOME` for a non-root user).
pub fn default_state_dir(var: impl Fn(&str) -> Option<String>, root: bool) -> Result<PathBuf, String> {
    let absolute = |v: Option<String>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    // systemd's StateDirectory= may list several, separated by ':'; the first is ours.
    if let Some(dir) = absolute(var("STATE_DIRECTORY").and_then(|s| s.split(':').next().map(str::to_owned))) {
        return Ok(dir);
    }
    if root {
        return Ok(PathBuf::from("/var/lib/etcron"));
    }
    if let Some(dir) = absolute(var("XDG_STATE_HOME")) {
        return Ok(dir.join("etcron"));
    }
    absolute(var("HOME"))
        .map(|home| home.join(".local/state/etcron"))
        .ok_or_else(|| "data_dir: no default (neither STATE_DIRECTORY nor HOME is set); set data_dir".to_owned())
}

/// The data dir when none is configured: `{state}/worker`, or `{state}/worker-{id}` for a
/// worker given its id.
#[must_use]
pub fn default_data_dir(state: &Path, worker_id: Option<&str>) -> PathBuf {
    state.join(worker_id.map_or_else(|| "worker".to_owned(), |id| format!("worker-{id}")))
}

/// `hostname` with anything an id may not hold replaced by `-`.
#[must_use]
pub fn id_safe_host(hostname: &str) -> String {
    let host: String =
        hostname.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' }).collect();
    let host = host.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let host: String = host.chars().take(100).collect();
    if host.is_empty() {
        "worker".to_owned()
    } else {
        host
    }
}

/// The id kept in `dir`, or a new `<host>-<6 hex>` written there on first start. Two processes
/// starting at once agree: the file is created whole (linked from a temporary file) or not at all.
pub fn stored_or_new_id(dir: &Path, host: &str) -> Result<String, String> {
    let named = |e: std::io::Error| format!("data_dir {}: {e}", dir.display());
    let path = dir.join(ID_FILE);
    if let Some(id) = read_id(&path)? {
        return Ok(id);
    }
    std::fs::create_dir_all(dir).map_err(named)?;
    let id = format!("{}-{:06x}", id_safe_host(host), rand::random::<u32>() & 0xff_ffff);
    let tmp = dir.join(format!(".{ID_FILE}.{}", std::process::id()));
    std::fs::write(&tmp, format!("{id}\n")).map_err(named)?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            read_id(&path)?.ok_or_else(|| format!("{}: empty after another process wrote it", path.display()))
        }
        Err(e) => Err(named(e)),
    }
}

fn read_id(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let id = text.trim();
            etcron_model::keys::validate_id(id)
                .map(|()| Some(id.to_owned()))
                .map_err(|e| format!("{}: the stored worker {e}; fix or remove the file", path.display()))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A data dir held by this process: released when dropped (or when the process ends, however).
#[derive(Debug)]
pub struct DataDirLock {
    _file: Flock<File>,
}

/// Takes `dir` for this process, creating it; refuses when another live process holds it,
/// naming that process's pid.
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock, String> {
    let named = |e: std::io::Error| format!("data_dir {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(named)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(LOCK_FILE))
        .map_err(named)?;
    let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => held,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(format!(
                "data_dir {} is in use by another worker (pid {}); give each worker its own data_dir",
                dir.display(),
                holder.trim()
            ));
        }
        Err((_, e)) => return Err(named(e.into())),
    };
    file.set_len(0).map_err(named)?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(named)?;
    Ok(DataDirLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn the_default_data_dir_is_absolute_and_does_not_depend_on_the_current_directory() {
        let state = |vars: &[(&str, &str)], root| default_state_dir(env(vars), root);
        assert_eq!(
            state(&[("STATE_DIRECTORY", "/var/lib/etcron:/x"), ("HOME", "/root")], true).unwrap(),
            Path::new("/var/lib/etcron")
        );
        assert_eq!(state(&[("STATE_DIRECTORY", "/srv/state")], false).unwrap(), Path::new("/srv/state"));
        assert_eq!(state(&[("HOME", "/root")], true).unwrap(), Path::new("/var/lib/etcron"));
        assert_eq!(state(&[("XDG_STATE_HOME", "/h/st"), ("HOME", "/h")], false).unwrap(), Path::new("/h/st/etcron"));
        assert_eq!(state(&[("HOME", "/home/ops")], false).unwrap(), Path::new("/home/ops/.local/state/etcron"));
        // Relative values are not a fixed place: skipped.
        assert_eq!(
            state(&[("STATE_DIRECTORY", "rel"), ("XDG_STATE_HOME", "rel"), ("HOME", "/h")], false).unwrap(),
            Path::new("/h/.local/state/etcron")
        );
        let err = state(&[], false).unwrap_err();
        assert!(err.starts_with("data_dir:"), "{err}");
        assert_eq!(default_data_dir(Path::new("/var/lib/etcron"), None), Path::new("/var/lib/etcron/worker"));
        assert_eq!(
            default_data_dir(Path::new("/var/lib/etcron"), Some("batch-1")),
            Path::new("/var/lib/etcron/worker-batch-1")
        );
    }

    #[test]
    fn the_id_chosen_on_first_start_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("worker");
        let first = stored_or_new_id(&data, "vm_16.example").unwrap();
        assert!(first.starts_with("vm-16.example-") && first.len() == "vm-16.example-".len() + 6, "{first}");
        etcron_model::keys::validate_id(&first).unwrap();
        assert_eq!(stored_or_new_id(&data, "other-host").unwrap(), first);
        assert_eq!(std::fs::read_to_string(data.join(ID_FILE)).unwrap(), format!("{first}\n"));
        std::fs::write(data.join(ID_FILE), "bad id\n").unwrap();
        let err = stored_or_new_id(&data, "h").unwrap_err();
        assert!(err.contains("worker-id") && err.contains("must match"), "{err}");
        assert_eq!(id_safe_host("_-"), "worker");
        assert_eq!(id_safe_host("-a b"), "a-b");
    }

    #[test]
    fn a_data_dir_is_held_by_one_process_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("w");
        let held = lock_data_dir(&data).unwrap();
        let err = lock_data_dir(&data).unwrap_err();
        assert!(err.contains("in use by another worker") && err.contains(&std::process::id().to_string()), "{err}");
        drop(held);
        lock_data_dir(&data).unwrap();
    }
}
