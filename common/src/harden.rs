//! What a master or worker does to itself at start so that other processes of its uid (a
//! worker's shell tasks, when they share it) cannot read it: it turns itself non-dumpable, and
//! takes its credentials out of the environment block the kernel shows in `/proc/<pid>/environ`.
//!
//! Non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`): the kernel makes `/proc/<pid>/` of the process
//! root's (`environ`, `mem`, `maps`, `fd/`, …) and refuses `ptrace` to anyone without
//! `CAP_SYS_PTRACE`, so a process of the same uid reads none of it; no core dumps are written.
//! Children get the flag back when they `exec` (tasks are ordinary, dumpable processes).
//!
//! `std::env::remove_var` alone would not do: `/proc/<pid>/environ` shows the memory the kernel
//! put the environment in at `exec`, not libc's list of variables. So the values are also
//! overwritten there, through `/proc/self/mem` (no `unsafe`: the kernel writes, at the bounds it
//! reports in `/proc/self/stat`). Nothing reads those variables after the settings are resolved.

use std::io::{Read, Seek, SeekFrom, Write};

/// Variables that hold credentials: removed from the process's environment once read.
pub const CREDENTIAL_VARS: [&str; 3] = ["ETCRON_ETCD_PASSWORD", "ETCRON_MONGODB_URI", "ETCRON_API_TOKEN"];

/// Makes the process non-dumpable and scrubs [`CREDENTIAL_VARS`] from its environment. Call it
/// once the settings are resolved and **before any thread is started** (`remove_var` is not
/// thread-safe). An error says what did not hold; the caller decides whether to go on.
pub fn harden_process() -> Result<(), String> {
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("prctl(PR_SET_DUMPABLE, 0) failed: {e}"))?;
    scrub_environment(&CREDENTIAL_VARS)
}

/// Removes `names` from the environment and overwrites their values (with NUL bytes) in the
/// original environment block, so `/proc/self/environ` no longer shows them.
pub fn scrub_environment(names: &[&str]) -> Result<(), String> {
    let present: Vec<&str> = names.iter().copied().filter(|n| std::env::var_os(n).is_some()).collect();
    if present.is_empty() {
        return Ok(());
    }
    for name in &present {
        std::env::remove_var(name);
    }
    let (start, end) = env_bounds()?;
    let mut mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .map_err(|e| format!("opening /proc/self/mem to scrub the environment failed: {e}"))?;
    let mut block = vec![0u8; usize::try_from(end.saturating_sub(start)).unwrap_or(0)];
    mem.seek(SeekFrom::Start(start))
        .and_then(|_| mem.read_exact(&mut block))
        .map_err(|e| format!("reading the environment block failed: {e}"))?;
    let scrubbed = scrub_block(&block, &present);
    if scrubbed != block {
        mem.seek(SeekFrom::Start(start))
            .and_then(|_| mem.write_all(&scrubbed))
            .map_err(|e| format!("overwriting the environment block failed: {e}"))?;
    }
    Ok(())
}

/// `env_start` and `env_end` of `/proc/self/stat` (fields 50 and 51, counted from 1).
fn env_bounds() -> Result<(u64, u64), String> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| format!("reading /proc/self/stat: {e}"))?;
    // The command name (field 2) may hold spaces: count from the last ')', after which field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or("/proc/self/stat: no command name")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    match (field(50), field(51)) {
        (Some(start), Some(end)) if start < end => Ok((start, end)),
        _ => Err("/proc/self/stat: no environment bounds (kernel older than 3.5?)".to_owned()),
    }
}

/// The block with the value of each `NAME=value` entry whose name is in `names` replaced by NUL
/// bytes (same length: the block is memory the process does not own the layout of).
#[must_use]
pub fn scrub_block(block: &[u8], names: &[&str]) -> Vec<u8> {
    let mut out = block.to_vec();
    let mut offset = 0;
    for entry in block.split(|&b| b == 0) {
        let hit =
            names.iter().any(|n| entry.len() > n.len() && entry.starts_with(n.as_bytes()) && entry[n.len()] == b'=');
        if hit {
            let name_len = entry.iter().position(|&b| b == b'=').unwrap_or(entry.len());
            for byte in &mut out[offset + name_len + 1..offset + entry.len()] {
                *byte = 0;
            }
        }
        offset += entry.len() + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_values_are_blanked() {
        let block =
            b"PATH=/bin\0ETCRON_ETCD_PASSWORD=hunter2\0ETCRON_ETCD_PASSWORD_FILE=/x\0X=ETCRON_ETCD_PASSWORD=y\0";
        let out = scrub_block(block, &["ETCRON_ETCD_PASSWORD"]);
        assert_eq!(out.len(), block.len());
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains("hunter2"), "{text:?}");
        assert!(
            text.contains("PATH=/bin\0ETCRON_ETCD_PASSWORD=\0\0\0\0\0\0\0\0ETCRON_ETCD_PASSWORD_FILE=/x\0"),
            "{text:?}"
        );
        assert!(text.ends_with("X=ETCRON_ETCD_PASSWORD=y\0"), "{text:?}");
    }

    #[test]
    fn the_environment_bounds_are_read() {
        let (start, end) = env_bounds().unwrap();
        assert!(start < end);
    }
}
