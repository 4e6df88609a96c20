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
//! last time brain heard from the server (every answer, at most once a second), all in
//! clock ticks since boot; a file names its brain by pid and start time, and the boot it
//! ran in. A reused pid is never taken for the one recorded: a group is killed only if its
//! leader is the recorded process, or is gone and the group still holds a process started
//! between the leader's start and the last answer. While brain lives the leader's pid
//! cannot be given again (brain has not reaped it), so a group that reuses it was made
//! after brain died, of processes all started after that: after the last answer. Files are
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
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// The most of a record file read: a few hundred servers' lines.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// How stale a group's last answer may get before an answer rewrites the file (in seconds,
/// as clock ticks are counted from `/proc/uptime`).
const SEEN_EVERY_S: f64 = 1.0;

/// One recorded group: its leader's start, and the last answer heard (clock ticks since
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
    /// `node` by then, and after that at most every [`SEEN_EVERY_S`]).
    pub fn heard(&self, pgid: u32) {
        let Some(now) = self.now() else { return };
        let mut live = self.live.lock();
        let Some(l) = live.get_mut(&pgid) else { return };
        let fresh = (now.saturating_sub(l.record.seen) as f64) < SEEN_EVERY_S * self.ticks_per_s;
        if l.answered && fresh {
            return;
        }
        l.answered = true;
        l.record.seen = now;
        self.write(&live);
    }

    /// Forgets the group `pgid` (killed and reaped).
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

/// This process's pid namespace (the inode `/proc/self/ns/pid` links to).
fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let id: String = link
        .to_str()?
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    (!id.is_empty()).then_some(id)
}

/// Makes `dir` (0700) unless it exists, then checks it is private.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    check_private(dir)
}

/// Whether `dir` is a directory of this user's (not a link) that no one else may write in.
fn check_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid(2) reads the process's credentials; no memory is touched.
    let me = unsafe { libc::geteuid() };
    let private = m.is_dir() && m.uid() == me && m.mode() & 0o022 == 0;
    if private {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a private directory (another user's, a link, or writable by others)",
        ))
    }
}

/// Writes `path` whole, 0600, never through a link.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?
        .write_all(bytes)
}

/// Opens `path` to read if it is a regular file: not through a link, and without waiting
/// on a FIFO.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if file.metadata()?.is_file() {
        Ok(file)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ))
    }
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

