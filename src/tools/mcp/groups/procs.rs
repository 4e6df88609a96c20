//! Processes as /proc shows them, and the signal that ends a group.

/// A process as `/proc/PID/stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Proc {
    pub(super) pid: u32,
    pub(super) pgrp: u32,
    pub(super) start: u64,
    /// A zombie or dead process runs nothing (its parent has not reaped it yet).
    pub(super) exited: bool,
}

/// This process's pid namespace (the inode `/proc/self/ns/pid` links to).
pub(super) fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let id: String = link
        .to_str()?
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    (!id.is_empty()).then_some(id)
}

#[cfg(not(unix))]
pub(super) fn kill_group(_pgid: u32) -> bool {
    false
}

#[cfg(unix)]
pub(super) fn kill_group(pgid: u32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is
    // touched.
    unsafe { libc::kill(-pgid, libc::SIGKILL) == 0 }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of start times.
pub(super) fn ticks_per_s() -> Option<f64> {
    // SAFETY: sysconf(3) reads a constant; no memory is touched.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (n > 0).then_some(n as f64)
}

/// This boot's id: start times count from the boot.
pub(super) fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|s| !s.is_empty())
}

pub(super) fn proc_stat(pid: u32) -> Option<Proc> {
    parse_stat(
        pid,
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// `/proc/PID/stat`: the name in parentheses may hold anything, so fields count from the
/// last `)`: state (3rd), pgrp (5th), starttime (22nd).
pub(super) fn parse_stat(pid: u32, text: &str) -> Option<Proc> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?;
    Some(Proc {
        pid,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        exited: matches!(*state, "Z" | "X" | "x"),
    })
}

pub(super) fn all_procs() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .collect()
}
