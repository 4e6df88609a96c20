//! The record and the reaping, against real processes (Linux).
use super::procs::*;
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
    killed_within_10_s(&mut ours);
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

/// Waits until the clock has ticked past `tick`, so what starts next starts after it.
fn past_tick(g: &Groups, tick: u64) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while g.now().unwrap() <= tick + 1 {
        assert!(std::time::Instant::now() < until, "the clock does not tick");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A server leader (recorded, not answering yet) and a process that joins its group later,
/// as `npx` starts `node` once its package is fetched; then the leader dies with brain.
/// Answers the late member and the gone brain's record.
fn late_member_of_a_dying_leader(dir: &Path, vouched: bool) -> (std::process::Child, Groups) {
    use std::os::unix::process::CommandExt;
    let mut leader = sleeper();
    let gone = Groups {
        name: "999999999-1".into(),
        ..Groups::open(dir).unwrap()
    };
    gone.record(leader.id());
    let recorded = gone.live.lock()[&leader.id()].record;
    past_tick(&gone, recorded.seen);
    let late = std::process::Command::new("sleep")
        .arg("100")
        .process_group(i32::try_from(leader.id()).unwrap())
        .spawn()
        .unwrap();
    let late_start = proc_stat(late.id()).unwrap().start;
    assert!(late_start > recorded.seen, "started after the record");
    if vouched {
        past_tick(&gone, late_start);
        assert!(gone.starting(leader.id()), "not answered yet: go on");
    }
    leader.kill().unwrap();
    leader.wait().unwrap();
    (late, gone)
}

#[test]
fn what_a_server_slow_to_start_started_late_is_reaped_once_it_was_vouched_for() {
    // Unvouched, the late member may be a stranger who took the id: left alone.
    let dir = tempfile::tempdir().unwrap();
    let (mut late, _gone) = late_member_of_a_dying_leader(dir.path(), false);
    assert_eq!(Groups::open(dir.path()).unwrap().reap_left_behind(), 0);
    assert!(running(&mut late));
    let _ = late.kill();
    let _ = late.wait();
    // Vouched for while brain lived: it is the server's.
    let dir = tempfile::tempdir().unwrap();
    let (mut late, _gone) = late_member_of_a_dying_leader(dir.path(), true);
    assert_eq!(Groups::open(dir.path()).unwrap().reap_left_behind(), 1);
    killed_within_10_s(&mut late);
}

#[test]
fn vouching_ends_at_the_first_answer_and_when_the_group_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let me = Groups::open(dir.path()).unwrap();
    let mut a = sleeper();
    let mut b = sleeper();
    me.record(a.id());
    me.record(b.id());
    assert!(me.starting(a.id()) && me.starting(b.id()));
    me.heard(a.id());
    assert!(!me.starting(a.id()), "answered");
    me.forget(b.id());
    assert!(!me.starting(b.id()), "forgotten");
    assert!(!me.starting(1), "never recorded");
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