/// `sysconf(_SC_CLK_TCK)`: the unit of start times.
fn ticks_per_s() -> Option<f64> {
    // SAFETY: sysconf(3) reads a constant; no memory is touched.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (n > 0).then_some(n as f64)
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

#[cfg(all(test, target_os = "linux"))]
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
        let r = Record {
            start: 500,
            seen: 600,
        };
        // Its leader, the one recorded.
        assert!(still_ours(&[p(10, 10, 500), p(11, 10, 510)], 10, r));
        // Pid 10 is another process now.
        assert!(!still_ours(&[p(10, 10, 900), p(11, 10, 910)], 10, r));
        // The leader is gone; what is left of the group started after it, one before the
        // last answer (the others may be its own children, started later).
        assert!(still_ours(&[p(11, 10, 510), p(12, 10, 700)], 10, r));
        // A group that reused the id after brain died: all of it started after that.
        assert!(!still_ours(&[p(11, 10, 700), p(12, 10, 710)], 10, r));
        // A member older than the recorded leader: not the recorded group.
        assert!(!still_ours(&[p(11, 10, 400), p(12, 10, 510)], 10, r));
        // Nothing left.
        assert!(!still_ours(&[p(11, 12, 510)], 10, r));
    }

    #[test]
    fn names_that_are_not_a_brain_are_left_alone_and_a_gone_brain_is_gone() {
        let ns = pid_namespace().unwrap();
        assert!(!owner_gone("notes.txt", &ns));
        assert!(!owner_gone("x-y", &ns));
        assert!(!owner_gone("1-2-3-4", &ns));
        let me = proc_stat(std::process::id()).unwrap();
        assert!(!owner_gone(&format!("{}-{}-{ns}", me.pid, me.start), &ns));
        assert!(owner_gone(
            &format!("{}-{}-{ns}", me.pid, me.start + 1),
            &ns
        ));
        // Written before the namespace was named: read as this one's.
        assert!(owner_gone(&format!("{}-{}", me.pid, me.start + 1), &ns));
        // Another namespace's brain: its pid means nothing here.
        assert!(!owner_gone(&format!("999999999-1-{ns}0"), &ns));
    }

    /// A process in a group of its own, as a server runs.
    fn sleeper() -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("100")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn running(child: &mut std::process::Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    #[test]
    fn a_gone_brains_groups_are_killed_once_and_a_reused_pid_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut ours = sleeper();
        let mut stranger = sleeper();
        // A brain that is gone (no pid is that large) recorded both; the stranger's start
        // time is wrong, as if its pid had been given again.
        let gone = Groups {
            name: "999999999-1".into(),
            ..Groups::open(dir.path()).unwrap()
        };
        gone.record(ours.id());
        gone.heard(ours.id());
        gone.record(stranger.id());
        gone.live
            .lock()
            .get_mut(&stranger.id())
            .unwrap()
            .record
            .start += 1;
        let live = gone.live.lock().clone();
        gone.write(&live);

        let me = Groups::open(dir.path()).unwrap();
        assert_eq!(me.reap_left_behind(), 1);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while running(&mut ours) {
            assert!(std::time::Instant::now() < until, "not killed");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(running(&mut stranger), "a reused pid is left alone");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(me.reap_left_behind(), 0);
        let _ = stranger.kill();
        let _ = stranger.wait();
    }

    fn killed_within_10_s(child: &mut std::process::Child) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while running(child) {
            assert!(std::time::Instant::now() < until, "not killed");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A gone brain that recorded `child`, as `name`, in `dir`.
    fn gone_brain_recording(dir: &Path, name: &str, child: &std::process::Child) -> Groups {
        let gone = Groups {
            name: name.into(),
            ..Groups::open(dir).unwrap()
        };
        gone.record(child.id());
        gone.heard(child.id());
        gone
    }

    #[test]
    fn a_record_it_died_before_renaming_is_reaped_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut ours = sleeper();
        let gone = gone_brain_recording(dir.path(), "999999999-1", &ours);
        let file = dir.path().join("999999999-1");
        std::fs::rename(&file, dir.path().join("999999999-1.tmp")).unwrap();
        assert_eq!(Groups::open(dir.path()).unwrap().reap_left_behind(), 1);
        killed_within_10_s(&mut ours);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        drop(gone);
    }

    #[test]
    fn a_directory_others_can_write_in_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut planted = sleeper();
        gone_brain_recording(dir.path(), "999999999-1", &planted);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let me = Groups::open(dir.path()).unwrap();
        assert_eq!(
            me.reap_left_behind(),
            0,
            "a record anyone could have written"
        );
        assert!(running(&mut planted));
        assert!(dir.path().join("999999999-1").exists(), "left where it is");
        // Nor does it write there.
        let mut server = sleeper();
        me.record(server.id());
        assert!(!dir.path().join(&me.name).exists());
        assert!(me.warned.load(Ordering::Relaxed), "told once");
        for c in [&mut planted, &mut server] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn a_link_or_a_fifo_in_the_directory_is_never_followed_or_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let me = Groups::open(dir.path()).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(format!("{}.tmp", me.name))).unwrap();
        let mut server = sleeper();
        me.record(server.id());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        assert!(!dir.path().join(&me.name).exists());
        // A FIFO named as a gone brain's record: a blocking open would hang the start.
        let fifo = dir.path().join("999999999-1");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) reads the NUL-terminated path it is given.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (done, wait) = std::sync::mpsc::channel();
        let at = dir.path().to_owned();
        std::thread::spawn(move || {
            let _ = done.send(Groups::open(&at).map(|g| g.reap_left_behind()));
        });
        let reaped = wait.recv_timeout(std::time::Duration::from_secs(10));
        assert!(matches!(reaped, Ok(Some(0))), "{reaped:?}");
        let _ = server.kill();
        let _ = server.wait();
    }

    #[test]
    fn another_pid_namespaces_records_are_left_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut theirs = sleeper();
        let ns = pid_namespace().unwrap();
        let name = format!("999999999-1-{ns}7");
        gone_brain_recording(dir.path(), &name, &theirs);
        assert_eq!(Groups::open(dir.path()).unwrap().reap_left_behind(), 0);
        assert!(running(&mut theirs));
        assert!(dir.path().join(&name).exists());
        let _ = theirs.kill();
        let _ = theirs.wait();
    }
}
