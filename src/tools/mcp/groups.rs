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
//! A record names a group by its id *and* its leader's start time (`/proc/PID/stat`), and
//! a file names its brain the same way and the boot it ran in, so a reused pid is never
//! taken for the one recorded: a group is killed only if its leader is the recorded one, or
//! gone with every member started after it (a pid that is any group's id is not given to a
//! new process, so a group whose leader is gone is the original). Files are written whole
//! (a temporary file renamed over the old one); a SIGKILL leaves the page cache to the
//! next start, so they need no fsync. Linux only (it reads /proc); elsewhere nothing is
//! recorded.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// The most of a record file read: a few hundred servers' lines.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// This brain's record of its running server groups.
#[derive(Debug)]
pub struct Groups {
    dir: PathBuf,
    /// `<pid>-<start time>` of this brain.
    name: String,
    boot: String,
    /// Group id → its leader's start time.
    live: Mutex<BTreeMap<u32, u64>>,
}

/// A process as `/proc/PID/stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Proc {
    pid: u32,
    pgrp: u32,
    start: u64,
    /// A zombie or dead process runs nothing (its parent has not reaped it yet).
    exited: bool,
}

impl Groups {
    /// This brain's record in `dir` (made when a first server starts, so a brain without
    /// stdio servers leaves nothing). `None` where processes cannot be told apart (no
    /// /proc): nothing is recorded there.
    pub fn open(dir: &Path) -> Option<Groups> {
        let (Some(me), Some(boot)) = (proc_stat(std::process::id()), boot_id()) else {
            return None;
        };
        Some(Groups {
            dir: dir.to_owned(),
            name: format!("{}-{}", me.pid, me.start),
            boot,
            live: Mutex::new(BTreeMap::new()),
        })
    }

    /// Records the group `pgid` (a server just spawned as its leader).
    pub fn record(&self, pgid: u32) {
        let Some(leader) = proc_stat(pgid) else {
            return;
        };
        let mut live = self.live.lock();
        live.insert(pgid, leader.start);
        self.write(&live);
    }

    /// Forgets the group `pgid` (killed and reaped).
    pub fn forget(&self, pgid: u32) {
        let mut live = self.live.lock();
        if live.remove(&pgid).is_some() {
            self.write(&live);
        }
    }

    fn write(&self, live: &BTreeMap<u32, u64>) {
        let path = self.dir.join(&self.name);
        let result = if live.is_empty() {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            let mut text = format!("{}\n", self.boot);
            for (pgid, start) in live {
                text.push_str(&format!("{pgid} {start}\n"));
            }
            let tmp = self.dir.join(format!("{}.tmp", self.name));
            std::fs::create_dir_all(&self.dir)
                .and_then(|()| std::fs::write(&tmp, text))
                .and_then(|()| std::fs::rename(&tmp, &path))
        };
        if let Err(e) = result {
            // Only a SIGKILL of brain needs the record; brain itself still kills the group.
            log::warn!(
                "cannot record the MCP servers' processes in {}: {e}",
                path.display()
            );
        }
    }

    /// Kills the server groups recorded by brains that are gone, and removes their
    /// records. Answers how many groups were killed.
    pub fn reap_left_behind(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut killed = 0;
        for entry in entries.flatten() {
            let file = entry.file_name();
            let Some(name) = file.to_str() else { continue };
            let owner = name.strip_suffix(".tmp").unwrap_or(name);
            if owner == self.name || owner_alive(owner) {
                continue;
            }
            let path = entry.path();
            if !name.ends_with(".tmp") {
                killed += self.reap_file(&path);
            }
            if let Err(e) = std::fs::remove_file(&path) {
                log::warn!("cannot remove {}: {e}", path.display());
            }
        }
        killed
    }

