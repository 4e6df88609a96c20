//! The process groups of the stdio MCP servers a brain runs, kept on disk so that none
//! outlives a SIGKILL of brain for longer than the next start (SPEC §12: servers end with
//! the server).
//!
//! Each server is its own process group (see [`super::stdio`]). `PR_SET_PDEATHSIG` kills
//! the server itself the moment brain dies, but not what it started: `npx` runs `node`, a
//! shell runs `cmd &`, and those are re-parented to init and run on. Neither a subreaper
//! (the orphans go to init once brain is gone) nor the death signal (not inherited by a
//! fork) reaches them. Their group does, as long as they stay in it: so every running group
//! is written to a file of this brain's own, in a directory beside the database, and a
//! brain that starts ([`Groups::reap_left_behind`]) kills the groups of every file whose
//! brain is gone, then removes the file. A process that leaves its group (`setsid`, a
//! daemon) is out of reach, as it is of any kill brain could send.
//!
//! A record names a group by its id, its leader's start time (`/proc/PID/stat`) and the
//! last time brain heard from the server (every answer, at most once a second; every
//! second while it has not answered yet, as a slow start may start its real server late),
//! all in clock ticks since boot; a file names its brain by pid and start time, and the boot it
//! ran in. A reused pid is never taken for the one recorded: a group is killed only if its
//! leader is the recorded process, or is gone and the group still holds a process started
//! between the leader's start and the last time heard. While brain lives the leader's pid
//! cannot be given again (brain has not reaped it), so a group that reuses it was made
//! after brain died, of processes all started after that: after the last time heard. Files are
//! written whole (a temporary file renamed over the old one); a SIGKILL leaves the page
//! cache to the next start, so they need no fsync. Linux only (it reads /proc); elsewhere
//! nothing is recorded.
//!
//! A record says what to SIGKILL, so only a private one is trusted: the directory is made
//! 0700 and used only while it is this user's and no one else can write in it, files are
//! opened without following links and read only if regular (a FIFO planted there would
//! block the start). A brain in another pid namespace sharing the directory (a container
//! with the data volume) cannot be told alive or dead from here, so its files are left to
//! it: a file names its brain's pid namespace too.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use private::{check_private, make_private_dir, open_regular, write_private};
use procs::{Proc, all_procs, boot_id, kill_group, pid_namespace, proc_stat, ticks_per_s};

mod private;
mod procs;
#[cfg(all(test, target_os = "linux"))]
mod tests;

/// The most of a record file read: a few hundred servers' lines.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// How stale a group's last answer may get before an answer rewrites the file, and how
/// often a server that has not answered yet is vouched for ([`Groups::starting`]).
pub const SEEN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// One recorded group: its leader's start, and the last time heard from it (clock ticks since
/// boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    start: u64,
    seen: u64,
}

/// A running group's record, and whether the server has answered yet.
#[derive(Clone, Copy, Debug)]
struct Live {
    record: Record,
    answered: bool,
}

/// This brain's record of its running server groups.
#[derive(Debug)]
pub struct Groups {
    dir: PathBuf,
    /// `<pid>-<start time>-<pid namespace>` of this brain.
    name: String,
    /// This brain's pid namespace: pids and start times are its.
    ns: String,
    boot: String,
    /// Whether a failed write was told already (a busy server would say it every second).
    warned: AtomicBool,
    /// Group id → its record.
    live: Mutex<BTreeMap<u32, Live>>,
    /// Clock ticks per second, for the time of an answer.
    ticks_per_s: f64,
}

impl Groups {
    /// This brain's record in `dir` (made when a first server starts, so a brain without
    /// stdio servers leaves nothing). `None` where processes cannot be told apart (no
    /// /proc): nothing is recorded there.
    pub fn open(dir: &Path) -> Option<Groups> {
        let (Some(me), Some(ns), Some(boot), Some(ticks_per_s)) = (
            proc_stat(std::process::id()),
            pid_namespace(),
            boot_id(),
            ticks_per_s(),
        ) else {
            return None;
        };
        Some(Groups {
            dir: dir.to_owned(),
            name: format!("{}-{}-{ns}", me.pid, me.start),
            ns,
            boot,
            warned: AtomicBool::new(false),
            live: Mutex::new(BTreeMap::new()),
            ticks_per_s,
        })
    }

    /// Now, in clock ticks since boot.
    fn now(&self) -> Option<u64> {
        let up = std::fs::read_to_string("/proc/uptime").ok()?;
        let secs: f64 = up.split_whitespace().next()?.parse().ok()?;
        // Rounded up: a process started in this tick counts as started before now.
        Some((secs * self.ticks_per_s).ceil() as u64)
    }

    /// Records the group `pgid` (a server just spawned as its leader).
    pub fn record(&self, pgid: u32) {
        let (Some(leader), Some(now)) = (proc_stat(pgid), self.now()) else {
            return;
        };
        let mut live = self.live.lock();
        let record = Record {
            start: leader.start,
            seen: now,
        };
        live.insert(
            pgid,
            Live {
                record,
                answered: false,
            },
        );
        self.write(&live);
    }

    /// The server leading `pgid` answered: what its group holds now was started before
    /// brain died, should it die (written at its first answer, `npx` having started
    /// `node` by then, and after that at most every [`SEEN_EVERY`]).
    pub fn heard(&self, pgid: u32) {
        let Some(now) = self.now() else { return };
        let mut live = self.live.lock();
        let Some(l) = live.get_mut(&pgid) else { return };
        let fresh = (now.saturating_sub(l.record.seen) as f64)
            < SEEN_EVERY.as_secs_f64() * self.ticks_per_s;
        if l.answered && fresh {
            return;
        }
        l.answered = true;
        l.record.seen = now;
        self.write(&live);
    }

