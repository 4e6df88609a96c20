//! Appends: seqs 1, 2, 3… per session under threads (I1), nothing else written on failure.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use brain::session::StoreError;
use brain::session::events::{Payload, PendingState, TitledBy};
use brain::session::store::AttemptMark;

use super::{Db, log, new_session, seqs};
use crate::support::{assert_gapless, user};

const THREADS: usize = 8;
const APPENDS_PER_THREAD: usize = 25;

conformance!(
    eight_threads_appending_to_one_session_get_gapless_unique_seqs,
    eight_threads_appending_to_eight_sessions_get_gapless_seqs_each,
    appending_to_an_unknown_session_is_not_found_and_writes_nothing,
    a_failed_write_closure_rolls_back_everything_it_appended,
    session_started_is_written_only_at_creation,
    a_read_then_write_sees_no_other_write_in_between,
    an_attempts_append_is_refused_once_another_attempt_wrote_after_its_last,
    an_attempts_append_to_a_session_imported_again_shorter_is_refused,
);

fn eight_threads_appending_to_one_session_get_gapless_unique_seqs(db: &Db) {
    let store = Arc::new(db.open());
    let id = new_session(&store);
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                for i in 0..APPENDS_PER_THREAD {
                    store.append(id, &user(&format!("{t}-{i}"))).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let events = log(&store, id);
    assert_gapless(&seqs(&events));
    assert_eq!(events.len(), 1 + THREADS * APPENDS_PER_THREAD);
    let texts: BTreeSet<&str> = events.iter().skip(1).map(|e| e.payload.as_str()).collect();
    assert_eq!(
        texts.len(),
        THREADS * APPENDS_PER_THREAD,
        "every append once"
    );
}

fn eight_threads_appending_to_eight_sessions_get_gapless_seqs_each(db: &Db) {
    let store = Arc::new(db.open());
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                let id = new_session(&store);
                start.wait();
                for i in 0..APPENDS_PER_THREAD {
                    store.append(id, &user(&format!("{t}-{i}"))).unwrap();
                }
                id
            })
        })
        .collect();
    for t in threads {
        let id = t.join().unwrap();
        let events = log(&store, id);
        assert_gapless(&seqs(&events));
        assert_eq!(events.len(), 1 + APPENDS_PER_THREAD);
    }
}

fn appending_to_an_unknown_session_is_not_found_and_writes_nothing(db: &Db) {
    let store = db.open();
    let ghost = brain::session::SessionId::generate();
    let e = store.append(ghost, &user("hi")).unwrap_err();
    assert!(
        matches!(e, StoreError::SessionNotFound(id) if id == ghost),
        "{e}"
    );
    assert!(!store.write(|w| w.exists(ghost)).unwrap());
}

fn a_failed_write_closure_rolls_back_everything_it_appended(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let e = store
        .write(|w| {
            w.append(id, &user("one"))?;
            w.append(id, &user("two"))?;
            Err::<(), _>(StoreError::Refused("changed my mind"))
        })
        .unwrap_err();
    assert!(matches!(e, StoreError::Refused(_)), "{e}");
    assert_eq!(seqs(&log(&store, id)), vec![1]);
    // The next append takes the seq the rolled-back ones did not keep.
    assert_eq!(store.append(id, &user("three")).unwrap().seq, 2);
}

fn session_started_is_written_only_at_creation(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let started = log(&store, id)[0].decode();
    let brain::session::Decoded::Known(payload) = started else {
        panic!("session_started unreadable");
    };
    let e = store.append(id, &payload).unwrap_err();
    assert!(matches!(e, StoreError::Refused(_)), "{e}");
    assert_eq!(seqs(&log(&store, id)), vec![1]);
}