    /// Kills the groups one gone brain's file names, if they are still its own.
    fn reap_file(&self, path: &Path) -> usize {
        let mut text = String::new();
        let read = std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE_BYTES).read_to_string(&mut text));
        if read.is_err() {
            return 0;
        }
        let mut lines = text.lines();
        // Another boot: everything it ran ended with it.
        if lines.next() != Some(self.boot.as_str()) {
            return 0;
        }
        let procs = all_procs();
        let mut killed = 0;
        for line in lines {
            let mut parts = line.split(' ').map(str::parse::<u64>);
            let (Some(Ok(pgid)), Some(Ok(start)), None) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(pgid) = u32::try_from(pgid) else {
                continue;
            };
            if still_ours(&procs, pgid, start) && kill_group(pgid) {
                log::info!(
                    "killed the processes of an MCP server a previous brain left running \
                     (group {pgid})"
                );
                killed += 1;
            }
        }
        killed
    }
}

/// Whether the recorded group `pgid`, whose leader started at `start`, is the one running
/// now: its leader is that process, or gone with every member started after it.
fn still_ours(procs: &[Proc], pgid: u32, start: u64) -> bool {
    if let Some(leader) = procs.iter().find(|p| p.pid == pgid) {
        return leader.start == start;
    }
    let members: Vec<&Proc> = procs
        .iter()
        .filter(|p| p.pgrp == pgid && !p.exited)
        .collect();
    !members.is_empty() && members.iter().all(|p| p.start >= start)
}

/// Whether the brain a file is named after (`<pid>-<start time>`) still runs. A name that
/// is not one is left alone.
fn owner_alive(owner: &str) -> bool {
    let Some((pid, start)) = owner.split_once('-') else {
        return true;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return true;
    };
    proc_stat(pid).is_some_and(|p| p.start == start && !p.exited)
}

#[cfg(not(unix))]
fn kill_group(_pgid: u32) -> bool {
    false
}

#[cfg(unix)]
fn kill_group(pgid: u32) -> bool {
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

/// This boot's id: start times count from the boot.
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|s| !s.is_empty())
}

fn proc_stat(pid: u32) -> Option<Proc> {
    parse_stat(
        pid,
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// `/proc/PID/stat`: the name in parentheses may hold anything, so fields count from the
/// last `)`: state (3rd), pgrp (5th), starttime (22nd).
fn parse_stat(pid: u32, text: &str) -> Option<Proc> {
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

fn all_procs() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let line = "4242 (a) b (c)) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100";
        assert_eq!(
            parse_stat(4242, line),
            Some(Proc {
                pid: 4242,
                pgrp: 4240,
                start: 987654,
                exited: false
            })
        );
        assert!(parse_stat(1, "1 (init) Z 0 1 1").is_none(), "too short");
        let zombie = line.replacen(") S", ") Z", 1);
        assert!(parse_stat(4242, &zombie).unwrap().exited);
    }

    fn p(pid: u32, pgrp: u32, start: u64) -> Proc {
        Proc {
            pid,
            pgrp,
            start,
            exited: false,
        }
    }

    #[test]
    fn a_group_is_ours_only_if_its_leader_or_its_members_say_so() {
        // Its leader, the one recorded.
        assert!(still_ours(&[p(10, 10, 500), p(11, 10, 510)], 10, 500));
        // Pid 10 is another process now.
        assert!(!still_ours(&[p(10, 10, 900), p(11, 10, 910)], 10, 500));
        // The leader is gone; what is left of the group started after it.
        assert!(still_ours(&[p(11, 10, 510)], 10, 500));
        // A member older than the recorded leader: not the recorded group.
        assert!(!still_ours(&[p(11, 10, 400)], 10, 500));
        // Nothing left.
        assert!(!still_ours(&[p(11, 12, 510)], 10, 500));
    }

    #[test]
    fn names_that_are_not_a_brain_are_left_alone_and_a_gone_brain_is_gone() {
        assert!(owner_alive("notes.txt"));
        assert!(owner_alive("x-y"));
        let me = proc_stat(std::process::id()).unwrap();
        assert!(owner_alive(&format!("{}-{}", me.pid, me.start)));
        assert!(!owner_alive(&format!("{}-{}", me.pid, me.start + 1)));
    }
}