    /// The server leading `pgid` has not answered yet (a slow start: `npx` fetching its
    /// package before it runs `node`). Brain lives and has not reaped the leader, so the
    /// group is still its own, and what it holds now is the server's: the record's last
    /// time moves to now, as an answer would move it. Called every [`SEEN_EVERY`] by the
    /// link until it answers; answers whether to go on (not once it answered or the
    /// group was forgotten).
    pub fn starting(&self, pgid: u32) -> bool {
        let Some(now) = self.now() else { return false };
        let mut live = self.live.lock();
        let Some(l) = live.get_mut(&pgid) else {
            return false;
        };
        if l.answered {
            return false;
        }
        l.record.seen = now;
        self.write(&live);
        true
    }

    /// Forgets the group `pgid` (killed; it is forgotten before its leader is reaped, so
    /// a record never outlives the leader's hold on the group's id).
    pub fn forget(&self, pgid: u32) {
        let mut live = self.live.lock();
        if live.remove(&pgid).is_some() {
            self.write(&live);
        }
    }

    fn write(&self, live: &BTreeMap<u32, Live>) {
        let path = self.dir.join(&self.name);
        let result = if live.is_empty() {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            let mut text = format!("{}\n", self.boot);
            for (pgid, l) in live {
                text.push_str(&format!("{pgid} {} {}\n", l.record.start, l.record.seen));
            }
            let tmp = self.dir.join(format!("{}.tmp", self.name));
            make_private_dir(&self.dir)
                .and_then(|()| write_private(&tmp, text.as_bytes()))
                .and_then(|()| std::fs::rename(&tmp, &path))
        };
        if let Err(e) = result {
            // Only a SIGKILL of brain needs the record; brain itself still kills the group.
            if !self.warned.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "cannot record the MCP servers' processes in {}: {e}",
                    path.display()
                );
            }
        }
    }

    /// Kills the server groups recorded by brains that are gone, and removes their
    /// records. Answers how many groups were killed.
    pub fn reap_left_behind(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        if let Err(e) = check_private(&self.dir) {
            log::warn!(
                "not ending MCP servers a killed brain may have left running: {}: {e}",
                self.dir.display()
            );
            return 0;
        }
        let mut killed = 0;
        for entry in entries.flatten() {
            let file = entry.file_name();
            let Some(name) = file.to_str() else { continue };
            let owner = name.strip_suffix(".tmp").unwrap_or(name);
            let regular = entry.file_type().is_ok_and(|t| t.is_file());
            if !regular || owner == self.name || !owner_gone(owner, &self.ns) {
                continue;
            }
            // A temporary file is a record its brain died before renaming: the newest.
            let path = entry.path();
            match self.reap_file(&path) {
                Ok(n) => killed += n,
                Err(e) => {
                    // Kept: it may name groups still running, to be ended once readable.
                    log::warn!("cannot read {}: {e}", path.display());
                    continue;
                }
            }
            if let Err(e) = std::fs::remove_file(&path) {
                log::warn!("cannot remove {}: {e}", path.display());
            }
        }
        killed
    }

    /// Kills the groups one gone brain's file names, if they are still its own.
    fn reap_file(&self, path: &Path) -> std::io::Result<usize> {
        let mut text = String::new();
        open_regular(path)?
            .take(MAX_FILE_BYTES)
            .read_to_string(&mut text)?;
        let mut lines = text.lines();
        // Another boot: everything it ran ended with it.
        if lines.next() != Some(self.boot.as_str()) {
            return Ok(0);
        }
        let procs = all_procs();
        let mut killed = 0;
        for line in lines {
            let mut parts = line.split(' ').map(str::parse::<u64>);
            let (Some(Ok(pgid)), Some(Ok(start)), Some(Ok(seen)), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(pgid) = u32::try_from(pgid) else {
                continue;
            };
            if still_ours(&procs, pgid, Record { start, seen }) && kill_group(pgid) {
                log::info!(
                    "killed the processes of an MCP server a previous brain left running \
                     (group {pgid})"
                );
                killed += 1;
            }
        }
        Ok(killed)
    }
}

/// Whether the recorded group `pgid` is the one running now: its leader is the recorded
/// process, or is gone and every member started after it, one of them before the last
/// answer (see the module's notes).
fn still_ours(procs: &[Proc], pgid: u32, r: Record) -> bool {
    if let Some(leader) = procs.iter().find(|p| p.pid == pgid) {
        return leader.start == r.start;
    }
    let members: Vec<&Proc> = procs
        .iter()
        .filter(|p| p.pgrp == pgid && !p.exited)
        .collect();
    members.iter().all(|p| p.start >= r.start) && members.iter().any(|p| p.start <= r.seen)
}

/// Whether the brain a file is named after (`<pid>-<start time>-<pid namespace>`, or
/// `<pid>-<start time>` as brains before the namespace wrote it) is known to be gone. A
/// name that is not one, or one from another pid namespace, is left alone.
fn owner_gone(owner: &str, ns: &str) -> bool {
    let mut parts = owner.split('-');
    let (Some(pid), Some(start), theirs, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    if theirs.is_some_and(|t| t != ns) {
        return false;
    }
    !proc_stat(pid).is_some_and(|p| p.start == start && !p.exited)
}