/// What compaction's compare-and-append and the edit check rely on: inside one write, what
/// was read about a session still holds when the write appends to it.
fn a_read_then_write_sees_no_other_write_in_between(db: &Db) {
    let store = Arc::new(db.open());
    let id = new_session(&store);
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..APPENDS_PER_THREAD {
                    store
                        .write(|w| {
                            let last = w.last_seq(id)?;
                            w.append(id, &user(&format!("after {last}")))
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for e in log(&store, id).iter().skip(1) {
        assert_eq!(e.payload, user(&format!("after {}", e.seq - 1)).to_json());
    }
}

/// How long a test waits for something that should happen at once.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// PostgreSQL only (SPEC §16): a write holds its own session's row, not the database, so
/// an append to another session commits while it is still open. (SQLite has one writer.)
#[test]
fn postgres_appends_to_different_sessions_never_wait_for_each_other() {
    let name = "postgres_appends_to_different_sessions_never_wait_for_each_other";
    let Some(db) = Db::postgres(name) else {
        return;
    };
    let store = Arc::new(db.open());
    let (a, b) = (new_session(&store), new_session(&store));
    let (held, is_held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.write(|w| {
                w.append(a, &user("holding a"))?;
                let _ = held.send(());
                let _ = released.recv_timeout(DEADLINE);
                Ok(())
            })
        })
    };
    is_held.recv_timeout(DEADLINE).expect("a's write is open");
    let (done, is_done) = std::sync::mpsc::channel();
    {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            let _ = done.send(store.append(b, &user("b goes on")).map(|e| e.seq));
        });
    }
    let appended = is_done.recv_timeout(DEADLINE);
    let _ = release.send(());
    holder.join().unwrap().unwrap();
    assert_eq!(
        appended
            .expect("b's append finished while a's write was open")
            .unwrap(),
        2
    );
    assert_eq!(seqs(&log(&store, a)), vec![1, 2]);
}

/// I7 across servers in the write itself (issue 27): an attempt's append carries its own
/// last seq and is refused, writing nothing, once another attempt's event follows it; a
/// title written meanwhile (another turn's title job, a rename) leaves it its session.
fn an_attempts_append_is_refused_once_another_attempt_wrote_after_its_last(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let turn = store.append(id, &user("mine")).unwrap().seq;
    let checkpoint = |text: &str| {
        Payload::PendingState(PendingState {
            turn,
            attempt: 1,
            text: text.into(),
            reasoning: None,
            ended: None,
            step: None,
        })
    };
    let mark = AttemptMark {
        turn,
        attempt: 1,
        after: turn,
    };
    store.rename(id, "a title".into(), TitledBy::Auto).unwrap();
    let mine = store
        .write(|w| w.append_for(&mark, id, &checkpoint("one")))
        .expect("a title is not another attempt");
    let mark = AttemptMark {
        after: mine.seq,
        ..mark
    };
    let theirs = store
        .append(id, &user("another server's turn"))
        .unwrap()
        .seq;
    let e = store
        .write(|w| w.append_for(&mark, id, &checkpoint("two")))
        .unwrap_err();
    assert!(
        matches!(e, StoreError::Superseded { seq, .. } if seq == theirs),
        "{e:?}"
    );
    assert_eq!(
        log(&store, id).last().unwrap().seq,
        theirs,
        "nothing written"
    );
}

/// Review of issue 28: the session an attempt wrote to was deleted and imported again under
/// the same id, shorter (another server's `import`): nothing follows the attempt's last
/// write, yet the log is not the one it wrote to. Its append is refused, not landed.
fn an_attempts_append_to_a_session_imported_again_shorter_is_refused(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let short = log(&store, id);
    store.append(id, &user("one")).unwrap();
    let turn = store.append(id, &user("mine")).unwrap().seq;
    let mark = AttemptMark {
        turn,
        attempt: 1,
        after: turn,
    };
    store.delete_session(id).unwrap();
    store.write(|w| w.import_session(id, &short)).unwrap();
    let checkpoint = Payload::PendingState(PendingState {
        turn,
        attempt: 1,
        text: "late".into(),
        reasoning: None,
        ended: None,
        step: None,
    });
    let e = store
        .write(|w| w.append_for(&mark, id, &checkpoint))
        .unwrap_err();
    assert!(matches!(e, StoreError::Superseded { .. }), "{e:?}");
    assert_eq!(log(&store, id), short, "nothing written");
}
